//! host's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-host --test all NAME::` runs one file's tests).

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
