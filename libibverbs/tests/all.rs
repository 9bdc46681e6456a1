//! libibverbs's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-libibverbs --test all NAME::` runs one file's tests).

#[path = "../src/abi.rs"]
mod abi;
mod common;

mod dropin;
mod forks;
mod hostile_peer;
mod misuse;
mod rdmacm;
mod semantics;
mod shared_device;
mod sq_flow;
mod stale_handles;
