//! The rsockets of the process by number. An rsocket's number is the fd
//! of its own CM event channel (an eventfd, so `poll(2)` and `close(2)`
//! keep working on it and no other file gets the number while it lives).

use crate::ffi::*;
use crate::rs::{blank, new_channel, Rs};
use roce_rsocket::StreamConfig;
use std::collections::HashMap;
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

pub(crate) fn insert(rs: Rs) -> i32 {
    let fd = rs.fd;
    lock(&TABLE).insert(fd, Arc::new(Mutex::new(rs)));
    fd
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
