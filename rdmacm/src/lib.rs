//! librdmacm's rsocket API for roce-emu: `rsocket`, `rbind`, `rlisten`,
//! `raccept`, `rconnect`, `rsend`/`rrecv` and their variants, `rpoll`,
//! `rselect`, `rsetsockopt`/`rgetsockopt`, `rfcntl`, `rshutdown`, `rclose`
//! — the C layer of rdma-core's rsockets, on the wire the same as
//! rdma-core's (`librdmacm/rsocket.c`), written anew.
//!
//! It is written the way rdma-core's rsocket.c is: against the public C
//! API of libibverbs and librdmacm ([`ffi`]: `rdma_create_id`,
//! `rdma_connect`, `ibv_reg_mr`, `ibv_post_send` through the context's
//! table, ...), so it needs nothing of the drop-in's Rust internals; the
//! drop-in (`libibverbs.so.1`, also installed as `librdmacm.so.1`) links
//! this crate in and so exports the rsocket symbols itself (version
//! `RDMACM_1.0`, from its `libibverbs.map`).
//!
//! The protocol — connection data, immediates, credits, SGL updates,
//! control messages — is [`roce_rsocket::Stream`], a sans-IO state
//! machine; this crate owns the CM id, the QP, the registered buffers,
//! copies the bytes and posts what the stream says.
//!
//! # The pieces
//! * [`ffi`]: the C structs and functions used;
//! * `ep`: a connection's verbs resources (PD, CQ and channel, QP,
//!   buffers), posting and polling;
//! * `rs`: one rsocket — CM events (connect, accept, disconnect), progress
//!   (completions into the stream, its actions posted);
//! * `table`: the rsockets by number (the fd of each one's CM channel, a
//!   real fd: `poll(2)` works on it), accepting;
//! * `exports`, `poll`, `opts`, `iomap`: the C functions;
//! * [`RSocket`]: a safe Rust face on them (tests, Rust programs).
//!
//! `SOCK_STREAM` over RC, with the iomap calls (`riomap`, `riounmap`,
//! `riowrite`); `SOCK_DGRAM` over UD (`ds`, `ds_qp`, `ds_calls`: a UDP
//! socket, one UD QP per local address, rdma-core's datagram headers).
#![allow(unsafe_code)]
// the exported functions' contract is `<rdma/rsocket.h>`'s, as for the C library
#![allow(clippy::missing_safety_doc)]

pub mod ffi;

mod addr;
mod ds;
mod ds_calls;
mod ds_qp;
mod ep;
mod exports;
mod iomap;
mod opts;
mod poll;
mod rs;
mod socket;
mod table;

pub use exports::*;
pub use iomap::{riomap, riounmap, riowrite};
pub use opts::{rfcntl, rgetsockopt, rsetsockopt};
pub use poll::{rpoll, rselect};
pub use socket::RSocket;

/// The longest one sleep in `poll(2)` lasts before the state is looked
/// at again (a safety net: every wake-up has an event behind it).
pub(crate) const SLEEP_CAP_MS: i32 = 200;

/// The calling thread's errno.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(crate) fn set_errno(e: i32) {
    // SAFETY: the calling thread's errno location.
    unsafe { *libc::__errno_location() = e };
}

pub(crate) fn set_nonblock(fd: i32, on: bool) {
    // SAFETY: fcntl on a descriptor of ours.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            let nf = if on { fl | libc::O_NONBLOCK } else { fl & !libc::O_NONBLOCK };
            libc::fcntl(fd, libc::F_SETFL, nf);
        }
    }
}

/// One line on stderr when `ROCE_EMU_DEBUG` is set.
pub(crate) fn diag(msg: &str) {
    if std::env::var_os("ROCE_EMU_DEBUG").is_some() {
        eprintln!("roce-emu: {msg}");
    }
}

thread_local! {
    /// How many rsocket calls this thread is inside.
    static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A socket this library (or the drop-in under it) makes for itself: a
/// `socket(2)` call from inside an rsocket call (the device's UDP socket
/// opened by `rconnect`'s address resolution, the route probe of a
/// datagram rsocket), or from one of the drop-in's threads (named
/// `roce...`). Under `librspreload.so`, which sends every `socket(2)` of
/// the process to `rsocket` and falls back to the kernel's when it fails,
/// such a socket must stay a kernel one: `rsocket(SOCK_DGRAM)` refuses it.
pub(crate) fn internal_socket() -> bool {
    DEPTH.with(|d| d.get() > 1)
        || std::thread::current().name().is_some_and(|n| n.starts_with("roce"))
}

/// Run `f` for a C caller: its value, or -1 with errno set; a panic is
/// caught (EIO), never unwound into C.
pub(crate) fn guard<T: From<i8>>(f: impl FnOnce() -> Result<T, i32>) -> T {
    DEPTH.with(|d| d.set(d.get() + 1));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e);
            T::from(-1)
        }
        Err(_) => {
            set_errno(libc::EIO);
            T::from(-1)
        }
    }
}
