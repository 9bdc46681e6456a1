//! Protection domains, memory regions (the application's own memory) and
//! memory windows (bound through a QP: `ibv_bind_mw` is in `qp.rs`).

use crate::abi;
use crate::device::ctx;
use crate::handles::{self, Kind};
use crate::util::{diag, guard_ptr, guard_rc};
use roce_verbs_api::{AccessFlags, Mr, Mw, MwType, Pd, RegMrError, RegionMem};
use std::ffi::c_void;
use std::sync::Mutex;

/// A PD. `c` first: the program's `ibv_pd *` is the box.
#[repr(C)]
pub(crate) struct PdObj {
    pub c: abi::ibv_pd,
    pub pd: Pd,
    /// Objects created on this PD through the C ABI and not yet destroyed
    /// (MRs, MWs, QPs, SRQs, AHs): `ibv_dealloc_pd` answers EBUSY while
    /// any is left, as the kernel does.
    pub users: std::sync::atomic::AtomicUsize,
}

impl PdObj {
    pub fn get(&self) {
        self.users.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    pub fn put(&self) {
        self.users.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

handles::c_object!(PdObj: abi::ibv_pd, Pd; pd, pd_live);

/// The PD behind `p` if it is live, counted as used by an object about to
/// be created on it (checked and counted under the handle table's lock, so
/// `ibv_dealloc_pd` cannot free it meanwhile: it answers EBUSY). The caller
/// calls [`PdObj::put`] if the creation fails.
pub(crate) fn pd_hold<'a>(t: &handles::Table, p: *mut abi::ibv_pd) -> Result<&'a PdObj, i32> {
    let o: &PdObj = handles::held_object(t, p)?;
    o.get();
    Ok(o)
}

/// Run `f` (the creation of an object on PD `p`) with the PD checked live
/// and counted; the count is given back if `f` fails.
fn on_pd<R>(p: *mut abi::ibv_pd, f: impl FnOnce(&PdObj) -> Result<R, i32>) -> Result<R, i32> {
    let o = pd_hold(&handles::lock(), p)?;
    let r = f(o);
    if r.is_err() {
        o.put();
    }
    r
}

/// An MR: the C struct, then the region (None once deregistered).
#[repr(C)]
pub(crate) struct MrObj {
    pub c: abi::ibv_mr,
    pub mr: Mutex<Option<Mr>>,
}

/// # Safety
/// `p` must be an MR this library returned and not yet deregistered.
pub(crate) unsafe fn mr<'a>(p: *mut abi::ibv_mr) -> Option<&'a MrObj> {
    // SAFETY: as for pd().
    (!p.is_null()).then(|| unsafe { &*(p as *const MrObj) })
}

pub(crate) unsafe extern "C" fn alloc_pd(c: *mut abi::ibv_context) -> *mut abi::ibv_pd {
    guard_ptr(|| {
        // SAFETY: contract of ibv_alloc_pd.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        let pd = cx.ctx.alloc_pd().map_err(|e| {
            diag!("alloc_pd: {e}");
            libc::ENOMEM
        })?;
        let b = Box::new(PdObj {
            c: abi::ibv_pd { context: c, handle: pd.handle().id() },
            pd,
            users: std::sync::atomic::AtomicUsize::new(0),
        });
        let p = Box::into_raw(b) as *mut abi::ibv_pd;
        handles::insert(Kind::Pd, p, c);
        Ok(p)
    })
}

pub(crate) unsafe extern "C" fn dealloc_pd(p: *mut abi::ibv_pd) -> libc::c_int {
    guard_rc(|| {
        {
            let mut t = handles::lock();
            t.expect_live(Kind::Pd, p, "ibv_dealloc_pd")?;
            // SAFETY: live in the table, whose lock we hold.
            let o = unsafe { &*(p as *const PdObj) };
            // A PD with MRs, QPs, SRQs, AHs or MWs is busy (EBUSY, as the
            // kernel): refused before anything is undone, so the PD stays
            // usable. The count is taken under this lock (pd_hold).
            if o.users.load(std::sync::atomic::Ordering::Acquire) > 0 {
                return Err(libc::EBUSY);
            }
            t.remove(Kind::Pd, p);
        }
        // Nothing can refuse past here: the emulator's destroy fails only
        // if another handle to the PD exists, which the users count rules
        // out (if it did, the PD would go with that handle's last drop).
        // SAFETY: p is the leaked box; it left the table just now, so this is its only free.
        let b = unsafe { Box::from_raw(p as *mut PdObj) };
        b.pd.destroy().map_err(|e| {
            diag!("dealloc_pd: {e}");
            libc::EBUSY
        })
    })
}

/// libibverbs' access flags that roce-emu accepts. The optional range
/// (IBV_ACCESS_OPTIONAL_RANGE: relaxed ordering and later hints) may be
/// ignored by any device, as the header says; HUGETLB is a hint.
/// rdma-core 45's FLUSH access bits (not in rdma-core 44's header).
const IBV_ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
const IBV_ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;

fn access_of(access: u32) -> Result<AccessFlags, i32> {
    // IBV_ACCESS_OPTIONAL_RANGE: bits 20..=29 (a macro in the header)
    let optional = 0x3ff0_0000u32;
    let a = access & !optional & !abi::IBV_ACCESS_HUGETLB;
    let known = abi::IBV_ACCESS_LOCAL_WRITE
        | abi::IBV_ACCESS_REMOTE_WRITE
        | abi::IBV_ACCESS_REMOTE_READ
        | abi::IBV_ACCESS_REMOTE_ATOMIC
        | abi::IBV_ACCESS_MW_BIND
        | abi::IBV_ACCESS_ZERO_BASED
        | IBV_ACCESS_FLUSH_GLOBAL
        | IBV_ACCESS_FLUSH_PERSISTENT
        | abi::IBV_ACCESS_ON_DEMAND;
    if a & !known != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(AccessFlags(a & !abi::IBV_ACCESS_ZERO_BASED))
}

fn reg_err(e: RegMrError) -> i32 {
    diag!("reg_mr: {e}");
    match e {
        RegMrError::TooMany { .. } => libc::ENOMEM,
        RegMrError::UnsupportedAccess(_) => libc::EOPNOTSUPP,
        _ => libc::EINVAL,
    }
}

/// Whether every page of `[addr, addr+len)` is mapped (mincore fails with
/// ENOMEM on an unmapped page), as the kernel's page pinning would check.
fn mapped(addr: usize, len: usize) -> bool {
    if len == 0 {
        return true;
    }
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let start = addr & !(page - 1);
    let Some(end) = addr.checked_add(len) else { return false };
    let pages = (end - start).div_ceil(page);
    let mut vec = vec![0u8; pages.min(1 << 20)];
    let mut at = start;
    while at < end {
        let n = ((end - at).div_ceil(page)).min(vec.len());
        // SAFETY: mincore only writes `n` bytes into vec (n <= vec.len())
        // and reads nothing of the range.
        let r = unsafe { libc::mincore(at as *mut c_void, n * page, vec.as_mut_ptr()) };
        if r != 0 {
            return false;
        }
        at += n * page;
    }
    true
}

/// Whether every byte of `[addr, addr+len)` lies in a writable mapping of
/// this process (`/proc/self/maps`): the kernel pins a region that may be
/// written (local or remote write, atomics) for writing, and refuses a
/// read-only range with EFAULT; a peer's WRITE into a read-only page would
/// otherwise fault the engine.
fn writable(addr: usize, len: usize) -> bool {
    if len == 0 {
        return true;
    }
    let Some(end) = addr.checked_add(len) else { return false };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return false };
    let ranges: Vec<(usize, usize, bool)> = maps
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (lo, hi) = f.next()?.split_once('-')?;
            let perms = f.next()?;
            Some((
                usize::from_str_radix(lo, 16).ok()?,
                usize::from_str_radix(hi, 16).ok()?,
                perms.as_bytes().get(1) == Some(&b'w'),
            ))
        })
        .collect();
    let mut at = addr;
    while at < end {
        match ranges.iter().find(|r| r.0 <= at && at < r.1) {
            Some(&(_, hi, true)) => at = hi,
            _ => return false,
        }
    }
    true
}

/// Access flags that let the region be written (locally or by a peer).
fn writes(access: u32) -> bool {
    access
        & (abi::IBV_ACCESS_LOCAL_WRITE
            | abi::IBV_ACCESS_REMOTE_WRITE
            | abi::IBV_ACCESS_REMOTE_ATOMIC)
        != 0
}

/// A new MR on PD `o` (checked live and counted by the caller, [`on_pd`]).
fn new_mr(
    c: *mut abi::ibv_context,
    p: *mut abi::ibv_pd,
    o: &PdObj,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: u32,
) -> Result<*mut abi::ibv_mr, i32> {
    let flags = access_of(access)?;
    let iova = if access & abi::IBV_ACCESS_ZERO_BASED != 0 { 0 } else { iova };
    // On-demand paging (IBV_ACCESS_ON_DEMAND): nothing is pinned, so
    // nothing needs to be mapped now; a page is reached when it is used,
    // and one that is not mapped then fails that access (a peer's: NAK
    // remote access error) as an ODP fault the kernel cannot resolve does.
    // Implicit: NULL and SIZE_MAX register the whole address space.
    let odp = access & abi::IBV_ACCESS_ON_DEMAND != 0;
    let implicit = odp && addr.is_null() && len == usize::MAX;
    if addr.is_null() && len > 0 && !implicit {
        return Err(libc::EINVAL);
    }
    if !odp && !mapped(addr as usize, len) {
        return Err(libc::EFAULT);
    }
    if !odp && writes(access) && !writable(addr as usize, len) {
        diag!("reg_mr: [{addr:p}, +{len}) is not writable and the access allows writes");
        return Err(libc::EFAULT);
    }
    if odp && !implicit && (addr as usize).checked_add(len).is_none() {
        return Err(libc::EINVAL);
    }
    let mem = if implicit {
        // SAFETY: the application asked for an implicit on-demand region
        // (NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND): its whole address space
        // for the device, every access fault-tolerant (roce_region::guard).
        unsafe { RegionMem::implicit() }
    } else {
        // SAFETY: the application registered [addr, addr+len) and keeps it
        // valid until ibv_dereg_mr (libibverbs' contract for reg_mr; mapping
        // checked above, except on demand, where an unmapped page fails its
        // access in the fault-tolerant copy). The region is dropped in
        // dereg_mr, before we return to the program, and only touched under
        // the device lock until then.
        unsafe { RegionMem::external(addr.cast::<u8>(), len) }
    };
    let m = o.pd.reg_mr_mem(mem, Some(iova), flags).map_err(reg_err)?;
    let info = m.info();
    let b = Box::new(MrObj {
        c: abi::ibv_mr {
            context: c,
            pd: p,
            addr,
            length: len as _,
            handle: info.handle.id(),
            lkey: info.lkey.value(),
            rkey: info.rkey.value(),
        },
        mr: Mutex::new(Some(m)),
    });
    let p = Box::into_raw(b) as *mut abi::ibv_mr;
    handles::insert(Kind::Mr, p, c);
    Ok(p)
}

pub(crate) unsafe extern "C" fn reg_mr(
    p: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: libc::c_int,
) -> *mut abi::ibv_mr {
    guard_ptr(|| on_pd(p, |o| new_mr(o.c.context, p, o, addr, len, addr as u64, access as u32)))
}

pub(crate) unsafe extern "C" fn reg_mr_iova(
    p: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: libc::c_int,
) -> *mut abi::ibv_mr {
    guard_ptr(|| on_pd(p, |o| new_mr(o.c.context, p, o, addr, len, iova, access as u32)))
}

pub(crate) unsafe extern "C" fn reg_mr_iova2(
    p: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: libc::c_uint,
) -> *mut abi::ibv_mr {
    guard_ptr(|| on_pd(p, |o| new_mr(o.c.context, p, o, addr, len, iova, access)))
}

pub(crate) unsafe extern "C" fn dereg_mr(m: *mut abi::ibv_mr) -> libc::c_int {
    guard_rc(|| {
        // Out of the table first: of two racing deregistrations one wins,
        // the other gets EINVAL.
        let ctx = {
            let mut t = handles::lock();
            t.take(Kind::Mr, m, "ibv_dereg_mr")?;
            // SAFETY: m was live until just now and only this call frees it.
            unsafe { (*m).context }
        };
        // SAFETY: as above.
        let o = unsafe { mr(m) }.ok_or(libc::EINVAL)?;
        let region = o.mr.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(r) = region {
            if let Err(e) = r.destroy() {
                // Another handle still holds the region: busy, as the kernel
                // answers; the MR stays (live again, its region goes with
                // the other handle).
                diag!("dereg_mr: {e}");
                handles::insert(Kind::Mr, m, ctx);
                return Err(libc::EBUSY);
            }
        }
        // SAFETY: the MR's PD outlives it (dealloc_pd is refused while
        // the MR exists).
        if let Some(p) = unsafe { pd(o.c.pd) } {
            p.put();
        }
        // SAFETY: m is the leaked box; it left the table above, so this is
        // its only free.
        drop(unsafe { Box::from_raw(m as *mut MrObj) });
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn rereg_mr(
    m: *mut abi::ibv_mr,
    flags: libc::c_int,
    p: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: libc::c_int,
) -> libc::c_int {
    // Returns enum ibv_rereg_mr_err_code: 0, or a negative IBV_REREG_MR_ERR_*.
    crate::util::guard(abi::IBV_REREG_MR_ERR_INPUT, || {
        if !handles::live(Kind::Mr, m) {
            crate::util::set_errno(libc::EINVAL);
            return abi::IBV_REREG_MR_ERR_INPUT;
        }
        // SAFETY: live (checked); contract of ibv_rereg_mr (not raced
        // with its deregistration).
        let Some(o) = (unsafe { mr(m) }) else { return abi::IBV_REREG_MR_ERR_INPUT };
        let flags = flags as u32;
        if flags
            & !(abi::IBV_REREG_MR_CHANGE_TRANSLATION
                | abi::IBV_REREG_MR_CHANGE_PD
                | abi::IBV_REREG_MR_CHANGE_ACCESS)
            != 0
            || flags == 0
        {
            crate::util::set_errno(libc::EINVAL);
            return abi::IBV_REREG_MR_ERR_INPUT;
        }
        let new_pd = if flags & abi::IBV_REREG_MR_CHANGE_PD != 0 {
            // SAFETY: contract of ibv_rereg_mr (checked live).
            match unsafe { pd_live(p) } {
                Ok(x) => Some(x),
                Err(_) => {
                    crate::util::set_errno(libc::EINVAL);
                    return abi::IBV_REREG_MR_ERR_INPUT;
                }
            }
        } else {
            None
        };
        let new_access = if flags & abi::IBV_REREG_MR_CHANGE_ACCESS != 0 {
            match access_of(access as u32) {
                Ok(a) => Some(a),
                Err(e) => {
                    crate::util::set_errno(e);
                    return abi::IBV_REREG_MR_ERR_INPUT;
                }
            }
        } else {
            None
        };
        // the access the region will have: a range that may be written
        // must be writable (as in new_mr)
        let access_after = match new_access {
            Some(_) => access as u32,
            // (the emulator's access bits are libibverbs' IBV_ACCESS_* bits)
            None => {
                o.mr.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .map_or(0, |m| m.info().access.0)
            }
        };
        let (range_addr, range_len) = if flags & abi::IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
            (addr as usize, len)
        } else {
            (o.c.addr as usize, o.c.length)
        };
        if writes(access_after) && !writable(range_addr, range_len) {
            crate::util::set_errno(libc::EFAULT);
            return abi::IBV_REREG_MR_ERR_INPUT;
        }
        let new_mem = if flags & abi::IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
            if (addr.is_null() && len > 0) || !mapped(addr as usize, len) {
                crate::util::set_errno(libc::EFAULT);
                return abi::IBV_REREG_MR_ERR_INPUT;
            }
            // SAFETY: as in new_mr: the program keeps the new range valid
            // until the region is deregistered or re-registered again.
            Some((unsafe { RegionMem::external(addr.cast::<u8>(), len) }, addr as u64))
        } else {
            None
        };
        let guard = o.mr.lock().unwrap_or_else(|e| e.into_inner());
        let Some(region) = guard.as_ref() else {
            crate::util::set_errno(libc::EINVAL);
            return abi::IBV_REREG_MR_ERR_INPUT;
        };
        match region.rereg(new_pd.map(|x| &x.pd), new_mem, new_access) {
            Ok(info) => {
                // SAFETY: the program does not use the MR concurrently with
                // rereg (libibverbs' rule); we update its public fields.
                let c = unsafe { &mut *(m) };
                if let Some(x) = new_pd {
                    // SAFETY: the old PD is live while the MR is.
                    if let Some(old) = unsafe { pd(c.pd) } {
                        old.put();
                    }
                    x.get();
                    c.pd = p;
                }
                if flags & abi::IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
                    c.addr = addr;
                    c.length = len as _;
                }
                c.lkey = info.lkey.value();
                c.rkey = info.rkey.value();
                0
            }
            Err(e) => {
                crate::util::set_errno(reg_err(e));
                abi::IBV_REREG_MR_ERR_INPUT
            }
        }
    })
}

// ---------------------------------------------------------------- MW

#[repr(C)]
pub(crate) struct MwObj {
    pub c: abi::ibv_mw,
    pub mw: Mw,
}

pub(crate) unsafe extern "C" fn alloc_mw(
    p: *mut abi::ibv_pd,
    ty: abi::ibv_mw_type,
) -> *mut abi::ibv_mw {
    guard_ptr(|| on_pd(p, |o| new_mw(o, p, ty)))
}

/// A new MW on PD `o` (checked live and counted by the caller, [`on_pd`]).
fn new_mw(o: &PdObj, p: *mut abi::ibv_pd, ty: abi::ibv_mw_type) -> Result<*mut abi::ibv_mw, i32> {
    let t = match ty {
        abi::IBV_MW_TYPE_1 => MwType::Type1,
        abi::IBV_MW_TYPE_2 => MwType::Type2,
        _ => return Err(libc::EINVAL),
    };
    let mw = o.pd.alloc_mw(t).map_err(|e| {
        diag!("alloc_mw: {e}");
        libc::ENOMEM
    })?;
    let b = Box::new(MwObj {
        c: abi::ibv_mw {
            context: o.c.context,
            pd: p,
            rkey: mw.rkey().value(),
            handle: mw.handle().id(),
            type_: ty,
        },
        mw,
    });
    let m = Box::into_raw(b) as *mut abi::ibv_mw;
    handles::insert(Kind::Mw, m, o.c.context);
    Ok(m)
}

pub(crate) unsafe extern "C" fn dealloc_mw(m: *mut abi::ibv_mw) -> libc::c_int {
    guard_rc(|| {
        handles::lock().take(Kind::Mw, m, "ibv_dealloc_mw")?;
        // SAFETY: m is a leaked Box<MwObj>; it left the table just now, so
        // this is its only free.
        let b = unsafe { Box::from_raw(m as *mut MwObj) };
        // SAFETY: the PD outlives its windows.
        if let Some(p) = unsafe { pd(b.c.pd) } {
            p.put();
        }
        b.mw.destroy().map_err(|e| {
            diag!("dealloc_mw: {e}");
            libc::EBUSY
        })
    })
}

/// The MW behind a program's pointer.
///
/// # Safety
/// `m` must be a window this library allocated and not yet deallocated.
pub(crate) unsafe fn mw<'a>(m: *mut abi::ibv_mw) -> Option<&'a MwObj> {
    // SAFETY: as for pd().
    (!m.is_null()).then(|| unsafe { &*(m as *const MwObj) })
}

/// `ibv_advise_mr` (the `advise_mr` op of the verbs context): prefetch the
/// pages of on-demand regions. Each SGE must name a region of `pd` by its
/// lkey (else ENOENT) that is on demand (else EINVAL), within its bounds
/// (else EINVAL). Without `IBV_ADVISE_MR_FLAG_FLUSH` the advice is a hint
/// and returns at once; with it, a page that is not mapped (not writable,
/// for PREFETCH_WRITE) is EFAULT, as rxe's synchronous prefetch reports a
/// fault it cannot resolve. (Pages are always reached with the CPU here:
/// there is nothing to fault in ahead of time.)
pub(crate) unsafe extern "C" fn advise_mr(
    p: *mut abi::ibv_pd,
    advice: abi::ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut abi::ibv_sge,
    num_sge: u32,
) -> libc::c_int {
    guard_rc(|| {
        let o = pd_hold(&handles::lock(), p)?;
        let r = advise(o, advice, flags, sg_list, num_sge);
        o.put();
        r
    })
}

fn advise(
    o: &PdObj,
    advice: abi::ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut abi::ibv_sge,
    num_sge: u32,
) -> Result<(), i32> {
    const FLAG_FLUSH: u32 = 1; // IBV_ADVISE_MR_FLAG_FLUSH
    if advice > abi::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT {
        return Err(libc::EOPNOTSUPP);
    }
    if flags & !FLAG_FLUSH != 0 || num_sge == 0 || sg_list.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's array of num_sge SGEs (checked not NULL).
    let sges = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
    for sge in sges {
        let info =
            o.pd.context()
                .with_hca(|h| h.mr_by_lkey(o.pd.handle(), roce_packet::LKey::new(sge.lkey)))
                .ok_or(libc::ENOENT)?;
        if !info.access.contains(AccessFlags::ON_DEMAND) {
            diag!("ibv_advise_mr: lkey {:#x} is not an on-demand region", sge.lkey);
            return Err(libc::EINVAL);
        }
        let end = sge.addr.checked_add(u64::from(sge.length)).ok_or(libc::EINVAL)?;
        if sge.addr < info.addr || end > info.addr.saturating_add(info.length) {
            return Err(libc::EINVAL);
        }
        let fault = advice != abi::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT;
        if flags & FLAG_FLUSH != 0 && fault {
            let (a, n) = (sge.addr as usize, sge.length as usize);
            let write = advice == abi::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE;
            if !mapped(a, n) || (write && !writable(a, n)) {
                return Err(libc::EFAULT);
            }
        }
    }
    Ok(())
}
