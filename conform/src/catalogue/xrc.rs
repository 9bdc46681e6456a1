//! XRC target as responder (IBA Vol 1 Annex A14): every request names, in
//! its XRCETH, the XRC SRQ of the target's domain whose receive WQE, CQ and
//! PD it uses; the target answers as an RC responder, in XRC opcodes. The
//! agent sets up a domain with one XRC SRQ (receives are posted to it) and
//! a target QP connected to the tester.

use crate::agent::{wc, QpStateName, Service};
use crate::case::{Bytes, Case, Direction::Responder, Key, Req, Setup, Step::*, Va};
use roce_packet::{NakCode, Opcode as O};

const XRC: Setup = Setup { service: Service::Xrc, ..Setup::DEFAULT };
/// XRC SEND ONLY (0xA4) and RDMA WRITE ONLY (0xAA).
const XRC_SEND_ONLY: O = O(0xA4);
const XRC_WRITE_ONLY: O = O(0xAA);

#[rustfmt::skip]
pub const CASES: &[Case] = &[
    Case { id: "resp.xrc.send", iba: "§9.2 Annex A14 (XRCETH)", direction: Responder, setup: XRC,
        rule: "XRC: a SEND with an XRCETH naming the target's XRC SRQ takes that SRQ's receive and is acknowledged with an XRC ACK",
        steps: &[PostRecv { off: 0, len: 256 }, Send(Req::new(XRC_SEND_ONLY, 0).len(64)), Ack(0),
            CompletionLen(wc::SUCCESS, 64),
            Mem { off: 0, len: 64, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.xrc.write", iba: "§9.7.5 Annex A14", direction: Responder, setup: XRC,
        rule: "XRC: an RDMA WRITE through the target lands, its key checked in the XRC SRQ's PD",
        steps: &[Send(Req::new(XRC_WRITE_ONLY, 0).len(64).reth(Va::Off(1024), Key::Good, 64)), Ack(0),
            Mem { off: 1024, len: 64, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.xrc.unknown-srq-naks", iba: "Annex A14 §9.7.5.2 (invalid request)", direction: Responder, setup: XRC,
        rule: "XRC: an XRCETH that names no XRC SRQ of the target's domain is an invalid request: NAK, the QP goes to ERR",
        steps: &[PostRecv { off: 0, len: 256 },
            Send(Req::new(XRC_SEND_ONLY, 0).len(64).xrc_srq(0x0A_BCDE)),
            Nak(0, NakCode::InvalidRequest), NoCompletion, State(QpStateName::Err)] },
    Case { id: "resp.xrc.rc-opcode-dropped", iba: "§9.6 Annex A14", direction: Responder, setup: XRC,
        rule: "an RC opcode addressed to an XRC target fails the transport check and is dropped silently",
        steps: &[PostRecv { off: 0, len: 256 }, Send(Req::new(O::RC_SEND_ONLY, 0).len(64)),
            Quiet(100), NoCompletion, State(QpStateName::Rts)] },
];
