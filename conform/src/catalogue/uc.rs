//! Unreliable connection as responder (IBA §9.7.7 and §9.7.7.2): no
//! acknowledgements at all; an invalid packet or a PSN gap drops the
//! message it belongs to and never moves the QP to ERR.

use crate::agent::{wc, QpStateName::Rts, Service};
use crate::case::{Bytes, Case, Direction::Responder, Key, Req, Setup, Step::*, Va};
use roce_packet::Opcode as O;

const UC: Setup = Setup { service: Service::Uc, ..Setup::DEFAULT };

#[rustfmt::skip]
pub const CASES: &[Case] = &[
    Case { id: "resp.uc.send-unacknowledged", iba: "§9.7.7", direction: Responder, setup: UC,
        rule: "UC: a SEND ONLY is executed and never acknowledged",
        steps: &[PostRecv { off: 0, len: 256 }, Send(Req::new(O::UC_SEND_ONLY, 0).len(64)),
            Quiet(100), CompletionLen(wc::SUCCESS, 64),
            Mem { off: 0, len: 64, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.uc.write", iba: "§9.7.7", direction: Responder, setup: UC,
        rule: "UC: an RDMA WRITE ONLY lands in memory without an acknowledgement",
        steps: &[Send(Req::new(O::UC_RDMA_WRITE_ONLY, 0).len(100).reth(Va::Off(40), Key::Good, 100)),
            Quiet(100), Mem { off: 40, len: 100, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.uc.multi-packet-send", iba: "§9.7.7 C9-40", direction: Responder, setup: UC,
        rule: "UC: a SEND of FIRST, MIDDLE, LAST fills one receive",
        steps: &[PostRecv { off: 0, len: 4096 },
            Send(Req::new(O::UC_SEND_FIRST, 0).len(1024).no_ack_req()),
            Send(Req::new(O::UC_SEND_MIDDLE, 1).len(1024).data(1, 1024).no_ack_req()),
            Send(Req::new(O::UC_SEND_LAST, 2).len(200).data(1, 2048).no_ack_req()),
            CompletionLen(wc::SUCCESS, 2248),
            Mem { off: 0, len: 2248, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.uc.write-with-immediate", iba: "§9.7.7", direction: Responder, setup: UC,
        rule: "UC: an RDMA WRITE ONLY WITH IMMEDIATE consumes a receive and completes",
        steps: &[PostRecv { off: 8192, len: 0 },
            Send(Req::new(O::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0).len(32).imm(5).no_ack_req().reth(Va::Off(0), Key::Good, 32)),
            CompletionImm(wc::SUCCESS, 32, 5),
            Mem { off: 0, len: 32, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.uc.write-wrong-key-dropped", iba: "§9.7.7.2 §10.6.6", direction: Responder, setup: UC,
        rule: "UC: an RDMA WRITE with a wrong R_Key is dropped; nothing is written and the QP stays in RTS",
        steps: &[Send(Req::new(O::UC_RDMA_WRITE_ONLY, 0).len(64).no_ack_req().reth(Va::Off(0), Key::WrongKey, 64)),
            Quiet(100), Mem { off: 0, len: 64, want: Bytes::Untouched }, State(Rts),
            Send(Req::new(O::UC_RDMA_WRITE_ONLY, 1).len(64).data(6, 0).no_ack_req().reth(Va::Off(0), Key::Good, 64)),
            Quiet(100), Mem { off: 0, len: 64, want: Bytes::Data { salt: 6, msg_off: 0 } }] },
    Case { id: "resp.uc.middle-without-first-dropped", iba: "§9.7.7.2 C9-40", direction: Responder, setup: UC,
        rule: "UC: a SEND MIDDLE outside a message is dropped silently and the QP stays in RTS",
        steps: &[PostRecv { off: 0, len: 4096 },
            Send(Req::new(O::UC_SEND_MIDDLE, 0).len(1024).no_ack_req()), Quiet(100), NoCompletion,
            State(Rts)] },
    Case { id: "resp.uc.gap-then-new-first", iba: "§9.7.7.2", direction: Responder, setup: UC,
        rule: "UC: after a PSN gap inside a message, a new SEND FIRST ... LAST starts and completes a new message",
        steps: &[PostRecv { off: 0, len: 4096 },
            Send(Req::new(O::UC_SEND_FIRST, 0).len(1024).no_ack_req()),
            Send(Req::new(O::UC_SEND_FIRST, 5).len(1024).data(8, 0).no_ack_req()),
            Send(Req::new(O::UC_SEND_LAST, 6).len(16).data(8, 1024).no_ack_req()), Quiet(100),
            CompletionLen(wc::SUCCESS, 1040),
            Mem { off: 0, len: 1040, want: Bytes::Data { salt: 8, msg_off: 0 } }] },
];
