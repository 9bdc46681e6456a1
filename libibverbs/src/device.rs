//! Devices and contexts: the device list (`ibv_get_device_list`) and its
//! fork handlers, the context behind an `ibv_context` (`ibv_open_device`
//! and `ibv_close_device` are in `crate::context`, above the object files),
//! `ibv_query_device(_ex)`, `ibv_query_port`, GIDs and P_Keys, async events.
//!
//! Devices come from the project's configuration (`ROCE_EMU_DEVICES`, the
//! file named by `ROCE_EMU_CONFIG` or `~/.config/roce-emu/devices.conf`, see
//! docs/devices.md). With nothing configured the list is
//! `roce_host::DEFAULT_DEVICES`, so `ibv_devices` shows something on a bare machine.
//! A device's UDP socket is bound when it is first opened in the process.

use crate::abi;
use crate::handles::{self, Kind};
use crate::util::{diag, fill_cstr, guard_ptr, guard_rc, set_errno};
use roce_host::DeviceConfig;
use roce_verbs_api::gid::gid_table;
use roce_verbs_api::{AsyncEvent, AsyncEventChannel, Context, Device};
use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::{offset_of, size_of};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use std::time::Duration;

/// One device of the list. `ibv` must stay the first field: the program's
/// `struct ibv_device *` is a pointer to the entry.
#[repr(C)]
pub(crate) struct DevEntry {
    pub ibv: abi::ibv_device,
    pub cfg: DeviceConfig,
    pub index: usize,
    /// The opened device, shared by every context of this process, and
    /// the number of open contexts: the last `ibv_close_device` drops the
    /// device (its driver thread stops, its pcap is flushed, its socket
    /// closes).
    pub opened: Mutex<(Option<Device>, usize)>,
}

// SAFETY: the raw pointers inside `ibv_device` are all NULL (its `_ops` are
// unused); everything else is Sync.
unsafe impl Sync for DevEntry {}
// SAFETY: as above.
unsafe impl Send for DevEntry {}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process's device list, read once from the configuration.
pub(crate) fn devices() -> Result<&'static [&'static DevEntry], i32> {
    static LIST: OnceLock<Result<Vec<&'static DevEntry>, i32>> = OnceLock::new();
    let r = LIST.get_or_init(|| {
        fork_install();
        let cfgs = match DeviceConfig::load_all() {
            Ok(v) => v,
            Err(e) => {
                eprintln!("roce-emu libibverbs: device configuration: {e}");
                return Err(libc::EINVAL);
            }
        };
        Ok(cfgs
            .into_iter()
            .enumerate()
            .map(|(index, cfg)| {
                // SAFETY: ibv_device is plain old data (arrays, integers and
                // a struct of two function pointers, NULL when zeroed).
                let mut ibv: abi::ibv_device = unsafe { std::mem::zeroed() };
                ibv.node_type = abi::IBV_NODE_CA;
                ibv.transport_type = abi::IBV_TRANSPORT_IB;
                fill_cstr(&mut ibv.name, &cfg.name);
                fill_cstr(&mut ibv.dev_name, &format!("uverbs{index}"));
                fill_cstr(&mut ibv.dev_path, &format!("/sys/class/infiniband_verbs/uverbs{index}"));
                fill_cstr(&mut ibv.ibdev_path, &format!("/sys/class/infiniband/{}", cfg.name));
                let e: &'static DevEntry = Box::leak(Box::new(DevEntry {
                    ibv,
                    cfg,
                    index,
                    opened: Mutex::new((None, 0)),
                }));
                e
            })
            .collect())
    });
    match r {
        Ok(v) => Ok(v.as_slice()),
        Err(e) => Err(*e),
    }
}

/// The entry behind a program's `struct ibv_device *`.
pub(crate) fn entry(dev: *mut abi::ibv_device) -> Option<&'static DevEntry> {
    let list = devices().ok()?;
    list.iter().copied().find(|e| ptr::eq(&e.ibv, dev))
}

/// The node GUID (rxe's: the EUI-64 of the device MAC), host order.
pub(crate) fn node_guid(e: &DevEntry) -> u64 {
    roce_verbs_api::gid::node_guid(e.cfg.addr)
}

// ---------------------------------------------------------------- fork

/// A device's open state, locked.
type Opened = MutexGuard<'static, (Option<Device>, usize)>;

/// The locks held across a fork (by the forking thread): the open devices
/// and the handle table (the CM's, taken before them, its [`ForkHooks`]
/// hold).
struct Held {
    opened: Vec<(&'static DevEntry, Opened)>,
    table: handles::Table,
}

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// The fork handlers of the layer above the device list that keeps global
/// state of its own, the CM (`crate::rdmacm`), registered with
/// [`fork_register`] before it makes that state. The device list's
/// handlers run them around their own, so the locks are taken in the order
/// the library nests them (the CM's, the open devices, the handle table)
/// and the child is reset as one.
pub(crate) struct ForkHooks {
    /// Take the locks (before the fork, in the forking thread).
    pub prepare: fn(),
    /// Give them back (in the parent).
    pub parent: fn(),
    /// Reset the state and give the locks back (in the child).
    pub child: fn(),
}

static ABOVE: AtomicPtr<ForkHooks> = AtomicPtr::new(ptr::null_mut());

/// Register the CM's fork handlers (the first call does; the CM calls this
/// before it touches any of its state, so a fork finds either the handlers
/// or no state) and make sure the device list's are installed.
pub(crate) fn fork_register(h: &'static ForkHooks) {
    fork_install();
    if ABOVE.load(Ordering::Acquire).is_null() {
        ABOVE.store(ptr::from_ref(h).cast_mut(), Ordering::SeqCst);
    }
}

/// The registered [`ForkHooks`], if the CM was used.
fn above() -> Option<&'static ForkHooks> {
    // SAFETY: ABOVE is NULL or a `&'static ForkHooks` (fork_register).
    unsafe { ABOVE.load(Ordering::SeqCst).as_ref() }
}

/// Register the fork handlers (once per process; later calls do nothing):
/// when the device list is first read, by `ibv_fork_init`, and when the CM
/// registers its [`ForkHooks`].
pub(crate) fn fork_install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: three handlers of the right type, for the process's life
        // (they are functions of this library, which is never unloaded
        // while the program runs: libibverbs is not dlclose'd).
        let rc = unsafe {
            libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child))
        };
        if rc != 0 {
            diag!("pthread_atfork: {rc}: a forked child may find locks held");
        }
    });
}

extern "C" fn fork_prepare() {
    let r = std::panic::catch_unwind(|| {
        if let Some(h) = above() {
            (h.prepare)();
        }
        let opened: Vec<_> = devices()
            .unwrap_or(&[])
            .iter()
            .map(|e| (*e, e.opened.lock().unwrap_or_else(|p| p.into_inner())))
            .collect();
        let table = handles::lock();
        HELD.with(|h| *h.borrow_mut() = Some(Held { opened, table }));
    });
    if r.is_err() {
        HELD.with(|h| h.borrow_mut().take());
        if let Some(h) = above() {
            (h.parent)();
        }
    }
}

extern "C" fn fork_parent() {
    // the locks go back, as they were
    let _ = std::panic::catch_unwind(|| {
        if let Some(h) = above() {
            (h.parent)();
        }
        HELD.with(|h| h.borrow_mut().take())
    });
}

extern "C" fn fork_child() {
    let _ = std::panic::catch_unwind(|| {
        crate::fork::next_generation();
        let Some(mut held) = HELD.with(|h| h.borrow_mut().take()) else { return };
        let mut socks: Vec<(std::net::IpAddr, u16)> = Vec::new();
        let mut raw = false;
        for (e, g) in &mut held.opened {
            if let Some(d) = g.0.take() {
                match e.cfg.transport {
                    roce_host::TransportKind::Udp => socks.push((e.cfg.addr, e.cfg.port)),
                    _ => raw = true,
                }
                // its destructor would join the parent's threads and leave
                // the parent's device group: never run it
                std::mem::forget(d);
            }
            g.1 = 0;
        }
        held.table.forget_all();
        if let Some(h) = above() {
            (h.child)();
        }
        drop(held);
        crate::fork::close_inherited(&socks, raw);
    });
}

/// An opened device context. `v` must stay the first field; the program
/// holds `&v.context` (the `ibv_context` at the end of the
/// `verbs_context`).
#[repr(C)]
pub(crate) struct Ctx {
    pub v: abi::verbs_context,
    /// Fills the `ibv_wr_*` function table of a new QP of this context
    /// (`crate::qp_ex::fill`, which `crate::context::open_device` puts
    /// here: the table is above the QP code that creates the QP).
    pub fill_qp_ex: fn(&mut abi::ibv_qp_ex),
    pub dev: &'static DevEntry,
    pub ctx: Context,
    pub async_chan: AsyncEventChannel,
    /// The context's `cmd_fd`: `/dev/null`, opened for it (there is no
    /// kernel command file). A program may `dup` or `poll` it as it does a
    /// kernel device's; `ibv_import_device` of it is `EOPNOTSUPP` (pyverbs'
    /// `test_shared_pd` then skips, as on rxe 6.12).
    pub cmd_fd: Option<std::fs::File>,
    /// C objects by device handle, for events: CQs, QPs (by QPN), SRQs.
    pub cqs: Mutex<HashMap<u32, usize>>,
    pub qps: Mutex<HashMap<u32, usize>>,
    pub srqs: Mutex<HashMap<u32, usize>>,
}

/// The context behind a program's `struct ibv_context *`, if it is a live
/// context of this library (see [`crate::handles`]; None for NULL, a
/// closed context or anything else). Locks the handle table: not for
/// callers that hold it ([`ctx_unchecked`]).
///
/// # Safety
/// The context must not be closed by another thread while the reference
/// is used (libibverbs' rule: no verb races `ibv_close_device`).
pub(crate) unsafe fn ctx<'a>(c: *mut abi::ibv_context) -> Option<&'a Ctx> {
    if !handles::live(Kind::Ctx, c) {
        return None;
    }
    // SAFETY: live (checked just above), and per the contract.
    unsafe { ctx_unchecked(c) }
}

/// [`ctx`] without the table lookup.
///
/// # Safety
/// `c` must be a live context of this library (checked in the table by the
/// caller, or the context of a live object: objects are freed with it).
pub(crate) unsafe fn ctx_unchecked<'a>(c: *mut abi::ibv_context) -> Option<&'a Ctx> {
    if c.is_null() {
        return None;
    }
    let off = offset_of!(abi::verbs_context, context);
    // SAFETY: per the contract `c` is `&Ctx.v.context`; `v` is at offset 0
    // of the repr(C) Ctx, so stepping back `off` bytes gives the Ctx.
    Some(unsafe { &*((c as *mut u8).sub(off) as *const Ctx) })
}

impl Ctx {
    /// The `ibv_context *` the program uses.
    pub fn c(&self) -> *mut abi::ibv_context {
        ptr::addr_of!(self.v.context) as *mut abi::ibv_context
    }
}

// ---------------------------------------------------------------- list

pub(crate) unsafe extern "C" fn get_device_list(
    num: *mut libc::c_int,
) -> *mut *mut abi::ibv_device {
    guard_ptr(|| {
        let list = devices()?;
        let mut v: Vec<*mut abi::ibv_device> =
            list.iter().map(|e| ptr::addr_of!(e.ibv) as *mut abi::ibv_device).collect();
        if !num.is_null() {
            // SAFETY: the caller passes a valid int pointer or NULL.
            unsafe { *num = v.len() as libc::c_int };
        }
        v.push(ptr::null_mut());
        let b = v.into_boxed_slice();
        Ok(Box::into_raw(b) as *mut *mut abi::ibv_device)
    })
}

pub(crate) unsafe extern "C" fn free_device_list(list: *mut *mut abi::ibv_device) {
    if list.is_null() {
        return;
    }
    let _ = guard_rc(|| {
        // SAFETY: `list` came from get_device_list: a boxed slice whose
        // length is the number of non-NULL entries plus the NULL.
        unsafe {
            let mut n = 0;
            while !(*list.add(n)).is_null() {
                n += 1;
            }
            drop(Box::from_raw(ptr::slice_from_raw_parts_mut(list, n + 1)));
        }
        Ok(())
    });
}

pub(crate) unsafe extern "C" fn get_device_name(dev: *mut abi::ibv_device) -> *const libc::c_char {
    match entry(dev) {
        Some(e) => e.ibv.name.as_ptr(),
        None => {
            set_errno(libc::EINVAL);
            ptr::null()
        }
    }
}

pub(crate) unsafe extern "C" fn get_device_guid(dev: *mut abi::ibv_device) -> u64 {
    entry(dev).map_or(0, |e| node_guid(e).to_be())
}

pub(crate) unsafe extern "C" fn get_device_index(dev: *mut abi::ibv_device) -> libc::c_int {
    entry(dev).map_or(-1, |e| e.index as libc::c_int)
}

// ---------------------------------------------------------------- queries

/// The device attributes, rxe's values where roce-emu behaves like rxe.
pub(crate) fn device_attr(cx: &Ctx) -> abi::ibv_device_attr {
    let a = cx.ctx.query_device();
    // SAFETY: plain C data.
    let mut d: abi::ibv_device_attr = unsafe { std::mem::zeroed() };
    fill_cstr(&mut d.fw_ver, &a.fw_ver);
    let guid = node_guid(cx.dev);
    d.node_guid = guid.to_be();
    d.sys_image_guid = guid.to_be();
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = 0xffff_f000;
    d.vendor_id = 0x00ff_ffff; // rxe's RXE_VENDOR_ID
    d.vendor_part_id = 0;
    d.hw_ver = 0;
    d.max_qp = a.max_qp as _;
    d.max_qp_wr = a.max_qp_wr as _;
    d.device_cap_flags = (abi::IBV_DEVICE_BAD_PKEY_CNTR
        | abi::IBV_DEVICE_BAD_QKEY_CNTR
        | abi::IBV_DEVICE_AUTO_PATH_MIG
        | abi::IBV_DEVICE_CHANGE_PHY_PORT
        | abi::IBV_DEVICE_UD_AV_PORT_ENFORCE
        | abi::IBV_DEVICE_PORT_ACTIVE_EVENT
        | abi::IBV_DEVICE_SYS_IMAGE_GUID
        | abi::IBV_DEVICE_RC_RNR_NAK_GEN
        | abi::IBV_DEVICE_SRQ_RESIZE
        | abi::IBV_DEVICE_MEM_WINDOW
        | abi::IBV_DEVICE_MEM_MGT_EXTENSIONS
        | abi::IBV_DEVICE_MEM_WINDOW_TYPE_2B) as _;
    d.max_sge = a.max_sge as _;
    d.max_sge_rd = a.max_sge as _;
    d.max_cq = a.max_cq as _;
    d.max_cqe = a.max_cqe as _;
    d.max_mr = a.max_mr as _;
    d.max_pd = a.max_pd as _;
    d.max_qp_rd_atom = a.max_qp_rd_atom.into();
    d.max_ee_rd_atom = 0;
    d.max_res_rd_atom = (u32::from(a.max_qp_rd_atom).saturating_mul(a.max_qp)) as _;
    d.max_qp_init_rd_atom = a.max_qp_init_rd_atom.into();
    d.atomic_cap = abi::IBV_ATOMIC_HCA;
    d.max_mw = a.max_mw as _;
    d.max_ah = a.max_ah as _;
    d.max_srq = a.max_srq as _;
    d.max_srq_wr = a.max_srq_wr as _;
    d.max_srq_sge = a.max_srq_sge as _;
    d.max_mcast_grp = a.max_mcast_grp as _;
    d.max_mcast_qp_attach = a.max_mcast_qp_attach as _;
    d.max_total_mcast_qp_attach = a.max_total_mcast_qp_attach as _;
    d.max_pkeys = 1;
    d.local_ca_ack_delay = 15;
    d.phys_port_cnt = a.phys_port_cnt;
    d
}

pub(crate) unsafe extern "C" fn query_device(
    c: *mut abi::ibv_context,
    out: *mut abi::ibv_device_attr,
) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_query_device.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: out points to a caller-owned ibv_device_attr.
        unsafe { out.write(device_attr(cx)) };
        Ok(())
    })
}

/// The kernel's IB_ODP_SUPPORT_FLUSH and IB_ODP_SUPPORT_ATOMIC_WRITE (not
/// in rdma-core 44's enum; the values pass through as the kernel's).
const ODP_SUPPORT_FLUSH: u32 = 1 << 6;
const ODP_SUPPORT_ATOMIC_WRITE: u32 = 1 << 7;

pub(crate) unsafe extern "C" fn query_device_ex(
    c: *mut abi::ibv_context,
    _input: *const abi::ibv_query_device_ex_input,
    out: *mut abi::ibv_device_attr_ex,
    attr_size: usize,
) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_query_device_ex.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        if out.is_null() || attr_size < size_of::<abi::ibv_device_attr>() {
            return Err(libc::EINVAL);
        }
        // SAFETY: plain C data.
        let mut x: abi::ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        x.orig_attr = device_attr(cx);
        x.max_dm_size = 0;
        x.phys_port_cnt_ex = 1;
        // the 64-bit flags add what needs more than 32 bits: IBA 1.5's
        // FLUSH (global, persistent) and ATOMIC WRITE, which this device
        // executes (the kernel's IB_UVERBS_DEVICE_* bits 38..=40, as rxe
        // reports them from 6.2 on)
        x.device_cap_flags_ex = u64::from(x.orig_attr.device_cap_flags)
            | DEVICE_FLUSH_GLOBAL
            | DEVICE_FLUSH_PERSISTENT
            | DEVICE_ATOMIC_WRITE;
        x.raw_packet_caps = 0;
        // on-demand paging: what rxe reports (6.15: RC SEND, RECV, WRITE,
        // READ, ATOMIC, SRQ_RECV, FLUSH (64) and ATOMIC_WRITE (128); UD
        // SEND, RECV, SRQ_RECV), and IMPLICIT, which rxe lacks: the whole
        // address space is a region here too (ibv_reg_mr(pd, NULL,
        // SIZE_MAX, IBV_ACCESS_ON_DEMAND))
        x.odp_caps.general_caps = u64::from(abi::IBV_ODP_SUPPORT | abi::IBV_ODP_SUPPORT_IMPLICIT);
        let common = abi::IBV_ODP_SUPPORT_SEND | abi::IBV_ODP_SUPPORT_RECV;
        x.odp_caps.per_transport_caps.rc_odp_caps = common
            | abi::IBV_ODP_SUPPORT_WRITE
            | abi::IBV_ODP_SUPPORT_READ
            | abi::IBV_ODP_SUPPORT_ATOMIC
            | abi::IBV_ODP_SUPPORT_SRQ_RECV
            | ODP_SUPPORT_FLUSH
            | ODP_SUPPORT_ATOMIC_WRITE;
        x.odp_caps.per_transport_caps.ud_odp_caps = common | abi::IBV_ODP_SUPPORT_SRQ_RECV;
        x.odp_caps.per_transport_caps.uc_odp_caps = 0;
        // XRC (which rxe lacks): RC's, but receives come from XRC SRQs
        x.xrc_odp_caps = abi::IBV_ODP_SUPPORT_SEND
            | abi::IBV_ODP_SUPPORT_WRITE
            | abi::IBV_ODP_SUPPORT_READ
            | abi::IBV_ODP_SUPPORT_ATOMIC
            | abi::IBV_ODP_SUPPORT_SRQ_RECV;
        let n = attr_size.min(size_of::<abi::ibv_device_attr_ex>());
        // SAFETY: the caller's struct has attr_size bytes; we copy at most
        // that many (an older, smaller struct gets its prefix).
        unsafe {
            ptr::copy_nonoverlapping(ptr::addr_of!(x).cast::<u8>(), out.cast::<u8>(), n);
            if attr_size > n {
                ptr::write_bytes(out.cast::<u8>().add(n), 0, attr_size - n);
            }
        }
        Ok(())
    })
}

/// Port 1's attributes (RoCE: Ethernet link layer, no LIDs).
pub(crate) fn port_attr(cx: &Ctx) -> abi::ibv_port_attr {
    let p = cx.ctx.query_port();
    // SAFETY: plain C data.
    let mut a: abi::ibv_port_attr = unsafe { std::mem::zeroed() };
    a.state = abi::IBV_PORT_ACTIVE;
    a.max_mtu = p.max_mtu as u32;
    a.active_mtu = p.active_mtu as u32;
    a.gid_tbl_len = p.gid_tbl_len as _; // 1024 like rxe; 0 and 1 populated
    a.port_cap_flags = abi::IBV_PORT_CM_SUP | abi::IBV_PORT_IP_BASED_GIDS;
    a.max_msg_sz = p.max_msg_sz;
    a.bad_pkey_cntr = 0;
    a.qkey_viol_cntr = 0;
    a.pkey_tbl_len = p.pkey_tbl_len;
    a.lid = 0;
    a.sm_lid = 0;
    a.lmc = 0;
    a.max_vl_num = 1;
    a.sm_sl = 0;
    a.subnet_timeout = 0;
    a.init_type_reply = 0;
    a.active_width = 2; // 4X, as rxe reports
    a.active_speed = 32; // EDR (25 Gb/s per lane), rxe's IB_SPEED_EDR
    a.phys_state = 5; // LinkUp
    a.link_layer = abi::IBV_LINK_LAYER_ETHERNET as u8;
    a.flags = 0;
    a.port_cap_flags2 = 0;
    a
}

/// `verbs_context.query_port`: the full `ibv_port_attr` of `len` bytes.
pub(crate) unsafe extern "C" fn query_port_ex(
    c: *mut abi::ibv_context,
    port: u8,
    out: *mut abi::ibv_port_attr,
    len: usize,
) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_query_port.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        check_port(port)?;
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let a = port_attr(cx);
        let n = len.min(size_of::<abi::ibv_port_attr>());
        // SAFETY: the caller's struct has `len` bytes; we write at most n.
        unsafe { ptr::copy_nonoverlapping(ptr::addr_of!(a).cast::<u8>(), out.cast::<u8>(), n) };
        Ok(())
    })
}

pub(crate) fn check_port(port: u8) -> Result<(), i32> {
    if port == 1 {
        Ok(())
    } else {
        Err(libc::EINVAL)
    }
}

/// `_ibv_query_gid_ex` and friends: the GID table of the device (rxe's
/// layout: 0 the link-local GID from the MAC, 1 the RoCEv2 GID of the
/// address).
pub(crate) fn gids(cx: &Ctx) -> Vec<std::net::Ipv6Addr> {
    gid_table(cx.dev.cfg.addr).to_vec()
}

pub(crate) unsafe extern "C" fn get_async_event(
    c: *mut abi::ibv_context,
    ev: *mut abi::ibv_async_event,
) -> libc::c_int {
    crate::util::guard_neg(|| {
        // SAFETY: contract of ibv_get_async_event.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        if ev.is_null() {
            return Err(libc::EINVAL);
        }
        let nonblock = fd_nonblocking(cx.v.context.async_fd);
        loop {
            let e = if nonblock {
                cx.async_chan.try_get_event().ok_or(libc::EAGAIN)?
            } else {
                match cx.async_chan.get_event(Duration::from_secs(3600)) {
                    Some(e) => e,
                    None => continue,
                }
            };
            if let Some(out) = translate_event(cx, e) {
                // SAFETY: ev points to a caller-owned ibv_async_event.
                unsafe { ev.write(out) };
                return Ok(0);
            }
            // an event for an object destroyed meanwhile: skip it
        }
    })
}

fn translate_event(cx: &Ctx, e: AsyncEvent) -> Option<abi::ibv_async_event> {
    // SAFETY: plain C data.
    let mut out: abi::ibv_async_event = unsafe { std::mem::zeroed() };
    match e {
        AsyncEvent::CqErr(h) => {
            out.event_type = abi::IBV_EVENT_CQ_ERR;
            out.element.cq = *lock(&cx.cqs).get(&h.id())? as *mut abi::ibv_cq;
        }
        AsyncEvent::QpFatal(q) | AsyncEvent::QpLastWqeReached(q) | AsyncEvent::SqDrained(q) => {
            out.event_type = match e {
                AsyncEvent::QpFatal(_) => abi::IBV_EVENT_QP_FATAL,
                AsyncEvent::QpLastWqeReached(_) => abi::IBV_EVENT_QP_LAST_WQE_REACHED,
                _ => abi::IBV_EVENT_SQ_DRAINED,
            };
            out.element.qp = *lock(&cx.qps).get(&q.value())? as *mut abi::ibv_qp;
        }
        AsyncEvent::SrqLimitReached(h) => {
            out.event_type = abi::IBV_EVENT_SRQ_LIMIT_REACHED;
            out.element.srq = *lock(&cx.srqs).get(&h.id())? as *mut abi::ibv_srq;
        }
        AsyncEvent::PortActive => {
            out.event_type = abi::IBV_EVENT_PORT_ACTIVE;
            out.element.port_num = 1;
        }
    }
    Some(out)
}

pub(crate) unsafe extern "C" fn ack_async_event(_ev: *mut abi::ibv_async_event) {}

/// Whether `fd` has O_NONBLOCK (the program set it to poll the fd itself).
pub(crate) fn fd_nonblocking(fd: libc::c_int) -> bool {
    // SAFETY: F_GETFL on any fd number is harmless (EBADF at worst).
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// `IB_UVERBS_DEVICE_FLUSH_GLOBAL` in `device_cap_flags_ex`.
const DEVICE_FLUSH_GLOBAL: u64 = 1 << 38;
/// `IB_UVERBS_DEVICE_FLUSH_PERSISTENT`.
const DEVICE_FLUSH_PERSISTENT: u64 = 1 << 39;
/// `IB_UVERBS_DEVICE_ATOMIC_WRITE`.
const DEVICE_ATOMIC_WRITE: u64 = 1 << 40;
