//! Workspace-level integration tests live in `tests/` (see `sim_soak.rs`);
//! this library is empty.
