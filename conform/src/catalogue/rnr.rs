//! Receiver not ready (IBA §9.7.5.1.6): a SEND that finds no receive is
//! answered with an RNR NAK carrying the QP's minimum RNR timer (Table 45);
//! the QP stays in RTS and takes the retried request once a receive is
//! posted. UC drops the message instead (§9.7.7.2).

use crate::agent::{wc, QpStateName::Rts, Service};
use crate::case::{Bytes, Case, Direction::Responder, Key, Req, Setup, Step::*, Va};
use roce_packet::Opcode as O;

const SEND: Req = Req::new(O::RC_SEND_ONLY, 0).len(64);

#[rustfmt::skip]
pub const CASES: &[Case] = &[
    Case { id: "resp.rnr.no-receive", iba: "§9.7.5.1.6", direction: Responder, setup: Setup::DEFAULT,
        rule: "a SEND without a posted receive is answered with an RNR NAK and the QP stays in RTS",
        steps: &[Send(SEND), RnrNak(0), State(Rts), NoCompletion] },
    Case { id: "resp.rnr.timer-field", iba: "§9.7.5.1.6 Table 45", direction: Responder, setup: Setup { min_rnr_timer: 20, ..Setup::DEFAULT },
        rule: "the RNR NAK carries the QP's min_rnr_timer",
        steps: &[Send(SEND), RnrNak(0)] },
    Case { id: "resp.rnr.retry-succeeds", iba: "§9.7.5.1.6", direction: Responder, setup: Setup::DEFAULT,
        rule: "the retried SEND at the same PSN executes once a receive is posted",
        steps: &[Send(SEND), RnrNak(0), PostRecv { off: 0, len: 128 }, Send(SEND), Ack(0),
            CompletionLen(wc::SUCCESS, 64),
            Mem { off: 0, len: 64, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.rnr.write-needs-no-receive", iba: "§9.7.5.1.6", direction: Responder, setup: Setup::DEFAULT,
        rule: "an RDMA WRITE without immediate consumes no receive: no RNR NAK without one",
        steps: &[Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0).len(64).reth(Va::Off(0), Key::Good, 64)),
            Ack(0), Mem { off: 0, len: 64, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.uc.no-receive-dropped", iba: "§9.7.7.2", direction: Responder, setup: Setup { service: Service::Uc, ..Setup::DEFAULT },
        rule: "UC: a SEND without a posted receive is dropped silently and the QP stays in RTS",
        steps: &[Send(Req::new(O::UC_SEND_ONLY, 0).len(64).no_ack_req()), Quiet(100),
            PostRecv { off: 0, len: 128 },
            Send(Req::new(O::UC_SEND_ONLY, 1).len(64).data(3, 0).no_ack_req()), Quiet(100),
            CompletionLen(wc::SUCCESS, 64),
            Mem { off: 0, len: 64, want: Bytes::Data { salt: 3, msg_off: 0 } }, State(Rts)] },
    Case { id: "resp.uc.gap-drops-message", iba: "§9.7.7.2", direction: Responder, setup: Setup { service: Service::Uc, ..Setup::DEFAULT },
        rule: "UC: a PSN gap inside a message drops the message; the next FIRST or ONLY starts a new one",
        steps: &[PostRecv { off: 0, len: 4096 },
            Send(Req::new(O::UC_SEND_FIRST, 0).len(1024).no_ack_req()),
            Send(Req::new(O::UC_SEND_LAST, 2).len(100).data(1, 1024).no_ack_req()),
            Send(Req::new(O::UC_SEND_ONLY, 3).len(64).data(5, 0).no_ack_req()), Quiet(100),
            CompletionLen(wc::SUCCESS, 64),
            Mem { off: 0, len: 64, want: Bytes::Data { salt: 5, msg_off: 0 } }, State(Rts)] },
];
