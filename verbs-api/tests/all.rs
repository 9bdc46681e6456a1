//! verbs-api's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-verbs-api --test all NAME::` runs one file's tests).
//!
//! Kept as executables of their own (process-wide state): `sim_env_pcap.rs`.

mod common;

mod core_findings;
mod docs;
mod mw_verbs;
mod srq_ud;
mod uc_loss_sim;
mod verbs;
