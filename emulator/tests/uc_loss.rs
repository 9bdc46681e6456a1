//! UC loss accounting: one lost or refused packet of a multi-packet UC
//! message drops exactly that message, and `uc_msg_dropped` counts it
//! exactly once (wherever the packet sat in the message).

use roce_emulator::*;
use roce_packet::{Opcode, Psn};
use roce_sim::testkit::*;

/// Three 4-packet SENDs (PSNs 0x100.., 0x104.., 0x108..) into three
/// receives; `filter` sees every packet.
const MSG: usize = 4096;

fn uc() -> Pair {
    Pair::with(Opts { qp_type: QpType::Uc, ..Opts::default() })
}

fn three_sends(p: &mut Pair, filter: impl FnMut(usize, &Seen) -> Action) -> Vec<Vec<u8>> {
    let msgs: Vec<Vec<u8>> = (1..=3).map(|i| pattern(MSG, i)).collect();
    for (i, m) in msgs.iter().enumerate() {
        p.a.write_mem((i * MSG) as u64, m);
        p.b.post_recv(i as u64 + 1, (i * MSG) as u64, MSG as u32);
    }
    for i in 0..3u64 {
        p.a.send(10 + i, i * MSG as u64, MSG as u32);
    }
    p.run_with(Instant::from_millis(10), filter);
    msgs
}

/// Messages 1 and 3 arrive (in receives 1 and 2), message 2 is lost and
/// counted once; receive 3 is still posted.
fn only_message_2_lost(p: &mut Pair, msgs: &[Vec<u8>]) {
    let wa: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wa, vec![(10, WcStatus::Success), (11, WcStatus::Success), (12, WcStatus::Success)]);
    let wb: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect();
    assert_eq!(
        wb,
        vec![(1, WcStatus::Success, MSG as u32), (2, WcStatus::Success, MSG as u32)],
        "{}",
        p.dump()
    );
    assert_eq!(p.b.read_mem(0, MSG), msgs[0]);
    assert_eq!(p.b.read_mem(MSG as u64, MSG), msgs[2], "message 3 landed in receive 2");
    assert_eq!(p.b.read_mem(2 * MSG as u64, MSG), vec![0; MSG], "receive 3 untouched");
    let c = p.b.counters();
    assert_eq!(c.uc_msg_dropped, 1, "{c}");
    assert_eq!(c.rdma_recvs, 2);
    assert_eq!(c.naks_sent + c.acks_sent + c.sent_pkts, 0);
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Rts));
    // the third receive is still there for the next message
    p.a.send(20, 0, 64);
    p.run();
    let wb = p.b.poll();
    assert_eq!((wb.len(), wb[0].wr_id, wb[0].byte_len), (1, 3, 64));
    assert_eq!(p.b.counters().uc_msg_dropped, 1);
}

#[test]
fn one_lost_packet_drops_exactly_its_message_first_middle_or_last() {
    for (psn, name) in [(0x104, "FIRST"), (0x105, "MIDDLE"), (0x106, "MIDDLE"), (0x107, "LAST")] {
        let mut p = uc();
        let mut dropped = 0;
        let msgs = three_sends(&mut p, |_, s| {
            if s.psn == Psn::new(psn) {
                dropped += 1;
                Action::Drop
            } else {
                Action::Deliver
            }
        });
        assert_eq!(dropped, 1, "{name}");
        let lost = p.trace.iter().find(|s| s.psn == Psn::new(psn)).unwrap();
        let want = match name {
            "FIRST" => Opcode::UC_SEND_FIRST,
            "MIDDLE" => Opcode::UC_SEND_MIDDLE,
            _ => Opcode::UC_SEND_LAST,
        };
        assert_eq!(lost.opcode, want);
        only_message_2_lost(&mut p, &msgs);
    }
}

#[test]
fn a_whole_lost_single_packet_message_counts_once() {
    let mut p = uc();
    for i in 0..3u64 {
        p.a.write_mem(i * 64, &[i as u8 + 1; 64]);
        p.b.post_recv(i + 1, i * 64, 64);
        p.a.send(10 + i, i * 64, 64);
    }
    p.run_with(Instant::from_millis(10), |_, s| {
        if s.psn == Psn::new(0x101) {
            Action::Drop
        } else {
            Action::Deliver
        }
    });
    let wb: Vec<_> = p.b.poll().iter().map(|w| w.wr_id).collect();
    assert_eq!(wb, vec![1, 2]);
    assert_eq!(p.b.read_mem(0, 128), [[1u8; 64], [3u8; 64]].concat());
    assert_eq!(p.b.counters().uc_msg_dropped, 1);
}

/// A refused packet in the middle of a message (an in-sequence FIRST
/// where a MIDDLE belongs: the responder error path) drops the message
/// once, and its remaining packets silently.
#[test]
fn a_refused_packet_inside_a_message_counts_once() {
    let mut p = uc();
    let ep = p.a_qp_endpoints();
    let msgs = three_sends(&mut p, |_, s| {
        if s.psn == Psn::new(0x105) {
            let mut r = s.repr;
            r.bth.opcode = Opcode::UC_SEND_FIRST;
            Action::Replace(PacketBuilder::endpoints(ep).bytes(&r, &vec![0xEE; 1024]))
        } else {
            Action::Deliver
        }
    });
    assert_eq!(p.b.counters().icrc_err, 0);
    only_message_2_lost(&mut p, &msgs);
}

#[test]
fn lost_packet_of_a_uc_write_drops_only_that_write() {
    let mut p = uc();
    let data: Vec<Vec<u8>> = (1..=3).map(|i| pattern(3000, i)).collect();
    for (i, d) in data.iter().enumerate() {
        p.a.write_mem((i * 4096) as u64, d);
        let wr =
            p.one_sided(i as u64, WrOpcode::RdmaWrite, (i * 4096) as u64, 3000, (i * 4096) as u64);
        p.a.post(wr);
    }
    // 3 packets each: drop the MIDDLE of the second WRITE
    p.run_with(Instant::from_millis(10), |_, s| {
        if s.psn == Psn::new(0x104) {
            Action::Drop
        } else {
            Action::Deliver
        }
    });
    assert_eq!(
        p.trace.iter().find(|s| s.psn == Psn::new(0x104)).unwrap().opcode,
        Opcode::UC_RDMA_WRITE_MIDDLE
    );
    assert_eq!(p.b.read_mem(0, 3000), data[0]);
    assert_eq!(p.b.read_mem(8192, 3000), data[2]);
    // the FIRST of the lost WRITE landed; its MIDDLE and LAST did not
    assert_eq!(p.b.read_mem(4096, 1024), data[1][..1024]);
    assert_eq!(p.b.read_mem(4096 + 1024, 1976), vec![0; 1976]);
    assert_eq!(p.b.counters().uc_msg_dropped, 1);
}

#[test]
fn a_duplicate_is_not_counted_as_a_loss() {
    let mut p = uc();
    for i in 0..3u64 {
        p.a.write_mem(i * 64, &[i as u8 + 1; 64]);
        p.b.post_recv(i + 1, i * 64, 64);
    }
    p.b.post_recv(4, 3 * 64, 64);
    for i in 0..3u64 {
        p.a.send(10 + i, i * 64, 64);
    }
    // the second single-packet message arrives twice
    p.run_with(Instant::from_millis(10), |_, s| {
        if s.psn == Psn::new(0x101) {
            Action::Duplicate
        } else {
            Action::Deliver
        }
    });
    let wb: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    // the copy comes from behind the expected PSN: dropped by itself, never
    // delivered as a message of its own (an old message after a newer one)
    assert_eq!(wb.len(), 3, "{wb:?}");
    assert!(wb.iter().all(|w| w.1 == WcStatus::Success));
    assert_eq!(p.b.read_mem(0, 256), [[1u8; 64], [2u8; 64], [3u8; 64], [0u8; 64]].concat());
    let c = p.b.counters();
    assert_eq!((c.uc_msg_dropped, c.out_of_seq_request), (0, 1), "{c}");
}
