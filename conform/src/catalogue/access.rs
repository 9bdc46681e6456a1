//! Responder memory checks (IBA §10.6.6 R_Key, PD, access rights and
//! bounds → NAK REMOTE ACCESS ERROR; §9.4.4 atomics): a refused request
//! leaves memory as it was and the QP in ERR (§10.3.1, C10-31); zero-length
//! operations need no key (§9.7.5.1.4).

use crate::agent::{access as acc, QpStateName::Err};
use crate::case::{
    background_u64, Bytes, Case, Direction::Responder, Key, Req, Setup, Step::*, Va,
};
use roce_packet::{
    NakCode::{InvalidRequest, RemoteAccessError},
    Opcode as O,
};

const fn write(va: Va, key: Key, len: u32) -> Req {
    Req::new(O::RC_RDMA_WRITE_ONLY, 0).len(len).reth(va, key, len)
}

const fn read(va: Va, key: Key, len: u32) -> Req {
    Req::new(O::RC_RDMA_READ_REQUEST, 0).reth(va, key, len)
}

const NO_READ: Setup = Setup { mr_access: acc::LOCAL_WRITE | acc::REMOTE_WRITE, ..Setup::DEFAULT };
const NO_WRITE: Setup = Setup { mr_access: acc::LOCAL_WRITE | acc::REMOTE_READ, ..Setup::DEFAULT };
const NO_ATOMIC: Setup =
    Setup { mr_access: acc::LOCAL_WRITE | acc::REMOTE_READ | acc::REMOTE_WRITE, ..Setup::DEFAULT };

pub const CASES: &[Case] = &[
    Case {
        id: "resp.access.write-wrong-key",
        iba: "§10.6.6",
        rule: "an RDMA WRITE with an R_Key of the right index but the wrong key byte is a remote access error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(write(Va::Off(0), Key::WrongKey, 64)),
            Nak(0, RemoteAccessError),
            Mem { off: 0, len: 64, want: Bytes::Untouched },
            State(Err),
        ],
    },
    Case {
        id: "resp.access.write-unknown-key",
        iba: "§10.6.6",
        rule: "an RDMA WRITE with an R_Key naming no region is a remote access error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(write(Va::Off(0), Key::WrongIndex, 64)),
            Nak(0, RemoteAccessError),
            Mem { off: 0, len: 64, want: Bytes::Untouched },
            State(Err),
        ],
    },
    Case {
        id: "resp.access.write-past-end",
        iba: "§10.6.6",
        rule: "an RDMA WRITE reaching past the region's end is a remote access error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(write(Va::Off(65536 - 32), Key::Good, 64)),
            Nak(0, RemoteAccessError),
            Mem { off: 65536 - 32, len: 32, want: Bytes::Untouched },
            State(Err),
        ],
    },
    Case {
        id: "resp.access.write-before-start",
        iba: "§10.6.6",
        rule: "an RDMA WRITE starting before the region is a remote access error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(write(Va::Before(16), Key::Good, 64)),
            Nak(0, RemoteAccessError),
            Mem { off: 0, len: 64, want: Bytes::Untouched },
            State(Err),
        ],
    },
    Case {
        id: "resp.access.write-va-wraps",
        iba: "§10.6.6",
        rule: "an RDMA WRITE whose address plus length wraps 2^64 is a remote access error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[Send(write(Va::Abs(u64::MAX - 15), Key::Good, 64)), Nak(0, RemoteAccessError), State(Err)],
    },
    Case {
        id: "resp.access.write-without-right",
        iba: "§10.6.6",
        rule: "an RDMA WRITE into a region registered without remote write is a remote access error",
        direction: Responder,
        setup: NO_WRITE,
        steps: &[
            Send(write(Va::Off(0), Key::Good, 64)),
            Nak(0, RemoteAccessError),
            Mem { off: 0, len: 64, want: Bytes::Untouched },
            State(Err),
        ],
    },
    Case {
        id: "resp.access.read-wrong-key",
        iba: "§10.6.6",
        rule: "an RDMA READ with a wrong R_Key is a remote access error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[Send(read(Va::Off(0), Key::WrongKey, 64)), Nak(0, RemoteAccessError), State(Err)],
    },
    Case {
        id: "resp.access.read-past-end",
        iba: "§10.6.6",
        rule: "an RDMA READ reaching past the region's end is a remote access error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[Send(read(Va::Off(65000), Key::Good, 1024)), Nak(0, RemoteAccessError), State(Err)],
    },
    Case {
        id: "resp.access.read-without-right",
        iba: "§10.6.6",
        rule: "an RDMA READ of a region registered without remote read is a remote access error",
        direction: Responder,
        setup: NO_READ,
        steps: &[Send(read(Va::Off(0), Key::Good, 64)), Nak(0, RemoteAccessError), State(Err)],
    },
    Case {
        id: "resp.access.read-2gib",
        iba: "§10.6.6 §9.4.4",
        rule: "an RDMA READ of 2 GiB from a 64 KiB region is a remote access error, not a flood",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[Send(read(Va::Off(0), Key::Good, 1 << 31)), Nak(0, RemoteAccessError), State(Err)],
    },
    Case {
        id: "resp.access.read",
        iba: "§9.4.4 §9.7.5.1",
        rule: "an RDMA READ of 3000 bytes is answered with FIRST, MIDDLE, LAST responses of the region's bytes",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[Send(read(Va::Off(100), Key::Good, 3000)), ReadResp { psn: 0, off: 100, len: 3000 }],
    },
    Case {
        id: "resp.access.zero-length-write-no-key",
        iba: "§9.7.5.1 §10.6.6",
        rule: "a zero-length RDMA WRITE is acknowledged whatever its R_Key: no memory is accessed",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[Send(write(Va::Abs(0), Key::WrongIndex, 0)), Ack(0)],
    },
    Case {
        id: "resp.access.zero-length-read",
        iba: "§9.7.5.1 §10.6.6",
        rule: "a zero-length RDMA READ is answered with one READ RESPONSE ONLY without payload",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[Send(read(Va::Abs(0), Key::WrongIndex, 0)), ReadResp { psn: 0, off: 0, len: 0 }],
    },
    Case {
        id: "resp.atomic.fetch-add",
        iba: "§9.4.4",
        rule: "FETCH ADD returns the original value and stores the sum",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_FETCH_ADD, 0).atomic(Va::Off(8), Key::Good, 3, 0)),
            AtomicAck(0, background_u64(8)),
            Mem { off: 8, len: 8, want: Bytes::U64(background_u64(8).wrapping_add(3)) },
        ],
    },
    Case {
        id: "resp.atomic.cmp-swap-equal",
        iba: "§9.4.4",
        rule: "COMPARE SWAP with an equal compare value stores the swap value and returns the original",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_COMPARE_SWAP, 0).atomic(Va::Off(16), Key::Good, 0x77, background_u64(16))),
            AtomicAck(0, background_u64(16)),
            Mem { off: 16, len: 8, want: Bytes::U64(0x77) },
        ],
    },
    Case {
        id: "resp.atomic.cmp-swap-differs",
        iba: "§9.4.4",
        rule: "COMPARE SWAP with a different compare value leaves memory and returns the original",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_COMPARE_SWAP, 0).atomic(Va::Off(16), Key::Good, 0x77, 1)),
            AtomicAck(0, background_u64(16)),
            Mem { off: 16, len: 8, want: Bytes::Untouched },
        ],
    },
    Case {
        id: "resp.atomic.misaligned",
        iba: "§9.4.4 §9.7.5.1",
        rule: "an atomic at an address that is not 8-byte aligned is an invalid request",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_FETCH_ADD, 0).atomic(Va::Off(4), Key::Good, 1, 0)),
            Nak(0, InvalidRequest),
            Mem { off: 0, len: 16, want: Bytes::Untouched },
            State(Err),
        ],
    },
    Case {
        id: "resp.atomic.without-right",
        iba: "§10.6.6",
        rule: "an atomic on a region registered without remote atomic is a remote access error",
        direction: Responder,
        setup: NO_ATOMIC,
        steps: &[
            Send(Req::new(O::RC_FETCH_ADD, 0).atomic(Va::Off(8), Key::Good, 1, 0)),
            Nak(0, RemoteAccessError),
            Mem { off: 8, len: 8, want: Bytes::Untouched },
            State(Err),
        ],
    },
    Case {
        id: "resp.access.read-unknown-key",
        iba: "§10.6.6",
        rule: "an RDMA READ with an R_Key naming no region is a remote access error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[Send(read(Va::Off(0), Key::WrongIndex, 64)), Nak(0, RemoteAccessError), State(Err)],
    },
    Case {
        id: "resp.access.read-before-start",
        iba: "§10.6.6",
        rule: "an RDMA READ starting before the region is a remote access error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[Send(read(Va::Before(8), Key::Good, 64)), Nak(0, RemoteAccessError), State(Err)],
    },
    Case {
        id: "resp.access.read-va-wraps",
        iba: "§10.6.6",
        rule: "an RDMA READ whose address plus length wraps 2^64 is a remote access error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[Send(read(Va::Abs(u64::MAX - 7), Key::Good, 64)), Nak(0, RemoteAccessError), State(Err)],
    },
    Case {
        id: "resp.access.read-whole-region",
        iba: "§10.6.6",
        rule: "an RDMA READ of the region's last byte up to its end is allowed",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[Send(read(Va::Off(65536 - 100), Key::Good, 100)), ReadResp { psn: 0, off: 65536 - 100, len: 100 }],
    },
    Case {
        id: "resp.access.write-to-last-byte",
        iba: "§10.6.6",
        rule: "an RDMA WRITE ending exactly at the region's end is allowed",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(write(Va::Off(65536 - 64), Key::Good, 64)),
            Ack(0),
            Mem { off: 65536 - 64, len: 64, want: Bytes::Data { salt: 1, msg_off: 0 } },
        ],
    },
    Case {
        id: "resp.access.write-middle-past-end",
        iba: "§10.6.6",
        rule: "a multi-packet WRITE whose RETH reaches past the end is refused at its FIRST packet",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_RDMA_WRITE_FIRST, 0).len(1024).reth(Va::Off(65536 - 1500), Key::Good, 2048)),
            Nak(0, RemoteAccessError),
            Mem { off: 65536 - 1500, len: 1024, want: Bytes::Untouched },
            State(Err),
        ],
    },
    Case {
        id: "resp.atomic.wrong-key",
        iba: "§10.6.6",
        rule: "an atomic with a wrong R_Key is a remote access error and changes nothing",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_COMPARE_SWAP, 0).atomic(Va::Off(16), Key::WrongKey, 1, 0)),
            Nak(0, RemoteAccessError),
            Mem { off: 16, len: 8, want: Bytes::Untouched },
            State(Err),
        ],
    },
    Case {
        id: "resp.atomic.past-end",
        iba: "§10.6.6",
        rule: "an atomic whose 8 bytes reach past the region's end is a remote access error",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_FETCH_ADD, 0).atomic(Va::Off(65536), Key::Good, 1, 0)),
            Nak(0, RemoteAccessError),
            State(Err),
        ],
    },
    Case {
        id: "resp.atomic.last-word",
        iba: "§9.4.4",
        rule: "an atomic on the region's last 8 bytes is allowed",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_FETCH_ADD, 0).atomic(Va::Off(65536 - 8), Key::Good, 2, 0)),
            AtomicAck(0, background_u64(65536 - 8)),
            Mem { off: 65536 - 8, len: 8, want: Bytes::U64(background_u64(65536 - 8).wrapping_add(2)) },
        ],
    },
    Case {
        id: "resp.atomic.fetch-add-wraps",
        iba: "§9.4.4",
        rule: "FETCH ADD wraps modulo 2^64",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_FETCH_ADD, 0).atomic(Va::Off(32), Key::Good, u64::MAX, 0)),
            AtomicAck(0, background_u64(32)),
            Mem { off: 32, len: 8, want: Bytes::U64(background_u64(32).wrapping_sub(1)) },
        ],
    },
    Case {
        id: "resp.atomic.cmp-swap-misaligned",
        iba: "§9.4.4 §9.7.5.1",
        rule: "a COMPARE SWAP at an address that is not 8-byte aligned is an invalid request",
        direction: Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_COMPARE_SWAP, 0).atomic(Va::Off(2), Key::Good, 1, 0)),
            Nak(0, InvalidRequest),
            Mem { off: 0, len: 16, want: Bytes::Untouched },
            State(Err),
        ],
    },
];
