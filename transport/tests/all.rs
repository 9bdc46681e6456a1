//! transport's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-tests --test transport NAME::` runs one file's tests).

// The executable is roce-tests' (`[[test]] transport` in tests/Cargo.toml: built at
// opt-level 0 while roce-transport itself is built at 1), so CARGO_MANIFEST_DIR is
// tests/: the files find this crate's directory here.
const CRATE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../transport");

mod common;

mod ceiling;
mod engine;
mod hca_over_udp;
mod node_thread;
mod raw_netns;
mod rxe_frames;
mod udp_loopback;
mod wire_capture;
