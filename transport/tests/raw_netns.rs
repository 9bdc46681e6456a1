//! The raw transport across a veth pair between two network namespaces this
//! test creates (`roceraw-{a,b}-PID-N`; needs root / CAP_SYS_ADMIN, else each
//! test prints why and passes without checking anything).
//!
//! Each side runs in a thread that `setns`es into its namespace before
//! opening the transport and spawning its driver (threads inherit the
//! namespace, so the driver reads that namespace's neighbour table). The
//! veth is captured with tcpdump when installed: every RoCE frame must carry
//! a valid ICRC (checked here and, when python3 and the oracle exist, by
//! `shared/oracles/oracle.py --no-tshark`) and no ICMP unreachable may appear.

use crate::common;

use common::netns::Netns;
use common::{body, pattern, send_only};
use roce_emulator::{Datagram, Instant as SimInstant, SansIo};
use roce_packet::frame::parse_frame;
use roce_packet::frame::LinkType;
use roce_packet::{IpUdpHeader, UdpEndpoints};
use roce_pcap::read_capture_file;
use roce_transport::raw::neigh::ipv6_upper_checksum;
use roce_transport::{NodeThread, NodeThreadHandle, RawConfig, RawSnapshot, RawTransport};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// The namespace tests run one at a time: each moves real frames through
/// the kernel with timeouts, and running them together on a loaded 2-core
/// machine made neighbour discovery time out.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Create the namespaces (`roceraw-{a,b}-PID-N`, veth `vra`/`vrb`);
/// `addrs` (CIDR) are assigned to `vra`/`vrb` when given. `None` (with a
/// message) when namespaces cannot be made here.
fn netns(addrs: Option<(&str, &str)>) -> Option<Netns> {
    let n = SEQ.fetch_add(1, Ordering::SeqCst);
    let pid = std::process::id();
    let names = [format!("roceraw-a-{pid}-{n}"), format!("roceraw-b-{pid}-{n}")];
    Netns::create(names, ["vra", "vrb"], addrs)
}

/// Run `f` on a thread inside namespace `ns` (threads it spawns stay there).
fn in_ns<R: Send + 'static>(ns: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).expect("netns file");
        nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
    .join()
    .expect("namespace thread")
}

/// tcpdump on `dev` in `ns`, writing `path`; `None` if tcpdump is missing.
struct Capture {
    child: Child,
    path: PathBuf,
}

fn capture(ns: &str, dev: &str, path: &Path) -> Option<Capture> {
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "tcpdump",
            "--immediate-mode",
            "-i",
            dev,
            "-U",
            "-n",
            "-s",
            "0",
            "-w",
        ])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let err = child.stderr.take()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(l) if l.contains("listening on") => {
                return Some(Capture { child, path: path.to_path_buf() })
            }
            Ok(_) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    eprintln!("tcpdump not available or did not start: no capture checks");
    let _ = child.kill();
    let _ = child.wait();
    None
}

impl Capture {
    /// Stop tcpdump (SIGTERM, bounded wait) and return the file path.
    fn stop(mut self) -> PathBuf {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.path.clone();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.path.clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a capture holds.
#[derive(Debug, Default)]
struct Wire {
    roce: usize,
    icrc_bad: usize,
    icmp_unreachable: usize,
    icmp4: usize,
    arp: usize,
    ipv4_ids: Vec<u16>,
    udp6_checksum_bad: usize,
}

fn inspect(path: &Path) -> Wire {
    let mut w = Wire::default();
    for f in read_capture_file(path).expect("read capture") {
        let d = &f.data;
        if d.len() < 14 {
            continue;
        }
        match u16::from_be_bytes([d[12], d[13]]) {
            0x0806 => w.arp += 1,
            0x0800 if d.len() >= 34 && d[23] == 1 => {
                w.icmp4 += 1;
                if d[34] == 3 {
                    w.icmp_unreachable += 1;
                }
            }
            0x86DD if d.len() >= 55 && d[20] == 58 && d[54] == 1 => w.icmp_unreachable += 1,
            _ => {}
        }
        if let Ok(Some(ds)) = parse_frame(LinkType::Ethernet, d, 4791) {
            assert_eq!(ds.len(), 1, "one datagram per wire frame");
            for x in ds {
                w.roce += 1;
                if !x.icrc_ok() {
                    w.icrc_bad += 1;
                }
                if x.ip_version == 4 {
                    w.ipv4_ids.push(x.meta.ipv4_id);
                    assert!(x.meta.dont_fragment && x.meta.ttl == 64, "{:?}", x.meta);
                    assert_eq!(&x.udp_header[6..8], &[0, 0], "IPv4: UDP checksum 0");
                } else {
                    let (IpAddr::V6(s), IpAddr::V6(t)) = (x.endpoints.src, x.endpoints.dst) else {
                        unreachable!()
                    };
                    let mut udp = x.udp_header.to_vec();
                    udp.extend_from_slice(&x.udp_payload);
                    if x.udp_header[6..8] == [0, 0] || ipv6_upper_checksum(&s, &t, 17, &udp) != 0 {
                        w.udp6_checksum_bad += 1;
                    }
                }
            }
        }
    }
    w
}

/// The oracle script, if python3 and the file exist: `ROCE_ORACLE`, else a
/// `shared/oracles/oracle.py` above this crate, else `/work/shared/...`.
fn oracle() -> Option<PathBuf> {
    if Command::new("python3").arg("--version").output().is_err() {
        return None;
    }
    if let Ok(p) = std::env::var("ROCE_ORACLE") {
        return Some(PathBuf::from(p));
    }
    let mut dir = Some(Path::new(crate::CRATE_DIR));
    while let Some(d) = dir {
        let p = d.join("shared/oracles/oracle.py");
        if p.exists() {
            return Some(p);
        }
        dir = d.parent();
    }
    let p = PathBuf::from("/work/shared/oracles/oracle.py");
    p.exists().then_some(p)
}

/// Run the oracle on `pcap`; returns the number of packets it reported, or
/// `None` when it is not available. Panics if it reports a bad ICRC.
fn run_oracle(pcap: &Path) -> Option<usize> {
    let Some(o) = oracle() else {
        eprintln!("python3 or oracle.py missing: oracle check skipped");
        return None;
    };
    let out = Command::new("python3")
        .arg(&o)
        .arg("--no-tshark")
        .arg(pcap)
        .stdin(Stdio::null())
        .output()
        .expect("run oracle");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "oracle rejected {}: {}\n{}",
        pcap.display(),
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(text.lines().filter(|l| l.trim_start().starts_with('{')).count())
}

/// A node that sends a fixed list and records what it receives.
#[derive(Default)]
struct FakeNode {
    tx: VecDeque<Datagram>,
    rx: Vec<Datagram>,
}

impl SansIo for FakeNode {
    fn handle_datagram(&mut self, _now: SimInstant, d: Datagram) {
        self.rx.push(d);
    }
    fn poll_transmit(&mut self, _now: SimInstant) -> Option<Datagram> {
        self.tx.pop_front()
    }
    fn poll_timeout(&self) -> Option<SimInstant> {
        None
    }
    fn handle_timeout(&mut self, _now: SimInstant) {}
}

struct Side {
    node: Arc<Mutex<FakeNode>>,
    h: NodeThreadHandle<RawTransport>,
    raw: Arc<roce_transport::RawCounters>,
    owns: bool,
    discard: bool,
}

fn fake_side(ns: &str, dev: &'static str, ip: IpAddr, pcap: Option<PathBuf>) -> Side {
    in_ns(ns, move || {
        let mut cfg = RawConfig::new(dev, ip);
        // generous neighbour resolution: CI machines are loaded
        cfg.neigh_tries = 25;
        cfg.pcap = pcap;
        let t = RawTransport::open(cfg).expect("open raw transport");
        let (raw, owns, discard) =
            (t.raw_counters(), t.kernel_owns_address(), t.discard_socket_bound());
        let node = Arc::new(Mutex::new(FakeNode::default()));
        let h = NodeThread::spawn(node.clone(), t).expect("driver");
        Side { node, h, raw, owns, discard }
    })
}

/// [`fake_side`] whose transport joined `groups` before its driver starts.
fn fake_side_joined(ns: &str, dev: &'static str, ip: IpAddr, groups: Vec<IpAddr>) -> Side {
    in_ns(ns, move || {
        let mut cfg = RawConfig::new(dev, ip);
        cfg.neigh_tries = 25;
        let mut t = RawTransport::open(cfg).expect("open raw transport");
        for g in &groups {
            t.join_group(*g).expect("join the group");
        }
        assert_eq!(t.groups(), groups);
        let (raw, owns, discard) =
            (t.raw_counters(), t.kernel_owns_address(), t.discard_socket_bound());
        let node = Arc::new(Mutex::new(FakeNode::default()));
        let h = NodeThread::spawn(node.clone(), t).expect("driver");
        Side { node, h, raw, owns, discard }
    })
}

fn wait_rx(s: &Side, n: usize, limit: Duration) -> Vec<Datagram> {
    let end = Instant::now() + limit;
    let mut seen = s.h.progress();
    loop {
        let got = s.node.lock().unwrap().rx.clone();
        if got.len() >= n || Instant::now() >= end {
            return got;
        }
        seen = s.h.wait_for_progress(seen, Duration::from_millis(20));
    }
}

/// Queue `n` SEND_ONLY datagrams from `src` to `dst` (ICRC as the core
/// computes it: identification 0) on `s` and wake its driver.
fn queue(s: &Side, src: IpAddr, dst: IpAddr, n: usize, seed: usize) -> Vec<Datagram> {
    let ep = UdpEndpoints { src, dst, src_port: 0xC123, dst_port: 4791 };
    let v: Vec<Datagram> =
        (0..n).map(|i| send_only(&ep, 0x11, i as u32, &pattern(i + seed, 16 + 60 * i))).collect();
    s.node.lock().unwrap().tx.extend(v.iter().cloned());
    s.h.notify();
    v
}

/// Both directions between fake nodes; checks delivery, real meta, counters
/// and the capture. Returns the raw counters of both sides.
fn exchange(ia: &str, ib: &str, assign: bool, tag: &str) -> Option<(RawSnapshot, RawSnapshot)> {
    let (ia, ib): (IpAddr, IpAddr) = (ia.parse().unwrap(), ib.parse().unwrap());
    let plen = if ia.is_ipv4() { 24 } else { 64 };
    let (ca, cb) = (format!("{ia}/{plen}"), format!("{ib}/{plen}"));
    let ns = netns(assign.then_some((ca.as_str(), cb.as_str())))?;
    let tmp = std::env::temp_dir();
    let wire = tmp.join(format!("roce_raw_{tag}_veth.pcap"));
    let own = tmp.join(format!("roce_raw_{tag}_a.pcap"));
    let cap = capture(&ns.a, "vra", &wire);
    let a = fake_side(&ns.a, "vra", ia, Some(own.clone()));
    let b = fake_side(&ns.b, "vrb", ib, None);
    assert_eq!((a.owns, b.owns), (assign, assign));
    assert_eq!((a.discard, b.discard), (assign, assign), "discard socket only on own addresses");

    let sent_ab = queue(&a, ia, ib, 20, 0);
    let got_b = wait_rx(&b, 20, Duration::from_secs(10));
    let sent_ba = queue(&b, ib, ia, 5, 100);
    let got_a = wait_rx(&a, 5, Duration::from_secs(10));
    assert_eq!(
        got_b.len(),
        20,
        "B received: {:?}\nA {:?} {:?}",
        b.raw.snapshot(),
        a.raw.snapshot(),
        a.h.counters()
    );
    assert_eq!(got_a.len(), 5, "A received: {:?}", a.raw.snapshot());
    for (sent, got, first_id) in [(&sent_ab, &got_b, 1u16), (&sent_ba, &got_a, 1u16)] {
        for (i, (s, g)) in sent.iter().zip(got.iter()).enumerate() {
            assert_eq!(body(&g.payload), body(&s.payload), "datagram {i}");
            assert_eq!(g.endpoints, s.endpoints, "addresses and the core's source port kept");
            assert_eq!((g.meta.ttl, g.meta.dont_fragment), (64, true));
            if ia.is_ipv4() {
                assert_eq!(g.meta.ipv4_id, first_id + i as u16, "a new identification per packet");
            }
            let h = IpUdpHeader::build(&g.endpoints, &g.meta, g.payload.len()).unwrap();
            assert!(h.verify_icrc(&g.payload), "delivered meta verifies the ICRC exactly");
        }
    }
    // Let the drivers drain the discard sockets, then stop them.
    std::thread::sleep(Duration::from_millis(150));
    let (ta, tb) = (a.h.counters(), b.h.counters());
    let (ra, rb) = (a.raw.snapshot(), b.raw.snapshot());
    drop(a);
    drop(b);
    eprintln!("{tag}: A {ta:?}\nA raw {ra:?}\nB {tb:?}\nB raw {rb:?}");
    assert_eq!((ta.dgrams_out, tb.dgrams_out), (20, 5));
    assert_eq!(
        (ta.icrc_recomputed, tb.icrc_recomputed),
        if ia.is_ipv4() { (20, 5) } else { (0, 0) }
    );
    assert_eq!((ta.icrc_ok_exact, tb.icrc_ok_exact), (5, 20));
    assert_eq!(ta.icrc_bad + tb.icrc_bad + ta.send_errors + tb.send_errors, 0);
    assert_eq!((ra.pending_dropped, rb.pending_dropped), (0, 0));
    assert_eq!(ta.pcap_frames, 25, "own recording: 20 sent + 5 received");
    if assign {
        // The kernel delivered its copies to the discard socket (for IPv6
        // this also proves our UDP checksums: it drops bad ones).
        assert_eq!((ra.kernel_copies_discarded, rb.kernel_copies_discarded), (5, 20));
    }
    if let Some(cap) = cap {
        let path = cap.stop();
        let w = inspect(&path);
        eprintln!("{tag}: veth capture {}: {w:?}", path.display());
        assert_eq!(w.roce, 25, "every RoCE frame crossed the veth once");
        assert_eq!(w.icrc_bad, 0);
        assert_eq!(w.icmp_unreachable, 0, "nobody answered RoCE with ICMP unreachable");
        assert_eq!(w.icmp4, 0);
        assert_eq!(w.udp6_checksum_bad, 0);
        if ia.is_ipv4() {
            assert!(w.arp >= 2, "an ARP request and its reply");
            let mut ids = w.ipv4_ids.clone();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), 20, "ids 1..=20 from A, 1..=5 from B: {:?}", w.ipv4_ids);
        }
        if let Some(n) = run_oracle(&path) {
            assert_eq!(n, 25, "oracle packets in the veth capture");
        }
    }
    if let Some(n) = run_oracle(&own) {
        assert_eq!(n, 25, "oracle packets in our own recording");
    }
    Some((ra, rb))
}

#[test]
fn fake_nodes_ipv4_kernel_owned_addresses() {
    let _serial = serial();
    let Some((ra, rb)) = exchange("10.77.0.1", "10.77.0.2", true, "v4") else { return };
    // The kernel owns the addresses: it answers ARP, we do not.
    assert_eq!(ra.arp_replies + rb.arp_replies, 0);
    assert!(ra.arp_requests + ra.neigh_kernel >= 1, "{ra:?}");
    assert!(ra.frames_in >= 5 && rb.frames_in >= 20);
}

#[test]
fn fake_nodes_ipv4_addresses_the_kernel_does_not_own() {
    let _serial = serial();
    let Some((ra, rb)) = exchange("10.77.1.1", "10.77.1.2", false, "v4_unowned") else {
        return;
    };
    // Nobody else answers ARP for these addresses: the transports do.
    assert!(ra.arp_requests >= 1 && rb.arp_replies >= 1, "A {ra:?}\nB {rb:?}");
    assert!(ra.arp_replies_in >= 1, "{ra:?}");
    assert_eq!(ra.neigh_kernel + rb.neigh_kernel, 0);
}

#[test]
fn fake_nodes_ipv6() {
    let _serial = serial();
    let Some((ra, _rb)) = exchange("fd00:77::1", "fd00:77::2", true, "v6") else { return };
    assert!(ra.ns_sent + ra.neigh_kernel >= 1, "{ra:?}");
}

#[test]
fn fake_nodes_ipv6_addresses_the_kernel_does_not_own() {
    let _serial = serial();
    let Some((ra, rb)) = exchange("fd00:78::1", "fd00:78::2", false, "v6_unowned") else {
        return;
    };
    assert!(ra.ns_sent >= 1 && rb.na_sent >= 1 && ra.na_in >= 1, "A {ra:?}\nB {rb:?}");
}

mod hca {
    use super::*;
    use roce_emulator::*;
    use roce_sim::testkit::RcPath;

    pub type HcaSide = common::DrivenSide<RawTransport>;

    pub fn side(ns: &str, dev: &'static str, ip: IpAddr, seed: u64) -> HcaSide {
        in_ns(ns, move || {
            let mut cfg = HcaConfig::new(dev, ip, seed);
            cfg.active_mtu = PathMtu::Mtu1024; // veth MTU 1500
            let t = RawTransport::open({
                let mut c = RawConfig::new(dev, ip);
                c.neigh_tries = 25;
                c
            })
            .expect("open raw transport");
            common::DrivenSide::new(Hca::new(cfg), t, 256, 64)
        })
    }

    pub fn connect(s: &HcaSide, peer: IpAddr, peer_qpn: roce_packet::Qpn, sq: u32, rq: u32) {
        s.connect(peer, peer_qpn, RcPath { sq_psn: sq, rq_psn: rq, ..RcPath::default() });
    }
}

#[test]
fn hca_send_and_rdma_write_over_raw() {
    let _serial = serial();
    let Some(ns) = netns(Some(("10.77.0.1/24", "10.77.0.2/24"))) else { return };
    let (ia, ib): (IpAddr, IpAddr) = ("10.77.0.1".parse().unwrap(), "10.77.0.2".parse().unwrap());
    let wire = std::env::temp_dir().join("roce_raw_hca_veth.pcap");
    let cap = capture(&ns.a, "vra", &wire);
    let a = hca::side(&ns.a, "vra", ia, 1);
    let b = hca::side(&ns.b, "vrb", ib, 2);
    hca::connect(&a, ib, b.qpn, 0x100, 0x200);
    hca::connect(&b, ia, a.qpn, 0x200, 0x100);

    // SEND of 3 * 1024 + 100 bytes (4 packets) into a posted receive.
    let msg = pattern(7, 3 * 1024 + 100);
    a.send_checked(&b, &msg, 8192);

    // RDMA WRITE of 16 KiB + 3 bytes (17 packets).
    a.write_checked(&b, &pattern(99, 16 * 1024 + 3));

    std::thread::sleep(Duration::from_millis(100));
    let (ca, cb) = (a.h.counters(), b.h.counters());
    let (ka, kb) = (a.hca.lock().unwrap().counters(), b.hca.lock().unwrap().counters());
    eprintln!("hca: A {ca:?}\nB {cb:?}\nKA {ka:?}\nKB {kb:?}");
    assert_eq!(ca.icrc_bad + cb.icrc_bad + ca.send_errors + cb.send_errors, 0);
    assert_eq!(ka.icrc_err + kb.icrc_err, 0, "the core's exact ICRC check passes with real ids");
    assert!(ca.dgrams_out >= 4 + 17, "{ca:?}");
    assert_eq!(kb.rcvd_pkts, cb.dgrams_in);
    assert_eq!(ca.dgrams_out, cb.dgrams_in, "nothing lost on the veth");
    drop(a);
    drop(b);
    if let Some(cap) = cap {
        let path = cap.stop();
        let w = inspect(&path);
        eprintln!(
            "hca: veth capture {}: {:?}",
            path.display(),
            (w.roce, w.icrc_bad, w.icmp4, w.arp)
        );
        assert_eq!(w.roce as u64, ca.dgrams_out + cb.dgrams_out);
        assert_eq!((w.icrc_bad, w.icmp_unreachable, w.icmp4), (0, 0, 0));
        if let Some(n) = run_oracle(&path) {
            assert_eq!(n, w.roce, "oracle packets");
        }
    }
}

/// A UDP-socket transport in one namespace and a raw one in the other:
/// both directions interoperate, and garbage sent to port 4791 is counted
/// as a bad ICRC by the raw side, never delivered.
#[test]
fn udp_transport_peer_and_garbage() {
    let _serial = serial();
    use roce_transport::{UdpConfig, UdpTransport};
    let Some(ns) = netns(Some(("10.77.0.1/24", "10.77.0.2/24"))) else { return };
    let (ia, ib): (IpAddr, IpAddr) = ("10.77.0.1".parse().unwrap(), "10.77.0.2".parse().unwrap());
    let (node_a, ha, garbage) = in_ns(&ns.a, move || {
        let t = UdpTransport::bind(UdpConfig::on(ia)).expect("udp transport in namespace a");
        let node = Arc::new(Mutex::new(FakeNode::default()));
        let h = NodeThread::spawn(node.clone(), t).expect("driver");
        let g = std::net::UdpSocket::bind((ia, 0)).expect("garbage socket");
        (node, h, g)
    });
    let b = fake_side(&ns.b, "vrb", ib, None);

    let ep = UdpEndpoints { src: ia, dst: ib, src_port: 0xC123, dst_port: 4791 };
    let sent: Vec<Datagram> = (0..5)
        .map(|i| send_only(&ep, 0x22, i, &pattern(i as usize, 100 + 50 * i as usize)))
        .collect();
    for i in 0..3u8 {
        garbage.send_to(&[i; 60], (ib, 4791)).expect("garbage");
    }
    node_a.lock().unwrap().tx.extend(sent.iter().cloned());
    ha.notify();
    let got = wait_rx(&b, 5, Duration::from_secs(10));
    assert_eq!(got.len(), 5);
    for (s, g) in sent.iter().zip(&got) {
        assert_eq!(body(&g.payload), body(&s.payload));
        assert_eq!(g.meta.ipv4_id, 0, "Linux UDP socket with PMTUDISC_DO: id 0");
        assert!(g.meta.dont_fragment);
    }
    let back = queue(&b, ib, ia, 4, 50);
    let end = Instant::now() + Duration::from_secs(10);
    while node_a.lock().unwrap().rx.len() < 4 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    let got_a = node_a.lock().unwrap().rx.clone();
    assert_eq!(got_a.len(), 4);
    for (s, g) in back.iter().zip(&got_a) {
        assert_eq!(body(&g.payload), body(&s.payload));
    }
    let (ca, cb, rb) = (ha.counters(), b.h.counters(), b.raw.snapshot());
    assert_eq!(cb.icrc_bad, 3, "garbage counted: {cb:?}");
    assert_eq!(cb.icrc_ok_exact, 5);
    // Ids 1, 2, 3, 4 from the raw side: the first is solved, the rest are prev + 1.
    assert_eq!((ca.icrc_ok_solved_id, ca.icrc_ok_exact, ca.icrc_bad), (1, 3, 0), "{ca:?}");
    assert!(rb.frames_in >= 8, "{rb:?}");
}

/// A raw device that joined a multicast group (issue 39): the interface is
/// a member in the kernel (IGMP), the group's frames (to 01:00:5e:..)
/// reach it with their bytes, a group it did not join does not.
#[test]
fn multicast_frames_reach_the_devices_that_joined_only() {
    let _serial = serial();
    let Some(ns) = netns(Some(("10.77.5.1/24", "10.77.5.2/24"))) else { return };
    let (ia, ib): (IpAddr, IpAddr) = ("10.77.5.1".parse().unwrap(), "10.77.5.2".parse().unwrap());
    let group: IpAddr = "239.77.5.9".parse().unwrap();
    let other: IpAddr = "239.77.5.10".parse().unwrap();
    let wire = std::env::temp_dir().join("roce_raw_mcast_veth.pcap");
    let cap = capture(&ns.a, "vra", &wire);
    let a = fake_side(&ns.a, "vra", ia, None);
    let b = fake_side_joined(&ns.b, "vrb", ib, vec![group]);
    // /proc/net/igmp prints the group as the hex of its bytes read as a
    // little-endian word
    let igmp =
        in_ns(&ns.b, || std::fs::read_to_string("/proc/thread-self/net/igmp").unwrap_or_default());
    assert!(igmp.contains("09054DEF"), "vrb is a member of {group}:\n{igmp}");
    let sent = queue(&a, ia, group, 5, 3);
    let got = wait_rx(&b, 5, Duration::from_secs(10));
    assert_eq!(got.len(), 5, "every datagram to the group");
    for (s, g) in sent.iter().zip(&got) {
        // (the ICRC is resealed for the transport's IPv4 identification;
        // the receiver checked it)
        let n = s.payload.len() - 4;
        assert_eq!(g.payload[..n], s.payload[..n], "the bytes");
        assert_eq!((g.endpoints.src, g.endpoints.dst), (ia, group));
    }
    assert_eq!(b.h.counters().mcast_in, 5);
    let before = b.raw.snapshot().not_ours;
    queue(&a, ia, other, 3, 9);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(b.node.lock().unwrap().rx.len(), 5, "nothing from a group not joined");
    assert!(b.raw.snapshot().not_ours >= before + 3, "counted as not ours");
    if let Some(c) = cap {
        let path = c.stop();
        let frames = roce_pcap::read_capture_file(&path).expect("read the veth capture");
        let to_group: Vec<_> = frames
            .iter()
            .filter(|f| f.data.len() > 34 && f.data[12..14] == [0x08, 0x00] && f.data[30] == 239)
            .collect();
        assert_eq!(to_group.len(), 8, "5 + 3 frames to the groups on the veth");
        assert!(to_group[..5].iter().all(|f| f.data[..6] == [0x01, 0x00, 0x5e, 0x4d, 0x05, 0x09]));
    }
}
