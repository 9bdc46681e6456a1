//! `roce run -- CMD`: CMD and its children find the configured devices
//! where software finds kernel devices (/sys/class/infiniband,
//! /sys/class/infiniband_verbs, /dev/infiniband), through the preloaded
//! `libroce_preload.so`; the exit status is CMD's; the tree goes away with
//! the run. UCX (`ucx_info -d`, Debian's ucx-utils) lists rc_verbs and
//! ud_verbs on both devices (SKIPPED where it is not installed).
//!
//! The drop-in and the shim are the ones this `cargo test` built (cli
//! dev-depends on both), passed with `--lib-dir`.

use std::path::{Path, PathBuf};
use std::process::Command;

const DEVICES: &str = "roce0=udp:127.0.96.2,roce1=udp:127.0.96.3";

fn roce() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_roce"));
    c.env("ROCE_EMU_DEVICES", DEVICES).env("ROCE_EMU_STATS", "0").env_remove("LD_PRELOAD");
    c
}

/// A directory of links to the drop-in and the shim this `cargo test`
/// built (`target/<profile>/deps`: tests do not copy them up as `cargo
/// build` does), for `roce run --lib-dir`; `None` (SKIPPED) if missing.
fn libs() -> Option<PathBuf> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let t = Path::new(env!("CARGO_BIN_EXE_roce")).parent()?.to_path_buf();
        let d = t.join("run-test-lib");
        std::fs::create_dir_all(&d).ok()?;
        for (name, built) in [
            ("libibverbs.so.1", "libibverbs.so"),
            ("librdmacm.so.1", "libibverbs.so"),
            ("libroce_preload.so", "libroce_preload.so"),
        ] {
            let built = t.join("deps").join(built);
            if !built.exists() {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "SKIPPED: {} not built", built.display());
                return None;
            }
            let link = d.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&built, &link).ok()?;
        }
        Some(d)
    })
    .clone()
}

/// `roce run --lib-dir LIBS -- ARGS...`.
fn run(libs: &Path, args: &[&str]) -> std::process::Output {
    let mut c = roce();
    c.arg("run").arg("--lib-dir").arg(libs).arg("--").args(args);
    c.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_program_finds_the_devices_as_kernel_devices() {
    let Some(libs) = libs() else { return };
    let script = "cat /sys/class/infiniband/roce0/node_type; \
                  stat -L -c %F /dev/infiniband/uverbs1; \
                  cat /sys/class/infiniband_verbs/uverbs1/ibdev; \
                  ls /sys/class/infiniband; \
                  cat /sys/class/infiniband/roce1/ports/1/gids/1 \
                      /sys/class/infiniband/roce1/ports/1/gid_attrs/types/1 \
                      /sys/class/infiniband/roce1/ports/1/gid_attrs/ndevs/1 \
                      /sys/class/infiniband/roce1/ports/1/link_layer; \
                  ls /sys/class/infiniband/roce0/device/net; \
                  echo $ROCE_EMU_SYSFS";
    let o = run(&libs, &["sh", "-c", script]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..lines.len() - 1],
        [
            "1: CA",
            "character special file",
            "roce1",
            "roce0",
            "roce1",
            "0000:0000:0000:0000:0000:ffff:7f00:6003",
            "RoCE v2",
            "lo",
            "Ethernet",
            "lo",
        ],
        "{out}"
    );
    // the tree is the run's own, and goes with it
    let tree = lines[lines.len() - 1];
    assert!(tree.contains("sysfs-"), "{tree}");
    assert!(!Path::new(tree).exists(), "{tree} left behind");
}

#[test]
fn other_paths_and_the_exit_status_are_the_programs() {
    let Some(libs) = libs() else { return };
    // a path beside ours is untouched, the status is the program's
    let o = run(&libs, &["sh", "-c", "ls /sys/class/infinibandx 2>/dev/null; exit 7"]);
    assert_eq!(o.status.code(), Some(7), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "");
    // without the shim's variable, nothing is rewritten
    let o = run(&libs, &["env", "-u", "ROCE_EMU_SYSFS", "ls", "/sys/class/infiniband"]);
    let host_has_rdma = Path::new("/sys/class/infiniband").exists();
    assert_eq!(o.status.success(), host_has_rdma, "{}", text(&o.stderr));
}

#[test]
fn clear_errors_without_a_command_or_the_libraries() {
    let o = roce().args(["run", "--lib-dir", "/nonexistent/roce", "--", "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(
        e.contains("/nonexistent/roce has no libibverbs.so.1")
            && e.contains("cargo build --release"),
        "{e}"
    );
    let Some(libs) = libs() else { return };
    let o = roce().arg("run").arg("--lib-dir").arg(&libs).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("no command given"), "{}", text(&o.stderr));
    let o = run(&libs, &["/nonexistent/prog"]);
    assert_eq!(o.status.code(), Some(127));
}

#[test]
fn ucx_lists_rc_and_ud_verbs_on_every_device() {
    let Some(libs) = libs() else { return };
    let Some(ucx) =
        ["/usr/bin/ucx_info", "/usr/local/bin/ucx_info"].iter().find(|p| Path::new(p).exists())
    else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: ucx_info not installed (apt-get install ucx-utils)"
        );
        return;
    };
    let o = run(&libs, &[ucx, "-d"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    // "#      Transport: rc_verbs" then "#         Device: roce0:1"
    let mut pairs = Vec::new();
    let mut tl = "";
    for l in out.lines() {
        if let Some(t) = l.split("Transport: ").nth(1) {
            tl = t.trim();
        }
        if let Some(d) = l.split("Device: ").nth(1) {
            pairs.push(format!("{tl} {}", d.trim()));
        }
    }
    for want in ["rc_verbs roce0:1", "ud_verbs roce0:1", "rc_verbs roce1:1", "ud_verbs roce1:1"] {
        assert!(pairs.iter().any(|p| p == want), "no {want} in {pairs:?}\n{out}");
    }
}
