//! cli's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-cli --test all NAME::` runs one file's tests).
//!
//! Kept as executables of their own (process-wide state): `observe.rs`.

mod support;

mod course;
mod decode;
mod decode_arbitrary;
mod demo_docs;
mod demo_sweep;
mod install;
mod ladder;
mod perf;
mod perf_remote;
mod run;
