//! The fault injector on the real UDP transport (`roce_transport::faults`):
//! two devices on loopback, one of them behind a `FaultyTransport`; RC
//! WRITEs and SENDs complete through loss, duplication, reordering and
//! corruption, every byte arrives, and the counters show the faults and
//! the recovery.

use crate::common;
use common::{connect_qps, rc_qp};
use roce_host::{DeviceConfig, EngineDriver};
use roce_transport::faults::{FaultCounters, FaultSpec, FaultyTransport};
use roce_transport::{EngineConfig, UdpConfig, UdpTransport};
use roce_verbs_api::{
    AccessFlags, Budget, ConnectOptions, Context, Counters, Device, RecvWr, SendWr, WcStatus,
    WrOpcode,
};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A UDP device at `addr` whose transport injects `spec`.
fn faulty_device(name: &str, addr: IpAddr, spec: FaultSpec) -> (Device, Arc<FaultCounters>) {
    let cfg = DeviceConfig::udp(name, addr);
    let hca = Arc::new(Mutex::new(roce_verbs_api::Hca::new(cfg.hca_config())));
    let t = UdpTransport::bind(UdpConfig::new(SocketAddr::new(addr, 4791))).expect("bind");
    let t = FaultyTransport::new(t, spec, name);
    let counters = t.fault_counters();
    let ec = EngineConfig { max_idle: Duration::from_millis(5), ..Default::default() };
    let drv = Arc::new(EngineDriver::new(vec![(hca.clone(), t)], ec, "udp").expect("engine"));
    (Device::new(hca, drv), counters)
}

fn addr(n: u8, host: u8) -> IpAddr {
    let third = (std::process::id() % 200) as u8 + 20;
    format!("127.{}.{third}.{host}", 90 + n).parse().unwrap()
}

fn get(c: &FaultCounters, name: &str) -> u64 {
    c.pairs().into_iter().find(|(k, _)| *k == name).map(|(_, v)| v).unwrap()
}

struct Run {
    a: Context,
    b: Context,
    fa: Arc<FaultCounters>,
    fb: Arc<FaultCounters>,
}

/// `msgs` RDMA WRITEs of `len` bytes then `msgs` SENDs from A to B, with
/// A's and B's transports injecting the given faults; checks every byte.
fn transfer(n: u8, sa: FaultSpec, sb: FaultSpec, msgs: u64, len: u32) -> Run {
    let (da, fa) = faulty_device("fa", addr(n, 2), sa);
    let (db, fb) = faulty_device("fb", addr(n, 3), sb);
    let (a, b) = (da.open(), db.open());
    let ((pa, ca, qa), (pb, cb, qb)) = (rc_qp(&a, 256), rc_qp(&b, 256));
    // a short retransmit timer (4.096 us * 2^10 = 4 ms) keeps the test fast
    let opts = ConnectOptions { timeout: 10, ..ConnectOptions::default() };
    connect_qps(&qa, &qb, 0x10, 0xfffff0, &opts);
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let total = (msgs * u64::from(len)) as usize;
    let src = pa.reg_mr(total, acc).unwrap();
    let dst = pb.reg_mr(total, acc).unwrap();
    let rcv = pb.reg_mr(total, acc).unwrap();
    let data: Vec<u8> = (0..total as u64).map(|i| (i * 131 + i / 977) as u8).collect();
    src.write(0, &data).unwrap();
    for i in 0..msgs {
        let o = i * u64::from(len);
        qb.post_recv(RecvWr::new(1000 + i, rcv.addr() + o, len, rcv.lkey())).unwrap();
    }
    let budget = Budget { events: 0, wall: Duration::from_secs(60) };
    for i in 0..msgs {
        let o = i * u64::from(len);
        let w = SendWr::new(i, WrOpcode::RdmaWrite)
            .sge(src.addr() + o, len, src.lkey())
            .remote(dst.addr() + o, dst.rkey());
        qa.post_send(w).unwrap();
        let s = SendWr::new(5000 + i, WrOpcode::Send).sge(src.addr() + o, len, src.lkey());
        qa.post_send(s).unwrap();
    }
    let mut done = 0;
    while done < 2 * msgs {
        let wcs = ca.poll_blocking((2 * msgs - done).min(16) as usize, budget).unwrap();
        assert!(!wcs.is_empty(), "A: no completion within 60 s after {done}");
        for wc in wcs {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            done += 1;
        }
    }
    let mut recvd = 0;
    while recvd < msgs {
        let wcs = cb.poll_blocking((msgs - recvd).min(16) as usize, budget).unwrap();
        assert!(!wcs.is_empty(), "B: no receive within 60 s after {recvd}");
        for wc in wcs {
            assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, len), "{wc:?}");
            assert_eq!(wc.wr_id, 1000 + recvd, "receives complete in order");
            recvd += 1;
        }
    }
    assert_eq!(dst.to_vec(), data, "WRITE data");
    assert_eq!(rcv.to_vec(), data, "SEND data");
    Run { a, b, fa, fb }
}

fn spec(s: &str) -> FaultSpec {
    FaultSpec::parse(s).unwrap()
}

fn hca(c: &Context) -> Counters {
    c.counters()
}

#[test]
fn loss_on_both_sides_is_recovered_by_retransmission() {
    let r = transfer(1, spec("loss=0.1,seed=7"), spec("loss=0.1,seed=8"), 40, 3000);
    let (fa, fb) = (&r.fa, &r.fb);
    // A receives ACKs, B receives requests: both lost some
    assert!(get(fa, "rx_dropped") > 0, "{:?}", fa.pairs());
    assert!(get(fb, "rx_dropped") > 0, "{:?}", fb.pairs());
    assert_eq!(get(fa, "tx_dropped") + get(fb, "tx_dropped"), 0, "dir=rx only");
    let (ca, cb) = (hca(&r.a), hca(&r.b));
    // the responder saw gaps (and NAKed them) or the requester timed out
    assert!(cb.out_of_seq_request + ca.retransmit_timeouts > 0, "{ca:?}\n{cb:?}");
    // and every dropped request was sent again
    assert!(ca.sent_pkts > 40 * 2 * 3, "{ca:?}");
    assert_eq!(cb.icrc_err, 0);
}

#[test]
fn transmit_loss_duplicates_and_reordering() {
    let r = transfer(
        2,
        spec("loss=0.05,dup=0.05,reorder=0.05,dir=tx,seed=11"),
        spec("dup=0.1,reorder=0.05,seed=12"),
        40,
        2000,
    );
    let (fa, fb) = (&r.fa, &r.fb);
    assert!(get(fa, "tx_dropped") > 0, "{:?}", fa.pairs());
    assert!(get(fa, "duplicated") + get(fb, "duplicated") > 0);
    assert!(get(fa, "reordered") + get(fb, "reordered") > 0);
    assert_eq!(get(fa, "rx_dropped"), 0, "dir=tx leaves receive alone");
    let cb = hca(&r.b);
    // duplicates reached the responder and were answered as duplicates
    assert!(cb.duplicate_request > 0, "{cb:?}");
}

#[test]
fn corruption_is_caught_by_the_icrc_check() {
    let r = transfer(3, spec("seed=1"), spec("corrupt=0.1,seed=5"), 30, 1500);
    let corrupted = get(&r.fb, "corrupted");
    assert!(corrupted > 0);
    let cb = hca(&r.b);
    // every corrupted datagram was dropped by the core (bad ICRC or header),
    // none was taken as data (the transfer checked every byte)
    assert_eq!(
        cb.icrc_err + cb.malformed + cb.bad_tver + cb.bad_opcode + cb.unknown_qp,
        corrupted,
        "{cb:?}"
    );
    assert_eq!(get(&r.fa, "corrupted"), 0);
    assert!(r.fa.rx_seen.load(Ordering::Relaxed) > 0);
}

#[test]
fn ce_marks_on_the_wire_bring_cnps_and_cut_the_senders_rate() {
    // B's transport marks a fifth of what it receives Congestion
    // Experienced, as a switch's RED queue would: B's notification point
    // answers with CNPs (at most one per 50 µs), A's reaction point cuts
    // its QP's rate, and every byte still arrives
    // (2 %: at 20 % the cuts reach rpg_min_rate, 1 Mb/s, where a packet
    // takes longer than this test's 4 ms transport timer)
    let r = transfer(4, spec("seed=3"), spec("ce=0.02,seed=4"), 40, 3000);
    let marked = get(&r.fb, "ce_marked");
    assert!(marked > 0, "{:?}", r.fb.pairs());
    assert_eq!(get(&r.fa, "ce_marked"), 0);
    let (ca, cb) = (hca(&r.a), hca(&r.b));
    // B receives only A's requests: every mark reached a QP
    assert_eq!(cb.np_ecn_marked_roce_packets, marked, "{cb:?}");
    assert!(cb.np_cnp_sent >= 1 && cb.np_cnp_sent <= marked, "{cb:?}");
    // loopback loses nothing: A handles every CNP (the last may still be
    // on its way when the transfer completes) and acknowledges none
    let mut ca = ca;
    for _ in 0..200 {
        if ca.rp_cnp_handled >= cb.np_cnp_sent {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
        ca = hca(&r.a);
    }
    assert_eq!((ca.rp_cnp_handled, ca.rp_cnp_ignored), (cb.np_cnp_sent, 0), "{ca:?}");
    assert_eq!((ca.np_cnp_sent, cb.rp_cnp_handled), (0, 0));
    assert_eq!(cb.naks_sent, 0, "{cb:?}");
}

#[test]
fn bad_specs_are_refused_by_open() {
    // the environment hook refuses a spec that does not parse; here the
    // parser directly (the environment is process-wide)
    assert!(FaultSpec::parse("loss=1.5").is_err());
    assert!(FaultSpec::parse("loss=0.1,seed=3").unwrap().is_active());
}
