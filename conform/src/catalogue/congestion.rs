//! RoCEv2 congestion management (IBA Vol 1 Annex A17.9): ECN-capable
//! packets, the notification point that answers a packet marked
//! Congestion Experienced (CE, the IP ECN field 0b11, set by a congested
//! switch) with a CNP to the QP that sent it (A17.9.3's format: opcode
//! 0x81, BECN, PSN 0, 16 reserved bytes), and CNPs, which nobody
//! acknowledges. A device whose packets are Not-ECT and that sends no CNP
//! has no congestion management at all (rxe; a NIC with ECN switched
//! off): these cases are n/a on it, saying so, rather than failures of
//! the rules they check.

use crate::agent::{wc, wr, QpStateName::Rts};
use crate::case::{Case, Direction::*, Key, Post, Req, Resp, Setup, Step::*, Va};
use roce_packet::Opcode as O;

const SEND: Req = Req::new(O::RC_SEND_ONLY, 0).len(64);
/// CE-marked requests sent back to back in `resp.cc.cnp-rate-limited`.
const BURST: i32 = 16;
/// A 64-byte WRITE at relative PSN `psn`, marked CE.
const fn ce_write(psn: i32) -> Req {
    Req::new(O::RC_RDMA_WRITE_ONLY, psn).len(64).reth(Va::Off(0), Key::Good, 64).ce_marked()
}

#[rustfmt::skip]
pub const CASES: &[Case] = &[
    Case { id: "resp.cc.cnp-for-ce-mark", iba: "Annex A17.9.3 (CNP)", direction: Responder, setup: Setup::DEFAULT,
        rule: "a request marked CE is executed and acknowledged as usual, and the notification point sends a CNP to the QP that sent it: opcode 0x81, P_Key 0xFFFF, BECN, that QP's number, A 0, PSN 0, 16 reserved zero bytes, a good ICRC",
        steps: &[PostRecv { off: 0, len: 256 }, Send(SEND.ce_marked()), Ack(0),
            Cnps { min: 1, max: 1, wait_ms: 200 }, CompletionLen(wc::SUCCESS, 64)] },
    Case { id: "resp.cc.cnp-rate-limited", iba: "Annex A17.9 (CNP per QP)", direction: Responder, setup: Setup::DEFAULT,
        rule: "16 CE-marked requests to one QP that arrive back to back (one UDP GSO send) get one CNP: a notification point sends at most one per QP per interval (mlx5's min_time_between_cnps, 50 us in roce-emu); a mark 200 ms later gets another",
        steps: &[Burst { req: ce_write(0), n: BURST as u32 }, Ack(BURST - 1),
            Cnps { min: 1, max: 1, wait_ms: 200 },
            Send(ce_write(BURST)), Ack(BURST), Cnps { min: 1, max: 1, wait_ms: 200 }] },
    Case { id: "resp.cc.cnp-not-acknowledged", iba: "Annex A17.9.3 (CNP)", direction: Responder, setup: Setup::DEFAULT,
        rule: "a CNP to a QP is neither acknowledged nor NAKed and does not disturb it: the next request is executed and acknowledged",
        steps: &[SendCnp, Quiet(200), State(Rts), PostRecv { off: 0, len: 256 }, Send(SEND), Ack(0),
            CompletionLen(wc::SUCCESS, 64)] },
    Case { id: "resp.cc.sends-ect", iba: "Annex A17.9 (ECN)", direction: Responder, setup: Setup::DEFAULT,
        rule: "the responder's ACK leaves ECN-capable (ECT(0) or ECT(1) in the IP header), so that a congested switch marks it instead of dropping it",
        steps: &[PostRecv { off: 0, len: 256 }, Send(SEND), Ack(0), Ect,
            CompletionLen(wc::SUCCESS, 64)] },
    Case { id: "req.cc.sends-ect", iba: "Annex A17.9 (ECN)", direction: Requester, setup: Setup::DEFAULT,
        rule: "the requester's SEND leaves ECN-capable (ECT(0) or ECT(1) in the IP header)",
        steps: &[Post(Post::new(wr::SEND, 0, 64)), Request(O::RC_SEND_ONLY, 0), Ect,
            Respond(Resp::Ack(0)), Completion(wc::SUCCESS)] },
];
