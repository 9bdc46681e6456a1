//! tests's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-tests --test all NAME::` runs one file's tests).

mod common;

mod layering;
mod sim_mixed_soak;
mod sim_soak;
