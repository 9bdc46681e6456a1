//! The target as requester (IBA §9.7.5.2 acknowledgements as the
//! requester sees them, §9.7.6.1.3 retransmission, §9.9.2 requester
//! errors): the agent posts work, the tester answers, loses, NAKs or
//! delays, and the completions and retransmissions must follow the rules.

use crate::agent::{wc, wr, QpStateName::Err};
use crate::case::{Bytes, Case, Direction::Requester, Post, Resp, Setup, Step::*};
use roce_packet::{
    NakCode::{InvalidRequest, PsnSequenceError, RemoteAccessError, RemoteOperationalError},
    Opcode as O,
};

const SEND: Post = Post::new(wr::SEND, 0, 64);
const WRITE: Post = Post::new(wr::RDMA_WRITE, 0, 64);
/// Timeout code 12: 4.096 µs × 2^12 = 16.8 ms.
const T12: Setup = Setup { timeout: 12, ..Setup::DEFAULT };

const fn read(len: u32, salt: u8, skip: u32, only: Option<u32>) -> Resp {
    Resp::Read { psn: 0, len, salt, skip, only }
}

pub const CASES: &[Case] = &[
    Case {
        id: "req.send.acked",
        iba: "§9.7.5.2 C9-117",
        rule: "a SEND leaves at sq_psn as SEND ONLY and completes successfully when acknowledged",
        direction: Requester,
        setup: Setup::DEFAULT,
        steps: &[Post(SEND), Request(O::RC_SEND_ONLY, 0), Respond(Resp::Ack(0)), Completion(wc::SUCCESS)],
    },
    Case {
        id: "req.send.segmented",
        iba: "C9-22",
        rule: "a 3000-byte SEND at path MTU 1024 leaves as FIRST, MIDDLE, LAST at consecutive PSNs",
        direction: Requester,
        setup: Setup::DEFAULT,
        steps: &[
            Post(Post::new(wr::SEND, 0, 3000)),
            Request(O::RC_SEND_FIRST, 0),
            Request(O::RC_SEND_MIDDLE, 1),
            Request(O::RC_SEND_LAST, 2),
            Respond(Resp::Ack(2)),
            Completion(wc::SUCCESS),
        ],
    },
    Case {
        id: "req.ack.coalesced",
        iba: "§9.7.5.2.1 C9-117",
        rule: "one ACK at the last PSN completes every earlier request",
        direction: Requester,
        setup: Setup::DEFAULT,
        steps: &[
            Post(SEND),
            Post(SEND),
            Post(SEND),
            Request(O::RC_SEND_ONLY, 0),
            Request(O::RC_SEND_ONLY, 1),
            Request(O::RC_SEND_ONLY, 2),
            Respond(Resp::Ack(2)),
            Completion(wc::SUCCESS),
            Completion(wc::SUCCESS),
            Completion(wc::SUCCESS),
        ],
    },
    Case {
        id: "req.ack.stale-ignored",
        iba: "C9-118",
        rule: "an ACK for a PSN before the outstanding request is dropped and completes nothing",
        direction: Requester,
        setup: Setup::DEFAULT,
        steps: &[
            Post(SEND),
            Request(O::RC_SEND_ONLY, 0),
            Respond(Resp::Ack(-1)),
            NoCompletion,
            Respond(Resp::Ack(0)),
            Completion(wc::SUCCESS),
        ],
    },
    Case {
        id: "req.retransmit.after-timeout",
        iba: "§9.7.6.1.3 C9-140",
        rule: "an unacknowledged request is sent again at the same PSN once the local ACK timeout (4.096 µs × 2^timeout) has passed, not before",
        direction: Requester,
        setup: T12,
        steps: &[
            Post(SEND),
            Request(O::RC_SEND_ONLY, 0),
            Retransmit { op: O::RC_SEND_ONLY, psn: 0, min_ms: 15, max_ms: 400 },
            Respond(Resp::Ack(0)),
            Completion(wc::SUCCESS),
        ],
    },
    Case {
        id: "req.retry.exhausted",
        iba: "§9.7.6.1.3 C9-141 §9.9.2",
        rule: "after retry_cnt retransmissions without an answer the request completes with RETRY_EXC_ERR and the QP enters ERR",
        direction: Requester,
        setup: Setup { timeout: 10, retry_cnt: 1, ..Setup::DEFAULT },
        steps: &[
            Post(SEND),
            Request(O::RC_SEND_ONLY, 0),
            Retransmit { op: O::RC_SEND_ONLY, psn: 0, min_ms: 3, max_ms: 400 },
            Completion(wc::RETRY_EXC_ERR),
            State(Err),
            Quiet(100),
        ],
    },
    Case {
        id: "req.rnr.retried",
        iba: "§9.7.5.2.8",
        rule: "after an RNR NAK the request is sent again at its PSN once the NAK's timer has passed",
        direction: Requester,
        setup: Setup::DEFAULT,
        steps: &[
            Post(SEND),
            Request(O::RC_SEND_ONLY, 0),
            Respond(Resp::RnrNak(0, 14)),
            Retransmit { op: O::RC_SEND_ONLY, psn: 0, min_ms: 1, max_ms: 400 },
            Respond(Resp::Ack(0)),
            Completion(wc::SUCCESS),
        ],
    },
    Case {
        id: "req.rnr.exhausted",
        iba: "§9.7.5.2.8 §9.9.2",
        rule: "with rnr_retry 0 an RNR NAK completes the request with RNR_RETRY_EXC_ERR",
        direction: Requester,
        setup: Setup { rnr_retry: 0, ..Setup::DEFAULT },
        steps: &[
            Post(SEND),
            Request(O::RC_SEND_ONLY, 0),
            Respond(Resp::RnrNak(0, 1)),
            Completion(wc::RNR_RETRY_EXC_ERR),
            State(Err),
        ],
    },
    Case {
        id: "req.nak.remote-access",
        iba: "§9.9.2 Table 44",
        rule: "NAK remote access error completes the request with REM_ACCESS_ERR and the QP enters ERR",
        direction: Requester,
        setup: Setup::DEFAULT,
        steps: &[
            Post(WRITE),
            Request(O::RC_RDMA_WRITE_ONLY, 0),
            Respond(Resp::Nak(0, RemoteAccessError)),
            Completion(wc::REM_ACCESS_ERR),
            State(Err),
        ],
    },
    Case {
        id: "req.nak.invalid-request",
        iba: "§9.9.2 Table 44",
        rule: "NAK invalid request completes the request with REM_INV_REQ_ERR",
        direction: Requester,
        setup: Setup::DEFAULT,
        steps: &[
            Post(SEND),
            Request(O::RC_SEND_ONLY, 0),
            Respond(Resp::Nak(0, InvalidRequest)),
            Completion(wc::REM_INV_REQ_ERR),
            State(Err),
        ],
    },
    Case {
        id: "req.nak.remote-operational",
        iba: "§9.9.2 Table 44",
        rule: "NAK remote operational error completes the request with REM_OP_ERR",
        direction: Requester,
        setup: Setup::DEFAULT,
        steps: &[
            Post(SEND),
            Request(O::RC_SEND_ONLY, 0),
            Respond(Resp::Nak(0, RemoteOperationalError)),
            Completion(wc::REM_OP_ERR),
            State(Err),
        ],
    },
    Case {
        id: "req.nak.sequence-go-back",
        iba: "§9.7.5.2.2 C9-113",
        rule: "NAK PSN sequence error at n acknowledges everything before n and the requester resends from n",
        direction: Requester,
        setup: Setup::DEFAULT,
        steps: &[
            Post(SEND),
            Post(SEND),
            Request(O::RC_SEND_ONLY, 0),
            Request(O::RC_SEND_ONLY, 1),
            Respond(Resp::Nak(1, PsnSequenceError)),
            Completion(wc::SUCCESS),
            Retransmit { op: O::RC_SEND_ONLY, psn: 1, min_ms: 0, max_ms: 400 },
            Respond(Resp::Ack(1)),
            Completion(wc::SUCCESS),
        ],
    },
    Case {
        id: "req.read.completes",
        iba: "§9.7.5.2 §9.4.4",
        rule: "an RDMA READ of 2048 bytes takes two PSNs; its responses land in the local buffer",
        direction: Requester,
        setup: Setup::DEFAULT,
        steps: &[
            Post(Post::new(wr::RDMA_READ, 0, 2048)),
            Request(O::RC_RDMA_READ_REQUEST, 0),
            Respond(read(2048, 9, 0, None)),
            Completion(wc::SUCCESS),
            Mem { off: 0, len: 2048, want: Bytes::Data { salt: 9, msg_off: 0 } },
            Post(SEND),
            Request(O::RC_SEND_ONLY, 2),
        ],
    },
    Case {
        id: "req.read.first-response-lost",
        iba: "§9.7.5.2.3 C9-127",
        rule: "a READ response PSN gap (FIRST lost) makes the requester issue the READ again from its first PSN",
        direction: Requester,
        setup: T12,
        steps: &[
            Post(Post::new(wr::RDMA_READ, 0, 2048)),
            Request(O::RC_RDMA_READ_REQUEST, 0),
            Respond(read(2048, 9, 1, None)),
            Retransmit { op: O::RC_RDMA_READ_REQUEST, psn: 0, min_ms: 0, max_ms: 400 },
            Respond(read(2048, 9, 0, None)),
            Completion(wc::SUCCESS),
            Mem { off: 0, len: 2048, want: Bytes::Data { salt: 9, msg_off: 0 } },
        ],
    },
    Case {
        id: "req.atomic.result",
        iba: "§9.4.4 §9.7.5.2",
        rule: "an atomic's original value from the atomic ACK lands in the local buffer",
        direction: Requester,
        setup: Setup::DEFAULT,
        steps: &[
            Post(Post::new(wr::ATOMIC_FETCH_AND_ADD, 8, 8).atomic(5, 0)),
            Request(O::RC_FETCH_ADD, 0),
            Respond(Resp::AtomicAck(0, 0x1122_3344_5566_7788)),
            Completion(wc::SUCCESS),
            Mem { off: 8, len: 8, want: Bytes::U64(0x1122_3344_5566_7788) },
        ],
    },
    Case {
        id: "req.atomic.implied-nak",
        iba: "§9.7.5.2.3 C9-127",
        rule: "an ACK past an atomic whose response never came makes the requester send the atomic again",
        direction: Requester,
        setup: T12,
        steps: &[
            Post(Post::new(wr::ATOMIC_FETCH_AND_ADD, 8, 8).atomic(5, 0)),
            Post(SEND),
            Request(O::RC_FETCH_ADD, 0),
            Request(O::RC_SEND_ONLY, 1),
            Respond(Resp::Ack(1)),
            Retransmit { op: O::RC_FETCH_ADD, psn: 0, min_ms: 0, max_ms: 400 },
        ],
    },
];
