//! Traffic engines built on the verbs API — library code that the `roce`
//! command line and the test suites call, kept out of the API crate (which
//! holds only the API) and out of `cli/` (a thin front):
//!
//! * [`demo`]: the deterministic, verified operation mix behind `roce
//!   demo` and the soaks (`tests/tests/sim_soak.rs`, `scripts/soak.sh`):
//!   two emulated HCAs on the simulated fabric, RC/UC/UD QP pairs, every
//!   byte and every atomic result checked, faults injected and accounted.
//! * [`perf`]: the engine of `roce perf` — two UDP devices in one
//!   process, QP pairs, the bandwidth loop, the ping-pong loops and the
//!   raw-UDP ping-pong reference;
//! * [`perftest`]: perftest's out-of-band TCP exchange (versions,
//!   destinations, reports), so `roce perf` can face `ib_write_bw` & co.;
//! * [`progress`]: the one-line progress report on a terminal that long
//!   runs print.

pub mod demo;
pub mod perf;
pub mod perftest;
pub mod progress;
