//! The SRQ handle and the UC/UD helpers of the verbs API on the simulated
//! fabric.

use crate::common;
use common::{connect_qps, two_contexts, uc_pair, ACCESS};
use roce_sim::SimNet;
use roce_verbs_api::{
    create_ah, ud_send, ConnectOptions, DestroyError, QpType, RecvWr, SendWr, WcOpcode, WcStatus,
    WrOpcode, DEFAULT_QKEY,
};
use std::net::{IpAddr, Ipv4Addr};

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

#[test]
fn rc_and_ud_qps_share_one_srq() {
    let net = SimNet::new(5);
    let (a, b) = two_contexts(&net, ["roce0", "roce1"]);
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let (ma, mb) = (pa.reg_mr(4096, ACCESS).unwrap(), pb.reg_mr(8192, ACCESS).unwrap());
    let srq = pb.create_srq(8, 1).unwrap();
    for i in 0..4u64 {
        srq.post_recv(RecvWr::new(100 + i, mb.addr() + i * 2048, 2048, mb.lkey())).unwrap();
    }
    assert_eq!(srq.query().map(|(attr, n)| (attr.max_wr, n)), Some((8, 4)));
    // RC pair: B's QP receives from the SRQ
    let rc_a = pa.qp_builder(&ca, &ca).build().unwrap();
    let rc_b = pb.qp_builder(&cb, &cb).srq(&srq).build().unwrap();
    assert!(rc_b.srq().is_some() && rc_a.srq().is_none());
    connect_qps(&rc_a, &rc_b, 10, 20, &ConnectOptions::default());
    // UD pair: B's QP receives from the same SRQ
    let ud_a = pa.qp_builder(&ca, &ca).qp_type(QpType::Ud).build().unwrap();
    let ud_b = pb.qp_builder(&cb, &cb).qp_type(QpType::Ud).srq(&srq).build().unwrap();
    ud_a.activate_ud(DEFAULT_QKEY, 1).unwrap();
    ud_b.activate_ud(DEFAULT_QKEY, 2).unwrap();

    ma.write(0, b"over RC, into the SRQ").unwrap();
    ma.write(100, b"over UD").unwrap();
    rc_a.post_send(SendWr::new(1, WrOpcode::Send).sge(ma.addr(), 21, ma.lkey())).unwrap();
    let wr = SendWr::new(2, WrOpcode::Send).sge(ma.addr() + 100, 7, ma.lkey());
    ud_a.post_send(ud_send(wr, create_ah(ip(2)), &ud_b.endpoint(0), DEFAULT_QKEY)).unwrap();
    assert!(net.run_until_idle(100_000));
    let mut wcs = cb.poll(8).unwrap();
    wcs.sort_by_key(|w| w.wr_id);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Recv));
    assert_eq!((wcs[0].wr_id, wcs[0].qp_num, wcs[0].byte_len), (100, rc_b.qpn().value(), 21));
    // UD: 40-byte GRH area first
    assert_eq!((wcs[1].wr_id, wcs[1].qp_num, wcs[1].byte_len), (101, ud_b.qpn().value(), 47));
    assert_eq!(wcs[1].src_qp, ud_a.qpn().value());
    let mut got = [0u8; 21];
    mb.read(0, &mut got).unwrap();
    assert_eq!(&got, b"over RC, into the SRQ");
    let mut got = [0u8; 7];
    mb.read(2048 + 40, &mut got).unwrap();
    assert_eq!(&got, b"over UD");
    assert_eq!(srq.query().map(|(_, n)| n), Some(2));
    assert_eq!(ca.poll(8).unwrap().len(), 2);

    // the SRQ is in use: destroying it (or a shared handle) fails
    match srq.clone().destroy() {
        Err(DestroyError::Shared { what: "SRQ", .. }) => {}
        other => panic!("{other:?}"),
    }
    drop((rc_b, ud_b));
    srq.destroy().unwrap();
}

#[test]
fn uc_pair_connects_and_writes_with_immediate() {
    let net = SimNet::new(6);
    let (a, b) = two_contexts(&net, ["roce0", "roce1"]);
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (ma, mb) = (pa.reg_mr(4096, ACCESS).unwrap(), pb.reg_mr(4096, ACCESS).unwrap());
    let (qa, qb) = uc_pair(&pa, &ca, &pb, &cb, 0xFF_FFFE, 7);
    qb.post_recv(RecvWr::new(9, mb.addr(), 0, mb.lkey())).unwrap();
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    ma.write(0, &data).unwrap();
    let wr = SendWr::new(1, WrOpcode::RdmaWriteWithImm)
        .sge(ma.addr(), 3000, ma.lkey())
        .remote(mb.remote_addr(512), mb.rkey())
        .with_imm(0xABCD);
    qa.post_send(wr).unwrap();
    assert!(net.run_until_idle(100_000));
    let w = cb.poll(4).unwrap();
    assert_eq!(w.len(), 1);
    assert_eq!(
        (w[0].status, w[0].opcode, w[0].imm),
        (WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(0xABCD))
    );
    let mut got = vec![0u8; 3000];
    mb.read(512, &mut got).unwrap();
    assert_eq!(got, data);
    assert_eq!(ca.poll(4).unwrap()[0].status, WcStatus::Success);
}
