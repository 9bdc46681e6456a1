//! `roce perf`: short in-process runs (never asserting on speed).

use std::process::Command;

fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

/// `roce` with `args` and the addresses [`addrs`]`(n)`, run to the end.
fn perf(args: &[&str], n: u8) -> std::process::Output {
    roce().args(args).args(addrs(n)).output().unwrap()
}

/// The numbers of JSON array `v`.
fn numbers(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
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
    let out =
        perf(&["perf", "write", "-s", "4096", "-n", "200", "--json", "--ceiling-secs", "0.1"], 61);
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
        let out = perf(
            &["perf", test, "-s", size, "-n", &n.to_string(), "-q", "2", "--json", "--no-ceiling"],
            62,
        );
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
        let out = perf(&["perf", "lat", op, "-s", "8", "-n", "50", "--json"], 63);
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

/// Event mode with and without the driver spin: the JSON says which, the
/// header says it, and the raw UDP reference runs in the same mode.
#[test]
fn event_mode_spin_is_reported_and_matched_by_the_reference() {
    for (spin, octet) in [("0", 71), ("20", 72), ("200", 73)] {
        let out = perf(
            &["perf", "lat", "send", "-s", "8", "-n", "200", "--json", "--spin-us", spin],
            octet,
        );
        let v = json_of(&out);
        assert_eq!(v["poll"], "event");
        assert_eq!(v["spin_us"].as_u64(), Some(spin.parse().unwrap()), "{v}");
        assert_eq!(v["data_check"], "ok");
        let udp = v["udp_rtt_us"]["median"].as_f64().unwrap();
        assert!(udp > 0.0 && udp < 100_000.0, "{v}");
        let text = perf(
            &["perf", "write", "-s", "64", "-n", "2000", "--no-ceiling", "--spin-us", spin],
            octet,
        );
        let t = String::from_utf8_lossy(&text.stdout);
        assert!(text.status.success(), "{t}");
        let want = if spin == "0" {
            "(UDP sockets, completion channel)".to_string()
        } else {
            format!("(UDP sockets, completion channel, {spin} us spin)")
        };
        assert!(t.contains(&want), "{t}");
    }
    // busy mode has no driver threads: spin_us 0 whatever was asked
    let out = perf(
        &[
            "perf",
            "lat",
            "send",
            "-s",
            "8",
            "-n",
            "100",
            "--json",
            "--poll",
            "busy",
            "--spin-us",
            "50",
        ],
        74,
    );
    let v = json_of(&out);
    assert_eq!((v["poll"].as_str(), v["spin_us"].as_u64()), (Some("busy"), Some(0)), "{v}");
}

#[test]
fn text_report_has_perftest_columns_and_repeat_summary() {
    let out = perf(
        &["perf", "send", "-s", "1024", "-n", "100", "--repeat", "2", "--ceiling-secs", "0.1"],
        64,
    );
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
    let cases: [&[&str]; 9] = [
        &["perf", "bogus"],
        &["perf", "write", "-s", "0"],
        &["perf", "atomic", "-s", "64"],
        &["perf", "write", "--mtu", "1500"],
        &["perf", "write", "-n", "10", "-D", "1"],
        &["perf", "write", "send"],
        &["perf", "lat", "-D", "2"],
        &["perf", "write", "-q", "5000"],
        &["perf", "write", "-q", "4096", "-s", "1048576"],
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

#[test]
fn busy_poll_lat_and_bw_with_stats() {
    // lat in busy-poll mode: the raw UDP ping-pong runs in the same mode.
    let out =
        perf(&["perf", "lat", "send", "-n", "200", "--poll", "busy", "--json", "--stats"], 64);
    let v = json_of(&out);
    assert_eq!(v["test"], "lat_send");
    assert_eq!(v["poll"], "busy");
    assert_eq!(v["data_check"], "ok");
    let (min, med) =
        (v["rtt_us"]["min"].as_f64().unwrap(), v["rtt_us"]["median"].as_f64().unwrap());
    assert!(min > 0.0 && min <= med, "{v}");
    assert!(v["udp_rtt_us"]["median"].as_f64().unwrap() > 0.0);
    // 210 round trips (10 warm-up): each a SEND both ways and one receive
    // completion on each side; the core counters use rxe's names.
    let a = &v["stats"]["perf-a"];
    assert_eq!(a["counters"]["rdma_sends"], 210, "{v}");
    assert_eq!(a["counters"]["rdma_recvs"], 210);
    assert_eq!(v["stats"]["perf-b"]["counters"]["rdma_recvs"], 210);
    assert_eq!(a["counters"]["icrc_err"], 0);
    // Every datagram A received passed the transport's ICRC check.
    let t = &a["transport"];
    assert_eq!(t["icrc_bad"], 0);
    assert_eq!(
        t["dgrams_in"].as_u64().unwrap(),
        t["icrc_ok_exact"].as_u64().unwrap() + t["icrc_ok_solved_id"].as_u64().unwrap()
    );

    // lat write and read in busy-poll mode: the test thread moves the
    // frames while it polls the memory / the CQ.
    for op in ["write", "read"] {
        let out =
            perf(&["perf", "lat", op, "-n", "100", "--poll", "busy", "--json", "--no-ceiling"], 67);
        let v = json_of(&out);
        assert_eq!(v["test"], format!("lat_{op}"));
        assert_eq!(v["data_check"], "ok", "{v}");
        assert!(v["rtt_us"]["median"].as_f64().unwrap() > 0.0);
    }

    // Bandwidth in busy-poll mode, 64-byte WRITEs from a post list.
    let out = perf(
        &[
            "perf",
            "write",
            "-s",
            "64",
            "-n",
            "3000",
            "--poll",
            "busy",
            "--json",
            "--no-ceiling",
            "--stats",
        ],
        65,
    );
    let v = json_of(&out);
    assert_eq!(v["poll"], "busy");
    assert_eq!(v["iters"], 3000);
    assert_eq!(v["data_check"], "ok");
    let a = &v["stats"]["perf-a"];
    let b = &v["stats"]["perf-b"];
    assert_eq!(a["transport"]["dgrams_out"], 3000);
    // The core answered every AckReq (acks_sent) but merged queued positive
    // ACKs and held them (200 us): it built and sent far fewer datagrams,
    // each one that left was sent, and merged + built = answered.
    let acks_out = b["transport"]["dgrams_out"].as_u64().unwrap();
    let merged = b["counters"]["acks_merged"].as_u64().unwrap();
    assert_eq!(b["counters"]["sent_pkts"].as_u64().unwrap(), acks_out, "{v}");
    assert_eq!(b["counters"]["acks_sent"].as_u64().unwrap(), acks_out + merged, "{v}");
    assert!(acks_out < 3000, "{v}");
    assert_eq!(b["counters"]["rcvd_pkts"], 3000);
}

#[test]
fn many_qps_and_text_stats() {
    let out = perf(
        &[
            "perf",
            "write",
            "-s",
            "1024",
            "-q",
            "200",
            "-t",
            "2",
            "-n",
            "5",
            "--no-ceiling",
            "--stats",
        ],
        66,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(" Number of qps   : 200"), "{text}");
    assert!(text.contains(" 1024       5 "), "{text}");
    assert!(text.contains("data check: OK (409600 bytes"), "{text}");
    // --stats: rxe's counter names for both devices, then the transports'.
    assert!(text.contains("perf-a:\nsent_pkts: "), "{text}");
    assert!(text.contains("perf-b:\nsent_pkts: "), "{text}");
    assert!(text.contains("rcvd_pkts: 1000\n"), "{text}");
    assert!(text.contains("perf-a transport:\ndgrams_out: 1000\n"), "{text}");
}

/// `-q 4096 -t 1` needs more completions than one CQ holds (max_cqe 32767):
/// the QPs are spread over several CQs, and every one of them moves data.
#[test]
fn more_qps_than_one_cq_can_hold() {
    let out = perf(
        &[
            "perf",
            "write",
            "-s",
            "64",
            "-q",
            "4096",
            "-t",
            "1",
            "-n",
            "2",
            "--no-ceiling",
            "--json",
        ],
        67,
    );
    let v = json_of(&out);
    assert_eq!(v["qps"], 4096);
    assert_eq!(v["data_check"], "ok");
    // every QP sent its two WRITEs (more datagrams only if a loaded host
    // made a retransmit timer fire)
    assert!(v["wire"]["a"]["dgrams_out"].as_u64().unwrap() >= 4096 * 2, "{v}");
}

/// With `--repeat`, each run gets its own reference measured right after
/// it: the GSO+GRO ceiling for bandwidth, the raw ping-pong for latency;
/// the paired ratios are computed run by run from those.
#[test]
fn repeat_pairs_each_run_with_its_own_reference() {
    let out = perf(
        &[
            "perf",
            "write",
            "-s",
            "8192",
            "-n",
            "100",
            "--repeat",
            "3",
            "--json",
            "--ceiling-secs",
            "0.05",
        ],
        65,
    );
    let v = json_of(&out);
    let r = &v["repeat"];
    let runs = numbers(&r["runs_gbps"]);
    let ceil = numbers(&r["runs_ceiling_gbps"]);
    assert_eq!((runs.len(), ceil.len()), (3, 3), "{v}");
    let mut ratios: Vec<f64> = runs.iter().zip(&ceil).map(|(g, c)| g / c).collect();
    ratios.sort_by(f64::total_cmp);
    assert!(ceil.iter().all(|c| *c > 0.0));
    assert!((r["paired_ratio"]["min"].as_f64().unwrap() - ratios[0]).abs() < 1e-9, "{v}");
    assert!((r["paired_ratio"]["median"].as_f64().unwrap() - ratios[1]).abs() < 1e-9, "{v}");
    assert!((r["paired_ratio"]["max"].as_f64().unwrap() - ratios[2]).abs() < 1e-9, "{v}");

    let out = perf(
        &[
            "perf", "lat", "send", "-s", "8", "-n", "200", "--repeat", "3", "--json", "--poll",
            "busy",
        ],
        66,
    );
    let v = json_of(&out);
    let r = &v["repeat"];
    let ours = numbers(&r["runs_median_us"]);
    let raw = numbers(&r["runs_udp_rtt_median_us"]);
    assert_eq!((ours.len(), raw.len()), (3, 3), "{v}");
    let mut sd: Vec<f64> = ours.iter().zip(&raw).map(|(o, u)| o / u).collect();
    sd.sort_by(f64::total_cmp);
    assert!((r["slowdown"]["median"].as_f64().unwrap() - sd[1]).abs() < 1e-9, "{v}");
    assert!(r["udp_rtt_median_us"]["min"].as_f64().unwrap() > 0.0);
}
