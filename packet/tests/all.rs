//! packet's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-packet --test all NAME::` runs one file's tests).

mod golden;
mod headers;
mod icrc_known;
mod mad;
mod opcode_table;
mod props;
mod psn;
