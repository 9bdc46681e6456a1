//! packet's integration tests, one test executable: each file beside
//! this one is a module of it (one link instead of one per file; `cargo test
//! -p roce-tests --test packet NAME::` runs one file's tests).

// The executable is roce-tests' (`[[test]] packet` in tests/Cargo.toml: built at
// opt-level 0 while roce-packet itself is built at 1), so CARGO_MANIFEST_DIR is
// tests/: the files find this crate's directory here.
const CRATE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../packet");

mod golden;
mod headers;
mod icrc_known;
mod mad;
mod opcode_table;
mod props;
mod psn;
