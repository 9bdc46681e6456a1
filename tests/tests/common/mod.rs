//! What the soak tests share: the faults they inject (the summary of a run
//! a failure prints is `Report::failure_summary`).
#![allow(dead_code)] // (each test executable uses its own part)

use roce_sim::FaultConfig;

/// Loss, duplication, reordering and corruption with these probabilities,
/// no other fault.
pub fn faults(drop: f64, duplicate: f64, reorder: f64, corrupt: f64) -> FaultConfig {
    FaultConfig { drop, duplicate, reorder, corrupt, ..FaultConfig::default() }
}
