//! libibverbs's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-tests --test libibverbs NAME::` runs one file's tests).
//!
//! Kept as an executable of its own: `shared_device.rs` (many processes
//! at once; `cargo test -p roce-tests --test libibverbs_shared_device`).

// The executable is roce-tests' (`[[test]] libibverbs` in tests/Cargo.toml: built at
// opt-level 0 while roce-libibverbs itself is built at 1), so CARGO_MANIFEST_DIR is
// tests/: the files find this crate's directory here.
const CRATE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../libibverbs");

#[path = "../src/abi.rs"]
mod abi;
mod common;

mod dropin;
mod forks;
mod hostile_peer;
mod misuse;
mod rdmacm;
mod rsocket;
mod semantics;
mod sq_flow;
mod stale_handles;
