//! rsocket's integration tests, one test executable: each file beside
//! this one is a module of it (`cargo test -p roce-rsocket --test all
//! NAME::` runs one file's tests).

mod common;

mod dgram;
mod explain;
mod iomap;
mod malformed;
mod rxe_capture;
mod stream;
mod wire;
