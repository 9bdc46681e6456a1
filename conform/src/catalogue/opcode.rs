//! Responder opcode-sequence and length checks (IBA C9-40 opcode
//! sequence, C9-22 packet length, §9.9.3.1.3 message longer than the
//! receive): each is a NAK INVALID REQUEST, after which the QP is in ERR
//! (§10.3.1) and nothing of the request reaches memory.

use crate::agent::{wc, QpStateName::Err};
use crate::case::{Bytes, Case, Direction::Responder, Key, Req, Setup, Step::*, Va};
use roce_packet::{NakCode::InvalidRequest, Opcode as O};

pub const CASES: &[Case] = &[
    Case {
        id: "resp.opseq.middle-without-first",
        iba: "C9-40",
        rule: "a SEND MIDDLE outside a message is an invalid request",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 4096 },
            Send(Req::new(O::RC_SEND_MIDDLE, 0).len(1024)),
            Nak(0, InvalidRequest),
            State(Err),
        ],
    },
    Case {
        id: "resp.opseq.last-without-first",
        iba: "C9-40",
        rule: "a SEND LAST outside a message is an invalid request",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 4096 },
            Send(Req::new(O::RC_SEND_LAST, 0).len(100)),
            Nak(0, InvalidRequest),
            State(Err),
        ],
    },
    Case {
        id: "resp.opseq.write-middle-without-first",
        iba: "C9-40",
        rule: "an RDMA WRITE MIDDLE outside a message is an invalid request",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_RDMA_WRITE_MIDDLE, 0).len(1024)),
            Nak(0, InvalidRequest),
            State(Err),
        ],
    },
    Case {
        id: "resp.opseq.only-inside-message",
        iba: "C9-40",
        rule: "a SEND ONLY between a SEND FIRST and its LAST is an invalid request",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 4096 },
            Send(Req::new(O::RC_SEND_FIRST, 0).len(1024).no_ack_req()),
            Send(Req::new(O::RC_SEND_ONLY, 1).len(64)),
            Nak(1, InvalidRequest),
            State(Err),
        ],
    },
    Case {
        id: "resp.opseq.write-inside-send",
        iba: "C9-40",
        rule: "an RDMA WRITE MIDDLE continuing a SEND FIRST is an invalid request",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 4096 },
            Send(Req::new(O::RC_SEND_FIRST, 0).len(1024).no_ack_req()),
            Send(Req::new(O::RC_RDMA_WRITE_MIDDLE, 1).len(1024)),
            Nak(1, InvalidRequest),
            State(Err),
        ],
    },
    Case {
        id: "resp.len.first-shorter-than-mtu",
        iba: "C9-22",
        rule: "a FIRST packet carries exactly the path MTU: a shorter one is an invalid request",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 4096 },
            Send(Req::new(O::RC_SEND_FIRST, 0).len(512)),
            Nak(0, InvalidRequest),
            State(Err),
        ],
    },
    Case {
        id: "resp.len.middle-shorter-than-mtu",
        iba: "C9-22",
        rule: "a MIDDLE packet carries exactly the path MTU: a shorter one is an invalid request",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_RDMA_WRITE_FIRST, 0).len(1024).no_ack_req().reth(Va::Off(0), Key::Good, 4096)),
            Send(Req::new(O::RC_RDMA_WRITE_MIDDLE, 1).len(1000).data(1, 1024)),
            Nak(1, InvalidRequest),
            State(Err),
        ],
    },
    Case {
        id: "resp.len.only-over-mtu",
        iba: "C9-22",
        rule: "a packet carrying more than the path MTU is an invalid request",
        direction: Responder,
        // path MTU 512, 1000 bytes: over the path MTU, within any link's
        setup: Setup { mtu: 512, ..Setup::DEFAULT },
        steps: &[
            PostRecv { off: 0, len: 4096 },
            Send(Req::new(O::RC_SEND_ONLY, 0).len(1000)),
            Nak(0, InvalidRequest),
            Mem { off: 0, len: 1000, want: Bytes::Untouched },
        ],
    },
    Case {
        id: "resp.len.send-longer-than-receive",
        iba: "§9.9.3.1.3",
        rule: "a SEND longer than the receive buffer is an invalid request; the receive completes with a local length error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 64 },
            Send(Req::new(O::RC_SEND_ONLY, 0).len(128)),
            Nak(0, InvalidRequest),
            Completion(wc::LOC_LEN_ERR),
            State(Err),
        ],
    },
    Case {
        id: "resp.len.write-more-than-dma-length",
        iba: "C9-22",
        rule: "a WRITE whose payload exceeds its RETH DMA length is an invalid request, and nothing is written",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0).len(128).reth(Va::Off(0), Key::Good, 64)),
            Nak(0, InvalidRequest),
            Mem { off: 0, len: 128, want: Bytes::Untouched },
            State(Err),
        ],
    },
    Case {
        id: "resp.len.write-last-short-of-dma-length",
        iba: "C9-22",
        rule: "a WRITE whose packets end before its DMA length is an invalid request",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_RDMA_WRITE_FIRST, 0).len(1024).no_ack_req().reth(Va::Off(0), Key::Good, 3000)),
            Send(Req::new(O::RC_RDMA_WRITE_LAST, 1).len(100).data(1, 1024)),
            Nak(1, InvalidRequest),
            State(Err),
        ],
    },
    Case {
        id: "resp.send.with-immediate",
        iba: "§9.7.5.1 §11.4.2.1",
        rule: "a SEND with immediate data completes the receive with the immediate value",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 256 },
            Send(Req::new(O::RC_SEND_ONLY_WITH_IMMEDIATE, 0).len(32).imm(0x1234_5678)),
            Ack(0),
            CompletionLen(wc::SUCCESS, 32),
        ],
    },
    Case {
        id: "resp.write.with-immediate-consumes-receive",
        iba: "§9.7.5.1.6",
        rule: "an RDMA WRITE with immediate consumes a receive; without one it is answered with an RNR NAK",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0).len(32).imm(7).reth(Va::Off(0), Key::Good, 32)),
            RnrNak(0),
            PostRecv { off: 1024, len: 0 },
            Send(Req::new(O::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0).len(32).imm(7).reth(Va::Off(0), Key::Good, 32)),
            Ack(0),
            CompletionLen(wc::SUCCESS, 32),
            Mem { off: 0, len: 32, want: Bytes::Data { salt: 1, msg_off: 0 } },
        ],
    },
];
