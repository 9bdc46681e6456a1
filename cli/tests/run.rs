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
            ("librspreload.so", "librspreload.so"),
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
    // the tree is the run's own (named by its PID, which is the program's),
    // and the next run removes it once the program has ended
    let tree = lines[lines.len() - 1];
    assert!(tree.contains("sysfs-"), "{tree}");
    let o = run(&libs, &["true"]);
    assert!(o.status.success());
    assert!(!Path::new(tree).exists(), "{tree} left behind after the next run");
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
    // roce run becomes the program: the same PID
    let o = roce()
        .arg("run")
        .arg("--lib-dir")
        .arg(&libs)
        .args(["--", "sh", "-c", "echo $$"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|c| {
            let pid = c.id();
            c.wait_with_output().map(|o| (pid, o))
        })
        .unwrap();
    assert_eq!(text(&o.1.stdout).trim(), o.0.to_string(), "the program has roce run's PID");
}

/// `--rsockets`: librspreload.so preloaded after the shim (a program runs
/// with it: its reads and writes of ordinary fds pass through); a
/// directory without it is an error that names roce install.
#[test]
fn rsockets_preloads_librspreload_after_the_shim() {
    let Some(libs) = libs() else { return };
    let mut c = roce();
    let o = c.arg("run").arg("--lib-dir").arg(&libs).args(["--rsockets", "--print-env"]);
    let o = o.output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let want = format!(
        "export LD_PRELOAD='{} {}'",
        libs.join("libroce_preload.so").display(),
        libs.join("librspreload.so").display()
    );
    assert!(text(&o.stdout).lines().any(|l| l == want), "{want}\n{}", text(&o.stdout));
    let mut c = roce();
    c.arg("run").arg("--lib-dir").arg(&libs).args(["--rsockets", "--", "sh", "-c"]);
    let o = c.arg("echo ok; echo $LD_PRELOAD").output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with("ok\n") && text(&o.stdout).contains("librspreload.so"));
    // the same libraries but librspreload.so
    let bare = libs.with_file_name("run-test-lib-no-rspreload");
    std::fs::create_dir_all(&bare).unwrap();
    for f in ["libibverbs.so.1", "librdmacm.so.1", "libroce_preload.so"] {
        let _ = std::fs::remove_file(bare.join(f));
        std::os::unix::fs::symlink(libs.join(f), bare.join(f)).unwrap();
    }
    let mut c = roce();
    let o = c.arg("run").arg("--lib-dir").arg(&bare).args(["--rsockets", "--", "true"]);
    let o = o.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(e.contains("has no librspreload.so") && e.contains("roce install"), "{e}");
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

// ---------------------------------------------------------------- middleware
//
// The fast subset of scripts/middleware.sh: two processes of the
// middleware under `roce run`, each pair's results checked. Tools missing:
// SKIPPED. Devices 127.0.96.2/.3 (above), TCP ports 19400..19409.

/// Whether a TCP socket of this host listens on `port` (`/proc/net/tcp`,
/// `tcp6`: state 0A).
fn tcp_listening(port: &str) -> bool {
    let Ok(port) = port.parse::<u16>() else { return false };
    let want = format!(":{port:04X} ");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/net/{f}")).unwrap_or_default().lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() > 3 && format!("{} ", w[1]).ends_with(&want) && w[3] == "0A"
        })
    })
}

/// The tool's path, or print SKIPPED and return None.
fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {name} not installed (apt-get install {package})"
        );
    }
    found
}

/// Run `server` then (after `delay`) `client` under `roce run`, each with
/// `env`, both killed by their PIDs after `limit`; (client output, server
/// output), each with whether it exited 0.
fn pair(
    libs: &Path,
    env: &[(&str, &str)],
    (server, port): (&[&str], &str),
    client: &[&str],
    limit: std::time::Duration,
) -> ((bool, String), (bool, String)) {
    use std::process::Stdio;
    let spawn = |args: &[&str]| {
        let mut c = roce();
        c.arg("run").arg("--lib-dir").arg(libs).arg("--").args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    };
    let finish = |mut ch: std::process::Child, end: std::time::Instant| {
        loop {
            if let Ok(Some(_)) = ch.try_wait() {
                break;
            }
            if std::time::Instant::now() >= end {
                let _ = ch.kill();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let o = ch.wait_with_output().unwrap();
        (o.status.success(), text(&o.stdout) + &text(&o.stderr))
    };
    let s = spawn(server);
    // the client once the server listens on its TCP port (its side
    // channel), at most 5 s
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !tcp_listening(port) && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    let c = spawn(client);
    let end = std::time::Instant::now() + limit;
    let co = finish(c, end);
    // a server that ends by itself has 3 s after its client; one that runs
    // until killed (qperf's: its client's status is the result) is killed
    // at once
    let grace = if server.first().is_some_and(|p| p.ends_with("qperf")) { 0 } else { 3000 };
    let so = finish(s, std::time::Instant::now() + std::time::Duration::from_millis(grace));
    (co, so)
}

#[test]
fn ucx_perftest_tag_lat_over_rc_and_ud_with_ucx_defaults() {
    let Some(libs) = libs() else { return };
    let Some(ucx) = tool("ucx_perftest", "ucx-utils") else { return };
    let ucx = ucx.to_str().unwrap();
    for (tls, port) in [("rc", "19401"), ("ud", "19402")] {
        let ((cok, c), (sok, s)) = pair(
            &libs,
            &[("UCX_TLS", tls)],
            (&[ucx, "-p", port], port),
            &[ucx, "127.0.0.1", "-p", port, "-t", "tag_lat", "-n", "2000", "-w", "100"],
            std::time::Duration::from_secs(60),
        );
        assert!(cok && sok, "UCX_TLS={tls}\n--- client\n{c}\n--- server\n{s}");
        let fin = c.lines().find(|l| l.starts_with("Final:")).unwrap_or_default().to_string();
        let iters: Vec<&str> = fin.split_whitespace().collect();
        assert_eq!(iters.get(1), Some(&"2000"), "UCX_TLS={tls}: {fin}\n{c}");
    }
}

#[test]
fn fi_pingpong_msg_and_rdm_endpoints_over_verbs() {
    let Some(libs) = libs() else { return };
    let Some(fi) = tool("fi_pingpong", "libfabric-bin") else { return };
    let fi = fi.to_str().unwrap();
    // (rdm: ofi_rxm over verbs MSG endpoints; its domain keeps a PD on the
    // CM's context across the ids it makes and destroys)
    for (ep, port) in [("msg", "19403"), ("rdm", "19406")] {
        let ((cok, c), (sok, s)) = pair(
            &libs,
            &[],
            (&[fi, "-p", "verbs", "-e", ep, "-B", port, "-I", "50"], port),
            &[fi, "-p", "verbs", "-e", ep, "-P", port, "-I", "50", "127.0.0.1"],
            std::time::Duration::from_secs(60),
        );
        assert!(cok && sok, "-e {ep}\n--- client\n{c}\n--- server\n{s}");
        // every size from 64 B to 1 MiB made its 50 round trips
        for size in ["64", "4k", "64k", "1m"] {
            assert!(
                c.lines().any(|l| l.split_whitespace().take(3).eq([size, "50", "=50"])),
                "-e {ep}: size {size}\n{c}"
            );
        }
    }
}

#[test]
fn qperf_cm_rc_lat_and_rc_rdma_write_bw() {
    let Some(libs) = libs() else { return };
    let Some(q) = tool("qperf", "qperf") else { return };
    let q = q.to_str().unwrap();
    for (t, port, what) in [("rc_lat", "19404", "latency"), ("rc_rdma_write_bw", "19405", "bw")] {
        let ((cok, c), (_, s)) = pair(
            &libs,
            &[],
            (&[q, "-lp", port], port),
            &[q, "-lp", port, "-cm1", "127.0.0.1", "-t", "1", t],
            std::time::Duration::from_secs(40),
        );
        // (the qperf server runs until killed: only the client's status)
        assert!(cok, "{t}\n--- client\n{c}\n--- server\n{s}");
        assert!(c.lines().any(|l| l.trim_start().starts_with(what) && l.contains('=')), "{t}\n{c}");
    }
}
