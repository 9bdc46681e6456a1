//! Unreliable Connected QPs: no ACKs, no retries; gaps drop messages.

use roce_emulator::*;
use roce_packet::{Opcode, Psn};
use roce_sim::testkit::*;

fn uc() -> Pair {
    Pair::with(Opts { qp_type: QpType::Uc, ..Opts::default() })
}

#[test]
fn uc_send_multi_packet_without_acks() {
    let mut p = uc();
    let data = pattern(2500, 4);
    p.stage_send(&data, 1, 4096, 7);
    p.run();
    assert_eq!(p.b.read_mem(0, 2500), data);
    let ops: Vec<_> = p.trace.iter().map(|s| (s.dir, s.opcode, s.ack_req)).collect();
    assert_eq!(
        ops,
        vec![
            (Dir::AtoB, Opcode::UC_SEND_FIRST, false),
            (Dir::AtoB, Opcode::UC_SEND_MIDDLE, false),
            (Dir::AtoB, Opcode::UC_SEND_LAST, false),
        ]
    );
    let wa = p.a.poll();
    assert_eq!((wa[0].wr_id, wa[0].status, wa[0].byte_len), (7, WcStatus::Success, 2500));
    let wb = p.b.poll();
    assert_eq!((wb[0].wr_id, wb[0].byte_len, wb[0].status), (1, 2500, WcStatus::Success));
    assert_eq!(p.a.hca.poll_timeout(), None, "UC arms no timer");
}

#[test]
fn uc_write_and_write_with_imm() {
    let mut p = uc();
    p.a.write_mem(0, b"uc-write");
    p.b.post_recv(3, 0, 0);
    let wr = p.one_sided(1, WrOpcode::RdmaWrite, 0, 8, 100);
    p.a.post(wr);
    let wr = p.one_sided(2, WrOpcode::RdmaWriteWithImm, 0, 8, 200).with_imm(9);
    p.a.post(wr);
    p.run();
    assert_eq!(p.b.read_mem(100, 8), b"uc-write");
    assert_eq!(p.b.read_mem(200, 8), b"uc-write");
    assert_eq!(p.trace[0].opcode, Opcode::UC_RDMA_WRITE_ONLY);
    assert_eq!(p.trace[1].opcode, Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE);
    let wb = p.b.poll();
    assert_eq!((wb[0].wr_id, wb[0].opcode, wb[0].imm), (3, WcOpcode::RecvRdmaWithImm, Some(9)));
    assert_eq!(p.a.poll().len(), 2);
}

#[test]
fn uc_gap_drops_the_message_and_reuses_the_receive() {
    let mut p = uc();
    let m1 = pattern(3000, 1);
    let m2 = pattern(3000, 2);
    p.a.write_mem(0, &m1);
    p.a.write_mem(4096, &m2);
    p.b.post_recv(1, 0, 4096);
    p.b.post_recv(2, 4096, 4096);
    p.a.send(10, 0, 3000);
    p.a.send(11, 4096, 3000);
    p.run_with(Instant::from_millis(10), |_, s| {
        if s.psn == Psn::new(0x101) {
            Action::Drop
        } else {
            Action::Deliver
        }
    });
    // the sender believes both went out
    let wa = p.a.poll();
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(10, WcStatus::Success), (11, WcStatus::Success)]
    );
    // the first message was lost; the second landed in the first receive
    let wb = p.b.poll();
    assert_eq!(wb.len(), 1);
    assert_eq!((wb[0].wr_id, wb[0].byte_len), (1, 3000));
    assert_eq!(p.b.read_mem(0, 3000), m2);
    let c = p.b.counters();
    assert_eq!(c.uc_msg_dropped, 1);
    // the LAST after the gap, then the next FIRST (accepted by resync)
    assert_eq!(c.out_of_seq_request, 2);
    assert_eq!(c.naks_sent + c.acks_sent + c.sent_pkts, 0);
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Rts));
}

#[test]
fn uc_without_receive_drops_silently() {
    let mut p = uc();
    p.a.write_mem(0, b"first");
    p.a.send(1, 0, 5);
    p.run();
    assert_eq!(p.b.counters().uc_msg_dropped, 1);
    assert_eq!(p.b.counters().send_rnr_err, 0);
    p.b.post_recv(5, 0, 64);
    p.a.send(2, 0, 5);
    p.run();
    assert_eq!(p.b.poll()[0].wr_id, 5);
    assert_eq!(p.b.read_mem(0, 5), b"first");
    assert_eq!(p.a.poll().len(), 2);
}

#[test]
fn uc_rejects_read_and_atomics() {
    let mut p = uc();
    let wr = SendWr::new(1, WrOpcode::RdmaRead).sge(p.a.addr(0), 8, p.a.mr.lkey);
    assert_eq!(
        p.a.hca.post_send(p.a.qpn, wr),
        Err(PostSendError::UnsupportedOpcode { opcode: WrOpcode::RdmaRead, qp_type: QpType::Uc })
    );
}

#[test]
fn uc_and_rc_opcodes_do_not_mix() {
    let mut p = uc();
    let mut rc = Pair::new();
    rc.a.send(1, 0, 8);
    let d = rc.a.hca.poll_transmit(Instant::ZERO).unwrap();
    // an RC SEND to a UC QP with the same number is refused
    let before = p.b.counters().bad_opcode;
    p.b.hca.handle_datagram(Instant::ZERO, d);
    assert_eq!(p.b.counters().bad_opcode, before + 1);
}
