//! `roce perf`: short in-process runs (never asserting on speed).

use std::process::Command;

fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

/// A pair of loopback addresses of our own (each device binds port 4791,
/// so concurrent tests must not share them).
fn addrs(n: u8) -> [String; 4] {
    let third = (std::process::id() % 200) as u8 + 20;
    [
        "--addr-a".into(),
        format!("127.{n}.{third}.2"),
        "--addr-b".into(),
        format!("127.{n}.{third}.3"),
    ]
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "status {:?}\nstdout {text}\nstderr {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn write_bw_json_has_throughput_ceiling_and_data_check() {
    let out = roce()
        .args(["perf", "write", "-s", "4096", "-n", "200", "--json", "--ceiling-secs", "0.1"])
        .args(addrs(61))
        .output()
        .unwrap();
    let v = json_of(&out);
    assert_eq!(v["test"], "write");
    assert_eq!(v["size"], 4096);
    assert_eq!(v["iters"], 200);
    assert_eq!(v["qps"], 1);
    assert_eq!(v["data_check"], "ok");
    assert!(v["gbps"].as_f64().unwrap() > 0.0);
    assert!(v["msgs_per_s"].as_f64().unwrap() > 0.0);
    for k in ["plain", "mmsg", "gso_gro"] {
        assert!(v["ceiling_gbps"][k].as_f64().unwrap() > 0.0, "{k}: {v}");
    }
    let best = v["ceiling_best_gbps"].as_f64().unwrap();
    let ratio = v["ratio"].as_f64().unwrap();
    assert!((ratio - v["gbps"].as_f64().unwrap() / best).abs() < 1e-9);
    // 4 KiB at MTU 1024: four packets per WRITE went out from A.
    assert_eq!(v["wire"]["a"]["dgrams_out"].as_u64().unwrap() % 4, 0);
    assert!(v["wire"]["a"]["dgrams_out"].as_u64().unwrap() >= 800);
    assert_eq!(v["wire"]["a"]["icrc_bad"], 0);
}

#[test]
fn read_send_atomic_runs_verify_data() {
    for (test, size, n) in [("read", "8192", 50), ("send", "3000", 60), ("atomic", "8", 100)] {
        let out = roce()
            .args([
                "perf",
                test,
                "-s",
                size,
                "-n",
                &n.to_string(),
                "-q",
                "2",
                "--json",
                "--no-ceiling",
            ])
            .args(addrs(62))
            .output()
            .unwrap();
        let v = json_of(&out);
        assert_eq!(v["test"], test);
        assert_eq!(v["iters"], n);
        assert_eq!(v["qps"], 2);
        assert_eq!(v["data_check"], "ok", "{test}");
        assert!(v["ratio"].is_null());
    }
}

#[test]
fn lat_percentiles_are_ordered() {
    for op in ["send", "write", "read"] {
        let out = roce()
            .args(["perf", "lat", op, "-s", "8", "-n", "50", "--json"])
            .args(addrs(63))
            .output()
            .unwrap();
        let v = json_of(&out);
        assert_eq!(v["test"], format!("lat_{op}"));
        assert_eq!(v["iters"], 50);
        assert_eq!(v["data_check"], "ok");
        for key in ["rtt_us", "udp_rtt_us"] {
            let r = &v[key];
            let (min, med, p99) = (
                r["min"].as_f64().unwrap(),
                r["median"].as_f64().unwrap(),
                r["p99"].as_f64().unwrap(),
            );
            assert!(min > 0.0 && min <= med && med <= p99, "{key}: {r}");
        }
    }
}

#[test]
fn text_report_has_perftest_columns_and_repeat_summary() {
    let out = roce()
        .args(["perf", "send", "-s", "1024", "-n", "100", "--repeat", "2", "--ceiling-secs", "0.1"])
        .args(addrs(64))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Send BW Test"));
    assert!(text.contains(
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
    ));
    assert_eq!(text.lines().filter(|l| l.starts_with(" 1024       100")).count(), 2, "{text}");
    assert!(text.contains(" 2 runs: BW average min / median / max = "));
    assert!(text.contains("raw UDP ceiling"));
    assert!(text.contains("ratio = ours / best ceiling"));
    assert_eq!(text.matches("data check (run").count(), 2);
    assert!(!text.contains("FAILED"));
    // Progress goes to stderr only on a terminal: here stderr is a pipe.
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn bad_flags_exit_2_with_a_message() {
    let cases: [&[&str]; 7] = [
        &["perf", "bogus"],
        &["perf", "write", "-s", "0"],
        &["perf", "atomic", "-s", "64"],
        &["perf", "write", "--mtu", "1500"],
        &["perf", "write", "-n", "10", "-D", "1"],
        &["perf", "write", "send"],
        &["perf", "lat", "-D", "2"],
    ];
    for args in cases {
        let out = roce().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.trim().is_empty(), "{args:?}");
    }
    let out = roce().args(["perf", "write", "--mtu", "1500"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--mtu 1500 is not one of"));
}
