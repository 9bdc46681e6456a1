//! host's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-tests --test host NAME::` runs one file's tests).

// The executable is roce-tests' (`[[test]] host` in tests/Cargo.toml: built at
// opt-level 0 while roce-host itself is built at 1), so CARGO_MANIFEST_DIR is
// tests/: the files find this crate's directory here.
const CRATE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../host");

#[path = "../../verbs-api/tests/common/mod.rs"]
mod common;

mod ah_from_wc;
mod async_fd;
mod events;
mod faults_udp;
mod polled;
mod private_runtime;
mod rdma_cm;
mod shared_device;
mod udp_devices;
