//! Every symbol rdma-core 44's `librdmacm.so.1` exports, placed in its
//! version (RDMACM_1.0 .. RDMACM_1.3) by `libibverbs.map`. The rsocket
//! calls (`rsocket`, `rsend`, ...) come from the `roce-rdmacm` crate, linked
//! in by `lib.rs`.

use super::abi::{
    self as cm, rdma_addrinfo, rdma_cm_event, rdma_cm_id, rdma_conn_param, rdma_event_channel,
};
use super::{
    bind, complete_sync, conn_param, destroy_channel, destroy_id, dev_pd, get_event, id, listen,
    lock, new_channel, new_id, ps_of, push_local, resolve_addr, sockaddr_in, ChanObj, EventObj,
    IdObj,
};
use crate::abi as v;
use crate::util::{diag, guard, guard_neg, guard_ptr};
use libc::{c_char, c_int, c_void, size_t, sockaddr, socklen_t};
use roce_verbs_api::rdma_cm::{CmError, CmEventKind, PortSpace};
use std::ptr;

fn cm_err(e: CmError) -> i32 {
    diag!("rdma_cm: {e}");
    e.errno()
}

fn idobj<'a>(p: *mut rdma_cm_id) -> Result<&'a IdObj, i32> {
    // SAFETY: the program passes an id of this library.
    unsafe { id(p) }.ok_or(libc::EINVAL)
}

fn rust(o: &IdObj) -> Result<roce_verbs_api::rdma_cm::CmId, i32> {
    o.rust().ok_or(libc::EINVAL)
}

// ---------------------------------------------------------------- channels

#[no_mangle]
pub unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    guard_ptr(|| Ok(new_channel()? as *mut rdma_event_channel))
}

/// A channel the program passes: one of ours, not destroyed (else EINVAL).
fn live_chan(ch: *mut rdma_event_channel) -> Result<*mut ChanObj, i32> {
    let p = ch as *mut ChanObj;
    if crate::rdmacm::chan_live(p) {
        Ok(p)
    } else {
        Err(libc::EINVAL)
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    if ch.is_null() {
        return;
    }
    // SAFETY: the program gives up its channel.
    guard((), || unsafe { destroy_channel(ch as *mut ChanObj) })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    guard_neg(|| {
        if ch.is_null() || event.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: a channel of this library.
        let e = unsafe { get_event(ch as *mut ChanObj) }?;
        // SAFETY: the caller's pointer.
        unsafe { *event = e as *mut rdma_cm_event };
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    guard_neg(|| {
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: an event of rdma_get_cm_event, acknowledged once.
        drop(unsafe { Box::from_raw(event as *mut EventObj) });
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    const NAMES: [&[u8]; 16] = [
        b"RDMA_CM_EVENT_ADDR_RESOLVED\0",
        b"RDMA_CM_EVENT_ADDR_ERROR\0",
        b"RDMA_CM_EVENT_ROUTE_RESOLVED\0",
        b"RDMA_CM_EVENT_ROUTE_ERROR\0",
        b"RDMA_CM_EVENT_CONNECT_REQUEST\0",
        b"RDMA_CM_EVENT_CONNECT_RESPONSE\0",
        b"RDMA_CM_EVENT_CONNECT_ERROR\0",
        b"RDMA_CM_EVENT_UNREACHABLE\0",
        b"RDMA_CM_EVENT_REJECTED\0",
        b"RDMA_CM_EVENT_ESTABLISHED\0",
        b"RDMA_CM_EVENT_DISCONNECTED\0",
        b"RDMA_CM_EVENT_DEVICE_REMOVAL\0",
        b"RDMA_CM_EVENT_MULTICAST_JOIN\0",
        b"RDMA_CM_EVENT_MULTICAST_ERROR\0",
        b"RDMA_CM_EVENT_ADDR_CHANGE\0",
        b"RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
    ];
    match usize::try_from(event).ok().and_then(|i| NAMES.get(i)) {
        Some(n) => n.as_ptr().cast(),
        None => c"UNKNOWN EVENT".as_ptr(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    idp: *mut rdma_cm_id,
    ch: *mut rdma_event_channel,
) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        let (new, own) =
            if ch.is_null() { (new_channel()?, true) } else { (live_chan(ch)?, false) };
        let old = o.chan();
        let was_own = lock(&o.st).own_chan;
        {
            let _g = super::global();
            // SAFETY: both channels are live; the id is the program's.
            unsafe {
                let evs = (*old).take_events_of(o.ptr());
                (*o.ptr()).c.channel = new as *mut rdma_event_channel;
                for e in evs {
                    (*new).push(e);
                }
            }
        }
        lock(&o.st).own_chan = own;
        if was_own {
            // SAFETY: the id's former private channel.
            unsafe { destroy_channel(old) };
        }
        Ok(0)
    })
}

// ---------------------------------------------------------------- ids

#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    ch: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    guard_neg(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let ps = ps_of(ps as u32)?;
        let (chan, own) =
            if ch.is_null() { (new_channel()?, true) } else { (live_chan(ch)?, false) };
        let p = new_id(chan, context, ps, own);
        // SAFETY: the caller's pointer.
        unsafe { *out = p as *mut rdma_cm_id };
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(idp: *mut rdma_cm_id) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        // SAFETY: the id's own fields; a stored synchronous event is ours.
        unsafe {
            let ev = (*o.ptr()).c.event;
            if !ev.is_null() {
                drop(Box::from_raw(ev as *mut EventObj));
            }
            destroy_id(o.ptr());
        }
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(idp: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        // SAFETY: the caller's sockaddr.
        let a = unsafe { sockaddr_in(addr) }?.ok_or(libc::EINVAL)?;
        bind(o, a)?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    idp: *mut rdma_cm_id,
    src: *mut sockaddr,
    dst: *mut sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        // SAFETY: the caller's sockaddrs.
        let (s, d) = unsafe { (sockaddr_in(src)?, sockaddr_in(dst)?) };
        let d = d.ok_or(libc::EINVAL)?;
        match resolve_addr(o, s, d) {
            Ok(()) => {}
            Err(libc::ENODEV) => push_local(o.ptr(), CmEventKind::AddrError, -libc::ENODEV),
            Err(e) => return Err(e),
        }
        complete_sync(o)?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(idp: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        rust(o)?.resolve_route().map_err(cm_err)?;
        complete_sync(o)?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_listen(idp: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        listen(o)?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_connect(idp: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        // SAFETY: the caller's conn param.
        let cp = unsafe { conn_param(param, !o.c.qp.is_null()) };
        rust(o)?.connect(&cp).map_err(cm_err)?;
        complete_sync(o)?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_accept(idp: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        // SAFETY: the caller's conn param.
        let cp = unsafe { conn_param(param, !o.c.qp.is_null()) };
        rust(o)?.accept(&cp).map_err(cm_err)?;
        if lock(&o.st).ps != PortSpace::Udp {
            complete_sync(o)?;
        }
        Ok(0)
    })
}

/// `rdma_reject` and `rdma_reject_ece`.
///
/// # Safety
/// `idp` is NULL or an id of this library (a stale one is refused by
/// `idobj`); `data` is NULL or points to `len` readable bytes, as
/// librdmacm requires of its caller.
unsafe fn reject(idp: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        let pd = if data.is_null() || len == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller's private data of `len` bytes.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len.into()) }.to_vec()
        };
        rust(o)?.reject(&pd).map_err(cm_err)?;
        super::note_goodbye();
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject(idp: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { reject(idp, data, len) }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(
    idp: *mut rdma_cm_id,
    data: *const c_void,
    len: u8,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { reject(idp, data, len) }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_establish(idp: *mut rdma_cm_id) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        rust(o)?.establish().map_err(cm_err)?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_notify(idp: *mut rdma_cm_id, _event: c_int) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        rust(o)?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(idp: *mut rdma_cm_id) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        super::note_goodbye();
        match rust(o)?.disconnect() {
            // already disconnecting (the peer's DREQ came first, maybe not
            // yet reported), as the kernel's CM answers it
            Ok(()) | Err(CmError::InvalidState(_)) | Err(CmError::Engine(_)) => {}
            Err(e) => return Err(cm_err(e)),
        }
        complete_sync(o)?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen_id: *mut rdma_cm_id,
    out: *mut *mut rdma_cm_id,
) -> c_int {
    guard_neg(|| {
        let o = idobj(listen_id)?;
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the listener's live channel.
        let e = unsafe { get_event(o.chan()) }?;
        // SAFETY: the event just taken.
        let ev = unsafe { &(*e).c };
        if ev.status != 0 || ev.event != CmEventKind::ConnectRequest.code() {
            let st = ev.status;
            // SAFETY: ours to free.
            drop(unsafe { Box::from_raw(e) });
            return Err(if st != 0 { st.abs() } else { libc::EINVAL });
        }
        let child = ev.id;
        let ep = lock(&o.st).ep_qp;
        if let Some((pd, mut attr)) = ep {
            // SAFETY: the new id of the request.
            if unsafe { create_qp(child, pd, &mut attr) } != 0 {
                let err = crate::util::errno();
                // SAFETY: as above.
                unsafe {
                    drop(Box::from_raw(e));
                    destroy_id(child as *mut IdObj);
                }
                return Err(err);
            }
        }
        // SAFETY: the new id and the caller's pointer.
        unsafe {
            (*child).event = e as *mut rdma_cm_event;
            *out = child;
        }
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(idp: *mut rdma_cm_id) -> u16 {
    // SAFETY: the program's id.
    match unsafe { id(idp) } {
        Some(o) => port_of(&o.c.route.addr.src_storage),
        None => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(idp: *mut rdma_cm_id) -> u16 {
    // SAFETY: the program's id.
    match unsafe { id(idp) } {
        Some(o) => port_of(&o.c.route.addr.dst_storage),
        None => 0,
    }
}

/// The port of a sockaddr in network order, as librdmacm returns it.
fn port_of(s: &libc::sockaddr_storage) -> u16 {
    let p = s as *const libc::sockaddr_storage;
    // SAFETY: sockaddr_storage holds any of these; the family says which.
    unsafe {
        match i32::from(s.ss_family) {
            libc::AF_INET => (*(p as *const libc::sockaddr_in)).sin_port,
            libc::AF_INET6 => (*(p as *const libc::sockaddr_in6)).sin6_port,
            _ => 0,
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    idp: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: size_t,
) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        if optval.is_null() {
            return Err(libc::EINVAL);
        }
        match (level, optname) {
            (cm::RDMA_OPTION_ID, cm::RDMA_OPTION_ID_ACK_TIMEOUT) => {
                if optlen != size_of::<u8>() {
                    return Err(libc::EINVAL);
                }
                // SAFETY: the caller's option value, one byte (checked above).
                let t = unsafe { *(optval as *const u8) };
                rust(o)?.set_ack_timeout(t).map_err(|_| libc::EINVAL)?;
                Ok(0)
            }
            (cm::RDMA_OPTION_ID, cm::RDMA_OPTION_ID_TOS) => {
                if optlen != size_of::<u8>() {
                    return Err(libc::EINVAL);
                }
                // SAFETY: the caller's option value, one byte (checked above).
                super::set_tos(o, unsafe { *(optval as *const u8) });
                Ok(0)
            }
            (cm::RDMA_OPTION_ID, cm::RDMA_OPTION_ID_REUSEADDR | cm::RDMA_OPTION_ID_AFONLY) => {
                if optlen != size_of::<c_int>() {
                    return Err(libc::EINVAL);
                }
                // SAFETY: the caller's option value, an int (checked above);
                // read unaligned, as the kernel copies it in.
                let on = unsafe { (optval as *const c_int).read_unaligned() } != 0;
                match optname {
                    cm::RDMA_OPTION_ID_REUSEADDR => super::set_reuseaddr(o, on)?,
                    _ => super::set_afonly(o, on)?,
                }
                Ok(0)
            }
            (cm::RDMA_OPTION_IB, cm::RDMA_OPTION_IB_PATH) => Ok(0),
            _ => {
                diag!("rdma_set_option: level {level} option {optname} not supported");
                Err(libc::ENOSYS)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    idp: *mut rdma_cm_id,
    attr: *mut v::ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        if attr.is_null() || mask.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attributes; qp_state says which transition.
        let c = unsafe { &mut *attr };
        let state = crate::qp::state_from_c(c.qp_state)?;
        let a = rust(o)?.init_qp_attr(state).map_err(cm_err)?;
        *c = crate::qp::attr_to_c(&a, state);
        // the emulator's mask bits are libibverbs' IBV_QP_* bits
        // SAFETY: the caller's int.
        unsafe { *mask = a.mask.0 as c_int };
        Ok(0)
    })
}

// ---------------------------------------------------------------- QPs, SRQs

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    idp: *mut rdma_cm_id,
    pd: *mut v::ibv_pd,
    attr: *mut v::ibv_qp_init_attr,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { create_qp(idp, pd, attr) }
}

unsafe fn create_qp(
    idp: *mut rdma_cm_id,
    pd: *mut v::ibv_pd,
    attr: *mut v::ibv_qp_init_attr,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { create_qp_in(idp, pd, attr, ptr::null_mut()) }
}

/// [`create_qp`]; an XRC target goes in `xrcd` (NULL: the device's domain).
///
/// # Safety
/// As `rdma_create_qp`; `xrcd` is NULL or the program's XRC domain (checked
/// live by the verb).
unsafe fn create_qp_in(
    idp: *mut rdma_cm_id,
    pd: *mut v::ibv_pd,
    attr: *mut v::ibv_qp_init_attr,
    xrcd: *mut v::ibv_xrcd,
) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        let verbs = o.c.verbs;
        if verbs.is_null() || attr.is_null() {
            return Err(libc::EINVAL);
        }
        let r = rust(o)?;
        let pd = pd_for(o, pd)?;
        // SAFETY: the caller's init attributes.
        let a = unsafe { &mut *attr };
        if a.qp_type == 0 {
            // left unset (rdma_create_ep users): the id's type
            a.qp_type = o.c.qp_type;
        }
        // SAFETY: the id's own fields.
        unsafe { make_cqs(o, a)? };
        let q = if a.qp_type == v::IBV_QPT_XRC_RECV {
            // an XRC target is made in the device's XRC domain (librdmacm's
            // ucma_get_xrcd), without PD, CQs or receive queue
            let xrcd = if xrcd.is_null() { super::dev_xrcd(verbs)? } else { xrcd };
            // SAFETY: plain data.
            let mut ex: v::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
            ex.qp_context = a.qp_context;
            ex.qp_type = v::IBV_QPT_XRC_RECV;
            ex.comp_mask = v::IBV_QP_INIT_ATTR_XRCD;
            ex.xrcd = xrcd;
            // SAFETY: this library's verb with the id's context and domain.
            let q = unsafe { crate::qp::create_qp_ex(verbs, &mut ex) };
            a.cap = ex.cap;
            q
        } else {
            // SAFETY: this library's verb with the program's objects.
            unsafe { crate::qp::create_qp(pd, attr) }
        };
        if q.is_null() {
            return Err(crate::util::errno());
        }
        // SAFETY: q was just made.
        let qo = unsafe { crate::qp::qp(q) }.ok_or(libc::EINVAL)?;
        if let Err(e) = r.attach_qp(&qo.qp) {
            // SAFETY: our QP, not yet known to the program.
            unsafe { crate::qp::destroy_qp(q) };
            return Err(cm_err(e));
        }
        // SAFETY: the QP and the id are this library's.
        unsafe {
            (*q).state = crate::qp::state_to_c(qo.qp.state());
            (*o.ptr()).c.qp = q;
        }
        super::mcast::qp_created(o);
        Ok(0)
    })
}

/// The PD of a QP or SRQ an id makes: the caller's, else the id's, else
/// the device's.
fn pd_for(o: &IdObj, pd: *mut v::ibv_pd) -> Result<*mut v::ibv_pd, i32> {
    if !pd.is_null() {
        Ok(pd)
    } else if !o.c.pd.is_null() {
        Ok(o.c.pd)
    } else {
        dev_pd(o.c.verbs)
    }
}

/// librdmacm's `ucma_create_cqs`: CQs (with completion channels) for the
/// ones the attributes leave NULL.
///
/// # Safety
/// `o.c.verbs` is this library's context of the id's device (set when the
/// id was bound), so the CQs and channels are made through its own entry
/// points.
unsafe fn make_cqs(o: &IdObj, a: &mut v::ibv_qp_init_attr) -> Result<(), i32> {
    let verbs = o.c.verbs;
    let me = o.ptr();
    for send in [true, false] {
        let slot = if send { &mut a.send_cq } else { &mut a.recv_cq };
        if !slot.is_null() {
            continue;
        }
        let n = if send { a.cap.max_send_wr } else { a.cap.max_recv_wr }.max(1);
        // SAFETY: the id's context; the results are the id's.
        unsafe {
            let ch = crate::cq::create_comp_channel(verbs);
            if ch.is_null() {
                return Err(crate::util::errno());
            }
            let cq = crate::cq::create_cq(verbs, n as c_int, me.cast(), ch, 0);
            if cq.is_null() {
                let e = crate::util::errno();
                crate::cq::destroy_comp_channel(ch);
                return Err(e);
            }
            if send {
                (*me).c.send_cq_channel = ch;
                (*me).c.send_cq = cq;
            } else {
                (*me).c.recv_cq_channel = ch;
                (*me).c.recv_cq = cq;
            }
            *slot = cq;
        }
        lock(&o.st).own_cqs = true;
    }
    Ok(())
}

/// Destroy the CQs and completion channels [`make_cqs`] made for `o`.
///
/// # Safety
/// The id's `send_cq`/`recv_cq` and their channels are the live objects
/// `make_cqs` stored (it sets `own_cqs` only then), and no QP uses them any
/// more.
unsafe fn destroy_cqs(o: &IdObj) {
    if o.c.qp_type == v::IBV_QPT_XRC_RECV && !o.c.srq.is_null() {
        return; // the XRC SRQ completes into them: rdma_destroy_srq's turn
    }
    if !std::mem::take(&mut lock(&o.st).own_cqs) {
        return;
    }
    let me = o.ptr();
    // SAFETY: the CQs and channels make_cqs made for the id.
    unsafe {
        for (cq, ch) in [
            (&mut (*me).c.send_cq, &mut (*me).c.send_cq_channel),
            (&mut (*me).c.recv_cq, &mut (*me).c.recv_cq_channel),
        ] {
            if !cq.is_null() {
                crate::cq::destroy_cq(*cq);
                *cq = ptr::null_mut();
            }
            if !ch.is_null() {
                crate::cq::destroy_comp_channel(*ch);
                *ch = ptr::null_mut();
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    idp: *mut rdma_cm_id,
    attr: *mut v::ibv_qp_init_attr_ex,
) -> c_int {
    guard_neg(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        if a.comp_mask & !(v::IBV_QP_INIT_ATTR_PD | v::IBV_QP_INIT_ATTR_XRCD) != 0 {
            diag!("rdma_create_qp_ex: comp_mask {:#x} not supported", a.comp_mask);
            return Err(libc::EOPNOTSUPP);
        }
        let xrcd = match a.comp_mask & v::IBV_QP_INIT_ATTR_XRCD {
            0 => ptr::null_mut(),
            _ => a.xrcd,
        };
        let mut b = crate::qp::init_attr_of(a);
        // SAFETY: forwarded contract.
        if unsafe { create_qp_in(idp, a.pd, &mut b, xrcd) } != 0 {
            return Err(crate::util::errno());
        }
        a.cap = b.cap;
        a.send_cq = b.send_cq;
        a.recv_cq = b.recv_cq;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(idp: *mut rdma_cm_id) {
    let _ = guard_neg(|| {
        let o = idobj(idp)?;
        if let Some(r) = o.rust() {
            drop(r.detach_qp());
        }
        let q = o.c.qp;
        if !q.is_null() {
            // (the attachments the id's joins made go with the QP)
            super::mcast::qp_destroying(o);
            // SAFETY: the id's QP, made by rdma_create_qp.
            unsafe {
                crate::qp::destroy_qp(q);
                (*o.ptr()).c.qp = ptr::null_mut();
            }
        }
        // SAFETY: the id's own CQs.
        unsafe { destroy_cqs(o) };
        Ok(0)
    });
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    idp: *mut rdma_cm_id,
    pd: *mut v::ibv_pd,
    attr: *mut v::ibv_srq_init_attr,
) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        // as librdmacm: an XRC_RECV id's SRQ is an XRC SRQ
        // SAFETY: plain data.
        let mut ex: v::ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
        ex.srq_context = a.srq_context;
        ex.attr = a.attr;
        ex.comp_mask = v::IBV_SRQ_INIT_ATTR_TYPE | v::IBV_SRQ_INIT_ATTR_PD;
        ex.srq_type =
            if o.c.qp_type == v::IBV_QPT_XRC_RECV { v::IBV_SRQT_XRC } else { v::IBV_SRQT_BASIC };
        ex.pd = pd;
        // SAFETY: forwarded contract, our attributes.
        let r = unsafe { create_srq_ex(o, &mut ex) };
        a.attr = ex.attr;
        r
    })
}

/// librdmacm's `rdma_create_srq_ex`: the id's PD when the attributes name
/// none; an XRC SRQ in the device's XRC domain with the id's receive CQ
/// (made here when the id has none) unless the attributes name them.
///
/// # Safety
/// `a` is the caller's (or our) attributes; `o` is a live id.
unsafe fn create_srq_ex(o: &IdObj, a: &mut v::ibv_srq_init_attr_ex) -> Result<c_int, i32> {
    if a.comp_mask & v::IBV_SRQ_INIT_ATTR_TYPE == 0 {
        return Err(libc::EINVAL);
    }
    if a.comp_mask & v::IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
        a.pd = pd_for(o, ptr::null_mut())?;
        a.comp_mask |= v::IBV_SRQ_INIT_ATTR_PD;
    }
    let verbs = o.c.verbs;
    if verbs.is_null() {
        return Err(libc::EINVAL);
    }
    if a.srq_type == v::IBV_SRQT_XRC {
        if a.comp_mask & v::IBV_SRQ_INIT_ATTR_XRCD == 0 || a.xrcd.is_null() {
            a.xrcd = super::dev_xrcd(verbs)?;
        }
        if a.comp_mask & v::IBV_SRQ_INIT_ATTR_CQ == 0 || a.cq.is_null() {
            if o.c.recv_cq.is_null() {
                // SAFETY: plain data; only the receive CQ is asked for.
                let mut qa: v::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
                qa.send_cq = o.c.send_cq;
                if qa.send_cq.is_null() {
                    // (a placeholder: make_cqs fills NULL slots only)
                    qa.send_cq = ptr::NonNull::dangling().as_ptr();
                }
                qa.cap.max_recv_wr = a.attr.max_wr;
                // SAFETY: the id's own fields.
                unsafe { make_cqs(o, &mut qa)? };
            }
            a.cq = o.c.recv_cq;
        }
        a.comp_mask |= v::IBV_SRQ_INIT_ATTR_XRCD | v::IBV_SRQ_INIT_ATTR_CQ;
    }
    // SAFETY: this library's verb with the caller's (or the id's) objects.
    let s = unsafe { crate::xrc::create_srq_ex(verbs, a) };
    if s.is_null() {
        return Err(crate::util::errno());
    }
    // SAFETY: the id's fields.
    unsafe {
        if (*o.ptr()).c.pd.is_null() {
            (*o.ptr()).c.pd = a.pd;
        }
        (*o.ptr()).c.srq = s;
    }
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(
    idp: *mut rdma_cm_id,
    attr: *mut v::ibv_srq_init_attr_ex,
) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attributes.
        unsafe { create_srq_ex(o, &mut *attr) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(idp: *mut rdma_cm_id) {
    let _ = guard_neg(|| {
        let o = idobj(idp)?;
        let s = o.c.srq;
        if !s.is_null() {
            // SAFETY: the id's SRQ.
            unsafe {
                crate::srq::destroy_srq(s);
                (*o.ptr()).c.srq = ptr::null_mut();
            }
        }
        if o.c.qp.is_null() {
            // SAFETY: the id's own CQs, used by no QP (an XRC SRQ's were
            // kept for it by rdma_destroy_qp)
            unsafe { destroy_cqs(o) };
        }
        Ok(0)
    });
}

// ---------------------------------------------------------------- devices

#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut v::ibv_context {
    guard_ptr(|| {
        let list = crate::device::devices()?;
        let mut out: Vec<*mut v::ibv_context> = Vec::new();
        for e in list {
            if super::can_open(e) {
                if let Ok((c, _)) = super::dev_open(e.index) {
                    out.push(c);
                }
            }
        }
        if !num.is_null() {
            // SAFETY: the caller's int.
            unsafe { *num = out.len() as c_int };
        }
        out.push(ptr::null_mut());
        Ok(Box::into_raw(out.into_boxed_slice()) as *mut *mut v::ibv_context)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut v::ibv_context) {
    if list.is_null() {
        return;
    }
    // SAFETY: a list of rdma_get_devices: a boxed slice ending in NULL.
    unsafe {
        let mut n = 0;
        while !(*list.add(n)).is_null() {
            n += 1;
        }
        drop(Box::from_raw(ptr::slice_from_raw_parts_mut(list, n + 1)));
    }
}

// ---------------------------------------------------------------- addrinfo, endpoints

/// `rdma_getaddrinfo`, as librdmacm's `addrinfo.c`: with a node or a
/// service, the first answer of `getaddrinfo` (asked with the socket type
/// and protocol the hints' QP type and port space stand for) as the
/// source (`RAI_PASSIVE`) or destination address; with neither, the
/// hints' own addresses (`ai_dst_addr`, and `ai_src_addr` in both cases
/// when the answer has no source), flags, family, QP type and port space,
/// which is how libfabric's verbs provider asks. NULL node, service and
/// hints: EINVAL.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard_neg(|| {
        // SAFETY: the caller's hints or NULL.
        let h = unsafe { hints.as_ref() };
        if res.is_null() || (node.is_null() && service.is_null() && h.is_none()) {
            return Err(libc::EINVAL);
        }
        // SAFETY: plain data (librdmacm's "nohints": all zero).
        let zero: rdma_addrinfo = unsafe { std::mem::zeroed() };
        let h = h.unwrap_or(&zero);
        // SAFETY: plain data.
        let mut out: rdma_addrinfo = unsafe { std::mem::zeroed() };
        let mut fill = || -> Result<(), i32> {
            if !node.is_null() || !service.is_null() {
                // SAFETY: the caller's C strings (NULL or NUL-terminated).
                unsafe { from_getaddrinfo(node, service, h, &mut out) }?;
            } else {
                out.ai_flags = h.ai_flags;
                out.ai_family = h.ai_family;
                out.ai_qp_type = h.ai_qp_type;
                out.ai_port_space = h.ai_port_space;
                if h.ai_dst_len > 0 {
                    // SAFETY: the hints' address of ai_dst_len bytes.
                    out.ai_dst_addr = unsafe { dup_sockaddr(h.ai_dst_addr, h.ai_dst_len) }?;
                    out.ai_dst_len = h.ai_dst_len;
                }
            }
            if out.ai_src_len == 0 && h.ai_src_len > 0 {
                // SAFETY: the hints' address of ai_src_len bytes.
                out.ai_src_addr = unsafe { dup_sockaddr(h.ai_src_addr, h.ai_src_len) }?;
                out.ai_src_len = h.ai_src_len;
            }
            Ok(())
        };
        if let Err(e) = fill() {
            free_sockaddrs(&out);
            return Err(e);
        }
        // SAFETY: the caller's pointer.
        unsafe { *res = Box::into_raw(Box::new(out)) };
        Ok(0)
    })
}

/// A copy of a sockaddr of `len` bytes (at most a `sockaddr_storage`),
/// freed by [`free_sockaddrs`]. NULL with a length: EINVAL.
///
/// # Safety
/// `a` is NULL or holds `len` readable bytes.
unsafe fn dup_sockaddr(a: *const sockaddr, len: socklen_t) -> Result<*mut sockaddr, i32> {
    if a.is_null() {
        return Err(libc::EINVAL);
    }
    let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: plain data.
    let mut s: Box<libc::sockaddr_storage> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: `a` holds `len` >= n bytes (the caller's or getaddrinfo's).
    unsafe { ptr::copy_nonoverlapping(a.cast::<u8>(), ptr::addr_of_mut!(*s).cast::<u8>(), n) };
    Ok(Box::into_raw(s).cast())
}

/// Free the addresses [`dup_sockaddr`] made for `r`.
fn free_sockaddrs(r: &rdma_addrinfo) {
    for a in [r.ai_src_addr, r.ai_dst_addr] {
        if !a.is_null() {
            // SAFETY: made by dup_sockaddr.
            drop(unsafe { Box::from_raw(a as *mut libc::sockaddr_storage) });
        }
    }
}

/// librdmacm's `ucma_getaddrinfo`: ask `getaddrinfo` and fill `out` from
/// its first answer.
///
/// # Safety
/// `node` and `service` are NULL or NUL-terminated strings.
unsafe fn from_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    h: &rdma_addrinfo,
    out: &mut rdma_addrinfo,
) -> Result<(), i32> {
    // SAFETY: plain data.
    let mut ah: libc::addrinfo = unsafe { std::mem::zeroed() };
    if h.ai_flags & cm::RAI_PASSIVE != 0 {
        ah.ai_flags |= libc::AI_PASSIVE;
    }
    if h.ai_flags & cm::RAI_NUMERICHOST != 0 {
        ah.ai_flags |= libc::AI_NUMERICHOST;
    }
    ah.ai_family = h.ai_family;
    ah.ai_socktype = match h.ai_qp_type as u32 {
        v::IBV_QPT_RC | v::IBV_QPT_UC | v::IBV_QPT_XRC_SEND | v::IBV_QPT_XRC_RECV => {
            libc::SOCK_STREAM
        }
        v::IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ah.ai_protocol = match h.ai_port_space as u32 {
        cm::RDMA_PS_TCP => libc::IPPROTO_TCP,
        cm::RDMA_PS_UDP => libc::IPPROTO_UDP,
        _ => 0,
    };
    let mut ai: *mut libc::addrinfo = ptr::null_mut();
    // SAFETY: C strings of the caller, our hints and out pointer.
    let r = unsafe { libc::getaddrinfo(node, service, &ah, &mut ai) };
    if r != 0 || ai.is_null() {
        diag!("rdma_getaddrinfo: getaddrinfo failed ({r})");
        return Err(if r == libc::EAI_SYSTEM { crate::util::errno() } else { libc::EADDRNOTAVAIL });
    }
    // SAFETY: getaddrinfo's first result.
    let first = unsafe { &*ai };
    out.ai_qp_type = if h.ai_qp_type != 0 {
        h.ai_qp_type
    } else if first.ai_socktype == libc::SOCK_DGRAM {
        v::IBV_QPT_UD as c_int
    } else {
        v::IBV_QPT_RC as c_int
    };
    out.ai_port_space = if h.ai_port_space != 0 {
        h.ai_port_space
    } else if first.ai_protocol == libc::IPPROTO_UDP || out.ai_qp_type == v::IBV_QPT_UD as c_int {
        cm::RDMA_PS_UDP as c_int
    } else {
        cm::RDMA_PS_TCP as c_int
    };
    out.ai_family = first.ai_family;
    // SAFETY: getaddrinfo's address of ai_addrlen bytes.
    let a = unsafe { dup_sockaddr(first.ai_addr, first.ai_addrlen) };
    if let Ok(a) = a {
        if h.ai_flags & cm::RAI_PASSIVE != 0 {
            out.ai_flags = cm::RAI_PASSIVE;
            out.ai_src_addr = a;
            out.ai_src_len = first.ai_addrlen;
        } else {
            out.ai_dst_addr = a;
            out.ai_dst_len = first.ai_addrlen;
        }
    }
    // SAFETY: getaddrinfo's list.
    unsafe { libc::freeaddrinfo(ai) };
    a.map(|_| ())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: a list of rdma_getaddrinfo.
        let b = unsafe { Box::from_raw(p) };
        free_sockaddrs(&b);
        p = b.ai_next;
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    out: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut v::ibv_pd,
    qp_init_attr: *mut v::ibv_qp_init_attr,
) -> c_int {
    guard_neg(|| {
        if out.is_null() || res.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's addrinfo.
        let r = unsafe { &*res };
        let ps = if r.ai_port_space != 0 {
            ps_of(r.ai_port_space as u32)?
        } else if r.ai_qp_type == v::IBV_QPT_UD as c_int {
            PortSpace::Udp
        } else {
            PortSpace::Tcp
        };
        let ch = new_channel()?;
        let idp = new_id(ch, ptr::null_mut(), ps, true);
        if ps == PortSpace::Ib && r.ai_qp_type != 0 {
            // (librdmacm's rdma_create_id2: RDMA_PS_IB ids take the hints'
            // QP type, XRC_SEND or XRC_RECV for XRC)
            // SAFETY: just made, not handed out.
            unsafe { (*idp).c.qp_type = r.ai_qp_type as v::ibv_qp_type };
        }
        // SAFETY: just made.
        let o = unsafe { &*idp };
        let fail = |e: i32| {
            // SAFETY: our id, not handed out.
            unsafe { destroy_id(idp) };
            e
        };
        // SAFETY: the addrinfo's sockaddrs.
        let (src, dst) = unsafe { (sockaddr_in(r.ai_src_addr), sockaddr_in(r.ai_dst_addr)) };
        let (src, dst) = (src.map_err(fail)?, dst.map_err(fail)?);
        if r.ai_flags & cm::RAI_PASSIVE != 0 {
            let s = src.ok_or(libc::EINVAL).map_err(fail)?;
            bind(o, s).map_err(fail)?;
            if !qp_init_attr.is_null() {
                // SAFETY: the caller's attributes, copied.
                lock(&o.st).ep_qp = Some((pd, unsafe { *qp_init_attr }));
            }
        } else {
            let d = dst.ok_or(libc::EINVAL).map_err(fail)?;
            resolve_addr(o, src, d).map_err(fail)?;
            complete_sync(o).map_err(fail)?;
            rust(o).map_err(fail)?.resolve_route().map_err(cm_err).map_err(fail)?;
            complete_sync(o).map_err(fail)?;
            if !qp_init_attr.is_null() {
                // SAFETY: forwarded contract.
                if unsafe { create_qp(idp as *mut rdma_cm_id, pd, qp_init_attr) } != 0 {
                    return Err(fail(crate::util::errno()));
                }
            }
        }
        // SAFETY: the caller's pointer.
        unsafe { *out = idp as *mut rdma_cm_id };
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(idp: *mut rdma_cm_id) {
    if idp.is_null() {
        return;
    }
    // SAFETY: forwarded contract.
    unsafe {
        if !(*idp).qp.is_null() {
            rdma_destroy_qp(idp);
        }
        if !(*idp).srq.is_null() {
            rdma_destroy_srq(idp);
        }
        rdma_destroy_id(idp);
    }
}

// ---------------------------------------------------------------- not supported

#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    idp: *mut rdma_cm_id,
    addr: *mut sockaddr,
    context: *mut c_void,
) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        // SAFETY: the caller's sockaddr of its family's size.
        let a = unsafe { super::mcast::group_addr(addr) }?;
        super::mcast::join(o, a, super::mcast::RDMA_MC_JOIN_FLAG_FULLMEMBER, context)?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    idp: *mut rdma_cm_id,
    attr: *mut super::mcast::rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    use super::mcast::*;
    guard_neg(|| {
        let o = idobj(idp)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's rdma_cm_join_mc_attr_ex (checked not NULL).
        let at = unsafe { &*attr };
        if at.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0
            || at.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
        {
            return Err(libc::EINVAL);
        }
        if at.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return Err(libc::EOPNOTSUPP);
        }
        // SAFETY: the caller's sockaddr of its family's size.
        let a = unsafe { group_addr(at.addr) }?;
        join(o, a, at.join_flags, context)?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(idp: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        // SAFETY: the caller's sockaddr of its family's size.
        let a = unsafe { super::mcast::group_addr(addr) }?;
        super::mcast::leave(o, a)?;
        Ok(0)
    })
}

/// `struct ibv_ece`.
#[repr(C)]
pub struct IbvEce {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `rdma_set_local_ece`: the enhanced connection establishment options to
/// offer, kept with the id as librdmacm keeps them (before the QP exists;
/// a vendor ID, no comp_mask, else EINVAL). This device has no ECE
/// options (`ibv_query_ece` answers EOPNOTSUPP, as on rxe), so nothing is
/// negotiated and the CM does not put them on the wire.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(idp: *mut rdma_cm_id, ece: *mut IbvEce) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        // SAFETY: the caller's ibv_ece or NULL.
        let e = unsafe { ece.as_ref() }.ok_or(libc::EINVAL)?;
        if !o.c.qp.is_null() || e.vendor_id == 0 || e.comp_mask != 0 {
            return Err(libc::EINVAL);
        }
        lock(&o.st).local_ece = (e.vendor_id, e.options);
        Ok(0)
    })
}

/// `rdma_get_remote_ece`: the peer's ECE offer; none reaches this device
/// (see [`rdma_set_local_ece`]), so vendor ID and options are 0, which
/// librdmacm reports for a peer that offered none.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(idp: *mut rdma_cm_id, ece: *mut IbvEce) -> c_int {
    guard_neg(|| {
        let o = idobj(idp)?;
        if ece.is_null() || !o.c.qp.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's ibv_ece (checked not NULL).
        unsafe { *ece = IbvEce { vendor_id: 0, options: 0, comp_mask: 0 } };
        Ok(0)
    })
}
