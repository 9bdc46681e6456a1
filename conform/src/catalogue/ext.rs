//! IBA 1.5's memory placement operations (§9.4 in the 1.5 numbering): FLUSH
//! (a FETH naming the placement type and selectivity level) and ATOMIC
//! WRITE (8 aligned bytes stored as one unit). Both take a responder
//! resource, as READs do, and are answered with a zero-length READ
//! RESPONSE ONLY (rxe's `acknowledge()` sends it for both).
//! Both need rights of their own: FLUSH the region's and QP's
//! `IBV_ACCESS_FLUSH_GLOBAL`, ATOMIC WRITE remote write. Kernels before
//! 6.2 have neither: the cases ask for the operation (`QpParams::ops`),
//! and an agent whose device does not report it makes them n/a.

use crate::agent::{access, ops};
use crate::case::{Bytes, Case, Direction::Responder, Key, Req, Setup, Step::*, Va};
use roce_packet::{
    NakCode::{InvalidRequest, RemoteAccessError},
    Opcode as O,
};

/// FETH: placement type 1 (global visibility), selectivity level 0 (the
/// RETH's range).
const GLOBAL_RANGE: u32 = 1;
const FLUSH_RIGHTS: Setup = Setup {
    mr_access: access::ALL | access::FLUSH_GLOBAL,
    qp_access: access::ALL | access::FLUSH_GLOBAL,
    ops: ops::FLUSH,
    ..Setup::DEFAULT
};
const ATOMIC_WRITE: Setup = Setup { ops: ops::ATOMIC_WRITE, ..Setup::DEFAULT };

#[rustfmt::skip]
pub const CASES: &[Case] = &[
    Case { id: "resp.flush.answered", iba: "§9.4 (IBA 1.5 FLUSH)", direction: Responder, setup: FLUSH_RIGHTS,
        rule: "a FLUSH to global visibility of a range is answered with a zero-length READ RESPONSE ONLY",
        steps: &[Send(Req::new(O::RC_FLUSH, 0).feth(GLOBAL_RANGE).reth(Va::Off(0), Key::Good, 4096)),
            ReadResp { psn: 0, off: 0, len: 0 }] },
    Case { id: "resp.flush.without-right", iba: "§9.4 (IBA 1.5 FLUSH) §10.6.6", direction: Responder, setup: Setup { mr_access: access::ALL, ..FLUSH_RIGHTS },
        rule: "a FLUSH of a region registered without the flush right is a remote access error",
        steps: &[Send(Req::new(O::RC_FLUSH, 0).feth(GLOBAL_RANGE).reth(Va::Off(0), Key::Good, 4096)),
            Nak(0, RemoteAccessError)] },
    Case { id: "resp.atomic-write.stores", iba: "§9.4 (IBA 1.5 ATOMIC WRITE)", direction: Responder, setup: ATOMIC_WRITE,
        rule: "an ATOMIC WRITE of 8 aligned bytes stores them and is answered with a zero-length READ RESPONSE ONLY",
        steps: &[Send(Req::new(O::RC_ATOMIC_WRITE, 0).len(8).reth(Va::Off(64), Key::Good, 8)),
            ReadResp { psn: 0, off: 0, len: 0 },
            Mem { off: 64, len: 8, want: Bytes::Data { salt: 1, msg_off: 0 } }, NoCompletion] },
    Case { id: "resp.atomic-write.misaligned", iba: "§9.4 (IBA 1.5 ATOMIC WRITE)", direction: Responder, setup: ATOMIC_WRITE,
        rule: "an ATOMIC WRITE at an address that is not 8-byte aligned is an invalid request",
        steps: &[Send(Req::new(O::RC_ATOMIC_WRITE, 0).len(8).reth(Va::Off(68), Key::Good, 8)),
            Nak(0, InvalidRequest), Mem { off: 64, len: 16, want: Bytes::Untouched }] },
];
