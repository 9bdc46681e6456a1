//! Memory windows (IBA §10.6.7): the agent binds a type 2 window over the
//! region's first 4 KiB on the QP (a BIND_MW work request), or a type 1
//! window (`ibv_bind_mw`), with remote read and write; its rkey reaches
//! exactly the window, and a SEND with invalidate naming a type 2 window
//! (§10.6.7.2, the IETH) frees it for good.

use crate::agent::{access, wc};
use crate::case::{Bytes, Case, Direction::Responder, Key, Req, Setup, Step::*, Va};
use roce_packet::{NakCode::RemoteAccessError, Opcode as O};

const WINDOW: Setup =
    Setup { window: 4096, mr_access: access::ALL | access::MW_BIND, ..Setup::DEFAULT };
const TYPE1: Setup = Setup { window_type: 1, ..WINDOW };

#[rustfmt::skip]
pub const CASES: &[Case] = &[
    Case { id: "resp.mw.write-through-window", iba: "§10.6.7 §10.6.6", direction: Responder, setup: WINDOW,
        rule: "an RDMA WRITE with a bound type 2 window's rkey lands in the window",
        steps: &[Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0).len(100).reth(Va::Off(200), Key::Window, 100)),
            Ack(0), Mem { off: 200, len: 100, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.mw.read-through-window", iba: "§10.6.7 §10.6.6", direction: Responder, setup: WINDOW,
        rule: "an RDMA READ with a bound window's rkey returns the window's bytes",
        steps: &[Send(Req::new(O::RC_RDMA_READ_REQUEST, 0).reth(Va::Off(1000), Key::Window, 1500)),
            ReadResp { psn: 0, off: 1000, len: 1500 }] },
    Case { id: "resp.mw.outside-window", iba: "§10.6.7 §10.6.6", direction: Responder, setup: WINDOW,
        rule: "an RDMA WRITE through a window reaching past the window's end (inside the region) is a remote access error",
        steps: &[Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0).len(100).reth(Va::Off(4096 - 50), Key::Window, 100)),
            Nak(0, RemoteAccessError), Mem { off: 4096 - 50, len: 100, want: Bytes::Untouched }] },
    Case { id: "resp.mw.send-with-invalidate", iba: "§10.6.7.2 §9.4.1", direction: Responder, setup: WINDOW,
        rule: "a SEND with invalidate naming the window completes the receive and frees the window: its rkey then fails",
        steps: &[PostRecv { off: 8192, len: 256 },
            Send(Req::new(O::RC_SEND_ONLY_WITH_INVALIDATE, 0).len(64).ieth(Key::Window)), Ack(0),
            CompletionLen(wc::SUCCESS, 64),
            Send(Req::new(O::RC_RDMA_WRITE_ONLY, 1).len(16).reth(Va::Off(0), Key::Window, 16)),
            Nak(1, RemoteAccessError), Mem { off: 0, len: 16, want: Bytes::Untouched }] },
    Case { id: "resp.mw.type1-write-through-window", iba: "§10.6.7 §10.6.6", direction: Responder, setup: TYPE1,
        rule: "an RDMA WRITE with a type 1 window's rkey (bound with ibv_bind_mw) lands in the window",
        steps: &[Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0).len(100).reth(Va::Off(300), Key::Window, 100)),
            Ack(0), Mem { off: 300, len: 100, want: Bytes::Data { salt: 1, msg_off: 0 } }] },
    Case { id: "resp.mw.type1-outside-window", iba: "§10.6.7 §10.6.6", direction: Responder, setup: TYPE1,
        rule: "an RDMA READ through a type 1 window reaching past the window's end (inside the region) is a remote access error",
        steps: &[Send(Req::new(O::RC_RDMA_READ_REQUEST, 0).reth(Va::Off(4000), Key::Window, 200)),
            Nak(0, RemoteAccessError)] },
];
