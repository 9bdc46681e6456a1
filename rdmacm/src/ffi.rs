//! The C API this layer is written against: the few structs of
//! `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>` it reads or fills, and
//! the functions it calls, declared as a C program would see them. The
//! drop-in (`libibverbs.so.1`, which is also `librdmacm.so.1`) defines
//! them; nothing here reaches into its Rust internals.
//!
//! `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` and
//! `ibv_req_notify_cq` are inline functions of `verbs.h` that jump through
//! `ibv_context.ops`: [`post_send`] and friends do the same.
#![allow(non_camel_case_types, dead_code)]

use libc::{c_int, c_uint, c_void, sockaddr, sockaddr_storage};

pub const IBV_QPT_RC: c_uint = 2;
pub const IBV_QPT_UD: c_uint = 4;
pub const IBV_WR_SEND: c_uint = 2;
/// librdmacm's `RDMA_UDP_QKEY`, the Q_Key of every `RDMA_PS_UDP` QP.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
pub const RDMA_PS_UDP: c_int = 0x0111;
pub const IBV_WR_RDMA_WRITE: c_uint = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
pub const IBV_SEND_INLINE: c_uint = 8;
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 2;
pub const IBV_WC_SUCCESS: c_uint = 0;

/// `SOL_RDMA` and its options (`<rdma/rsocket.h>`).
pub const SOL_RDMA: c_int = 0x10000;
pub const RDMA_SQSIZE: c_int = 0;
pub const RDMA_RQSIZE: c_int = 1;
pub const RDMA_INLINE: c_int = 2;
pub const RDMA_IOMAPSIZE: c_int = 3;
pub const RDMA_ROUTE: c_int = 4;

pub const RDMA_PS_TCP: c_int = 0x0106;
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;

/// `enum rdma_cm_event_type`.
pub mod ev {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
    pub const TIMEWAIT_EXIT: u32 = 15;
}

/// Opaque objects: only pointers to them are held.
#[repr(C)]
pub struct ibv_pd {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq` (only its context, whose `ops` the inline verbs call
/// through, is read) and `struct ibv_qp` up to `qp_num`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
}
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
}

#[repr(C)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr` (128 bytes): the RDMA member of the `wr` union; the
/// atomic member (32 bytes) sets its size, the rest is the tail unions.
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    /// `imm_data`, big-endian.
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub _wr_rest: [u32; 5],
    /// `qp_type.xrc.remote_srqn` and the `bind_mw`/`tso` union.
    pub _tail: [u64; 7],
}

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_uint,
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data`, big-endian.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

type Fp = Option<unsafe extern "C" fn()>;

/// `struct ibv_context_ops`: 11 entries before `poll_cq`.
#[repr(C)]
pub struct ibv_context_ops {
    pub _before_poll: [Fp; 11],
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub _before_post: [Fp; 12],
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    pub _after: [Fp; 5],
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut c_void,
    pub ops: ibv_context_ops,
}

#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_ib_addr`: the GIDs (8-aligned, as `union ibv_gid` is).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub pkey: u16,
}

/// `struct rdma_cm_id` up to `port_num`.
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub src_addr: sockaddr_storage,
    pub dst_addr: sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
    /// `struct rdma_route`'s tail padding.
    pub _route_pad: c_int,
    pub ps: c_uint,
    pub port_num: u8,
}

/// `struct ibv_ah_attr` (32 bytes) with its `grh`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
pub struct ibv_ah {
    _p: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_cm_event` with the connection member of its union.
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: u32,
    pub status: c_int,
    pub conn: rdma_conn_param,
}

extern "C" {
    pub fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    pub fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: c_int)
        -> *mut ibv_mr;
    pub fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    pub fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int;
    pub fn ibv_create_cq(
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        ch: *mut ibv_comp_channel,
        vector: c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    pub fn ibv_get_cq_event(
        ch: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        ctx: *mut *mut c_void,
    ) -> c_int;
    pub fn ibv_ack_cq_events(cq: *mut ibv_cq, n: c_uint);
    pub fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah;
    pub fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int;
    pub fn ibv_query_gid(
        ctx: *mut ibv_context,
        port: u8,
        index: c_int,
        gid: *mut [u8; 16],
    ) -> c_int;

    pub fn rdma_create_event_channel() -> *mut rdma_event_channel;
    pub fn rdma_destroy_event_channel(ch: *mut rdma_event_channel);
    pub fn rdma_create_id(
        ch: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: c_int,
    ) -> c_int;
    pub fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int;
    pub fn rdma_migrate_id(id: *mut rdma_cm_id, ch: *mut rdma_event_channel) -> c_int;
    pub fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int;
    pub fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int;
    pub fn rdma_resolve_addr(
        id: *mut rdma_cm_id,
        src: *mut sockaddr,
        dst: *mut sockaddr,
        timeout_ms: c_int,
    ) -> c_int;
    pub fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int;
    pub fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, a: *mut ibv_qp_init_attr) -> c_int;
    pub fn rdma_destroy_qp(id: *mut rdma_cm_id);
    pub fn rdma_connect(id: *mut rdma_cm_id, p: *mut rdma_conn_param) -> c_int;
    pub fn rdma_accept(id: *mut rdma_cm_id, p: *mut rdma_conn_param) -> c_int;
    pub fn rdma_reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int;
    pub fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int;
    pub fn rdma_get_cm_event(ch: *mut rdma_event_channel, e: *mut *mut rdma_cm_event) -> c_int;
    pub fn rdma_ack_cm_event(e: *mut rdma_cm_event) -> c_int;
    pub fn rdma_set_option(
        id: *mut rdma_cm_id,
        level: c_int,
        name: c_int,
        val: *mut c_void,
        len: usize,
    ) -> c_int;
}

/// `ibv_post_send`.
///
/// # Safety
/// `qp` is a live QP of the drop-in; `wr` a valid list.
pub unsafe fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr) -> c_int {
    let mut bad = std::ptr::null_mut();
    // SAFETY: per the contract: the QP's context and its table are live.
    match unsafe { (*(*qp).context).ops.post_send } {
        Some(f) => unsafe { f(qp, wr, &mut bad) },
        None => libc::ENOSYS,
    }
}

/// `ibv_post_recv`.
///
/// # Safety
/// As [`post_send`].
pub unsafe fn post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr) -> c_int {
    let mut bad = std::ptr::null_mut();
    // SAFETY: per the contract.
    match unsafe { (*(*qp).context).ops.post_recv } {
        Some(f) => unsafe { f(qp, wr, &mut bad) },
        None => libc::ENOSYS,
    }
}

/// `ibv_poll_cq`: completions written into `wc`, or a negative value.
///
/// # Safety
/// `cq` is a live CQ of the drop-in.
pub unsafe fn poll_cq(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> c_int {
    // SAFETY: per the contract; `wc` has room for its length.
    match unsafe { (*(*cq).context).ops.poll_cq } {
        Some(f) => unsafe { f(cq, wc.len() as c_int, wc.as_mut_ptr()) },
        None => -1,
    }
}

/// `ibv_req_notify_cq(cq, 0)`.
///
/// # Safety
/// As [`poll_cq`].
pub unsafe fn req_notify_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: per the contract.
    match unsafe { (*(*cq).context).ops.req_notify_cq } {
        Some(f) => unsafe { f(cq, 0) },
        None => libc::ENOSYS,
    }
}

// the layouts this crate reads, as `<infiniband/verbs.h>` and
// `<rdma/rdma_cma.h>` (rdma-core 44+, LP64) have them
const _: () = {
    assert!(std::mem::size_of::<ibv_ah_attr>() == 32);
    assert!(std::mem::offset_of!(ibv_ah_attr, port_num) == 30);
    assert!(std::mem::offset_of!(ibv_qp, qp_num) == 52);
    assert!(std::mem::offset_of!(rdma_cm_id, ibaddr) == 288);
    assert!(std::mem::offset_of!(rdma_cm_id, port_num) == 348);
};
