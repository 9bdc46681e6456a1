//! The GSI QP (QP1): where the communication manager's MADs arrive.

use roce_emulator::*;
use roce_packet::mad::GSI_QKEY;
use roce_packet::{Opcode, Qpn};
use roce_sim::testkit::*;
use std::net::{IpAddr, Ipv4Addr};

fn gsi(s: &mut Side) -> Qpn {
    let q = s
        .hca
        .create_gsi_qp(QpInitAttr {
            pd: s.pd,
            send_cq: s.cq,
            recv_cq: s.cq,
            qp_type: QpType::Ud,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
            srq: None,
        })
        .unwrap();
    let init = QpAttr::new().state(QpState::Init).pkey_index(0).port(1).qkey(GSI_QKEY);
    s.hca.modify_qp(q, &init).unwrap();
    s.hca.modify_qp(q, &QpAttr::new().state(QpState::Rtr)).unwrap();
    s.hca.modify_qp(q, &QpAttr::new().state(QpState::Rts).sq_psn(0)).unwrap();
    q
}

#[test]
fn a_mad_travels_qp1_to_qp1_with_the_gsi_qkey() {
    let mut p = Pair::with(Opts { qp_type: QpType::Ud, ..Opts::default() });
    let (ga, gb) = (gsi(&mut p.a), gsi(&mut p.b));
    assert_eq!((ga.value(), gb.value()), (1, 1));
    let mad = pattern(256, 7);
    p.a.write_mem(0x1000, &mad);
    let (lkey, at) = (p.b.mr.lkey, p.b.addr(0x2000));
    p.b.hca.post_recv(gb, RecvWr::new(9, at, 40 + 256, lkey)).unwrap();
    let b_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    // a Q_Key with the high bit set: "the QP's own", the GSI's
    let wr = SendWr::new(5, WrOpcode::Send).sge(p.a.addr(0x1000), 256, p.a.mr.lkey).ud(
        AhAttr::new(b_ip),
        1,
        0x8000_0000,
    );
    p.a.hca.post_send(ga, wr).unwrap();
    p.run();
    assert_eq!(p.trace.len(), 1);
    let s = &p.trace[0];
    assert_eq!(s.opcode, Opcode::UD_SEND_ONLY);
    assert_eq!(s.repr.bth.dest_qp.value(), 1);
    let deth = s.repr.deth.unwrap();
    assert_eq!((deth.qkey.value(), deth.src_qp.value()), (GSI_QKEY, 1));
    let wc = p.b.poll();
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].byte_len, wc[0].src_qp),
        (9, WcStatus::Success, 296, 1)
    );
    assert_eq!(p.b.read_mem(0x2000 + 40, 256), mad);
    // the application's GSI QP took it: the port's CM saw nothing
    assert_eq!(p.b.hca.cm_ref().counters().mads_received, 0);
    let sent = p.a.poll();
    assert_eq!((sent[0].wr_id, sent[0].status), (5, WcStatus::Success));
}

#[test]
fn one_gsi_per_device_ud_only_and_ordinary_qps_never_get_qpn_1() {
    let mut p = Pair::with(Opts { qp_type: QpType::Ud, ..Opts::default() });
    assert!(p.a.qpn.value() >= 17);
    let (pd, cq) = (p.a.pd, p.a.cq);
    let attr = |t| QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        qp_type: t,
        cap: QpCap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
        srq: None,
    };
    assert_eq!(p.a.hca.create_gsi_qp(attr(QpType::Rc)), Err(CreateQpError::GsiNotUd));
    gsi(&mut p.a);
    assert_eq!(p.a.hca.create_gsi_qp(attr(QpType::Ud)), Err(CreateQpError::GsiExists));
    for _ in 0..4 {
        let q = p.a.hca.create_qp(attr(QpType::Ud)).unwrap();
        assert!(q.value() > 1);
    }
    // destroyed, it can be created again
    p.a.hca.destroy_qp(Qpn::new(1)).unwrap();
    assert_eq!(p.a.hca.create_gsi_qp(attr(QpType::Ud)).unwrap().value(), 1);
}

#[test]
fn a_datagram_to_qp1_with_another_qkey_is_dropped() {
    let mut p = Pair::with(Opts { qp_type: QpType::Ud, ..Opts::default() });
    let gb = gsi(&mut p.b);
    let (lkey, at) = (p.b.mr.lkey, p.b.addr(0));
    p.b.hca.post_recv(gb, RecvWr::new(1, at, 296, lkey)).unwrap();
    let b_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    // from an ordinary UD QP, with ibv_ud_pingpong's Q_Key
    let wr = SendWr::new(1, WrOpcode::Send).sge(p.a.addr(0), 256, p.a.mr.lkey).ud(
        AhAttr::new(b_ip),
        1,
        UD_QKEY,
    );
    p.a.post(wr);
    p.run();
    assert_eq!(p.trace.len(), 1);
    assert!(p.b.poll().is_empty());
    assert_eq!(p.b.counters().ud_dropped, 1);
}
