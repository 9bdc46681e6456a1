//! The pingpong tools as two processes over real UDP sockets on loopback:
//! server and client exit 0, print rdma-core's lines with each other's
//! QPN/PSN/GID, check the data (`-c`), and every frame of the pcap both
//! devices recorded passes `../shared/oracles/oracle.py` (when python3
//! and the oracle are present; skipped otherwise).
//!
//! Each tool has its own address pair (RoCEv2 always uses UDP port 4791,
//! so two tests cannot share an address): RC 127.0.0.2/.3, UC .4/.5,
//! UD .6/.7, RC under loss .18/.19 (see each test for the others). Sizes
//! of one tool run one after the other.

use crate::common;
use common::{command, finish, free_port, Run};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn pcap_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-examples-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

/// Run server and client of `bin` with `args`; devices `s0`/`c0` (prefixed
/// with `tag`) at `srv`/`cli`; pcaps in `dir`.
fn pair(bin: &str, tag: &str, srv: &str, cli: &str, args: &[&str], dir: &Path) -> (Run, Run) {
    let port = free_port().to_string();
    let devices = format!("{tag}s={srv},{tag}c=udp:{cli}");
    let cmd = |dev: String, server: Option<&str>| {
        let mut c = command(bin, &["-d", &dev, "-g", "1", "-p", &port]);
        c.env("ROCE_EMU_DEVICES", &devices).env("ROCE_EMU_PCAP", dir).args(args);
        if let Some(s) = server {
            c.arg(s);
        }
        c.spawn().expect("spawn")
    };
    let s = cmd(format!("{tag}s"), None);
    let c = cmd(format!("{tag}c"), Some(srv));
    let deadline = Instant::now() + Duration::from_secs(90);
    let rc = finish(c, deadline);
    let rs = finish(s, deadline);
    (rs, rc)
}

/// (QPN, PSN, GID) of a "  local address:" or "  remote address:" line.
fn addr_line(out: &str, which: &str) -> (String, String, String) {
    let l = out
        .lines()
        .find(|l| l.starts_with(which))
        .unwrap_or_else(|| panic!("no {which:?} in {out}"));
    let field = |k: &str| {
        let i = l.find(k).unwrap_or_else(|| panic!("no {k} in {l}")) + k.len();
        l[i..].split([',', ':']).next().unwrap_or("").trim().to_string()
    };
    assert!(l.contains("LID 0x0000, QPN 0x"), "{l}");
    let gid = l.rsplit("GID ").next().unwrap_or("").to_string();
    (field("QPN "), field("PSN "), gid)
}

fn check_outputs(s: &Run, c: &Run, size: usize, iters: usize, srv: &str, cli: &str, ud: bool) {
    assert_eq!(s.code, Some(0), "server failed:\n{}\n{}", s.out, s.err);
    assert_eq!(c.code, Some(0), "client failed:\n{}\n{}", c.out, c.err);
    let (sq, sp, sg) = addr_line(&s.out, "  local address:  ");
    let (cq, cp, cg) = addr_line(&c.out, "  local address:  ");
    assert_eq!(addr_line(&c.out, "  remote address: "), (sq.clone(), sp.clone(), sg.clone()));
    assert_eq!(addr_line(&s.out, "  remote address: "), (cq, cp, cg.clone()));
    assert_eq!(sg, format!("::ffff:{srv}"));
    assert_eq!(cg, format!("::ffff:{cli}"));
    assert!(sq.starts_with("0x") && sq.len() == 8, "{sq}");
    assert!(sp.starts_with("0x") && sp.len() == 8, "{sp}");
    // ud_pingpong's local line has "PSN 0x......: GID" (rdma-core's typo), the others a comma
    let local = s.out.lines().next().unwrap_or("");
    assert_eq!(local.contains(&format!("PSN {sp}: GID")), ud, "{local}");
    for r in [s, c] {
        let bytes = format!("{} bytes in ", size * iters * 2);
        let l =
            r.out.lines().find(|l| l.starts_with(&bytes)).unwrap_or_else(|| panic!("{}", r.out));
        assert!(l.contains(" seconds = ") && l.ends_with(" Mbit/sec"), "{l}");
        let it = format!("{iters} iters in ");
        let l = r.out.lines().find(|l| l.starts_with(&it)).unwrap_or_else(|| panic!("{}", r.out));
        assert!(l.ends_with(" usec/iter"), "{l}");
        assert!(!r.out.contains("invalid data"), "{}", r.out);
        assert_eq!(r.out.lines().count(), 4, "{}", r.out);
    }
}

/// The oracle, if python3 and `shared/oracles/oracle.py` exist: CI has
/// `shared/` beside the workspace (`../shared`); a worktree may sit deeper,
/// so every ancestor of the package directory is tried.
fn oracle() -> Option<PathBuf> {
    let o = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("shared/oracles/oracle.py"))
        .find(|p| p.exists())?;
    let py = Command::new("python3")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    py.then_some(o)
}

/// Run the oracle on `pcap`; returns the opcode names of all RoCE packets
/// (asserting every ICRC is valid), or None when the oracle is absent.
fn oracle_opcodes(pcap: &Path) -> Option<Vec<String>> {
    let Some(o) = oracle() else {
        eprintln!("oracle.py or python3 missing: skipping the pcap check of {}", pcap.display());
        return None;
    };
    let out =
        Command::new("python3").arg(o).arg("--no-tshark").arg(pcap).output().expect("run oracle");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "oracle rejected {}:\n{text}\n{}",
        pcap.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ops = Vec::new();
    for l in text.lines().filter(|l| l.starts_with('{')) {
        assert!(l.contains("\"icrc_ok\": true"), "{l}");
        let i = l.find("\"opcode_name\": \"").expect("opcode_name") + 16;
        ops.push(l[i..].split('"').next().unwrap_or("").to_string());
    }
    Some(ops)
}

fn pcaps(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("pcap dir").map(|e| e.expect("entry").path()).collect();
    v.sort();
    v
}

fn packets_per_msg(size: usize) -> usize {
    size.div_ceil(1024).max(1)
}

#[test]
fn rc_pingpong_two_processes_with_pcap() {
    let bin = env!("CARGO_BIN_EXE_rc_pingpong");
    let iters = 30;
    for size in [1usize, 1023, 1024, 3 * 1024 + 7] {
        let dir = pcap_dir(&format!("rc{size}"));
        let n = iters.to_string();
        let sz = size.to_string();
        let (s, c) = pair(bin, "rc", "127.0.0.2", "127.0.0.3", &["-c", "-n", &n, "-s", &sz], &dir);
        check_outputs(&s, &c, size, iters, "127.0.0.2", "127.0.0.3", false);
        let files = pcaps(&dir);
        assert_eq!(files.len(), 2, "{files:?}");
        assert!(
            files[0].ends_with("rcc-127.0.0.3.pcap") && files[1].ends_with("rcs-127.0.0.2.pcap")
        );
        for f in &files {
            let Some(ops) = oracle_opcodes(f) else { continue };
            let data = ops.iter().filter(|o| o.starts_with("RC_SEND_")).count();
            let acks = ops.iter().filter(|o| *o == "RC_ACKNOWLEDGE").count();
            // each side sent `iters` messages; both directions are in each capture
            // (>=: a retransmission on a loaded machine adds packets)
            assert!(data >= 2 * iters * packets_per_msg(size), "{size}: {data} data packets");
            assert!(acks >= 1, "no ACKs in {}", f.display());
            assert_eq!(data + acks, ops.len(), "{ops:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn uc_pingpong_two_processes_with_pcap() {
    let bin = env!("CARGO_BIN_EXE_uc_pingpong");
    let iters = 30;
    for size in [1usize, 3 * 1024 + 7] {
        let dir = pcap_dir(&format!("uc{size}"));
        let (n, sz) = (iters.to_string(), size.to_string());
        let (s, c) = pair(bin, "uc", "127.0.0.4", "127.0.0.5", &["-c", "-n", &n, "-s", &sz], &dir);
        check_outputs(&s, &c, size, iters, "127.0.0.4", "127.0.0.5", false);
        for f in pcaps(&dir) {
            let Some(ops) = oracle_opcodes(&f) else { continue };
            assert_eq!(ops.len(), 2 * iters * packets_per_msg(size), "{ops:?}");
            assert!(ops.iter().all(|o| o.starts_with("UC_SEND_")), "{ops:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn ud_pingpong_two_processes_with_pcap() {
    let bin = env!("CARGO_BIN_EXE_ud_pingpong");
    let iters = 30;
    for size in [1usize, 1024] {
        let dir = pcap_dir(&format!("ud{size}"));
        let (n, sz) = (iters.to_string(), size.to_string());
        let (s, c) = pair(bin, "ud", "127.0.0.6", "127.0.0.7", &["-c", "-n", &n, "-s", &sz], &dir);
        check_outputs(&s, &c, size, iters, "127.0.0.6", "127.0.0.7", true);
        for f in pcaps(&dir) {
            let Some(ops) = oracle_opcodes(&f) else { continue };
            assert_eq!(ops.len(), 2 * iters, "{ops:?}");
            assert!(ops.iter().all(|o| o == "UD_SEND_ONLY"), "{ops:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn link_local_gid_is_refused_with_a_hint() {
    let dir = pcap_dir("ll");
    let port = free_port().to_string();
    let bin = env!("CARGO_BIN_EXE_rc_pingpong");
    let cmd = |dev: &str, gid: &str, server: Option<&str>| {
        let mut c = command(bin, &["-d", dev, "-g", gid, "-p", &port, "-n", "1"]);
        c.env("ROCE_EMU_DEVICES", "lls=127.0.0.10,llc=127.0.0.11").args(server);
        c.spawn().expect("spawn")
    };
    let s = cmd("lls", "1", None);
    let c = cmd("llc", "0", Some("127.0.0.10"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let (rc, rs) = (finish(c, deadline), finish(s, deadline));
    assert_eq!(rs.code, Some(1), "{}{}", rs.out, rs.err);
    assert!(rs.err.contains("remote GID fe80::7fff:fe00:b is link-local"), "{}", rs.err);
    assert!(rs.err.ends_with("Couldn't connect to remote QP\n"), "{}", rs.err);
    // the server closed the connection without answering
    assert_eq!(rc.code, Some(1), "{}{}", rc.out, rc.err);
    assert!(rc.err.contains("Couldn't read/write remote address"), "{}", rc.err);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without `-g` the peers exchange zero GIDs: like rxe, the mistake fails at
/// once (the QP cannot reach RTR without a GRH) with a message saying what
/// to do, instead of sending to the TCP peer's address and retrying forever.
#[test]
fn no_gid_fails_at_once_like_rxe() {
    let port = free_port().to_string();
    let bin = env!("CARGO_BIN_EXE_rc_pingpong");
    let cmd = |dev: &str, server: Option<&str>| {
        let mut c = command(bin, &["-d", dev, "-p", &port, "-n", "10"]);
        c.env("ROCE_EMU_DEVICES", "ngs=127.0.0.12,ngc=127.0.0.13").args(server);
        c.spawn().expect("spawn")
    };
    let s = cmd("ngs", None);
    std::thread::sleep(Duration::from_millis(200));
    let c = cmd("ngc", Some("127.0.0.1"));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(30);
    let (rc, rs) = (finish(c, deadline), finish(s, deadline));
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    assert_eq!(rs.code, Some(1), "{}{}", rs.out, rs.err);
    assert!(rs.err.contains("Failed to modify QP to RTR: the peer sent no GID"), "{}", rs.err);
    assert!(rs.err.contains("-g 1"), "{}", rs.err);
    assert_eq!(rc.code, Some(1), "{}{}", rc.out, rc.err);
}

#[test]
fn refused_options_and_sizes() {
    let run = |bin: &str, args: &[&str]| {
        let c =
            command(bin, args).env("ROCE_EMU_DEVICES", "x0=udp:127.0.0.9").spawn().expect("spawn");
        finish(c, Instant::now() + Duration::from_secs(20))
    };
    let r = run(env!("CARGO_BIN_EXE_rc_pingpong"), &["-o"]);
    assert_eq!(r.code, Some(1));
    assert!(r.err.contains("isn't ODP capable"), "{}", r.err);
    let r = run(env!("CARGO_BIN_EXE_rc_pingpong"), &["-t"]);
    assert_eq!(r.code, Some(1));
    assert!(r.err.contains("completion timestamp"), "{}", r.err);
    let r = run(env!("CARGO_BIN_EXE_rc_pingpong"), &["-d", "nosuch"]);
    assert_eq!((r.code, r.err.trim()), (Some(1), "IB device nosuch not found"));
    let r = run(env!("CARGO_BIN_EXE_rc_pingpong"), &["-m", "1000"]);
    assert_eq!(r.code, Some(1));
    let r = run(env!("CARGO_BIN_EXE_ud_pingpong"), &["-s", "1025"]);
    assert_eq!((r.code, r.err.trim()), (Some(1), "Requested size larger than port MTU (1024)"));
    let r = run(env!("CARGO_BIN_EXE_rc_pingpong"), &["-g", "7"]);
    assert_eq!((r.code, r.err.trim()), (Some(1), "can't read sgid of index 7"));
}

/// A field of one oracle JSON line (numbers and strings; no nesting).
fn json_field<'a>(line: &'a str, key: &str) -> &'a str {
    let pat = format!("\"{key}\": ");
    let i = line.find(&pat).unwrap_or_else(|| panic!("no {key} in {line}")) + pat.len();
    line[i..].split([',', '}']).next().unwrap_or("").trim().trim_matches('"')
}

/// The packets of a two-party capture as (who, opcode, AckReq, payload,
/// UDP length), `who` being C for `client_ip` and S otherwise, with
/// retransmissions (same source, PSN and opcode seen before) removed.
/// (who, opcode, AckReq, payload length, UDP length).
type Pkt = (char, String, String, String, String);

fn sequence(pcap: &Path, client_ip: &str) -> Option<Vec<Pkt>> {
    let o = oracle()?;
    let out = Command::new("python3").arg(o).arg("--no-tshark").arg(pcap).output().expect("oracle");
    assert!(out.status.success(), "oracle rejected {}", pcap.display());
    let mut seen = std::collections::HashSet::new();
    let mut v = Vec::new();
    for l in String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with('{')) {
        let (src, psn, op) =
            (json_field(l, "src"), json_field(l, "psn"), json_field(l, "opcode_name"));
        if !seen.insert((src.to_string(), psn.to_string(), op.to_string())) {
            continue;
        }
        let who = if src == client_ip { 'C' } else { 'S' };
        let f = |k| json_field(l, k).to_string();
        v.push((who, op.to_string(), f("ackreq"), f("payload_len"), f("udp_len")));
    }
    Some(v)
}

/// Our tools, run with the parameters of the rxe captures in
/// shared/captures (`-g 1 -n 20`, UD `-s 1024`), put the same packets on
/// the wire in the same order as rxe + rdma-core did (retransmissions in
/// rxe's captures set aside).
#[test]
fn same_packet_sequence_as_rxe_captures() {
    let Some(captures) = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("shared/captures"))
        .find(|p| p.join("rc_pingpong.pcap").exists())
    else {
        eprintln!("shared/captures missing: skipping");
        return;
    };
    let cases = [
        (env!("CARGO_BIN_EXE_rc_pingpong"), "rc_pingpong.pcap", &["-n", "20"][..]),
        (env!("CARGO_BIN_EXE_uc_pingpong"), "uc_pingpong.pcap", &["-n", "20"][..]),
        (env!("CARGO_BIN_EXE_ud_pingpong"), "ud_pingpong.pcap", &["-n", "20", "-s", "1024"][..]),
    ];
    for (bin, golden, args) in cases {
        let Some(want) = sequence(&captures.join(golden), "192.168.77.3") else {
            eprintln!("oracle missing: skipping");
            return;
        };
        let dir = pcap_dir(&format!("golden-{golden}"));
        let (s, c) = pair(bin, "gd", "127.0.0.12", "127.0.0.13", args, &dir);
        assert_eq!((s.code, c.code), (Some(0), Some(0)), "{}{}{}{}", s.out, s.err, c.out, c.err);
        let ours = pcaps(&dir)
            .into_iter()
            .find(|p| p.to_string_lossy().contains("gdc-"))
            .expect("client pcap");
        let got = sequence(&ours, "127.0.0.13").expect("oracle");
        assert_eq!(got.len(), want.len(), "{golden}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{golden}: packet {i} differs");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn srq_pingpong_two_processes_with_pcap() {
    let bin = env!("CARGO_BIN_EXE_srq_pingpong");
    let (qps, iters, size) = (4usize, 40usize, 2000usize);
    let dir = pcap_dir("srq");
    let (q, n, sz) = (qps.to_string(), iters.to_string(), size.to_string());
    let args = ["-c", "-q", &q, "-r", "16", "-n", &n, "-s", &sz];
    let (s, c) = pair(bin, "sq", "127.0.0.14", "127.0.0.15", &args, &dir);
    assert_eq!(s.code, Some(0), "server failed:\n{}\n{}", s.out, s.err);
    assert_eq!(c.code, Some(0), "client failed:\n{}\n{}", c.out, c.err);
    // one local and one remote line per QP, each side's remote lines are
    // the other's local lines in order
    let lines = |out: &str, which: &str| -> Vec<String> {
        out.lines().filter(|l| l.starts_with(which)).map(|l| l[which.len()..].to_string()).collect()
    };
    for (a, b) in [(&s, &c), (&c, &s)] {
        let local = lines(&a.out, "  local address:  ");
        assert_eq!(local.len(), qps, "{}", a.out);
        assert_eq!(local, lines(&b.out, "  remote address: "));
        for l in &local {
            assert!(
                l.starts_with("LID 0x0000, QPN 0x") && l.contains(", GID ::ffff:127.0.0.1"),
                "{l}"
            );
        }
        let bytes = format!("{} bytes in ", size * iters * 2);
        assert!(
            a.out.lines().any(|l| l.starts_with(&bytes) && l.ends_with(" Mbit/sec")),
            "{}",
            a.out
        );
        let it = format!("{iters} iters in ");
        assert!(
            a.out.lines().any(|l| l.starts_with(&it) && l.ends_with(" usec/iter")),
            "{}",
            a.out
        );
        assert!(!a.out.contains("invalid data"), "{}", a.out);
        assert_eq!(a.out.lines().count(), 2 * qps + 2, "{}", a.out);
    }
    // distinct QPNs on each side
    let mut qpns = lines(&s.out, "  local address:  ");
    qpns.sort();
    qpns.dedup();
    assert_eq!(qpns.len(), qps);
    for f in pcaps(&dir) {
        let Some(ops) = oracle_opcodes(&f) else { continue };
        let data = ops.iter().filter(|o| o.starts_with("RC_SEND_")).count();
        let acks = ops.iter().filter(|o| *o == "RC_ACKNOWLEDGE").count();
        // both sides sent at least `iters` messages of 2 packets each
        assert!(data >= 2 * iters * packets_per_msg(size), "{data} data packets");
        assert!(acks >= 1);
        assert_eq!(data + acks, ops.len(), "{ops:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn srq_pingpong_refuses_too_few_receives() {
    let c = command(env!("CARGO_BIN_EXE_srq_pingpong"), &["-q", "8", "-r", "4"])
        .env("ROCE_EMU_DEVICES", "x1=udp:127.0.0.16")
        .spawn()
        .expect("spawn");
    let r = finish(c, Instant::now() + Duration::from_secs(20));
    assert_eq!(r.code, Some(1));
    assert_eq!(
        r.err.trim(),
        "rx_depth 4 is too small for 8 QPs -- must have at least one receive per QP."
    );
}

/// Under loss both ways, `rc_pingpong -c --linger 1` finishes on both
/// sides with every received message checked: the side that finishes
/// first keeps ACKing a retransmitted last message for a second (without
/// it the other side can retry forever; seen in `scripts/soak.sh
/// sockets`). Seeds chosen so that losses hit: the fault counters show it.
#[test]
fn rc_pingpong_under_loss_with_linger_ends_on_both_sides() {
    let bin = env!("CARGO_BIN_EXE_rc_pingpong");
    let dir = pcap_dir("linger");
    for seed in [3, 4] {
        let faults = format!("loss=0.15,dup=0.05,reorder=0.05,dir=both,seed={seed}");
        let (s, c) = pair(
            bin,
            "lg",
            "127.0.0.18",
            "127.0.0.19",
            &["-c", "-n", "20", "-s", "2048", "--linger", "1", "--faults", &faults],
            &dir,
        );
        check_outputs(&s, &c, 2048, 20, "127.0.0.18", "127.0.0.19", false);
        for r in [&s, &c] {
            assert!(r.err.contains("roce faults"), "{}", r.err);
            assert!(
                r.err.contains("rx_dropped=") && !r.err.contains("rx_dropped=0 tx_dropped=0"),
                "{}",
                r.err
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
