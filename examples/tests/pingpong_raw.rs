//! `rc_pingpong` as two processes over the RAW transport: server and client
//! each run in a network namespace this test creates (`rocepp-{s,c}-PID`),
//! joined by a veth pair (`vps` 10.77.0.1/24, `vpc` 10.77.0.2/24), each
//! with an emulated device on its end of the veth (`ROCE_EMU_DEVICES=...=
//! raw:IFNAME:ADDR`). The out-of-band TCP exchange crosses the same veth.
//!
//! Checks: both exit 0, print each other's QPN/PSN/GID, `-c` finds the data
//! intact, both devices' pcaps hold the expected RC_SEND_*/ACK traffic with
//! a valid ICRC on every frame (our decoder always; `oracle.py` as well when
//! python3 and `shared/oracles` exist), and no ICMP error was sent.
//!
//! Needs root (namespaces, CAP_NET_RAW) and `ip`; otherwise it prints
//! `SKIPPED: ...` and passes without checking anything.

use crate::common;
use crate::netns;
use common::{command, finish, Run};
use netns::Netns;

use roce_packet::frame::parse_frame;
use roce_packet::ROCE_V2_PORT;
use roce_pcap::read_capture_file;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SRV: &str = "10.77.0.1";
const CLI: &str = "10.77.0.2";

/// The two namespaces (`rocepp-{s,c}-PID`, veth `vps`/`vpc`); deleted on
/// drop, even when the test fails.
fn netns() -> Option<Netns> {
    let pid = std::process::id();
    let names = [format!("rocepp-s-{pid}"), format!("rocepp-c-{pid}")];
    Netns::create(names, ["vps", "vpc"], Some((&format!("{SRV}/24"), &format!("{CLI}/24"))))
}

/// Server in namespace `s`, client in `c`, pcaps in `dir`.
fn pair(ns: &Netns, args: &[&str], dir: &Path, port: u16) -> (Run, Run) {
    let bin = env!("CARGO_BIN_EXE_rc_pingpong");
    let devices = format!("pps=raw:vps:{SRV},ppc=raw:vpc:{CLI}");
    let port = port.to_string();
    let spawn = |n: &str, dev: &str, server: Option<&str>| {
        let mut c = command("ip", &["netns", "exec", n, bin, "-d", dev, "-g", "1", "-p", &port]);
        c.env("ROCE_EMU_DEVICES", &devices).env("ROCE_EMU_PCAP", dir).args(args).args(server);
        c.spawn().expect("spawn rc_pingpong")
    };
    let s = spawn(&ns.a, "pps", None);
    let c = spawn(&ns.b, "ppc", Some(SRV));
    let deadline = Instant::now() + Duration::from_secs(60);
    let rc = finish(c, deadline);
    let rs = finish(s, deadline);
    (rs, rc)
}

/// (QPN, GID) of the "  local address:" or "  remote address:" line.
fn addr(out: &str, which: &str) -> (String, String) {
    let l = out.lines().find(|l| l.starts_with(which)).unwrap_or_else(|| panic!("{out}"));
    let qpn = l.split("QPN ").nth(1).and_then(|x| x.split(',').next()).unwrap_or("");
    let gid = l.rsplit("GID ").next().unwrap_or("");
    (qpn.to_string(), gid.to_string())
}

/// Opcode names of every RoCE frame in `pcap` (each with a valid ICRC), and
/// the number of non-RoCE IP frames (ICMP errors would show up here).
fn decode(pcap: &Path) -> (Vec<String>, usize) {
    let frames = read_capture_file(pcap).unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
    let mut ops = Vec::new();
    let mut other = 0;
    for f in &frames {
        match parse_frame(f.linktype, &f.data, ROCE_V2_PORT) {
            Ok(Some(dgrams)) => {
                for d in dgrams {
                    assert!(d.icrc_ok(), "bad ICRC in frame {} of {}", f.number, pcap.display());
                    let pkt = d.packet().unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
                    ops.push(pkt.opcode().name());
                }
            }
            _ => other += 1,
        }
    }
    (ops, other)
}

/// `oracle.py --no-tshark` on `pcap` when python3 and the oracle exist.
fn oracle_ok(pcap: &Path) -> Option<bool> {
    let o = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("shared/oracles/oracle.py"))
        .find(|p| p.exists())?;
    let out = Command::new("python3").arg(o).arg("--no-tshark").arg(pcap).output().ok()?;
    Some(out.status.success())
}

#[test]
fn rc_pingpong_two_processes_over_raw_veth() {
    let Some(ns) = netns() else { return };
    let iters = 20;
    for (i, size) in [1usize, 1023, 1024, 3 * 1024 + 7].into_iter().enumerate() {
        let dir: PathBuf =
            std::env::temp_dir().join(format!("roce-pp-raw-{size}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let (n, sz) = (iters.to_string(), size.to_string());
        let (s, c) = pair(&ns, &["-c", "-n", &n, "-s", &sz], &dir, 18_500 + i as u16);
        for (who, r) in [("server", &s), ("client", &c)] {
            assert_eq!(r.code, Some(0), "{who} ({size} B) failed:\n{}\n{}", r.out, r.err);
            assert!(!r.out.contains("invalid data"), "{}", r.out);
            let bytes = format!("{} bytes in ", size * iters * 2);
            assert!(r.out.lines().any(|l| l.starts_with(&bytes)), "{}", r.out);
            assert!(r.out.lines().any(|l| l.starts_with(&format!("{iters} iters in "))));
        }
        let (sq, sg) = addr(&s.out, "  local address:  ");
        let (cq, cg) = addr(&c.out, "  local address:  ");
        assert_eq!(
            (sg.as_str(), cg.as_str()),
            (&*format!("::ffff:{SRV}"), &*format!("::ffff:{CLI}"))
        );
        assert_eq!(addr(&c.out, "  remote address: "), (sq, sg));
        assert_eq!(addr(&s.out, "  remote address: "), (cq, cg));

        let mut files: Vec<PathBuf> =
            std::fs::read_dir(&dir).expect("pcaps").map(|e| e.expect("entry").path()).collect();
        files.sort();
        assert_eq!(files.len(), 2, "one pcap per device: {files:?}");
        for f in &files {
            let (ops, other) = decode(f);
            let data = ops.iter().filter(|o| o.starts_with("RC_SEND_")).count();
            let acks = ops.iter().filter(|o| o.as_str() == "RC_ACKNOWLEDGE").count();
            // both directions are in each device's capture (>=: retransmissions)
            assert!(data >= 2 * iters * size.div_ceil(1024), "{size} B: {data} data in {f:?}");
            assert!(acks >= 1, "no ACK in {f:?}");
            assert_eq!(data + acks, ops.len(), "{ops:?}");
            assert_eq!(other, 0, "non-RoCE frames (ICMP?) in {f:?}");
            match oracle_ok(f) {
                Some(ok) => assert!(ok, "oracle.py rejected {}", f.display()),
                None => {
                    eprintln!("oracle.py or python3 missing: {} checked by us only", f.display())
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
