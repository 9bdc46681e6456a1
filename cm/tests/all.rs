//! cm's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-cm --test all NAME::` runs one file's tests).

mod common;

mod connection;
mod failures;
mod rping;
mod sidr;
