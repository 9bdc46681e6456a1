//! Header validation (IBA §9.6 packet header checks, §9.2 BTH): what fails
//! them is dropped silently — no NAK, no state change — and the QP goes on
//! with the next good packet.

use crate::agent::{wc, QpStateName::Rts};
use crate::case::{Case, Direction::Responder, Req, Setup, Step::*};
use roce_packet::Opcode as O;

const SEND: Req = Req::new(O::RC_SEND_ONLY, 0).len(64);

pub const CASES: &[Case] = &[
    Case {
        id: "resp.header.bad-icrc-dropped",
        iba: "§9.6 (ICRC)",
        rule: "a packet with a wrong ICRC is dropped silently; the same request with a good ICRC then executes",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 256 },
            Send(SEND.bad_icrc()),
            Quiet(150),
            NoCompletion,
            Send(SEND),
            Ack(0),
            CompletionLen(wc::SUCCESS, 64),
        ],
    },
    Case {
        id: "resp.header.tver-dropped",
        iba: "§9.2 §9.6",
        rule: "a BTH with a transport header version other than 0 is dropped silently",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 256 },
            Send(SEND.tver(1)),
            Quiet(150),
            NoCompletion,
            State(Rts),
        ],
    },
    Case {
        id: "resp.header.unknown-qp-dropped",
        iba: "§9.6",
        rule: "a packet to a QP number that does not exist is dropped silently",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 256 },
            Send(SEND.to_qp(0x00ab_cdef)),
            Quiet(150),
            NoCompletion,
            State(Rts),
        ],
    },
    Case {
        id: "resp.header.ack-req-clear",
        iba: "§9.7.5.1.3",
        rule: "a request without AckReq may go unacknowledged until a later one asks; that ACK covers both",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 256 },
            PostRecv { off: 256, len: 256 },
            Send(SEND.no_ack_req()),
            Send(Req::new(O::RC_SEND_ONLY, 1).len(64)),
            Ack(1),
            CompletionLen(wc::SUCCESS, 64),
            CompletionLen(wc::SUCCESS, 64),
        ],
    },
];
