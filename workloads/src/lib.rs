//! Traffic engines built on the verbs API — library code that the `roce`
//! command line and the test suites call, kept out of the API crate (which
//! holds only the API) and out of `cli/` (a thin front):
//!
//! * [`demo`]: the deterministic, verified operation mix behind `roce
//!   demo` and the soaks (`tests/tests/sim_soak.rs`, `scripts/soak.sh`):
//!   two emulated HCAs on the simulated fabric, RC/UC/UD QP pairs, every
//!   byte and every atomic result checked, faults injected and accounted.

pub mod demo;
