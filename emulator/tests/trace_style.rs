//! Protocol traces at the packet level: hand-made requests into one HCA,
//! the exact responses out (smoltcp-style socket tests).

use roce_emulator::*;
use roce_packet::{
    AethRepr, AtomicAckEthRepr, BthRepr, Msn, NakCode, Opcode, Psn, Qpn, RethRepr, RoceRepr,
    Syndrome,
};
use roce_sim::testkit::*;

fn req(dest: Qpn, op: Opcode, psn: u32, ack_req: bool, len: usize) -> RoceRepr {
    RoceRepr {
        bth: BthRepr {
            opcode: op,
            dest_qp: dest,
            psn: Psn::new(psn),
            ack_req,
            pad_count: roce_packet::pad_for(len),
            ..BthRepr::default()
        },
        payload_len: len,
        ..RoceRepr::default()
    }
}

/// Feed one request to B (UDP source port 0xC123) and return what B sends
/// back.
fn to_b(p: &mut Pair, r: &RoceRepr, payload: &[u8]) -> Vec<RoceRepr> {
    p.to_b(a_to_b().src_port(0xC123).datagram(r, payload))
}

fn syn(r: &RoceRepr) -> (Opcode, u32, Syndrome) {
    (r.bth.opcode, r.bth.psn.value(), r.aeth.unwrap().syndrome)
}

const ACK: Syndrome = Syndrome::Ack { credit: 0x1F };

#[test]
fn responder_psn_checks_one_nak_per_gap() {
    let mut p = Pair::new();
    let qb = p.b.qpn;
    p.b.post_recvs(4, 64);
    // expected 0x100: deliver it
    let out = to_b(&mut p, &req(qb, Opcode::RC_SEND_ONLY, 0x100, true, 4), b"one!");
    assert_eq!(out.iter().map(syn).collect::<Vec<_>>(), vec![(Opcode::RC_ACKNOWLEDGE, 0x100, ACK)]);
    assert_eq!(out[0].aeth.unwrap().msn, Msn::new(1));
    // 0x102 and 0x103 skip 0x101: one NAK carrying the expected PSN, then silence
    let out = to_b(&mut p, &req(qb, Opcode::RC_SEND_ONLY, 0x102, true, 4), b"xxxx");
    assert_eq!(
        out.iter().map(syn).collect::<Vec<_>>(),
        vec![(Opcode::RC_ACKNOWLEDGE, 0x101, Syndrome::Nak(NakCode::PsnSequenceError))]
    );
    assert!(to_b(&mut p, &req(qb, Opcode::RC_SEND_ONLY, 0x103, true, 4), b"xxxx").is_empty());
    // duplicate of 0x100 with AckReq: re-ACKed with its own PSN, not executed
    let out = to_b(&mut p, &req(qb, Opcode::RC_SEND_ONLY, 0x100, true, 4), b"dup!");
    assert_eq!(out.iter().map(syn).collect::<Vec<_>>(), vec![(Opcode::RC_ACKNOWLEDGE, 0x100, ACK)]);
    assert_eq!(p.b.read_mem(64, 4), vec![0; 4]);
    // the expected PSN arrives: executed, and a new gap gets a new NAK
    let out = to_b(&mut p, &req(qb, Opcode::RC_SEND_ONLY, 0x101, true, 4), b"two!");
    assert_eq!(out.iter().map(syn).collect::<Vec<_>>(), vec![(Opcode::RC_ACKNOWLEDGE, 0x101, ACK)]);
    let out = to_b(&mut p, &req(qb, Opcode::RC_SEND_ONLY, 0x105, true, 4), b"xxxx");
    assert_eq!(out.len(), 1);
    assert_eq!(syn(&out[0]).2, Syndrome::Nak(NakCode::PsnSequenceError));
    let c = p.b.counters();
    assert_eq!((c.out_of_seq_request, c.duplicate_request, c.naks_sent), (3, 1, 2));
    assert_eq!(p.b.read_mem(0, 4), b"one!");
    assert_eq!(p.b.read_mem(64, 4), b"two!");
    assert_eq!(p.b.poll().len(), 2);
}

#[test]
fn responder_opcode_sequence_and_length_checks() {
    // MIDDLE without FIRST
    let mut p = Pair::new();
    let qb = p.b.qpn;
    p.b.post_recv(1, 0, 4096);
    let out = to_b(&mut p, &req(qb, Opcode::RC_SEND_MIDDLE, 0x100, false, 1024), &[0; 1024]);
    assert_eq!(
        out.iter().map(syn).collect::<Vec<_>>(),
        vec![(Opcode::RC_ACKNOWLEDGE, 0x100, Syndrome::Nak(NakCode::InvalidRequest))]
    );
    assert_eq!(p.b.hca.qp_state(qb), Some(QpState::Err));
    // FIRST shorter than the path MTU
    let mut p = Pair::new();
    let qb = p.b.qpn;
    p.b.post_recv(1, 0, 4096);
    let out = to_b(&mut p, &req(qb, Opcode::RC_SEND_FIRST, 0x100, false, 512), &[0; 512]);
    assert_eq!(syn(&out[0]).2, Syndrome::Nak(NakCode::InvalidRequest));
    // the receive WQE was not consumed by the bad packet: it is flushed
    let wb = p.b.poll();
    assert_eq!((wb[0].wr_id, wb[0].status), (1, WcStatus::WrFlushErr));
    // a WRITE FIRST inside a SEND
    let mut p = Pair::new();
    let qb = p.b.qpn;
    p.b.post_recv(1, 0, 4096);
    assert!(
        to_b(&mut p, &req(qb, Opcode::RC_SEND_FIRST, 0x100, false, 1024), &[1; 1024]).is_empty()
    );
    let mut w = req(qb, Opcode::RC_RDMA_WRITE_FIRST, 0x101, false, 1024);
    w.reth = Some(RethRepr { va: p.b.addr(0), rkey: p.b.mr.rkey, dma_len: 2048 });
    let out = to_b(&mut p, &w, &[2; 1024]);
    assert_eq!(
        syn(&out[0]),
        (Opcode::RC_ACKNOWLEDGE, 0x101, Syndrome::Nak(NakCode::InvalidRequest))
    );
}

#[test]
fn responder_rejects_ops_the_qp_does_not_allow() {
    let mut p = Pair::with(Opts { qp_access: AccessFlags::LOCAL_WRITE, ..Opts::default() });
    let qb = p.b.qpn;
    let mut r = req(qb, Opcode::RC_RDMA_READ_REQUEST, 0x100, true, 0);
    r.reth = Some(RethRepr { va: p.b.addr(0), rkey: p.b.mr.rkey, dma_len: 8 });
    let out = to_b(&mut p, &r, &[]);
    assert_eq!(syn(&out[0]).2, Syndrome::Nak(NakCode::InvalidRequest));
}

#[test]
fn responder_read_response_psns_and_aeth() {
    let mut p = Pair::new();
    let qb = p.b.qpn;
    p.b.write_mem(0, &pattern(2100, 1));
    let mut r = req(qb, Opcode::RC_RDMA_READ_REQUEST, 0x100, true, 0);
    r.reth = Some(RethRepr { va: p.b.addr(0), rkey: p.b.mr.rkey, dma_len: 2100 });
    let out = to_b(&mut p, &r, &[]);
    let got: Vec<(Opcode, u32, usize, bool)> = out
        .iter()
        .map(|x| (x.bth.opcode, x.bth.psn.value(), x.payload_len, x.aeth.is_some()))
        .collect();
    assert_eq!(
        got,
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x100, 1024, true),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x101, 1024, false),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 0x102, 52, true),
        ]
    );
    assert_eq!(out[2].bth.pad_count, 0);
    // the next request must use PSN 0x103
    p.b.post_recv(1, 8192, 64);
    let out = to_b(&mut p, &req(qb, Opcode::RC_SEND_ONLY, 0x103, true, 3), b"abc");
    assert_eq!(syn(&out[0]), (Opcode::RC_ACKNOWLEDGE, 0x103, ACK));
    assert_eq!(out[0].aeth.unwrap().msn, Msn::new(2));
    assert_eq!(p.b.read_mem(8192, 3), b"abc");
}

/// Responses into A's completer (UDP source port 0xC123).
fn to_a(p: &mut Pair, r: &RoceRepr) {
    p.a.hca.handle_datagram(p.now, b_to_a().src_port(0xC123).datagram(r, &[]));
}

fn ack(dest: Qpn, psn: u32, s: Syndrome) -> RoceRepr {
    let mut r = req(dest, Opcode::RC_ACKNOWLEDGE, psn, false, 0);
    r.aeth = Some(AethRepr { syndrome: s, msn: Msn::new(0) });
    r
}

#[test]
fn completer_ignores_stale_and_ghost_acks_and_coalesces() {
    let mut p = Pair::new();
    let qa = p.a.qpn;
    for i in 0..3 {
        p.a.send(i, 0, 8);
    }
    while p.a.hca.poll_transmit(Instant::ZERO).is_some() {}
    // ghost: PSN never sent
    to_a(&mut p, &ack(qa, 0x180, ACK));
    // one coalesced ACK for the second message completes two WQEs
    to_a(&mut p, &ack(qa, 0x101, ACK));
    let wa = p.a.poll();
    assert_eq!(wa.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0, 1]);
    // stale duplicate
    to_a(&mut p, &ack(qa, 0x100, ACK));
    assert_eq!(p.a.counters().stale_response, 2);
    assert!(p.a.poll().is_empty());
    assert!(p.a.hca.poll_timeout().is_some(), "third WQE still outstanding");
    to_a(&mut p, &ack(qa, 0x102, ACK));
    assert_eq!(p.a.poll()[0].wr_id, 2);
    assert_eq!(p.a.hca.poll_timeout(), None);
}

#[test]
fn completer_bad_response_opcode() {
    let mut p = Pair::new();
    let qa = p.a.qpn;
    p.a.send(1, 0, 8);
    while p.a.hca.poll_transmit(Instant::ZERO).is_some() {}
    // an atomic ACK for a SEND
    let mut r = ack(qa, 0x100, ACK);
    r.bth.opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
    r.atomic_ack_eth = Some(AtomicAckEthRepr { orig_rem_data: 1 });
    to_a(&mut p, &r);
    let wa = p.a.poll();
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::BadRespErr));
    assert_eq!(p.a.hca.qp_state(qa), Some(QpState::Err));
}

#[test]
fn completer_remote_operational_error() {
    let mut p = Pair::new();
    let qa = p.a.qpn;
    p.a.send(1, 0, 8);
    p.a.send(2, 0, 8);
    while p.a.hca.poll_transmit(Instant::ZERO).is_some() {}
    // the first is ACKed implicitly by a NAK on the second
    to_a(&mut p, &ack(qa, 0x101, Syndrome::Nak(NakCode::RemoteOperationalError)));
    let wa = p.a.poll();
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::RemOpErr)]
    );
}

#[test]
fn requester_segments_write_with_imm_and_solicited() {
    let mut p = Pair::new();
    let wr = SendWr::new(1, WrOpcode::RdmaWriteWithImm)
        .sge(p.a.addr(0), 2500, p.a.mr.lkey)
        .remote(0x1234_0000, roce_packet::RKey::new(0xABCD))
        .with_imm(0xFEED)
        .with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED);
    p.a.post(wr);
    let out = p.a.transmits(p.now);
    let got: Vec<_> = out
        .iter()
        .map(|r| {
            (
                r.bth.opcode,
                r.payload_len,
                r.bth.pad_count,
                r.reth.is_some(),
                r.immdt,
                r.bth.solicited,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (Opcode::RC_RDMA_WRITE_FIRST, 1024, 0, true, None, false),
            (Opcode::RC_RDMA_WRITE_MIDDLE, 1024, 0, false, None, false),
            (Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, 452, 0, false, Some(0xFEED), true),
        ]
    );
    let reth = out[0].reth.unwrap();
    assert_eq!((reth.va, reth.rkey.value(), reth.dma_len), (0x1234_0000, 0xABCD, 2500));
    assert_eq!(out[2].bth.dest_qp, p.b.qpn);
}
