//! What the soak tests share: the faults they inject and the summary of a
//! run a failure prints.
#![allow(dead_code)] // (each test executable uses its own part)

use roce_verbs_api::FaultConfig;
use roce_workloads::demo::Report;

/// Loss, duplication, reordering and corruption with these probabilities,
/// no other fault.
pub fn faults(drop: f64, duplicate: f64, reorder: f64, corrupt: f64) -> FaultConfig {
    FaultConfig { drop, duplicate, reorder, corrupt, ..FaultConfig::default() }
}

/// Everything a failed run's message needs: the seed and how to replay it,
/// what completed and what went wrong, per QP pair and per transport, the
/// fabric's, the ICRC audit's and the devices' counters (the non-zero
/// ones), the times.
pub fn summary(r: &Report) -> String {
    format!(
        "seed {} (replay with ROCE_SIM_SEED={})\nok {} completed {}/{} mismatches {} order errors {} \
         stalled {:?}\npairs {:?}\ndelivery {:?}\ncompletions {:?}\nproblems {:#?}\nfabric {:?}\n\
         audit {:?}\ncounters {:#?}\nvirtual {:?} wall {:?} events {}",
        r.seed,
        r.seed,
        r.ok(),
        r.ops_completed,
        r.ops_requested,
        r.mismatches,
        r.order_errors,
        r.stalled,
        r.pairs,
        r.delivery,
        r.completions.values().collect::<Vec<_>>(),
        r.problems,
        r.fabric,
        r.icrc_audit,
        r.counters
            .iter()
            .map(|(n, c)| (n, c.iter().filter(|(_, v)| *v != 0).collect::<Vec<_>>()))
            .collect::<Vec<_>>(),
        r.virtual_time,
        r.wall_time,
        r.events
    )
}
