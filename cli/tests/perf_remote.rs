//! `roce perf` across processes: a server and a client process over UDP
//! on two loopback addresses, speaking perftest's out-of-band exchange;
//! asserts completion counts, both sides' data checks and counters.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

/// Loopback addresses and a TCP port of our own for test `n` (tests run
/// in parallel; each device binds ADDR:4791).
fn place(n: u8) -> (String, String, String) {
    let third = (std::process::id() % 200) as u8 + 20;
    let port = 20000 + (std::process::id() % 2000) as u16 * 10 + u16::from(n);
    (format!("127.{}.{third}.3", 70 + n), format!("127.{}.{third}.2", 70 + n), port.to_string())
}

/// Run server and client with the same test arguments (plus per-side
/// extras); returns (server, client) outputs.
fn pair(n: u8, args: &[&str], srv_extra: &[&str], cli_extra: &[&str]) -> (Output, Output) {
    let (srv_addr, cli_addr, port) = place(n);
    let server = roce()
        .args(["perf"])
        .args(args)
        .args(["--server", "--local", &srv_addr, "-p", &port])
        .args(srv_extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start server");
    // the client retries its TCP connection for 10 s
    std::thread::sleep(Duration::from_millis(100));
    let client = roce()
        .args(["perf"])
        .args(args)
        .args([&srv_addr, "--local", &cli_addr, "-p", &port])
        .args(cli_extra)
        .output()
        .expect("run client");
    let server = server.wait_with_output().expect("server output");
    (server, client)
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The ` result:` line as key=value pairs.
fn result(o: &Output) -> std::collections::HashMap<String, String> {
    let s = String::from_utf8_lossy(&o.stdout);
    let line = s
        .lines()
        .find(|l| l.starts_with(" result: "))
        .unwrap_or_else(|| panic!("no result line\n{}", text(o)));
    line[" result: ".len()..]
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn counter(o: &Output, name: &str) -> u64 {
    let s = String::from_utf8_lossy(&o.stdout);
    let line = s.lines().find(|l| l.starts_with(" counters:")).expect("counters line");
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0)
}

/// Both exit 0, recognise each other, did `ops` operations per QP and
/// passed at least `min_checks` data checks each, none failed.
fn assert_both_ok(srv: &Output, cli: &Output, ops: &str, min_checks: (u32, u32)) {
    for (o, role, min) in [(srv, "server", min_checks.0), (cli, "client", min_checks.1)] {
        assert!(o.status.success(), "{role}\n{}", text(o));
        let r = result(o);
        assert_eq!(r["role"], role);
        assert_eq!(r["peer"], "roce", "{role} saw the other side as ours");
        assert_eq!(r["ops"], ops, "{role}\n{}", text(o));
        assert_eq!(r["checks_failed"], "0", "{role}\n{}", text(o));
        assert!(r["checks_ok"].parse::<u32>().unwrap() >= min, "{role}\n{}", text(o));
        assert_eq!(r["error"], "no");
    }
}

#[test]
fn write_two_processes_data_checked_on_the_target() {
    let (s, c) = pair(1, &["write", "-s", "1000", "-n", "300", "-t", "16"], &[], &[]);
    assert_both_ok(&s, &c, "300", (1, 1));
    let st = String::from_utf8_lossy(&s.stdout);
    // 1000 B in 64-byte strides: 4 slots in a 4096-byte cycle buffer, all written
    assert!(st.contains("4 written slots of 1000 B equal the writer's pattern (0 not)"), "{st}");
    // one packet per WRITE at MTU 1024, one ACK each (AckReq on every last packet)
    assert_eq!(counter(&c, "sent_pkts"), 300);
    assert_eq!(counter(&s, "rcvd_pkts"), 300);
    assert_eq!(counter(&s, "acks_sent") + counter(&s, "ack_deferred"), 300);
    // perftest's default unit is MB/sec
    let ct = String::from_utf8_lossy(&c.stdout);
    assert!(ct.contains(" BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"), "{ct}");
}

#[test]
fn report_gbits_switches_the_client_columns_to_gbits() {
    let (s, c) = pair(12, &["write", "-s", "4096", "-n", "100"], &[], &["--report"]);
    assert_both_ok(&s, &c, "100", (1, 1));
    let ct = String::from_utf8_lossy(&c.stdout);
    assert!(ct.contains(" BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"), "{ct}");
    let row = ct.lines().find(|l| l.trim_start().starts_with("4096 ")).expect("result row");
    let cols: Vec<f64> = row.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    // 4096, 100, peak, average, Mpps: average Gb/s = Mpps x 4096 B x 8 bits / 1000
    assert_eq!(cols.len(), 5, "{row}");
    let expect = cols[4] * 4096.0 * 8.0 / 1000.0;
    assert!((cols[3] - expect).abs() <= 0.02 + expect * 0.01, "{row}: {} vs {expect}", cols[3]);
}

#[test]
fn read_two_processes_data_checked_by_the_reader() {
    let (s, c) = pair(2, &["read", "-s", "3000", "-n", "120"], &[], &[]);
    assert_both_ok(&s, &c, "120", (1, 1));
    let ct = String::from_utf8_lossy(&c.stdout);
    assert!(ct.contains("READ slots of 3000 B equal the peer's pattern (0 differ)"), "{ct}");
    // 120 READ requests; 3 response packets each at MTU 1024
    assert_eq!(counter(&c, "sent_pkts"), 120);
    assert_eq!(counter(&c, "rcvd_pkts"), 360);
}

#[test]
fn send_two_processes_every_payload_checked() {
    let (s, c) = pair(3, &["send", "-s", "2500", "-n", "200", "-q", "2"], &["-r", "64"], &[]);
    assert_both_ok(&s, &c, "200,200", (2, 1));
    let st = String::from_utf8_lossy(&s.stdout);
    assert!(st.contains("400 SEND payloads equal the sender's pattern (0 differ)"), "{st}");
    assert_eq!(counter(&s, "rdma_recvs"), 400);
    assert_eq!(counter(&c, "rdma_sends"), 400);
}

#[test]
fn fetch_and_add_and_compare_and_swap_chains() {
    let (s, c) = pair(4, &["atomic", "-n", "500"], &[], &[]);
    assert_both_ok(&s, &c, "500", (1, 1));
    assert!(String::from_utf8_lossy(&c.stdout)
        .contains("FETCH_AND_ADD results (+1 per op) per slot unbroken"));
    assert!(String::from_utf8_lossy(&s.stdout).contains("(0 slots wrong, 0 words hit off-slot)"));
    let (s, c) = pair(5, &["atomic", "-n", "300", "-A", "CMP_AND_SWAP", "-q", "2"], &[], &[]);
    assert_both_ok(&s, &c, "300,300", (2, 2));
    assert!(String::from_utf8_lossy(&c.stdout)
        .contains("CMP_AND_SWAP chains (each hit, +1) per slot unbroken"));
}

#[test]
fn send_latency_ping_pong() {
    let (s, c) = pair(6, &["lat", "send", "-s", "8", "-n", "200"], &[], &[]);
    assert_both_ok(&s, &c, "200", (1, 1));
    let ct = String::from_utf8_lossy(&c.stdout);
    assert!(ct.contains("200 of 200 ping-pong messages received"), "{ct}");
    assert!(ct.contains("t_typical[usec]"));
    assert_eq!(counter(&c, "rdma_sends"), 200);
    assert_eq!(counter(&s, "rdma_recvs"), 200);
}

#[test]
fn duration_mode_equal_counts_on_all_qps() {
    let (s, c) = pair(7, &["write", "-s", "512", "-D", "0.5", "-q", "2"], &[], &[]);
    let r = result(&c);
    let ops: Vec<u64> = r["ops"].split(',').map(|x| x.parse().unwrap()).collect();
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[0], ops[1], "{}", text(&c));
    assert!(ops[0] > 10);
    assert_both_ok(&s, &c, &r["ops"], (2, 2));
}

#[test]
fn bad_rkey_is_a_remote_access_error_and_both_ends_finish() {
    // the client uses a wrong R_Key: its first WRITE completes with
    // REM_ACCESS_ERR (10); the server NAKs it; the exchange still closes
    let (s, c) = pair(8, &["write", "-s", "64", "-n", "20"], &[], &["--bad-rkey"]);
    assert_eq!(c.status.code(), Some(1), "{}", text(&c));
    let ct = String::from_utf8_lossy(&c.stdout);
    assert!(ct.contains("completion with error: status 10 (remote access error)"), "{ct}");
    assert_eq!(result(&c)["error"], "yes");
    assert!(s.status.success(), "{}", text(&s));
    assert_eq!(counter(&s, "naks_sent"), 1, "{}", text(&s));
    // the server advertises a wrong R_Key: same outcome
    let (s, c) = pair(9, &["read", "-s", "64", "-n", "20"], &["--bad-rkey"], &[]);
    assert_eq!(c.status.code(), Some(1), "{}", text(&c));
    assert!(String::from_utf8_lossy(&c.stdout).contains("status 10 (remote access error)"));
    assert_eq!(counter(&s, "naks_sent"), 1, "{}", text(&s));
}

#[test]
fn injected_loss_is_recovered_and_counted() {
    // the server's transport drops 8 % of what it receives (requests) and
    // of what it sends (ACKs): go-back-N and timeouts must finish the run
    let (s, c) = pair(
        10,
        &["write", "-s", "2048", "-n", "150", "-t", "8"],
        &["--faults", "loss=0.08,dir=both,seed=3"],
        &[],
    );
    assert_both_ok(&s, &c, "150", (1, 1));
    let err = String::from_utf8_lossy(&s.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("roce faults"))
        .unwrap_or_else(|| panic!("{}", text(&s)));
    let num = |k: &str| -> u64 {
        line.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.parse().unwrap())
            .unwrap()
    };
    assert!(num("rx_dropped") > 0 && num("tx_dropped") > 0, "{line}");
    // the client sent more packets than 150 x 2 (retransmissions)
    assert!(counter(&c, "sent_pkts") > 300, "{}", text(&c));
    assert!(
        counter(&s, "out_of_seq_request") + counter(&s, "duplicate_request") > 0,
        "{}",
        text(&s)
    );
}

#[test]
fn write_with_immediate_every_immediate_checked() {
    let (s, c) = pair(11, &["write", "--imm", "-s", "3000", "-n", "120", "-q", "2"], &[], &[]);
    assert_both_ok(&s, &c, "120,120", (3, 2));
    let st = String::from_utf8_lossy(&s.stdout);
    assert!(
        st.contains(
            "240 WRITE_WITH_IMM receive completions, immediates 0..120 in order per QP (0 wrong)"
        ),
        "{st}"
    );
    assert!(st.contains("written slots of 3000 B equal the writer's pattern (0 not)"), "{st}");
    // one receive consumed per WRITE: rdma_recvs counts them
    assert_eq!(counter(&s, "rdma_recvs"), 240, "{}", text(&s));
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["perf", "send", "127.0.0.1", "-D", "1"][..],
        &["perf", "atomic", "127.0.0.1", "-A", "XOR"],
        &["perf", "lat", "write", "127.0.0.1"],
        &["perf", "write", "127.0.0.1", "send", "extra"],
        &["perf", "read", "127.0.0.1", "--imm"],
    ] {
        let o = roce().args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}\n{}", text(&o));
    }
}

/// `-m` sets the port MTU of a device the run creates (`--local`), on both
/// sides, as in the one-process run: a 4000-byte WRITE is one packet at
/// MTU 4096 (it was refused: "4096 exceeds the port's active MTU 1024").
#[test]
fn mtu_option_sets_the_local_ports_mtu() {
    let args = ["write", "-s", "4000", "-n", "50", "-m", "4096"];
    let (s, c) = pair(13, &args, &[], &[]);
    assert_both_ok(&s, &c, "50", (1, 1));
    let ct = String::from_utf8_lossy(&c.stdout);
    assert!(ct.contains(" Mtu             : 4096[B]"), "{ct}");
    assert_eq!(counter(&c, "sent_pkts"), 50, "one packet per WRITE");
    assert_eq!(counter(&s, "rcvd_pkts"), 50);
}
