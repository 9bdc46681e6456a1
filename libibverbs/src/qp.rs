//! Queue pairs: create (`ibv_create_qp`, `ibv_create_qp_ex`), modify,
//! query, destroy, and the posting verbs behind `ibv_post_send` /
//! `ibv_post_recv` and `ibv_bind_mw` (the C lists are read in `wr.rs`; the
//! `ibv_wr_*` calls are in `qp_ex.rs`, above this file).

use crate::abi;
use crate::ah::{ah, ah_from_c, ah_to_c};
use crate::cq::{cq_hold, CqObj};
use crate::device::{ctx, Ctx};
use crate::handles::{self, Kind};
use crate::mr::{mw, pd_hold, pd_live, PdObj};
use crate::srq::{srq_hold, SrqObj};
use crate::util::{diag, guard_ptr, guard_rc};
use crate::wr::{inline_bytes, inline_len, post_recv_chain, report_bad, sges};
use roce_emulator::qp_attr::AttrMask;
use roce_verbs_api::{
    AccessFlags, CreateQpError, MwBind, PathMtu, PostRecvError, PostSendError, Qp, QpAttr, QpCap,
    QpState, QpType, RKey, SendFlags, SendWr, UdDest, WrOpcode,
};
use std::sync::Mutex;

/// A QP. `c` first: `ibv_qp_ex` starts with the `ibv_qp`, so the program's
/// `ibv_qp *` and `ibv_qp_ex *` are both the box's pointer.
#[repr(C)]
pub(crate) struct QpObj {
    pub c: abi::ibv_qp_ex,
    pub qp: Qp,
    pub qp_type: QpType,
    pub pd: *mut PdObj,
    pub send_cq: *mut CqObj,
    pub recv_cq: *mut CqObj,
    pub srq: *mut SrqObj,
    /// Work requests built with the `ibv_wr_*` calls since `ibv_wr_start`.
    pub wr: Mutex<WrBatch>,
    /// The QP's limits (as created): a post is checked against them before
    /// anything the program passed is read past them.
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    /// The fork generation it was made in ([`crate::fork`]): a forked
    /// child's inherited QP is refused before any of its locks is taken.
    pub gen: u32,
}

/// `send_ops_flags` roce-emu implements (the `ibv_wr_*` calls of
/// [`crate::qp_ex`]).
pub(crate) const SEND_OPS_SUPPORTED: u64 = (abi::IBV_QP_EX_WITH_RDMA_WRITE
    | abi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | abi::IBV_QP_EX_WITH_SEND
    | abi::IBV_QP_EX_WITH_SEND_WITH_IMM
    | abi::IBV_QP_EX_WITH_RDMA_READ
    | abi::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | abi::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | abi::IBV_QP_EX_WITH_LOCAL_INV
    | abi::IBV_QP_EX_WITH_BIND_MW
    | abi::IBV_QP_EX_WITH_SEND_WITH_INV
    | abi::IBV_QP_EX_WITH_ATOMIC_WRITE) as u64;

/// The requests of one `ibv_wr_start` .. `ibv_wr_complete` batch.
#[derive(Default)]
pub(crate) struct WrBatch {
    pub list: Vec<SendWr>,
    /// The first error met while building (reported by `wr_complete`).
    pub err: Option<i32>,
}

handles::c_object!(QpObj: abi::ibv_qp, Qp, generation gen; qp, qp_live);

/// The parents of a QP about to be created, checked live and counted.
struct Held<'a> {
    pd: &'a PdObj,
    scq: &'a CqObj,
    rcq: &'a CqObj,
    srq: Option<&'a SrqObj>,
}

impl Held<'_> {
    /// Give the counts back (the QP was not created).
    fn release(&self) {
        self.pd.put();
        self.scq.users.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.rcq.users.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        if let Some(s) = self.srq {
            s.users.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

/// Check the PD, CQs and SRQ of a new QP live and count the QP on them,
/// all under one hold of the table's lock (a destroy of any of them then
/// answers EBUSY until the QP goes, or the create EINVAL if it went first).
fn hold_parents<'a>(p: *mut abi::ibv_pd, init: &Init) -> Result<Held<'a>, i32> {
    let t = handles::lock();
    let pd = pd_hold(&t, p)?;
    let scq = match cq_hold(&t, init.send_cq) {
        Ok(c) => c,
        Err(e) => {
            pd.put();
            return Err(e);
        }
    };
    let rcq = match cq_hold(&t, init.recv_cq) {
        Ok(c) => c,
        Err(e) => {
            pd.put();
            scq.users.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            return Err(e);
        }
    };
    let srq = if init.srq.is_null() {
        None
    } else {
        match srq_hold(&t, init.srq) {
            Ok(s) => Some(s),
            Err(e) => {
                Held { pd, scq, rcq, srq: None }.release();
                return Err(e);
            }
        }
    };
    Ok(Held { pd, scq, rcq, srq })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn state_from_c(s: abi::ibv_qp_state) -> Result<QpState, i32> {
    Ok(match s {
        abi::IBV_QPS_RESET => QpState::Reset,
        abi::IBV_QPS_INIT => QpState::Init,
        abi::IBV_QPS_RTR => QpState::Rtr,
        abi::IBV_QPS_RTS => QpState::Rts,
        abi::IBV_QPS_SQD => QpState::Sqd,
        abi::IBV_QPS_SQE => QpState::Sqe,
        abi::IBV_QPS_ERR => QpState::Err,
        _ => return Err(libc::EINVAL),
    })
}

pub(crate) fn state_to_c(s: QpState) -> abi::ibv_qp_state {
    match s {
        QpState::Reset => abi::IBV_QPS_RESET,
        QpState::Init => abi::IBV_QPS_INIT,
        QpState::Rtr => abi::IBV_QPS_RTR,
        QpState::Rts => abi::IBV_QPS_RTS,
        QpState::Sqd => abi::IBV_QPS_SQD,
        QpState::Sqe => abi::IBV_QPS_SQE,
        QpState::Err => abi::IBV_QPS_ERR,
    }
}

fn type_from_c(t: abi::ibv_qp_type) -> Result<QpType, i32> {
    match t {
        abi::IBV_QPT_RC => Ok(QpType::Rc),
        abi::IBV_QPT_UC => Ok(QpType::Uc),
        abi::IBV_QPT_UD => Ok(QpType::Ud),
        abi::IBV_QPT_XRC_SEND => Ok(QpType::XrcSend),
        _ => {
            diag!("create_qp: QP type {t} not supported (RC, UC, UD, XRC_SEND and XRC_RECV are)");
            Err(libc::EOPNOTSUPP)
        }
    }
}

fn type_to_c(t: QpType) -> abi::ibv_qp_type {
    match t {
        QpType::Rc => abi::IBV_QPT_RC,
        QpType::Uc => abi::IBV_QPT_UC,
        QpType::Ud => abi::IBV_QPT_UD,
        QpType::XrcSend => abi::IBV_QPT_XRC_SEND,
        QpType::XrcRecv => abi::IBV_QPT_XRC_RECV,
    }
}

fn mtu_from_c(m: abi::ibv_mtu) -> Result<PathMtu, i32> {
    Ok(match m {
        abi::IBV_MTU_256 => PathMtu::Mtu256,
        abi::IBV_MTU_512 => PathMtu::Mtu512,
        abi::IBV_MTU_1024 => PathMtu::Mtu1024,
        abi::IBV_MTU_2048 => PathMtu::Mtu2048,
        abi::IBV_MTU_4096 => PathMtu::Mtu4096,
        _ => return Err(libc::EINVAL),
    })
}

fn create_err(e: CreateQpError) -> i32 {
    diag!("create_qp: {e}");
    libc::EINVAL
}

/// The send queue's SGE and inline limits as rxe sizes them: a send WQE
/// holds `max(max_send_sge * 16, max_inline_data)` bytes, and both limits
/// are what fits in it (so a QP asking for no inline data still takes 16
/// inline bytes per SGE, and one asking for 128 inline bytes takes 8 SGEs).
/// Requests above the device's limits are passed on unchanged for the
/// device to refuse (EINVAL, as rxe does).
pub(crate) fn send_wqe_caps(sge: u32, inline: u32, max_sge: u32, max_inline: u32) -> (u32, u32) {
    const SGE_BYTES: u32 = 16; // sizeof(struct ibv_sge)
    if sge > max_sge || inline > max_inline {
        return (sge, inline);
    }
    let wqe = sge.saturating_mul(SGE_BYTES).max(inline);
    ((wqe / SGE_BYTES).min(max_sge).max(sge), wqe.min(max_inline).max(inline))
}

/// What a QP is created from: the basic attributes (of `ibv_create_qp`,
/// or taken from an `ibv_qp_init_attr_ex` by [`init_attr_of`]).
type Init = abi::ibv_qp_init_attr;

/// The basic attributes of an extended one (`ibv_create_qp_ex`,
/// `rdma_create_qp_ex`).
pub(crate) fn init_attr_of(a: &abi::ibv_qp_init_attr_ex) -> abi::ibv_qp_init_attr {
    abi::ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    }
}

fn new_qp(
    cx: &Ctx,
    p: *mut abi::ibv_pd,
    init: &Init,
) -> Result<(*mut QpObj, abi::ibv_qp_cap), i32> {
    let mut own;
    let mut init = init;
    if init.qp_type == abi::IBV_QPT_XRC_SEND && init.recv_cq.is_null() {
        // an initiator receives nothing: its receive CQ is its send CQ
        // (`ibv_create_qp_ex` with only IBV_QP_INIT_ATTR_PD comes here
        // through `ibv_create_qp`)
        own = *init;
        own.recv_cq = own.send_cq;
        init = &own;
    }
    let held = hold_parents(p, init)?;
    let r = build_qp(cx, p, init, &held);
    if r.is_err() {
        held.release();
    }
    r
}

/// A new QP on parents checked live and counted ([`hold_parents`]).
fn build_qp(
    cx: &Ctx,
    p: *mut abi::ibv_pd,
    init: &Init,
    held: &Held<'_>,
) -> Result<(*mut QpObj, abi::ibv_qp_cap), i32> {
    let (po, scq, rcq, so) = (held.pd, held.scq, held.rcq, held.srq);
    let t = type_from_c(init.qp_type)?;
    let c = init.cap;
    let dev = cx.ctx.query_device();
    let (max_send_sge, max_inline_data) =
        send_wqe_caps(c.max_send_sge.max(1), c.max_inline_data, dev.max_sge, dev.max_inline_data);
    // (an XRC initiator has no receive queue)
    let no_rq = so.is_some() || t == QpType::XrcSend;
    let cap = QpCap {
        max_send_wr: c.max_send_wr.max(1),
        max_recv_wr: if no_rq { 0 } else { c.max_recv_wr.max(1) },
        max_send_sge,
        max_recv_sge: if no_rq { 0 } else { c.max_recv_sge.max(1) },
        max_inline_data,
    };
    let mut b =
        po.pd.qp_builder(&scq.cq, &rcq.cq).qp_type(t).cap(cap).sq_sig_all(init.sq_sig_all != 0);
    if let Some(s) = so {
        b = b.srq(&s.srq);
    }
    let q = b.build().map_err(create_err)?;
    let actual = q.query().map(|(_, i)| i.cap).unwrap_or(cap);
    // SAFETY: ibv_qp_ex is C data (pointers, integers, pthread objects
    // whose zero bytes are their initializers, optional functions).
    let mut x: abi::ibv_qp_ex = unsafe { std::mem::zeroed() };
    let base = &mut x.qp_base;
    base.context = cx.c();
    base.qp_context = init.qp_context;
    base.pd = p;
    base.send_cq = init.send_cq;
    base.recv_cq = init.recv_cq;
    base.srq = init.srq;
    base.handle = q.qpn().value();
    base.qp_num = q.qpn().value();
    base.state = abi::IBV_QPS_RESET;
    base.qp_type = init.qp_type;
    // the `ibv_wr_*` table (qp_ex.rs, above this file), from the context
    (cx.fill_qp_ex)(&mut x);
    let qpn = q.qpn().value();
    let obj = Box::new(QpObj {
        gen: crate::fork::generation(),
        c: x,
        qp: q,
        qp_type: t,
        pd: p as *mut PdObj,
        send_cq: init.send_cq as *mut CqObj,
        recv_cq: init.recv_cq as *mut CqObj,
        srq: init.srq as *mut SrqObj,
        wr: Mutex::new(Default::default()),
        max_send_sge: actual.max_send_sge,
        max_recv_sge: actual.max_recv_sge,
        max_inline_data: actual.max_inline_data,
    });
    let ptr = Box::into_raw(obj);
    lock(&cx.qps).insert(qpn, ptr as usize);
    handles::insert(Kind::Qp, ptr, cx.c());
    Ok((ptr, cap_to_c(&actual)))
}

pub(crate) unsafe extern "C" fn create_qp(
    p: *mut abi::ibv_pd,
    attr: *mut abi::ibv_qp_init_attr,
) -> *mut abi::ibv_qp {
    guard_ptr(|| {
        // SAFETY: contract of ibv_create_qp (checked live; held for the
        // creation by new_qp).
        let po = unsafe { pd_live(p) }?;
        // SAFETY: the PD's context is live.
        let cx = unsafe { ctx(po.c.context) }.ok_or(libc::EINVAL)?;
        // SAFETY: attr points to the caller's ibv_qp_init_attr.
        let a = unsafe { crate::util::arg_mut(attr) }?;
        let (q, cap) = new_qp(cx, p, a)?;
        a.cap = cap;
        Ok(q as *mut abi::ibv_qp)
    })
}

pub(crate) unsafe extern "C" fn create_qp_ex(
    c: *mut abi::ibv_context,
    attr: *mut abi::ibv_qp_init_attr_ex,
) -> *mut abi::ibv_qp {
    guard_ptr(|| {
        // SAFETY: contract of ibv_create_qp_ex.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        // SAFETY: attr points to the caller's ibv_qp_init_attr_ex.
        let a = unsafe { crate::util::arg_mut(attr) }?;
        if a.qp_type == abi::IBV_QPT_XRC_RECV {
            return xrc_target(cx, a);
        }
        let mut known = abi::IBV_QP_INIT_ATTR_PD | abi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        // fields that are accepted when they ask for nothing
        if a.create_flags == 0 {
            known |= abi::IBV_QP_INIT_ATTR_CREATE_FLAGS;
        }
        if a.max_tso_header == 0 {
            known |= abi::IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
        }
        if a.xrcd.is_null() {
            known |= abi::IBV_QP_INIT_ATTR_XRCD;
        }
        if a.comp_mask & abi::IBV_QP_INIT_ATTR_PD == 0 {
            return Err(libc::EINVAL);
        }
        if a.comp_mask & !known != 0 {
            diag!("create_qp_ex: comp_mask {:#x} not supported", a.comp_mask & !known);
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & abi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0
            && a.send_ops_flags & !SEND_OPS_SUPPORTED != 0
        {
            diag!("create_qp_ex: send_ops_flags {:#x} not supported", a.send_ops_flags);
            return Err(libc::EOPNOTSUPP);
        }
        let (q, cap) = new_qp(cx, a.pd, &init_attr_of(a))?;
        a.cap = cap;
        Ok(q as *mut abi::ibv_qp)
    })
}

/// An XRC target QP (`IBV_QPT_XRC_RECV`, see [`crate::xrc`]): no PD, CQ
/// or receive queue; the C QP's `pd`, CQs and SRQ are NULL.
fn xrc_target(cx: &Ctx, a: &mut abi::ibv_qp_init_attr_ex) -> Result<*mut abi::ibv_qp, i32> {
    let known = abi::IBV_QP_INIT_ATTR_XRCD
        | abi::IBV_QP_INIT_ATTR_PD
        | abi::IBV_QP_INIT_ATTR_CREATE_FLAGS
        | abi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & !known != 0 || a.create_flags != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let (q, _xrcd) = crate::xrc::tgt_qp(cx, a)?;
    let qpn = q.qpn().value();
    let ptr = target_handle(cx, q, qpn, a.qp_context);
    lock(&cx.qps).insert(qpn, ptr as usize);
    a.cap = abi::ibv_qp_cap {
        max_send_wr: 0,
        max_recv_wr: 0,
        max_send_sge: 0,
        max_recv_sge: 0,
        max_inline_data: 0,
    };
    Ok(ptr as *mut abi::ibv_qp)
}

/// A C handle on the XRC target `q`, numbered `qp_num` (another process's
/// target QP opened here has a placeholder `q` of its own: see [`open_qp`]).
fn target_handle(cx: &Ctx, q: Qp, qp_num: u32, qp_context: *mut libc::c_void) -> *mut QpObj {
    // SAFETY: ibv_qp_ex is C data (see build_qp).
    let mut x: abi::ibv_qp_ex = unsafe { std::mem::zeroed() };
    let base = &mut x.qp_base;
    base.context = cx.c();
    base.qp_context = qp_context;
    base.handle = qp_num;
    base.qp_num = qp_num;
    base.state = abi::IBV_QPS_RESET;
    base.qp_type = abi::IBV_QPT_XRC_RECV;
    (cx.fill_qp_ex)(&mut x);
    let obj = Box::new(QpObj {
        gen: crate::fork::generation(),
        c: x,
        qp: q,
        qp_type: QpType::XrcRecv,
        pd: std::ptr::null_mut(),
        send_cq: std::ptr::null_mut(),
        recv_cq: std::ptr::null_mut(),
        srq: std::ptr::null_mut(),
        wr: Mutex::new(Default::default()),
        max_send_sge: 0,
        max_recv_sge: 0,
        max_inline_data: 0,
    });
    let ptr = Box::into_raw(obj);
    handles::insert(Kind::Qp, ptr, cx.c());
    ptr
}

/// Whether `o` is a handle on another process's XRC target QP
/// ([`open_qp`]): its number is not its placeholder's.
fn opened_elsewhere(o: &QpObj) -> bool {
    o.c.qp_base.qp_num != o.qp.qpn().value()
}

/// `ibv_open_qp`: another handle on the XRC target QP `qp_num` of the
/// domain `xrcd` (`IBV_QP_OPEN_ATTR_NUM`, `_XRCD` and `_TYPE` with
/// `IBV_QPT_XRC_RECV`; `_CONTEXT` optional), as the kernel gives one to
/// any process with the domain. The QP lives until its last handle is
/// destroyed. A target QP of this process is shared by the handles; one of
/// another process of a shared device (its number carries that member's
/// slot, and the domain was opened by a file) gets a handle here that
/// holds the domain, receives nothing itself, and refuses
/// `ibv_modify_qp`/`ibv_query_qp` (EOPNOTSUPP: the QP's state is in the
/// other process). Anything else is EINVAL, as the kernel answers a number
/// that is no target QP of the domain.
pub(crate) unsafe extern "C" fn open_qp(
    c: *mut abi::ibv_context,
    attr: *mut abi::ibv_qp_open_attr,
) -> *mut abi::ibv_qp {
    guard_ptr(|| {
        // SAFETY: contract of ibv_open_qp.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        // SAFETY: the caller's ibv_qp_open_attr.
        let a = unsafe { crate::util::arg_ref(attr) }?;
        let need =
            abi::IBV_QP_OPEN_ATTR_NUM | abi::IBV_QP_OPEN_ATTR_XRCD | abi::IBV_QP_OPEN_ATTR_TYPE;
        if a.comp_mask & need != need
            || a.comp_mask & !(need | abi::IBV_QP_OPEN_ATTR_CONTEXT) != 0
            || a.qp_type != abi::IBV_QPT_XRC_RECV
            || a.xrcd.is_null()
        {
            diag!("ibv_open_qp: needs the QP number, an XRCD and IBV_QPT_XRC_RECV");
            return Err(libc::EINVAL);
        }
        let qp_context = match a.comp_mask & abi::IBV_QP_OPEN_ATTR_CONTEXT {
            0 => std::ptr::null_mut(),
            _ => a.qp_context,
        };
        // SAFETY: checked live.
        let xo = unsafe { crate::xrc::xrcd_live_pub(a.xrcd) }?;
        if xo.c.context != c {
            return Err(libc::EINVAL);
        }
        let domain = xo.xrcd.handle();
        let qpn = a.qp_num & 0x00FF_FFFF;
        let here = {
            let t = lock(&cx.qps);
            match t.get(&qpn) {
                Some(&p) => {
                    // SAFETY: the table holds live QPs of this context: a
                    // destroy takes its QP out of it (under this lock)
                    // before it frees it, and the handle is cloned here.
                    let o = unsafe { qp(p as *mut abi::ibv_qp) }.ok_or(libc::EINVAL)?;
                    Some((o.qp_type, o.qp.clone()))
                }
                None => None,
            }
        };
        if let Some((qp_type, q)) = here {
            if qp_type != QpType::XrcRecv || q.xrcd().map(|x| x.handle()) != Some(domain) {
                diag!("ibv_open_qp: QP {qpn:#x} is no XRC target of the domain");
                return Err(libc::EINVAL);
            }
            let ptr = target_handle(cx, q, qpn, qp_context);
            return Ok(ptr as *mut abi::ibv_qp);
        }
        let me = cx.ctx.member_slot();
        let theirs = me.is_some_and(|m| (qpn >> 16) as u8 != m);
        if !theirs || !xo.shared_by_file() {
            diag!("ibv_open_qp: no XRC target QP {qpn:#x} in the domain");
            return Err(libc::EINVAL);
        }
        let q = xo.xrcd.create_tgt_qp().map_err(|e| {
            diag!("ibv_open_qp: {e}");
            libc::ENOMEM
        })?;
        let ptr = target_handle(cx, q, qpn, qp_context);
        Ok(ptr as *mut abi::ibv_qp)
    })
}

pub(crate) unsafe extern "C" fn qp_to_qp_ex(q: *mut abi::ibv_qp) -> *mut abi::ibv_qp_ex {
    q as *mut abi::ibv_qp_ex
}

/// `ibv_attach_mcast` (`attach`) and `ibv_detach_mcast`: the GID is the
/// group's (on RoCE the LID is unused, as in the kernel). Errors as the
/// kernel's: EINVAL for a QP that is not UD, a GID that is not multicast,
/// a detach of a group the QP is not in; ENOMEM over the device's limits.
///
/// # Safety
/// `q` is NULL or a QP pointer the program passes (checked live here), and
/// `gid` is NULL or points to a readable 16-byte `ibv_gid`.
pub(crate) unsafe fn mcast(
    q: *mut abi::ibv_qp,
    gid: *const abi::ibv_gid,
    _lid: u16,
    attach: bool,
) -> libc::c_int {
    let verb = if attach { "ibv_attach_mcast" } else { "ibv_detach_mcast" };
    guard_rc(|| {
        // SAFETY: contract of ibv_attach_mcast / ibv_detach_mcast.
        let o = unsafe { qp_live(q) }?;
        if gid.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: gid points to the caller's 16-byte ibv_gid (checked not
        // NULL); every bit pattern is a valid `raw`.
        let raw = unsafe { (*gid).raw };
        let g = std::net::IpAddr::V6(std::net::Ipv6Addr::from(raw));
        let r = match attach {
            true => o.qp.attach_mcast(g).map_err(|e| {
                diag!("{verb}: {e}");
                e.errno()
            }),
            false => o.qp.detach_mcast(g).map_err(|e| {
                diag!("{verb}: {e}");
                e.errno()
            }),
        };
        r
    })
}

pub(crate) unsafe extern "C" fn destroy_qp(q: *mut abi::ibv_qp) -> libc::c_int {
    guard_rc(|| {
        // (the kernel's ib_destroy_qp: a QP still attached to a multicast
        // group is busy)
        // SAFETY: contract of ibv_destroy_qp (checked live first).
        if let Ok(o) = unsafe { qp_live(q) } {
            let groups = o.qp.mcast_groups();
            if !groups.is_empty() {
                diag!("ibv_destroy_qp: QP {} is attached to {groups:?}: EBUSY", o.qp.qpn());
                return Err(libc::EBUSY);
            }
        }
        // Nothing refuses a QP's destroy: out of the table at once (of two
        // racing destroys one wins, the other gets EINVAL), then freed.
        handles::lock().take(Kind::Qp, q, "ibv_destroy_qp")?;
        // SAFETY: q was live until just now and only this call frees it.
        let o = unsafe { qp(q) }.ok_or(libc::EINVAL)?;
        // SAFETY: the QP's context is live while the QP is.
        if let Some(cx) = unsafe { ctx(o.c.qp_base.context) } {
            // (only its own entry: an XRC target's other handles are not there)
            let mut t = lock(&cx.qps);
            if t.get(&o.c.qp_base.qp_num) == Some(&(q as usize)) {
                t.remove(&o.c.qp_base.qp_num);
            }
        }
        // SAFETY: q is the leaked box; it left the table above, so this is
        // its only free.
        let b = unsafe { Box::from_raw(q as *mut QpObj) };
        // SAFETY: the PD, CQs and SRQ outlive the QP (their destroy
        // refuses while it exists).
        unsafe {
            if let Some(p) = b.pd.as_ref() {
                p.put();
            }
            for c in [b.send_cq, b.recv_cq] {
                if let Some(c) = c.as_ref() {
                    c.users.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                }
            }
            if let Some(s) = b.srq.as_ref() {
                s.users.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            }
        }
        match b.qp.destroy() {
            // an XRC target lives on while another handle has it (ibv_open_qp)
            Err(roce_verbs_api::DestroyError::Shared { .. }) if b.qp_type == QpType::XrcRecv => {
                Ok(())
            }
            r => r.map_err(|e| {
                diag!("destroy_qp: {e}");
                libc::EBUSY
            }),
        }
    })
}

// ---------------------------------------------------------------- modify / query

/// Copy the `ibv_qp_attr` fields that [`QpAttr`] holds under the same
/// name and type, from `$src` to `$dst` (either way round): modify reads
/// them from C, query and `rdma_init_qp_attr` write them to C.
macro_rules! same_qp_attr_fields {
    ($dst:expr, $src:expr) => {{
        let (d, s) = (&mut $dst, &$src);
        d.pkey_index = s.pkey_index;
        d.port_num = s.port_num;
        d.qkey = s.qkey;
        d.timeout = s.timeout;
        d.retry_cnt = s.retry_cnt;
        d.rnr_retry = s.rnr_retry;
        d.rq_psn = s.rq_psn;
        d.sq_psn = s.sq_psn;
        d.max_rd_atomic = s.max_rd_atomic;
        d.max_dest_rd_atomic = s.max_dest_rd_atomic;
        d.min_rnr_timer = s.min_rnr_timer;
        d.dest_qp_num = s.dest_qp_num;
    }};
}

/// `a` as an `ibv_qp_attr`: its state (`state` when it has none), access,
/// address vector, path MTU (0 when unset) and the fields of the same
/// name; everything else zero.
pub(crate) fn attr_to_c(a: &QpAttr, state: QpState) -> abi::ibv_qp_attr {
    // SAFETY: plain C data.
    let mut c: abi::ibv_qp_attr = unsafe { std::mem::zeroed() };
    c.qp_state = state_to_c(a.qp_state.unwrap_or(state));
    c.qp_access_flags = a.qp_access_flags.0;
    if let Some(ah) = &a.ah_attr {
        c.ah_attr = ah_to_c(ah);
    }
    c.path_mtu = a.path_mtu.map_or(0, |m| m as u32);
    same_qp_attr_fields!(c, a);
    c
}

fn cap_from_c(c: &abi::ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

fn cap_to_c(c: &QpCap) -> abi::ibv_qp_cap {
    abi::ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

pub(crate) unsafe extern "C" fn modify_qp(
    q: *mut abi::ibv_qp,
    attr: *mut abi::ibv_qp_attr,
    mask: libc::c_int,
) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_modify_qp.
        let o = unsafe { qp_live(q) }?;
        if opened_elsewhere(o) {
            diag!("ibv_modify_qp: QP {:#x} is another process's (ibv_open_qp)", o.c.qp_base.qp_num);
            return Err(libc::EOPNOTSUPP);
        }
        // SAFETY: attr points to the caller's ibv_qp_attr.
        let c = unsafe { crate::util::arg_ref(attr) }?;
        let mask = mask as u32;
        let mut a = QpAttr { mask: AttrMask(mask), ..QpAttr::default() };
        if mask & abi::IBV_QP_STATE != 0 {
            a.qp_state = Some(state_from_c(c.qp_state)?);
        }
        if mask & abi::IBV_QP_CUR_STATE != 0 {
            a.cur_qp_state = Some(state_from_c(c.cur_qp_state)?);
        }
        a.en_sqd_async_notify = c.en_sqd_async_notify != 0;
        a.qp_access_flags = AccessFlags(c.qp_access_flags);
        same_qp_attr_fields!(a, c);
        if mask & abi::IBV_QP_AV != 0 {
            if o.qp_type != QpType::Ud && c.ah_attr.is_global == 0 {
                // RoCE addresses by GID: without a GRH there is no
                // destination (the kernel answers EINVAL the same way).
                diag!("modify_qp: RoCE needs ah_attr.is_global = 1 and a GID (use -g with the rdma-core tools)");
                return Err(libc::EINVAL);
            }
            a.ah_attr = Some(ah_from_c(&c.ah_attr)?);
        }
        if mask & abi::IBV_QP_PATH_MTU != 0 {
            a.path_mtu = Some(mtu_from_c(c.path_mtu)?);
        }
        a.cap = cap_from_c(&c.cap);
        o.qp.modify(&a).map_err(|e| {
            diag!("modify_qp: {e}");
            libc::EINVAL
        })?;
        // SAFETY: the program does not modify a QP from two threads at once
        // (libibverbs keeps qp->state the same way, unlocked).
        unsafe { (*q).state = state_to_c(o.qp.state()) };
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn query_qp(
    q: *mut abi::ibv_qp,
    attr: *mut abi::ibv_qp_attr,
    _mask: libc::c_int,
    init: *mut abi::ibv_qp_init_attr,
) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_query_qp.
        let o = unsafe { qp_live(q) }?;
        if opened_elsewhere(o) {
            diag!("ibv_query_qp: QP {:#x} is another process's (ibv_open_qp)", o.c.qp_base.qp_num);
            return Err(libc::EOPNOTSUPP);
        }
        if attr.is_null() || init.is_null() {
            return Err(libc::EINVAL);
        }
        let (a, i) = o.qp.query().map_err(|_| libc::EINVAL)?;
        let mut c = attr_to_c(&a, QpState::Reset);
        let st = c.qp_state;
        c.cur_qp_state = st;
        c.path_mtu = a.path_mtu.map_or(abi::IBV_MTU_1024, |m| m as u32);
        c.path_mig_state = abi::IBV_MIG_MIGRATED;
        let cap = cap_to_c(&i.cap);
        c.cap = cap;
        c.en_sqd_async_notify = u8::from(a.en_sqd_async_notify);
        c.sq_draining = 0;
        c.port_num = 1;
        // SAFETY: attr and init are the caller's structs.
        unsafe {
            attr.write(c);
            let b = &(*q);
            init.write(abi::ibv_qp_init_attr {
                qp_context: b.qp_context,
                send_cq: b.send_cq,
                recv_cq: b.recv_cq,
                srq: b.srq,
                cap,
                qp_type: type_to_c(o.qp_type),
                sq_sig_all: libc::c_int::from(i.sq_sig_all),
            });
            (*q).state = st;
        }
        Ok(())
    })
}

// ---------------------------------------------------------------- posting

pub(crate) fn post_send_err(e: &PostSendError) -> i32 {
    diag!("post_send: {e}");
    match e {
        PostSendError::QueueFull { .. } => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}

fn post_recv_err(e: &PostRecvError) -> i32 {
    diag!("post_recv: {e}");
    match e {
        PostRecvError::QueueFull { .. } => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}

/// One C send work request as the emulator's.
///
/// # Safety
/// `w` must be a valid `ibv_send_wr` of the program.
unsafe fn send_wr(o: &QpObj, w: &abi::ibv_send_wr) -> Result<SendWr, i32> {
    // SAFETY: per the contract (sg_list has num_sge entries).
    let list = unsafe { sges(w.sg_list, w.num_sge, o.max_send_sge) }?;
    // SAFETY: reading the union member the opcode selects.
    let (imm, inv) =
        unsafe { (u32::from_be(w.__bindgen_anon_1.imm_data), w.__bindgen_anon_1.invalidate_rkey) };
    // SAFETY: each union is read as the opcode's member.
    let (rdma, atomic, ud) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let opcode = match w.opcode {
        abi::IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite,
        abi::IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm,
        abi::IBV_WR_SEND => WrOpcode::Send,
        abi::IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm,
        abi::IBV_WR_RDMA_READ => WrOpcode::RdmaRead,
        abi::IBV_WR_ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCmpAndSwp,
        abi::IBV_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFetchAndAdd,
        abi::IBV_WR_SEND_WITH_INV => WrOpcode::SendWithInv { invalidate_rkey: RKey::new(inv) },
        abi::IBV_WR_LOCAL_INV => WrOpcode::LocalInv { rkey: RKey::new(inv) },
        abi::IBV_WR_ATOMIC_WRITE => WrOpcode::AtomicWrite,
        abi::IBV_WR_BIND_MW => {
            // SAFETY: the bind_mw member for IBV_WR_BIND_MW.
            let b = unsafe { w.__bindgen_anon_2.bind_mw };
            // SAFETY: the program passes one of our windows.
            let m = unsafe { mw(b.mw) }.ok_or(libc::EINVAL)?;
            let bind = mw_bind_of(&b.bind_info)?;
            WrOpcode::BindMw { mw: m.mw.handle(), rkey: RKey::new(b.rkey), bind }
        }
        other => {
            diag!("post_send: opcode {other} not supported");
            return Err(libc::EINVAL);
        }
    };
    let flags = SendFlags(w.send_flags & 0xf);
    let mut wr = SendWr::new(w.wr_id, opcode).with_flags(flags);
    wr.imm = imm;
    if flags.contains(SendFlags::INLINE) && !opcode.is_read_or_atomic() {
        inline_len(&list, o.max_inline_data)?;
        // SAFETY: inline SGEs name the program's readable buffers (their
        // total within the QP's limit, checked above).
        wr.inline_data = unsafe { inline_bytes(&list) };
    } else {
        wr.sg_list = list;
    }
    if opcode.is_atomic() {
        wr.remote_addr = atomic.remote_addr;
        wr.rkey = RKey::new(atomic.rkey);
        wr.compare_add = atomic.compare_add;
        wr.swap = atomic.swap;
    } else {
        wr.remote_addr = rdma.remote_addr;
        wr.rkey = RKey::new(rdma.rkey);
    }
    if o.qp_type == QpType::Ud {
        // SAFETY: the program passes one of our AHs.
        let a = unsafe { ah(ud.ah) }.ok_or(libc::EINVAL)?;
        wr.ud = Some(UdDest { ah: a.attr, remote_qpn: ud.remote_qpn, remote_qkey: ud.remote_qkey });
    }
    if o.qp_type == QpType::XrcSend {
        // SAFETY: the xrc member, for an XRC initiator.
        wr.xrc_remote_srqn = unsafe { w.qp_type.xrc.remote_srqn };
    }
    Ok(wr)
}

/// A window bind's region, range and rights.
pub(crate) fn mw_bind_of(info: &abi::ibv_mw_bind_info) -> Result<MwBind, i32> {
    // SAFETY: the program passes one of our MRs.
    let r = unsafe { crate::mr::mr(info.mr) }.ok_or(libc::EINVAL)?;
    let g = r.mr.lock().unwrap_or_else(|e| e.into_inner());
    let m = g.as_ref().ok_or(libc::EINVAL)?;
    Ok(m.mw_bind(info.addr.wrapping_sub(m.addr()), info.length, AccessFlags(info.mw_access_flags)))
}

pub(crate) unsafe extern "C" fn post_send(
    q: *mut abi::ibv_qp,
    wr: *mut abi::ibv_send_wr,
    bad: *mut *mut abi::ibv_send_wr,
) -> libc::c_int {
    crate::util::guard_errno(|| {
        // SAFETY: contract of ibv_post_send.
        let Some(o) = (unsafe { qp(q) }) else { return libc::EINVAL };
        // each WR is posted as it is read (no list: nothing allocated per
        // call), the driver kicked once after the last
        let mut n = 0usize;
        let mut failed = None;
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: the chain is the program's ibv_send_wr list.
            let w = unsafe { &*cur };
            // SAFETY: as above.
            let r = unsafe { send_wr(o, w) }
                .and_then(|x| o.qp.post_send_deferred(x).map_err(|e| post_send_err(&e)));
            if let Err(e) = r {
                failed = Some((cur, e));
                break;
            }
            n += 1;
            cur = w.next;
        }
        if n > 0 {
            o.qp.doorbell();
        }
        // SAFETY: bad is the caller's out pointer.
        unsafe { report_bad(bad, failed) }
    })
}

pub(crate) unsafe extern "C" fn post_recv(
    q: *mut abi::ibv_qp,
    wr: *mut abi::ibv_recv_wr,
    bad: *mut *mut abi::ibv_recv_wr,
) -> libc::c_int {
    crate::util::guard_errno(|| {
        // SAFETY: contract of ibv_post_recv.
        let Some(o) = (unsafe { qp(q) }) else { return libc::EINVAL };
        // SAFETY: the program's chain and out pointer.
        unsafe {
            post_recv_chain(wr, bad, o.max_recv_sge, |w| {
                o.qp.post_recv(w).map_err(|e| post_recv_err(&e))
            })
        }
    })
}

/// `ibv_bind_mw`: a type 1 window bound through the QP's send queue.
pub(crate) unsafe extern "C" fn bind_mw(
    q: *mut abi::ibv_qp,
    m: *mut abi::ibv_mw,
    bind: *mut abi::ibv_mw_bind,
) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_bind_mw.
        let qo = unsafe { qp(q) }.ok_or(libc::EINVAL)?;
        // SAFETY: as above.
        let w = unsafe { mw(m) }.ok_or(libc::EINVAL)?;
        // SAFETY: bind points to a caller-owned ibv_mw_bind.
        let b = unsafe { crate::util::arg_ref(bind) }?;
        let info = &b.bind_info;
        // SAFETY: contract: bind_info.mr is one of our MRs (or NULL for an
        // unbind, which libibverbs expresses with length 0).
        let region = unsafe { crate::mr::mr(info.mr) }.ok_or(libc::EINVAL)?;
        let guard = region.mr.lock().unwrap_or_else(|e| e.into_inner());
        let r = guard.as_ref().ok_or(libc::EINVAL)?;
        let off = info.addr.wrapping_sub(r.addr());
        let bindspec = r.mw_bind(off, info.length, AccessFlags(info.mw_access_flags));
        let rkey =
            qo.qp.bind_mw(&w.mw, b.wr_id, SendFlags(b.send_flags), bindspec).map_err(|e| {
                diag!("bind_mw: {e}");
                libc::EINVAL
            })?;
        // SAFETY: the program does not use the MW struct concurrently.
        unsafe { (*m).rkey = rkey.value() };
        Ok(())
    })
}
