//! Workspace-level tests and the tools they share.
//!
//! * `tests/sim_soak.rs`, `tests/sim_mixed_soak.rs`: the deterministic soak
//!   of the simulated fabric.
//! * `tests/layering.rs`: the workspace's structure (crate layers, module
//!   circles, crate and function sizes), from [`layering`]; the same
//!   analysis prints a crate's module graph with
//!   `cargo run -p roce-tests --bin module-cycles -- --graph emulator/src`.

pub mod layering;
