//! Two real HCAs (the sans-IO core) over UDP on 127.1.20.2 / 127.1.20.3,
//! port 4791, each driven by its own driver thread: RC SEND and RDMA WRITE
//! with the data verified, large messages going out with GSO.

use roce_emulator::*;
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

fn side(name: &str, ip: IpAddr, seed: u64) -> Side {
    let mut cfg = HcaConfig::new(name, ip, seed);
    cfg.active_mtu = PathMtu::Mtu4096; // loopback: 64 KiB link MTU
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(1024).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = hca.reg_mr(pd, 1 << 20, access).unwrap();
    let qpn = hca
        .create_qp(QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type: QpType::Rc,
            cap: QpCap {
                max_send_wr: 256,
                max_recv_wr: 256,
                max_send_sge: 2,
                max_recv_sge: 2,
                max_inline_data: 64,
            },
            sq_sig_all: true,
            srq: None,
        })
        .unwrap();
    // RoCE peers send to port 4791: these unique loopback addresses have it free.
    let t = UdpTransport::bind(UdpConfig::on(ip)).expect("bind port 4791");
    let hca = Arc::new(Mutex::new(hca));
    let h = NodeThread::spawn(hca.clone(), t).unwrap();
    Side { hca, h, cq, mr, qpn }
}

fn connect(s: &Side, peer_ip: IpAddr, peer_qpn: roce_packet::Qpn, sq_psn: u32, rq_psn: u32) {
    let mut hca = s.hca.lock().unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    hca.modify_qp(
        s.qpn,
        &QpAttr::new().state(QpState::Init).pkey_index(0).port(1).access_flags(access),
    )
    .unwrap();
    hca.modify_qp(
        s.qpn,
        &QpAttr::new()
            .state(QpState::Rtr)
            .ah(AhAttr::new(peer_ip))
            .mtu(PathMtu::Mtu4096)
            .dest_qpn(peer_qpn.value())
            .rq_psn(rq_psn)
            .max_dest_rd_atomic(4)
            .min_rnr_timer(1),
    )
    .unwrap();
    hca.modify_qp(
        s.qpn,
        &QpAttr::new()
            .state(QpState::Rts)
            .sq_psn(sq_psn)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .max_rd_atomic(4),
    )
    .unwrap();
}

/// Wait for `n` completions on `s`'s CQ (bounded).
fn completions(s: &Side, n: usize, limit: Duration) -> Vec<WorkCompletion> {
    let end = StdInstant::now() + limit;
    let mut out = Vec::new();
    let mut seen = s.h.progress();
    while out.len() < n && StdInstant::now() < end {
        out.extend(s.hca.lock().unwrap().poll_cq(s.cq, 64).unwrap());
        if out.len() < n {
            seen = s.h.wait_for_progress(seen, Duration::from_millis(20));
        }
    }
    out
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed)).collect()
}

#[test]
fn send_and_rdma_write_between_two_hcas_over_udp() {
    let ia: IpAddr = "127.1.20.2".parse().unwrap();
    let ib: IpAddr = "127.1.20.3".parse().unwrap();
    let a = side("udp-a", ia, 1);
    let b = side("udp-b", ib, 2);
    connect(&a, ib, b.qpn, 0x100, 0x200);
    connect(&b, ia, a.qpn, 0x200, 0x100);

    // SEND of 3 * 4096 + 100 bytes into a posted receive.
    let msg = pattern(3 * 4096 + 100, 7);
    {
        let mut hb = b.hca.lock().unwrap();
        hb.post_recv(b.qpn, RecvWr::new(11, b.mr.addr + 4096, 64 * 1024, b.mr.lkey)).unwrap();
    }
    {
        let mut ha = a.hca.lock().unwrap();
        ha.mr_write(a.mr.handle, 0, &msg).unwrap();
        let wr = SendWr::new(1, WrOpcode::Send).sge(a.mr.addr, msg.len() as u32, a.mr.lkey);
        ha.post_send(a.qpn, wr).unwrap();
    }
    a.h.notify();
    let wb = completions(&b, 1, Duration::from_secs(10));
    assert_eq!(wb.len(), 1, "receive completion");
    assert_eq!((wb[0].wr_id, wb[0].status, wb[0].opcode), (11, WcStatus::Success, WcOpcode::Recv));
    assert_eq!(wb[0].byte_len as usize, msg.len());
    let mut got = vec![0u8; msg.len()];
    b.hca.lock().unwrap().mr_read(b.mr.handle, 4096, &mut got).unwrap();
    assert_eq!(got, msg);
    let wa = completions(&a, 1, Duration::from_secs(10));
    assert_eq!((wa[0].wr_id, wa[0].status, wa[0].opcode), (1, WcStatus::Success, WcOpcode::Send));

    // RDMA WRITE of 64 KiB + 3 bytes (17 packets: a GSO run of full MTUs).
    let data = pattern(64 * 1024 + 3, 99);
    {
        let mut ha = a.hca.lock().unwrap();
        ha.mr_write(a.mr.handle, 100_000, &data).unwrap();
        let wr = SendWr::new(2, WrOpcode::RdmaWrite)
            .sge(a.mr.addr + 100_000, data.len() as u32, a.mr.lkey)
            .remote(b.mr.addr + 500_000, b.mr.rkey);
        ha.post_send(a.qpn, wr).unwrap();
    }
    a.h.notify();
    let wa = completions(&a, 1, Duration::from_secs(10));
    assert_eq!(wa.len(), 1);
    assert_eq!(
        (wa[0].wr_id, wa[0].status, wa[0].opcode),
        (2, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    let mut got = vec![0u8; data.len()];
    b.hca.lock().unwrap().mr_read(b.mr.handle, 500_000, &mut got).unwrap();
    assert_eq!(got, data);

    let (ca, cb) = (a.h.counters(), b.h.counters());
    assert_eq!(cb.icrc_bad + ca.icrc_bad, 0);
    assert_eq!(cb.icrc_ok_solved_id + ca.icrc_ok_solved_id, 0, "our own peers: exact checks only");
    assert!(cb.dgrams_in >= 4 + 17, "{cb:?}");
    assert!(ca.gso_sends >= 1, "full-MTU runs leave with GSO: {ca:?}");
    assert_eq!(ca.send_errors + cb.send_errors, 0);
    let (ka, kb) = (a.hca.lock().unwrap().counters(), b.hca.lock().unwrap().counters());
    assert_eq!(ka.icrc_err + kb.icrc_err, 0, "the core's own exact ICRC check passes");
    assert_eq!(kb.rcvd_pkts, cb.dgrams_in);
}
