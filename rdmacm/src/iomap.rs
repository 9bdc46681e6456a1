//! `riomap`, `riounmap`, `riowrite` (rsocket.c's iomap calls): a side
//! publishes a registered buffer of its own as an entry of the peer's
//! target iomap, and the peer RDMA-WRITEs straight into it at a stream
//! offset, with no message and no copy on the receiving side.
//!
//! The entry is sent at once (rdma-core queues it for the next `rsend`
//! or `riowrite`; either way it precedes what the program sends next on
//! the same QP). The peer must have asked for an iomap before it
//! connected (`RDMA_IOMAPSIZE`), else `riomap` fails (ENOMEM: no entry).

use crate::ep::IoMapping;
use crate::exports::{app_slice, sleep_on, talkable, write_loop};
use crate::ffi::*;
use crate::guard;
use crate::rs::Rs;
use crate::table::{self, lock};
use crate::SLEEP_CAP_MS;
use libc::{c_int, c_void, size_t, ssize_t};
use roce_rsocket::{Error, Sge};

fn free_index(rs: &Rs) -> u16 {
    (0..u16::MAX).find(|i| rs.iomaps.iter().all(|m| m.index != Some(*i))).unwrap_or(u16::MAX)
}

#[no_mangle]
pub unsafe extern "C" fn riomap(
    s: c_int,
    buf: *mut c_void,
    len: size_t,
    prot: c_int,
    _flags: c_int,
    offset: libc::off_t,
) -> libc::off_t {
    guard(|| {
        let h = table::lookup(s)?;
        let g = lock(&h);
        let mut g = talkable(&h, g, false)?;
        if buf.is_null() || len == 0 || prot & !(libc::PROT_WRITE | libc::PROT_NONE) != 0 {
            return Err(libc::EINVAL);
        }
        let pd = g.ep.as_ref().ok_or(libc::ENOTCONN)?.pd;
        let write = prot & libc::PROT_WRITE != 0;
        let access = IBV_ACCESS_LOCAL_WRITE | if write { IBV_ACCESS_REMOTE_WRITE } else { 0 };
        // SAFETY: the caller's buffer of `len` bytes, ours to register
        // until riounmap or rclose.
        let mr = unsafe { ibv_reg_mr(pd, buf, len, access) };
        if mr.is_null() {
            return Err(crate::errno().max(libc::ENOMEM));
        }
        let at = if offset == -1 { buf as u64 } else { offset as u64 };
        let mut m = IoMapping { addr: buf, len, mr, index: None };
        if write {
            let index = free_index(&g);
            // SAFETY: our live MR.
            let sge = Sge { addr: buf as u64, key: unsafe { (*mr).rkey }, length: len as u32 };
            loop {
                let _ = g.progress();
                let stream = g.stream.as_mut().ok_or(libc::ENOTCONN)?;
                match stream.send_iomap(index, at, sge) {
                    Ok(wr) => {
                        let posted = g.ep.as_ref().map(|ep| ep.post(&wr, &[]));
                        if let Some(Err(e)) = posted {
                            m.release();
                            return Err(e);
                        }
                        break;
                    }
                    Err(Error::WouldBlock) if !g.cm_gone => g = sleep_on(&h, g, SLEEP_CAP_MS),
                    Err(e) => {
                        m.release();
                        return Err(match e {
                            Error::NoSuchIomap { .. } => libc::ENOMEM,
                            e => e.errno(),
                        });
                    }
                }
            }
            m.index = Some(index);
        }
        g.iomaps.push(m);
        Ok(at as libc::off_t)
    })
}

#[no_mangle]
pub unsafe extern "C" fn riounmap(s: c_int, buf: *mut c_void, len: size_t) -> c_int {
    guard(|| {
        let h = table::lookup(s)?;
        let mut g = lock(&h);
        let at = g.iomaps.iter().position(|m| m.addr == buf && m.len == len).ok_or(libc::EINVAL)?;
        let mut m = g.iomaps.remove(at);
        m.release();
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn riowrite(
    s: c_int,
    buf: *const c_void,
    count: size_t,
    offset: libc::off_t,
    flags: c_int,
) -> ssize_t {
    guard(|| {
        // SAFETY: the caller's buffer of `count` bytes.
        let app = unsafe { app_slice(buf, count) }?;
        let base = offset as u64;
        let n = write_loop(s, app, flags, |rs, done, ramp| {
            let image = rs.ep.as_ref().ok_or(Error::NotConnected)?.target_image();
            let stream = rs.stream.as_mut().ok_or(Error::NotConnected)?;
            stream.iowrite(base + done as u64, app.len() - done, ramp, &image)
        })?;
        Ok(n as ssize_t)
    })
}
