//! Completion queues (`ibv_cq` and `ibv_cq_ex`), completion channels and
//! completion events.

use crate::abi;
use crate::device::{ctx, fd_nonblocking, Ctx};
use crate::handles::{self, Kind};
use crate::util::{diag, fail, guard, guard_neg, guard_ptr, guard_rc};
use roce_verbs_api::{CompChannel, Cq, SqRelease, WcFlags, WcStatus, WorkCompletion};
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// A completion channel; `c` first. `c.refcnt` (the CQs that use it:
/// `ibv_destroy_comp_channel` answers EBUSY while it is not 0) is read and
/// written only under the handle table's lock.
#[repr(C)]
pub(crate) struct ChanObj {
    pub c: abi::ibv_comp_channel,
    pub ch: CompChannel,
}

/// A CQ. `c` first: an `ibv_cq_ex` starts with the fields of an `ibv_cq`,
/// so the same pointer serves both.
#[repr(C)]
pub(crate) struct CqObj {
    pub c: abi::ibv_cq_ex,
    pub cq: Cq,
    pub chan: *mut ChanObj,
    /// Extended polling: the completions taken and the current one.
    pub ex: Mutex<ExPoll>,
    pub wc_flags: u64,
    /// `wc.sl` of a UD receive: the network header type of the datagram
    /// ([`roce_l3_type`] of the device's address family).
    pub l3: u8,
    /// QPs that report to this CQ: `ibv_destroy_cq` answers EBUSY while
    /// any is left (counted under the handle table's lock, [`cq_hold`]).
    pub users: std::sync::atomic::AtomicUsize,
    /// Completion events handed to the program and acknowledged, as
    /// libibverbs' `comp_events_completed` with its mutex and condition:
    /// `ibv_destroy_cq` waits until every event `ibv_get_cq_event`
    /// delivered for the CQ was acknowledged.
    pub events: Mutex<Events>,
    pub acked: Condvar,
    /// The fork generation it was made in ([`crate::fork`]).
    pub gen: u32,
}

#[derive(Default)]
pub(crate) struct Events {
    pub delivered: u64,
    pub acked: u64,
    /// `ibv_destroy_cq` has begun: no more events are delivered for it.
    pub dying: bool,
}

#[derive(Default)]
pub(crate) struct ExPoll {
    /// Taken from the device ahead of the program: their send-queue slots
    /// are freed as the program reads each one (`set_current`), as an HCA
    /// frees them when the CQE is parsed.
    pub queue: VecDeque<(WorkCompletion, SqRelease)>,
    pub cur: Option<WorkCompletion>,
}

handles::c_object!(CqObj: abi::ibv_cq, Cq, generation gen; cq, cq_live);

/// The CQ behind `p` if it is live and not being destroyed, counted as
/// used by a QP about to be created on it (under the table's lock, which
/// the caller holds; see [`crate::mr::pd_hold`]). The caller gives the
/// count back if the QP is not created.
pub(crate) fn cq_hold<'a>(t: &handles::Table, p: *mut abi::ibv_cq) -> Result<&'a CqObj, i32> {
    let o: &CqObj = handles::held_object(t, p)?;
    if lock(&o.events).dying {
        return Err(libc::EINVAL);
    }
    o.users.fetch_add(1, Ordering::AcqRel);
    Ok(o)
}

/// The CQ behind an extended CQ, unless a forked child inherited it.
///
/// # Safety
/// `p` must be an extended CQ this library made (the extended-poll
/// functions are only in those) and not yet destroyed.
unsafe fn cq_ex<'a>(p: *mut abi::ibv_cq_ex) -> Option<&'a CqObj> {
    // SAFETY: the extended-poll functions are only reachable through a CQ
    // this library built.
    let o = unsafe { &*(p as *const CqObj) };
    // (an inherited CQ of a forked child is the parent's: refused)
    (!crate::fork::inherited(o.gen)).then_some(o)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------- channel

pub(crate) unsafe extern "C" fn create_comp_channel(
    c: *mut abi::ibv_context,
) -> *mut abi::ibv_comp_channel {
    guard_ptr(|| {
        // SAFETY: contract of ibv_create_comp_channel.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        let ch =
            cx.ctx.create_comp_channel().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
        let b = Box::new(ChanObj {
            c: abi::ibv_comp_channel { context: c, fd: ch.as_raw_fd(), refcnt: 0 },
            ch,
        });
        let p = Box::into_raw(b) as *mut abi::ibv_comp_channel;
        handles::insert(Kind::Chan, p, c);
        Ok(p)
    })
}

pub(crate) unsafe extern "C" fn destroy_comp_channel(
    ch: *mut abi::ibv_comp_channel,
) -> libc::c_int {
    guard_rc(|| {
        {
            let mut t = handles::lock();
            t.expect_live(Kind::Chan, ch, "ibv_destroy_comp_channel")?;
            // SAFETY: a live Box<ChanObj>; refcnt is only touched under
            // the table's lock, which we hold.
            if unsafe { (*ch).refcnt } > 0 {
                // CQs use it (rdma-core's EBUSY): the channel stays
                return Err(libc::EBUSY);
            }
            t.remove(Kind::Chan, ch);
        }
        // SAFETY: the leaked box; it left the table just now, so this is
        // its only free.
        drop(unsafe { Box::from_raw(ch as *mut ChanObj) });
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn get_cq_event(
    ch: *mut abi::ibv_comp_channel,
    cq_out: *mut *mut abi::ibv_cq,
    cq_ctx: *mut *mut libc::c_void,
) -> libc::c_int {
    guard_neg(|| {
        if cq_out.is_null() || cq_ctx.is_null() {
            return Err(libc::EINVAL);
        }
        handles::check(Kind::Chan, ch)?;
        // SAFETY: a live Box<ChanObj> (checked); the program does not
        // destroy a channel another thread waits on (libibverbs' rule).
        let o = unsafe { &*(ch as *const ChanObj) };
        // SAFETY: the channel's context lives while the channel does.
        let cx = unsafe { ctx(o.c.context) }.ok_or(libc::EINVAL)?;
        let nonblock = fd_nonblocking(o.c.fd);
        loop {
            let got = match o.ch.try_get_cq_event() {
                Some(c) => c,
                None if nonblock => return Err(libc::EAGAIN),
                // Wait driving the device's engine; a signal that interrupts
                // the wait ends it with EINTR, as rdma-core's read(2) of the
                // channel's descriptor does (qperf and other timed loops stop
                // that way; the library's threads block signals, so they
                // reach the program's).
                None => {
                    let _ = roce_host::signals::take_interrupted();
                    match o.ch.get_cq_event(Duration::from_secs(3600)) {
                        Some(c) => c,
                        None if roce_host::signals::take_interrupted() => return Err(libc::EINTR),
                        None => continue,
                    }
                }
            };
            let p = {
                let cqs = lock(&cx.cqs);
                let Some(&p) = cqs.get(&got.handle().id()) else {
                    continue; // the CQ was destroyed meanwhile
                };
                // SAFETY: p is in the context's table of CQs, which
                // ibv_destroy_cq leaves (under this lock) before it frees
                // the CQ.
                let o = unsafe { &*(p as *const CqObj) };
                let mut ev = lock(&o.events);
                if ev.dying {
                    continue; // being destroyed: its events go with it
                }
                // counted before the CQ is handed out: its destroy now
                // waits for this event's acknowledgement
                ev.delivered += 1;
                p as *mut abi::ibv_cq
            };
            // SAFETY: p cannot be freed before this event is acknowledged
            // (counted above); the out pointers are the caller's.
            unsafe {
                *cq_out = p;
                *cq_ctx = (*p).cq_context;
            }
            return Ok(0);
        }
    })
}

pub(crate) unsafe extern "C" fn ack_cq_events(c: *mut abi::ibv_cq, n: libc::c_uint) {
    guard((), || {
        // Under the table's lock: a destroy waiting for this ack frees the
        // CQ only after it has left the table, so not while we notify.
        let t = handles::lock();
        if !t.live(Kind::Cq, c) {
            diag!("ibv_ack_cq_events: {c:p} is not a live CQ (destroyed already?)");
            return;
        }
        // SAFETY: live (checked under the lock we hold).
        let o = unsafe { &*(c as *const CqObj) };
        o.cq.ack_events(n);
        let mut ev = lock(&o.events);
        ev.acked = ev.acked.saturating_add(u64::from(n)).min(ev.delivered);
        o.acked.notify_all();
        drop(ev);
        drop(t);
    })
}

// ---------------------------------------------------------------- create

fn new_cq(
    cx: &Ctx,
    cqe: libc::c_int,
    cq_context: *mut libc::c_void,
    channel: *mut abi::ibv_comp_channel,
    wc_flags: u64,
) -> Result<*mut CqObj, i32> {
    let max = cx.ctx.query_device().max_cqe;
    if cqe <= 0 || cqe as u32 > max {
        diag!("create_cq: cqe = {cqe} is outside 1..={max}");
        return Err(libc::EINVAL);
    }
    // The channel is checked live and counted under the table's lock (its
    // destroy checks the count under it), the count given back on failure.
    if !channel.is_null() {
        let t = handles::lock();
        t.expect_live(Kind::Chan, channel, "create_cq")?;
        // SAFETY: live; refcnt only under the table's lock, which we hold.
        unsafe { (*channel).refcnt += 1 };
        drop(t);
    }
    let unhold = || {
        if !channel.is_null() {
            let _t = handles::lock();
            // SAFETY: counted above, so still live; under the lock.
            unsafe { (*channel).refcnt -= 1 };
        }
    };
    let cq = if channel.is_null() {
        cx.ctx.create_cq(cqe as u32)
    } else {
        // SAFETY: live and counted (above).
        let ch = unsafe { &*(channel as *const ChanObj) };
        cx.ctx.create_cq_with_channel(cqe as u32, &ch.ch)
    }
    .map_err(|e| {
        diag!("create_cq: {e}");
        unhold();
        libc::EINVAL
    })?;
    // SAFETY: ibv_cq_ex is C data (pointers, integers, pthread objects whose
    // zero bytes are their static initializers, optional functions).
    let mut c: abi::ibv_cq_ex = unsafe { std::mem::zeroed() };
    c.context = cx.c();
    c.channel = channel;
    c.cq_context = cq_context;
    c.handle = cq.handle().id();
    c.cqe = cqe;
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_byte_len = Some(read_byte_len);
    c.read_imm_data = Some(read_imm_data);
    c.read_qp_num = Some(read_qp_num);
    c.read_src_qp = Some(read_src_qp);
    c.read_wc_flags = Some(read_wc_flags);
    c.read_slid = Some(read_slid);
    c.read_sl = Some(read_sl);
    c.read_dlid_path_bits = Some(read_dlid_path_bits);
    c.read_completion_ts = Some(read_completion_ts);
    c.read_completion_wallclock_ns = Some(read_completion_wallclock_ns);
    c.read_cvlan = Some(read_cvlan);
    c.read_flow_tag = Some(read_flow_tag);
    let handle = c.handle;
    let p = Box::into_raw(Box::new(CqObj {
        gen: crate::fork::generation(),
        c,
        cq,
        chan: channel as *mut ChanObj,
        ex: Mutex::new(ExPoll::default()),
        wc_flags,
        l3: roce_l3_type(cx.dev.cfg.addr),
        users: std::sync::atomic::AtomicUsize::new(0),
        events: Mutex::new(Events::default()),
        acked: Condvar::new(),
    }));
    lock(&cx.cqs).insert(handle, p as usize);
    handles::insert(Kind::Cq, p, cx.c());
    Ok(p)
}

pub(crate) unsafe extern "C" fn create_cq(
    c: *mut abi::ibv_context,
    cqe: libc::c_int,
    cq_context: *mut libc::c_void,
    channel: *mut abi::ibv_comp_channel,
    comp_vector: libc::c_int,
) -> *mut abi::ibv_cq {
    guard_ptr(|| {
        // SAFETY: contract of ibv_create_cq.
        let Some(cx) = (unsafe { ctx(c) }) else {
            diag!("create_cq: {c:p} is not a live context");
            return Err(libc::EINVAL);
        };
        if comp_vector < 0 || comp_vector >= cx.v.context.num_comp_vectors {
            diag!(
                "create_cq: comp_vector {comp_vector} is outside 0..{}",
                cx.v.context.num_comp_vectors
            );
            return Err(libc::EINVAL);
        }
        Ok(new_cq(cx, cqe, cq_context, channel, 0)? as *mut abi::ibv_cq)
    })
}

/// Completion fields `ibv_create_cq_ex` can provide (everything but
/// tag matching, flow tags and CVLANs, which no RoCE QP produces here).
const WC_FLAGS_SUPPORTED: u64 = (abi::IBV_WC_EX_WITH_BYTE_LEN
    | abi::IBV_WC_EX_WITH_IMM
    | abi::IBV_WC_EX_WITH_QP_NUM
    | abi::IBV_WC_EX_WITH_SRC_QP
    | abi::IBV_WC_EX_WITH_SLID
    | abi::IBV_WC_EX_WITH_SL
    | abi::IBV_WC_EX_WITH_DLID_PATH_BITS
    | abi::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    | abi::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) as u64;

pub(crate) unsafe extern "C" fn create_cq_ex(
    c: *mut abi::ibv_context,
    attr: *mut abi::ibv_cq_init_attr_ex,
) -> *mut abi::ibv_cq_ex {
    guard_ptr(|| {
        // SAFETY: contract of ibv_create_cq_ex.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        // SAFETY: attr points to the caller's ibv_cq_init_attr_ex.
        let a = unsafe { crate::util::arg_ref(attr) }?;
        if a.wc_flags & !WC_FLAGS_SUPPORTED != 0 {
            diag!("create_cq_ex: wc_flags {:#x} not supported", a.wc_flags & !WC_FLAGS_SUPPORTED);
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & !(abi::IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let cqe = libc::c_int::try_from(a.cqe).map_err(|_| libc::EINVAL)?;
        if a.comp_vector >= cx.v.context.num_comp_vectors as u32 {
            diag!(
                "create_cq_ex: comp_vector {} is outside 0..{}",
                a.comp_vector,
                cx.v.context.num_comp_vectors
            );
            return Err(libc::EINVAL);
        }
        Ok(new_cq(cx, cqe, a.cq_context, a.channel, a.wc_flags)? as *mut abi::ibv_cq_ex)
    })
}

pub(crate) unsafe extern "C" fn destroy_cq(c: *mut abi::ibv_cq) -> libc::c_int {
    guard_rc(|| {
        // 1. What can refuse, refused before anything is undone (the CQ
        //    stays usable): a stale pointer (EINVAL), QPs on it (EBUSY, as
        //    rdma-core with rxe), another destroy of it under way (EINVAL).
        let o = {
            let t = handles::lock();
            t.expect_live(Kind::Cq, c, "ibv_destroy_cq")?;
            // SAFETY: live in the table, whose lock we hold.
            let o = unsafe { &*(c as *const CqObj) };
            if o.users.load(Ordering::Acquire) > 0 {
                return Err(libc::EBUSY);
            }
            let mut ev = lock(&o.events);
            if ev.dying {
                return Err(libc::EINVAL);
            }
            // 2. From here on no event is delivered for it (get_cq_event
            //    checks this under the same lock) and no QP takes it.
            ev.dying = true;
            o
        };
        // SAFETY: the CQ's context is live while the CQ is.
        if let Some(cx) = unsafe { ctx(o.c.context) } {
            lock(&cx.cqs).remove(&o.c.handle);
        }
        // 3. Wait until the program acknowledged every event it was given
        //    for this CQ, as libibverbs' ibv_destroy_cq does (so a thread
        //    between ibv_get_cq_event and ibv_ack_cq_events never holds a
        //    freed CQ). The table is not locked: the ack takes it.
        {
            let mut ev = lock(&o.events);
            while ev.acked < ev.delivered {
                ev = o.acked.wait(ev).unwrap_or_else(|e| e.into_inner());
            }
        }
        // 4. Out of the table, then freed. An ack that still holds the
        //    table's lock finishes before the removal.
        {
            let mut t = handles::lock();
            t.remove(Kind::Cq, c);
            if !o.chan.is_null() {
                // SAFETY: the channel outlives its CQs (its destroy refuses
                // while refcnt > 0); refcnt under the table's lock.
                unsafe { (*o.chan).c.refcnt -= 1 };
            }
        }
        // Nothing refuses past here: the emulator's destroy fails only if
        // another handle to the CQ outlives a 50 ms wait (none does: QPs
        // are counted in `users`), and the CQ would then go with it.
        // SAFETY: c is the leaked box; it left the table just now and no event is outstanding, so this is its only free and its last use.
        let b = unsafe { Box::from_raw(c as *mut CqObj) };
        b.cq.destroy().map_err(|e| {
            diag!("destroy_cq: {e}");
            libc::EBUSY
        })
    })
}

pub(crate) unsafe extern "C" fn resize_cq(c: *mut abi::ibv_cq, cqe: libc::c_int) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_resize_cq.
        let o = unsafe { cq_live(c) }?;
        if cqe <= 0 {
            return Err(libc::EINVAL);
        }
        o.cq.resize(cqe as u32).map_err(|e| {
            diag!("resize_cq: {e}");
            libc::EINVAL
        })?;
        // SAFETY: the program does not resize and read cqe concurrently.
        unsafe { (*c).cqe = cqe };
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn req_notify_cq(
    c: *mut abi::ibv_cq,
    solicited_only: libc::c_int,
) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_req_notify_cq.
        let o = unsafe { cq(c) }.ok_or(libc::EINVAL)?;
        o.cq.req_notify(solicited_only != 0).map_err(|e| {
            diag!("req_notify_cq: {e}");
            libc::EINVAL
        })
    })
}

// ---------------------------------------------------------------- poll

/// `enum ibv_wc_opcode` of a completion (the same numbers).
fn wc_opcode(wc: &WorkCompletion) -> abi::ibv_wc_opcode {
    wc.opcode as u16 as abi::ibv_wc_opcode
}

fn wc_flags(wc: &WorkCompletion) -> u32 {
    let mut f = 0;
    if wc.wc_flags.contains(WcFlags::GRH) {
        f |= abi::IBV_WC_GRH;
    }
    if wc.wc_flags.contains(WcFlags::WITH_IMM) {
        f |= abi::IBV_WC_WITH_IMM;
    }
    if wc.wc_flags.contains(WcFlags::WITH_INV) {
        f |= abi::IBV_WC_WITH_INV;
    }
    f
}

/// The packet type a RoCE NIC reports in `wc.sl` of a UD receive
/// completion (mlx5's CQE, which UCX reads: 0 GRH (RoCE v1), 1 IPv6,
/// 2 IPv4). rxe leaves `sl` 0; roce-emu reports the type as mlx5 does, so
/// that UCX finds the destination address in the 40-byte GRH area (an IPv4
/// header in its last 20 bytes, an IPv6 header in all 40). A device has
/// one address, so every datagram it receives has that address family.
pub(crate) fn roce_l3_type(addr: std::net::IpAddr) -> u8 {
    match addr {
        std::net::IpAddr::V4(_) => 2,
        std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => 2,
        std::net::IpAddr::V6(_) => 1,
    }
}

/// `wc.sl` of a completion: the packet type for receives that carry a GRH
/// (UD), 0 otherwise (RoCE has no service level in the packet).
fn wc_sl(wc: &WorkCompletion, l3: u8) -> u8 {
    if wc.status == WcStatus::Success && wc.wc_flags.contains(WcFlags::GRH) {
        l3
    } else {
        0
    }
}

/// A completion as `struct ibv_wc` (immediate data in network order).
/// `l3` is the CQ's [`CqObj::l3`]. `slid` and `dlid_path_bits` are 0 (RoCE
/// has no LIDs), `pkey_index` 0 (the only P_Key), as rxe and mlx5 report.
pub(crate) fn to_wc(wc: &WorkCompletion, l3: u8) -> abi::ibv_wc {
    // SAFETY: plain C data.
    let mut w: abi::ibv_wc = unsafe { std::mem::zeroed() };
    w.wr_id = wc.wr_id;
    w.status = wc.status.code() as abi::ibv_wc_status;
    w.opcode = wc_opcode(wc);
    w.vendor_err = 0;
    w.byte_len = wc.byte_len;
    w.__bindgen_anon_1.imm_data = if wc.wc_flags.contains(WcFlags::WITH_INV) {
        wc.imm.unwrap_or(0)
    } else {
        wc.imm.unwrap_or(0).to_be()
    };
    w.qp_num = wc.qp_num;
    w.src_qp = wc.src_qp;
    w.wc_flags = wc_flags(wc);
    w.pkey_index = 0;
    w.slid = 0;
    w.sl = wc_sl(wc, l3);
    w.dlid_path_bits = 0;
    w
}

/// Completions `ibv_poll_cq` takes from the device at a time.
const POLL_CHUNK: usize = 16;

pub(crate) unsafe extern "C" fn poll_cq(
    c: *mut abi::ibv_cq,
    n: libc::c_int,
    out: *mut abi::ibv_wc,
) -> libc::c_int {
    guard(-1, || {
        // SAFETY: contract of ibv_poll_cq.
        let Some(o) = (unsafe { cq(c) }) else {
            fail(libc::EINVAL);
            return -1;
        };
        if n <= 0 {
            return 0;
        }
        if out.is_null() {
            fail(libc::EINVAL);
            return -1;
        }
        // An empty CQ lets the device's engine run one round in this
        // thread: a program spinning on ibv_poll_cq moves the frames itself.
        // (Through a small array on the stack: no allocation per poll.)
        let want = n as usize;
        let mut buf = [WorkCompletion::EMPTY; POLL_CHUNK];
        let mut done = 0;
        while done < want {
            let room = &mut buf[..(want - done).min(POLL_CHUNK)];
            let got = match done {
                0 => o.cq.poll_progress_into(room),
                _ => o.cq.poll_into(room),
            };
            match got {
                Ok(k) => {
                    for (i, wc) in room[..k].iter().enumerate() {
                        // SAFETY: the caller's array has n entries and
                        // done + k <= n.
                        unsafe { out.add(done + i).write(to_wc(wc, o.l3)) };
                    }
                    done += k;
                    if k < room.len() {
                        break;
                    }
                }
                Err(_) if done > 0 => break,
                Err(e) => {
                    diag!("poll_cq: {e}");
                    fail(libc::EINVAL);
                    return -1;
                }
            }
        }
        done as libc::c_int
    })
}

// ---------------------------------------------------------------- ibv_cq_ex

fn set_current(cx: &mut abi::ibv_cq_ex, ex: &mut ExPoll, o: &CqObj) -> libc::c_int {
    if ex.queue.is_empty() {
        match o.cq.poll_deferred(64) {
            Ok(v) => ex.queue.extend(v),
            Err(e) => {
                diag!("poll_cq: {e}");
                return libc::EINVAL;
            }
        }
    }
    match ex.queue.pop_front() {
        Some((wc, rel)) => {
            o.cq.release_sq(rel);
            cx.status = wc.status.code() as abi::ibv_wc_status;
            cx.wr_id = wc.wr_id;
            ex.cur = Some(wc);
            0
        }
        None => {
            ex.cur = None;
            libc::ENOENT
        }
    }
}

unsafe extern "C" fn start_poll(
    c: *mut abi::ibv_cq_ex,
    _attr: *mut abi::ibv_poll_cq_attr,
) -> libc::c_int {
    guard(libc::EINVAL, || {
        // SAFETY: only reachable through our CQs.
        let Some(o) = (unsafe { cq_ex(c) }) else { return fail(libc::EINVAL) };
        let mut ex = lock(&o.ex);
        // SAFETY: the program polls a CQ from one thread at a time
        // (libibverbs' rule for the extended poll); status and wr_id are
        // the fields it reads after this returns.
        match set_current(unsafe { &mut *c }, &mut ex, o) {
            // an empty CQ is no failure: errno stays
            0 => 0,
            libc::ENOENT => libc::ENOENT,
            e => fail(e),
        }
    })
}

unsafe extern "C" fn next_poll(c: *mut abi::ibv_cq_ex) -> libc::c_int {
    // SAFETY: as start_poll.
    unsafe { start_poll(c, std::ptr::null_mut()) }
}

unsafe extern "C" fn end_poll(c: *mut abi::ibv_cq_ex) {
    guard((), || {
        // SAFETY: as start_poll.
        if let Some(o) = unsafe { cq_ex(c) } {
            lock(&o.ex).cur = None;
        }
    })
}

fn with_cur<R: Default>(c: *mut abi::ibv_cq_ex, f: impl FnOnce(&WorkCompletion) -> R) -> R {
    guard(R::default(), || {
        // SAFETY: as start_poll.
        let Some(o) = (unsafe { cq_ex(c) }) else { return R::default() };
        let ex = lock(&o.ex);
        ex.cur.as_ref().map(f).unwrap_or_default()
    })
}

unsafe extern "C" fn read_opcode(c: *mut abi::ibv_cq_ex) -> abi::ibv_wc_opcode {
    with_cur(c, wc_opcode)
}
unsafe extern "C" fn read_vendor_err(c: *mut abi::ibv_cq_ex) -> u32 {
    with_cur(c, |_| 0)
}
unsafe extern "C" fn read_byte_len(c: *mut abi::ibv_cq_ex) -> u32 {
    with_cur(c, |w| w.byte_len)
}
unsafe extern "C" fn read_imm_data(c: *mut abi::ibv_cq_ex) -> abi::__be32 {
    with_cur(c, |w| w.imm.unwrap_or(0).to_be())
}
unsafe extern "C" fn read_qp_num(c: *mut abi::ibv_cq_ex) -> u32 {
    with_cur(c, |w| w.qp_num)
}
unsafe extern "C" fn read_src_qp(c: *mut abi::ibv_cq_ex) -> u32 {
    with_cur(c, |w| w.src_qp)
}
unsafe extern "C" fn read_wc_flags(c: *mut abi::ibv_cq_ex) -> libc::c_uint {
    with_cur(c, wc_flags)
}
unsafe extern "C" fn read_slid(_c: *mut abi::ibv_cq_ex) -> u32 {
    0
}
unsafe extern "C" fn read_sl(c: *mut abi::ibv_cq_ex) -> u8 {
    // SAFETY: as start_poll.
    let l3 = guard(0, || unsafe { cq_ex(c) }.map_or(0, |o| o.l3));
    with_cur(c, |w| wc_sl(w, l3))
}
unsafe extern "C" fn read_dlid_path_bits(_c: *mut abi::ibv_cq_ex) -> u8 {
    0
}
unsafe extern "C" fn read_cvlan(_c: *mut abi::ibv_cq_ex) -> u16 {
    0
}
unsafe extern "C" fn read_flow_tag(_c: *mut abi::ibv_cq_ex) -> u32 {
    0
}

fn clock_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The completion timestamp: nanoseconds of a monotonic clock taken when
/// the completion is read (the device clock of `ibv_query_rt_values`).
unsafe extern "C" fn read_completion_ts(c: *mut abi::ibv_cq_ex) -> u64 {
    with_cur(c, |_| clock_ns())
}

unsafe extern "C" fn read_completion_wallclock_ns(c: *mut abi::ibv_cq_ex) -> u64 {
    with_cur(c, |_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    })
}

/// Whether a status is an error (for callers that log).
#[allow(dead_code)]
pub(crate) fn is_error(s: WcStatus) -> bool {
    s != WcStatus::Success
}
