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

mod common;
use common::{need, skipped, text, which};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn lib_dir() -> PathBuf {
    common::drop_in_dir("misuse-test-lib", &["libibverbs.so.1"])
}

/// misuse.c compiled against the drop-in, once for the tests of this
/// executable (they run at once), or None (SKIPPED).
fn misuse() -> Option<PathBuf> {
    static EXE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    EXE.get_or_init(compile).clone()
}

fn compile() -> Option<PathBuf> {
    let header = "/usr/include/infiniband/verbs.h";
    if which("cc").is_none() || !Path::new(header).exists() {
        skipped("misuse: needs cc and libibverbs-dev");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("roce-misuse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let exe = dir.join("misuse");
    let o = Command::new("cc")
        .args(["-O1", "-g", "-Wall", "-o"])
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/misuse.c"))
        .arg(format!("-L{}", lib_dir().display()))
        .arg("-l:libibverbs.so.1")
        .output()
        .expect("run cc");
    assert!(o.status.success(), "cc misuse.c:\n{}", text(&o.stderr));
    Some(exe)
}

fn run(prog: &Path, args: &[&str]) -> std::process::Output {
    Command::new(prog)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("ROCE_EMU_DEVICES", "roce0=udp:127.0.100.2")
        .env("ROCE_EMU_STATS", "0")
        .stdin(Stdio::null())
        .output()
        .expect("run")
}

fn check(out: &std::process::Output, what: &str) -> String {
    let s = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{what}: {:?}\n{s}", out.status);
    assert!(s.contains("0 failures") && !s.contains("FAIL "), "{what}\n{s}");
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
        assert!(
            s.lines().any(|l| l.starts_with("ok   ") && l.contains(case)),
            "{what}: {case}\n{s}"
        );
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
    let Some(vg) = need("valgrind", "valgrind") else { return };
    let Some(exe) = misuse() else { return };
    let supp = format!(
        "--suppressions={}",
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/valgrind.supp").display()
    );
    let out = run(
        &vg,
        &["--error-exitcode=9", "--errors-for-leak-kinds=none", &supp, exe.to_str().unwrap()],
    );
    let s = check(&out, "misuse under valgrind");
    assert!(s.contains("ERROR SUMMARY: 0 errors"), "{s}");
}
