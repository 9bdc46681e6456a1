//! Header validation (IBA §9.6 packet header checks, §9.2 BTH): what fails
//! them is dropped silently — no NAK, no state change — and the QP goes on
//! with the next good packet.

use crate::agent::{wc, QpStateName::Rts};
use crate::case::{Case, Direction::Responder, Req, Setup, Step::*};
use roce_packet::Opcode as O;

const SEND: Req = Req::new(O::RC_SEND_ONLY, 0).len(64);

#[rustfmt::skip]
pub const CASES: &[Case] = &[
    Case { id: "resp.header.bad-icrc-dropped", iba: "§9.6 (ICRC)", direction: Responder, setup: Setup::DEFAULT,
        rule: "a packet with a wrong ICRC is dropped silently; the same request with a good ICRC then executes",
        steps: &[PostRecv { off: 0, len: 256 }, Send(SEND.bad_icrc()), Quiet(150), NoCompletion,
            Send(SEND), Ack(0), CompletionLen(wc::SUCCESS, 64)] },
    Case { id: "resp.header.tver-dropped", iba: "§9.2 §9.6", direction: Responder, setup: Setup::DEFAULT,
        rule: "a BTH with a transport header version other than 0 is dropped silently",
        steps: &[PostRecv { off: 0, len: 256 }, Send(SEND.tver(1)), Quiet(150), NoCompletion,
            State(Rts)] },
    Case { id: "resp.header.unknown-qp-dropped", iba: "§9.6", direction: Responder, setup: Setup::DEFAULT,
        rule: "a packet to a QP number that does not exist is dropped silently",
        steps: &[PostRecv { off: 0, len: 256 }, Send(SEND.to_qp(0x00ab_cdef)), Quiet(150),
            NoCompletion, State(Rts)] },
    Case { id: "resp.header.ack-req-clear", iba: "§9.7.5.1.3", direction: Responder, setup: Setup::DEFAULT,
        rule: "a request without AckReq may go unacknowledged until a later one asks; that ACK covers both",
        steps: &[PostRecv { off: 0, len: 256 }, PostRecv { off: 256, len: 256 },
            Send(SEND.no_ack_req()), Send(Req::new(O::RC_SEND_ONLY, 1).len(64)), Ack(1),
            CompletionLen(wc::SUCCESS, 64), CompletionLen(wc::SUCCESS, 64)] },
    Case { id: "resp.header.pkey-mismatch-dropped", iba: "§9.6 §10.9", direction: Responder, setup: Setup::DEFAULT,
        rule: "a packet whose P_Key does not match the QP's partition is dropped silently",
        steps: &[PostRecv { off: 0, len: 256 }, Send(SEND.pkey(0x1234)), Quiet(150), NoCompletion,
            State(Rts)] },
    Case { id: "resp.header.limited-pkey-accepted", iba: "§10.9", direction: Responder, setup: Setup::DEFAULT,
        rule: "the limited-member form of the default P_Key (0x7FFF) matches the full-member default partition",
        steps: &[PostRecv { off: 0, len: 256 }, Send(SEND.pkey(0x7FFF)), Ack(0),
            CompletionLen(wc::SUCCESS, 64)] },
    Case { id: "resp.header.ecn-bits-ignored", iba: "§9.2", direction: Responder, setup: Setup::DEFAULT,
        rule: "FECN and BECN set in the BTH do not change how a request is executed",
        steps: &[PostRecv { off: 0, len: 256 }, Send(SEND.ecn()), Ack(0),
            CompletionLen(wc::SUCCESS, 64)] },
    Case { id: "resp.header.uc-opcode-to-rc-dropped", iba: "§9.6", direction: Responder, setup: Setup::DEFAULT,
        rule: "a UC opcode addressed to an RC QP fails the transport check and is dropped silently",
        steps: &[PostRecv { off: 0, len: 256 }, Send(Req::new(O::UC_SEND_ONLY, 0).len(64)),
            Quiet(150), NoCompletion, State(Rts)] },
    Case { id: "resp.header.rc-opcode-to-uc-dropped", iba: "§9.6", direction: Responder, setup: Setup { service: crate::agent::Service::Uc, ..Setup::DEFAULT },
        rule: "an RC opcode addressed to a UC QP fails the transport check and is dropped silently",
        steps: &[PostRecv { off: 0, len: 256 }, Send(SEND), Quiet(150), NoCompletion, State(Rts)] },
    Case { id: "resp.state.err-drops-requests", iba: "§10.3.1 C10-31", direction: Responder, setup: Setup::DEFAULT,
        rule: "once an access error has put the QP in ERR, a valid request is not executed or acknowledged",
        steps: &[Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0) .len(8) .reth(crate::case::Va::Off(0), crate::case::Key::WrongKey, 8),),
            Nak(0, roce_packet::NakCode::RemoteAccessError), State(crate::agent::QpStateName::Err),
            Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0) .len(8) .reth(crate::case::Va::Off(0), crate::case::Key::Good, 8),),
            Quiet(150), Mem { off: 0, len: 8, want: crate::case::Bytes::Untouched }] },
    Case { id: "resp.state.err-flushes-receives", iba: "§10.3.1 C10-31", direction: Responder, setup: Setup::DEFAULT,
        rule: "when the QP enters ERR its posted receives complete with WR_FLUSH_ERR",
        steps: &[PostRecv { off: 0, len: 256 },
            Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0) .len(8) .reth(crate::case::Va::Off(0), crate::case::Key::WrongKey, 8),),
            Nak(0, roce_packet::NakCode::RemoteAccessError), Completion(wc::WR_FLUSH_ERR)] },
];
