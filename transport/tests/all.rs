//! transport's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-transport --test all NAME::` runs one file's tests).

mod common;

mod ceiling;
mod engine;
mod hca_over_udp;
mod node_thread;
mod raw_netns;
mod rxe_frames;
mod udp_loopback;
mod wire_capture;
