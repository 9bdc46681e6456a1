//! The rsocket calls of `<rdma/rsocket.h>` (rdma-core's semantics: -1 and
//! errno on failure, rdma-core's errnos), for stream rsockets.

use crate::rs::{Rs, State};
use crate::table::{self, lock, Handle};
use crate::{ds_calls, guard, set_errno};
use libc::{c_int, c_void, size_t, sockaddr, socklen_t, ssize_t};
use roce_rsocket::{Action, Error, SendRamp, Shutdown};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use crate::SLEEP_CAP_MS;

/// Sleep until the CM or the CQ of `h` has news (or `ms`), the lock
/// released meanwhile.
pub(crate) fn sleep_on<'a>(
    h: &'a Handle,
    mut g: MutexGuard<'a, Rs>,
    ms: i32,
) -> MutexGuard<'a, Rs> {
    // poll the CQ a little first, as rdma-core does (`polling_time`): each
    // poll receives what arrived, a sleep costs a wake-up
    let spin = Instant::now() + Duration::from_micros(u64::from(poll_us()));
    while Instant::now() < spin {
        if g.progress().unwrap_or(true) {
            return g;
        }
        drop(g);
        std::hint::spin_loop();
        g = lock(h);
    }
    let (cm, cc) = g.arm();
    if g.progress().unwrap_or(true) {
        return g;
    }
    drop(g);
    let mut fds = [
        libc::pollfd { fd: cm, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: cc.unwrap_or(-1), events: libc::POLLIN, revents: 0 },
    ];
    // SAFETY: two pollfds of ours.
    unsafe { libc::poll(fds.as_mut_ptr(), 2, ms.clamp(0, SLEEP_CAP_MS)) };
    lock(h)
}

/// How long a blocking call polls before it sleeps, in microseconds:
/// `ROCE_EMU_RS_POLL_US`, else rdma-core's default (10 µs)
fn poll_us() -> u32 {
    static V: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("ROCE_EMU_RS_POLL_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(roce_rsocket::consts::DEF_POLLING_TIME_US)
    })
}

/// Make progress until `test` holds; EAGAIN at once when `nonblock`.
fn wait_until<'a>(
    h: &'a Handle,
    mut g: MutexGuard<'a, Rs>,
    nonblock: bool,
    test: impl Fn(&Rs) -> bool,
) -> Result<MutexGuard<'a, Rs>, i32> {
    loop {
        g.progress()?;
        if test(&g) {
            return Ok(g);
        }
        if nonblock {
            return Err(libc::EAGAIN);
        }
        g = sleep_on(h, g, SLEEP_CAP_MS);
    }
}

/// As `wait_until`, giving up after `limit` (then the guard as it is).
fn wait_for<'a>(
    h: &'a Handle,
    mut g: MutexGuard<'a, Rs>,
    limit: Duration,
    test: impl Fn(&Rs) -> bool,
) -> MutexGuard<'a, Rs> {
    let end = Instant::now() + limit;
    loop {
        let _ = g.progress();
        if test(&g) || Instant::now() >= end {
            return g;
        }
        g = sleep_on(h, g, 50);
    }
}

/// A connected rsocket, waiting for a connect or accept under way
/// (rdma-core's `rs_do_connect` from `rsend`/`rrecv`).
pub(crate) fn talkable<'a>(
    h: &'a Handle,
    g: MutexGuard<'a, Rs>,
    nonblock: bool,
) -> Result<MutexGuard<'a, Rs>, i32> {
    let g = match g.state {
        State::Connected => g,
        State::ResolvingAddr | State::ResolvingRoute | State::Connecting | State::Accepting => {
            wait_until(h, g, nonblock, Rs::connect_done)?
        }
        _ => return Err(libc::ENOTCONN),
    };
    if g.connected() {
        Ok(g)
    } else {
        Err(libc::ENOTCONN)
    }
}

#[no_mangle]
pub unsafe extern "C" fn rsocket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    guard(|| {
        let kind = ty & !(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK);
        const AF_IB: c_int = 27;
        let fs = if ty & libc::SOCK_NONBLOCK != 0 { libc::O_NONBLOCK } else { 0 };
        let fd = if ty & libc::SOCK_CLOEXEC != 0 { libc::FD_CLOEXEC } else { 0 };
        if kind == libc::SOCK_DGRAM
            && matches!(domain, libc::AF_INET | libc::AF_INET6)
            && (protocol == 0 || protocol == libc::IPPROTO_UDP)
        {
            if crate::internal_socket() {
                crate::diag("rsocket: SOCK_DGRAM from inside the library: a kernel socket");
                return Err(libc::ENOTSUP);
            }
            return crate::ds::new_dgram(domain, fs, fd);
        }
        if !matches!(domain, libc::AF_INET | libc::AF_INET6 | AF_IB)
            || kind != libc::SOCK_STREAM
            || (protocol != 0 && protocol != libc::IPPROTO_TCP)
        {
            return Err(libc::ENOTSUP);
        }
        table::new_stream(fs, fd)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rbind(s: c_int, addr: *const sockaddr, _len: socklen_t) -> c_int {
    guard(|| {
        if let Some(h) = crate::ds::lookup(s) {
            return ds_calls::bind(&h, addr, _len);
        }
        let h = table::lookup(s)?;
        let mut g = lock(&h);
        if addr.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: our live id; the caller's address.
        if unsafe { crate::ffi::rdma_bind_addr(g.id, addr as *mut sockaddr) } != 0 {
            return Err(crate::errno().max(1));
        }
        if g.state == State::Init {
            g.state = State::Bound;
        }
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rlisten(s: c_int, backlog: c_int) -> c_int {
    guard(|| {
        let h = table::lookup(s)?;
        let mut g = lock(&h);
        if g.state == State::Listening {
            return Ok(0);
        }
        // SAFETY: our live id.
        if unsafe { crate::ffi::rdma_listen(g.id, backlog) } != 0 {
            return Err(crate::errno().max(1));
        }
        g.state = State::Listening;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn raccept(s: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    guard(|| {
        let h = table::lookup(s)?;
        let g = lock(&h);
        if g.state != State::Listening {
            return Err(libc::EBADF);
        }
        let nonblock = g.nonblocking();
        let mut g = wait_until(&h, g, nonblock, |r| !r.accept_q.is_empty())?;
        let new = g.accept_q.pop_front().ok_or(libc::EAGAIN)?;
        drop(g);
        let fd = table::insert(new);
        if !addr.is_null() && !len.is_null() {
            // SAFETY: the caller's address buffer.
            unsafe { rgetpeername(fd, addr, len) };
        }
        Ok(fd)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rconnect(s: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    guard(|| {
        if let Some(h) = crate::ds::lookup(s) {
            return ds_calls::connect(&h, addr, len);
        }
        let h = table::lookup(s)?;
        let mut g = lock(&h);
        match g.state {
            State::Init | State::Bound => {}
            State::Connected => return Ok(0),
            State::ResolvingAddr | State::ResolvingRoute | State::Connecting => {
                let _ = g.progress();
                return match g.state {
                    State::Connected => Ok(0),
                    State::ConnectError(_) => Err(libc::ENOTCONN),
                    _ => Err(libc::EINPROGRESS),
                };
            }
            State::ConnectError(_) => return Err(libc::ENOTCONN),
            _ => return Err(libc::EINVAL),
        }
        if addr.is_null() {
            return Err(libc::EFAULT);
        }
        let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
        // SAFETY: sockaddr_storage is plain data: all zeroes is a valid value.
        let mut dst: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's address of `len` bytes into our storage.
        unsafe {
            std::ptr::copy_nonoverlapping(addr as *const u8, &mut dst as *mut _ as *mut u8, n)
        };
        g.state = State::ResolvingAddr;
        // SAFETY: our live id; the address lives across the call.
        let r = unsafe {
            crate::ffi::rdma_resolve_addr(
                g.id,
                std::ptr::null_mut(),
                &mut dst as *mut _ as *mut sockaddr,
                2000,
            )
        };
        if r != 0 {
            let e = crate::errno().max(1);
            g.state = State::ConnectError(e);
            return Err(e);
        }
        let nonblock = g.nonblocking();
        let g = match wait_until(&h, g, nonblock, Rs::connect_done) {
            Ok(g) => g,
            Err(libc::EAGAIN) => return Err(libc::EINPROGRESS),
            Err(e) => return Err(e),
        };
        match g.state {
            State::ConnectError(e) => Err(e),
            _ => Ok(0),
        }
    })
}

/// `rsend` of the bytes of `app`.
fn send_bytes(s: c_int, app: &[u8], flags: c_int) -> Result<usize, i32> {
    write_loop(s, app, flags, |rs, done, ramp| {
        let stream = rs.stream.as_mut().ok_or(Error::NotConnected)?;
        stream.send(app.len() - done, ramp)
    })
}

/// Write all of `app` (blocking) or what fits (non-blocking) through
/// `step` (`rsend`'s data messages, `riowrite`'s direct writes).
pub(crate) fn write_loop(
    s: c_int,
    app: &[u8],
    flags: c_int,
    mut step: impl FnMut(&mut Rs, usize, &mut SendRamp) -> Result<(usize, Vec<Action>), Error>,
) -> Result<usize, i32> {
    let h = table::lookup(s)?;
    let g = lock(&h);
    let nonblock = g.nonblocking() || flags & libc::MSG_DONTWAIT != 0;
    let mut g = talkable(&h, g, nonblock)?;
    if app.is_empty() {
        return Ok(0);
    }
    let mut ramp = SendRamp::new();
    let mut done = 0usize;
    loop {
        g.progress()?;
        match step(&mut g, done, &mut ramp) {
            Ok((n, acts)) => {
                g.run(acts, &app[done..])?;
                done += n;
                if done == app.len() {
                    return Ok(done);
                }
            }
            Err(Error::WouldBlock) => {
                if g.cm_gone {
                    return if done > 0 { Ok(done) } else { Err(libc::ECONNRESET) };
                }
                if nonblock {
                    return if done > 0 { Ok(done) } else { Err(libc::EAGAIN) };
                }
                g = sleep_on(&h, g, SLEEP_CAP_MS);
            }
            Err(e) => return if done > 0 { Ok(done) } else { Err(e.errno()) },
        }
    }
}

/// `rrecv` into `len` bytes at `dst`.
fn recv_bytes(s: c_int, dst: *mut u8, len: usize, flags: c_int) -> Result<usize, i32> {
    let h = table::lookup(s)?;
    let g = lock(&h);
    let nonblock = g.nonblocking() || flags & libc::MSG_DONTWAIT != 0;
    let mut g = talkable(&h, g, nonblock)?;
    if len == 0 {
        return Ok(0);
    }
    loop {
        g.progress()?;
        let gone = g.cm_gone;
        let (Some(ep), Some(stream)) = (g.ep.as_ref(), g.stream.as_ref()) else {
            return Err(libc::ENOTCONN);
        };
        if stream.readable_bytes() > 0 {
            let mut at = 0usize;
            for seg in stream.read_spans(len) {
                // SAFETY: `dst` has `len` bytes; the spans total at most `len`.
                ep.rbuf.read(seg.offset as usize, unsafe { dst.add(at) }, seg.len as usize);
                at += seg.len as usize;
            }
            if flags & libc::MSG_PEEK == 0 {
                let stream = g.stream.as_mut().ok_or(libc::ENOTCONN)?;
                let (_, acts) = stream.consume(at);
                g.run(acts, &[])?;
            }
            return Ok(at);
        }
        if stream.at_eof() || gone || stream.phase() == roce_rsocket::Phase::Error {
            return Ok(0);
        }
        if nonblock {
            return Err(libc::EAGAIN);
        }
        g = sleep_on(&h, g, SLEEP_CAP_MS);
    }
}

/// The caller's buffer as a slice (NULL with a length: EFAULT).
///
/// # Safety
/// `buf` points to `len` readable bytes or is NULL.
pub(crate) unsafe fn app_slice<'a>(buf: *const c_void, len: size_t) -> Result<&'a [u8], i32> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts(buf as *const u8, len) })
}

#[no_mangle]
pub unsafe extern "C" fn rsend(s: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    guard(|| {
        // SAFETY: the caller's buffer of `len` bytes.
        let app = unsafe { app_slice(buf, len) }?;
        if let Some(h) = crate::ds::lookup(s) {
            return ds_calls::send(&h, app, flags, None).map(|n| n as ssize_t);
        }
        send_bytes(s, app, flags).map(|n| n as ssize_t)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rwrite(s: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    // SAFETY: the caller's contract, passed on.
    unsafe { rsend(s, buf, count, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn rsendto(
    s: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    a: *const sockaddr,
    l: socklen_t,
) -> ssize_t {
    if let Some(h) = crate::ds::lookup(s) {
        return guard(|| {
            // SAFETY: the caller's buffer of `len` bytes.
            let app = unsafe { app_slice(buf, len) }?;
            // SAFETY: the caller's address of `l` bytes (not NULL).
            let dst = if a.is_null() { None } else { Some(unsafe { crate::addr::from_c(a, l) }?) };
            ds_calls::send(&h, app, flags, dst).map(|n| n as ssize_t)
        });
    }
    if !a.is_null() || l != 0 {
        set_errno(libc::EISCONN);
        return -1;
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { rsend(s, buf, len, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn rrecv(s: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    guard(|| {
        if buf.is_null() && len > 0 {
            return Err(libc::EFAULT);
        }
        if let Some(h) = crate::ds::lookup(s) {
            let (a, l) = (std::ptr::null_mut(), std::ptr::null_mut());
            return ds_calls::recv(&h, buf as *mut u8, len, flags, a, l).map(|n| n as ssize_t);
        }
        recv_bytes(s, buf as *mut u8, len, flags).map(|n| n as ssize_t)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rread(s: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: the caller's contract, passed on.
    unsafe { rrecv(s, buf, count, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn rrecvfrom(
    s: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    a: *mut sockaddr,
    l: *mut socklen_t,
) -> ssize_t {
    if let Some(h) = crate::ds::lookup(s) {
        return guard(|| {
            if buf.is_null() && len > 0 {
                return Err(libc::EFAULT);
            }
            ds_calls::recv(&h, buf as *mut u8, len, flags, a, l).map(|n| n as ssize_t)
        });
    }
    // SAFETY: the caller's contract, passed on.
    let n = unsafe { rrecv(s, buf, len, flags) };
    if n > 0 && !a.is_null() && !l.is_null() {
        // SAFETY: the caller's address buffer.
        unsafe { rgetpeername(s, a, l) };
    }
    n
}

/// The bytes of an iovec array, gathered.
///
/// # Safety
/// `iov` points to `n` iovecs of readable memory, or is NULL.
unsafe fn gather(iov: *const libc::iovec, n: c_int) -> Result<Vec<u8>, i32> {
    if !(0..=1024).contains(&n) || (iov.is_null() && n > 0) {
        return Err(libc::EINVAL);
    }
    let mut out = Vec::new();
    for i in 0..n as usize {
        // SAFETY: per the contract.
        let v = unsafe { &*iov.add(i) };
        // SAFETY: per the contract.
        out.extend_from_slice(unsafe { app_slice(v.iov_base, v.iov_len) }?);
    }
    Ok(out)
}

fn writev(s: c_int, iov: *const libc::iovec, n: c_int, flags: c_int) -> ssize_t {
    guard(|| {
        // SAFETY: the caller's iovecs.
        let bytes = unsafe { gather(iov, n) }?;
        send_bytes(s, &bytes, flags).map(|n| n as ssize_t)
    })
}

/// Receive into an iovec array.
fn readv(s: c_int, iov: *const libc::iovec, n: c_int, flags: c_int) -> ssize_t {
    guard(|| {
        if !(0..=1024).contains(&n) || (iov.is_null() && n > 0) {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's iovecs (checked above).
        let vs =
            if n == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(iov, n as usize) } };
        let total: usize = vs.iter().map(|v| v.iov_len).sum();
        if vs.iter().any(|v| v.iov_base.is_null() && v.iov_len > 0) {
            return Err(libc::EFAULT);
        }
        let mut tmp = vec![0u8; total];
        let got = recv_bytes(s, tmp.as_mut_ptr(), total, flags)?;
        let mut at = 0usize;
        for v in vs {
            let k = v.iov_len.min(got - at);
            // SAFETY: the caller's iovec has `iov_len` >= k bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(tmp.as_ptr().add(at), v.iov_base as *mut u8, k)
            };
            at += k;
        }
        Ok(got as ssize_t)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rwritev(s: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    writev(s, iov, n, 0)
}

#[no_mangle]
pub unsafe extern "C" fn rreadv(s: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    readv(s, iov, n, 0)
}

#[no_mangle]
pub unsafe extern "C" fn rsendmsg(s: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's msghdr or NULL.
    match unsafe { msg.as_ref() } {
        Some(m) => writev(s, m.msg_iov, m.msg_iovlen as c_int, flags),
        None => {
            set_errno(libc::EFAULT);
            -1
        }
    }
}

/// `rrecvmsg`: into the iovecs; no address (connected) and no control
/// data, as the kernel answers for TCP (`msg_namelen`, `msg_controllen`
/// and `msg_flags` 0). rdma-core refuses a control buffer (ENOTSUP);
/// programs such as socat always pass one.
#[no_mangle]
pub unsafe extern "C" fn rrecvmsg(s: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's msghdr or NULL.
    match unsafe { msg.as_mut() } {
        Some(m) => {
            let n = readv(s, m.msg_iov, m.msg_iovlen as c_int, flags);
            if n >= 0 {
                m.msg_namelen = 0;
                m.msg_controllen = 0;
                m.msg_flags = 0;
            }
            n
        }
        None => {
            set_errno(libc::EFAULT);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn rshutdown(s: c_int, how: c_int) -> c_int {
    guard(|| {
        let how = match how {
            libc::SHUT_RD => Shutdown::Read,
            libc::SHUT_WR => Shutdown::Write,
            libc::SHUT_RDWR => Shutdown::Both,
            _ => return Err(libc::EINVAL),
        };
        let h = table::lookup(s)?;
        crate::diag(&format!("rsocket {s}: rshutdown {how:?}"));
        let g = lock(&h);
        shutdown_locked(&h, g, how)
    })
}

fn shutdown_locked(h: &Handle, mut g: MutexGuard<'_, Rs>, how: Shutdown) -> Result<c_int, i32> {
    match g.state {
        State::Connected => {}
        State::Init | State::Bound | State::Listening => return Err(libc::ENOTCONN),
        _ => return Ok(0),
    }
    let _ = g.progress();
    let Some(stream) = g.stream.as_mut() else { return Ok(0) };
    let acts = stream.shutdown(how);
    let _ = g.run(acts, &[]);
    if how == Shutdown::Both {
        // rdma-core waits for every send to complete, blocking or not
        let g = wait_for(h, g, Duration::from_secs(2), |r| {
            r.cm_gone || r.stream.as_ref().is_none_or(|s| s.all_sends_done())
        });
        drop(g);
    }
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn rclose(s: c_int) -> c_int {
    guard(|| {
        if ds_calls::close(s) {
            return Ok(0);
        }
        let h = table::remove(s).ok_or(libc::EBADF)?;
        crate::diag(&format!("rsocket {s}: rclose"));
        close_handle(&h);
        Ok(0)
    })
}

fn close_handle(h: &Handle) {
    let g = lock(h);
    let _ = shutdown_locked(h, g, Shutdown::Both);
    let mut g = lock(h);
    for mut other in std::mem::take(&mut g.accept_q) {
        other.cm_disconnect();
        other.destroy();
    }
    if matches!(g.state, State::Connected | State::Accepting | State::Connecting) {
        g.cm_disconnect();
    }
    g.destroy();
}

/// A CM id's address field into the caller's buffer, truncated as
/// `getsockname(2)` does.
fn copy_addr(
    src: &libc::sockaddr_storage,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> Result<c_int, i32> {
    // SAFETY: the caller's length, or NULL.
    if len.is_null() || (addr.is_null() && unsafe { *len } > 0) {
        return Err(libc::EFAULT);
    }
    let full = match c_int::from(src.ss_family) {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        _ => std::mem::size_of::<libc::sockaddr_storage>(),
    };
    // SAFETY: the caller's length and buffer of that many bytes.
    unsafe {
        let n = (*len as usize).min(full);
        std::ptr::copy_nonoverlapping(src as *const _ as *const u8, addr as *mut u8, n);
        *len = full as socklen_t;
    }
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn rgetpeername(s: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    guard(|| {
        if let Some(h) = crate::ds::lookup(s) {
            return ds_calls::name(&h, true, addr, len);
        }
        let h = table::lookup(s)?;
        let g = lock(&h);
        if g.id.is_null() {
            return Err(libc::ENOTCONN);
        }
        // SAFETY: our live id's destination address.
        let a = unsafe { (*g.id).dst_addr };
        copy_addr(&a, addr, len)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rgetsockname(s: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    guard(|| {
        if let Some(h) = crate::ds::lookup(s) {
            return ds_calls::name(&h, false, addr, len);
        }
        let h = table::lookup(s)?;
        let g = lock(&h);
        if g.id.is_null() {
            return Err(libc::EBADF);
        }
        // SAFETY: our live id's source address.
        let a = unsafe { (*g.id).src_addr };
        copy_addr(&a, addr, len)
    })
}
