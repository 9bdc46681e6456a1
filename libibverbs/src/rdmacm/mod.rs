//! `librdmacm.so.1` for roce-emu: the RDMA connection manager's C ABI
//! (rdma-core 44, versions RDMACM_1.0 .. RDMACM_1.3) in the same library as
//! libibverbs, so an id's `verbs`, and the PD/CQ/QP the program hands to
//! `rdma_create_qp`, are this library's objects. build.rs installs
//! `librdmacm.so.1` as a link to `libibverbs.so`: the dynamic linker sees
//! one file and maps it once, with one global state.
//!
//! Each exported function is a thin translation to
//! [`roce_verbs_api::rdma_cm`]. Devices are the configured ones (as for
//! `ibv_get_device_list`), opened lazily: an id uses a device once it is
//! bound to its address, resolves an address through it, or listens on a
//! wildcard address (then on every device of the wildcard's family, see
//! `covers`: the shared devices, or those this process has open, or the
//! first device that can be opened). Ports are checked as the kernel's CM
//! checks them among the ids of this process (`check_port`: AFONLY,
//! REUSEADDR, wildcards). Without a source address,
//! `rdma_resolve_addr` picks a device other than the destination's (a
//! server process on this host holds that one): one this process has
//! open, else one that can be opened. Each device has one Rust
//! [`EventChannel`] for the whole process; a background pump thread (one
//! per process, running while an event channel exists) takes their events
//! every millisecond and queues each on the C channel of its id, whose fd
//! (an eventfd) then becomes readable.

pub mod abi;
mod exports;
mod mcast;

use crate::abi as v;
use crate::device::{self, DevEntry};
use crate::util::diag;
use roce_host::TransportKind;
use roce_verbs_api::rdma_cm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------- global state

/// What the CM keeps per configured device (index = `DevEntry::index`).
struct DevState {
    /// The CM's own context on the device (an `ibv_context` of this
    /// library, the `verbs` of every id on it), opened at first use.
    ctx: *mut v::ibv_context,
    /// The device's PD for `rdma_create_qp(id, NULL, ...)`.
    pd: *mut v::ibv_pd,
    /// The device's XRC domain for the XRC_RECV QPs and XRC SRQs of its ids
    /// (librdmacm's `ucma_get_xrcd`: one per device, private to the
    /// process), made at first use.
    xrcd: *mut v::ibv_xrcd,
    chan: Option<EventChannel>,
}

struct Global {
    devs: Vec<DevState>,
    /// Every Rust identifier and the C id it belongs to (`*mut IdObj`).
    ids: Vec<(CmId, usize)>,
    /// Live C event channels; the pump runs while there is one.
    chans: usize,
    pump: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

// SAFETY: the raw pointers are this library's objects, only used under the
// mutex or by the program that owns them.
unsafe impl Send for Global {}

fn global() -> MutexGuard<'static, Global> {
    lock(global_cell())
}

/// The CM's state (made on first use).
fn global_cell() -> &'static Mutex<Global> {
    static G: OnceLock<Mutex<Global>> = OnceLock::new();
    device::fork_register(&FORK_HOOKS);
    G.get_or_init(|| {
        let n = device::devices().map(|d| d.len()).unwrap_or(0);
        Mutex::new(Global {
            devs: (0..n)
                .map(|_| DevState {
                    ctx: ptr::null_mut(),
                    pd: ptr::null_mut(),
                    xrcd: ptr::null_mut(),
                    chan: None,
                })
                .collect(),
            ids: Vec::new(),
            chans: 0,
            pump: None,
        })
    })
}

fn entries() -> Result<&'static [&'static DevEntry], i32> {
    device::devices()
}

/// Whether the device is open in this process (by the program or the CM).
fn is_open(e: &DevEntry) -> bool {
    lock(&e.opened).0.is_some()
}

/// Whether the device could be opened: a UDP device's port is free (another
/// process may hold it). Asked without opening it, so nothing is printed.
fn can_open(e: &DevEntry) -> bool {
    if is_open(e) || roce_host::sharing_enabled() {
        return true;
    }
    match e.cfg.transport {
        TransportKind::Udp => std::net::UdpSocket::bind((e.cfg.addr, e.cfg.port)).is_ok(),
        _ => true,
    }
}

/// The CM's context and event channel of device `i`, opened on first use.
fn dev_open(i: usize) -> Result<(*mut v::ibv_context, EventChannel), i32> {
    let list = entries()?;
    let e = *list.get(i).ok_or(libc::ENODEV)?;
    let mut g = global();
    let d = &mut g.devs[i];
    if let Some(ch) = &d.chan {
        return Ok((d.ctx, ch.clone()));
    }
    // SAFETY: the entry's ibv_device is a device of this library's list.
    let c = unsafe { crate::context::open_device(ptr::addr_of!(e.ibv) as *mut v::ibv_device) };
    if c.is_null() {
        return Err(libc::ENODEV);
    }
    let dev = lock(&e.opened).0.clone().ok_or(libc::ENODEV)?;
    let ch = EventChannel::new(vec![dev]);
    d.ctx = c;
    d.chan = Some(ch.clone());
    drop(g);
    at_exit();
    Ok((c, ch))
}

/// The device whose address is `ip`.
fn dev_of_addr(ip: IpAddr) -> Option<usize> {
    let ip = canonical(ip);
    entries().ok()?.iter().position(|e| canonical(e.cfg.addr) == ip)
}

/// A loopback address (127.0.0.0/8, ::1) that no device has stands for the
/// first device, as the kernel's CM binds and resolves loopback addresses
/// to its first device: `localhost` works as with any kernel RDMA device
/// (libfabric's verbs provider binds it when given no address). Other
/// addresses are themselves.
fn loopback_to_first(ip: IpAddr) -> IpAddr {
    if dev_of_addr(ip).is_some() || !canonical(ip).is_loopback() {
        return ip;
    }
    entries().ok().and_then(|l| l.first().map(|e| e.cfg.addr)).unwrap_or(ip)
}

/// The device index of an `ibv_context` of this library.
fn dev_of_ctx(c: *mut v::ibv_context) -> Option<usize> {
    // SAFETY: the program passes a context of this library.
    unsafe { device::ctx(c) }.map(|cx| cx.dev.index)
}

/// Which device reaches `dst` when the program names no source. A
/// destination on one of this host's devices is reached from that device
/// itself, as the kernel's CM resolves a local address to the device that
/// owns it (devices are shared by the host's processes). Without sharing
/// (`ROCE_EMU_SHARED=0`): a device already open in this process (not the
/// destination's own: a peer process on this host holds that one), else
/// one that can be opened, else the destination's device itself.
fn choose_dev(dst: IpAddr) -> Option<usize> {
    let list = entries().ok()?;
    let d = dev_of_addr(dst);
    if d.is_some() && roce_host::sharing_enabled() {
        return d;
    }
    let others = || list.iter().filter(move |e| Some(e.index) != d);
    if let Some(e) = others().find(|e| is_open(e)) {
        return Some(e.index);
    }
    if let Some(e) = others().find(|e| can_open(e)) {
        return Some(e.index);
    }
    d.or_else(|| list.first().map(|e| e.index))
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

// ---------------------------------------------------------------- goodbyes

/// When an id last left a connection (destroy, disconnect, reject): the
/// DREQ/REJ it owes the peer is queued on the device and leaves with the
/// driver thread's next turn. The kernel sends it even after the process
/// exits; here the process must live that long, so exit (and closing the
/// CM's devices) waits until [`SETTLE`] has passed since then.
static LAST_GOODBYE: Mutex<Option<std::time::Instant>> = Mutex::new(None);
const SETTLE: Duration = Duration::from_millis(30);

pub(crate) fn note_goodbye() {
    *lock(&LAST_GOODBYE) = Some(std::time::Instant::now());
    at_exit();
}

/// At exit: wait for the goodbyes to leave, then close the CM's devices
/// (their pcaps are flushed). Registered once, when the CM opens a device
/// or says a goodbye.
fn at_exit() {
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| {
        extern "C" fn settle_at_exit() {
            crate::util::guard((), || {
                settle();
                close_cm_devices();
            });
        }
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(settle_at_exit) };
    });
}

/// Wait until the last goodbye had [`SETTLE`] to leave.
fn settle() {
    let last = *lock(&LAST_GOODBYE);
    if let Some(t) = last {
        let left = (t + SETTLE).saturating_duration_since(std::time::Instant::now());
        if !left.is_zero() {
            std::thread::sleep(left);
        }
    }
}

/// At exit, when no channel and no id is left: close the CM's contexts so
/// the devices it opened stop (their pcaps are flushed), unless the
/// program still has objects on them. Not before: as with librdmacm, a
/// context the CM gave out (`id->verbs`, `rdma_get_devices`) stays open
/// for the life of the process, whatever the program holds on it
/// (libfabric's verbs domain keeps a PD and MRs on one across its ids).
fn close_cm_devices() {
    type Taken = (*mut v::ibv_context, *mut v::ibv_pd, *mut v::ibv_xrcd, Option<EventChannel>);
    let taken: Vec<Taken> = {
        // (at exit another thread may be inside a CM call: then the
        // devices stay as they are rather than exit waiting for it)
        let mut g = match global_cell().try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        if g.chans != 0 || !g.ids.is_empty() {
            return;
        }
        g.devs
            .iter_mut()
            .filter(|d| !d.ctx.is_null())
            .map(|d| {
                (
                    std::mem::replace(&mut d.ctx, ptr::null_mut()),
                    std::mem::replace(&mut d.pd, ptr::null_mut()),
                    std::mem::replace(&mut d.xrcd, ptr::null_mut()),
                    d.chan.take(),
                )
            })
            .collect()
    };
    if taken.is_empty() {
        return;
    }
    settle();
    for (c, pd, xrcd, chan) in taken {
        drop(chan);
        // SAFETY: the CM's own XRC domain, PD and context; the checks
        // below keep a context the program still uses open.
        unsafe {
            if !xrcd.is_null() && crate::xrc::close_xrcd(xrcd) != 0 {
                continue;
            }
            if !pd.is_null() && crate::mr::dealloc_pd(pd) != 0 {
                continue;
            }
            let Some(cx) = device::ctx(c) else { continue };
            let busy = !lock(&cx.qps).is_empty()
                || !lock(&cx.cqs).is_empty()
                || !lock(&cx.srqs).is_empty();
            if !busy {
                crate::context::close_device(c);
            }
        }
    }
}

// ---------------------------------------------------------------- sockaddr

/// A C sockaddr (AF_INET / AF_INET6) as a Rust address.
///
/// # Safety
/// `sa` is NULL or points to a sockaddr of its family's size.
pub(crate) unsafe fn sockaddr_in(sa: *const libc::sockaddr) -> Result<Option<SocketAddr>, i32> {
    if sa.is_null() {
        return Ok(None);
    }
    // SAFETY: per the contract.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let s = &*(sa as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
                Ok(Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(s.sin_port)))))
            }
            libc::AF_INET6 => {
                let s = &*(sa as *const libc::sockaddr_in6);
                let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
                Ok(Some(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    u16::from_be(s.sin6_port),
                    s.sin6_flowinfo,
                    s.sin6_scope_id,
                ))))
            }
            libc::AF_UNSPEC => Ok(None),
            _ => Err(libc::EAFNOSUPPORT),
        }
    }
}

/// Write `a` into a sockaddr_storage.
pub(crate) fn put_sockaddr(out: &mut libc::sockaddr_storage, a: SocketAddr) {
    // SAFETY: sockaddr_storage is plain data.
    *out = unsafe { std::mem::zeroed() };
    let p = out as *mut libc::sockaddr_storage;
    match a {
        SocketAddr::V4(s) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: s.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*s.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and aligned.
            unsafe { (p as *mut libc::sockaddr_in).write(sin) };
        }
        SocketAddr::V6(s) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: s.port().to_be(),
                sin6_flowinfo: s.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: s.ip().octets() },
                sin6_scope_id: s.scope_id(),
            };
            // SAFETY: as above.
            unsafe { (p as *mut libc::sockaddr_in6).write(sin6) };
        }
    }
}

fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

// ---------------------------------------------------------------- channels

/// A C event channel. `c` first: the program's pointer is the box's.
#[repr(C)]
pub(crate) struct ChanObj {
    pub c: abi::rdma_event_channel,
    /// Events not yet taken by `rdma_get_cm_event` (`*mut EventObj`); the
    /// eventfd's counter equals the length (EFD_SEMAPHORE).
    q: Mutex<VecDeque<usize>>,
}

impl ChanObj {
    fn push(&self, ev: *mut EventObj) {
        let mut q = lock(&self.q);
        q.push_back(ev as usize);
        let one: u64 = 1;
        // SAFETY: writing 8 bytes to our eventfd.
        unsafe { libc::write(self.c.fd, ptr::addr_of!(one).cast(), 8) };
    }

    /// Take the first event (and one count of the eventfd).
    fn pop(&self) -> Option<*mut EventObj> {
        let mut q = lock(&self.q);
        let e = q.pop_front()?;
        let mut n: u64 = 0;
        // SAFETY: reading 8 bytes from our eventfd; its counter is at least
        // the queue length, so this does not block.
        unsafe { libc::read(self.c.fd, ptr::addr_of_mut!(n).cast(), 8) };
        Some(e as *mut EventObj)
    }

    /// Remove the queued events of id `id` (it is being destroyed or moved).
    fn take_events_of(&self, id: *mut IdObj) -> Vec<*mut EventObj> {
        let mut q = lock(&self.q);
        let mut out = Vec::new();
        q.retain(|&e| {
            // SAFETY: queued events are live boxes.
            let ev = unsafe { &*(e as *const EventObj) };
            let mine =
                ptr::eq(ev.c.id as *const IdObj, id) || ptr::eq(ev.c.listen_id as *const IdObj, id);
            if mine {
                let mut n: u64 = 0;
                // SAFETY: as in pop.
                unsafe { libc::read(self.c.fd, ptr::addr_of_mut!(n).cast(), 8) };
                out.push(e as *mut EventObj);
            }
            !mine
        });
        out
    }
}

pub(crate) fn new_channel() -> Result<*mut ChanObj, i32> {
    entries()?;
    let mut g = global();
    new_channel_locked(&mut g)
}

fn new_channel_locked(g: &mut Global) -> Result<*mut ChanObj, i32> {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
    if fd < 0 {
        return Err(crate::util::errno());
    }
    if g.pump.is_none() {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let h = roce_host::signals::spawn_quiet("roce-rdmacm-pump".into(), move || pump_loop(&s2))
            .map_err(|_| {
                // SAFETY: our eventfd.
                unsafe { libc::close(fd) };
                libc::ENOMEM
            })?;
        g.pump = Some((stop, h));
    }
    g.chans += 1;
    let b = Box::new(ChanObj { c: abi::rdma_event_channel { fd }, q: Mutex::new(VecDeque::new()) });
    let p = Box::into_raw(b);
    live_chans().insert(p as usize);
    Ok(p)
}

/// The channels this library made and the program has not destroyed (a
/// channel destroyed twice, or used after it was destroyed, is refused
/// instead of touching freed memory: perftest -R's error path destroys
/// its channel twice, and the second call waited forever on a freed lock).
fn live_chans() -> MutexGuard<'static, std::collections::HashSet<usize>> {
    static LIVE: OnceLock<Mutex<std::collections::HashSet<usize>>> = OnceLock::new();
    device::fork_register(&FORK_HOOKS);
    lock(LIVE.get_or_init(Default::default))
}

/// Whether `p` is a channel of this library that was not destroyed.
pub(crate) fn chan_live(p: *mut ChanObj) -> bool {
    live_chans().contains(&(p as usize))
}

/// # Safety
/// `p` is a channel of this library with no ids left on it (anything else
/// that is not a live channel is ignored).
pub(crate) unsafe fn destroy_channel(p: *mut ChanObj) {
    if !chan_live(p) {
        diag!("rdma_destroy_event_channel: not a live channel (destroyed already?)");
        return;
    }
    let pump = {
        let mut g = global();
        let used = g.ids.iter().any(|(_, c)| {
            // SAFETY: ids in the table are live.
            unsafe { ptr::eq((*(*c as *const IdObj)).c.channel as *const ChanObj, p) }
        });
        if used {
            diag!("rdma_destroy_event_channel: ids still use the channel; it is kept");
            return;
        }
        g.chans = g.chans.saturating_sub(1);
        if g.chans == 0 {
            g.pump.take()
        } else {
            None
        }
    };
    if let Some((stop, h)) = pump {
        stop.store(true, Ordering::Relaxed);
        if h.thread().id() != std::thread::current().id() {
            let _ = h.join();
        }
    }
    if !live_chans().remove(&(p as usize)) {
        return;
    }
    // SAFETY: per the contract, and it was live until just now.
    let b = unsafe { Box::from_raw(p) };
    for e in lock(&b.q).drain(..) {
        // SAFETY: queued events are live boxes nobody else holds.
        drop(unsafe { Box::from_raw(e as *mut EventObj) });
    }
    // SAFETY: our eventfd.
    unsafe { libc::close(b.c.fd) };
}

/// `rdma_get_cm_event`: the next event, blocking unless the program made
/// the fd non-blocking (then EAGAIN).
///
/// # Safety
/// `p` is a live channel of this library.
pub(crate) unsafe fn get_event(p: *mut ChanObj) -> Result<*mut EventObj, i32> {
    if !chan_live(p) {
        return Err(libc::EINVAL);
    }
    // SAFETY: per the contract, and checked live.
    let ch = unsafe { &*p };
    loop {
        if let Some(e) = ch.pop() {
            return Ok(e);
        }
        if device::fd_nonblocking(ch.c.fd) {
            return Err(libc::EAGAIN);
        }
        let mut pfd = libc::pollfd { fd: ch.c.fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, -1) };
        if r < 0 && crate::util::errno() != libc::EINTR {
            return Err(crate::util::errno());
        }
    }
}

// ---------------------------------------------------------------- ids

/// A C id. `c` first: the program's `rdma_cm_id *` is the box's pointer.
#[repr(C)]
pub(crate) struct IdObj {
    pub c: abi::rdma_cm_id,
    pub st: Mutex<IdSt>,
}

pub(crate) struct IdSt {
    pub ps: PortSpace,
    /// The Rust identifiers: one, or one per device when listening on a
    /// wildcard address; none before the id is bound to a device.
    pub rust: Vec<CmId>,
    /// The bound address before a device is known (wildcard bind).
    pub bound: Option<SocketAddr>,
    /// The channel was made for this (synchronous) id.
    pub own_chan: bool,
    /// CQs and completion channels made by `rdma_create_qp` for the id.
    pub own_cqs: bool,
    /// `rdma_create_ep` on a passive id: the QP attributes for the ids of
    /// `rdma_get_request`.
    pub ep_qp: Option<(*mut v::ibv_pd, v::ibv_qp_init_attr)>,
    /// Where the id is in the kernel's state machine, as far as the
    /// options and the port checks care.
    pub phase: Phase,
    /// The id holds its port (bound, listening or resolved by this
    /// process: the kernel's bind list); requests' ids do not.
    pub owner: bool,
    /// `RDMA_OPTION_ID_REUSEADDR` (cleared when the id listens).
    pub reuseaddr: bool,
    /// Listens are for the bound address family only: always for AF_INET,
    /// for AF_INET6 `RDMA_OPTION_ID_AFONLY` or the host's
    /// `net.ipv6.bindv6only` (decided at bind unless the option was set).
    pub afonly: bool,
    /// `RDMA_OPTION_ID_AFONLY` was set.
    pub afonly_set: bool,
    /// `RDMA_OPTION_ID_TOS`, handed to every Rust identifier of the id.
    pub tos: Option<u8>,
    /// `rdma_set_local_ece`: vendor ID and options (kept, not negotiated).
    pub local_ece: (u32, u32),
}

/// The kernel CM states the options and port checks tell apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// RDMA_CM_IDLE: just created.
    Idle,
    /// RDMA_CM_ADDR_BOUND: `rdma_bind_addr` done.
    Bound,
    /// RDMA_CM_LISTEN.
    Listen,
    /// Anything after: resolving, connecting, a request's id.
    Busy,
}

/// The ids this library made and the program has not destroyed. A program
/// that calls into librdmacm with an id it already destroyed (perftest -R
/// does, on its error path after a REJECTED) gets EINVAL, as the kernel's
/// ucma answers a stale id handle, instead of a read of freed memory.
fn live_ids() -> MutexGuard<'static, std::collections::HashSet<usize>> {
    static LIVE: OnceLock<Mutex<std::collections::HashSet<usize>>> = OnceLock::new();
    device::fork_register(&FORK_HOOKS);
    lock(LIVE.get_or_init(Default::default))
}

/// # Safety
/// `p` must be NULL or an id this library made; a destroyed one is
/// recognised and refused (`None`).
pub(crate) unsafe fn id<'a>(p: *mut abi::rdma_cm_id) -> Option<&'a IdObj> {
    if p.is_null() || !live_ids().contains(&(p as usize)) {
        return None;
    }
    // SAFETY: a live id of this library (checked just above).
    Some(unsafe { &*(p as *const IdObj) })
}

/// An XRC QP type (`IBV_QPT_XRC_SEND`, `IBV_QPT_XRC_RECV`).
pub(crate) fn is_xrc(t: u32) -> bool {
    t == v::IBV_QPT_XRC_SEND || t == v::IBV_QPT_XRC_RECV
}

pub(crate) fn ps_of(c: u32) -> Result<PortSpace, i32> {
    match c {
        abi::RDMA_PS_TCP => Ok(PortSpace::Tcp),
        abi::RDMA_PS_UDP => Ok(PortSpace::Udp),
        abi::RDMA_PS_IB => Ok(PortSpace::Ib),
        _ => {
            diag!(
                "rdma_create_id: port space {c:#x} not supported (RDMA_PS_TCP, RDMA_PS_UDP and RDMA_PS_IB are)"
            );
            Err(libc::EPROTONOSUPPORT)
        }
    }
}

pub(crate) fn new_id(
    chan: *mut ChanObj,
    context: *mut libc::c_void,
    ps: PortSpace,
    own_chan: bool,
) -> *mut IdObj {
    // SAFETY: rdma_cm_id is C data (pointers, integers, sockaddrs).
    let mut c: abi::rdma_cm_id = unsafe { std::mem::zeroed() };
    c.channel = chan as *mut abi::rdma_event_channel;
    c.context = context;
    c.ps = match ps {
        PortSpace::Tcp => abi::RDMA_PS_TCP,
        PortSpace::Udp => abi::RDMA_PS_UDP,
        PortSpace::Ib => abi::RDMA_PS_IB,
    };
    // (rdma_create_ep names another type for RDMA_PS_IB: XRC)
    c.qp_type = match ps {
        PortSpace::Tcp | PortSpace::Ib => v::IBV_QPT_RC,
        PortSpace::Udp => v::IBV_QPT_UD,
    };
    let st = IdSt {
        ps,
        rust: Vec::new(),
        bound: None,
        own_chan,
        own_cqs: false,
        ep_qp: None,
        phase: Phase::Idle,
        owner: false,
        reuseaddr: false,
        afonly: false,
        afonly_set: false,
        tos: None,
        local_ece: (0, 0),
    };
    let p = Box::into_raw(Box::new(IdObj { c, st: Mutex::new(st) }));
    live_ids().insert(p as usize);
    p
}

impl IdObj {
    pub fn ptr(&self) -> *mut IdObj {
        self as *const IdObj as *mut IdObj
    }

    /// The id's first Rust identifier.
    pub fn rust(&self) -> Option<CmId> {
        lock(&self.st).rust.first().cloned()
    }

    pub fn chan(&self) -> *mut ChanObj {
        self.c.channel as *mut ChanObj
    }

    /// Give the id a Rust identifier on device `i` (its `verbs` becomes the
    /// CM's context of the device).
    pub fn attach_rust(&self, i: usize) -> Result<CmId, i32> {
        let (ctx, ch) = dev_open(i)?;
        let (ps, tos) = {
            let st = lock(&self.st);
            (st.ps, st.tos)
        };
        let r = ch.create_id(ps);
        if let Some(t) = tos {
            r.set_tos(t);
        }
        r.set_xrc(is_xrc(self.c.qp_type));
        lock(&self.st).rust.push(r.clone());
        let pd = {
            let mut g = global();
            g.ids.push((r.clone(), self.ptr() as usize));
            dev_pd_locked(&mut g, i)?
        };
        let me = self.ptr();
        // SAFETY: the program does not use the id from another thread
        // while it binds or resolves it (as with librdmacm).
        unsafe {
            (*me).c.verbs = ctx;
            (*me).c.port_num = 1;
            if (*me).c.pd.is_null() {
                (*me).c.pd = pd;
            }
        }
        Ok(r)
    }

    /// Copy the Rust identifier's addresses into `route.addr`.
    pub fn sync_addrs(&self, r: &CmId) {
        let me = self.ptr();
        // SAFETY: as in attach_rust; the fields are plain data.
        unsafe {
            let a = &mut (*me).c.route.addr;
            if let Some(l) = r.local_addr() {
                put_sockaddr(&mut a.src_storage, l);
                a.ibaddr.sgid.raw = gid_of(l.ip());
            }
            if let Some(p) = r.peer_addr() {
                put_sockaddr(&mut a.dst_storage, p);
                a.ibaddr.dgid.raw = gid_of(p.ip());
            }
            a.ibaddr.pkey = 0xffffu16.to_be();
        }
    }
}

/// `rdma_destroy_id`: forget the id's Rust identifiers (leaving the
/// engine's tables), drop its queued events, free it.
///
/// # Safety
/// `p` is a live id of this library; the program gives it up.
pub(crate) unsafe fn destroy_id(p: *mut IdObj) {
    if !live_ids().remove(&(p as usize)) {
        return; // not ours, or destroyed already
    }
    // SAFETY: per the contract, and it was live until just now.
    let b = unsafe { Box::from_raw(p) };
    mcast::id_destroyed(p as usize);
    let rust: Vec<CmId> = {
        let mut g = global();
        g.ids.retain(|(_, c)| *c != p as usize);
        std::mem::take(&mut lock(&b.st).rust)
    };
    let ch = b.chan();
    if !ch.is_null() {
        // SAFETY: the id's channel outlives it.
        for e in unsafe { &*ch }.take_events_of(p) {
            // SAFETY: events taken from the queue are ours to free.
            let ev = unsafe { Box::from_raw(e) };
            let child = ev.c.id as *mut IdObj;
            if ev.c.event == CmEventKind::ConnectRequest.code() && !ptr::eq(child, p) {
                // a request of this listener the program never saw: its id
                // goes too (the requester gets a REJ)
                // SAFETY: the child was made for this event only.
                unsafe { destroy_id(child) };
            }
        }
    }
    if !rust.is_empty() {
        drop(rust);
        note_goodbye();
    }
    let own = lock(&b.st).own_chan;
    if own && !ch.is_null() {
        // SAFETY: the private channel of a synchronous id.
        unsafe { destroy_channel(ch) };
    }
}

// ---------------------------------------------------------------- events

/// An event handed to the program. `c` first.
#[repr(C)]
pub(crate) struct EventObj {
    pub c: abi::rdma_cm_event,
    pub data: Vec<u8>,
}

/// The size librdmacm reports for the private data of each event (the
/// fixed field of the CM message, less librdmacm's IP header in a REQ).
fn pdata_size(kind: CmEventKind, ps: PortSpace, ud: bool) -> Option<usize> {
    Some(match (kind, ps) {
        (CmEventKind::ConnectRequest, PortSpace::Tcp | PortSpace::Ib) => 92 - 36,
        (CmEventKind::ConnectRequest, PortSpace::Udp) => 216 - 36,
        (
            CmEventKind::ConnectResponse | CmEventKind::Established,
            PortSpace::Tcp | PortSpace::Ib,
        ) => 196,
        (CmEventKind::Established, PortSpace::Udp) if ud => 136,
        (CmEventKind::Rejected, _) => 148,
        _ => return None,
    })
}

fn make_event(ev: &CmEvent, id: *mut IdObj, listen: *mut IdObj, ps: PortSpace) -> *mut EventObj {
    let ud = ev.ud.is_some();
    let mut data = ev.param.private_data.clone();
    match pdata_size(ev.kind, ps, ud) {
        Some(n) if !data.is_empty() || ev.kind == CmEventKind::ConnectRequest => data.resize(n, 0),
        _ => {}
    }
    let len = data.len().min(255) as u8;
    let pd_ptr = if data.is_empty() { ptr::null() } else { data.as_ptr().cast() };
    // SAFETY: rdma_cm_event is C data.
    let mut c: abi::rdma_cm_event = unsafe { std::mem::zeroed() };
    c.id = id as *mut abi::rdma_cm_id;
    c.listen_id = listen as *mut abi::rdma_cm_id;
    c.event = ev.kind.code();
    c.status = ev.status;
    if let Some(u) = &ev.ud {
        c.param.ud = abi::rdma_ud_param {
            private_data: pd_ptr,
            private_data_len: len,
            ah_attr: crate::ah::ah_to_c(&u.ah),
            qp_num: u.qp_num,
            qkey: u.qkey,
        };
    } else {
        let p = &ev.param;
        c.param.conn = abi::rdma_conn_param {
            private_data: pd_ptr,
            private_data_len: len,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: 1,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: u8::from(p.srq),
            qp_num: p.qp_num.unwrap_or(0),
        };
    }
    // moving the Vec into the box keeps its heap buffer where pd_ptr points
    Box::into_raw(Box::new(EventObj { c, data }))
}

/// Queue an event the C layer makes itself (e.g. ADDR_ERROR).
pub(crate) fn push_local(idp: *mut IdObj, kind: CmEventKind, status: i32) {
    // SAFETY: idp is a live id.
    let o = unsafe { &*idp };
    // SAFETY: rdma_cm_event is C data.
    let mut c: abi::rdma_cm_event = unsafe { std::mem::zeroed() };
    c.id = idp as *mut abi::rdma_cm_id;
    c.event = kind.code();
    c.status = status;
    let e = Box::into_raw(Box::new(EventObj { c, data: Vec::new() }));
    let _g = global();
    // SAFETY: the id's channel is live.
    unsafe { &*o.chan() }.push(e);
}

fn find(g: &Global, r: &CmId) -> Option<*mut IdObj> {
    g.ids.iter().find(|(x, _)| x == r).map(|(_, p)| *p as *mut IdObj)
}

/// Hand one Rust event of device `dev` to its C id's channel.
fn route(dev: usize, ev: CmEvent) {
    diag!("rdma_cm: {} status {} on device {dev}", ev.kind, ev.status);
    let mut g = global();
    let ctx = g.devs[dev].ctx;
    if ev.kind == CmEventKind::ConnectRequest {
        let Some(l) = ev.listen_id.as_ref().and_then(|l| find(&g, l)) else {
            return; // the listener is gone: dropping the request rejects it
        };
        // SAFETY: l is a live id (ids are removed from the table before
        // they are freed, under this lock).
        let lo = unsafe { &*l };
        let (ps, sync) = {
            let st = lock(&lo.st);
            (st.ps, st.own_chan)
        };
        // librdmacm moves the request of a synchronous listener to a
        // private channel of its own (rdma_get_request)
        let chan = if sync {
            match new_channel_locked(&mut g) {
                Ok(c) => c,
                Err(_) => return,
            }
        } else {
            lo.chan()
        };
        let child = new_id(chan, lo.c.context, ps, sync);
        // SAFETY: child was just made; as librdmacm's ucma_process_conn_req,
        // the request's id has the listener's QP type (XRC_RECV for an
        // XRC listener).
        unsafe { (*child).c.qp_type = lo.c.qp_type };
        // SAFETY: child was just made.
        let co = unsafe { &*child };
        {
            let mut st = lock(&co.st);
            st.rust.push(ev.id.clone());
            st.phase = Phase::Busy;
        }
        let pd = dev_pd_locked(&mut g, dev).unwrap_or(ptr::null_mut());
        // SAFETY: as above; nobody else knows the child yet.
        unsafe {
            (*child).c.verbs = ctx;
            (*child).c.port_num = 1;
            (*child).c.pd = pd;
        }
        co.sync_addrs(&ev.id);
        g.ids.push((ev.id.clone(), child as usize));
        let e = make_event(&ev, child, l, ps);
        // SAFETY: the listener's channel is live.
        unsafe { &*lo.chan() }.push(e);
        let _ = chan;
        return;
    }
    let Some(idp) = find(&g, &ev.id) else {
        return; // destroyed meanwhile
    };
    // SAFETY: live, as above.
    let o = unsafe { &*idp };
    o.sync_addrs(&ev.id);
    let ps = lock(&o.st).ps;
    let e = make_event(&ev, idp, ptr::null_mut(), ps);
    // SAFETY: the id's channel is live.
    unsafe { &*o.chan() }.push(e);
}

fn pump_loop(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let chans: Vec<(usize, EventChannel)> = global()
            .devs
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.chan.clone().map(|c| (i, c)))
            .collect();
        for (i, ch) in chans {
            while let Some(ev) = ch.try_get_event() {
                route(i, ev);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ---------------------------------------------------------------- helpers for exports

/// The device's PD for `rdma_create_qp` with a NULL PD.
pub(crate) fn dev_pd(verbs: *mut v::ibv_context) -> Result<*mut v::ibv_pd, i32> {
    let i = dev_of_ctx(verbs).ok_or(libc::EINVAL)?;
    dev_pd_locked(&mut global(), i)
}

/// The device's XRC domain (see [`DevState::xrcd`]).
pub(crate) fn dev_xrcd(verbs: *mut v::ibv_context) -> Result<*mut v::ibv_xrcd, i32> {
    let i = dev_of_ctx(verbs).ok_or(libc::EINVAL)?;
    let mut g = global();
    let d = &mut g.devs[i];
    if d.xrcd.is_null() {
        if d.ctx.is_null() {
            return Err(libc::ENODEV);
        }
        let mut a = v::ibv_xrcd_init_attr {
            comp_mask: v::IBV_XRCD_INIT_ATTR_FD | v::IBV_XRCD_INIT_ATTR_OFLAGS,
            fd: -1,
            oflags: libc::O_CREAT,
        };
        // SAFETY: the CM's live context of the device, our attributes.
        let x = unsafe { crate::xrc::open_xrcd(d.ctx, &mut a) };
        if x.is_null() {
            return Err(crate::util::errno());
        }
        d.xrcd = x;
    }
    Ok(d.xrcd)
}

/// The PD librdmacm gives every id of a device (`id->pd`, which
/// `rdma_reg_msgs` and `rdma_create_qp(id, NULL, ...)` use).
fn dev_pd_locked(g: &mut Global, i: usize) -> Result<*mut v::ibv_pd, i32> {
    let d = &mut g.devs[i];
    if d.pd.is_null() {
        if d.ctx.is_null() {
            return Err(libc::ENODEV);
        }
        // SAFETY: the CM's live context of the device.
        let p = unsafe { crate::mr::alloc_pd(d.ctx) };
        if p.is_null() {
            return Err(libc::ENOMEM);
        }
        d.pd = p;
    }
    Ok(d.pd)
}

// ---------------------------------------------------------------- ports

/// The kernel's range of ephemeral ports (`net.ipv4.ip_local_port_range`,
/// which the kernel's CM allocates from as well), read once.
fn local_port_range() -> (u16, u16) {
    static R: OnceLock<(u16, u16)> = OnceLock::new();
    *R.get_or_init(|| {
        let read = || -> Option<(u16, u16)> {
            let t = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
            let mut it = t.split_whitespace().map(|x| x.parse::<u16>().ok());
            let (lo, hi) = (it.next()??, it.next()??);
            (lo > 0 && lo <= hi).then_some((lo, hi))
        };
        read().unwrap_or((32768, 60999))
    })
}

/// The ports of port space `ps` that this process's ids hold: bound
/// (to a device's address or the wildcard), listening, or resolved.
fn ports_in_use(ps: PortSpace) -> std::collections::HashSet<u16> {
    let live = live_ids();
    let mut used = std::collections::HashSet::new();
    for &p in live.iter() {
        // SAFETY: an id is removed from the live set (under its lock, held
        // here) before it is freed, so every member is a live IdObj. Lock
        // order: live set, then an id's state, then its Rust identifier;
        // nothing takes them the other way round.
        let o = unsafe { &*(p as *const IdObj) };
        let st = lock(&o.st);
        if st.ps != ps {
            continue;
        }
        used.extend(st.bound.map(|b| b.port()));
        used.extend(st.rust.iter().filter_map(|r| r.local_addr()).map(|a| a.port()));
    }
    used.remove(&0);
    used
}

/// An ephemeral port for an id of port space `ps`, as the kernel's CM
/// picks one when a program binds port 0 (or resolves or listens without
/// binding): from the local port range, starting at a random place, and
/// none that another id of this process holds in that port space.
/// EADDRNOTAVAIL when every port of the range is held (the kernel's answer).
pub(crate) fn ephemeral_port(ps: PortSpace) -> Result<u16, i32> {
    use std::hash::{BuildHasher, Hasher};
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let (lo, hi) = local_port_range();
    let n = u32::from(hi - lo) + 1;
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(SEQ.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    let start = (h.finish() % u64::from(n)) as u32;
    let used = ports_in_use(ps);
    (0..n)
        .map(|k| lo + ((start + k) % n) as u16)
        .find(|p| !used.contains(p))
        .ok_or(libc::EADDRNOTAVAIL)
}

/// The host's `net.ipv6.bindv6only` (0 unless set): whether an AF_INET6 id
/// without `RDMA_OPTION_ID_AFONLY` is for IPv6 only, as the kernel's CM
/// decides at bind. Read once.
fn bindv6only() -> bool {
    static V: OnceLock<bool> = OnceLock::new();
    *V.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only").is_ok_and(|t| t.trim() == "1")
    })
}

/// The address an id holds in its port space (the kernel's bind list):
/// the bound one (a wildcard stays a wildcard while the id listens on
/// every device), else its device's.
fn owner_addr(st: &IdSt) -> Option<SocketAddr> {
    if !st.owner {
        return None;
    }
    st.bound.or_else(|| st.rust.first().and_then(|r| r.local_addr()))
}

/// Whether `a` and `b` are the same address of the same family.
fn same_addr(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4() && a == b
}

/// The kernel CM's `cma_check_port`: may id `me` (of port space `ps`,
/// with `afonly`) hold `addr` next to the ids of this process that hold
/// its port? Skipped: ids that both allow reuse (`reuseaddr`, the caller's
/// and theirs), and two afonly ids of different families. Otherwise a
/// wildcard on either side is EADDRNOTAVAIL, the same address EADDRINUSE.
/// `live` is the set of live ids, held by the caller (so that a check and
/// the claim that follows it are one step).
fn check_port(
    live: &std::collections::HashSet<usize>,
    me: *const IdObj,
    ps: PortSpace,
    addr: SocketAddr,
    afonly: bool,
    reuseaddr: bool,
) -> Result<(), i32> {
    for &p in live.iter() {
        if p == me as usize {
            continue;
        }
        // SAFETY: members of the live set are live ids (see ports_in_use);
        // lock order: the live set, then an id's state.
        let o = unsafe { &*(p as *const IdObj) };
        let st = lock(&o.st);
        let Some(cur) = owner_addr(&st) else { continue };
        if st.ps != ps || cur.port() != addr.port() {
            continue;
        }
        if reuseaddr && st.reuseaddr {
            continue;
        }
        if afonly && st.afonly && addr.is_ipv4() != cur.is_ipv4() {
            continue;
        }
        if addr.ip().is_unspecified() || cur.ip().is_unspecified() {
            diag!("rdma_cm: port {} of {addr} is held by an id on {cur}", addr.port());
            return Err(libc::EADDRNOTAVAIL);
        }
        if same_addr(addr.ip(), cur.ip()) {
            diag!("rdma_cm: {addr} is held by another id");
            return Err(libc::EADDRINUSE);
        }
    }
    Ok(())
}

/// The afonly an id gets when it binds to an address of `addr`'s family
/// (unless `RDMA_OPTION_ID_AFONLY` set it): AF_INET always, AF_INET6 per
/// `net.ipv6.bindv6only`.
fn afonly_for(st: &IdSt, addr: SocketAddr) -> bool {
    match st.afonly_set {
        true => st.afonly,
        false => addr.is_ipv4() || bindv6only(),
    }
}

/// Check `addr` for the id and, if it may have it, record it as the id's
/// (bound, holding its port), in one step.
fn claim(o: &IdObj, addr: SocketAddr) -> Result<(), i32> {
    let live = live_ids();
    let (ps, afonly, reuse) = {
        let st = lock(&o.st);
        (st.ps, afonly_for(&st, addr), st.reuseaddr)
    };
    check_port(&live, o, ps, addr, afonly, reuse)?;
    let mut st = lock(&o.st);
    st.afonly = afonly;
    st.bound = Some(addr);
    st.owner = true;
    st.phase = Phase::Bound;
    Ok(())
}

/// Undo a [`claim`] whose bind failed after it.
fn unclaim(o: &IdObj) {
    let mut st = lock(&o.st);
    st.bound = None;
    st.owner = false;
    st.phase = Phase::Idle;
}

/// Bind the id to `addr` (`rdma_bind_addr`); port 0 takes an
/// [`ephemeral_port`], which `rdma_get_src_port` reports from then on. A
/// port other ids of this process hold fails as the kernel's CM fails it
/// ([`check_port`]).
pub(crate) fn bind(o: &IdObj, addr: SocketAddr) -> Result<(), i32> {
    let ps = {
        let st = lock(&o.st);
        if !st.rust.is_empty() || st.bound.is_some() || st.phase != Phase::Idle {
            return Err(libc::EINVAL);
        }
        st.ps
    };
    let mut addr = addr;
    if addr.port() == 0 {
        addr.set_port(ephemeral_port(ps)?);
    }
    if addr.ip().is_unspecified() {
        claim(o, addr)?;
        // A wildcard listen covers every device of its family, as the
        // kernel's does; open them now (joining a shared device takes a
        // probe round) so that rdma_listen only registers the listener:
        // programs such as qperf publish the port after rdma_bind_addr and
        // listen just after, and a request that beats the listen is
        // rejected (as by the kernel's CM, whose devices are always open).
        if roce_host::sharing_enabled() {
            for i in 0..entries()?.len() {
                if let Err(e) = dev_open(i) {
                    diag!(
                        "rdma_bind_addr: cannot open device {i} for a wildcard address: errno {e}"
                    );
                }
            }
        }
        // SAFETY: plain data of the program's id.
        unsafe { put_sockaddr(&mut (*o.ptr()).c.route.addr.src_storage, addr) };
        return Ok(());
    }
    let addr = SocketAddr::new(loopback_to_first(addr.ip()), addr.port());
    let i = dev_of_addr(addr.ip()).ok_or_else(|| {
        diag!("rdma_bind_addr: no configured device has address {}", addr.ip());
        libc::EADDRNOTAVAIL
    })?;
    claim(o, addr)?;
    let r = match o.attach_rust(i) {
        Ok(r) => r,
        Err(e) => {
            unclaim(o);
            return Err(e);
        }
    };
    r.bind_addr(addr).map_err(|e| e.errno())?;
    o.sync_addrs(&r);
    Ok(())
}

/// `rdma_resolve_addr`.
pub(crate) fn resolve_addr(o: &IdObj, src: Option<SocketAddr>, dst: SocketAddr) -> Result<(), i32> {
    let dst = SocketAddr::new(loopback_to_first(dst.ip()), dst.port());
    let src = src.map(|s| SocketAddr::new(loopback_to_first(s.ip()), s.port()));
    let existing = o.rust();
    let r = match existing {
        Some(r) => r,
        None => {
            let (bound, ps) = {
                let st = lock(&o.st);
                (st.bound, st.ps)
            };
            let src_ip = src.map(|s| s.ip()).filter(|ip| !ip.is_unspecified());
            let i = match src_ip {
                Some(ip) => dev_of_addr(ip).ok_or(libc::EADDRNOTAVAIL)?,
                None => choose_dev(dst.ip()).ok_or(libc::ENODEV)?,
            };
            let ip = entries()?[i].cfg.addr;
            let port = match bound.map(|b| b.port()).or(src.map(|s| s.port())) {
                Some(p) if p != 0 => {
                    // a port the program names: checked as a bind (the
                    // kernel binds the unbound id here)
                    if bound.is_none() {
                        let live = live_ids();
                        let (afonly, reuse) = {
                            let st = lock(&o.st);
                            (afonly_for(&st, SocketAddr::new(ip, p)), st.reuseaddr)
                        };
                        check_port(&live, o, ps, SocketAddr::new(ip, p), afonly, reuse)?;
                    }
                    p
                }
                // the kernel binds an unbound id to an ephemeral port here
                _ => ephemeral_port(ps)?,
            };
            let r = o.attach_rust(i)?;
            r.bind_addr(SocketAddr::new(ip, port)).map_err(|e| e.errno())?;
            let mut st = lock(&o.st);
            if !st.owner {
                st.afonly = afonly_for(&st, SocketAddr::new(ip, port));
                st.owner = true;
            }
            r
        }
    };
    lock(&o.st).phase = Phase::Busy;
    r.resolve_addr(None, dst).map_err(|e| e.errno())?;
    o.sync_addrs(&r);
    Ok(())
}

/// Whether a wildcard listen of an id bound to `bound` covers device `e`:
/// an IPv4 wildcard the IPv4 devices, an IPv6 one with afonly the IPv6
/// devices, an IPv6 one without it every device (the kernel's CM listens
/// on every device and matches a request's IP version with the
/// listener's family: here a device has one address, and a request's IP
/// version is its device's family).
fn covers(bound: SocketAddr, afonly: bool, e: &DevEntry) -> bool {
    let v4 = canonical(e.cfg.addr).is_ipv4();
    match bound {
        SocketAddr::V4(_) => v4,
        SocketAddr::V6(_) => !afonly || !v4,
    }
}

/// `rdma_listen`. An id nobody bound listens on the wildcard address and
/// an ephemeral port, as the kernel's CM binds it. An id that allows reuse
/// is checked against every other holder of its port first (the kernel:
/// a listening id is unique in its bind list) and allows it no longer.
pub(crate) fn listen(o: &IdObj) -> Result<(), i32> {
    let unbound = lock(&o.st).phase == Phase::Idle;
    if unbound {
        bind(o, SocketAddr::from(([0, 0, 0, 0], 0)))?;
    }
    {
        let live = live_ids();
        let mut st = lock(&o.st);
        if st.phase != Phase::Bound {
            return Err(libc::EINVAL);
        }
        if st.reuseaddr {
            let (ps, afonly) = (st.ps, st.afonly);
            let addr = owner_addr(&st).ok_or(libc::EINVAL)?;
            drop(st);
            check_port(&live, o, ps, addr, afonly, false)?;
            st = lock(&o.st);
            st.reuseaddr = false;
        }
        st.phase = Phase::Listen;
    }
    let r = listen_devices(o);
    if r.is_err() {
        lock(&o.st).phase = Phase::Bound;
    }
    r
}

/// The engine's listeners of a bound id: on its device, or on every
/// device of the wildcard's family.
fn listen_devices(o: &IdObj) -> Result<(), i32> {
    if let Some(r) = o.rust() {
        diag!("rdma_listen: on the id's device ({:?})", r.local_addr());
        return r.listen().map_err(|e| e.errno());
    }
    let (bound, afonly) = {
        let st = lock(&o.st);
        (st.bound.ok_or(libc::EINVAL)?, st.afonly)
    };
    // a wildcard address: every device of its family (shared devices, as
    // the kernel's CM); without sharing, the devices this process has
    // open, else the first device that can be opened (not all of them: a
    // client process on this host needs one too; bind an address to
    // choose the device)
    let list = entries()?;
    let fam = |e: &&&DevEntry| covers(bound, afonly, e);
    let mut devs: Vec<usize> = match roce_host::sharing_enabled() {
        true => {
            list.iter().filter(fam).filter(|e| dev_open(e.index).is_ok()).map(|e| e.index).collect()
        }
        false => list.iter().filter(fam).filter(|e| is_open(e)).map(|e| e.index).collect(),
    };
    if devs.is_empty() {
        devs = list.iter().filter(fam).find(|e| can_open(e)).map(|e| e.index).into_iter().collect();
    }
    if devs.is_empty() {
        diag!("rdma_listen: no device for {bound} (afonly {afonly})");
        return Err(libc::ENODEV);
    }
    let mut made: Vec<CmId> = Vec::new();
    for i in devs {
        let ip = list[i].cfg.addr;
        let r = o.attach_rust(i).and_then(|r| {
            made.push(r.clone());
            r.bind_addr(SocketAddr::new(ip, bound.port())).map_err(|e| e.errno())?;
            r.listen().map_err(|e| e.errno())?;
            Ok(r)
        });
        if let Err(e) = r {
            // leave none of this call's listeners behind
            lock(&o.st).rust.retain(|x| !made.contains(x));
            global().ids.retain(|(x, _)| !made.contains(x));
            return Err(e);
        }
        diag!("rdma_listen: {ip}:{} (device {i})", bound.port());
    }
    Ok(())
}

/// `rdma_set_option(RDMA_OPTION_ID_REUSEADDR)`, as the kernel's
/// `rdma_set_reuseaddr`: on an idle id, or switched on for an id that
/// does not listen (EINVAL otherwise).
pub(crate) fn set_reuseaddr(o: &IdObj, reuse: bool) -> Result<(), i32> {
    let _live = live_ids();
    let mut st = lock(&o.st);
    if (reuse && st.phase != Phase::Listen) || st.phase == Phase::Idle {
        st.reuseaddr = reuse;
        return Ok(());
    }
    diag!("rdma_set_option(REUSEADDR, {reuse}): not on an id in state {:?}", st.phase);
    Err(libc::EINVAL)
}

/// `rdma_set_option(RDMA_OPTION_ID_AFONLY)`, as the kernel's
/// `rdma_set_afonly`: before the id listens or resolves (EINVAL after).
pub(crate) fn set_afonly(o: &IdObj, afonly: bool) -> Result<(), i32> {
    let _live = live_ids();
    let mut st = lock(&o.st);
    if matches!(st.phase, Phase::Idle | Phase::Bound) {
        st.afonly = afonly;
        st.afonly_set = true;
        return Ok(());
    }
    diag!("rdma_set_option(AFONLY, {afonly}): not on an id in state {:?}", st.phase);
    Err(libc::EINVAL)
}

/// `rdma_set_option(RDMA_OPTION_ID_TOS)` (`rdma_set_service_type`): kept
/// for the id and its Rust identifiers, present and future (any state, as
/// the kernel's; it matters for the path `rdma_connect` sends).
pub(crate) fn set_tos(o: &IdObj, tos: u8) {
    let mut st = lock(&o.st);
    st.tos = Some(tos);
    for r in &st.rust {
        r.set_tos(tos);
    }
}

/// A C `rdma_conn_param` (NULL: librdmacm's defaults) as the Rust one.
///
/// # Safety
/// `p` is NULL or a caller's conn param whose private data is readable.
pub(crate) unsafe fn conn_param(p: *const abi::rdma_conn_param, has_qp: bool) -> ConnParam {
    let mut cp = ConnParam::default();
    if p.is_null() {
        return cp;
    }
    // SAFETY: per the contract.
    let c = unsafe { &*p };
    if !c.private_data.is_null() && c.private_data_len > 0 {
        // SAFETY: per the contract.
        cp.private_data = unsafe {
            std::slice::from_raw_parts(c.private_data.cast::<u8>(), c.private_data_len.into())
        }
        .to_vec();
    }
    cp.responder_resources = c.responder_resources;
    cp.initiator_depth = c.initiator_depth;
    cp.retry_count = c.retry_count;
    cp.rnr_retry_count = c.rnr_retry_count;
    cp.srq = c.srq != 0;
    if !has_qp {
        cp.qp_num = Some(c.qp_num);
    }
    cp
}

/// librdmacm's `ucma_complete` for synchronous ids: wait for the id's
/// event, keep it in `id->event`, turn a failure into an errno.
pub(crate) fn complete_sync(o: &IdObj) -> Result<(), i32> {
    if !lock(&o.st).own_chan {
        return Ok(());
    }
    let me = o.ptr();
    // SAFETY: the id's fields; a synchronous id is used by one thread.
    unsafe {
        if !(*me).c.event.is_null() {
            drop(Box::from_raw((*me).c.event as *mut EventObj));
            (*me).c.event = ptr::null_mut();
        }
        let e = get_event(o.chan())?;
        (*me).c.event = e as *mut abi::rdma_cm_event;
        let ev = &(*e).c;
        if ev.status != 0 {
            return Err(if ev.event == CmEventKind::Rejected.code() {
                libc::ECONNREFUSED
            } else {
                ev.status.abs()
            });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- fork

/// The CM's locks, held by the forking thread across `fork()` (see
/// `crate::fork`), in the order the CM nests them with the devices' and
/// the handle table's: its state, then the live channels, then the live ids.
struct ForkHeld {
    global: MutexGuard<'static, Global>,
    chans: MutexGuard<'static, std::collections::HashSet<usize>>,
    ids: MutexGuard<'static, std::collections::HashSet<usize>>,
}

/// Take the CM's locks before a fork.
fn fork_prepare() -> ForkHeld {
    ForkHeld { global: global(), chans: live_chans(), ids: live_ids() }
}

/// In a forked child: the CM starts empty. Inherited ids and channels are
/// no longer live (EINVAL); the inherited per-device state, the event
/// pump (a thread the child does not have) and the Rust identifiers are
/// forgotten, never dropped (they belong to the parent's devices).
fn fork_child(h: &mut ForkHeld) {
    h.chans.clear();
    h.ids.clear();
    let g = &mut *h.global;
    for d in &mut g.devs {
        std::mem::forget(d.chan.take());
        d.ctx = ptr::null_mut();
        d.pd = ptr::null_mut();
    }
    std::mem::forget(std::mem::take(&mut g.ids));
    std::mem::forget(g.pump.take());
    g.chans = 0;
}

/// The CM's fork handlers, run by the device list's around their own
/// (`crate::device::ForkHooks`): the CM's locks are taken before the open
/// devices' and the handle table's, the order the library nests them.
static FORK_HOOKS: device::ForkHooks =
    device::ForkHooks { prepare: cm_fork_prepare, parent: cm_fork_parent, child: cm_fork_child };

thread_local! {
    static FORK_HELD: std::cell::RefCell<Option<ForkHeld>> =
        const { std::cell::RefCell::new(None) };
}

fn cm_fork_prepare() {
    let held = fork_prepare();
    FORK_HELD.with(|h| *h.borrow_mut() = Some(held));
}

fn cm_fork_parent() {
    // the locks go back, as they were
    FORK_HELD.with(|h| h.borrow_mut().take());
}

fn cm_fork_child() {
    let Some(mut held) = FORK_HELD.with(|h| h.borrow_mut().take()) else { return };
    fork_child(&mut held);
}
