//! Every symbol rdma-core 44's `libibverbs.so.1` exports, with its version.
//!
//! Names that exist in two versions (the IBVERBS_1.0 compat ABI and the
//! IBVERBS_1.1 default) are defined under internal names and bound with
//! `.symver`: `ibv_open_device@@IBVERBS_1.1` is the real verb,
//! `ibv_open_device@IBVERBS_1.0` the pre-2006 ABI, which roce-emu does not
//! implement (NULL/ENOSYS, see compat.rs). Single-version names are plain
//! `#[no_mangle]` functions placed in their version by `libibverbs.map`.

use crate::abi;
// (`verbs_context.query_port`; the fuzz harness calls it from here)
pub(crate) use crate::device::query_port_ex;
use crate::device::{self, check_port, ctx, gids};
use crate::util::{diag, fail, guard, guard_neg, guard_rc, set_errno};
use crate::{ah, context, cq, mr, qp, srq, strings};
use libc::{c_char, c_int, c_uint, c_void};
use std::mem::size_of;
use std::ptr;

// The .symver bindings (not in test builds: a test executable has no
// version nodes to bind to).
#[cfg(not(test))]
macro_rules! symver {
    ($($name:literal),* $(,)?) => {
        std::arch::global_asm!($(
            concat!(".symver roce_", $name, "_1_1, ", $name, "@@IBVERBS_1.1"),
            concat!(".symver roce_", $name, "_1_0, ", $name, "@IBVERBS_1.0"),
        )*);
    };
}
#[cfg(not(test))]
symver!(
    "ibv_ack_async_event",
    "ibv_ack_cq_events",
    "ibv_alloc_pd",
    "ibv_attach_mcast",
    "ibv_close_device",
    "ibv_create_ah",
    "ibv_create_cq",
    "ibv_create_qp",
    "ibv_create_srq",
    "ibv_dealloc_pd",
    "ibv_dereg_mr",
    "ibv_destroy_ah",
    "ibv_destroy_cq",
    "ibv_destroy_qp",
    "ibv_destroy_srq",
    "ibv_detach_mcast",
    "ibv_free_device_list",
    "ibv_get_async_event",
    "ibv_get_cq_event",
    "ibv_get_device_guid",
    "ibv_get_device_list",
    "ibv_get_device_name",
    "ibv_modify_qp",
    "ibv_modify_srq",
    "ibv_open_device",
    "ibv_query_device",
    "ibv_query_gid",
    "ibv_query_pkey",
    "ibv_query_port",
    "ibv_query_qp",
    "ibv_query_srq",
    "ibv_reg_mr",
    "ibv_resize_cq",
);
#[cfg(not(test))]
std::arch::global_asm!(".symver roce_ibv_register_driver, ibv_register_driver@IBVERBS_1.1");

// ---------------------------------------------------------------- devices

#[export_name = "roce_ibv_get_device_list_1_1"]
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut abi::ibv_device {
    device::get_device_list(num)
}
#[export_name = "roce_ibv_free_device_list_1_1"]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut abi::ibv_device) {
    device::free_device_list(list)
}
#[export_name = "roce_ibv_get_device_name_1_1"]
pub unsafe extern "C" fn ibv_get_device_name(d: *mut abi::ibv_device) -> *const c_char {
    device::get_device_name(d)
}
#[export_name = "roce_ibv_get_device_guid_1_1"]
pub unsafe extern "C" fn ibv_get_device_guid(d: *mut abi::ibv_device) -> u64 {
    device::get_device_guid(d)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(d: *mut abi::ibv_device) -> c_int {
    device::get_device_index(d)
}
#[export_name = "roce_ibv_open_device_1_1"]
pub unsafe extern "C" fn ibv_open_device(d: *mut abi::ibv_device) -> *mut abi::ibv_context {
    context::open_device(d)
}
#[export_name = "roce_ibv_close_device_1_1"]
pub unsafe extern "C" fn ibv_close_device(c: *mut abi::ibv_context) -> c_int {
    context::close_device(c)
}
#[export_name = "roce_ibv_query_device_1_1"]
pub unsafe extern "C" fn ibv_query_device(
    c: *mut abi::ibv_context,
    a: *mut abi::ibv_device_attr,
) -> c_int {
    device::query_device(c, a)
}
#[export_name = "roce_ibv_get_async_event_1_1"]
pub unsafe extern "C" fn ibv_get_async_event(
    c: *mut abi::ibv_context,
    e: *mut abi::ibv_async_event,
) -> c_int {
    device::get_async_event(c, e)
}
#[export_name = "roce_ibv_ack_async_event_1_1"]
pub unsafe extern "C" fn ibv_ack_async_event(e: *mut abi::ibv_async_event) {
    device::ack_async_event(e)
}

/// The exported `ibv_query_port` (older programs and the inline's fallback):
/// the `_compat_ibv_port_attr` prefix.
#[export_name = "roce_ibv_query_port_1_1"]
pub unsafe extern "C" fn ibv_query_port(
    c: *mut abi::ibv_context,
    port: u8,
    out: *mut abi::_compat_ibv_port_attr,
) -> c_int {
    query_port_ex(c, port, out.cast(), size_of::<abi::_compat_ibv_port_attr>())
}

#[export_name = "roce_ibv_query_gid_1_1"]
pub unsafe extern "C" fn ibv_query_gid(
    c: *mut abi::ibv_context,
    port: u8,
    index: c_int,
    gid: *mut abi::ibv_gid,
) -> c_int {
    guard_neg(|| {
        // SAFETY: contract of ibv_query_gid.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        check_port(port)?;
        if gid.is_null() || index < 0 || index as u32 >= cx.ctx.query_port().gid_tbl_len {
            return Err(libc::EINVAL);
        }
        // An empty entry reads as the zero GID, as the kernel's sysfs shows it.
        let g = gids(cx).get(index as usize).map_or([0u8; 16], |g| g.octets());
        // SAFETY: the caller's ibv_gid.
        unsafe { (*gid).raw = g };
        Ok(0)
    })
}

fn gid_entry(cx: &device::Ctx, index: u32) -> Option<abi::ibv_gid_entry> {
    let g = gids(cx).get(index as usize).copied()?;
    // SAFETY: plain C data.
    let mut e: abi::ibv_gid_entry = unsafe { std::mem::zeroed() };
    e.gid.raw = g.octets();
    e.gid_index = index;
    e.port_num = 1;
    e.gid_type = abi::IBV_GID_TYPE_ROCE_V2;
    e.ndev_ifindex = 1; // lo
    Some(e)
}

#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    c: *mut abi::ibv_context,
    port: u32,
    index: u32,
    entry: *mut abi::ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_query_gid_ex.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        if port != 1
            || flags != 0
            || entry.is_null()
            || entry_size < size_of::<abi::ibv_gid_entry>()
        {
            return Err(libc::EINVAL);
        }
        let e = gid_entry(cx, index).ok_or(libc::ENODATA)?;
        // SAFETY: the caller's entry.
        unsafe { entry.write(e) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    c: *mut abi::ibv_context,
    entries: *mut abi::ibv_gid_entry,
    max: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let n = guard(-(libc::EIO as isize), || {
        // SAFETY: contract of ibv_query_gid_table.
        let Some(cx) = (unsafe { ctx(c) }) else { return -(libc::EINVAL as isize) };
        if flags != 0
            || entry_size < size_of::<abi::ibv_gid_entry>()
            || (entries.is_null() && max > 0)
        {
            return -(libc::EINVAL as isize);
        }
        let n = gids(cx).len();
        if max < n {
            return -(libc::EINVAL as isize);
        }
        for i in 0..n {
            if let Some(e) = gid_entry(cx, i as u32) {
                // SAFETY: the caller's array of `max` entries of entry_size bytes.
                unsafe {
                    entries
                        .cast::<u8>()
                        .add(i * entry_size)
                        .cast::<abi::ibv_gid_entry>()
                        .write_unaligned(e)
                };
            }
        }
        n as isize
    });
    if n < 0 {
        // a negative errno, which is also left in errno
        fail(-n as i32);
    }
    n
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    c: *mut abi::ibv_context,
    port: u8,
    index: c_uint,
    ty: *mut c_int,
) -> c_int {
    guard_neg(|| {
        // SAFETY: contract of the private ibv_query_gid_type.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        check_port(port)?;
        gids(cx).get(index as usize).ok_or(libc::EINVAL)?;
        if !ty.is_null() {
            // SAFETY: the caller's out pointer. 1 = IBV_GID_TYPE_SYSFS_ROCE_V2.
            unsafe { *ty = 1 };
        }
        Ok(0)
    })
}

#[export_name = "roce_ibv_query_pkey_1_1"]
pub unsafe extern "C" fn ibv_query_pkey(
    c: *mut abi::ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard_neg(|| {
        // SAFETY: contract of ibv_query_pkey.
        unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        check_port(port)?;
        if index != 0 || pkey.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's out pointer (network order, like the kernel's).
        unsafe { *pkey = 0xffffu16.to_be() };
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    c: *mut abi::ibv_context,
    port: u8,
    pkey: u16,
) -> c_int {
    guard_neg(|| {
        // SAFETY: contract of ibv_get_pkey_index.
        unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        check_port(port)?;
        if u16::from_be(pkey) | 0x8000 == 0xffff {
            Ok(0)
        } else {
            Err(libc::ENOENT)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    c: *mut abi::ibv_context,
    attr: *mut abi::ibv_ah_attr,
    mac: *mut u8,
    vid: *mut u16,
) -> c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_resolve_eth_l2_from_gid.
        unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        if attr.is_null() || mac.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attr.
        let a = ah::ah_from_c(unsafe { &*attr })?;
        let m = roce_verbs_api::gid::mac_of(a.dgid);
        // SAFETY: the caller's 6-byte MAC buffer and VLAN out pointer.
        unsafe {
            ptr::copy_nonoverlapping(m.as_ptr(), mac, 6);
            if !vid.is_null() {
                *vid = 0xffff; // no VLAN
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------- PD / MR / MW

#[export_name = "roce_ibv_alloc_pd_1_1"]
pub unsafe extern "C" fn ibv_alloc_pd(c: *mut abi::ibv_context) -> *mut abi::ibv_pd {
    mr::alloc_pd(c)
}
#[export_name = "roce_ibv_dealloc_pd_1_1"]
pub unsafe extern "C" fn ibv_dealloc_pd(p: *mut abi::ibv_pd) -> c_int {
    mr::dealloc_pd(p)
}
#[export_name = "roce_ibv_reg_mr_1_1"]
pub unsafe extern "C" fn ibv_reg_mr(
    p: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut abi::ibv_mr {
    mr::reg_mr(p, addr, len, access)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    p: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut abi::ibv_mr {
    mr::reg_mr_iova(p, addr, len, iova, access)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    p: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut abi::ibv_mr {
    mr::reg_mr_iova2(p, addr, len, iova, access)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _p: *mut abi::ibv_pd,
    _off: u64,
    _len: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut abi::ibv_mr {
    diag!("ibv_reg_dmabuf_mr: dma-buf regions are not supported");
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}
#[export_name = "roce_ibv_dereg_mr_1_1"]
pub unsafe extern "C" fn ibv_dereg_mr(m: *mut abi::ibv_mr) -> c_int {
    mr::dereg_mr(m)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    m: *mut abi::ibv_mr,
    flags: c_int,
    p: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> c_int {
    mr::rereg_mr(m, flags, p, addr, len, access)
}

// ---------------------------------------------------------------- CQ

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    c: *mut abi::ibv_context,
) -> *mut abi::ibv_comp_channel {
    cq::create_comp_channel(c)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut abi::ibv_comp_channel) -> c_int {
    cq::destroy_comp_channel(ch)
}
#[export_name = "roce_ibv_create_cq_1_1"]
pub unsafe extern "C" fn ibv_create_cq(
    c: *mut abi::ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    ch: *mut abi::ibv_comp_channel,
    vec: c_int,
) -> *mut abi::ibv_cq {
    cq::create_cq(c, cqe, cq_context, ch, vec)
}
#[export_name = "roce_ibv_resize_cq_1_1"]
pub unsafe extern "C" fn ibv_resize_cq(c: *mut abi::ibv_cq, cqe: c_int) -> c_int {
    cq::resize_cq(c, cqe)
}
#[export_name = "roce_ibv_destroy_cq_1_1"]
pub unsafe extern "C" fn ibv_destroy_cq(c: *mut abi::ibv_cq) -> c_int {
    cq::destroy_cq(c)
}
#[export_name = "roce_ibv_get_cq_event_1_1"]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut abi::ibv_comp_channel,
    c: *mut *mut abi::ibv_cq,
    x: *mut *mut c_void,
) -> c_int {
    cq::get_cq_event(ch, c, x)
}
#[export_name = "roce_ibv_ack_cq_events_1_1"]
pub unsafe extern "C" fn ibv_ack_cq_events(c: *mut abi::ibv_cq, n: c_uint) {
    cq::ack_cq_events(c, n)
}

// ---------------------------------------------------------------- SRQ

#[export_name = "roce_ibv_create_srq_1_1"]
pub unsafe extern "C" fn ibv_create_srq(
    p: *mut abi::ibv_pd,
    a: *mut abi::ibv_srq_init_attr,
) -> *mut abi::ibv_srq {
    srq::create_srq(p, a)
}
#[export_name = "roce_ibv_modify_srq_1_1"]
pub unsafe extern "C" fn ibv_modify_srq(
    s: *mut abi::ibv_srq,
    a: *mut abi::ibv_srq_attr,
    mask: c_int,
) -> c_int {
    srq::modify_srq(s, a, mask)
}
#[export_name = "roce_ibv_query_srq_1_1"]
pub unsafe extern "C" fn ibv_query_srq(s: *mut abi::ibv_srq, a: *mut abi::ibv_srq_attr) -> c_int {
    srq::query_srq(s, a)
}
#[export_name = "roce_ibv_destroy_srq_1_1"]
pub unsafe extern "C" fn ibv_destroy_srq(s: *mut abi::ibv_srq) -> c_int {
    srq::destroy_srq(s)
}

// ---------------------------------------------------------------- QP

#[export_name = "roce_ibv_create_qp_1_1"]
pub unsafe extern "C" fn ibv_create_qp(
    p: *mut abi::ibv_pd,
    a: *mut abi::ibv_qp_init_attr,
) -> *mut abi::ibv_qp {
    qp::create_qp(p, a)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(q: *mut abi::ibv_qp) -> *mut abi::ibv_qp_ex {
    qp::qp_to_qp_ex(q)
}
#[export_name = "roce_ibv_query_qp_1_1"]
pub unsafe extern "C" fn ibv_query_qp(
    q: *mut abi::ibv_qp,
    a: *mut abi::ibv_qp_attr,
    mask: c_int,
    i: *mut abi::ibv_qp_init_attr,
) -> c_int {
    qp::query_qp(q, a, mask, i)
}
#[export_name = "roce_ibv_modify_qp_1_1"]
pub unsafe extern "C" fn ibv_modify_qp(
    q: *mut abi::ibv_qp,
    a: *mut abi::ibv_qp_attr,
    mask: c_int,
) -> c_int {
    qp::modify_qp(q, a, mask)
}
#[export_name = "roce_ibv_destroy_qp_1_1"]
pub unsafe extern "C" fn ibv_destroy_qp(q: *mut abi::ibv_qp) -> c_int {
    qp::destroy_qp(q)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(
    _q: *mut abi::ibv_qp,
    _op: abi::ibv_wr_opcode,
    _flags: u32,
) -> c_int {
    // Not promised: a retransmitted packet may rewrite bytes already placed.
    0
}
#[no_mangle]
pub unsafe extern "C" fn ibv_set_ece(_q: *mut abi::ibv_qp, _e: *mut abi::ibv_ece) -> c_int {
    fail(libc::EOPNOTSUPP)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_query_ece(_q: *mut abi::ibv_qp, _e: *mut abi::ibv_ece) -> c_int {
    fail(libc::EOPNOTSUPP)
}

// ---------------------------------------------------------------- AH

#[export_name = "roce_ibv_create_ah_1_1"]
pub unsafe extern "C" fn ibv_create_ah(
    p: *mut abi::ibv_pd,
    a: *mut abi::ibv_ah_attr,
) -> *mut abi::ibv_ah {
    ah::create_ah(p, a)
}
#[export_name = "roce_ibv_destroy_ah_1_1"]
pub unsafe extern "C" fn ibv_destroy_ah(a: *mut abi::ibv_ah) -> c_int {
    ah::destroy_ah(a)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    c: *mut abi::ibv_context,
    port: u8,
    wc: *mut abi::ibv_wc,
    grh: *mut abi::ibv_grh,
    a: *mut abi::ibv_ah_attr,
) -> c_int {
    ah::init_ah_from_wc_c(c, port, wc, grh, a)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    p: *mut abi::ibv_pd,
    wc: *mut abi::ibv_wc,
    grh: *mut abi::ibv_grh,
    port: u8,
) -> *mut abi::ibv_ah {
    ah::create_ah_from_wc(p, wc, grh, port)
}

// ---------------------------------------------------------------- multicast

#[export_name = "roce_ibv_attach_mcast_1_1"]
pub unsafe extern "C" fn ibv_attach_mcast(
    q: *mut abi::ibv_qp,
    gid: *const abi::ibv_gid,
    lid: u16,
) -> c_int {
    qp::mcast(q, gid, lid, true)
}
#[export_name = "roce_ibv_detach_mcast_1_1"]
pub unsafe extern "C" fn ibv_detach_mcast(
    q: *mut abi::ibv_qp,
    gid: *const abi::ibv_gid,
    lid: u16,
) -> c_int {
    qp::mcast(q, gid, lid, false)
}

// ---------------------------------------------------------------- strings, rates

#[no_mangle]
pub unsafe extern "C" fn ibv_wc_status_str(s: abi::ibv_wc_status) -> *const c_char {
    strings::wc_status_str(s)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_event_type_str(e: abi::ibv_event_type) -> *const c_char {
    strings::event_type_str(e)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_node_type_str(t: abi::ibv_node_type) -> *const c_char {
    strings::node_type_str(t)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_port_state_str(s: abi::ibv_port_state) -> *const c_char {
    strings::port_state_str(s)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_rate_to_mult(r: abi::ibv_rate) -> c_int {
    strings::rate_to_mult(r)
}
#[no_mangle]
pub unsafe extern "C" fn mult_to_ibv_rate(m: c_int) -> abi::ibv_rate {
    strings::mult_to_rate(m)
}
#[no_mangle]
pub unsafe extern "C" fn ibv_rate_to_mbps(r: abi::ibv_rate) -> c_int {
    strings::rate_to_mbps(r)
}
#[no_mangle]
pub unsafe extern "C" fn mbps_to_ibv_rate(m: c_int) -> abi::ibv_rate {
    strings::mbps_to_rate(m)
}

// ---------------------------------------------------------------- fork, sysfs

/// Fork is safe without it (no kernel pins our memory); a forked child
/// works on its own (`crate::fork`): its new objects work, inherited ones
/// fail with EINVAL/EIO. The handlers are installed with the device list;
/// this makes sure of them.
#[no_mangle]
pub unsafe extern "C" fn ibv_fork_init() -> c_int {
    crate::device::fork_install();
    0
}
#[no_mangle]
pub unsafe extern "C" fn ibv_is_fork_initialized() -> abi::ibv_fork_status {
    abi::IBV_FORK_UNNEEDED
}
#[no_mangle]
pub unsafe extern "C" fn ibv_dontfork_range(_b: *mut c_void, _s: usize) -> c_int {
    0
}
#[no_mangle]
pub unsafe extern "C" fn ibv_dofork_range(_b: *mut c_void, _s: usize) -> c_int {
    0
}
#[no_mangle]
pub unsafe extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    crate::util::cstr(b"/sys\0")
}
/// roce-emu has no sysfs entries: every read fails with ENOENT.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    _dir: *const c_char,
    _file: *const c_char,
    _buf: *mut c_char,
    _size: usize,
) -> c_int {
    set_errno(libc::ENOENT);
    -1
}
#[no_mangle]
pub unsafe extern "C" fn ibv_read_ibdev_sysfs_file(
    _buf: *mut c_char,
    _size: usize,
    _fmt: *const c_char,
) -> c_int {
    set_errno(libc::ENOENT);
    -1
}

// ---------------------------------------------------------------- import/export (shared contexts)

#[no_mangle]
pub unsafe extern "C" fn ibv_import_device(_fd: c_int) -> *mut abi::ibv_context {
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}
#[no_mangle]
pub unsafe extern "C" fn ibv_import_pd(_c: *mut abi::ibv_context, _h: u32) -> *mut abi::ibv_pd {
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_pd(_p: *mut abi::ibv_pd) {}
#[no_mangle]
pub unsafe extern "C" fn ibv_import_mr(_p: *mut abi::ibv_pd, _h: u32) -> *mut abi::ibv_mr {
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_mr(_m: *mut abi::ibv_mr) {}
#[no_mangle]
pub unsafe extern "C" fn ibv_import_dm(_c: *mut abi::ibv_context, _h: u32) -> *mut abi::ibv_dm {
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_dm(_d: *mut abi::ibv_dm) {}
