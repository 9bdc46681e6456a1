//! `rsetsockopt`, `rgetsockopt`, `rfcntl` (rsocket.c's option sets: the
//! buffer and queue sizes apply to connections made afterwards; the rest
//! is kept and read back).

use crate::ffi::*;
use crate::guard;
use crate::rs::{Rs, State};
use crate::table::{self, lock};
use libc::{c_int, c_void, socklen_t};

/// An `int` option value (at least 4 bytes), else EINVAL.
///
/// # Safety
/// `val` points to `len` readable bytes or is NULL.
unsafe fn int_val(val: *const c_void, len: socklen_t) -> Result<c_int, i32> {
    if val.is_null() {
        return Err(libc::EFAULT);
    }
    if (len as usize) < std::mem::size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: per the contract, 4 readable bytes.
    Ok(unsafe { (val as *const c_int).read_unaligned() })
}

fn set_bit(opts: &mut u64, name: c_int, on: bool) {
    if (0..64).contains(&name) {
        if on {
            *opts |= 1 << name;
        } else {
            *opts &= !(1 << name);
        }
    }
}

fn bit(opts: u64, name: c_int) -> c_int {
    ((0..64).contains(&name) && opts & (1 << name) != 0) as c_int
}

/// Before the connection's resources exist (rdma-core's `rs_opening`
/// test for `SOL_RDMA`; buffers are sized when they are made).
fn unopened(g: &Rs) -> bool {
    matches!(g.state, State::Init | State::Bound | State::Listening)
}

fn set_socket(g: &mut Rs, name: c_int, val: *const c_void, len: socklen_t) -> Result<(), i32> {
    // SAFETY: the caller's value of `len` bytes.
    let v = unsafe { int_val(val, len) };
    match name {
        libc::SO_REUSEADDR => {
            let mut on = v?;
            // SAFETY: our live id; an int the CM reads.
            unsafe {
                rdma_set_option(
                    g.id,
                    RDMA_OPTION_ID,
                    RDMA_OPTION_ID_REUSEADDR,
                    (&mut on as *mut c_int).cast(),
                    4,
                )
            };
            set_bit(&mut g.so_opts, name, on != 0);
        }
        libc::SO_RCVBUF => {
            if g.ep.is_none() {
                g.cfg.set_rcvbuf(v? as u32);
            }
        }
        libc::SO_SNDBUF => {
            if g.ep.is_none() {
                g.cfg.set_sndbuf(v? as u32);
            }
        }
        libc::SO_LINGER => {
            if val.is_null() || (len as usize) < std::mem::size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the caller's linger.
            let l = unsafe { (val as *const libc::linger).read_unaligned() };
            // inverted, as rdma-core keeps it: 0 means on
            set_bit(&mut g.so_opts, name, l.l_onoff == 0);
        }
        libc::SO_KEEPALIVE | libc::SO_OOBINLINE => set_bit(&mut g.so_opts, name, v? != 0),
        _ => return Err(libc::ENOTSUP),
    }
    Ok(())
}

fn set_tcp(g: &mut Rs, name: c_int, val: *const c_void, len: socklen_t) -> Result<(), i32> {
    // SAFETY: the caller's value of `len` bytes.
    let v = unsafe { int_val(val, len) };
    match name {
        libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG | libc::TCP_CONGESTION => {}
        libc::TCP_KEEPIDLE => {
            let t = v?;
            if t <= 0 {
                return Err(libc::EINVAL);
            }
            g.keepalive_time = t as u32;
        }
        libc::TCP_NODELAY => set_bit(&mut g.tcp_opts, name, v? != 0),
        _ => return Err(libc::ENOTSUP),
    }
    Ok(())
}

fn set_rdma(g: &mut Rs, name: c_int, val: *const c_void, len: socklen_t) -> Result<(), i32> {
    if !unopened(g) {
        return Err(libc::EINVAL);
    }
    let max = c_int::from(roce_rsocket::consts::QP_MAX_SIZE);
    // SAFETY: `val` is the caller's option value of `len` bytes (rsetsockopt's
    // contract); int_val reads an int only when `len` holds one and `val`
    // is not NULL.
    let int = || unsafe { int_val(val, len) };
    match name {
        RDMA_SQSIZE => g.cfg.sq_size = int()?.clamp(0, max) as u16,
        RDMA_RQSIZE => g.cfg.rq_size = int()?.clamp(0, max) as u16,
        RDMA_INLINE => g.cfg.sq_inline = int()?.clamp(0, max) as u16,
        RDMA_IOMAPSIZE => {
            // SAFETY: the caller's int.
            let v = unsafe { int_val(val, len) }?.clamp(0, 0xFF00) as u16;
            g.cfg.target_iomap_size = v;
        }
        // a path record from rdma_getaddrinfo: the CM resolves its own route
        RDMA_ROUTE => {}
        _ => return Err(libc::ENOTSUP),
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rsetsockopt(
    s: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    guard(|| {
        if let Some(h) = crate::ds::lookup(s) {
            return crate::ds_calls::setsockopt(&h, level, name, val, len);
        }
        let h = table::lookup(s)?;
        let mut g = lock(&h);
        match level {
            libc::SOL_SOCKET => set_socket(&mut g, name, val, len)?,
            libc::IPPROTO_TCP => set_tcp(&mut g, name, val, len)?,
            libc::IPPROTO_IPV6 if name == libc::IPV6_V6ONLY => {
                // SAFETY: the caller's int.
                let mut on = unsafe { int_val(val, len) }?;
                // SAFETY: our live id; an int the CM reads.
                unsafe {
                    rdma_set_option(
                        g.id,
                        RDMA_OPTION_ID,
                        RDMA_OPTION_ID_AFONLY,
                        (&mut on as *mut c_int).cast(),
                        4,
                    )
                };
                set_bit(&mut g.ipv6_opts, name, on != 0);
            }
            libc::IPPROTO_IP if name == libc::IP_TOS => {}
            SOL_RDMA => set_rdma(&mut g, name, val, len)?,
            _ => return Err(libc::ENOTSUP),
        }
        Ok(0)
    })
}

fn get_value(g: &mut Rs, level: c_int, name: c_int) -> Result<c_int, i32> {
    Ok(match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            bit(g.so_opts, name)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => g.cfg.rbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => g.cfg.sbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_ERROR) => {
            // ours (a failed connect, a protocol error), else the stream's;
            // reading clears both
            let stream = g.stream.as_mut().map_or(0, |s| s.take_error());
            match std::mem::take(&mut g.err) {
                0 => stream,
                e => e,
            }
        }
        (libc::SOL_SOCKET, libc::SO_TYPE) => libc::SOCK_STREAM,
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => 1,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => g.keepalive_time as c_int,
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => bit(g.tcp_opts, name),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => 2048,
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => bit(g.ipv6_opts, name),
        (SOL_RDMA, RDMA_SQSIZE) => c_int::from(g.cfg.sq_size),
        (SOL_RDMA, RDMA_RQSIZE) => c_int::from(g.cfg.rq_size),
        (SOL_RDMA, RDMA_INLINE) => c_int::from(g.cfg.sq_inline),
        (SOL_RDMA, RDMA_IOMAPSIZE) => c_int::from(g.cfg.target_iomap_size),
        _ => return Err(libc::ENOTSUP),
    })
}

#[no_mangle]
pub unsafe extern "C" fn rgetsockopt(
    s: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    guard(|| {
        if let Some(h) = crate::ds::lookup(s) {
            return crate::ds_calls::getsockopt(&h, level, name, val, len);
        }
        let h = table::lookup(s)?;
        let mut g = lock(&h);
        if val.is_null() || len.is_null() {
            return Err(libc::EFAULT);
        }
        if level == libc::SOL_SOCKET && name == libc::SO_LINGER {
            // SAFETY: the caller's length.
            if (unsafe { *len } as usize) < std::mem::size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            let l = libc::linger { l_onoff: 1 - bit(g.so_opts, name), l_linger: 0 };
            // SAFETY: the caller's linger-sized buffer (checked).
            unsafe {
                (val as *mut libc::linger).write_unaligned(l);
                *len = std::mem::size_of::<libc::linger>() as socklen_t;
            }
            return Ok(0);
        }
        let v = get_value(&mut g, level, name)?;
        // SAFETY: the caller's length and buffer.
        unsafe {
            if (*len as usize) < std::mem::size_of::<c_int>() {
                return Err(libc::EINVAL);
            }
            (val as *mut c_int).write_unaligned(v);
            *len = std::mem::size_of::<c_int>() as socklen_t;
        }
        Ok(0)
    })
}

/// `rfcntl(s, cmd, ...)`: the third argument is read as the integer the
/// caller passed (on the x86-64 and AArch64 Linux ABIs a variadic integer
/// travels where a fixed one does).
#[no_mangle]
pub unsafe extern "C" fn rfcntl(s: c_int, cmd: c_int, arg: libc::c_long) -> c_int {
    guard(|| {
        if let Some(h) = crate::ds::lookup(s) {
            return crate::ds_calls::fcntl(&h, cmd, arg);
        }
        let h = table::lookup(s)?;
        let mut g = lock(&h);
        match cmd {
            libc::F_GETFL => Ok(g.fs_flags),
            libc::F_SETFL => {
                g.fs_flags = arg as c_int;
                Ok(0)
            }
            libc::F_GETFD => Ok(g.fd_flags),
            libc::F_SETFD => {
                g.fd_flags = arg as c_int;
                Ok(0)
            }
            _ => Err(libc::ENOTSUP),
        }
    })
}
