//! examples's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-examples --test all NAME::` runs one file's tests).

mod common;
#[path = "../../transport/tests/common/netns.rs"]
mod netns;

mod one_sided;
mod pingpong;
mod pingpong_raw;
mod rping;
mod srq_exchange;
