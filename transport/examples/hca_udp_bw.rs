//! RDMA WRITE bandwidth between two emulated HCAs over real UDP sockets
//! (127.0.0.2 -> 127.0.0.3, port 4791, one driver thread each).
//!
//! `cargo run --release -p roce-transport --example hca_udp_bw -- [seconds] [msg bytes] [depth] [gso 0/1]`

use roce_emulator::*;
use roce_sim::testkit::{qp_cap, qp_init, rc_connect, RcPath};
use roce_transport::{NodeThread, NodeThreadHandle, UdpConfig, UdpTransport};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

struct Side {
    hca: Arc<Mutex<Hca>>,
    h: NodeThreadHandle,
    cq: CqHandle,
    mr: MrInfo,
    qpn: roce_packet::Qpn,
}

const ACCESS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_READ.0,
);

fn side(name: &str, ip: IpAddr, seed: u64, mr_len: usize, gso: bool) -> Side {
    let mut cfg = HcaConfig::new(name, ip, seed);
    cfg.active_mtu = PathMtu::Mtu4096;
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().expect("pd");
    let cq = hca.create_cq(4096).expect("cq");
    let mr = hca.reg_mr(pd, mr_len, ACCESS).expect("mr");
    let qpn = hca.create_qp(qp_init(pd, cq, QpType::Rc, qp_cap(512, 16), true)).expect("qp");
    let mut uc = UdpConfig::on(ip);
    uc.gso = gso;
    let t = UdpTransport::bind(uc).expect("bind port 4791");
    let hca = Arc::new(Mutex::new(hca));
    let h = NodeThread::spawn(hca.clone(), t).expect("driver");
    Side { hca, h, cq, mr, qpn }
}

fn connect(s: &Side, peer: IpAddr, peer_qpn: roce_packet::Qpn, sq: u32, rq: u32) {
    let path = RcPath {
        access: ACCESS,
        mtu: PathMtu::Mtu4096,
        sq_psn: sq,
        rq_psn: rq,
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        ..RcPath::default()
    };
    rc_connect(&mut s.hca.lock().expect("lock"), s.qpn, peer, peer_qpn.value(), &path)
        .expect("INIT/RTR/RTS");
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let secs: f64 = a.get(1).and_then(|v| v.parse().ok()).unwrap_or(2.0);
    let msg: usize = a.get(2).and_then(|v| v.parse().ok()).unwrap_or(1 << 20);
    let depth: usize = a.get(3).and_then(|v| v.parse().ok()).unwrap_or(8);
    let gso = a.get(4).map(|v| v != "0").unwrap_or(true);
    let ia: IpAddr = "127.0.0.2".parse().expect("ip");
    let ib: IpAddr = "127.0.0.3".parse().expect("ip");
    let sa = side("bw-a", ia, 1, msg, gso);
    let sb = side("bw-b", ib, 2, msg, gso);
    connect(&sa, ib, sb.qpn, 0, 0);
    connect(&sb, ia, sa.qpn, 0, 0);
    let start = StdInstant::now();
    let end = start + Duration::from_secs_f64(secs);
    let (mut posted, mut done, mut errors) = (0u64, 0u64, 0u64);
    let mut seen = sa.h.progress();
    while StdInstant::now() < end || posted > done {
        {
            let mut h = sa.hca.lock().expect("lock");
            for wc in h.poll_cq(sa.cq, 64).unwrap_or_default() {
                done += 1;
                if wc.status != WcStatus::Success {
                    errors += 1;
                }
            }
            while StdInstant::now() < end && posted - done < depth as u64 {
                let wr = SendWr::new(posted, WrOpcode::RdmaWrite)
                    .sge(sa.mr.addr, msg as u32, sa.mr.lkey)
                    .remote(sb.mr.addr, sb.mr.rkey);
                if h.post_send(sa.qpn, wr).is_err() {
                    break;
                }
                posted += 1;
            }
        }
        sa.h.notify();
        seen = sa.h.wait_for_progress(seen, Duration::from_millis(5));
        if StdInstant::now() > end + Duration::from_secs(10) {
            eprintln!("gave up waiting for {} completions", posted - done);
            break;
        }
    }
    let el = start.elapsed().as_secs_f64();
    let gb = (done * msg as u64) as f64 / el / 1e9;
    println!("RDMA WRITE {msg} B x {done} in {el:.2} s, depth {depth}, gso {gso}: {gb:.3} GB/s, {errors} errors");
    let (ca, cb) = (sa.h.counters(), sb.h.counters());
    println!(
        "a: out {} dgrams / {} syscalls, gso sends {}; in {}",
        ca.dgrams_out, ca.send_syscalls, ca.gso_sends, ca.dgrams_in
    );
    println!("b: in {} dgrams / {} recv syscalls, gro coalesced {}; out {}; icrc exact {} solved {} bad {}",
        cb.dgrams_in, cb.recv_syscalls, cb.gro_coalesced, cb.dgrams_out, cb.icrc_ok_exact, cb.icrc_ok_solved_id, cb.icrc_bad);
    let kb = sb.hca.lock().expect("lock").counters();
    let ka = sa.hca.lock().expect("lock").counters();
    println!("core a: {ka:?}");
    println!("core b: {kb:?}");
}
