//! Traffic engines built on the verbs API — library code that the `roce`
//! command line and the test suites call, kept out of the API crate (which
//! holds only the API) and out of `cli/` (a thin front):
//!
//! * `demo` (feature `demo`, the one part on the simulator): the deterministic, verified operation mix behind `roce
//!   demo` and the soaks (`tests/tests/sim_soak.rs`, `scripts/soak.sh`):
//!   two emulated HCAs on the simulated fabric, RC/UC/UD QP pairs, every
//!   byte and every atomic result checked, faults injected and accounted.
//! * [`perf`]: the engine of `roce perf` — one bandwidth loop, one
//!   latency loop and one completion poll, driven in one process (two UDP
//!   devices, QP pairs, the raw-UDP references) and across processes (one
//!   side of a perftest run);
//! * [`perftest`]: perftest's out-of-band TCP exchange (versions,
//!   destinations, reports), so `roce perf` can face `ib_write_bw` & co.;
//! * [`pattern`]: the byte pattern every data check of `roce perf` and of
//!   the `roce demo` lessons uses;
//! * [`progress`]: the one-line progress report on a terminal that long
//!   runs print.

#[cfg(feature = "demo")]
pub mod demo;
pub mod pattern;
pub mod perf;
pub mod perftest;
pub mod progress;
