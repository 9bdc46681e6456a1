//! Shared receive queues (IBA §10.2.9): a QP created on an SRQ takes its
//! receives from it, a multi-packet SEND fills one of them, and with none
//! left the RC responder answers RNR NAK (§9.7.5.1.6) as with its own
//! queue empty.

use crate::agent::{wc, QpStateName::Rts};
use crate::case::{Bytes, Case, Direction::Responder, Req, Setup, Step::*};
use roce_packet::Opcode as O;

const SRQ: Setup = Setup { srq: true, ..Setup::DEFAULT };

#[rustfmt::skip]
pub const CASES: &[Case] = &[
    Case { id: "resp.srq.send-consumes", iba: "§10.2.9", direction: Responder, setup: SRQ,
        rule: "a SEND to a QP on an SRQ lands in the SRQ's receive and completes it",
        steps: &[PostRecv { off: 0, len: 256 }, Send(Req::new(O::RC_SEND_ONLY, 0).len(100)), Ack(0),
            CompletionLen(wc::SUCCESS, 100),
            Mem { off: 0, len: 100, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.srq.multi-packet", iba: "§10.2.9 C9-40", direction: Responder, setup: SRQ,
        rule: "a SEND of FIRST, LAST to a QP on an SRQ fills one SRQ receive",
        steps: &[PostRecv { off: 0, len: 4096 }, PostRecv { off: 4096, len: 4096 },
            Send(Req::new(O::RC_SEND_FIRST, 0).len(1024).no_ack_req()),
            Send(Req::new(O::RC_SEND_LAST, 1).len(500).data(1, 1024)), Ack(1),
            CompletionLen(wc::SUCCESS, 1524),
            Mem { off: 0, len: 1524, want: Bytes::Data { salt: 1, msg_off: 0 } }, NoCompletion] },
    Case { id: "resp.srq.empty-rnr", iba: "§10.2.9 §9.7.5.1.6", direction: Responder, setup: SRQ,
        rule: "a SEND to a QP whose SRQ is empty is answered with an RNR NAK; the QP stays in RTS",
        steps: &[Send(Req::new(O::RC_SEND_ONLY, 0).len(64)), RnrNak(0), State(Rts)] },
];
