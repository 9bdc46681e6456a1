//! Responder PSN checks (IBA §9.7.5.1.1): the expected PSN executes, a PSN
//! ahead is NAKed once per gap, a duplicate is answered from saved state
//! and never executed twice (SEND/WRITE re-acknowledged, READ re-executed,
//! atomics answered with the saved result), PSNs wrap at 2^24.

use crate::agent::{wc, QpStateName::Rts};
use crate::case::{
    background_u64, Bytes, Case, Direction::Responder, Key, Req, Setup, Step::*, Va,
};
use roce_packet::{NakCode::PsnSequenceError, Opcode as O};

const SEND: Req = Req::new(O::RC_SEND_ONLY, 0).len(64);

pub const CASES: &[Case] = &[
    Case {
        id: "resp.psn.expected",
        iba: "§9.7.5.1.1",
        rule: "a request at the expected PSN is executed and acknowledged",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 256 },
            Send(SEND),
            Ack(0),
            CompletionLen(wc::SUCCESS, 64),
            Mem { off: 0, len: 64, want: Bytes::Data { salt: 1, msg_off: 0 } },
        ],
    },
    Case {
        id: "resp.psn.ahead-naks",
        iba: "§9.7.5.1.1 C9-113",
        rule: "a PSN ahead of the expected one is answered with NAK PSN sequence error carrying the expected PSN",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 256 },
            Send(Req::new(O::RC_SEND_ONLY, 3).len(64)),
            Nak(0, PsnSequenceError),
            NoCompletion,
            Mem { off: 0, len: 64, want: Bytes::Untouched },
        ],
    },
    Case {
        id: "resp.psn.nak-once-per-gap",
        iba: "C9-113",
        rule: "after a NAK PSN sequence error, further out-of-sequence requests of the same gap get no second NAK",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 256 },
            Send(Req::new(O::RC_SEND_ONLY, 2).len(64)),
            Nak(0, PsnSequenceError),
            Send(Req::new(O::RC_SEND_ONLY, 3).len(64)),
            Send(Req::new(O::RC_SEND_ONLY, 4).len(64)),
            Quiet(200),
        ],
    },
    Case {
        id: "resp.psn.resume-after-nak",
        iba: "§9.7.5.1.1 C9-113",
        rule: "the QP stays usable after a sequence NAK: the expected PSN then executes",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 256 },
            Send(Req::new(O::RC_SEND_ONLY, 1).len(64)),
            Nak(0, PsnSequenceError),
            Send(SEND),
            Ack(0),
            CompletionLen(wc::SUCCESS, 64),
            State(Rts),
        ],
    },
    Case {
        id: "resp.psn.dup-send-reacked",
        iba: "§9.7.5.1.1 C9-108",
        rule: "a duplicate SEND is acknowledged again and not executed again",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 256 },
            PostRecv { off: 1024, len: 256 },
            Send(SEND),
            Ack(0),
            CompletionLen(wc::SUCCESS, 64),
            Send(Req::new(O::RC_SEND_ONLY, 0).len(64).data(9, 0)),
            Ack(0),
            NoCompletion,
            Mem { off: 1024, len: 64, want: Bytes::Untouched },
        ],
    },
    Case {
        id: "resp.psn.dup-write-not-reexecuted",
        iba: "§9.7.5.1.1 C9-108",
        rule: "a duplicate RDMA WRITE is acknowledged again and its data is not written again",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0).len(128).reth(Va::Off(256), Key::Good, 128)),
            Ack(0),
            Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0).len(128).data(9, 0).reth(Va::Off(256), Key::Good, 128)),
            Ack(0),
            Mem { off: 256, len: 128, want: Bytes::Data { salt: 1, msg_off: 0 } },
        ],
    },
    Case {
        id: "resp.psn.dup-read-reexecuted",
        iba: "§9.7.5.1.1",
        rule: "a duplicate RDMA READ request is executed again and answered with the same data",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_RDMA_READ_REQUEST, 0).reth(Va::Off(512), Key::Good, 2048)),
            ReadResp { psn: 0, off: 512, len: 2048 },
            Send(Req::new(O::RC_RDMA_READ_REQUEST, 0).reth(Va::Off(512), Key::Good, 2048)),
            ReadResp { psn: 0, off: 512, len: 2048 },
            State(Rts),
        ],
    },
    Case {
        id: "resp.psn.dup-atomic-saved-result",
        iba: "§9.7.5.1.1 C9-128",
        rule: "a duplicate atomic is answered with the saved original value and not executed again",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_FETCH_ADD, 0).atomic(Va::Off(64), Key::Good, 5, 0)),
            AtomicAck(0, background_u64(64)),
            Send(Req::new(O::RC_FETCH_ADD, 0).atomic(Va::Off(64), Key::Good, 5, 0)),
            AtomicAck(0, background_u64(64)),
            Mem { off: 64, len: 8, want: Bytes::U64(background_u64(64).wrapping_add(5)) },
        ],
    },
    Case {
        id: "resp.psn.wraps",
        iba: "§9.7.1",
        rule: "PSNs are 24-bit and wrap: 0xFFFFFF is followed by 0",
        direction: Responder,
        setup: Setup { rq_psn: 0xFF_FFFF, ..Setup::DEFAULT },
        steps: &[
            PostRecv { off: 0, len: 256 },
            PostRecv { off: 256, len: 256 },
            Send(SEND),
            Ack(0),
            Send(Req::new(O::RC_SEND_ONLY, 1).len(64).data(2, 0)),
            Ack(1),
            CompletionLen(wc::SUCCESS, 64),
            CompletionLen(wc::SUCCESS, 64),
            Mem { off: 256, len: 64, want: Bytes::Data { salt: 2, msg_off: 0 } },
        ],
    },
    Case {
        id: "resp.psn.multi-packet-write",
        iba: "§9.7.5.1.1 C9-40",
        rule: "a WRITE of FIRST, MIDDLE, LAST at consecutive PSNs lands whole and is acknowledged at its last PSN",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_RDMA_WRITE_FIRST, 0).len(1024).no_ack_req().reth(Va::Off(4096), Key::Good, 3000)),
            Send(Req::new(O::RC_RDMA_WRITE_MIDDLE, 1).len(1024).data(1, 1024).no_ack_req()),
            Send(Req::new(O::RC_RDMA_WRITE_LAST, 2).len(952).data(1, 2048)),
            Ack(2),
            Mem { off: 4096, len: 3000, want: Bytes::Data { salt: 1, msg_off: 0 } },
        ],
    },
];
