//! Unreliable datagram as responder (IBA §9.8; the Q_Key check §10.2.4;
//! header checks §9.6): one packet per message, a DETH naming the sender
//! and its Q_Key, no PSN check, no acknowledgement; the receive gets a
//! 40-byte GRH area before the payload. Anything wrong drops the datagram
//! and leaves the QP in RTS.

use crate::agent::{wc, QpStateName::Rts, Service};
use crate::case::{Bytes, Case, Direction::Responder, Req, Setup, Step::*};
use roce_packet::Opcode as O;

const UD: Setup = Setup { service: Service::Ud, ..Setup::DEFAULT };
/// A UD QP attached to the case's multicast group.
const MC: Setup = Setup { service: Service::Ud, mcast: true, ..Setup::DEFAULT };
const MSEND: Req = Req::new(O::UD_SEND_ONLY, 0).len(64).no_ack_req().to_group();
const SEND: Req = Req::new(O::UD_SEND_ONLY, 0).len(64).no_ack_req();

#[rustfmt::skip]
pub const CASES: &[Case] = &[
    Case { id: "resp.ud.send", iba: "§9.8 §11.4.2.1", direction: Responder, setup: UD,
        rule: "UD: a SEND ONLY completes a receive with 40 + payload bytes, the payload after the GRH area, no acknowledgement",
        steps: &[PostRecv { off: 0, len: 40 + 256 }, Send(SEND), Quiet(100),
            CompletionLen(wc::SUCCESS, 40 + 64),
            Mem { off: 40, len: 64, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.ud.grh-area", iba: "§11.4.2.1 (RoCEv2 IPv4)", direction: Responder, setup: UD,
        rule: "UD over IPv4: bytes 20..40 of the GRH area hold the datagram's IPv4 header, sender to receiver",
        steps: &[PostRecv { off: 0, len: 40 + 256 }, Send(SEND),
            CompletionLen(wc::SUCCESS, 40 + 64), Mem { off: 0, len: 40, want: Bytes::GrhV4 }] },
    Case { id: "resp.ud.with-immediate", iba: "§9.8", direction: Responder, setup: UD,
        rule: "UD: a SEND ONLY WITH IMMEDIATE completes the receive",
        steps: &[PostRecv { off: 0, len: 40 + 256 },
            Send(Req::new(O::UD_SEND_ONLY_WITH_IMMEDIATE, 0).len(16).imm(77).no_ack_req()),
            CompletionImm(wc::SUCCESS, 40 + 16, 77)] },
    Case { id: "resp.ud.qkey-mismatch-dropped", iba: "§10.2.4 §9.6", direction: Responder, setup: UD,
        rule: "UD: a datagram whose DETH Q_Key differs from the QP's is dropped silently",
        steps: &[PostRecv { off: 0, len: 40 + 256 }, Send(SEND.qkey(0x2222_2222)), Quiet(100),
            NoCompletion, Send(Req::new(O::UD_SEND_ONLY, 1).len(64).data(4, 0).no_ack_req()),
            CompletionLen(wc::SUCCESS, 40 + 64),
            Mem { off: 40, len: 64, want: Bytes::Data { salt: 4, msg_off: 0 } }] },
    Case { id: "resp.ud.no-receive-dropped", iba: "§9.8 §9.7.5.1.6", direction: Responder, setup: UD,
        rule: "UD: a datagram that finds no receive is dropped (no RNR NAK); the QP stays in RTS",
        steps: &[Send(SEND), Quiet(100), State(Rts), PostRecv { off: 0, len: 40 + 256 },
            Send(Req::new(O::UD_SEND_ONLY, 1).len(64).data(5, 0).no_ack_req()),
            CompletionLen(wc::SUCCESS, 40 + 64),
            Mem { off: 40, len: 64, want: Bytes::Data { salt: 5, msg_off: 0 } }] },
    Case { id: "resp.ud.psn-not-checked", iba: "§9.8", direction: Responder, setup: UD,
        rule: "UD: the PSN is not checked: datagrams with any PSN, in any order, are delivered",
        steps: &[PostRecv { off: 0, len: 40 + 256 }, PostRecv { off: 512, len: 40 + 256 },
            Send(Req::new(O::UD_SEND_ONLY, 1000).len(64).no_ack_req()),
            Send(Req::new(O::UD_SEND_ONLY, 3).len(64).data(2, 0).no_ack_req()),
            CompletionLen(wc::SUCCESS, 40 + 64), CompletionLen(wc::SUCCESS, 40 + 64),
            Mem { off: 512 + 40, len: 64, want: Bytes::Data { salt: 2, msg_off: 0 } }] },
    Case { id: "resp.ud.over-mtu-dropped", iba: "§9.8 C9-22", direction: Responder, setup: UD,
        rule: "UD: a datagram with more payload than the path MTU (the port's 1024 here) is dropped",
        steps: &[PostRecv { off: 0, len: 40 + 4096 },
            Send(Req::new(O::UD_SEND_ONLY, 0).len(1100).no_ack_req()), Quiet(100), NoCompletion,
            State(Rts)] },
    Case { id: "resp.ud.pkey-mismatch-dropped", iba: "§9.6 §10.9", direction: Responder, setup: UD,
        rule: "UD: a datagram whose P_Key does not match is dropped silently",
        steps: &[PostRecv { off: 0, len: 40 + 256 }, Send(SEND.pkey(0x1234)), Quiet(100),
            NoCompletion, State(Rts)] },
    Case { id: "resp.ud.rc-opcode-dropped", iba: "§9.6", direction: Responder, setup: UD,
        rule: "an RC opcode addressed to a UD QP fails the transport check and is dropped silently",
        steps: &[PostRecv { off: 0, len: 40 + 256 }, Send(Req::new(O::RC_SEND_ONLY, 0).len(64)),
            Quiet(100), NoCompletion, State(Rts)] },
    Case { id: "resp.ud.mcast-delivered", iba: "§9.8 (UD multicast: QPN 0xFFFFFF)", direction: Responder, setup: MC,
        rule: "UD multicast: a datagram to the group's address and QPN 0xFFFFFF completes a receive of the attached QP, the GRH area before the payload",
        steps: &[PostRecv { off: 0, len: 40 + 256 }, Send(MSEND), Quiet(100),
            CompletionLen(wc::SUCCESS, 40 + 64),
            Mem { off: 40, len: 64, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.ud.mcast-qkey-mismatch-dropped", iba: "§10.2.4 §9.6 (multicast)", direction: Responder, setup: MC,
        rule: "UD multicast: an attached QP drops a group datagram whose DETH Q_Key differs from its own",
        steps: &[PostRecv { off: 0, len: 40 + 256 }, Send(MSEND.qkey(0x2222_2222)), Quiet(100),
            NoCompletion, Send(Req::new(O::UD_SEND_ONLY, 1).len(64).data(6, 0).no_ack_req().to_group()),
            CompletionLen(wc::SUCCESS, 40 + 64),
            Mem { off: 40, len: 64, want: Bytes::Data { salt: 6, msg_off: 0 } }] },
    Case { id: "resp.ud.mcast-qpn-unicast-dropped", iba: "§9.8 (UD multicast)", direction: Responder, setup: MC,
        rule: "UD multicast: a datagram to QPN 0xFFFFFF whose destination is no group (the device's own address) reaches no attached QP",
        steps: &[PostRecv { off: 0, len: 40 + 256 },
            Send(Req::new(O::UD_SEND_ONLY, 0).len(64).no_ack_req().to_qp(0xFF_FFFF)), Quiet(100),
            NoCompletion, State(Rts)] },
];
