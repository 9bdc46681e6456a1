//! QP states beyond RTS and ERR (IBA §10.3.1): a QP in RTR executes what
//! arrives but its send queue takes nothing (`ibv_post_send` is refused,
//! §11.4.1.1); a QP in SQD starts no new send work request but its
//! responder goes on, and back in RTS the held request leaves.

use crate::agent::{wc, QpStateName::*};
use crate::case::{Bytes, Case, Direction::*, Post, Req, Resp, Setup, Step::*};
use roce_packet::Opcode as O;

const SEND: Req = Req::new(O::RC_SEND_ONLY, 0).len(64);
const RTR: Setup = Setup { stop_at: Rtr, ..Setup::DEFAULT };

#[rustfmt::skip]
pub const CASES: &[Case] = &[
    Case { id: "resp.state.rtr-executes", iba: "§10.3.1", direction: Responder, setup: RTR,
        rule: "a QP in RTR (not yet RTS) executes a SEND that arrives and acknowledges it",
        steps: &[PostRecv { off: 0, len: 256 }, Send(SEND), Ack(0), CompletionLen(wc::SUCCESS, 64),
            Mem { off: 0, len: 64, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "req.state.rtr-refuses-sends", iba: "§10.3.1 §11.4.1.1", direction: Requester, setup: RTR,
        rule: "a QP in RTR refuses a send work request and sends nothing",
        steps: &[PostRefused(Post::new(crate::agent::wr::SEND, 0, 64)), Quiet(100), State(Rtr)] },
    Case { id: "req.state.sqd-starts-nothing", iba: "§10.3.1", direction: Requester, setup: Setup::DEFAULT,
        rule: "a send work request posted in SQD is not started; back in RTS it leaves at sq_psn",
        steps: &[Modify(Sqd), Post(Post::new(crate::agent::wr::SEND, 0, 64)), Quiet(100),
            Modify(Rts), Request(O::RC_SEND_ONLY, 0), Respond(Resp::Ack(0)), Completion(wc::SUCCESS)] },
    Case { id: "resp.state.sqd-still-receives", iba: "§10.3.1", direction: Responder, setup: Setup::DEFAULT,
        rule: "a QP in SQD still executes and acknowledges the requests that arrive",
        steps: &[Modify(Sqd), PostRecv { off: 0, len: 256 }, Send(SEND), Ack(0),
            CompletionLen(wc::SUCCESS, 64)] },
];
