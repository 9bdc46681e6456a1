//! `rdma_join_multicast`, `rdma_join_multicast_ex`, `rdma_leave_multicast`
//! on RoCEv2, as librdmacm over the kernel's CM gives them:
//!
//! - the id must be on a device (bound or address-resolved) and be a UD id
//!   (port space UDP), else EINVAL; the address must be an IPv4
//!   multicast address (the kernel's CM refuses IPv6 groups on RoCEv2:
//!   EOPNOTSUPP here; `ibv_attach_mcast` itself takes both);
//! - the group's MGID is the IPv4-mapped address; a full member's QP (the
//!   id's, when it has one, or the one `rdma_create_qp` makes later) is
//!   attached to it (`ibv_attach_mcast`), which joins the IP group on the
//!   device's socket; a send-only full member attaches nothing;
//! - the id's channel then gets `RDMA_CM_EVENT_MULTICAST_JOIN` with the
//!   group's address vector in `param.ud.ah_attr` (global, the MGID, hop
//!   limit 64), QPN 0xFFFFFF, the Q_Key `RDMA_UDP_QKEY` (0x01234567, the one
//!   `rdma_create_qp` gives a UDP id's QP), and the join's context in
//!   `param.ud.private_data` (length 0); or `RDMA_CM_EVENT_MULTICAST_ERROR`
//!   with the negative errno when the attach fails;
//! - `rdma_leave_multicast` detaches the QP and forgets the join
//!   (EADDRNOTAVAIL for an address the id did not join).

use super::{abi, global, lock, sockaddr_in, EventObj, IdObj};
use crate::abi as v;
use crate::util::diag;
use roce_verbs_api::rdma_cm::{CmEventKind, PortSpace};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// librdmacm's `RDMA_UDP_QKEY`.
pub(crate) const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut libc::sockaddr,
}

pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: u32 = 1 << 2;
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
pub const RDMA_MC_JOIN_FLAG_RESERVED: u32 = 2;

/// One join of an id.
#[derive(Clone, Copy)]
struct Join {
    addr: IpAddr,
    mgid: [u8; 16],
    send_only: bool,
    /// The QP attached for it (a full member with a QP).
    attached: Option<usize>,
}

/// The joins of every id (by the id's address).
fn joins() -> MutexGuard<'static, HashMap<usize, Vec<Join>>> {
    static J: OnceLock<Mutex<HashMap<usize, Vec<Join>>>> = OnceLock::new();
    lock(J.get_or_init(Default::default))
}

/// The MGID of a group address on RoCEv2: IPv4-mapped.
fn mgid_of(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Attach `q` to `mgid` (the verbs' own entry: its checks and errnos).
fn attach(q: *mut v::ibv_qp, mgid: [u8; 16], on: bool) -> i32 {
    let gid = v::ibv_gid { raw: mgid };
    // SAFETY: q is the id's QP (live while the id holds it); gid is ours.
    unsafe { crate::qp::mcast(q, &gid, 0, on) }
}

/// `rdma_join_multicast_ex` (and `rdma_join_multicast`: a full member).
pub(crate) fn join(
    o: &IdObj,
    addr: Option<SocketAddr>,
    flags: u32,
    context: *mut libc::c_void,
) -> Result<(), i32> {
    let Some(addr) = addr else { return Err(libc::EINVAL) };
    if flags >= RDMA_MC_JOIN_FLAG_RESERVED {
        return Err(libc::EINVAL);
    }
    let ps = lock(&o.st).ps;
    if ps != PortSpace::Udp {
        diag!("rdma_join_multicast: only UD ids (RDMA_PS_UDP) join groups");
        return Err(libc::EINVAL);
    }
    let Some(r) = o.rust().filter(|r| r.context().is_some()) else {
        diag!("rdma_join_multicast: the id is on no device yet (rdma_bind_addr or rdma_resolve_addr first)");
        return Err(libc::EINVAL);
    };
    let ip = super::canonical(addr.ip());
    if ip.is_ipv6() {
        diag!("rdma_join_multicast: {ip}: IPv6 groups are not joined by the CM on RoCEv2 (as the kernel's); attach the QP with ibv_attach_mcast");
        return Err(libc::EOPNOTSUPP);
    }
    if !ip.is_multicast() {
        diag!("rdma_join_multicast: {ip} is not a multicast address");
        return Err(libc::EINVAL);
    }
    let send_only = flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
    let mgid = mgid_of(ip);
    let idp = o.ptr();
    // SAFETY: the id's C fields are the program's and ours, read here.
    let qp = unsafe { (*idp).c.qp };
    let mut j = Join { addr: ip, mgid, send_only, attached: None };
    let mut status = 0;
    if !send_only && !qp.is_null() {
        match attach(qp, mgid, true) {
            0 => j.attached = Some(qp as usize),
            e => status = -e,
        }
    }
    if status == 0 {
        joins().entry(idp as usize).or_default().push(j);
    }
    drop(r);
    push_event(o, &j, context, status);
    Ok(())
}

/// `rdma_leave_multicast`.
pub(crate) fn leave(o: &IdObj, addr: Option<SocketAddr>) -> Result<(), i32> {
    let Some(addr) = addr else { return Err(libc::EINVAL) };
    let ip = super::canonical(addr.ip());
    let idp = o.ptr() as usize;
    let j = {
        let mut g = joins();
        let list = g.get_mut(&idp).ok_or(libc::EADDRNOTAVAIL)?;
        let at = list.iter().position(|j| j.addr == ip).ok_or(libc::EADDRNOTAVAIL)?;
        let j = list.remove(at);
        if list.is_empty() {
            g.remove(&idp);
        }
        j
    };
    if let Some(q) = j.attached {
        // (EINVAL if the program detached it itself meanwhile: gone anyway)
        let _ = attach(q as *mut v::ibv_qp, j.mgid, false);
    }
    Ok(())
}

/// `rdma_create_qp` gave the id a QP: the groups it joined as a full
/// member before take it too (as librdmacm attaches the id's QP when the
/// JOIN event is read).
pub(crate) fn qp_created(o: &IdObj) {
    let idp = o.ptr() as usize;
    // SAFETY: the id's C fields, read.
    let qp = unsafe { (*o.ptr()).c.qp };
    if qp.is_null() {
        return;
    }
    let mut g = joins();
    for j in g.get_mut(&idp).into_iter().flatten() {
        if !j.send_only && j.attached.is_none() && attach(qp, j.mgid, true) == 0 {
            j.attached = Some(qp as usize);
        }
    }
}

/// `rdma_destroy_qp`: the QP goes; its attachments with it.
pub(crate) fn qp_destroying(o: &IdObj) {
    let idp = o.ptr() as usize;
    let mut g = joins();
    for j in g.get_mut(&idp).into_iter().flatten() {
        if let Some(q) = j.attached.take() {
            let _ = attach(q as *mut v::ibv_qp, j.mgid, false);
        }
    }
}

/// `rdma_destroy_id`: forget the id's joins (its QP, if the program keeps
/// it, stays attached, as over the kernel's CM).
pub(crate) fn id_destroyed(idp: usize) {
    joins().remove(&idp);
}

/// Queue MULTICAST_JOIN (or MULTICAST_ERROR with `status`) on the id's
/// channel.
fn push_event(o: &IdObj, j: &Join, context: *mut libc::c_void, status: i32) {
    // SAFETY: rdma_cm_event is C data.
    let mut c: abi::rdma_cm_event = unsafe { std::mem::zeroed() };
    c.id = o.ptr() as *mut abi::rdma_cm_id;
    c.status = status;
    c.event = match status {
        0 => CmEventKind::MulticastJoin.code(),
        _ => CmEventKind::MulticastError.code(),
    };
    let mut ah = roce_verbs_api::AhAttr::new(j.addr);
    ah.hop_limit = 64;
    // the GID index of the device's own address (see ibv_query_gid)
    ah.sgid_index = 1;
    c.param.ud = abi::rdma_ud_param {
        private_data: context as *const libc::c_void,
        private_data_len: 0,
        ah_attr: crate::ah::ah_to_c(&ah),
        qp_num: roce_verbs_api::MCAST_QPN,
        qkey: RDMA_UDP_QKEY,
    };
    let e = Box::into_raw(Box::new(EventObj { c, data: Vec::new() }));
    let _g = global();
    // SAFETY: the id's channel is live while the id is.
    unsafe { &*o.chan() }.push(e);
}

/// The address of a join's sockaddr, checked.
///
/// # Safety
/// `sa` is NULL or a sockaddr of its family's size.
pub(crate) unsafe fn group_addr(sa: *const libc::sockaddr) -> Result<Option<SocketAddr>, i32> {
    // SAFETY: forwarded.
    unsafe { sockaddr_in(sa) }
}
