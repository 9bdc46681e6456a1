//! conform's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-conform --test all NAME::` runs one file's tests).

mod emu;
mod mutants;
mod remote;
