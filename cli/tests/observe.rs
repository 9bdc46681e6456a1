//! Observability end to end: `roce stats` reads the counters a running UDP
//! device publishes; `--log` traces go to stderr only; piped output carries
//! no progress line and no ANSI escapes.

use roce_host::DeviceConfig;
use roce_verbs_api::{
    AccessFlags, Budget, ConnectOptions, Context, Counters, Cq, Mr, Pd, Qp, RecvWr, SendWr,
    WcStatus, WrOpcode,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn roce(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .env("ROCE_EMU_RUNTIME_DIR", dir)
        .env("ROCE_EMU_DEVICES", "")
        .env_remove("ROCE_EMU_CONFIG")
        .env("XDG_CONFIG_HOME", dir.join("no-config"))
        .env_remove("RUST_LOG")
        .env_remove("ROCE_LOG")
        .output()
        .expect("run roce")
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

/// `name: value` of one counter in a `roce stats` table.
fn value(out: &str, name: &str) -> Option<u64> {
    out.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).and_then(|v| v.parse().ok())
}

/// Two UDP devices with an RC QP each, connected, and three SENDs of
/// 2000 bytes from st0 to st1, completed. Dropping it closes the devices.
struct Traffic {
    _qps: (Qp, Qp),
    _mrs: (Mr, Mr),
    _cqs: (Cq, Cq),
    _pds: (Pd, Pd),
    a: Context,
    b: Context,
}

impl Traffic {
    fn run() -> Traffic {
        let a = DeviceConfig::udp("st0", "127.0.3.2".parse().unwrap()).open().unwrap().open();
        let b = DeviceConfig::udp("st1", "127.0.3.3".parse().unwrap()).open().unwrap().open();
        let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
        let qa = pa.qp_builder(&ca, &ca).build().unwrap();
        let qb = pb.qp_builder(&cb, &cb).build().unwrap();
        let (ea, eb) = (qa.endpoint(0x100), qb.endpoint(0x200));
        qa.connect(&ea, &eb, &ConnectOptions::default()).unwrap();
        qb.connect(&eb, &ea, &ConnectOptions::default()).unwrap();
        let src = pa.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let dst = pb.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let budget = Budget { events: 0, wall: Duration::from_secs(10) };
        for i in 0..3u64 {
            qb.post_recv(RecvWr::new(i, dst.addr(), 4096, dst.lkey())).unwrap();
            qa.post_send(SendWr::new(i, WrOpcode::Send).sge(src.addr(), 2000, src.lkey())).unwrap();
            assert_eq!(cb.poll_blocking(1, budget).unwrap()[0].status, WcStatus::Success);
            assert_eq!(ca.poll_blocking(1, budget).unwrap()[0].status, WcStatus::Success);
        }
        Traffic { _qps: (qa, qb), _mrs: (src, dst), _cqs: (ca, cb), _pds: (pa, pb), a, b }
    }
}

/// `roce stats st0` once the publisher caught up with `want_a` (and
/// st1's file with its 3 receives), within a few periods.
fn published(dir: &Path, want_a: &Counters) -> String {
    let mut out = String::new();
    for _ in 0..250 {
        let o = roce(dir, &["stats", "st0"]);
        out = text(&o.stdout);
        let b_file = std::fs::read_to_string(dir.join("st1/hw_counters/rdma_recvs"));
        if o.status.success()
            && value(&out, "sent_pkts") == Some(want_a.sent_pkts)
            && b_file.is_ok_and(|v| v == "3\n")
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    out
}

/// The text table: every counter, the members, the sysfs-like files.
fn check_table(dir: &Path, out: &str, want_a: &Counters) {
    assert_eq!(out.lines().next(), Some("st0 (127.0.3.2, running):"), "{out}");
    for (n, v) in want_a.iter() {
        assert_eq!(value(out, n), Some(v), "{n} in\n{out}");
    }
    assert_eq!(value(out, "rdma_sends"), Some(3));
    assert_eq!(value(out, "link_downed"), Some(0), "zeros are printed");
    // a shared device: the sum, then each member process
    assert!(
        out.contains("# the sum over 1 member process (and those that ended before):"),
        "{out}"
    );
    let me = format!("#   pid {} (running): sent_pkts {}, ", std::process::id(), want_a.sent_pkts);
    assert!(out.contains(&me), "{out}");
    assert!(!out.contains('\x1b'));
    // the sysfs-like files
    let hw = dir.join("st1").join("hw_counters");
    assert_eq!(std::fs::read_to_string(hw.join("rdma_recvs")).unwrap(), "3\n");
    assert_eq!(std::fs::read_to_string(hw.join("send_err")).unwrap(), "0\n");
}

/// JSON, every published device when none is named.
fn check_json(dir: &Path) {
    let o = roce(dir, &["stats", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<serde_json::Value> =
        text(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (lines[0]["device"].as_str(), lines[1]["device"].as_str()),
        (Some("st0"), Some("st1"))
    );
    assert_eq!(lines[1]["addr"], "127.0.3.3");
    assert_eq!(lines[1]["state"], "running");
    assert_eq!(lines[1]["counters"]["rdma_recvs"], 3);
    assert_eq!(lines[1]["pid"], std::process::id());
    let members = lines[1]["members"].as_array().expect("members");
    assert_eq!(members.len(), 1);
    assert_eq!(members[0]["pid"], std::process::id());
    assert_eq!(members[0]["counters"]["rdma_recvs"], 3);
}

/// `--watch` bounded by `--count`; an unknown device.
fn check_watch_and_unknown(dir: &Path) {
    // --watch is bounded by --count
    let o = roce(dir, &["stats", "st1", "--watch", "0.05", "--count", "2"]);
    assert!(o.status.success());
    assert_eq!(text(&o.stdout).matches("st1 (127.0.3.3, running):").count(), 2);

    // an unknown device: exit 1 and a hint on stderr
    let o = roce(dir, &["stats", "nosuch"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("no counters published"), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty());
}

/// Traces go to stderr only, stdout stays the JSON summary; JSON trace
/// lines; nothing below warn by default; a bad filter is a usage error; a
/// run in a pipe has no progress line or carriage return (no devices
/// needed).
fn check_tracing_and_pipes(dir: &Path) {
    // traces go to stderr only; stdout stays the JSON summary
    let o = roce(dir, &["demo", "--ops", "30", "--json", "--log", "roce_emulator=debug"]);
    let (so, se) = (text(&o.stdout), text(&o.stderr));
    let j: serde_json::Value = serde_json::from_str(so.trim()).expect("stdout is one JSON object");
    assert_eq!(j["ops_completed"], 30);
    assert!(se.contains("QP state change") && se.contains("from=RTR to=RTS"), "{se}");
    assert!(!se.contains('\x1b') && !so.contains('\x1b'), "no colours in a pipe");
    // JSON trace lines
    let o = roce(
        dir,
        &[
            "demo",
            "--ops",
            "5",
            "--quiet",
            "--log",
            "roce_emulator::hca=info",
            "--log-format",
            "json",
        ],
    );
    assert!(o.status.success());
    let evs: Vec<serde_json::Value> =
        text(&o.stderr).lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    assert!(evs
        .iter()
        .any(|e| e["fields"]["message"] == "QP state change" && e["fields"]["to"] == "RTS"));
    assert!(evs.iter().all(|e| e["target"] == "roce_emulator::hca"));
    // default: nothing below warn
    let o = roce(dir, &["demo", "--ops", "5", "--quiet"]);
    assert!(o.status.success() && o.stderr.is_empty() && o.stdout.is_empty());
    // a bad filter is a usage error
    let o = roce(dir, &["devices", "--log", "roce_emulator=loud"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--log"), "{}", text(&o.stderr));
    // a long-enough run in a pipe: no progress line, no carriage return
    let o = roce(dir, &["demo", "--ops", "3000", "--stats"]);
    assert!(o.status.success());
    let (so, se) = (text(&o.stdout), text(&o.stderr));
    assert!(!so.contains('\r') && !se.contains('\r') && !so.contains('\x1b'), "{se}");
    assert_eq!(so.matches("# not in rxe").count(), 2, "--stats: a full table per HCA");
    assert!(value(&so, "rcvd_rnr_err") == Some(0));
}

#[test]
fn stats_reads_counters_published_by_a_udp_device() {
    let dir: PathBuf = std::env::temp_dir().join(format!("roce-stats-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // the only test in this binary: nothing else reads the environment concurrently
    std::env::set_var("ROCE_EMU_RUNTIME_DIR", &dir);
    std::env::set_var("ROCE_EMU_STATS_INTERVAL_MS", "20");
    let t = Traffic::run();
    let (want_a, want_b) = (t.a.counters(), t.b.counters());
    assert_eq!((want_a.rdma_sends, want_b.rdma_recvs), (3, 3));
    let out = published(&dir, &want_a);
    check_table(&dir, &out, &want_a);
    check_json(&dir);
    check_watch_and_unknown(&dir);

    // closing the devices writes the final values, marked closed
    drop(t);
    let o = roce(&dir, &["stats", "st0"]);
    let out = text(&o.stdout);
    assert!(o.status.success());
    assert_eq!(out.lines().next(), Some("st0 (127.0.3.2, closed):"), "{out}");
    assert_eq!(value(&out, "rdma_sends"), Some(3));
    let _ = std::fs::remove_dir_all(&dir);

    // --- tracing and pipes (no devices needed) ---
    check_tracing_and_pipes(&dir);
}
