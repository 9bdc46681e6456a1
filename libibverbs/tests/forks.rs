//! fork() while the parent runs traffic (issue 26, finding 5):
//! `tests/c/forks.c` forks 5 x 50 children while a thread of the parent
//! ping-pongs SENDs between two RC QPs. Every child's inherited objects must
//! fail cleanly (an error, nothing sent, no hang), every tenth child's own
//! new device must carry a UD datagram to itself, and after each round the
//! parent's QPs must still be in RTS with its traffic going on.
//!
//! Needs cc and libibverbs-dev (else SKIPPED). Device roce0 on 127.0.100.6.

use crate::common;

#[test]
fn fifty_forks_five_times_no_hang_and_the_parent_undisturbed() {
    let lib = common::drop_in_dir("forks-test-lib", &["libibverbs.so.1"]);
    let Some(exe) = common::compile_verbs_c("forks", &lib) else { return };
    let out =
        common::drop_in_cmd(&exe, &lib, "roce0=udp:127.0.100.6", &[]).output().expect("run forks");
    let s = common::passed_all(&out, "forks");
    for r in 1..=5 {
        for case in [
            format!("round {r}: 50 forks, 0 hangs"),
            format!("round {r}: every child's inherited objects failed cleanly"),
            format!("round {r}: the parent's QPs are still in RTS"),
            format!("round {r}: the parent's traffic went on"),
        ] {
            assert!(common::has_ok(&s, &case), "{case}\n{s}");
        }
    }
    assert!(s.contains("forks: 250, hangs: 0, failed children: 0"), "{s}");
}
