//! The RDMA connection manager, shaped like librdmacm (`rdma_cm.h`):
//! event channels, communication identifiers ([`CmId`]) for RC
//! (`RDMA_PS_TCP`) and UD (`RDMA_PS_UDP`), address and route resolution
//! over the devices of the channel, connect / listen / accept / reject /
//! disconnect with [`ConnParam`] and private data, and the events of
//! [`CmEventKind`].
//!
//! Underneath, every device carries the port's communication manager
//! (`roce_emulator::cm`, IBA chapter 12) and its MADs travel over QP1 like
//! rxe's: the peer can be another roce-emu device, kernel rxe or a RoCE NIC.
//! As librdmacm does in the library, a [`CmId`] with a QP moves it through
//! INIT, RTR and RTS itself: at [`CmId::create_qp`], when the REP arrives
//! (active side) and at [`CmId::accept`] (passive side), and to ERR at
//! [`CmId::disconnect`] or when the peer disconnects.
//!
//! ```
//! use roce_verbs_api::rdma_cm::{CmEventKind, ConnParam, EventChannel, PortSpace};
//! use roce_sim::SimNet;
//! use std::time::Duration;
//!
//! let net = SimNet::new(1);
//! let (a, b) = (net.add_device("roce0", "10.0.0.1".parse().unwrap()),
//!               net.add_device("roce1", "10.0.0.2".parse().unwrap()));
//! let server = EventChannel::new(vec![a]);
//! let client = EventChannel::new(vec![b]);
//! let t = Duration::from_secs(5);
//!
//! let listener = server.create_id(PortSpace::Tcp);
//! listener.bind_addr("10.0.0.1:7174".parse().unwrap()).unwrap();
//! listener.listen().unwrap();
//!
//! let id = client.create_id(PortSpace::Tcp);
//! id.resolve_addr(None, "10.0.0.1:7174".parse().unwrap()).unwrap();
//! assert_eq!(client.get_event(t).unwrap().kind, CmEventKind::AddrResolved);
//! id.resolve_route().unwrap();
//! assert_eq!(client.get_event(t).unwrap().kind, CmEventKind::RouteResolved);
//! let ctx = id.context().unwrap();
//! let (pd, cq) = (ctx.alloc_pd().unwrap(), ctx.create_cq(16).unwrap());
//! id.create_qp(pd.qp_builder(&cq, &cq)).unwrap();
//! id.connect(&ConnParam::default()).unwrap();
//!
//! let req = server.get_event(t).unwrap();
//! assert_eq!(req.kind, CmEventKind::ConnectRequest);
//! let ctx = req.id.context().unwrap();
//! let (pd, cq) = (ctx.alloc_pd().unwrap(), ctx.create_cq(16).unwrap());
//! req.id.create_qp(pd.qp_builder(&cq, &cq)).unwrap();
//! req.id.accept(&ConnParam::default()).unwrap();
//!
//! assert_eq!(client.get_event(t).unwrap().kind, CmEventKind::Established);
//! assert_eq!(server.get_event(t).unwrap().kind, CmEventKind::Established);
//! ```

use crate::device::{Context, Device};
use crate::driver::Budget;
use crate::qp::{ConnectOptions, Qp, QpBuilder, QpEndpoint};
use roce_emulator::cm::{
    gid_from_ip, AcceptParams, CmEvent as EngineEvent, CmQpType, ConnId, ConnectRequest,
    DisconnectCause, ListenId, PeerAddr, RepInfo, ReqInfo, SidrReplyParams, SidrRequest,
};
use roce_emulator::{AhAttr, CreateQpError, Hca, ModifyQpError, PathMtu, QpAttr, QpState, QpType};
use roce_packet::mad::{ip_service_id, port_space, IpCmHeader, IP_CM_HEADER_LEN};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// The Q_Key librdmacm gives UD QPs of `RDMA_PS_UDP` (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// `ETIMEDOUT`, the status of [`CmEventKind::Unreachable`] after timeouts.
const ETIMEDOUT: i32 = 110;
/// `ECONNRESET`, the status of a refused SIDR.
const ECONNRESET: i32 = 104;

/// `enum rdma_port_space`: what kind of QP an identifier connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// `RDMA_PS_TCP`: RC connections (REQ/REP/RTU).
    Tcp,
    /// `RDMA_PS_UDP`: UD, resolved with SIDR (SIDR_REQ/SIDR_REP).
    Udp,
    /// `RDMA_PS_IB`: connected QPs of any type, RC or XRC (an XRC
    /// initiator's REQ says XRC, and only a listener that
    /// [expects XRC](CmId::set_xrc) takes it), with REQ/REP/RTU as
    /// `RDMA_PS_TCP`; its ports are a space of their own.
    Ib,
}

impl PortSpace {
    fn wire(self) -> u8 {
        match self {
            PortSpace::Tcp => port_space::TCP,
            PortSpace::Udp => port_space::UDP,
            PortSpace::Ib => port_space::IB,
        }
    }

    /// Connected (REQ/REP/RTU), not SIDR.
    fn connected(self) -> bool {
        self != PortSpace::Udp
    }
}

/// `enum rdma_cm_event_type`, in librdmacm's order. Which cause produces
/// each is in docs/cm.md; `DeviceRemoval` and `AddrChange` are never
/// produced (devices are not removed under a running program, and
/// addresses do not change); `MulticastJoin` and `MulticastError` come
/// from the C library's `rdma_join_multicast`, not from this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmEventKind {
    AddrResolved,
    AddrError,
    RouteResolved,
    RouteError,
    ConnectRequest,
    ConnectResponse,
    ConnectError,
    Unreachable,
    Rejected,
    Established,
    Disconnected,
    DeviceRemoval,
    MulticastJoin,
    MulticastError,
    AddrChange,
    TimewaitExit,
}

impl CmEventKind {
    /// `rdma_event_str`: librdmacm's name of the event.
    pub fn as_str(self) -> &'static str {
        match self {
            CmEventKind::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            CmEventKind::AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
            CmEventKind::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            CmEventKind::RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
            CmEventKind::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
            CmEventKind::ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            CmEventKind::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            CmEventKind::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            CmEventKind::Rejected => "RDMA_CM_EVENT_REJECTED",
            CmEventKind::Established => "RDMA_CM_EVENT_ESTABLISHED",
            CmEventKind::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            CmEventKind::DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            CmEventKind::MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
            CmEventKind::MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
            CmEventKind::AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
            CmEventKind::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        }
    }

    /// The value of `enum rdma_cm_event_type`.
    pub fn code(self) -> u32 {
        self as u32
    }
}

impl fmt::Display for CmEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `struct rdma_conn_param`: what [`CmId::connect`] and [`CmId::accept`]
/// send (and what a CONNECT_REQUEST or ESTABLISHED event reports of the
/// peer's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnParam {
    /// The application's private data: at most 56 bytes in a connect
    /// (92 less librdmacm's 36-byte IP header), 196 in an accept, 148 in a
    /// reject; UD: 180 in a connect, 136 in an accept.
    pub private_data: Vec<u8>,
    /// RDMA READs/atomics this side accepts at once.
    pub responder_resources: u8,
    /// RDMA READs/atomics this side issues at once.
    pub initiator_depth: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries (3 bits; 7 = forever).
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// The QP number to announce when the identifier has no QP of its own
    /// (the application moves its QP itself).
    pub qp_num: Option<u32>,
}

impl Default for ConnParam {
    /// rping's values: 1 and 1 READs, 7 retries, RNR retry 7.
    fn default() -> ConnParam {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            qp_num: None,
        }
    }
}

/// `struct rdma_ud_param`: how to reach a UD peer (ESTABLISHED of a UD
/// identifier, CONNECT_REQUEST of a UD listener).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdParam {
    pub ah: AhAttr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// `struct rdma_cm_event`.
#[derive(Clone, Debug)]
pub struct CmEvent {
    /// The identifier the event is about (for CONNECT_REQUEST: the new
    /// identifier of the incoming connection).
    pub id: CmId,
    /// CONNECT_REQUEST: the listening identifier.
    pub listen_id: Option<CmId>,
    pub kind: CmEventKind,
    /// 0, or: REJECTED the IBA reject reason (8 = invalid service ID, 28 =
    /// consumer reject...), UNREACHABLE `-ETIMEDOUT` (110) or
    /// `-ECONNRESET`, ADDR_ERROR `-EADDRNOTAVAIL`, CONNECT_ERROR the errno.
    pub status: i32,
    /// The peer's parameters and private data (for TCP connect requests
    /// without librdmacm's IP header).
    pub param: ConnParam,
    /// UD identifiers: the peer's QP, Q_Key and address.
    pub ud: Option<UdParam>,
}

/// Errors of the identifier calls, with the errno librdmacm returns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// The call does not fit the identifier's state (EINVAL).
    #[error("invalid in this state: {0}")]
    InvalidState(&'static str),
    /// No device of the channel has this address (EADDRNOTAVAIL / ENODEV).
    #[error("no device of this channel has address {0}")]
    NoDevice(IpAddr),
    /// Another identifier listens on this port (EADDRINUSE).
    #[error("port {0} is already in use")]
    AddressInUse(u16),
    /// Private data longer than the message holds (EINVAL).
    #[error("private data of {len} bytes, at most {max}")]
    PrivateDataTooLong { len: usize, max: usize },
    /// The identifier already has a QP (EINVAL).
    #[error("the identifier already has a QP")]
    QpExists,
    /// Creating the QP failed.
    #[error("create_qp: {0}")]
    CreateQp(#[from] CreateQpError),
    /// Moving the QP failed.
    #[error("modify_qp: {0}")]
    ModifyQp(#[from] ModifyQpError),
    /// The engine refused the call (EINVAL).
    #[error("connection manager: {0}")]
    Engine(String),
    /// The connection table is full (ENOMEM).
    #[error("too many connections")]
    TooMany,
}

impl CmError {
    /// The errno librdmacm would set.
    pub fn errno(&self) -> i32 {
        match self {
            CmError::NoDevice(_) => 99,     // EADDRNOTAVAIL
            CmError::AddressInUse(_) => 98, // EADDRINUSE
            CmError::TooMany => 12,         // ENOMEM
            CmError::CreateQp(CreateQpError::TooMany) => 12,
            _ => 22, // EINVAL
        }
    }
}

fn engine_err(e: impl fmt::Display) -> CmError {
    CmError::Engine(e.to_string())
}

/// Errors of [`EventChannel::get_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GetEventError {
    /// Nothing happened within the timeout (EAGAIN for a non-blocking channel).
    #[error("no event within the timeout")]
    Timeout,
}

// ---------------------------------------------------------------- routing

/// Which identifier owns each connection and listener of a device: the
/// engine's events carry its handles, and any channel that pumps the device
/// hands each event to the owner (whose channel may be another).
#[derive(Default)]
struct DevRoutes {
    hca: Weak<Mutex<Hca>>,
    conns: HashMap<ConnId, Weak<IdInner>>,
    listens: HashMap<ListenId, Weak<IdInner>>,
}

fn routes() -> MutexGuard<'static, HashMap<usize, DevRoutes>> {
    static R: OnceLock<Mutex<HashMap<usize, DevRoutes>>> = OnceLock::new();
    R.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

fn dev_key(ctx: &Context) -> usize {
    Arc::as_ptr(&ctx.inner.hca) as usize
}

fn route_conn(ctx: &Context, conn: ConnId, id: &Arc<IdInner>) {
    let mut r = routes();
    r.retain(|_, d| d.hca.strong_count() > 0);
    let d = r.entry(dev_key(ctx)).or_default();
    d.hca = Arc::downgrade(&ctx.inner.hca);
    d.conns.insert(conn, Arc::downgrade(id));
}

fn route_listen(ctx: &Context, l: ListenId, id: &Arc<IdInner>) {
    let mut r = routes();
    r.retain(|_, d| d.hca.strong_count() > 0);
    let d = r.entry(dev_key(ctx)).or_default();
    d.hca = Arc::downgrade(&ctx.inner.hca);
    d.listens.insert(l, Arc::downgrade(id));
}

fn unroute(ctx: &Context, conn: Option<ConnId>, listen: Option<ListenId>) {
    let mut r = routes();
    if let Some(d) = r.get_mut(&dev_key(ctx)) {
        if let Some(c) = conn {
            d.conns.remove(&c);
        }
        if let Some(l) = listen {
            d.listens.remove(&l);
        }
    }
}

fn owner_of_conn(ctx: &Context, conn: ConnId) -> Option<Arc<IdInner>> {
    routes().get(&dev_key(ctx))?.conns.get(&conn)?.upgrade()
}

fn owner_of_listen(ctx: &Context, l: ListenId) -> Option<Arc<IdInner>> {
    routes().get(&dev_key(ctx))?.listens.get(&l)?.upgrade()
}

/// Local ports for active identifiers (librdmacm's kernel picks one the
/// same way: an ephemeral port).
fn ephemeral_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    32768 + (n % 28232)
}

/// The device time for the engine's calls (see `Driver::now`).
fn cm_now(ctx: &Context, hca: &Hca) -> Duration {
    match ctx.driver().now() {
        Some(t) => Duration::from_nanos(t.as_nanos()),
        None => hca.cm_now(),
    }
}

// ---------------------------------------------------------------- channel

struct ChanInner {
    devices: Vec<Device>,
    /// One opened context per device (identifiers share it).
    contexts: Mutex<Vec<Option<Context>>>,
    queue: Mutex<VecDeque<CmEvent>>,
    ready: Condvar,
}

impl ChanInner {
    fn push(&self, ev: CmEvent) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push_back(ev);
        self.ready.notify_all();
    }

    fn context(&self, i: usize) -> Context {
        let mut g = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        g[i].get_or_insert_with(|| self.devices[i].open()).clone()
    }
}

/// `struct rdma_event_channel`: where the events of its identifiers are
/// queued. It knows the devices its identifiers may use (librdmacm finds
/// them through the kernel's routing; here the channel is given them, e.g.
/// every device of `ROCE_EMU_DEVICES`). Clones share the channel.
#[derive(Clone)]
pub struct EventChannel {
    inner: Arc<ChanInner>,
}

impl fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.inner.devices.iter().map(|d| d.name()).collect();
        f.debug_struct("EventChannel").field("devices", &names).finish()
    }
}

impl EventChannel {
    /// `rdma_create_event_channel` over these devices.
    pub fn new(devices: Vec<Device>) -> EventChannel {
        let n = devices.len();
        EventChannel {
            inner: Arc::new(ChanInner {
                devices,
                contexts: Mutex::new(vec![None; n]),
                queue: Mutex::new(VecDeque::new()),
                ready: Condvar::new(),
            }),
        }
    }

    /// `rdma_create_id`.
    pub fn create_id(&self, ps: PortSpace) -> CmId {
        CmId { inner: Arc::new(IdInner::new(self.inner.clone(), ps)) }
    }

    /// The devices of the channel.
    pub fn devices(&self) -> &[Device] {
        &self.inner.devices
    }

    /// Take the engines' news from every device of the channel and turn it
    /// into events for their identifiers (on whatever channel they are).
    fn pump(&self) {
        for i in 0..self.inner.devices.len() {
            let ctx = self.inner.context(i);
            let evs: Vec<EngineEvent> = {
                let mut h = ctx.lock();
                std::iter::from_fn(|| h.cm().poll_event()).collect()
            };
            for ev in evs {
                dispatch(&ctx, ev);
            }
        }
    }

    /// An event if one is queued (`rdma_get_cm_event` on a non-blocking
    /// channel), after taking what the devices have.
    pub fn try_get_event(&self) -> Option<CmEvent> {
        self.pump();
        self.inner.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
    }

    /// `rdma_get_cm_event`: wait up to `timeout` for the next event, driving
    /// the devices meanwhile (the simulated fabric steps; real-time drivers
    /// run on their own threads and are waited for).
    pub fn get_event(&self, timeout: Duration) -> Result<CmEvent, GetEventError> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(ev) = self.try_get_event() {
                return Ok(ev);
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(GetEventError::Timeout);
            }
            let queued = |c: &EventChannel| {
                c.pump();
                !c.inner.queue.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
            };
            let progressed = match self.inner.devices.first() {
                Some(d) => {
                    let ctx = self.inner.context(0);
                    let _ = d;
                    let budget =
                        Budget { events: 10_000, wall: left.min(Duration::from_millis(20)) };
                    ctx.driver().progress(&mut || queued(self), budget)
                }
                None => false,
            };
            if !progressed {
                // nothing moves by itself (an idle simulation): wait for
                // another thread's identifiers, a little at a time
                let g = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
                if g.is_empty() {
                    let _ = self.inner.ready.wait_timeout(g, left.min(Duration::from_millis(5)));
                }
            }
        }
    }
}

// ---------------------------------------------------------------- ids

/// The QP of an identifier: made by [`CmId::create_qp`] (kept alive by
/// the identifier), or attached by number with [`CmId::attach_qp`].
#[derive(Clone)]
enum CmQp {
    Owned(Qp),
    Attached { ctx: Context, qpn: roce_packet::Qpn },
}

impl CmQp {
    fn qpn(&self) -> roce_packet::Qpn {
        match self {
            CmQp::Owned(q) => q.qpn(),
            CmQp::Attached { qpn, .. } => *qpn,
        }
    }

    fn modify(&self, attr: &QpAttr) -> Result<(), ModifyQpError> {
        match self {
            CmQp::Owned(q) => q.modify(attr),
            CmQp::Attached { ctx, qpn } => ctx.lock().modify_qp(*qpn, attr),
        }
    }

    /// [`Qp::to_rtr`], with an address vector of traffic class `tc`.
    fn to_rtr(
        &self,
        remote: &QpEndpoint,
        opts: &ConnectOptions,
        tc: u8,
    ) -> Result<(), ModifyQpError> {
        let mut a = opts.rtr_attr(remote);
        if let Some(ah) = &mut a.ah_attr {
            ah.traffic_class = tc;
        }
        self.modify(&a)
    }

    /// [`Qp::to_rts`].
    fn to_rts(&self, sq_psn: u32, opts: &ConnectOptions) -> Result<(), ModifyQpError> {
        self.modify(&opts.rts_attr(sq_psn))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Idle,
    Listening,
    /// Active, REQ (or SIDR_REQ) sent.
    Connecting,
    /// Passive, CONNECT_REQUEST reported, waiting for accept/reject.
    Requested,
    /// Passive, REP sent.
    Accepted,
    Connected,
    Disconnecting,
    Gone,
}

struct IdState {
    ctx: Option<Context>,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
    route_resolved: bool,
    role: Role,
    conn: Option<ConnId>,
    listens: Vec<(Context, ListenId)>,
    /// What the host holds for the listens of a shared device (dropped
    /// with the identifier: the port is free for other processes again).
    host_listens: Vec<crate::driver::HostHold>,
    qp: Option<CmQp>,
    /// XRC: the QP is an XRC initiator (active) or target (passive); a
    /// listener takes only XRC requests (see [`CmId::set_xrc`]).
    xrc: bool,
    /// The send PSN this side announced.
    psn: u32,
    /// Passive: `psn` was chosen (by init_qp_attr) before the accept.
    psn_chosen: bool,
    /// Passive: the peer's QPN, first PSN, path MTU code, retries, from the REQ.
    peer_qpn: u32,
    peer_psn: u32,
    peer_mtu: u8,
    peer_retry: u8,
    peer_rnr_retry: u8,
    /// What the application passed to connect/accept.
    param: ConnParam,
    /// `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`: the QP's local ACK
    /// timeout at RTS, instead of the default.
    ack_timeout: Option<u8>,
    /// `rdma_set_option(RDMA_OPTION_ID_TOS)`: the traffic class of the
    /// path this (active) side resolves, instead of 0.
    tos: Option<u8>,
    /// Passive: the traffic class of the REQ's primary path, which the
    /// connection's QP uses whatever this side's TOS (as the kernel's CM
    /// takes the path from the REQ).
    req_tc: Option<u8>,
    /// Passive: what `RDMA_MAX_INIT_DEPTH` / `RDMA_MAX_RESP_RES` (0xFF) in
    /// the accept stand for: the REQ's values within the device's limits.
    max_init_depth: u8,
    max_resp_res: u8,
}

impl IdState {
    /// The traffic class of the connection's path, the IP TOS its QP's
    /// packets leave with: the REQ's (passive), else the identifier's
    /// TOS option, else 0 (the kernel's default RoCE TOS).
    fn traffic_class(&self) -> u8 {
        self.req_tc.or(self.tos).unwrap_or(0)
    }

    /// The device and the CM connection of the identifier; `InvalidState`
    /// naming `what` when it has none.
    fn connection(&self, what: &'static str) -> Result<(Context, ConnId), CmError> {
        match (&self.ctx, self.conn) {
            (Some(ctx), Some(conn)) => Ok((ctx.clone(), conn)),
            _ => Err(CmError::InvalidState(what)),
        }
    }
}

struct IdInner {
    chan: Arc<ChanInner>,
    ps: PortSpace,
    st: Mutex<IdState>,
}

impl IdInner {
    fn new(chan: Arc<ChanInner>, ps: PortSpace) -> IdInner {
        IdInner {
            chan,
            ps,
            st: Mutex::new(IdState {
                ctx: None,
                local: None,
                remote: None,
                route_resolved: false,
                role: Role::Idle,
                conn: None,
                listens: Vec::new(),
                host_listens: Vec::new(),
                qp: None,
                xrc: false,
                psn: 0,
                psn_chosen: false,
                peer_qpn: 0,
                peer_psn: 0,
                peer_mtu: 3,
                peer_retry: 7,
                peer_rnr_retry: 7,
                param: ConnParam::default(),
                ack_timeout: None,
                tos: None,
                req_tc: None,
                max_init_depth: 0,
                max_resp_res: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, IdState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for IdInner {
    /// `rdma_destroy_id`: leave the engine's tables (a connection still up
    /// is torn down with a DREQ).
    fn drop(&mut self) {
        let st = self.st.get_mut().unwrap_or_else(|e| e.into_inner());
        for (ctx, l) in st.listens.drain(..) {
            let _ = ctx.lock().cm().unlisten(l);
            unroute(&ctx, None, Some(l));
            ctx.kick();
        }
        if let (Some(ctx), Some(c)) = (st.ctx.clone(), st.conn) {
            {
                let mut h = ctx.lock();
                let now = cm_now(&ctx, &h);
                let _ = h.cm().destroy(now, c);
            }
            unroute(&ctx, Some(c), None);
            ctx.kick();
        }
    }
}

/// `struct rdma_cm_id`. Clones share the identifier; it is destroyed
/// (`rdma_destroy_id`) when the last clone and the last event naming it
/// are dropped.
#[derive(Clone)]
pub struct CmId {
    inner: Arc<IdInner>,
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.inner.lock();
        f.debug_struct("CmId")
            .field("ps", &self.inner.ps)
            .field("local", &st.local)
            .field("remote", &st.remote)
            .field("role", &st.role)
            .finish()
    }
}

impl PartialEq for CmId {
    fn eq(&self, other: &CmId) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl CmId {
    fn event(&self, kind: CmEventKind, status: i32) -> CmEvent {
        CmEvent {
            id: self.clone(),
            listen_id: None,
            kind,
            status,
            param: ConnParam::default(),
            ud: None,
        }
    }

    fn emit(&self, ev: CmEvent) {
        self.inner.chan.push(ev);
    }

    /// The port space.
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }

    /// The opened device the identifier is bound to (after bind or address
    /// resolution): allocate the PD and CQs of its QP here.
    pub fn context(&self) -> Option<Context> {
        self.inner.lock().ctx.clone()
    }

    /// The QP made by [`CmId::create_qp`].
    pub fn qp(&self) -> Option<Qp> {
        match &self.inner.lock().qp {
            Some(CmQp::Owned(q)) => Some(q.clone()),
            _ => None,
        }
    }

    /// `rdma_get_local_addr`.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.lock().local
    }

    /// `rdma_get_peer_addr`.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.inner.lock().remote
    }

    fn device_index(&self, ip: IpAddr) -> Option<usize> {
        let ip = canonical(ip);
        self.inner.chan.devices.iter().position(|d| canonical(d.addr()) == ip)
    }

    /// `rdma_bind_addr`: a local address (a device's, or unspecified for
    /// every device of the channel) and port.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<(), CmError> {
        let mut st = self.inner.lock();
        if st.role != Role::Idle || st.local.is_some() {
            return Err(CmError::InvalidState("already bound"));
        }
        if !addr.ip().is_unspecified() {
            let i = self.device_index(addr.ip()).ok_or(CmError::NoDevice(addr.ip()))?;
            st.ctx = Some(self.inner.chan.context(i));
        }
        st.local = Some(addr);
        Ok(())
    }

    /// `rdma_resolve_addr`: find the device that reaches `dst` (the one with
    /// address `src` if given; `dst` itself when it is local; else the
    /// channel's first device). Reports ADDR_RESOLVED or ADDR_ERROR.
    pub fn resolve_addr(&self, src: Option<IpAddr>, dst: SocketAddr) -> Result<(), CmError> {
        let mut st = self.inner.lock();
        if !matches!(st.role, Role::Idle) {
            return Err(CmError::InvalidState("resolve_addr on a connected or listening id"));
        }
        let bound = st.local.map(|l| l.ip()).filter(|ip| !ip.is_unspecified());
        let i = match src.or(bound) {
            Some(s) => self.device_index(s),
            None => self.device_index(dst.ip()).or(if self.inner.chan.devices.is_empty() {
                None
            } else {
                Some(0)
            }),
        };
        let Some(i) = i else {
            drop(st);
            self.emit(self.event(CmEventKind::AddrError, -99));
            return Ok(());
        };
        let ctx = self.inner.chan.context(i);
        let port = st.local.map(|l| l.port()).filter(|p| *p != 0).unwrap_or_else(ephemeral_port);
        st.local = Some(SocketAddr::new(ctx.addr(), port));
        st.remote = Some(dst);
        st.ctx = Some(ctx);
        drop(st);
        self.emit(self.event(CmEventKind::AddrResolved, 0));
        Ok(())
    }

    /// `rdma_resolve_route`: RoCE needs no path query (the GIDs are the
    /// addresses); reports ROUTE_RESOLVED.
    pub fn resolve_route(&self) -> Result<(), CmError> {
        let mut st = self.inner.lock();
        if st.ctx.is_none() || st.remote.is_none() {
            return Err(CmError::InvalidState("resolve_route before resolve_addr"));
        }
        st.route_resolved = true;
        drop(st);
        self.emit(self.event(CmEventKind::RouteResolved, 0));
        Ok(())
    }

    /// `rdma_create_qp`: make the identifier's QP on its device (RC for
    /// TCP, UD for UDP, whatever the builder says) and move it to INIT
    /// (UD: to RTS with [`RDMA_UDP_QKEY`], as librdmacm does).
    pub fn create_qp(&self, builder: QpBuilder) -> Result<Qp, CmError> {
        let mut st = self.inner.lock();
        if st.qp.is_some() {
            return Err(CmError::QpExists);
        }
        if st.ctx.is_none() {
            return Err(CmError::InvalidState("create_qp before the id is bound to a device"));
        }
        let t = match self.inner.ps {
            PortSpace::Tcp | PortSpace::Ib => QpType::Rc,
            PortSpace::Udp => QpType::Ud,
        };
        let qp = builder.qp_type(t).build()?;
        match t {
            QpType::Ud => {
                let psn = qp.pd().context().lock().cm().random_psn();
                qp.activate_ud(RDMA_UDP_QKEY, psn)?
            }
            _ => qp.to_init(&ConnectOptions::default())?,
        }
        st.qp = Some(CmQp::Owned(qp.clone()));
        Ok(qp)
    }

    /// `rdma_create_qp` for a QP made elsewhere (the C ABI's `ibv_create_qp`
    /// path): attach `qp`, which must be on the identifier's device and in
    /// RESET, and move it as [`CmId::create_qp`] does (INIT; UD: RTS with
    /// [`RDMA_UDP_QKEY`]). The identifier keeps only the QP's number (the
    /// owner may destroy the QP at any time, as `ibv_destroy_qp` on an
    /// rdma_cm QP does); later moves of a destroyed QP fail quietly.
    pub fn attach_qp(&self, qp: &Qp) -> Result<(), CmError> {
        let mut st = self.inner.lock();
        if st.qp.is_some() {
            return Err(CmError::QpExists);
        }
        if st.ctx.is_none() {
            return Err(CmError::InvalidState("create_qp before the id is bound to a device"));
        }
        match self.inner.ps {
            PortSpace::Udp => {
                let psn = qp.pd().context().lock().cm().random_psn();
                qp.activate_ud(RDMA_UDP_QKEY, psn)?
            }
            PortSpace::Tcp | PortSpace::Ib => qp.to_init(&ConnectOptions::default())?,
        }
        st.xrc = qp.query().map(|(_, i)| i.qp_type.is_xrc()).unwrap_or(false);
        st.qp = Some(CmQp::Attached { ctx: qp.pd().context().clone(), qpn: qp.qpn() });
        Ok(())
    }

    /// `RDMA_PS_IB` with an XRC QP type (`IBV_QPT_XRC_SEND` /
    /// `IBV_QPT_XRC_RECV`, as `rdma_create_ep` makes them): an XRC
    /// identifier's REQ says XRC (an attached XRC QP sets this too), and a
    /// listener with it takes only XRC requests, one without it only the
    /// others: the kernel's CM matches a request to a listener of its QP
    /// type and refuses the rest (REJ, consumer reject). Its connection
    /// requests make XRC identifiers.
    pub fn set_xrc(&self, xrc: bool) {
        self.inner.lock().xrc = xrc;
    }

    /// `rdma_destroy_qp`: forget the identifier's QP (an owned one is
    /// returned, so the caller can destroy it).
    pub fn detach_qp(&self) -> Option<Qp> {
        match self.inner.lock().qp.take() {
            Some(CmQp::Owned(q)) => Some(q),
            _ => None,
        }
    }

    /// `rdma_set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT)`: the
    /// local ACK timeout (4.096 µs × 2^`t`, 5 bits) the identifier's QP gets
    /// at RTS, by the CM or from `rdma_init_qp_attr`.
    pub fn set_ack_timeout(&self, t: u8) -> Result<(), CmError> {
        if t > 31 {
            return Err(CmError::InvalidState("ACK timeout above 31"));
        }
        self.inner.lock().ack_timeout = Some(t);
        Ok(())
    }

    /// `rdma_set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_TOS)`
    /// (`rdma_set_service_type`): the IPv4 TOS / IPv6 traffic class (DSCP
    /// and ECN) of the path, as the kernel's CM puts it in the path record
    /// it resolves for RoCE. The REQ carries it (primary path traffic
    /// class) and both sides' QPs get it in their address vector
    /// (`ah_attr.grh.traffic_class`, also from `rdma_init_qp_attr`), so
    /// every packet of the connection leaves with it. Set it before
    /// `connect`; on the passive side the REQ's value applies.
    pub fn set_tos(&self, tos: u8) {
        self.inner.lock().tos = Some(tos);
    }

    /// `rdma_init_qp_attr`: the attributes (with their mask) that move an
    /// application's own QP to `state` (INIT, RTR or RTS) for this
    /// connection, as librdmacm computes them: INIT with the access flags
    /// (UD: the Q_Key), RTR towards the peer of the CONNECT_REQUEST (passive)
    /// or CONNECT_RESPONSE (active), RTS with this side's send PSN (passive:
    /// chosen now and announced by the accept).
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttr, CmError> {
        let mut st = self.inner.lock();
        let Some(ctx) = st.ctx.clone() else {
            return Err(CmError::InvalidState("init_qp_attr before the id is bound to a device"));
        };
        let udp = self.inner.ps == PortSpace::Udp;
        let mut opts = qp_options(&ctx, st.peer_mtu, &st.param, st.peer_retry, st.peer_rnr_retry);
        opts.timeout = st.ack_timeout.unwrap_or(opts.timeout);
        match state {
            QpState::Init if udp => {
                Ok(QpAttr::new().state(QpState::Init).pkey_index(0).port(1).qkey(RDMA_UDP_QKEY))
            }
            QpState::Init => Ok(QpAttr::new()
                .state(QpState::Init)
                .pkey_index(0)
                .port(1)
                .access_flags(ConnectOptions::default().access)),
            QpState::Rtr if udp => Ok(QpAttr::new().state(QpState::Rtr)),
            QpState::Rtr => {
                let remote = st.remote.ok_or(CmError::InvalidState("init_qp_attr: no peer yet"))?;
                if st.peer_qpn == 0 {
                    return Err(CmError::InvalidState("init_qp_attr: no peer QP yet"));
                }
                let mut ah = AhAttr::new(remote.ip());
                ah.traffic_class = st.traffic_class();
                Ok(QpAttr::new()
                    .state(QpState::Rtr)
                    .ah(ah)
                    .mtu(opts.mtu)
                    .dest_qpn(st.peer_qpn)
                    .rq_psn(st.peer_psn)
                    .max_dest_rd_atomic(opts.max_dest_rd_atomic)
                    .min_rnr_timer(opts.min_rnr_timer))
            }
            QpState::Rts => {
                if st.role == Role::Requested && !st.psn_chosen {
                    st.psn = ctx.lock().cm().random_psn();
                    st.psn_chosen = true;
                }
                if udp {
                    return Ok(QpAttr::new().state(QpState::Rts).sq_psn(st.psn));
                }
                Ok(QpAttr::new()
                    .state(QpState::Rts)
                    .sq_psn(st.psn)
                    .timeout(opts.timeout)
                    .retry_cnt(opts.retry_cnt)
                    .rnr_retry(opts.rnr_retry)
                    .max_rd_atomic(opts.max_rd_atomic))
            }
            _ => Err(CmError::InvalidState("init_qp_attr: INIT, RTR or RTS")),
        }
    }

    /// `rdma_connect`: send the REQ (TCP) or SIDR_REQ (UDP). Events follow:
    /// ESTABLISHED (the QP is then in RTS), REJECTED, UNREACHABLE, or
    /// CONNECT_RESPONSE for an identifier without a QP.
    pub fn connect(&self, param: &ConnParam) -> Result<(), CmError> {
        let mut st = self.inner.lock();
        if st.role != Role::Idle || !st.route_resolved {
            return Err(CmError::InvalidState("connect before resolve_route"));
        }
        let (Some(ctx), Some(local), Some(remote)) = (st.ctx.clone(), st.local, st.remote) else {
            return Err(CmError::InvalidState("connect before resolve_route"));
        };
        let max = match self.inner.ps {
            PortSpace::Tcp | PortSpace::Ib => 92 - IP_CM_HEADER_LEN,
            PortSpace::Udp => 216 - IP_CM_HEADER_LEN,
        };
        if param.private_data.len() > max {
            return Err(CmError::PrivateDataTooLong { len: param.private_data.len(), max });
        }
        let hdr = IpCmHeader {
            cma_version: 0,
            ip_version: if local.is_ipv4() { 4 } else { 6 },
            src_port: local.port(),
            src: local.ip(),
            dst: remote.ip(),
        };
        let mut pd = hdr.emit().to_vec();
        pd.extend_from_slice(&param.private_data);
        let sid = ip_service_id(self.inner.ps.wire(), remote.port());
        let peer = PeerAddr::new(gid_from_ip(remote.ip()));
        let qpn = st.qp.as_ref().map(|q| q.qpn().value()).or(param.qp_num).unwrap_or(0);
        let conn = {
            let mut h = ctx.lock();
            let now = cm_now(&ctx, &h);
            match self.inner.ps {
                PortSpace::Tcp | PortSpace::Ib => {
                    let psn = h.cm().random_psn();
                    st.psn = psn;
                    let mut req = ConnectRequest::new(sid, peer, qpn, psn);
                    req.qp_type = if st.xrc { CmQpType::Xrc } else { CmQpType::Rc };
                    // 0xFF (RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH): the
                    // device's limits, as librdmacm sends them
                    let dev = h.query_device();
                    req.responder_resources = or_max(param.responder_resources, dev.max_qp_rd_atom);
                    req.initiator_depth = or_max(param.initiator_depth, dev.max_qp_init_rd_atom);
                    req.retry_count = param.retry_count & 7;
                    req.rnr_retry_count = param.rnr_retry_count & 7;
                    req.srq = param.srq;
                    req.path_mtu = h.query_port().active_mtu as u8;
                    req.path.traffic_class = st.traffic_class();
                    req.private_data = pd;
                    h.cm().connect(now, req).map_err(|e| match e {
                        roce_emulator::cm::ConnectError::TooManyConnections => CmError::TooMany,
                        e => engine_err(e),
                    })?
                }
                PortSpace::Udp => {
                    let req = SidrRequest {
                        service_id: sid,
                        remote: peer,
                        pkey: 0xFFFF,
                        private_data: pd,
                    };
                    h.cm().sidr_resolve(now, req).map_err(|e| match e {
                        roce_emulator::cm::SidrResolveError::TooManyConnections => CmError::TooMany,
                        e => engine_err(e),
                    })?
                }
            }
        };
        st.conn = Some(conn);
        st.role = Role::Connecting;
        st.param = param.clone();
        drop(st);
        route_conn(&ctx, conn, &self.inner);
        ctx.kick();
        Ok(())
    }

    /// `rdma_listen`: accept connection requests for the bound port on its
    /// device (or on every device of the channel when bound to an
    /// unspecified address).
    pub fn listen(&self) -> Result<(), CmError> {
        let mut st = self.inner.lock();
        if st.role != Role::Idle {
            return Err(CmError::InvalidState("listen on a connected or listening id"));
        }
        let Some(local) = st.local else {
            return Err(CmError::InvalidState("listen before bind_addr"));
        };
        let sid = ip_service_id(self.inner.ps.wire(), local.port());
        let ctxs: Vec<Context> = match &st.ctx {
            Some(c) => vec![c.clone()],
            None => {
                (0..self.inner.chan.devices.len()).map(|i| self.inner.chan.context(i)).collect()
            }
        };
        let mut made: Vec<(Context, ListenId)> = Vec::new();
        let mut holds = Vec::new();
        let undo = |made: Vec<(Context, ListenId)>| {
            for (c, l) in made {
                unroute(&c, None, Some(l));
                let _ = c.lock().cm().unlisten(l);
            }
        };
        for ctx in ctxs {
            // Listen and route the listener in one step (under the device's
            // lock: no request can find a listener this identifier does not
            // route yet), and only then, on a device shared with other
            // processes, hold the port for the host: from then on the kernel
            // steers its requests here, where they find the listener.
            let l = {
                let mut g = ctx.lock();
                match g.cm().listen(sid) {
                    Ok(l) => {
                        route_listen(&ctx, l, &self.inner);
                        l
                    }
                    Err(_) => {
                        drop(g);
                        undo(made);
                        return Err(CmError::AddressInUse(local.port()));
                    }
                }
            };
            made.push((ctx.clone(), l));
            match ctx.driver().host_listen(&ctx.inner.hca, sid) {
                Ok(hold) => holds.extend(hold),
                Err(_) => {
                    drop(holds);
                    undo(made);
                    return Err(CmError::AddressInUse(local.port()));
                }
            }
        }
        st.host_listens = holds;
        st.listens = made;
        st.role = Role::Listening;
        Ok(())
    }

    /// `rdma_accept` of a CONNECT_REQUEST: move the QP to RTR and RTS
    /// towards the requester and send the REP (TCP; ESTABLISHED follows
    /// the RTU), or send the SIDR_REP (UDP; nothing follows).
    pub fn accept(&self, param: &ConnParam) -> Result<(), CmError> {
        let mut st = self.inner.lock();
        if st.role != Role::Requested {
            return Err(CmError::InvalidState("accept without a connect request"));
        }
        let (Some(ctx), Some(conn), Some(remote)) = (st.ctx.clone(), st.conn, st.remote) else {
            return Err(CmError::InvalidState("accept without a connect request"));
        };
        match self.inner.ps {
            PortSpace::Tcp | PortSpace::Ib => {
                if param.private_data.len() > 196 {
                    return Err(CmError::PrivateDataTooLong {
                        len: param.private_data.len(),
                        max: 196,
                    });
                }
                let psn = match st.psn_chosen {
                    true => st.psn,
                    false => ctx.lock().cm().random_psn(),
                };
                if let Some(qp) = st.qp.clone() {
                    let mut opts =
                        qp_options(&ctx, st.peer_mtu, param, st.peer_retry, st.peer_rnr_retry);
                    opts.timeout = st.ack_timeout.unwrap_or(opts.timeout);
                    // As the kernel's CM (and rping through rxe shows): the
                    // REQ's starting PSN is the one the passive side sends
                    // from, the REP's the one it receives at.
                    let peer = QpEndpoint { addr: remote.ip(), qpn: st.peer_qpn, psn };
                    qp.to_rtr(&peer, &opts, st.traffic_class())?;
                    qp.to_rts(st.peer_psn, &opts)?;
                }
                let qpn = st.qp.as_ref().map(|q| q.qpn().value()).or(param.qp_num).unwrap_or(0);
                let mut a = AcceptParams::new(qpn, psn);
                a.responder_resources = or_max(param.responder_resources, st.max_resp_res);
                a.initiator_depth = or_max(param.initiator_depth, st.max_init_depth);
                a.rnr_retry_count = param.rnr_retry_count & 7;
                a.srq = param.srq;
                a.private_data = param.private_data.clone();
                let mut h = ctx.lock();
                let now = cm_now(&ctx, &h);
                h.cm().accept(now, conn, a).map_err(engine_err)?;
                st.psn = psn;
                st.role = Role::Accepted;
            }
            PortSpace::Udp => {
                if param.private_data.len() > 136 {
                    return Err(CmError::PrivateDataTooLong {
                        len: param.private_data.len(),
                        max: 136,
                    });
                }
                let qpn = st.qp.as_ref().map(|q| q.qpn().value()).or(param.qp_num).unwrap_or(0);
                let r = SidrReplyParams {
                    status: roce_emulator::cm::sidr_status::VALID,
                    qpn,
                    qkey: RDMA_UDP_QKEY,
                    private_data: param.private_data.clone(),
                };
                ctx.lock().cm().sidr_reply(conn, r).map_err(engine_err)?;
                st.role = Role::Connected;
            }
        }
        st.param = param.clone();
        drop(st);
        ctx.kick();
        Ok(())
    }

    /// `rdma_reject` of a CONNECT_REQUEST, with private data (REJ reason 28,
    /// consumer reject; UDP: SIDR_REP status "rejected").
    pub fn reject(&self, private_data: &[u8]) -> Result<(), CmError> {
        let mut st = self.inner.lock();
        if st.role != Role::Requested {
            return Err(CmError::InvalidState("reject without a connect request"));
        }
        let (ctx, conn) = st.connection("reject without a connect request")?;
        match self.inner.ps {
            PortSpace::Tcp | PortSpace::Ib => {
                ctx.lock().cm().reject(conn, private_data).map_err(engine_err)?
            }
            PortSpace::Udp => {
                let r = SidrReplyParams {
                    status: roce_emulator::cm::sidr_status::REJECTED,
                    qpn: 0,
                    qkey: 0,
                    private_data: private_data.to_vec(),
                };
                ctx.lock().cm().sidr_reply(conn, r).map_err(engine_err)?
            }
        }
        st.role = Role::Gone;
        drop(st);
        ctx.kick();
        Ok(())
    }

    /// `rdma_establish` for an identifier without a QP: after
    /// CONNECT_RESPONSE, send the RTU (the passive side gets ESTABLISHED;
    /// this one no event).
    pub fn establish(&self) -> Result<(), CmError> {
        let mut st = self.inner.lock();
        let (ctx, conn) = st.connection("establish without a connection")?;
        if st.role != Role::Connecting {
            return Err(CmError::InvalidState("establish outside a connect"));
        }
        ctx.lock().cm().complete_connect(conn).map_err(engine_err)?;
        st.role = Role::Connected;
        drop(st);
        ctx.kick();
        // (no ESTABLISHED here: librdmacm sends the RTU and the passive
        // side gets ESTABLISHED; the active side's next event is its
        // DISCONNECTED, as pyverbs' external-QP test expects)
        Ok(())
    }

    /// `rdma_disconnect`: move the QP to ERR (its outstanding work is
    /// flushed) and send a DREQ; DISCONNECTED follows when the peer answers
    /// or the DREQ times out, then TIMEWAIT_EXIT.
    pub fn disconnect(&self) -> Result<(), CmError> {
        let mut st = self.inner.lock();
        let (ctx, conn) = st.connection("disconnect without a connection")?;
        if !matches!(st.role, Role::Connected | Role::Accepted) {
            return Err(CmError::InvalidState("disconnect of an id that is not connected"));
        }
        if let Some(qp) = &st.qp {
            let _ = qp.modify(&QpAttr::new().state(QpState::Err));
        }
        if self.inner.ps.connected() {
            let mut h = ctx.lock();
            let now = cm_now(&ctx, &h);
            h.cm().disconnect(now, conn, &[]).map_err(engine_err)?;
        }
        st.role = Role::Disconnecting;
        drop(st);
        ctx.kick();
        Ok(())
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// Our port's active MTU code (what the REP path uses for an active id).
fn rep_mtu(ctx: &Context) -> u8 {
    ctx.query_port().active_mtu as u8
}

fn mtu_of(code: u8) -> PathMtu {
    match code {
        1 => PathMtu::Mtu256,
        2 => PathMtu::Mtu512,
        4 => PathMtu::Mtu2048,
        5 => PathMtu::Mtu4096,
        _ => PathMtu::Mtu1024,
    }
}

/// The QP attributes of a CM connection: the smaller of the peer's path
/// MTU and our port's, the depths of the two sides' parameters, the
/// peer's retry counts (IBA 12.7.22).
/// `v`, or `max` for 0xFF (librdmacm's `RDMA_MAX_RESP_RES` and
/// `RDMA_MAX_INIT_DEPTH`: "as many as possible").
fn or_max(v: u8, max: u8) -> u8 {
    if v == 0xFF {
        max
    } else {
        v
    }
}

fn qp_options(ctx: &Context, peer_mtu: u8, mine: &ConnParam, retry: u8, rnr: u8) -> ConnectOptions {
    let port = ctx.query_port().active_mtu as u8;
    ConnectOptions {
        mtu: mtu_of(peer_mtu.min(port)),
        retry_cnt: retry & 7,
        rnr_retry: rnr & 7,
        max_rd_atomic: mine.initiator_depth.clamp(1, 16),
        max_dest_rd_atomic: mine.responder_resources.clamp(1, 16),
        ..ConnectOptions::default()
    }
}

/// Turn one engine event of device `ctx` into identifier events.
fn dispatch(ctx: &Context, ev: EngineEvent) {
    match ev {
        EngineEvent::ConnectRequest { listen, conn, req } => {
            on_connect_request(ctx, listen, conn, &req)
        }
        EngineEvent::SidrRequest { listen, conn, remote, private_data, .. } => {
            on_sidr_request(ctx, listen, conn, remote, private_data)
        }
        EngineEvent::ConnectResponse { conn, rep } => on_connect_response(ctx, conn, &rep),
        EngineEvent::Established { conn } => on_established(ctx, conn),
        EngineEvent::Rejected { conn, reason, private_data } => {
            let Some(inner) = owner_of_conn(ctx, conn) else { return };
            let id = CmId { inner };
            id.inner.lock().role = Role::Gone;
            unroute(ctx, Some(conn), None);
            let mut e = id.event(CmEventKind::Rejected, i32::from(reason));
            e.param = ConnParam { private_data, ..ConnParam::default() };
            id.emit(e);
        }
        EngineEvent::Unreachable { conn } => {
            let Some(inner) = owner_of_conn(ctx, conn) else { return };
            let id = CmId { inner };
            id.inner.lock().role = Role::Gone;
            unroute(ctx, Some(conn), None);
            id.emit(id.event(CmEventKind::Unreachable, -ETIMEDOUT));
        }
        EngineEvent::Disconnected { conn, cause } => {
            let Some(inner) = owner_of_conn(ctx, conn) else { return };
            let id = CmId { inner };
            {
                let mut st = id.inner.lock();
                if cause == DisconnectCause::DreqReceived {
                    if let Some(qp) = &st.qp {
                        let _ = qp.modify(&QpAttr::new().state(QpState::Err));
                    }
                }
                st.role = Role::Disconnecting;
            }
            id.emit(id.event(CmEventKind::Disconnected, 0));
        }
        EngineEvent::TimewaitExit { conn } => {
            let Some(inner) = owner_of_conn(ctx, conn) else { return };
            let id = CmId { inner };
            id.inner.lock().role = Role::Gone;
            unroute(ctx, Some(conn), None);
            id.emit(id.event(CmEventKind::TimewaitExit, 0));
        }
        EngineEvent::SidrReply { conn, status, qpn, qkey, private_data } => {
            let Some(inner) = owner_of_conn(ctx, conn) else { return };
            let id = CmId { inner };
            unroute(ctx, Some(conn), None);
            let (remote, tc) = {
                let mut st = id.inner.lock();
                st.role = if status == 0 { Role::Connected } else { Role::Gone };
                st.conn = None;
                (st.remote, st.traffic_class())
            };
            if status == roce_emulator::cm::sidr_status::VALID {
                let mut e = id.event(CmEventKind::Established, 0);
                e.param = ConnParam { private_data, ..ConnParam::default() };
                let ip = remote.map(|r| r.ip()).unwrap_or_else(|| ctx.addr());
                // (the kernel's AH is made from the path it resolved)
                let mut ah = crate::create_ah(ip);
                ah.traffic_class = tc;
                e.ud = Some(UdParam { ah, qp_num: qpn, qkey });
                id.emit(e);
            } else {
                let mut e = id.event(CmEventKind::Unreachable, -ECONNRESET);
                e.param = ConnParam { private_data, ..ConnParam::default() };
                id.emit(e);
            }
        }
    }
}

/// A REQ for a listener of this process: a new identifier, its CONNECT_REQUEST event.
fn on_connect_request(ctx: &Context, listen: ListenId, conn: ConnId, req: &ReqInfo) {
    let Some(l) = owner_of_listen(ctx, listen) else {
        let _ = ctx.lock().cm().reject(conn, &[]);
        return;
    };
    let listener = CmId { inner: l };
    let xrc = listener.inner.lock().xrc;
    if xrc != (req.qp_type == CmQpType::Xrc) {
        // (the kernel's cma_check_req_qp_type: no listener of this type)
        let _ = ctx.lock().cm().reject(conn, &[]);
        return;
    }
    let child =
        CmId { inner: Arc::new(IdInner::new(listener.inner.chan.clone(), listener.inner.ps)) };
    let hdr = IpCmHeader::parse(&req.private_data).ok();
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    {
        let mut st = child.inner.lock();
        st.xrc = xrc;
        st.ctx = Some(ctx.clone());
        st.local = Some(SocketAddr::new(ctx.addr(), port));
        let peer_ip = hdr.map(|h| h.src).unwrap_or_else(|| ip_of_gid(&req.remote.gid));
        st.remote = Some(SocketAddr::new(canonical(peer_ip), hdr.map(|h| h.src_port).unwrap_or(0)));
        st.role = Role::Requested;
        st.conn = Some(conn);
        st.route_resolved = true;
        st.peer_qpn = req.remote_qpn;
        st.peer_psn = req.starting_psn;
        st.peer_mtu = req.path_mtu;
        st.peer_retry = req.retry_count;
        st.peer_rnr_retry = req.rnr_retry_count;
        st.req_tc = Some(req.path.traffic_class);
        // as librdmacm: an accept with 0xFF takes the requester's
        // offer within this device's limits
        let dev = ctx.query_device();
        st.max_init_depth = req.responder_resources.min(dev.max_qp_init_rd_atom);
        st.max_resp_res = req.initiator_depth.min(dev.max_qp_rd_atom);
    }
    route_conn(ctx, conn, &child.inner);
    let app =
        if hdr.is_some() { &req.private_data[IP_CM_HEADER_LEN..] } else { &req.private_data[..] };
    let mut e = child.event(CmEventKind::ConnectRequest, 0);
    e.listen_id = Some(listener.clone());
    e.param = ConnParam {
        private_data: app.to_vec(),
        responder_resources: req.responder_resources,
        initiator_depth: req.initiator_depth,
        retry_count: req.retry_count,
        rnr_retry_count: req.rnr_retry_count,
        srq: req.srq,
        qp_num: Some(req.remote_qpn),
    };
    listener.emit(e);
}

/// A SIDR_REQ for a listener of this process (UD): a new identifier, its CONNECT_REQUEST event.
fn on_sidr_request(
    ctx: &Context,
    listen: ListenId,
    conn: ConnId,
    remote: PeerAddr,
    private_data: Vec<u8>,
) {
    let Some(l) = owner_of_listen(ctx, listen) else { return };
    let listener = CmId { inner: l };
    let child =
        CmId { inner: Arc::new(IdInner::new(listener.inner.chan.clone(), listener.inner.ps)) };
    let hdr = IpCmHeader::parse(&private_data).ok();
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let peer_ip = canonical(hdr.map(|h| h.src).unwrap_or_else(|| ip_of_gid(&remote.gid)));
    {
        let mut st = child.inner.lock();
        st.ctx = Some(ctx.clone());
        st.local = Some(SocketAddr::new(ctx.addr(), port));
        st.remote = Some(SocketAddr::new(peer_ip, hdr.map(|h| h.src_port).unwrap_or(0)));
        st.role = Role::Requested;
        st.conn = Some(conn);
        st.route_resolved = true;
    }
    route_conn(ctx, conn, &child.inner);
    let app = if hdr.is_some() { &private_data[IP_CM_HEADER_LEN..] } else { &private_data[..] };
    let mut e = child.event(CmEventKind::ConnectRequest, 0);
    e.listen_id = Some(listener.clone());
    e.param = ConnParam { private_data: app.to_vec(), ..ConnParam::default() };
    e.ud = Some(UdParam { ah: crate::create_ah(peer_ip), qp_num: 0, qkey: RDMA_UDP_QKEY });
    listener.emit(e);
}

/// A REP: CONNECT_RESPONSE when the application moves its own QP; otherwise the QP is moved to RTS, the RTU sent and ESTABLISHED (or CONNECT_ERROR) reported.
fn on_connect_response(ctx: &Context, conn: ConnId, rep: &RepInfo) {
    let Some(inner) = owner_of_conn(ctx, conn) else {
        let _ = ctx.lock().cm().reject(conn, &[]);
        return;
    };
    let id = CmId { inner };
    let mut st = id.inner.lock();
    // for init_qp_attr when the application moves its own QP
    st.peer_qpn = rep.remote_qpn;
    st.peer_psn = rep.starting_psn;
    st.peer_mtu = rep_mtu(ctx);
    let param = ConnParam {
        private_data: rep.private_data.clone(),
        responder_resources: rep.responder_resources,
        initiator_depth: rep.initiator_depth,
        retry_count: st.param.retry_count,
        rnr_retry_count: rep.rnr_retry_count,
        srq: rep.srq,
        qp_num: Some(rep.remote_qpn),
    };
    let Some(qp) = st.qp.clone() else {
        drop(st);
        let mut e = id.event(CmEventKind::ConnectResponse, 0);
        e.param = param;
        id.emit(e);
        return;
    };
    // librdmacm moves the QP and sends the RTU itself
    let remote = st.remote.map(|r| r.ip()).unwrap_or_else(|| ctx.addr());
    let mine = st.param.clone();
    let mut opts = qp_options(
        ctx,
        ctx.query_port().active_mtu as u8,
        &mine,
        mine.retry_count,
        mine.rnr_retry_count,
    );
    opts.timeout = st.ack_timeout.unwrap_or(opts.timeout);
    // the active side receives at the PSN its REQ named and sends
    // from the one the REP named (the kernel's CM; rping via rxe)
    let peer = QpEndpoint { addr: remote, qpn: rep.remote_qpn, psn: st.psn };
    let moved = qp
        .to_rtr(&peer, &opts, st.traffic_class())
        .and_then(|()| qp.to_rts(rep.starting_psn, &opts));
    match moved {
        Ok(()) => {
            let r = ctx.lock().cm().complete_connect(conn);
            st.role = if r.is_ok() { Role::Connected } else { Role::Gone };
            drop(st);
            ctx.kick();
            let mut e = id.event(
                if r.is_ok() { CmEventKind::Established } else { CmEventKind::ConnectError },
                if r.is_ok() { 0 } else { -22 },
            );
            e.param = param;
            id.emit(e);
        }
        Err(_) => {
            let _ = ctx.lock().cm().reject(conn, &[]);
            st.role = Role::Gone;
            drop(st);
            ctx.kick();
            id.emit(id.event(CmEventKind::ConnectError, -22));
        }
    }
}

/// The passive side's connection is established (an RTU, or traffic before it).
fn on_established(ctx: &Context, conn: ConnId) {
    let Some(inner) = owner_of_conn(ctx, conn) else { return };
    let id = CmId { inner };
    let param = {
        let mut st = id.inner.lock();
        // Only the passive side learns it here (the RTU, or
        // traffic before it). The active side reported ESTABLISHED
        // when it sent the RTU; the engine's own event for that may
        // be pumped much later (after a disconnect, say) and must
        // not be reported again.
        if st.role != Role::Accepted {
            return;
        }
        st.role = Role::Connected;
        st.param.clone()
    };
    let mut e = id.event(CmEventKind::Established, 0);
    e.param = ConnParam { private_data: Vec::new(), ..param };
    id.emit(e);
}

fn ip_of_gid(gid: &[u8; 16]) -> IpAddr {
    canonical(IpAddr::V6(std::net::Ipv6Addr::from(*gid)))
}
