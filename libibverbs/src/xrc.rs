//! XRC through the verbs (see `roce_emulator::xrc` for what the device
//! does): `ibv_open_xrcd` / `ibv_close_xrcd`, `ibv_create_srq_ex` with
//! `IBV_SRQT_XRC`, and the XRC target QPs of `ibv_create_qp_ex`
//! (`IBV_QPT_XRC_RECV`; the initiators, `IBV_QPT_XRC_SEND`, are made by
//! `crate::qp` like the other QPs).
//!
//! A domain opened with a file descriptor (`IBV_XRCD_INIT_ATTR_FD`) is
//! found again by the file's inode, as the kernel does: a second
//! `ibv_open_xrcd` of the same file in this process gets the same domain
//! (O_CREAT makes one when there is none: without it, EAGAIN; with O_EXCL
//! an existing one is EINVAL). On a device shared by several processes the
//! file's domain is one domain for all of them: each process has its piece
//! in its own device core, the host's registry says whether another
//! process has one (for O_CREAT and O_EXCL), and a target QP's requests
//! reach the XRC SRQs of the other processes (`roce_emulator::xrc_relay`;
//! docs/libibverbs.md, "XRC").

use crate::abi;
use crate::device::ctx;
use crate::handles::{self, Kind};
use crate::util::{diag, guard_ptr, guard_rc};
use roce_verbs_api::Xrcd;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// An XRC domain; `c` first.
#[repr(C)]
pub(crate) struct XrcdObj {
    pub c: abi::ibv_xrcd,
    pub xrcd: Xrcd,
    /// The inode it was opened by (`(st_dev, st_ino)`).
    key: Option<(u64, u64)>,
    /// The fork generation it was made in ([`crate::fork`]).
    pub gen: u32,
}

// (`xrcd_obj`, the unchecked lookup, is not needed: every XRCD verb checks)
#[allow(dead_code)]
mod lookups {
    use super::*;
    handles::c_object!(XrcdObj: abi::ibv_xrcd, Xrcd, generation gen; xrcd_obj, xrcd_live);
}
use lookups::xrcd_live;

/// [`xrcd_live`] for the QP code (`ibv_open_qp`).
///
/// # Safety
/// As `xrcd_live`: `x` is NULL or a pointer the program passes.
pub(crate) unsafe fn xrcd_live_pub(x: *mut abi::ibv_xrcd) -> Result<&'static XrcdObj, i32> {
    // SAFETY: the caller's contract, passed on.
    unsafe { xrcd_live(x) }
}

impl XrcdObj {
    /// Opened by a file: on a shared device, one domain with the other
    /// processes' of that file.
    pub(crate) fn shared_by_file(&self) -> bool {
        self.key.is_some()
    }
}

/// The domains opened by a file, by (context, inode): the domain, how
/// many `ibv_xrcd`s of this process hold it, and this process's hold on
/// the file's domain of a shared device (released with the last handle).
type ByInode =
    HashMap<(usize, (u64, u64)), (Xrcd, usize, Option<roce_verbs_api::driver::HostHold>)>;

fn by_inode() -> MutexGuard<'static, ByInode> {
    static M: OnceLock<Mutex<ByInode>> = OnceLock::new();
    M.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// The (device, inode) of an open file descriptor.
fn inode_of(fd: libc::c_int) -> Result<(u64, u64), i32> {
    // SAFETY: stat is plain data; fstat writes it and reads nothing else.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a plain system call on the caller's descriptor.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(libc::EBADF);
    }
    Ok((st.st_dev, st.st_ino))
}

pub(crate) unsafe extern "C" fn open_xrcd(
    c: *mut abi::ibv_context,
    attr: *mut abi::ibv_xrcd_init_attr,
) -> *mut abi::ibv_xrcd {
    guard_ptr(|| {
        // SAFETY: contract of ibv_open_xrcd.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        // SAFETY: the caller's ibv_xrcd_init_attr.
        let a = unsafe { crate::util::arg_ref(attr) }?;
        let known = abi::IBV_XRCD_INIT_ATTR_FD | abi::IBV_XRCD_INIT_ATTR_OFLAGS;
        if a.comp_mask & !known != 0 {
            return Err(libc::EINVAL);
        }
        let oflags = match a.comp_mask & abi::IBV_XRCD_INIT_ATTR_OFLAGS {
            0 => 0,
            _ => a.oflags,
        };
        if oflags & !(libc::O_CREAT | libc::O_EXCL) != 0 {
            return Err(libc::EINVAL);
        }
        let fd = match a.comp_mask & abi::IBV_XRCD_INIT_ATTR_FD {
            0 => -1,
            _ => a.fd,
        };
        let key = if fd == -1 { None } else { Some(inode_of(fd)?) };
        let xrcd = match key {
            None => {
                if oflags & libc::O_CREAT == 0 {
                    return Err(libc::EINVAL);
                }
                cx.ctx.alloc_xrcd().map_err(|e| {
                    diag!("ibv_open_xrcd: {e}");
                    libc::ENOMEM
                })?
            }
            Some(k) => {
                let mut m = by_inode();
                match m.get_mut(&(c as usize, k)) {
                    Some(_) if oflags & libc::O_EXCL != 0 => return Err(libc::EINVAL),
                    Some((x, n, _)) => {
                        *n += 1;
                        x.clone()
                    }
                    None => {
                        let x = cx.ctx.alloc_xrcd().map_err(|e| {
                            diag!("ibv_open_xrcd: {e}");
                            libc::ENOMEM
                        })?;
                        // another process of a shared device may have it
                        let (elsewhere, hold) = x.join_file(k).map_err(|e| {
                            diag!("ibv_open_xrcd: {e}");
                            libc::EIO
                        })?;
                        if !elsewhere && oflags & libc::O_CREAT == 0 {
                            return Err(libc::EAGAIN);
                        }
                        if elsewhere && oflags & libc::O_EXCL != 0 {
                            return Err(libc::EINVAL);
                        }
                        m.insert((c as usize, k), (x.clone(), 1, hold));
                        x
                    }
                }
            }
        };
        let b = Box::into_raw(Box::new(XrcdObj {
            c: abi::ibv_xrcd { context: c },
            xrcd,
            key,
            gen: crate::fork::generation(),
        }));
        handles::insert(Kind::Xrcd, b, c);
        Ok(b as *mut abi::ibv_xrcd)
    })
}

pub(crate) unsafe extern "C" fn close_xrcd(x: *mut abi::ibv_xrcd) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_close_xrcd (checked live).
        let o = unsafe { xrcd_live(x) }?;
        // the last handle of a domain that SRQs or target QPs still use:
        // busy, as the kernel answers
        if last_handle(o) && o.xrcd.users() > 0 {
            diag!("ibv_close_xrcd: {} SRQ(s) or QP(s) still use the domain", o.xrcd.users());
            return Err(libc::EBUSY);
        }
        handles::lock().take(Kind::Xrcd, x, "ibv_close_xrcd")?;
        // SAFETY: x was live until just now, and only this call frees it.
        let b = unsafe { Box::from_raw(x as *mut XrcdObj) };
        forget(&b);
        drop(b);
        Ok(())
    })
}

/// Whether `o` is the last `ibv_xrcd` of its domain (one opened without a
/// file always is).
fn last_handle(o: &XrcdObj) -> bool {
    match o.key {
        None => true,
        Some(k) => by_inode().get(&(o.c.context as usize, k)).is_none_or(|(_, n, _)| *n <= 1),
    }
}

/// An `ibv_xrcd` goes (closed, or with its context): the file's count.
fn forget(o: &XrcdObj) {
    if let Some(k) = o.key {
        let mut m = by_inode();
        let id = (o.c.context as usize, k);
        if let Some((_, n, _)) = m.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                m.remove(&id);
            }
        }
    }
}

/// Free an `ibv_xrcd` of a context being closed.
///
/// # Safety
/// `p` is an XRCD of this library that has just left the handle table.
pub(crate) unsafe fn free(p: usize) {
    // SAFETY: per the contract, the leaked box of open_xrcd.
    let b = unsafe { Box::from_raw(p as *mut XrcdObj) };
    forget(&b);
}

/// `ibv_create_srq_ex` of an XRC SRQ (the inline verb calls this only for
/// what `ibv_create_srq` cannot make).
pub(crate) unsafe extern "C" fn create_srq_ex(
    c: *mut abi::ibv_context,
    attr: *mut abi::ibv_srq_init_attr_ex,
) -> *mut abi::ibv_srq {
    guard_ptr(|| {
        // SAFETY: contract of ibv_create_srq_ex.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        // SAFETY: the caller's ibv_srq_init_attr_ex.
        let a = unsafe { crate::util::arg_mut(attr) }?;
        let m = a.comp_mask;
        let need = abi::IBV_SRQ_INIT_ATTR_PD;
        if m & need != need {
            return Err(libc::EINVAL);
        }
        let ty = match m & abi::IBV_SRQ_INIT_ATTR_TYPE {
            0 => abi::IBV_SRQT_BASIC,
            _ => a.srq_type,
        };
        if ty == abi::IBV_SRQT_TM || m & abi::IBV_SRQ_INIT_ATTR_TM != 0 {
            diag!("ibv_create_srq_ex: tag matching SRQs are not supported");
            return Err(libc::EOPNOTSUPP);
        }
        if ty == abi::IBV_SRQT_BASIC {
            let mut basic = abi::ibv_srq_init_attr { srq_context: a.srq_context, attr: a.attr };
            // SAFETY: this library's verb, with attributes of our own.
            let s = unsafe { crate::srq::create_srq(a.pd, &mut basic) };
            a.attr = basic.attr;
            return if s.is_null() { Err(crate::util::errno()) } else { Ok(s) };
        }
        if ty != abi::IBV_SRQT_XRC {
            return Err(libc::EINVAL);
        }
        let xrc = abi::IBV_SRQ_INIT_ATTR_XRCD | abi::IBV_SRQ_INIT_ATTR_CQ;
        if m & xrc != xrc || a.xrcd.is_null() || a.cq.is_null() {
            diag!("ibv_create_srq_ex: an XRC SRQ needs an XRCD and a CQ");
            return Err(libc::EINVAL);
        }
        // SAFETY: checked live.
        let xo = unsafe { xrcd_live(a.xrcd) }?;
        crate::srq::new_xrc_srq(cx, a, &xo.xrcd)
    })
}

/// An XRC target QP (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV` and
/// `IBV_QP_INIT_ATTR_XRCD`): the QP of the domain, with no PD, CQ or
/// receive queue of its own.
pub(crate) fn tgt_qp(
    cx: &crate::device::Ctx,
    a: &abi::ibv_qp_init_attr_ex,
) -> Result<(roce_verbs_api::Qp, *mut abi::ibv_xrcd), i32> {
    if a.comp_mask & abi::IBV_QP_INIT_ATTR_XRCD == 0 || a.xrcd.is_null() {
        diag!("create_qp_ex: an XRC_RECV QP needs IBV_QP_INIT_ATTR_XRCD");
        return Err(libc::EINVAL);
    }
    // SAFETY: checked live.
    let xo = unsafe { xrcd_live(a.xrcd) }?;
    if xo.c.context != cx.c() {
        return Err(libc::EINVAL);
    }
    let q = xo.xrcd.create_tgt_qp().map_err(|e| {
        diag!("create_qp_ex: {e}");
        libc::EINVAL
    })?;
    Ok((q, a.xrcd))
}
