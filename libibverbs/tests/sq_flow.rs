//! Send-queue flow control through the C ABI (issue 26, finding 6):
//! `tests/c/sq_flow.c` posts 128 SENDs on an RC QP with max_send_wr 64 and
//! a send CQ of 256 without polling, and must get exactly 64 accepted then
//! ENOMEM, still ENOMEM once all 64 have completed unpolled, and then one
//! more post per polled completion until all 128 are done: no CQ error,
//! QPs still RTS, every completion IBV_WC_SUCCESS, the bytes received
//! right. Once with `ibv_poll_cq`, once with an extended CQ
//! (`ibv_start_poll`/`ibv_next_poll`), whose batch must not free slots
//! ahead of the program's reads. As mlx5 frees send-queue slots.
//!
//! Needs cc and libibverbs-dev (else SKIPPED). Device roce0 on 127.0.103.2.

use crate::common;
use std::path::PathBuf;

fn lib_dir() -> PathBuf {
    common::drop_in_dir("sq-flow-test-lib", &["libibverbs.so.1"])
}

/// sq_flow.c compiled against the drop-in, once for the tests of this
/// executable, or None (SKIPPED).
fn sq_flow() -> Option<PathBuf> {
    common::compile_verbs_c_once("sq_flow", &lib_dir())
}

fn run(mode: &[&str]) -> String {
    let Some(exe) = sq_flow() else { return String::new() };
    let out = common::run_within(
        common::drop_in_cmd(&exe, &lib_dir(), "roce0=udp:127.0.103.2", mode),
        std::time::Duration::from_secs(60),
    );
    let s = common::passed_all(&out, &format!("sq_flow {mode:?}"));
    s
}

/// The checks every run must have passed (a line "ok   ..." each).
const CASES: [&str; 9] = [
    "without polling (max_send_wr 64): 64 accepted, then Cannot allocate memory",
    "the 64 accepted SENDs arrived: 64 receive completions",
    "completed but unpolled send completions hold their slots: Cannot allocate memory",
    "while posting on: ENOMEM exactly when 64 are unpolled (0 off, 0 bad posts)",
    "128 of 128 send completions, all IBV_WC_SUCCESS IBV_WC_SEND in order (0 bad)",
    "no CQ error",
    "128 receive completions, all IBV_WC_SUCCESS",
    "the 128 receive buffers hold the bytes sent",
    "the sender is still RTS",
];

fn has(s: &str, case: &str) -> bool {
    common::has_ok(s, case)
}

#[test]
fn post_send_enomem_paces_a_program_that_polls_late() {
    let s = run(&[]);
    if s.is_empty() {
        return;
    }
    for case in CASES {
        assert!(has(&s, case), "{case}\n{s}");
    }
    assert!(has(&s, "the first polled completion lets exactly one more post in"), "{s}");
    assert!(has(&s, "cap.max_send_wr still 64"), "{s}");
}

#[test]
fn extended_cq_frees_a_slot_per_completion_read() {
    let s = run(&["ex"]);
    if s.is_empty() {
        return;
    }
    for case in CASES {
        assert!(has(&s, case), "{case}\n{s}");
    }
    assert!(has(&s, "ibv_start_poll's completion frees one slot"), "{s}");
}
