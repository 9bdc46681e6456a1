//! Devices and contexts: `ibv_get_device_list`, `ibv_open_device`,
//! `ibv_query_device(_ex)`, `ibv_query_port`, GIDs and P_Keys, async events.
//!
//! Devices come from the project's configuration (`ROCE_EMU_DEVICES`, the
//! file named by `ROCE_EMU_CONFIG` or `~/.config/roce-emu/devices.conf`, see
//! docs/devices.md). With nothing configured the list is
//! `roce_verbs_api::udp::DEFAULT_DEVICES`, so `ibv_devices` shows something on a bare machine.
//! A device's UDP socket is bound when it is first opened in the process.

use crate::abi;
use crate::handles::{self, Kind};
use crate::util::{diag, fill_cstr, guard_ptr, guard_rc, set_errno};
use roce_verbs_api::udp::{gid_table, DeviceConfig};
use roce_verbs_api::{AsyncEvent, AsyncEventChannel, Context, Device};
use std::collections::HashMap;
use std::ffi::c_void;
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::{Mutex, OnceLock};
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
        crate::fork::install();
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
    roce_verbs_api::udp::node_guid(e.cfg.addr)
}

/// An opened device context. `v` must stay the first field; the program
/// holds `&v.context` (the `ibv_context` at the end of the
/// `verbs_context`).
#[repr(C)]
pub(crate) struct Ctx {
    pub v: abi::verbs_context,
    pub dev: &'static DevEntry,
    pub ctx: Context,
    pub async_chan: AsyncEventChannel,
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

// ---------------------------------------------------------------- open

pub(crate) unsafe extern "C" fn open_device(dev: *mut abi::ibv_device) -> *mut abi::ibv_context {
    guard_ptr(|| {
        let e = entry(dev).ok_or(libc::ENODEV)?;
        let device = {
            let mut o = lock(&e.opened);
            let d = match &o.0 {
                Some(d) => d.clone(),
                None => {
                    let d = e.cfg.open().map_err(|err| {
                        eprintln!("roce-emu libibverbs: cannot open {}: {err}", e.cfg.name);
                        libc::ENODEV
                    })?;
                    o.0 = Some(d.clone());
                    d
                }
            };
            o.1 += 1;
            d
        };
        let ctx = device.open();
        let async_chan = ctx.async_event_channel().map_err(|err| {
            diag!("async event channel: {err}");
            err.raw_os_error().unwrap_or(libc::ENOMEM)
        })?;
        // SAFETY: verbs_context is C data: pointers (NULL), function
        // pointers (None), integers and a pthread mutex, for which all
        // zero bytes is PTHREAD_MUTEX_INITIALIZER on glibc.
        let mut v: abi::verbs_context = unsafe { std::mem::zeroed() };
        v.sz = size_of::<abi::verbs_context>() as _;
        v.query_port = Some(crate::exports::query_port_ex);
        v.query_device_ex = Some(query_device_ex);
        v.create_cq_ex = Some(crate::cq::create_cq_ex);
        v.create_qp_ex = Some(crate::qp::create_qp_ex);
        v.get_srq_num = Some(crate::srq::get_srq_num);
        let c = &mut v.context;
        c.device = dev;
        c.cmd_fd = -1;
        c.async_fd = async_chan.as_raw_fd();
        c.num_comp_vectors = 1;
        c.abi_compat = usize::MAX as *mut c_void; // __VERBS_ABI_IS_EXTENDED
        let o = &mut c.ops;
        o.poll_cq = Some(crate::cq::poll_cq);
        o.req_notify_cq = Some(crate::cq::req_notify_cq);
        o.post_send = Some(crate::qp::post_send);
        o.post_recv = Some(crate::qp::post_recv);
        o.post_srq_recv = Some(crate::srq::post_srq_recv);
        o.alloc_mw = Some(crate::mr::alloc_mw);
        o.dealloc_mw = Some(crate::mr::dealloc_mw);
        o.bind_mw = Some(crate::mr::bind_mw);
        let b = Box::new(Ctx {
            v,
            dev: e,
            ctx,
            async_chan,
            cqs: Mutex::new(HashMap::new()),
            qps: Mutex::new(HashMap::new()),
            srqs: Mutex::new(HashMap::new()),
        });
        let p = Box::into_raw(b);
        // SAFETY: p is the box just leaked.
        let c = unsafe { (*p).c() };
        handles::insert(Kind::Ctx, c, c);
        Ok(c)
    })
}

pub(crate) unsafe extern "C" fn close_device(c: *mut abi::ibv_context) -> libc::c_int {
    guard_rc(|| {
        // The context and the objects left on it leave the table at once
        // (a second close, or a verb on one of its objects, is EINVAL from
        // here on); then they are freed, as the kernel destroys what a
        // closed context leaves.
        let children = {
            let mut t = handles::lock();
            if !t.remove(Kind::Ctx, c) {
                diag!("ibv_close_device: {c:p} is not an open context (closed already?)");
                return Err(libc::EINVAL);
            }
            t.remove_children(c)
        };
        if !children.is_empty() {
            diag!(
                "ibv_close_device: {} object(s) left on the context are destroyed",
                children.len()
            );
        }
        // QPs before what they use (the emulator's objects are reference
        // counted, so the order is for clarity, not for safety).
        for kind in
            [Kind::Qp, Kind::Ah, Kind::Mw, Kind::Mr, Kind::Srq, Kind::Cq, Kind::Chan, Kind::Pd]
        {
            for &(k, p) in &children {
                if k == kind {
                    // SAFETY: p was a live object of kind k of this context
                    // (just taken out of the table, so nothing else frees it).
                    unsafe { free_object(k, p) };
                }
            }
        }
        // SAFETY: c was live (taken out of the table just now): `&Ctx.v.context`
        // of the leaked box of open_device.
        let cx = unsafe { ctx_unchecked(c) }.ok_or(libc::EINVAL)?;
        let e = cx.dev;
        // SAFETY: cx is the leaked box of open_device; it left the table, so
        // this is its only free.
        drop(unsafe { Box::from_raw(cx as *const Ctx as *mut Ctx) });
        let last = {
            let mut o = lock(&e.opened);
            o.1 = o.1.saturating_sub(1);
            if o.1 == 0 {
                o.0.take()
            } else {
                None
            }
        };
        // the last context: the device goes (outside the lock; dropping it
        // stops its driver thread and flushes its capture)
        drop(last);
        Ok(())
    })
}

/// Free an object of a context being closed.
///
/// # Safety
/// `p` must be an object of `kind` this library created and that has just
/// left the handle table (so nothing else frees it).
unsafe fn free_object(kind: Kind, p: usize) {
    // SAFETY (each arm): per the contract, p is the leaked box of that kind.
    unsafe {
        match kind {
            Kind::Qp => drop(Box::from_raw(p as *mut crate::qp::QpObj)),
            Kind::Ah => drop(Box::from_raw(p as *mut crate::ah::AhObj)),
            Kind::Mw => drop(Box::from_raw(p as *mut crate::mr::MwObj)),
            Kind::Mr => drop(Box::from_raw(p as *mut crate::mr::MrObj)),
            Kind::Srq => drop(Box::from_raw(p as *mut crate::srq::SrqObj)),
            Kind::Cq => drop(Box::from_raw(p as *mut crate::cq::CqObj)),
            Kind::Chan => drop(Box::from_raw(p as *mut crate::cq::ChanObj)),
            Kind::Pd => drop(Box::from_raw(p as *mut crate::mr::PdObj)),
            Kind::Ctx => {}
        }
    }
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
        x.device_cap_flags_ex = u64::from(x.orig_attr.device_cap_flags);
        x.raw_packet_caps = 0;
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
