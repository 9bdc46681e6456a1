//! The rsockets of the process by number. An rsocket's number is the fd
//! of its own CM event channel (an eventfd, so `poll(2)` and `close(2)`
//! keep working on it and no other file gets the number while it lives).

use crate::ep::Ep;
use crate::ffi::*;
use crate::rs::{check_req, Rs, State};
use roce_rsocket::{Stream, StreamConfig};
use std::collections::{HashMap, VecDeque};
use std::ptr;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

pub(crate) type Handle = Arc<Mutex<Rs>>;

static TABLE: LazyLock<Mutex<HashMap<i32, Handle>>> = LazyLock::new(Default::default);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The rsocket numbered `fd`, or EBADF.
pub(crate) fn lookup(fd: i32) -> Result<Handle, i32> {
    lock(&TABLE).get(&fd).cloned().ok_or(libc::EBADF)
}

pub(crate) fn remove(fd: i32) -> Option<Handle> {
    lock(&TABLE).remove(&fd)
}

fn insert(rs: Rs) -> i32 {
    let fd = rs.fd;
    lock(&TABLE).insert(fd, Arc::new(Mutex::new(rs)));
    fd
}

/// A fresh rsocket state around a channel and an id.
fn blank(chan: *mut rdma_event_channel, id: *mut rdma_cm_id, cfg: StreamConfig) -> Rs {
    Rs {
        // SAFETY: a live channel of the CM.
        fd: unsafe { (*chan).fd },
        chan,
        id,
        state: State::Init,
        fs_flags: 0,
        fd_flags: 0,
        cfg,
        so_opts: 0,
        tcp_opts: 0,
        ipv6_opts: 0,
        keepalive_time: roce_rsocket::consts::DEF_KEEPALIVE_TIME_S,
        ep: None,
        stream: None,
        err: 0,
        accept_q: VecDeque::new(),
        pending: Vec::new(),
        cm_gone: false,
        cm_disconnect_sent: false,
    }
}

/// A non-blocking event channel of our own.
fn new_channel() -> Result<*mut rdma_event_channel, i32> {
    // SAFETY: a plain CM call.
    let chan = unsafe { rdma_create_event_channel() };
    if chan.is_null() {
        return Err(crate::errno().max(1));
    }
    // SAFETY: the channel just made.
    crate::set_nonblock(unsafe { (*chan).fd }, true);
    Ok(chan)
}

/// `rsocket(domain, SOCK_STREAM, ...)`: a TCP-port-space id on a channel
/// of its own.
pub(crate) fn new_stream(fs_flags: i32, fd_flags: i32) -> Result<i32, i32> {
    let chan = new_channel()?;
    let mut id = ptr::null_mut();
    // SAFETY: our channel; `id` receives the new id.
    if unsafe { rdma_create_id(chan, &mut id, ptr::null_mut(), RDMA_PS_TCP) } != 0 {
        let e = crate::errno().max(1);
        // SAFETY: our channel, no id on it.
        unsafe { rdma_destroy_event_channel(chan) };
        return Err(e);
    }
    let mut rs = blank(chan, id, StreamConfig::default());
    rs.fs_flags = fs_flags;
    rs.fd_flags = fd_flags;
    Ok(insert(rs))
}

/// A connection request on `listener` (rsocket.c's `rs_accept`): the new
/// id moves to a channel of its own, gets its resources, checks the
/// peer's connection data, and is accepted with ours. Its number, or
/// `None` when it was refused.
pub(crate) fn accept_one(
    listener: &Rs,
    cid: *mut rdma_cm_id,
    param: rdma_conn_param,
    data: &[u8],
) -> Option<i32> {
    let reject = |why: &str| {
        crate::diag(&format!("rsocket: connection request refused: {why}"));
        // SAFETY: the request's id, ours to refuse and destroy.
        unsafe {
            rdma_reject(cid, ptr::null(), 0);
            rdma_destroy_id(cid);
        }
        None
    };
    if !check_req(data) {
        return reject("bad connection data");
    }
    let chan = match new_channel() {
        Ok(c) => c,
        Err(_) => return reject("no channel"),
    };
    // SAFETY: the request's id and our new channel.
    if unsafe { rdma_migrate_id(cid, chan) } != 0 {
        // SAFETY: our channel, no id on it.
        unsafe { rdma_destroy_event_channel(chan) };
        return reject("migrate");
    }
    let mut rs = blank(chan, cid, listener.cfg);
    rs.fs_flags = listener.fs_flags;
    rs.fd_flags = listener.fd_flags;
    rs.so_opts = listener.so_opts;
    rs.tcp_opts = listener.tcp_opts;
    match finish_accept(&mut rs, param, data) {
        Ok(()) => Some(insert(rs)),
        Err(e) => {
            crate::diag(&format!("rsocket: accept failed: errno {e}"));
            // SAFETY: the id is ours; refuse before freeing it.
            unsafe { rdma_reject(cid, ptr::null(), 0) };
            rs.destroy();
            None
        }
    }
}

fn finish_accept(rs: &mut Rs, param: rdma_conn_param, data: &[u8]) -> Result<(), i32> {
    let mut cfg = rs.cfg;
    let ep = Ep::create(rs.id, &mut cfg)?;
    rs.cfg = cfg;
    let mut stream = Stream::new(cfg, ep.memory());
    rs.ep = Some(ep);
    let acts = stream.establish(data).map_err(|e| e.errno())?;
    let mine = stream.conn_data().emit();
    rs.stream = Some(stream);
    rs.pending = acts;
    let mut p = param;
    p.private_data = mine.as_ptr().cast();
    p.private_data_len = mine.len() as u8;
    p.srq = 0;
    p.qp_num = 0;
    rs.state = State::Accepting;
    // SAFETY: the id with its QP; the private data outlives the call.
    if unsafe { rdma_accept(rs.id, &mut p) } != 0 {
        return Err(crate::errno().max(1));
    }
    Ok(())
}
