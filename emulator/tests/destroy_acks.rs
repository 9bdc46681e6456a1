//! A QP destroyed right after its last completion still sends the ACK it
//! owes: a NIC acknowledges as the packets arrive, before the program can
//! see the completion. Lost, the peer retransmits for it (forever at
//! retry_cnt 7, rxe's reading): `ibv_rc_pingpong`'s server hung when its
//! client exited right after its last receive.

use roce_emulator::*;
use roce_packet::{Opcode, RoceRepr};
use roce_sim::testkit::*;

#[test]
fn a_qp_destroyed_after_its_last_receive_still_acknowledges_it() {
    let mut p = Pair::new();
    p.stage_send(b"last words", 1, 64, 7);
    // A's SEND reaches B; B's program sees the receive and destroys the QP
    // before B's device transmitted anything
    let send = p.a.hca.poll_transmit(p.now).expect("A sends");
    assert_eq!(RoceRepr::parse_bytes(&send.payload).unwrap().0.bth.opcode, Opcode::RC_SEND_ONLY);
    assert!(p.a.hca.poll_transmit(p.now).is_none());
    p.b.hca.handle_datagram(p.now, send);
    let got = p.b.poll();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].wr_id, got[0].status), (1, WcStatus::Success));
    let sent_before = p.b.hca.counters().sent_pkts;
    p.b.hca.destroy_qp(p.b.qpn).unwrap();
    // the ACK leaves anyway, and completes A's SEND
    let ack = p.b.hca.poll_transmit(p.now).expect("the owed ACK leaves after the destroy");
    let r = RoceRepr::parse_bytes(&ack.payload).unwrap().0;
    assert_eq!(r.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert!(r.aeth.is_some_and(|a| matches!(a.syndrome, roce_packet::Syndrome::Ack { .. })));
    assert!(p.b.hca.poll_transmit(p.now).is_none(), "one ACK, nothing else");
    assert_eq!(p.b.hca.counters().sent_pkts, sent_before + 1);
    p.a.hca.handle_datagram(p.now, ack);
    let done = p.a.poll();
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!((done[0].wr_id, done[0].status), (7, WcStatus::Success));
}
