//! The misuse family (issue 26), its first cases: `tests/c/misuse.c`
//! breaks a QP's limits through the C ABI (1 GiB of inline data behind 16
//! real bytes, `num_sge` of 2^20 behind one real SGE, on `ibv_post_send`,
//! `ibv_post_recv`, `ibv_post_srq_recv` and the `ibv_wr_*` calls) and
//! checks each gets EINVAL, as rdma-core with rxe answers, with nothing read
//! past the limits: a read past them crashes the program, and under
//! valgrind (when installed) any invalid read is an error. And a read-only
//! page registered for writes gets EFAULT, as the kernel's pinning answers.
//!
//! Needs cc and libibverbs-dev (else SKIPPED). Device roce0 on 127.0.100.2.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn lib_dir() -> PathBuf {
    common::drop_in_dir("misuse-test-lib", &["libibverbs.so.1"])
}

/// misuse.c compiled against the drop-in, once for the tests of this
/// executable (they run at once), or None (SKIPPED).
fn misuse() -> Option<PathBuf> {
    common::compile_verbs_c_once("misuse", &lib_dir())
}

/// vanish.c, as misuse().
fn vanish() -> Option<PathBuf> {
    common::compile_verbs_c_once("vanish", &lib_dir())
}

fn run(prog: &Path, args: &[&str]) -> std::process::Output {
    common::drop_in_cmd(prog, &lib_dir(), "roce0=udp:127.0.100.2", args).output().expect("run")
}

fn check(out: &std::process::Output, what: &str) -> String {
    let s = common::passed_all(out, what);
    for case in [
        "inline: ibv_post_send",
        "num_sge: ibv_post_send",
        "num_sge: ibv_post_recv",
        "num_sge: ibv_post_srq_recv",
        "wr: ibv_wr_set_inline_data of",
        "wr: ibv_wr_set_inline_data_list",
        "wr: ibv_wr_set_sge_list",
        "wr: 16 inline bytes",
        "readonly: ibv_reg_mr of a read-only page for writing",
        "readonly: ibv_reg_mr of a read-only page for atomics",
        "readonly: ibv_reg_mr of a read-only page for remote reads",
        "readonly: ibv_rereg_mr to write access",
    ] {
        assert!(common::has_ok(&s, case), "{what}: {case}\n{s}");
    }
    s
}

#[test]
fn limits_are_checked_before_anything_is_read() {
    let Some(exe) = misuse() else { return };
    check(&run(&exe, &[]), "misuse");
}

#[test]
fn limits_are_checked_before_anything_is_read_under_valgrind() {
    common::check_under_valgrind(misuse, run, check, "misuse under valgrind");
}

/// vanish.c (finding 1, the runtime half) with its own device address and
/// published counters; returns the output and the device's final
/// `region_faults`.
fn run_vanish(wrapper: Option<(&Path, Vec<String>)>) -> Option<(String, u64)> {
    let exe = vanish()?;
    let stats = std::env::temp_dir().join(format!(
        "roce-vanish-stats-{}-{}",
        std::process::id(),
        wrapper.is_some()
    ));
    let _ = std::fs::remove_dir_all(&stats);
    let mut c = match &wrapper {
        Some((vg, args)) => {
            let mut c = Command::new(vg);
            c.args(args).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    let out = c
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("ROCE_EMU_DEVICES", "roce0=udp:127.0.100.3")
        .env("ROCE_EMU_RUNTIME_DIR", &stats)
        .env("ROCE_EMU_STATS_INTERVAL_MS", "50")
        .stdin(Stdio::null())
        .output()
        .expect("run vanish");
    let s = common::passed_all(&out, "vanish");
    for case in [
        "ro_page_remote_write: the peer's completion is REM_ACCESS_ERR",
        "ro_page_remote_write: the responder's QP is in ERROR",
        "ro_page_remote_write: the page is unchanged",
        "ro_page_remote_write: a READ of the read-only page succeeds",
        "munmap_without_dereg WRITE: the peer's completion is REM_ACCESS_ERR",
        "munmap_without_dereg WRITE across the edge: the peer's completion is REM_ACCESS_ERR",
        "munmap_without_dereg READ: the peer's completion is REM_ACCESS_ERR",
        "munmap_without_dereg READ of 8 KiB across the edge: the peer's completion",
        "munmap_without_dereg ATOMIC: the peer's completion is REM_ACCESS_ERR",
        "munmap_without_dereg: ibv_dereg_mr afterwards",
        "local_send_unmapped: the SEND fails",
        "afterwards: a WRITE into fresh pages lands exactly",
    ] {
        assert!(common::has_ok(&s, case), "{case}\n{s}");
    }
    let counter = std::fs::read_dir(&stats)
        .expect("published stats")
        .flatten()
        .map(|e| e.path().join("hw_counters/region_faults"))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no region_faults under {}", stats.display()));
    let n =
        std::fs::read_to_string(&counter).expect("read counter").trim().parse().expect("number");
    let _ = std::fs::remove_dir_all(&stats);
    Some((s, n))
}

#[test]
fn pages_that_vanish_under_a_region_fail_the_access_not_the_process() {
    let Some((_, faults)) = run_vanish(None) else { return };
    // each of the six spoiled accesses (one WRITE into the read-only page,
    // two WRITEs, two READs and an atomic into the unmapped one) counts at
    // least once
    assert!(faults >= 6, "region_faults {faults}");
}

#[test]
fn pages_that_vanish_under_a_region_fail_the_access_under_valgrind() {
    // (the guarded copies' own accesses to the vanished pages are the
    // deliberate invalid accesses, suppressed by name: region-guard-*)
    let Some((vg, args)) = common::valgrind() else { return };
    let Some((s, faults)) = run_vanish(Some((&vg, args))) else { return };
    assert!(s.contains("ERROR SUMMARY: 0 errors"), "{s}");
    assert!(faults >= 6, "region_faults {faults}");
}
