//! Stale handles and concurrent destroys (issue 26, findings 4 and 7):
//! `tests/c/stale.c` destroys every kind of verbs object twice, calls
//! verbs on destroyed objects and on the objects of a closed context
//! (EINVAL, NULL with errno EINVAL for the calls that return a pointer),
//! destroys objects others depend on (EBUSY, as rdma-core with rxe, and
//! the object still works after), and races ibv_get_cq_event and
//! ibv_ack_cq_events against ibv_destroy_cq (a destroyed CQ is never handed
//! out; ibv_destroy_cq waits for the acknowledgement of the events it
//! delivered), and destroys QPs while another thread polls their CQ (every
//! completion it takes is whole, none twice: the CQ's ring and the QPs'
//! send and receive rings survive it). A read of freed memory crashes the program, and under
//! valgrind (when installed) is an error.
//!
//! Needs cc and libibverbs-dev (else SKIPPED). Device roce0 on 127.0.102.2.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

fn lib_dir() -> PathBuf {
    common::drop_in_dir("stale-test-lib", &["libibverbs.so.1"])
}

/// stale.c compiled against the drop-in, once for the tests of this
/// executable (they run at once), or None (SKIPPED).
fn stale() -> Option<PathBuf> {
    common::compile_verbs_c_once("stale", &lib_dir())
}

/// Run with a time limit: a destroy that waits forever (or a thread never
/// woken) fails the test instead of hanging it.
fn run(prog: &Path, args: &[&str]) -> std::process::Output {
    common::run_within(
        common::drop_in_cmd(prog, &lib_dir(), "roce0=udp:127.0.102.2", args),
        Duration::from_secs(300),
    )
}

fn check(out: &std::process::Output, what: &str) -> String {
    let s = common::passed_all(out, what);
    for case in CASES {
        assert!(common::has_ok(&s, case), "{what}: {case}\n{s}");
    }
    s
}

const CASES: &[&str] = &[
    "double: second ibv_dealloc_pd: rc 22 errno 22",
    "double: second ibv_dereg_mr: rc 22",
    "double: second ibv_destroy_cq: rc 22",
    "double: second ibv_destroy_qp: rc 22",
    "double: second ibv_destroy_srq: rc 22",
    "double: second ibv_destroy_ah: rc 22",
    "double: second ibv_dealloc_mw: rc 22",
    "double: second ibv_destroy_comp_channel: rc 22",
    "double: second ibv_close_device: rc 22 errno 22",
    "dead: ibv_query_qp on a destroyed QP: rc 22",
    "dead: ibv_modify_qp on a destroyed QP: rc 22",
    "dead: ibv_resize_cq on a destroyed CQ: rc 22",
    "dead: ibv_ack_cq_events on a destroyed CQ returns",
    "dead: ibv_create_qp with a destroyed CQ: (nil) errno 22",
    "dead: ibv_create_qp with a live send CQ and a destroyed recv CQ: (nil) errno 22",
    "dead: ibv_query_srq on a destroyed SRQ: rc 22",
    "dead: ibv_modify_srq on a destroyed SRQ: rc 22",
    "dead: ibv_create_qp with a destroyed SRQ: (nil) errno 22",
    "dead: ibv_reg_mr on a deallocated PD: (nil) errno 22",
    "dead: ibv_create_qp on a deallocated PD: (nil) errno 22",
    "dead: ibv_create_srq on a deallocated PD: (nil) errno 22",
    "dead: ibv_alloc_mw on a deallocated PD: (nil) errno 22",
    "dead: ibv_create_cq with a destroyed completion channel: (nil) errno 22",
    "dead: ibv_get_cq_event on a destroyed channel: rc -1 errno 22",
    "dead: ibv_close_device with a PD, an MR and a CQ left: rc 0",
    "dead: ibv_alloc_pd on a closed context: (nil) errno 22",
    "dead: ibv_query_device on a closed context: rc 22",
    "dead: ibv_dereg_mr of a closed context's MR: rc 22",
    "dead: ibv_destroy_cq of a closed context's CQ: rc 22",
    "dead: ibv_dealloc_pd of a closed context's PD: rc 22",
    "busy: ibv_dealloc_pd with an MR: rc 16 errno 16",
    "busy: the PD still registers after the EBUSY",
    "busy: ibv_dealloc_pd with one MR left: rc 16",
    "busy: ibv_dealloc_pd once empty: rc 0",
    "busy: ibv_destroy_cq with a QP on it: rc 16",
    "busy: the CQ still polls after the EBUSY: rc 0",
    "busy: the CQ still resizes after the EBUSY: rc 0",
    "busy: ibv_destroy_srq with a QP on it: rc 16",
    "busy: the SRQ still answers after the EBUSY: rc 0",
    "busy: ibv_destroy_cq with the SRQ's QP on it: rc 16",
    "busy: ibv_destroy_srq once unused: rc 0",
    "busy: ibv_destroy_cq once unused: rc 0",
    "busy: ibv_destroy_comp_channel with two CQs: rc 16 errno 16",
    "busy: ibv_destroy_comp_channel with one CQ: rc 16",
    "busy: the channel's CQ still arms: rc 0",
    "busy: ibv_destroy_comp_channel once unused: rc 0",
    "events: ibv_get_cq_event hands out the flushed receive's CQ: rc 0",
    "events: the flushed receive's completion: rc 1 status 5",
    "events: ibv_destroy_cq (events acked) while a thread waits on the channel: rc 0",
    "events: the waiting thread gets the new CQ's event, not the destroyed one's: rc 0",
    "events: ibv_destroy_cq with an event not taken: rc 0",
    "events: the event of the CQ left is cq2's (not the dropped cq3's): rc 0",
    "events: ibv_destroy_cq waits while a delivered event is not acked",
    "events: ibv_destroy_cq returns 0 after the ack: rc 0",
    "events: and the CQ is gone: rc 22",
    "events: ibv_destroy_comp_channel: rc 0",
    "rounds of create, post 8+8, destroy: 0 calls failed",
    "racing: every completion polled meanwhile was whole",
    "racing: none taken twice: 0",
    "racing: the poller ran throughout",
    "racing: the CQ then gives a new QP's flushed receive once: rc 0 status 5, 0 more",
];

#[test]
fn stale_handles_get_errnos() {
    let Some(exe) = stale() else { return };
    check(&run(&exe, &[]), "stale");
}

#[test]
fn stale_handles_get_errnos_under_valgrind() {
    common::check_under_valgrind(stale, run, check, "stale under valgrind");
}
