//! rdma-core's rsockets protocol — the wire protocol of librdmacm's
//! `rsocket`, `rsend`, `rrecv`, `riowrite`, ... — as a sans-IO state machine,
//! so that an rsocket on roce-emu talks to one on kernel rxe running
//! rdma-core's `librdmacm/rsocket.c`. No I/O, no verbs, no clock, no
//! `unsafe`: the C layer (librdmacm's drop-in) owns the QP, the CM id and
//! the registered buffers, feeds in what happened, and does what the
//! [`Action`]s say.
//!
//! The facts come from reading rdma-core's `librdmacm/rsocket.c` (function
//! names are cited where each rule lives) and its `docs/rsocket` design
//! note; no code or comment is copied.
//!
//! # Stream rsockets in one page
//!
//! A stream rsocket is one RC QP made with the RDMA CM (port space TCP).
//! Each side owns a **receive buffer** (`rbuf`, 128 KiB by default), a
//! **send buffer** (`sbuf`, 128 KiB, a ring the data is copied into unless
//! it goes inline) and a **target list**: two 16-byte SGEs the *peer* writes
//! into (the target SGL), optionally followed by 24-byte iomap entries.
//!
//! 1. **Connection** ([`ConnData`], `rs_format_conn_data`,
//!    `rs_save_conn_data`). The REQ and the REP each carry 40 bytes: version
//!    1, flags, credits (the sender's receive-queue size), the address and
//!    rkey of its target SGL (and its entry count, 2), and the first half of
//!    its receive buffer. Each side takes the peer's half as entry 0 of its
//!    own target SGL.
//! 2. **Data** (`rsend`, `rs_write_data`). The sender RDMA-WRITEs with
//!    immediate into the current target SGL entry, advancing it; a write
//!    never crosses an entry, and the entry is used up before the next (of
//!    2) is used. The immediate is a 32-bit message ([`Msg`]): op in bits
//!    31..29, a value in 28..0 — here `RS_OP_DATA` and the length. Each
//!    write takes a **message credit** (the peer's receive queue entry for
//!    its immediate): at most `credits` unconsumed messages, counted mod
//!    2^16 (`sseq_no` up to `sseq_comp`). Writes ramp from 2 KiB up to
//!    64 KiB per `rsend` call; one needs at least 2 KiB of free send buffer.
//! 3. **Credits and buffers** (`rs_send_credits`, `rs_give_credits`). The
//!    receiver offers its halves in turn. The second half goes at once; each
//!    later one when the application has read a whole half: one SGE written
//!    into the peer's target SGL (entries 1, 0, 1, ...) with an `RS_OP_SGL`
//!    message whose value is the new credit limit, `rseq_no + rq_size` (messages
//!    consumed plus the queue). When half a queue of messages was consumed but
//!    no half is free, the same message goes alone in a 0-byte write.
//! 4. **Control** (`rshutdown`, `tcp_svc_send_keepalive`). `RS_OP_CTRL` with
//!    `SHUTDOWN` (no more data from me) or `DISCONNECT` (nothing more either
//!    way), as 0-byte writes; a keepalive is a 0-byte RDMA WRITE *without*
//!    immediate. At most [`consts::QP_CTRL_SIZE`] control writes are in flight.
//! 5. **Iomap** (`riomap`, `rs_send_iomaps`, `riowrite`). A side may publish
//!    a registered buffer as a 24-byte [`Iomap`] entry in the peer's target
//!    iomap (`RS_OP_IOMAP_SGL`, takes a credit); the peer then RDMA-WRITEs
//!    (no immediate) straight into it at a stream offset.
//!
//! Byte order: [`wire`]'s documentation has the rules (connection data
//! big-endian; immediates big-endian; SGL and iomap entries in the reading
//! host's order, told by its `NET` flag).
//!
//! Datagram rsockets (`SOCK_DGRAM` over UD) are another protocol: see
//! [`dgram`] for their two headers.
//!
//! # Using [`Stream`]
//!
//! ```
//! use roce_rsocket::*;
//! let cfg = StreamConfig::default();
//! let mem = LocalMemory { rbuf_addr: 0x10000, rbuf_rkey: 7, target_addr: 0x9000, target_rkey: 8 };
//! let mut a = Stream::new(cfg, mem);
//! let mut b = Stream::new(cfg, LocalMemory { rbuf_addr: 0x50000, rbuf_rkey: 9, ..mem });
//! // the CM exchange: each side gets the other's connection data
//! let b_offers = b.establish(&a.conn_data().emit()).unwrap();
//! let a_offers = a.establish(&b.conn_data().emit()).unwrap();
//! assert_eq!(a_offers.len(), 1); // the second half of a's receive buffer, to b
//! # let _ = b_offers;
//! let (taken, actions) = a.send(100, &mut SendRamp::new()).unwrap();
//! assert_eq!(taken, 100);
//! let Action::Post(wr) = &actions[0] else { panic!() };
//! assert_eq!((wr.remote_addr, wr.rkey, wr.imm), (0x50000, 9, Some(100)));
//! assert_eq!(explain_imm(100, 100), "rsocket data, 100 bytes");
//! ```
//!
//! What is left to the C layer: the CM (REQ/REP private data in, reject on
//! bad data), the verbs, copying bytes, blocking and `rpoll`, the
//! keepalive timer, and the datagram service (UDP socket, address handles).
//! Not modelled: iWARP's `RS_OPT_MSG_SEND` (messages as SENDs; roce-emu
//! is RoCE and has RDMA WRITE WITH IMMEDIATE).

pub mod consts;
pub mod dgram;
pub mod explain;
pub mod wire;

mod action;
mod config;
mod error;
mod receiver;
mod sender;
mod stream;

pub use action::{Action, Payload, Seg, Source, Wr};
pub use config::{LocalMemory, StreamConfig};
pub use error::{errno, Error};
pub use explain::{
    explain_conn_data, explain_imm, explain_rep_private_data, explain_req_private_data,
    explain_write,
};
pub use sender::{SendRamp, SenderView};
pub use stream::{Phase, PollFlags, RecvCompletion, Shutdown, Stream};
pub use wire::{ByteOrder, ConnData, Iomap, Msg, Op, Sge};
