//! [`RawTransport`]: RoCEv2 as whole Ethernet frames on a named interface
//! through an `AF_PACKET` socket (pnet's datalink channel). Needs
//! `CAP_NET_RAW`.
//!
//! Send: Ethernet + IPv4/IPv6 + UDP headers are built here, so every field
//! is ours: IPv4 with DF, TTL 64 and a new identification per packet (as
//! rxe does), UDP checksum 0; IPv6 with hop limit 64 and a real UDP
//! checksum (rxe sends 0 there, which its own receive socket accepts but
//! ordinary Linux UDP sockets drop; `ipv6_zero_udp_checksum` mimics
//! rxe). The core's source port and flow label are kept. The ICRC is recomputed whenever the header differs
//! from the one the core used (always for IPv4: the identification).
//!
//! Receive: frames are filtered to IPv4/IPv6 UDP to our address and port,
//! the ICRC is verified exactly over the real IP header (no guessing, unlike
//! [`crate::UdpTransport`]) and datagrams are delivered with the real
//! [`IpMeta`] (identification, DF, TTL, TOS, flow label).
//!
//! Neighbours: cache → kernel table (`/proc/thread-self/net/arp`, `ip -6
//! neigh`) → our own ARP request / neighbour solicitation, with a bounded
//! queue of frames waiting for the answer. ARP requests and neighbour
//! solicitations for our address are answered when the kernel does not own
//! the address (if it does, the kernel answers). Valid RoCE frames teach us
//! their sender's MAC.
//!
//! ICMP port unreachable: the kernel also gets a copy of every frame; if
//! the address is the kernel's own and no socket is bound to the port, it
//! would answer RoCE traffic with ICMP port unreachable. The transport binds
//! a plain UDP socket on (local, 4791) and discards what it receives (no
//! firewall rules needed). If the address is not assigned to the interface,
//! the kernel does not deliver the frames locally and sends no ICMP.

pub mod neigh;

use crate::counters::{CountersSnapshot, TransportCounters};
use crate::steer::{SteerTap, Verdict};
use crate::udp::SendOutcome;
use bytes::Bytes;
use core::net::{IpAddr, Ipv6Addr, SocketAddr};
use neigh::{Arp, NeighCache, BROADCAST, ETH_ARP, ETH_IPV4, ETH_IPV6};
use nix::sys::socket::{self as nsock, sockopt, AddressFamily, SockFlag, SockProtocol, SockType};
use pnet_datalink::{Channel, DataLinkReceiver, DataLinkSender, NetworkInterface};
use roce_emulator::Datagram;
use roce_packet::icrc_math::IcrcMath;
use roce_packet::{IpMeta, IpUdpHeader, UdpEndpoints};
use roce_pcap::{LinkType, PcapWriter};
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Largest frame read from the socket.
const MAX_FRAME: usize = 65_536 + 14;

/// How to open a [`RawTransport`].
#[derive(Clone, Debug)]
pub struct RawConfig {
    /// Interface name (`eth0`, `veth-a`...).
    pub interface: String,
    /// Our IP address (source of every frame, the only destination accepted).
    pub local: IpAddr,
    /// UDP port (4791).
    pub port: u16,
    /// IPv4 TTL / IPv6 hop limit (64).
    pub ttl: u8,
    /// First IPv4 identification (then +1 per packet, wrapping).
    pub first_ipv4_id: u16,
    /// Send IPv6 with UDP checksum 0 as rxe does (default false: a real
    /// checksum, which rxe accepts too and ordinary Linux sockets require).
    pub ipv6_zero_udp_checksum: bool,
    /// Bind a UDP socket on (local, port) and discard what it gets, so the
    /// kernel never answers with ICMP port unreachable (default true).
    pub discard_socket: bool,
    /// Answer ARP/NS for `local`: `None` = only if the kernel does not own
    /// the address on the interface.
    pub answer_neighbour: Option<bool>,
    /// How long a resolved neighbour is trusted (30 s).
    pub neigh_ttl: Duration,
    /// Interval between our ARP/NS requests (200 ms).
    pub neigh_retry: Duration,
    /// Requests before the waiting frames are dropped (5).
    pub neigh_tries: u32,
    /// Most frames waiting for resolution in total (256).
    pub max_pending: usize,
    /// Frames read per `recv` call (64).
    pub batch: usize,
    /// Neighbours known up front (IP → MAC), never expiring lookups.
    pub static_neighbours: Vec<(IpAddr, [u8; 6])>,
    /// Record every RoCE frame sent and received (as on the wire) here.
    pub pcap: Option<PathBuf>,
    /// Bind the discard socket with `SO_REUSEPORT`: the device is shared by
    /// several processes (`roce-host`), each with a discard socket.
    pub shared: bool,
}

impl RawConfig {
    /// Defaults on `interface` for `local`, port 4791.
    pub fn new(interface: impl Into<String>, local: IpAddr) -> RawConfig {
        RawConfig {
            interface: interface.into(),
            local,
            port: roce_packet::ROCE_V2_PORT,
            ttl: 64,
            first_ipv4_id: 1,
            ipv6_zero_udp_checksum: false,
            discard_socket: true,
            answer_neighbour: None,
            neigh_ttl: Duration::from_secs(30),
            neigh_retry: Duration::from_millis(200),
            neigh_tries: 5,
            max_pending: 256,
            batch: 64,
            static_neighbours: Vec::new(),
            pcap: None,
            shared: false,
        }
    }
}

/// Why a [`RawTransport`] could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RawError {
    /// No `CAP_NET_RAW` (EPERM/EACCES from the packet socket).
    #[error(
        "opening a raw (AF_PACKET) socket on {interface} needs CAP_NET_RAW: run as root or \
         `setcap cap_net_raw+ep <binary>`, or use the UDP transport (UdpTransport) instead"
    )]
    PermissionDenied {
        /// The interface asked for.
        interface: String,
    },
    /// No interface of that name (in this network namespace).
    #[error("no network interface named {0:?} (see `ip link`)")]
    NoSuchInterface(String),
    /// The interface has no Ethernet MAC address.
    #[error("interface {0:?} has no Ethernet MAC address")]
    NoMac(String),
    /// The local address is unspecified or multicast.
    #[error("unusable local address {0}: give the interface's unicast address")]
    BadAddress(IpAddr),
    /// Another system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The pcap file could not be created.
    #[error("cannot create pcap file: {0}")]
    Pcap(#[from] roce_pcap::CaptureError),
}

impl RawError {
    /// Map an error from opening the packet socket: EPERM/EACCES become
    /// [`RawError::PermissionDenied`].
    pub fn from_open(interface: &str, what: &'static str, e: io::Error) -> RawError {
        match e.raw_os_error() {
            Some(libc_eperm) if libc_eperm == nix::errno::Errno::EPERM as i32 => {
                RawError::PermissionDenied { interface: interface.into() }
            }
            Some(c) if c == nix::errno::Errno::EACCES as i32 => {
                RawError::PermissionDenied { interface: interface.into() }
            }
            _ if e.kind() == io::ErrorKind::PermissionDenied => {
                RawError::PermissionDenied { interface: interface.into() }
            }
            _ => RawError::Io { what, source: e },
        }
    }
}

macro_rules! raw_counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Counters specific to a [`RawTransport`] (relaxed atomics); the
        /// common ones are in [`TransportCounters`].
        #[derive(Debug, Default)]
        pub struct RawCounters { $( $(#[$doc])* pub $name: AtomicU64, )* }

        /// A copy of [`RawCounters`] at one moment.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct RawSnapshot { $( $(#[$doc])* pub $name: u64, )* }

        impl RawCounters {
            /// Read every counter.
            pub fn snapshot(&self) -> RawSnapshot {
                RawSnapshot { $( $name: self.$name.load(Ordering::Relaxed), )* }
            }
        }
        impl RawSnapshot {
            /// `(name, value)` pairs, in declaration order.
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                vec![$( (stringify!($name), self.$name), )*]
            }
        }
    };
}

raw_counters! {
    /// Frames read from the packet socket (any kind).
    frames_in,
    /// Frames written to the packet socket (RoCE, ARP, NDP).
    frames_out,
    /// RoCE frames written.
    roce_frames_out,
    /// Frames dropped as not ours (other protocols, addresses, ports).
    not_ours,
    /// Our own outgoing frames seen by the socket (ignored).
    own_frames,
    /// UDP-to-our-port frames with inconsistent lengths or truncated.
    malformed,
    /// ARP requests we sent.
    arp_requests,
    /// ARP replies we sent (answering for our address).
    arp_replies,
    /// ARP replies received for our address.
    arp_replies_in,
    /// Neighbour solicitations we sent.
    ns_sent,
    /// Neighbour advertisements we sent.
    na_sent,
    /// Neighbour advertisements received.
    na_in,
    /// Neighbours found in the kernel's table.
    neigh_kernel,
    /// Neighbours learnt from received frames (ARP, NDP, valid RoCE).
    neigh_learned,
    /// Frames queued waiting for resolution.
    pending_queued,
    /// Frames dropped: queue full or resolution failed.
    pending_dropped,
    /// Datagrams the discard socket took from the kernel (and dropped).
    kernel_copies_discarded,
}

/// The pcap file: staged like the UDP recorder's, so the file only ever
/// ends between whole records (a program that exits without closing its
/// device left a record header without its data: the raw transport wrote
/// through a plain `BufWriter`, which could flush between the two).
type SharedFile = crate::pcap::Shared;

fn add(c: &AtomicU64, v: u64) {
    c.fetch_add(v, Ordering::Relaxed);
}

/// Everything except the receiver (so a received frame, borrowed from the
/// receiver, can be handled with `&mut State`).
struct State {
    cfg: RawConfig,
    tx: Box<dyn DataLinkSender>,
    mac: [u8; 6],
    mtu: usize,
    answer: bool,
    next_id: u16,
    /// ICRC arithmetic for resealing (see [`State::build`]).
    crc: IcrcMath,
    neigh: NeighCache,
    counters: Arc<TransportCounters>,
    raw: Arc<RawCounters>,
    pcap: Option<(PcapWriter<SharedFile>, SharedFile)>,
    discard: Option<UdpSocket>,
    flush: Vec<Vec<u8>>,
    /// The member's slot when the device is shared ([`crate::steer`]).
    steer: Option<SteerTap>,
    /// When shared: whether this member is the one that answers ARP/NS now.
    answer_gate: Option<AnswerGate>,
    /// The multicast groups joined (see [`RawTransport::join_group`]), each
    /// with the socket that holds the interface's membership.
    groups: Vec<(IpAddr, OwnedFd)>,
}

/// Asked on each ARP request / neighbour solicitation for our address when
/// the device is shared: whether this member is the one that answers.
pub type AnswerGate = Arc<dyn Fn() -> bool + Send + Sync>;

/// RoCEv2 over an `AF_PACKET` socket. See the module documentation.
pub struct RawTransport {
    rx: Box<dyn DataLinkReceiver>,
    poll_fd: OwnedFd,
    st: State,
    kernel_owns: bool,
}

fn find_interface(name: &str) -> Option<NetworkInterface> {
    pnet_datalink::interfaces().into_iter().find(|i| i.name == name)
}

impl RawTransport {
    /// Open the packet socket on `cfg.interface`, bind the discard socket,
    /// create the pcap file.
    pub fn open(cfg: RawConfig) -> Result<RawTransport, RawError> {
        if cfg.local.is_unspecified() || cfg.local.is_multicast() {
            return Err(RawError::BadAddress(cfg.local));
        }
        let iface = find_interface(&cfg.interface)
            .ok_or_else(|| RawError::NoSuchInterface(cfg.interface.clone()))?;
        let mac = iface.mac.ok_or_else(|| RawError::NoMac(cfg.interface.clone()))?.octets();
        let kernel_owns = iface.ips.iter().any(|n| n.ip() == cfg.local);
        let mtu = std::fs::read_to_string(format!("/sys/class/net/{}/mtu", cfg.interface))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1500usize);
        let sock = nsock::socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::EthAll,
        )
        .map_err(|e| RawError::from_open(&cfg.interface, "packet socket", e.into()))?;
        let _ = nsock::setsockopt(&sock, sockopt::RcvBuf, &(4usize << 20));
        let _ = nsock::setsockopt(&sock, sockopt::SndBuf, &(4usize << 20));
        let poll_fd = sock
            .try_clone()
            .map_err(|source| RawError::Io { what: "dup packet socket", source })?;
        let pcfg = pnet_datalink::Config {
            write_buffer_size: MAX_FRAME,
            read_buffer_size: MAX_FRAME,
            read_timeout: Some(Duration::ZERO),
            write_timeout: Some(Duration::ZERO),
            promiscuous: false,
            socket_fd: Some(sock.into_raw_fd()),
            ..Default::default()
        };
        let (tx, rx) = match pnet_datalink::channel(&iface, pcfg) {
            Ok(Channel::Ethernet(tx, rx)) => (tx, rx),
            Ok(_) => {
                return Err(RawError::Io {
                    what: "datalink channel",
                    source: io::Error::other("not an Ethernet channel"),
                })
            }
            Err(e) => return Err(RawError::from_open(&cfg.interface, "bind packet socket", e)),
        };
        let discard = if cfg.discard_socket { bind_discard(&cfg)? } else { None };
        let pcap = match &cfg.pcap {
            Some(p) => {
                let file = SharedFile::create(p).map_err(roce_pcap::CaptureError::from)?;
                let w = PcapWriter::new(file.clone(), LinkType::Ethernet)?;
                file.commit().map_err(roce_pcap::CaptureError::from)?;
                Some((w, file))
            }
            None => None,
        };
        let now = Instant::now();
        let mut neigh = NeighCache::new(cfg.neigh_ttl, cfg.max_pending.max(1));
        for (ip, m) in &cfg.static_neighbours {
            neigh.insert(*ip, *m, now.checked_add(Duration::from_secs(1 << 30)).unwrap_or(now));
        }
        let answer = cfg.answer_neighbour.unwrap_or(!kernel_owns);
        Ok(RawTransport {
            rx,
            poll_fd,
            kernel_owns,
            st: State {
                tx,
                mac,
                mtu,
                answer,
                next_id: cfg.first_ipv4_id,
                crc: IcrcMath::new(),
                neigh,
                counters: Arc::new(TransportCounters::default()),
                raw: Arc::new(RawCounters::default()),
                pcap,
                discard,
                flush: Vec::new(),
                steer: None,
                answer_gate: None,
                groups: Vec::new(),
                cfg,
            },
        })
    }

    /// Our address and port.
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(self.st.cfg.local, self.st.cfg.port)
    }
    /// The interface's MAC address (source of every frame).
    pub fn mac(&self) -> [u8; 6] {
        self.st.mac
    }
    /// Whether the address is assigned to the interface (the kernel then
    /// answers ARP/NS itself).
    pub fn kernel_owns_address(&self) -> bool {
        self.kernel_owns
    }
    /// Whether we answer ARP/NS for our address.
    pub fn answers_neighbour_requests(&self) -> bool {
        self.st.answer
    }
    /// Share the device with other processes: `tap` is this member's slot.
    /// A RoCE datagram for another slot that gets past the member's socket
    /// filter (attached by `roce-host` on [`RawTransport::try_clone_socket`];
    /// before it is attached, the socket sees every frame) is dropped and
    /// counted (`steer_foreign`); ARP/NS for our address are answered only
    /// when `gate` says this member is the one that answers.
    pub fn set_steer(&mut self, tap: SteerTap, gate: AnswerGate) {
        self.st.steer = Some(tap);
        self.st.answer_gate = Some(gate);
    }

    /// A second handle on the packet socket (for its filter).
    pub fn try_clone_socket(&self) -> io::Result<OwnedFd> {
        self.poll_fd.try_clone()
    }

    /// Whether the discard socket is bound (see the module documentation).
    pub fn discard_socket_bound(&self) -> bool {
        self.st.discard.is_some()
    }
    /// Receive the RoCEv2 datagrams sent to the IP multicast group `group`
    /// from now on. The interface joins the group in the kernel (a socket
    /// of ours holds the membership, `IP_ADD_MEMBERSHIP` /
    /// `IPV6_ADD_MEMBERSHIP` with the interface's index): the kernel sends
    /// the IGMP/MLD report switches snoop and programs the NIC to accept
    /// the group's Ethernet address (01:00:5e:.. / 33:33:..), and the
    /// packet socket then takes the frames to the group's address and port.
    /// That socket is bound to no port, so the kernel's stack delivers it
    /// nothing. The sending device does not get its own datagrams back (a
    /// packet socket does not see the frames it sends). Joining twice is a
    /// no-op; a group of the other IP family is `InvalidInput`.
    pub fn join_group(&mut self, group: IpAddr) -> io::Result<()> {
        let st = &mut self.st;
        if st.groups.iter().any(|(g, _)| *g == group) {
            return Ok(());
        }
        if !group.is_multicast() || group.is_ipv4() != st.cfg.local.is_ipv4() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{group}: not a multicast group of the device's IP family"),
            ));
        }
        let ifindex = nix::net::if_::if_nametoindex(st.cfg.interface.as_str())?;
        let family = if group.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
        let fd = nsock::socket(family, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None)?;
        match group {
            IpAddr::V4(g) => rustix::net::sockopt::set_ip_add_membership_with_ifindex(
                &fd,
                &g,
                &std::net::Ipv4Addr::UNSPECIFIED,
                ifindex,
            )?,
            IpAddr::V6(g) => rustix::net::sockopt::set_ipv6_add_membership(&fd, &g, ifindex)?,
        }
        st.groups.push((group, fd));
        Ok(())
    }

    /// Stop receiving `group` (the membership's socket closes: the kernel
    /// leaves the group on the interface).
    pub fn leave_group(&mut self, group: IpAddr) -> io::Result<()> {
        let at = self.st.groups.iter().position(|(g, _)| *g == group).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{group} is not joined"))
        })?;
        self.st.groups.remove(at);
        Ok(())
    }

    /// The groups joined.
    pub fn groups(&self) -> Vec<IpAddr> {
        self.st.groups.iter().map(|(g, _)| *g).collect()
    }

    /// The common counters.
    pub fn counters(&self) -> Arc<TransportCounters> {
        self.st.counters.clone()
    }
    /// The raw-specific counters (take the `Arc` before handing the
    /// transport to a driver).
    pub fn raw_counters(&self) -> Arc<RawCounters> {
        self.st.raw.clone()
    }
    /// Snapshot of the common counters.
    pub fn snapshot(&self) -> CountersSnapshot {
        self.st.counters.snapshot()
    }
    /// Write buffered pcap frames to the file.
    pub fn flush_pcap(&mut self) {
        if let Some((_, f)) = self.st.pcap.as_mut() {
            let _ = io::Write::flush(f);
        }
    }

    /// Send in order: build each frame, resolve its next hop (frames for
    /// unresolved neighbours wait in a bounded queue and count as
    /// consumed). Stops with `would_block` when the socket is full.
    pub fn send(&mut self, dgrams: &[Datagram]) -> SendOutcome {
        let now = Instant::now();
        self.st.tick(now);
        for (i, d) in dgrams.iter().enumerate() {
            if !self.st.send_one(d, now) {
                return SendOutcome { consumed: i, would_block: true, credit_wait: false };
            }
        }
        SendOutcome { consumed: dgrams.len(), would_block: false, credit_wait: false }
    }

    /// Read up to `batch` frames: RoCE datagrams for us are verified and
    /// appended to `out`; ARP/NDP are handled. Also drains the discard
    /// socket and retries pending resolutions. Returns the frames read.
    pub fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<usize> {
        let now = Instant::now();
        let mut n = 0;
        while n < self.st.cfg.batch.max(1) {
            match self.rx.next() {
                Ok(f) => {
                    n += 1;
                    self.st.handle_frame(f, now, out);
                }
                Err(e) if is_would_block(&e) => break,
                Err(_) => {
                    TransportCounters::add(&self.st.counters.recv_errors, 1);
                    break;
                }
            }
        }
        self.st.drain_discard();
        self.st.tick(now);
        self.st.send_flushed();
        Ok(n)
    }
}

fn is_would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Bind the discard socket; an address the kernel does not own is fine
/// (no local delivery, no ICMP), a port in use too (someone else's socket
/// keeps the kernel from sending ICMP).
fn bind_discard(cfg: &RawConfig) -> Result<Option<UdpSocket>, RawError> {
    let local = SocketAddr::new(cfg.local, cfg.port);
    let bound = match cfg.shared {
        true => crate::udp::bind_reuseport(local),
        false => UdpSocket::bind(local),
    };
    match bound {
        Ok(s) => {
            s.set_nonblocking(true)
                .map_err(|source| RawError::Io { what: "discard socket O_NONBLOCK", source })?;
            let _ = nsock::setsockopt(&s, sockopt::RcvBuf, &(64usize << 10));
            Ok(Some(s))
        }
        Err(e) => {
            tracing::info!("raw transport: no discard socket on {}:{}: {e}", cfg.local, cfg.port);
            Ok(None)
        }
    }
}

impl State {
    fn record(&mut self, frame: &[u8]) {
        if let Some((p, f)) = self.pcap.as_mut() {
            let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            let c = if p.write_frame(ts, frame).is_ok() && f.commit().is_ok() {
                &self.counters.pcap_frames
            } else {
                &self.counters.pcap_errors
            };
            TransportCounters::add(c, 1);
        }
    }

    /// Write one frame; false if the socket is full.
    fn write(&mut self, frame: &[u8]) -> Result<(), bool> {
        match self.tx.send_to(frame, None) {
            Some(Ok(())) => {
                add(&self.raw.frames_out, 1);
                Ok(())
            }
            Some(Err(e)) if is_would_block(&e) => Err(true),
            _ => Err(false),
        }
    }

    fn write_roce(&mut self, frame: &[u8], payload_len: usize) -> bool {
        match self.write(frame) {
            Ok(()) => {
                add(&self.raw.roce_frames_out, 1);
                TransportCounters::add(&self.counters.dgrams_out, 1);
                TransportCounters::add(&self.counters.bytes_out, payload_len as u64);
                self.record(frame);
                true
            }
            Err(true) => false,
            Err(false) => {
                TransportCounters::add(&self.counters.send_errors, 1);
                true
            }
        }
    }

    /// Build and send (or queue) one datagram. False: socket full, retry.
    fn send_one(&mut self, d: &Datagram, now: Instant) -> bool {
        // (a payload in region memory is copied into the frame)
        let flat;
        let d = match d.body {
            None => d,
            Some(_) => match d.clone().flatten() {
                Some(f) => {
                    flat = f;
                    &flat
                }
                None => {
                    TransportCounters::add(&self.counters.send_errors, 1);
                    return true;
                }
            },
        };
        let Some(frame) = self.build(d) else {
            TransportCounters::add(&self.counters.send_errors, 1);
            return true;
        };
        if frame.len() > self.mtu + 14 {
            TransportCounters::add(&self.counters.send_errors, 1);
            return true;
        }
        let dst = d.endpoints.dst;
        let plen = d.payload.len();
        if let Some(mac) = multicast_mac(&dst) {
            // a group: its Ethernet address, nobody to resolve
            let mut frame = frame;
            frame[..6].copy_from_slice(&mac);
            return self.write_roce(&frame, plen);
        }
        if !self.neigh.is_pending(&dst) {
            if let Some(mac) = self.resolve(&dst, now) {
                let mut frame = frame;
                frame[..6].copy_from_slice(&mac);
                return self.write_roce(&frame, plen);
            }
        }
        match self.neigh.enqueue(dst, frame, now) {
            Ok(first) => {
                add(&self.raw.pending_queued, 1);
                if first {
                    self.solicit(&dst, now);
                }
            }
            Err(_) => add(&self.raw.pending_dropped, 1),
        }
        true
    }

    /// The frame for `d` (destination MAC still zero). The core sealed the
    /// ICRC for the header `d` states; when ours differs (our IPv4
    /// identification counter) it is resealed from the header difference
    /// (`IcrcMath::fix_fields`, the one way a link changes an ICRC; see
    /// `roce_emulator::LinkProfile`), without a pass over the payload.
    /// `None` if `d` cannot be sent.
    fn build(&mut self, d: &Datagram) -> Option<Vec<u8>> {
        let local = self.cfg.local;
        if local.is_ipv4() != d.endpoints.dst.is_ipv4() || d.payload.len() < 4 {
            return None;
        }
        let ep = UdpEndpoints { src: local, ..d.endpoints };
        let mut meta = IpMeta { ttl: self.cfg.ttl, dont_fragment: true, ..d.meta };
        if local.is_ipv4() {
            meta.ipv4_id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
        } else {
            meta.ipv4_id = 0;
        }
        let h = IpUdpHeader::build(&ep, &meta, d.payload.len()).ok()?;
        let core = IpUdpHeader::build(&d.endpoints, &d.meta, d.payload.len()).ok();
        let et = if local.is_ipv4() { ETH_IPV4 } else { ETH_IPV6 };
        let mut f = Vec::with_capacity(14 + h.as_bytes().len() + d.payload.len());
        neigh::eth_header(&mut f, [0; 6], self.mac, et);
        f.extend_from_slice(h.as_bytes());
        f.extend_from_slice(&d.payload);
        if core.map(|c| c.as_bytes() != h.as_bytes()).unwrap_or(true) {
            let n = f.len() - 4;
            let sealed = u32::from_le_bytes(f[n..].try_into().ok()?);
            let len = d.payload.len();
            let icrc = self.crc.fix_fields((&d.endpoints, &d.meta), (&ep, &meta), len, sealed)?;
            f[n..].copy_from_slice(&icrc.to_le_bytes());
            TransportCounters::add(&self.counters.icrc_recomputed, 1);
        }
        if let (IpAddr::V6(s), IpAddr::V6(t), false) =
            (ep.src, ep.dst, self.cfg.ipv6_zero_udp_checksum)
        {
            let udp = 14 + 40;
            let c = neigh::udp6_checksum(&s, &t, &f[udp..]);
            f[udp + 6..udp + 8].copy_from_slice(&c.to_be_bytes());
        }
        Some(f)
    }

    /// Cache, then the kernel's table.
    fn resolve(&mut self, ip: &IpAddr, now: Instant) -> Option<[u8; 6]> {
        // another member of this shared device: our own MAC (see handle_frame)
        if *ip == self.cfg.local && self.steer.is_some() {
            return Some(self.mac);
        }
        if let Some(m) = self.neigh.get(ip, now) {
            return Some(m);
        }
        let m = kernel_neighbour(ip, &self.cfg.interface)?;
        add(&self.raw.neigh_kernel, 1);
        self.neigh.insert(*ip, m, now);
        Some(m)
    }

    /// Send an ARP request / neighbour solicitation for `ip`.
    fn solicit(&mut self, ip: &IpAddr, now: Instant) {
        let f = match (ip, self.cfg.local) {
            (IpAddr::V4(t), IpAddr::V4(s)) => {
                add(&self.raw.arp_requests, 1);
                Arp { op: 1, sha: self.mac, spa: s, tha: [0; 6], tpa: *t }.frame(BROADCAST)
            }
            (IpAddr::V6(t), IpAddr::V6(s)) => {
                add(&self.raw.ns_sent, 1);
                let dst = neigh::solicited_node(t);
                neigh::ndp_frame(135, self.mac, neigh::ipv6_multicast_mac(&dst), &s, &dst, t, 0)
            }
            _ => return,
        };
        let _ = self.write(&f);
        if let Some(w) = self.neigh.pending.get_mut(ip) {
            w.tries += 1;
            w.next_try = now + self.cfg.neigh_retry;
        }
    }

    /// Retry or give up pending resolutions (the kernel's table is read
    /// again before each retry: another program may have resolved it).
    fn tick(&mut self, now: Instant) {
        let due: Vec<(IpAddr, u32)> = self
            .neigh
            .pending
            .iter()
            .filter(|(_, w)| w.next_try <= now)
            .map(|(ip, w)| (*ip, w.tries))
            .collect();
        for (ip, tries) in due {
            if let Some(m) = kernel_neighbour(&ip, &self.cfg.interface) {
                add(&self.raw.neigh_kernel, 1);
                let q = self.neigh.insert(ip, m, now);
                self.queue_flush(q, m);
            } else if tries >= self.cfg.neigh_tries {
                let n = self.neigh.give_up(&ip) as u64;
                add(&self.raw.pending_dropped, n);
                TransportCounters::add(&self.counters.send_errors, n);
            } else {
                self.solicit(&ip, now);
            }
        }
    }

    fn queue_flush(&mut self, q: std::collections::VecDeque<Vec<u8>>, mac: [u8; 6]) {
        for mut f in q {
            f[..6].copy_from_slice(&mac);
            self.flush.push(f);
        }
    }

    fn send_flushed(&mut self) {
        let frames = std::mem::take(&mut self.flush);
        for f in frames {
            let plen = f.len().saturating_sub(14 + if self.cfg.local.is_ipv4() { 28 } else { 48 });
            // A full socket here drops the frame (counted as a send error).
            if !self.write_roce(&f, plen) {
                TransportCounters::add(&self.counters.send_errors, 1);
            }
        }
    }

    fn learn(&mut self, ip: IpAddr, mac: [u8; 6], now: Instant) {
        if mac == [0; 6] || mac[0] & 1 != 0 {
            return;
        }
        if self.neigh.get(&ip, now) != Some(mac) || self.neigh.is_pending(&ip) {
            add(&self.raw.neigh_learned, 1);
            let q = self.neigh.insert(ip, mac, now);
            self.queue_flush(q, mac);
        }
    }

    fn drain_discard(&mut self) {
        let Some(s) = self.discard.as_ref() else { return };
        let mut buf = [0u8; 2048];
        for _ in 0..256 {
            match s.recv_from(&mut buf) {
                Ok(_) => add(&self.raw.kernel_copies_discarded, 1),
                Err(_) => break,
            }
        }
    }

    fn handle_frame(&mut self, f: &[u8], now: Instant, out: &mut Vec<Datagram>) {
        add(&self.raw.frames_in, 1);
        if f.len() < 14 {
            add(&self.raw.not_ours, 1);
            return;
        }
        let src_mac: [u8; 6] = f[6..12].try_into().unwrap_or([0; 6]);
        let ethertype = u16::from_be_bytes([f[12], f[13]]);
        // Our own frames, seen as they leave, are dropped; except, on a
        // shared device, another member's datagrams to this device's
        // address (to a QP of ours, or the socket filter would not have
        // passed them): members of one device reach each other through the
        // copy of each outgoing frame the kernel gives every packet socket
        // but the sender's.
        let from_member = self.steer.is_some() && matches!(ethertype, ETH_IPV4 | ETH_IPV6);
        if src_mac == self.mac && !from_member {
            add(&self.raw.own_frames, 1);
            return;
        }
        match ethertype {
            ETH_ARP => self.handle_arp(&f[14..], now),
            ETH_IPV6 if neigh::parse_ndp(&f[14..]).is_some() => self.handle_ndp(&f[14..], now),
            ETH_IPV4 | ETH_IPV6 => self.handle_ip(f, src_mac, now, out),
            _ => add(&self.raw.not_ours, 1),
        }
    }

    /// Whether to answer an ARP request / neighbour solicitation for our
    /// address now: the configuration says so and, when the device is
    /// shared, this member is the one that answers (exactly one does).
    fn answers_now(&self) -> bool {
        self.answer && self.answer_gate.as_ref().is_none_or(|g| g())
    }

    fn handle_arp(&mut self, p: &[u8], now: Instant) {
        let (Some(a), IpAddr::V4(me)) = (Arp::parse(p), self.cfg.local) else {
            add(&self.raw.not_ours, 1);
            return;
        };
        if a.tpa != me {
            add(&self.raw.not_ours, 1);
            return;
        }
        match a.op {
            2 => {
                add(&self.raw.arp_replies_in, 1);
                self.learn(IpAddr::V4(a.spa), a.sha, now);
            }
            1 => {
                self.learn(IpAddr::V4(a.spa), a.sha, now);
                if self.answers_now() {
                    let r = Arp { op: 2, sha: self.mac, spa: me, tha: a.sha, tpa: a.spa };
                    if self.write(&r.frame(a.sha)).is_ok() {
                        add(&self.raw.arp_replies, 1);
                    }
                }
            }
            _ => add(&self.raw.not_ours, 1),
        }
        self.send_flushed();
    }

    fn handle_ndp(&mut self, p: &[u8], now: Instant) {
        let (Some(n), IpAddr::V6(me)) = (neigh::parse_ndp(p), self.cfg.local) else {
            add(&self.raw.not_ours, 1);
            return;
        };
        if n.target != me && n.kind == 135 {
            add(&self.raw.not_ours, 1);
            return;
        }
        if n.kind == 136 {
            add(&self.raw.na_in, 1);
            if let Some(m) = n.lladdr {
                self.learn(IpAddr::V6(n.target), m, now);
            }
        } else {
            if let Some(m) = n.lladdr {
                if !n.src.is_unspecified() {
                    self.learn(IpAddr::V6(n.src), m, now);
                }
            }
            if self.answers_now() && !n.src.is_unspecified() {
                if let Some(m) = n.lladdr {
                    // Solicited + override.
                    let f = neigh::ndp_frame(136, self.mac, m, &me, &n.src, &me, 0x60);
                    if self.write(&f).is_ok() {
                        add(&self.raw.na_sent, 1);
                    }
                }
            }
        }
        self.send_flushed();
    }

    fn handle_ip(&mut self, f: &[u8], src_mac: [u8; 6], now: Instant, out: &mut Vec<Datagram>) {
        use roce_packet::frame::parse_frame;
        let ds = match parse_frame(LinkType::Ethernet, f, self.cfg.port) {
            Ok(Some(ds)) => ds,
            Ok(None) => {
                add(&self.raw.not_ours, 1);
                return;
            }
            Err(_) => {
                add(&self.raw.malformed, 1);
                return;
            }
        };
        // A frame on the wire is one datagram: a "split" means a bad ICRC.
        if ds.len() != 1 {
            TransportCounters::add(&self.counters.icrc_bad, 1);
            return;
        }
        let Some(d) = ds.into_iter().next() else { return };
        let group = d.endpoints.dst.is_multicast();
        if d.endpoints.dst != self.cfg.local
            && !(group && self.groups.iter().any(|(g, _)| *g == d.endpoints.dst))
        {
            add(&self.raw.not_ours, 1);
            return;
        }
        if d.truncated || d.udp_payload.len() < 4 {
            add(&self.raw.malformed, 1);
            return;
        }
        TransportCounters::add(&self.counters.dgrams_in, 1);
        TransportCounters::add(&self.counters.bytes_in, d.udp_payload.len() as u64);
        // (a group's datagram is every joined member's: QPN 0xFFFFFF names
        // no member's slot)
        if let Some(tap) = self.steer.as_ref().filter(|_| !group) {
            match tap.classify(&d.udp_payload) {
                Verdict::Mine => {}
                Verdict::Foreign(slot) => {
                    TransportCounters::add(&self.counters.steer_foreign, 1);
                    tap.shared.note_foreign(slot);
                    return;
                }
                // probes and envelopes steer UDP groups; a raw member's
                // filter takes its own frames
                Verdict::Probe(_) | Verdict::Envelope { .. } => {
                    add(&self.raw.malformed, 1);
                    return;
                }
            }
        }
        if !d.icrc_ok() {
            TransportCounters::add(&self.counters.icrc_bad, 1);
            return;
        }
        TransportCounters::add(&self.counters.icrc_ok_exact, 1);
        if group {
            TransportCounters::add(&self.counters.mcast_in, 1);
        }
        self.record(f);
        self.learn(d.endpoints.src, src_mac, now);
        out.push(Datagram {
            endpoints: d.endpoints,
            meta: d.meta,
            payload: Bytes::from(d.udp_payload),
            body: None,
        });
    }
}

/// Look `ip` up in the kernel's neighbour table of this thread's network
/// namespace (`/proc/thread-self/net/arp`; `ip -6 neigh show`).
pub fn kernel_neighbour(ip: &IpAddr, dev: &str) -> Option<[u8; 6]> {
    match ip {
        IpAddr::V4(v4) => {
            let t = std::fs::read_to_string("/proc/thread-self/net/arp")
                .or_else(|_| std::fs::read_to_string("/proc/net/arp"))
                .ok()?;
            neigh::lookup_proc_arp(&t, *v4, dev)
        }
        IpAddr::V6(v6) => ip6_neigh(v6, dev),
    }
}

fn ip6_neigh(ip: &Ipv6Addr, dev: &str) -> Option<[u8; 6]> {
    let o = std::process::Command::new("ip")
        .args(["-6", "neigh", "show", &ip.to_string(), "dev", dev])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&o.stdout);
    // `ip neigh show ADDR dev DEV` omits the device: prefix-free lines.
    neigh::lookup_ip_neigh(&text, *ip)
}

impl AsFd for RawTransport {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.poll_fd.as_fd()
    }
}

impl crate::socket::Link for RawTransport {
    /// Checks every received ICRC against the real IP header; keeps each
    /// QP's source port; sends flat frames.
    fn profile(&self) -> roce_emulator::LinkProfile {
        roce_emulator::LinkProfile {
            rx_icrc: roce_emulator::RxIcrc::Link,
            ..roce_emulator::LinkProfile::default()
        }
    }
    fn send(&mut self, dgrams: &[Datagram]) -> SendOutcome {
        RawTransport::send(self, dgrams)
    }
    fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<usize> {
        RawTransport::recv(self, out)
    }
    fn batch(&self) -> usize {
        self.st.cfg.batch.max(1)
    }
    fn local_addr(&self) -> SocketAddr {
        RawTransport::local_addr(self)
    }
    fn counters(&self) -> Arc<TransportCounters> {
        RawTransport::counters(self)
    }
    fn finish(&mut self) {
        self.flush_pcap();
    }
    fn join_group(&mut self, group: IpAddr) -> io::Result<()> {
        RawTransport::join_group(self, group)
    }
    fn leave_group(&mut self, group: IpAddr) -> io::Result<()> {
        RawTransport::leave_group(self, group)
    }
}

/// The Ethernet address of an IP multicast group (RFC 1112: 01:00:5e and
/// the group's low 23 bits; RFC 2464: 33:33 and its low 32 bits), `None`
/// for a unicast address.
pub fn multicast_mac(ip: &IpAddr) -> Option<[u8; 6]> {
    match ip {
        IpAddr::V4(a) if a.is_multicast() => {
            let o = a.octets();
            Some([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]])
        }
        IpAddr::V6(a) if a.is_multicast() => Some(neigh::ipv6_multicast_mac(a)),
        _ => None,
    }
}

impl Drop for RawTransport {
    fn drop(&mut self) {
        self.flush_pcap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eperm_maps_to_permission_denied_with_instructions() {
        let e = RawError::from_open("eth0", "packet socket", io::Error::from_raw_os_error(1));
        assert!(matches!(e, RawError::PermissionDenied { ref interface } if interface == "eth0"));
        let msg = e.to_string();
        assert!(msg.contains("CAP_NET_RAW"), "{msg}");
        assert!(msg.contains("run as root or `setcap cap_net_raw+ep <binary>`"), "{msg}");
        assert!(msg.contains("use the UDP transport"), "{msg}");
        let e = RawError::from_open("eth0", "x", io::Error::from_raw_os_error(13));
        assert!(matches!(e, RawError::PermissionDenied { .. }));
        let e = RawError::from_open("eth0", "bind", io::Error::from_raw_os_error(19));
        assert!(matches!(e, RawError::Io { what: "bind", .. }), "{e:?}");
    }

    #[test]
    fn unknown_interface_and_bad_address() {
        let e = RawTransport::open(RawConfig::new("no-such-if0", "10.1.2.3".parse().unwrap()));
        assert!(matches!(e, Err(RawError::NoSuchInterface(ref n)) if n == "no-such-if0"));
        let e = RawTransport::open(RawConfig::new("lo", "0.0.0.0".parse().unwrap()));
        assert!(matches!(e, Err(RawError::BadAddress(_))));
    }
}
