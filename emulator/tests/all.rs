//! emulator's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-tests --test emulator NAME::` runs one file's tests).
//!
//! Kept as executables of their own (process-wide state): `memory_bounds.rs`.

// The executable is roce-tests' (`[[test]] emulator` in tests/Cargo.toml: built at
// opt-level 0 while roce-emulator itself is built at 1), so CARGO_MANIFEST_DIR is
// tests/: the files find this crate's directory here.
const CRATE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../emulator");

#[path = "common/trace.rs"]
mod trace;

mod atomic_write_flush;
mod cm;
mod congestion;
mod destroy_acks;
mod errors;
mod events;
mod fuzz_structured;
mod golden;
mod gsi;
mod hostile_peer;
mod loss;
mod modify_qp;
mod multi_qp;
mod mw;
mod no_clock;
mod op_counters;
mod paced_sender;
mod rdma;
mod recovery;
mod region_bodies;
mod send_recv;
mod sq_accounting;
mod srq;
mod trace_events;
mod trace_style;
mod tracing_events;
mod uc;
mod uc_loss;
mod ud;
