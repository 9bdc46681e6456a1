//! [`UdpTransport`]: RoCEv2 datagrams over a plain (unprivileged) UDP socket.
//!
//! Send side: the socket is unconnected and has `IP_MTU_DISCOVER =
//! IP_PMTUDISC_DO`, so Linux sends every IPv4 datagram with DF set and
//! identification 0, and with UDP GSO, segment `k` of one send with
//! identification `k`. The source port on the wire is the socket's port
//! (not the per-QP port the core chose). Whenever the header that will
//! really be sent differs from the one the core computed the ICRC over, the
//! ICRC is recomputed (`icrc_recomputed`).
//!
//! Receive side: see [`crate::rxcheck`] for what can be verified and the
//! [`RxIcrcPolicy`] choices. Delivered datagrams carry `IpMeta` with the
//! identification the ICRC was verified with (so the core's own check
//! passes), DF set, TTL 64 (not seen; masked out of the ICRC anyway) and
//! the TOS / traffic class byte they arrived with (`IP_RECVTOS` /
//! `IPV6_RECVTCLASS`: DSCP and ECN, also masked out of the ICRC), which
//! the recording shows.
//!
//! The IPv4 TOS / IPv6 traffic class on the wire is the datagram's
//! `meta.tos` (the core's address vector's traffic class): the socket's
//! `IP_TOS` / `IPV6_TCLASS` is set when a datagram needs another value than
//! the socket has (one `setsockopt` per change, none while every datagram
//! carries the socket's current one, so traffic class 0 costs nothing), and
//! a batch or GSO run never mixes two values.
//!
//! Batching: `sendmmsg` for runs of datagrams, `sendmsg` with `UDP_SEGMENT`
//! (GSO) for runs of equal-sized datagrams to one destination, `recvmmsg`
//! with `UDP_GRO` on receive (coalesced messages are split at the reported
//! segment size). GSO and GRO are optional and switched off automatically
//! if the kernel refuses them.

use crate::counters::{CountersSnapshot, TransportCounters};
use crate::pcap::PcapRecorder;
use crate::rxcheck::{self, RxIcrc};
use crate::steer::{SteerTap, Verdict};
use bytes::{Bytes, BytesMut};
use core::net::{IpAddr, SocketAddr};
use nix::errno::Errno;
use nix::sys::socket::{
    self as nsock, sockopt, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage,
};
use roce_emulator::Datagram;
use roce_packet::icrc_math::IcrcMath;
use roce_packet::{IpMeta, UdpEndpoints};
use rustc_hash::FxHashMap as HashMap;
use rustix::net::{MMsgHdr, SendAncillaryBuffer, SendFlags, SocketAddrAny};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut};
use std::net::UdpSocket;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::Arc;

/// TCP/UDP port of RoCEv2.
pub const DEFAULT_PORT: u16 = roce_packet::ROCE_V2_PORT;

/// Peers whose last IPv4 identification is remembered (for prediction).
const MAX_PEERS: usize = 4096;

/// Largest UDP payload of one (GSO) send or (GRO) receive.
const MAX_UDP_PAYLOAD: usize = 65_507;

/// The wire ICRCs of the datagrams of one send (`None`: the core's stands),
/// on the stack for runs of up to 64.
type Icrcs = SmallVec<[Option<[u8; 4]>; 64]>;

/// A datagram of a `sendmmsg`: its index, its replacement ICRC, its address.
type Staged = (usize, Option<[u8; 4]>, SocketAddrAny);

/// The fewest messages a batch read asks for (see `last_batch`).
const MIN_BATCH: usize = 4;

/// Plain reads in a row while batch reads return one message each (see
/// `lone_reads`): a burst waits at most this many reads for its batch.
const LONE_PROBE: u32 = 7;

/// The most messages one batch read takes (its iovecs are on the stack).
const MAX_BATCH: usize = 32;

/// How received ICRCs are checked (see [`crate::rxcheck`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RxIcrcPolicy {
    /// Deliver everything unchecked with identification 0 (the core then
    /// checks exactly, and drops frames from peers that send other ids).
    Off,
    /// Accept only full 32-bit matches: identification 0, the GRO segment
    /// index, or the peer's previous identification + 1.
    ExactOnly,
    /// Like `ExactOnly`, else accept if some identification makes the ICRC
    /// valid (16 bits of protection; needed for rxe peers). The default.
    #[default]
    SolveId,
}

/// How to open a [`UdpTransport`].
#[derive(Clone, Debug)]
pub struct UdpConfig {
    /// Local address and port (IPv4 or IPv6, not unspecified: the local
    /// address is part of the ICRC). Port 0 picks an ephemeral port.
    pub local: SocketAddr,
    /// Use UDP GSO for runs of equal-sized datagrams to one destination.
    pub gso: bool,
    /// Ask for UDP GRO on receive.
    pub gro: bool,
    /// Messages per `sendmmsg`/`recvmmsg` call (1 to 32; `bind` clamps).
    pub batch: usize,
    /// Most segments in one GSO send (the kernel allows 64 or 128).
    pub max_gso_segments: usize,
    /// `SO_SNDBUF`/`SO_RCVBUF` to ask for (the kernel may cap it).
    pub socket_buffer: Option<usize>,
    /// Receive-side ICRC policy.
    pub rx_icrc: RxIcrcPolicy,
    /// Record every frame sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Bind with `SO_REUSEPORT`: join the group of sockets of the other
    /// processes sharing this device (see [`crate::steer`]).
    pub reuseport: bool,
}

impl UdpConfig {
    /// Defaults: GSO and GRO on, batches of 32, 4 MiB socket buffers,
    /// [`RxIcrcPolicy::SolveId`], no pcap.
    pub fn new(local: SocketAddr) -> UdpConfig {
        UdpConfig {
            local,
            gso: true,
            gro: true,
            batch: 32,
            max_gso_segments: 64,
            socket_buffer: Some(4 << 20),
            rx_icrc: RxIcrcPolicy::default(),
            pcap: None,
            reuseport: false,
        }
    }
    /// `new` on `ip` and port 4791.
    pub fn on(ip: IpAddr) -> UdpConfig {
        UdpConfig::new(SocketAddr::new(ip, DEFAULT_PORT))
    }
}

/// Why a [`UdpTransport`] could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// `bind` failed (address in use, address not local...).
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The local address is unspecified (0.0.0.0 or ::).
    #[error("unspecified local address {0}: bind a specific address (it is covered by the ICRC)")]
    Unspecified(SocketAddr),
    /// A socket option the transport cannot work without failed.
    #[error("cannot set {what}: {source}")]
    SockOpt {
        /// The option.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The pcap file could not be created.
    #[error("cannot create pcap file: {0}")]
    Pcap(#[from] roce_pcap::CaptureError),
}

/// Result of [`UdpTransport::send`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendOutcome {
    /// Datagrams consumed from the front of the slice (sent, or dropped and
    /// counted in `send_errors`).
    pub consumed: usize,
    /// The socket buffer was full; the rest should be retried when the
    /// socket is writable.
    pub would_block: bool,
    /// A receiver on this host had no credits for the rest
    /// ([`crate::credits`]): retry shortly (no descriptor says when).
    pub credit_wait: bool,
}

/// Where a received datagram is: its receive buffer, its segment of a
/// GRO batch, its TOS byte, and whether it may be another member's.
#[derive(Clone, Copy)]
struct Rx {
    buf: usize,
    seg: usize,
    tos: u8,
    steered: bool,
}

/// One batch of received messages as the kernel reported them.
struct RxMsg {
    len: usize,
    peer: Option<SocketAddr>,
    gro_size: Option<usize>,
    truncated: bool,
    /// The socket's drops so far (`SO_RXQ_OVFL`), when the kernel said.
    drops: Option<u32>,
    /// The IPv4 TOS / IPv6 traffic class byte it came with (DSCP and
    /// ECN: `IP_RECVTOS` / `IPV6_RECVTCLASS`), 0 when the kernel did not say.
    tos: u8,
}

impl RxMsg {
    /// What one received message says: length, sender, the `UDP_GRO`
    /// segment size (a coalesced batch), truncation.
    fn of(m: &nsock::RecvMsg<'_, '_, SockaddrStorage>) -> RxMsg {
        let (mut gro_size, mut drops, mut tos) = (None, None, 0);
        if let Ok(it) = m.cmsgs() {
            for c in it {
                match c {
                    ControlMessageOwned::UdpGroSegments(s) => gro_size = usize::try_from(s).ok(),
                    ControlMessageOwned::RxqOvfl(n) => drops = Some(n),
                    ControlMessageOwned::Ipv4Tos(t) => tos = t,
                    ControlMessageOwned::Ipv6TClass(t) => tos = t as u8,
                    _ => {}
                }
            }
        }
        RxMsg {
            len: m.bytes,
            peer: m.address.as_ref().and_then(to_std),
            gro_size,
            truncated: m.flags.contains(MsgFlags::MSG_TRUNC),
            drops,
            tos,
        }
    }
}

/// A RoCEv2 device's UDP socket. See the module documentation.
pub struct UdpTransport {
    /// This socket's slot in the host's credits, and its view of the
    /// others' ([`crate::credits`]); `None` outside them.
    credit_rx: Option<crate::credits::CreditRx>,
    credit_tx: Option<crate::credits::CreditTx>,
    sock: UdpSocket,
    local: SocketAddr,
    cfg: UdpConfig,
    gso: bool,
    gro: bool,
    counters: Arc<TransportCounters>,
    rx_bufs: Vec<Vec<u8>>,
    /// Control-message space of a single-message receive (UDP_GRO size).
    cmsg1: Vec<u8>,
    /// The kernel's drop count of this socket last reported (`SO_RXQ_OVFL`).
    socket_drops: u32,
    /// Receive buffers handed out whole (their datagrams are slices of
    /// them, no copy), kept to be taken back once every slice is dropped.
    lent: VecDeque<Bytes>,
    /// Buffers taken back, ready to be receive buffers again.
    spare: Vec<Vec<u8>>,
    /// The latest read found the socket empty.
    found_none: bool,
    /// Messages the latest batch read returned: the next batch asks for
    /// twice that (at least [`MIN_BATCH`]), so a socket that holds one
    /// message at a time is not read with 32 zeroed headers each time.
    last_batch: usize,
    /// The messages of a batch read, reused (no allocation per read).
    rx_msgs: Vec<RxMsg>,
    /// Plain reads since the last batch read returned one message (see
    /// [`LONE_PROBE`]).
    lone_reads: u32,
    /// Small datagrams are copied here, one after another, and handed out
    /// as slices of it: a malloc per arena instead of per datagram.
    arena: RxArena,
    crc: IcrcMath,
    last_id: HashMap<IpAddr, u16>,
    pcap: Option<PcapRecorder>,
    /// The member's slot when the device is shared ([`crate::steer`]).
    steer: Option<SteerTap>,
    /// Multicast groups joined ([`crate::mcast`]).
    groups: crate::mcast::Groups,
    /// The socket's `IP_TOS` / `IPV6_TCLASS` (0 when bound).
    tos: u8,
}

fn to_std(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::new(IpAddr::V4(v4.ip()), v4.port()));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::new(IpAddr::V6(v6.ip()), v6.port()))
}

/// A UDP socket bound to `addr` with `SO_REUSEPORT` set first.
pub(crate) fn bind_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    let family = match addr {
        SocketAddr::V4(_) => nsock::AddressFamily::Inet,
        SocketAddr::V6(_) => nsock::AddressFamily::Inet6,
    };
    let fd = nsock::socket(family, nsock::SockType::Datagram, nsock::SockFlag::SOCK_CLOEXEC, None)?;
    nsock::setsockopt(&fd, sockopt::ReusePort, &true)?;
    nsock::bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
    Ok(UdpSocket::from(fd))
}

/// Set `IP_PMTUDISC_DO` (IPv4) or `IPV6_PMTUDISC_DO` (IPv6) on `fd`.
pub fn set_pmtudisc_do(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        rustix::net::sockopt::set_ipv6_mtu_discover(
            fd,
            rustix::net::sockopt::Ipv6PathMtuDiscovery::DO,
        )?;
    } else {
        rustix::net::sockopt::set_ip_mtu_discover(
            fd,
            rustix::net::sockopt::Ipv4PathMtuDiscovery::DO,
        )?;
    }
    Ok(())
}

/// Whether the kernel accepts `UDP_SEGMENT` on this socket.
pub fn gso_supported(fd: BorrowedFd<'_>) -> bool {
    nsock::getsockopt(&fd, sockopt::UdpGsoSegment).is_ok()
}

/// Try to switch `UDP_GRO` on; returns whether it is on.
pub fn enable_gro(fd: BorrowedFd<'_>) -> bool {
    nsock::setsockopt(&fd, sockopt::UdpGroSegment, &true).is_ok()
}

impl UdpTransport {
    /// Open the socket: bind, `IP_PMTUDISC_DO`, buffers, GSO/GRO probing,
    /// non-blocking mode, pcap file.
    pub fn bind(mut cfg: UdpConfig) -> Result<UdpTransport, TransportError> {
        // (a read's iovecs are a stack array of MAX_BATCH)
        cfg.batch = cfg.batch.clamp(1, MAX_BATCH);
        if cfg.local.ip().is_unspecified() {
            return Err(TransportError::Unspecified(cfg.local));
        }
        let sock = match cfg.reuseport {
            false => UdpSocket::bind(cfg.local),
            true => bind_reuseport(cfg.local),
        }
        .map_err(|source| TransportError::Bind { addr: cfg.local, source })?;
        let local =
            sock.local_addr().map_err(|source| TransportError::Bind { addr: cfg.local, source })?;
        set_pmtudisc_do(sock.as_fd(), local.is_ipv6())
            .map_err(|source| TransportError::SockOpt { what: "IP_MTU_DISCOVER", source })?;
        sock.set_nonblocking(true)
            .map_err(|source| TransportError::SockOpt { what: "O_NONBLOCK", source })?;
        if let Some(sz) = cfg.socket_buffer {
            // Best effort: the kernel caps these at net.core.[rw]mem_max.
            let _ = nsock::setsockopt(&sock, sockopt::SndBuf, &sz);
            let _ = nsock::setsockopt(&sock, sockopt::RcvBuf, &sz);
        }
        // The kernel's count of datagrams it dropped for a full receive
        // buffer, with every datagram received (`rx_socket_drops`).
        let _ = nsock::setsockopt(&sock, sockopt::RxqOvfl, &1);
        // Each datagram's TOS / traffic class byte (DSCP and ECN), for the
        // recording and the core (best effort: without it, 0).
        let _ = match local.is_ipv6() {
            false => nsock::setsockopt(&sock, sockopt::IpRecvTos, &true),
            true => nsock::setsockopt(&sock, sockopt::Ipv6RecvTClass, &true),
        };
        crate::mcast::set_sender(&sock, local.ip());
        let gso = cfg.gso && gso_supported(sock.as_fd());
        let gro = cfg.gro && enable_gro(sock.as_fd());
        let batch = cfg.batch;
        let buf_len = if gro { MAX_UDP_PAYLOAD + 1 } else { 16 * 1024 };
        let pcap = match &cfg.pcap {
            Some(p) => Some(PcapRecorder::create(p)?),
            None => None,
        };
        Ok(UdpTransport {
            sock,
            local,
            gso,
            gro,
            counters: Arc::new(TransportCounters::default()),
            rx_bufs: vec![vec![0u8; buf_len]; batch],
            cmsg1: nix::cmsg_space!(i32, u32, i32),
            socket_drops: 0,
            lent: VecDeque::new(),
            spare: Vec::new(),
            found_none: false,
            last_batch: 0,
            rx_msgs: Vec::with_capacity(batch),
            lone_reads: 0,
            arena: RxArena::default(),
            crc: IcrcMath::new(),
            last_id: HashMap::default(),
            pcap,
            steer: None,
            groups: Default::default(),
            tos: 0,
            credit_rx: None,
            credit_tx: None,
            cfg,
        })
    }

    /// Steer as the member `tap.slot` of a shared device: foreign
    /// datagrams are counted (`steer_foreign`) and forwarded, probes
    /// answered (`steer_probes`); see [`crate::steer`].
    pub fn set_steer(&mut self, tap: SteerTap) {
        self.steer = Some(tap);
    }

    /// A second handle on the socket (the same socket, not a new one: it
    /// stays in its `SO_REUSEPORT` group until every handle is closed).
    pub fn try_clone_socket(&self) -> io::Result<UdpSocket> {
        self.sock.try_clone()
    }

    /// The bound address (with the real port if port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
    /// Whether GSO is in use (asked for, supported, not switched off).
    pub fn gso_enabled(&self) -> bool {
        self.gso
    }
    /// Whether GRO is in use.
    pub fn gro_enabled(&self) -> bool {
        self.gro
    }
    /// The configuration the transport was opened with.
    pub fn config(&self) -> &UdpConfig {
        &self.cfg
    }
    /// The live counters (shared; cheap to clone).
    pub fn counters(&self) -> Arc<TransportCounters> {
        self.counters.clone()
    }
    /// A copy of the counters.
    pub fn snapshot(&self) -> CountersSnapshot {
        self.counters.snapshot()
    }
    /// Flush the pcap file, if recording.
    pub fn flush_pcap(&mut self) {
        if let Some(p) = &mut self.pcap {
            p.flush();
        }
    }

    fn endpoints_out(&self, d: &Datagram) -> UdpEndpoints {
        UdpEndpoints {
            src: self.local.ip(),
            dst: d.endpoints.dst,
            src_port: self.local.port(),
            dst_port: d.endpoints.dst_port,
        }
    }

    /// The ICRC `d` must carry on the wire (IPv4 identification `id`, the
    /// socket's source address and port): `Some(None)` if the core's ICRC
    /// is already right, `Some(Some(icrc))` for a replacement (computed from
    /// the header difference, without a pass over the payload), `None` if
    /// the datagram cannot be sent.
    fn wire_icrc(&mut self, d: &Datagram, id: u16) -> Option<Option<[u8; 4]>> {
        if self.icrc_stands(d, id) {
            return Some(None);
        }
        let ep = self.endpoints_out(d);
        let meta = IpMeta { ipv4_id: id, dont_fragment: true, ..d.meta };
        let icrc = u32::from_le_bytes(icrc_of(d)?);
        let len = d.wire_len();
        let fixed = self.crc.fix_fields((&d.endpoints, &d.meta), (&ep, &meta), len, icrc)?;
        TransportCounters::add(&self.counters.icrc_recomputed, 1);
        Some(Some(fixed.to_le_bytes()))
    }

    /// The wire ICRCs of a GSO run (segment k leaves with IPv4
    /// identification k). When every segment's header is the wire header
    /// but for the identification (the core was told the socket's port,
    /// [`roce_emulator::LinkProfile::src_port`]), the ICRC change is linear
    /// in k: the changes for identifications 1, 2, 4, ... are computed once
    /// per run and segment k's is the XOR of those of k's bits. Otherwise
    /// each segment is fixed on its own ([`Self::wire_icrc`]).
    fn gso_icrcs(&mut self, d: &[Datagram]) -> Option<Icrcs> {
        let ep = self.endpoints_out(&d[0]);
        let len = d[0].wire_len();
        let uniform = ep.src.is_ipv4()
            && len >= 4
            && d.len() <= usize::from(u16::MAX)
            && d.iter().all(|x| {
                x.endpoints == ep
                    && x.meta.ipv4_id == 0
                    && x.meta.dont_fragment
                    && x.wire_len() == len
                    && x.payload.len() >= 4
            });
        if !uniform {
            return d.iter().enumerate().map(|(k, x)| self.wire_icrc(x, k as u16)).collect();
        }
        let base = IpMeta { ipv4_id: 0, dont_fragment: true, ..d[0].meta };
        let nbits = (usize::BITS - (d.len() - 1).leading_zeros()) as usize;
        let mut bit = [0u32; 16];
        for (b, slot) in bit.iter_mut().enumerate().take(nbits) {
            let m = IpMeta { ipv4_id: 1 << b, ..base };
            *slot = self.crc.fix_fields((&ep, &base), (&ep, &m), len, 0)?;
        }
        let mut out = Icrcs::with_capacity(d.len());
        out.push(None);
        for (k, x) in d.iter().enumerate().skip(1) {
            let icrc = u32::from_le_bytes(icrc_of(x)?);
            let delta = (0..nbits).filter(|b| k >> b & 1 == 1).fold(0, |a, b| a ^ bit[b]);
            out.push(Some((icrc ^ delta).to_le_bytes()));
        }
        TransportCounters::add(&self.counters.icrc_recomputed, d.len() as u64 - 1);
        Some(out)
    }

    /// Whether the core's ICRC of `d` is already right on the wire with
    /// identification `id` (the core computed it for this socket).
    fn icrc_stands(&self, d: &Datagram, id: u16) -> bool {
        let ep = self.endpoints_out(d);
        ep == d.endpoints && (ep.src.is_ipv6() || (d.meta.ipv4_id == id && d.meta.dont_fragment))
    }

    /// Record a sent datagram (identification `id`, ICRC `icrc` if replaced).
    fn record_sent(&mut self, d: &Datagram, id: u16, icrc: Option<[u8; 4]>) {
        if let Some(p) = &mut self.pcap {
            let ep = UdpEndpoints {
                src: self.local.ip(),
                dst: d.endpoints.dst,
                src_port: self.local.port(),
                dst_port: d.endpoints.dst_port,
            };
            let meta = IpMeta { ipv4_id: id, dont_fragment: true, ..d.meta };
            // (a region's bytes as they are now: the application may have
            // changed them since the send, as it may under a NIC)
            let Some(flat) = d.clone().flatten() else { return };
            let mut bytes = flat.payload.to_vec();
            if let Some(c) = icrc {
                let n = bytes.len() - 4;
                bytes[n..].copy_from_slice(&c);
            }
            p.record(&ep, &meta, &bytes, &self.counters);
        }
    }

    fn usable(&self, d: &Datagram) -> bool {
        d.endpoints.dst.is_ipv4() == self.local.is_ipv4()
            && d.payload.len() >= 4
            && d.wire_len() <= MAX_UDP_PAYLOAD
    }

    /// Send datagrams in order (batched; GSO for runs of equal-sized
    /// datagrams to one destination). Stops early only when the socket
    /// buffer is full, or a receiver of this host has no credits for the
    /// next ones ([`crate::credits`]). Never blocks.
    pub fn send(&mut self, dgrams: &[Datagram]) -> SendOutcome {
        if self.credit_tx.is_none() {
            return self.send_now(dgrams);
        }
        let (n, waited) = self.admit(dgrams);
        let mut o = self.send_now(&dgrams[..n]);
        if o.consumed < n {
            self.refund(&dgrams[o.consumed..n]);
        } else if waited {
            o.credit_wait = true;
        }
        o
    }

    /// How many of `dgrams` the receivers' credits admit (counted), by
    /// runs to one socket; and whether the rest waits for credits.
    fn admit(&mut self, dgrams: &[Datagram]) -> (usize, bool) {
        use crate::credits::{cost, Admit};
        let Some(tx) = self.credit_tx.as_mut() else { return (dgrams.len(), false) };
        let mut i = 0;
        while i < dgrams.len() {
            let (to, byte) = credit_dest(&dgrams[i]);
            let run = dgrams[i..].iter().take_while(|d| credit_dest(d) == (to, byte)).count();
            let run = &dgrams[i..i + run];
            let (n, units) = match tx.admit(to, byte, cost(run[0].wire_len())) {
                Admit::Unregulated => (run.len(), 0),
                Admit::Watchdog => {
                    TransportCounters::add(&self.counters.credit_watchdog, 1);
                    (run.len(), run.iter().map(|d| cost(d.wire_len())).sum())
                }
                Admit::Wait => (0, 0),
                Admit::Units(avail) => {
                    let (mut n, mut c) = (0, 0);
                    for d in run {
                        let k = cost(d.wire_len());
                        if n > 0 && c + k > avail {
                            break;
                        }
                        n += 1;
                        c += k;
                    }
                    (n, c)
                }
            };
            if units > 0 {
                tx.take(to, byte, units);
            }
            i += n;
            if n < run.len() {
                TransportCounters::add(&self.counters.credit_waits, 1);
                return (i, true);
            }
        }
        (i, false)
    }

    /// Give back the credits of datagrams admitted and not sent.
    fn refund(&mut self, dgrams: &[Datagram]) {
        let Some(tx) = self.credit_tx.as_mut() else { return };
        for d in dgrams {
            let (to, byte) = credit_dest(d);
            tx.refund(to, byte, crate::credits::cost(d.wire_len()));
        }
    }

    /// Take part in the host's credits ([`crate::credits`]): this socket's
    /// receive buffer gets a slot in `table` (a shared device's member:
    /// `member`, its QPN byte), and sends to the other sockets of the table
    /// wait for their credits. Returns whether the slot was free.
    pub fn use_credits(
        &mut self,
        table: &std::sync::Arc<crate::credits::CreditTable>,
        member: Option<u8>,
    ) -> bool {
        let rcvbuf = nsock::getsockopt(&self.sock, sockopt::RcvBuf).unwrap_or(212_992);
        let m = member.map_or(crate::credits::UNSHARED, u16::from);
        self.credit_rx = crate::credits::CreditRx::register(table, self.local, m, rcvbuf);
        self.credit_tx = Some(crate::credits::CreditTx::new(table));
        self.credit_rx.is_some()
    }

    /// Credits out to this socket (sent to it by the host's devices and
    /// not read yet), when it takes part in the host's credits.
    pub fn credits_outstanding(&self) -> Option<u64> {
        self.credit_rx.as_ref().map(crate::credits::CreditRx::outstanding)
    }

    fn send_now(&mut self, dgrams: &[Datagram]) -> SendOutcome {
        let batch = self.cfg.batch.max(1);
        let mut i = 0;
        while i < dgrams.len() {
            // every send below carries datagrams of one TOS only
            let tos = dgrams[i].meta.tos;
            self.apply_tos(tos);
            // A run of singles for sendmmsg (each ends a GSO candidate run of 1).
            let run = self.gso_run(&dgrams[i..]);
            if run >= 2 {
                match self.send_gso(&dgrams[i..i + run]) {
                    Ok(()) => i += run,
                    Err(true) => {
                        return SendOutcome { consumed: i, would_block: true, credit_wait: false }
                    }
                    Err(false) => {} // GSO switched off: resend this run as singles
                }
                continue;
            }
            if dgrams[i].body.is_some() {
                // a payload in region memory: one gathered sendmsg
                match self.send_gathered(&dgrams[i..i + 1], None) {
                    Err(true) => {
                        return SendOutcome { consumed: i, would_block: true, credit_wait: false }
                    }
                    Ok(()) | Err(false) => i += 1,
                }
                continue;
            }
            let mut j = i;
            while j < dgrams.len()
                && j - i < batch
                && (j == i
                    || (dgrams[j].body.is_none()
                        && dgrams[j].meta.tos == tos
                        && self.gso_run(&dgrams[j..]) < 2))
            {
                j += 1;
            }
            let done = self.send_singles(&dgrams[i..j]);
            let asked = j - i;
            i += done;
            if done < asked {
                return SendOutcome { consumed: i, would_block: true, credit_wait: false };
            }
        }
        SendOutcome { consumed: i, would_block: false, credit_wait: false }
    }

    /// Give the socket the IPv4 TOS / IPv6 traffic class `tos` if it has
    /// another one (a failure is logged; the datagrams then leave with the
    /// socket's old value).
    fn apply_tos(&mut self, tos: u8) {
        if tos == self.tos {
            return;
        }
        let r = match self.local {
            SocketAddr::V4(_) => rustix::net::sockopt::set_ip_tos(&self.sock, tos),
            SocketAddr::V6(_) => rustix::net::sockopt::set_ipv6_tclass(&self.sock, u32::from(tos)),
        };
        match r {
            Ok(()) => self.tos = tos,
            Err(e) => tracing::debug!(error = %e, tos, "cannot set the socket's IP TOS"),
        }
    }

    /// Length of the GSO-able run at the front of `d` (1 if none).
    fn gso_run(&self, d: &[Datagram]) -> usize {
        if !self.gso || d.is_empty() || !self.usable(&d[0]) {
            return 1;
        }
        let first = &d[0];
        let size = first.wire_len();
        let max = self.cfg.max_gso_segments.clamp(1, 64).min(MAX_UDP_PAYLOAD / size.max(1));
        let mut n = 1;
        while n < d.len() && n < max {
            let x = &d[n];
            // (and one destination QPN top byte: the kernel steers a GSO
            // send by its first segment, and a shared device's members are
            // steered by that byte; a run for two members would deliver
            // the second's datagrams to the first, which forwards them:
            // late, out of order behind the next ones)
            if x.endpoints.dst != first.endpoints.dst
                || x.endpoints.dst_port != first.endpoints.dst_port
                || x.wire_len() != size
                || x.meta.tos != first.meta.tos
                || crate::steer::steer_byte(&x.payload) != crate::steer::steer_byte(&first.payload)
            {
                break;
            }
            n += 1;
        }
        n
    }

    /// One `sendmsg` with `UDP_SEGMENT`. `Err(true)`: would block;
    /// `Err(false)`: GSO refused and now off.
    fn send_gso(&mut self, d: &[Datagram]) -> Result<(), bool> {
        let seg = d[0].wire_len();
        self.send_gathered(d, Some(seg as u16))
    }

    /// One `sendmsg` of `d` (with `segment`, a GSO send of equal-sized
    /// datagrams; without, one datagram), gathering each datagram's
    /// headers, region bytes ([`roce_emulator::RegionBody`]: sent from the
    /// region, no copy in user space) and ICRC. `Err(true)`: would block;
    /// `Err(false)`: GSO refused and now off (resend as singles). Datagrams
    /// that cannot be sent (a region deregistered since) are counted as
    /// send errors and consumed.
    fn send_gathered(&mut self, d: &[Datagram], segment: Option<u16>) -> Result<(), bool> {
        let icrcs: Option<Icrcs> = match segment {
            Some(_) => self.gso_icrcs(d),
            None => d.iter().map(|x| self.wire_icrc(x, 0)).collect(),
        };
        let Some(icrcs) = icrcs else {
            TransportCounters::add(&self.counters.send_errors, d.len() as u64);
            return Ok(());
        };
        // Each datagram is its headers, its region bytes, its pad and its
        // ICRC (the core's or the replacement); the kernel cuts segments at
        // `segment` bytes.
        let parts = gather_parts(d, &icrcs);
        let total: usize = d.iter().map(Datagram::wire_len).sum();
        let dst = SocketAddr::new(d[0].endpoints.dst, d[0].endpoints.dst_port);
        loop {
            let r = roce_region::send_parts(self.sock.as_fd(), dst, &parts, segment);
            TransportCounters::add(&self.counters.send_syscalls, 1);
            let e = match r {
                Ok(_) => {
                    if self.pcap.is_some() {
                        for (k, x) in d.iter().enumerate() {
                            self.record_sent(x, k as u16, icrcs[k]);
                        }
                    }
                    let c = &self.counters;
                    if d.len() > 1 {
                        TransportCounters::add(&c.gso_sends, 1);
                        TransportCounters::add(&c.gso_segments, d.len() as u64);
                    }
                    TransportCounters::add(&c.dgrams_out, d.len() as u64);
                    TransportCounters::add(&c.bytes_out, total as u64);
                    let from_region = d.iter().filter_map(|x| x.body.as_ref());
                    let (n, bytes) = from_region.fold((0, 0), |(n, b), x| (n + 1, b + x.len));
                    TransportCounters::add(&c.region_bodies_out, n);
                    TransportCounters::add(&c.region_bytes_out, bytes as u64);
                    return Ok(());
                }
                Err(e) => e,
            };
            match Errno::from_raw(e.raw_os_error().unwrap_or(0)) {
                Errno::EINTR => continue,
                Errno::EAGAIN => return Err(true),
                Errno::EIO | Errno::EINVAL | Errno::ENOPROTOOPT | Errno::EOPNOTSUPP
                    if segment.is_some() =>
                {
                    tracing::warn!(error = %e, "UDP GSO send refused; switching GSO off");
                    TransportCounters::add(&self.counters.gso_fallbacks, 1);
                    self.gso = false;
                    return Err(false);
                }
                _ => {
                    tracing::debug!(error = %e, "send failed");
                    TransportCounters::add(&self.counters.send_errors, d.len() as u64);
                    return Ok(());
                }
            }
        }
    }

    /// `sendmmsg` of individual datagrams; returns how many were consumed.
    fn send_singles(&mut self, d: &[Datagram]) -> usize {
        // One datagram whose ICRC stands (the core computed it for this
        // socket): a plain `sendto`, nothing staged (no message header or
        // iovec array for the kernel to copy in).
        if let [x] = d {
            if self.usable(x) && self.icrc_stands(x, 0) {
                let a = SocketAddrAny::from(SocketAddr::new(x.endpoints.dst, x.endpoints.dst_port));
                return self.send_to_one(x, &a, d.len());
            }
        }
        // (stack arrays for batches of up to 8: no allocation per send)
        let mut staged: SmallVec<[Staged; 8]> = SmallVec::new();
        for (n, x) in d.iter().enumerate() {
            if !self.usable(x) {
                TransportCounters::add(&self.counters.send_errors, 1);
                continue;
            }
            match self.wire_icrc(x, 0) {
                Some(c) => {
                    let a =
                        SocketAddrAny::from(SocketAddr::new(x.endpoints.dst, x.endpoints.dst_port));
                    staged.push((n, c, a));
                }
                None => TransportCounters::add(&self.counters.send_errors, 1),
            }
        }
        let mut start = 0;
        while start < staged.len() {
            // each datagram: its bytes, or its bytes but the ICRC and the
            // replacement ICRC
            let iovs: SmallVec<[([IoSlice<'_>; 2], usize); 8]> = staged[start..]
                .iter()
                .map(|(n, c, _)| {
                    let p = &d[*n].payload;
                    match c {
                        None => ([IoSlice::new(p), IoSlice::new(&[])], 1),
                        Some(c) => ([IoSlice::new(&p[..p.len() - 4]), IoSlice::new(c)], 2),
                    }
                })
                .collect();
            let mut ctl: SmallVec<[SendAncillaryBuffer<'_, '_, '_>; 8]> =
                (0..iovs.len()).map(|_| SendAncillaryBuffer::default()).collect();
            let mut msgs: SmallVec<[MMsgHdr<'_>; 8]> = staged[start..]
                .iter()
                .zip(iovs.iter())
                .zip(ctl.iter_mut())
                .map(|(((_, _, a), (iov, k)), c)| MMsgHdr::new_with_addr(a, &iov[..*k], c))
                .collect();
            let r = rustix::net::sendmmsg(&self.sock, &mut msgs, SendFlags::empty());
            TransportCounters::add(&self.counters.send_syscalls, 1);
            match r {
                Ok(m) => {
                    let bytes: usize =
                        staged[start..start + m].iter().map(|(n, _, _)| d[*n].payload.len()).sum();
                    if self.pcap.is_some() {
                        for k in start..start + m {
                            self.record_sent(&d[staged[k].0], 0, staged[k].1);
                        }
                    }
                    TransportCounters::add(&self.counters.dgrams_out, m as u64);
                    TransportCounters::add(&self.counters.bytes_out, bytes as u64);
                    start += m;
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => {
                    // Consumed: everything before the first unsent staged datagram.
                    return staged[start].0;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "send failed");
                    TransportCounters::add(&self.counters.send_errors, 1);
                    start += 1;
                }
            }
        }
        d.len()
    }

    /// `sendto` of one datagram whose ICRC stands. Returns `done` when it
    /// was sent or failed for good (counted), 0 when the socket is full.
    fn send_to_one(&mut self, x: &Datagram, a: &SocketAddrAny, done: usize) -> usize {
        let p = &x.payload;
        loop {
            let r = rustix::net::sendto(&self.sock, p, SendFlags::empty(), a);
            TransportCounters::add(&self.counters.send_syscalls, 1);
            match r {
                Ok(_) => {
                    if self.pcap.is_some() {
                        self.record_sent(x, 0, None);
                    }
                    TransportCounters::add(&self.counters.dgrams_out, 1);
                    TransportCounters::add(&self.counters.bytes_out, p.len() as u64);
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => return 0,
                Err(e) => {
                    tracing::debug!(error = %e, "send failed");
                    TransportCounters::add(&self.counters.send_errors, 1);
                }
            }
            return done;
        }
    }

    /// One non-blocking `recvmmsg`: split GRO messages, check ICRCs, append
    /// the accepted datagrams to `out`. Returns the number of messages the
    /// kernel returned (0 when nothing was waiting).
    pub fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<usize> {
        self.recv_at_most(out, usize::MAX)
    }

    /// [`Self::recv`] reading at most `max` messages (at least one): when
    /// the caller knows how many datagrams were just sent to this socket
    /// (a ping-pong in one thread: exactly one), the kernel then does not
    /// look for a further message that is not there.
    pub fn recv_at_most(&mut self, out: &mut Vec<Datagram>, max: usize) -> io::Result<usize> {
        if !self.groups.socks.is_empty() {
            self.recv_groups(out);
        }
        self.take_back();
        let vlen = self.rx_bufs.len().min(max.max(1)).min((2 * self.last_batch).max(MIN_BATCH));
        if self.found_none && vlen > 1 {
            // The last read found nothing: a program polling in a loop
            // reads an empty socket most of the time. One plain `recvmsg`
            // first (no header array to allocate and zero: 32 of them are
            // 7 KiB), the batch only when something came.
            let n = self.recv_at_most(out, 1)?;
            if n == 0 {
                return Ok(0);
            }
            return Ok(n + self.recv_at_most(out, max.saturating_sub(1).max(1))?);
        }
        if vlen > 1 && self.last_batch == 1 && self.lone_reads < LONE_PROBE {
            // The last batch read returned one message (a ping-pong: each
            // datagram is read before the next is sent): a plain `recvmsg`
            // (no headers to allocate and zero), and a batch again every
            // [`LONE_PROBE`] + 1 reads, in case a burst now waits
            self.lone_reads += 1;
            let n = self.recv_batch(out, 1)?;
            self.found_none = n == 0;
            return Ok(n);
        }
        self.lone_reads = 0;
        let n = self.recv_batch(out, vlen)?;
        self.found_none = n == 0;
        Ok(n)
    }

    /// [`Self::recv_at_most`]: one read of at most `vlen` messages.
    fn recv_batch(&mut self, out: &mut Vec<Datagram>, vlen: usize) -> io::Result<usize> {
        if vlen == 1 {
            let fd = self.sock.as_raw_fd();
            return self.recv_one(fd, None, out);
        }
        let mut msgs = std::mem::take(&mut self.rx_msgs);
        msgs.clear();
        // Rebuilt per call: nix's recvmmsg does not reset `msg_controllen`
        // and `msg_namelen`, which the kernel shrinks (a reused set loses
        // the UDP_GRO control message after a receive without one); and the
        // headers hold raw pointers (not Send).
        let r = {
            // (the iovecs on the stack, declared before the headers that
            // point at them)
            let mut bufs = self.rx_bufs[..vlen].iter_mut();
            let mut iovs: [[IoSliceMut<'_>; 1]; MAX_BATCH] = std::array::from_fn(|_| {
                [IoSliceMut::new(bufs.next().map_or(<&mut [u8]>::default(), |b| &mut b[..]))]
            });
            let mut hdrs: MultiHeaders<SockaddrStorage> =
                MultiHeaders::preallocate(vlen, Some(nix::cmsg_space!(i32, u32, i32)));
            let fd = self.sock.as_raw_fd();
            // (bound to a name: the result borrows `hdrs` and `iovs`, and a
            // block's tail temporaries would outlive them)
            let got =
                nsock::recvmmsg(fd, &mut hdrs, &mut iovs[..vlen], MsgFlags::MSG_DONTWAIT, None)
                    .map(|res| msgs.extend(res.map(|m| RxMsg::of(&m))));
            got
        };
        let n = match r {
            Ok(()) => self.take_messages(&msgs, out),
            Err(Errno::EAGAIN) => {
                self.credits_drained();
                0
            }
            Err(Errno::EINTR) => 0,
            Err(e) => {
                TransportCounters::add(&self.counters.recv_errors, 1);
                self.rx_msgs = msgs;
                return Err(e.into());
            }
        };
        self.last_batch = msgs.len();
        self.rx_msgs = msgs;
        Ok(n)
    }

    /// One message: a plain `recvmsg` from `fd` into the first buffer (no
    /// header array to allocate, nothing after it for the kernel to look
    /// for); `group` when `fd` is a multicast group's socket. nix rebuilds
    /// `msg_controllen` from the buffer's capacity on every call.
    fn recv_one(
        &mut self,
        fd: std::os::fd::RawFd,
        group: Option<IpAddr>,
        out: &mut Vec<Datagram>,
    ) -> io::Result<usize> {
        let mut iov = [IoSliceMut::new(&mut self.rx_bufs[0][..])];
        let r = nsock::recvmsg::<SockaddrStorage>(
            fd,
            &mut iov,
            Some(&mut self.cmsg1),
            MsgFlags::MSG_DONTWAIT,
        );
        match r {
            Ok(m) => {
                let one = [RxMsg::of(&m)];
                Ok(self.take_messages_to(&one, group, out))
            }
            Err(Errno::EAGAIN) => {
                if group.is_none() {
                    self.credits_drained();
                }
                Ok(0)
            }
            Err(Errno::EINTR) => Ok(0),
            Err(e) => {
                TransportCounters::add(&self.counters.recv_errors, 1);
                Err(e.into())
            }
        }
    }

    /// The socket was found empty: nothing counted against its credits
    /// waits in it.
    fn credits_drained(&self) {
        if let Some(rx) = &self.credit_rx {
            rx.drained();
        }
    }

    /// What waits on the multicast groups' sockets (a batch at most each).
    fn recv_groups(&mut self, out: &mut Vec<Datagram>) {
        for i in 0..self.groups.socks.len() {
            let (g, fd) = {
                let (g, s) = &self.groups.socks[i];
                (*g, s.as_raw_fd())
            };
            for _ in 0..self.rx_bufs.len() {
                self.take_back();
                match self.recv_one(fd, Some(g), out) {
                    Ok(n) if n > 0 => TransportCounters::add(&self.counters.mcast_in, 1),
                    _ => break,
                }
            }
        }
    }

    /// Join the multicast group `group` (see [`crate::mcast`]).
    pub fn join_group(&mut self, group: IpAddr) -> io::Result<()> {
        self.groups.join(group, self.local.ip(), DEFAULT_PORT)
    }

    /// Leave the multicast group `group`.
    pub fn leave_group(&mut self, group: IpAddr) -> io::Result<()> {
        self.groups.leave(group)
    }

    /// The groups joined.
    pub fn groups(&self) -> Vec<IpAddr> {
        self.groups.socks.iter().map(|(g, _)| *g).collect()
    }

    /// A descriptor readable when a group's socket has a datagram.
    pub fn group_fd(&self) -> Option<BorrowedFd<'_>> {
        self.groups.fd()
    }

    /// Split, check and deliver the messages just read into the receive
    /// buffers (message i in buffer i); returns how many there were.
    fn take_messages(&mut self, msgs: &[RxMsg], out: &mut Vec<Datagram>) -> usize {
        self.take_messages_to(msgs, None, out)
    }

    /// [`Self::take_messages`] of messages read from the socket of the
    /// multicast group `group` (not steered: every member takes its copy).
    fn take_messages_to(
        &mut self,
        msgs: &[RxMsg],
        group: Option<IpAddr>,
        out: &mut Vec<Datagram>,
    ) -> usize {
        if !msgs.is_empty() {
            TransportCounters::add(&self.counters.recv_syscalls, 1);
        }
        // what was read from the socket gives its credits back (each
        // message's bytes and its segments' overhead, as senders count)
        if let (Some(rx), None) = (&self.credit_rx, group) {
            let cost: u64 = msgs
                .iter()
                .map(|m| {
                    let seg = m.gro_size.filter(|&s| s > 0 && s < m.len).unwrap_or(m.len.max(1));
                    m.len as u64 + crate::credits::OVERHEAD * m.len.div_ceil(seg).max(1) as u64
                })
                .sum();
            rx.consumed(cost);
        }
        for (i, m) in msgs.iter().enumerate() {
            // (the kernel's count is cumulative, per socket: the groups'
            // sockets have counts of their own and are not counted here)
            if let (Some(n), None) = (m.drops, group) {
                let seen = self.socket_drops;
                if n > seen {
                    TransportCounters::add(&self.counters.rx_socket_drops, u64::from(n - seen));
                    self.socket_drops = n;
                }
            }
            let Some(peer) = m.peer else {
                TransportCounters::add(&self.counters.recv_errors, 1);
                continue;
            };
            if m.truncated || m.len > self.rx_bufs[i].len() {
                TransportCounters::add(&self.counters.truncated, 1);
                continue;
            }
            let len = m.len;
            let seg = match m.gro_size {
                Some(s) if s > 0 && s < len => s,
                _ => len.max(1),
            };
            let nseg = len.div_ceil(seg);
            if nseg > 1 {
                TransportCounters::add(&self.counters.gro_coalesced, 1);
                TransportCounters::add(&self.counters.gro_segments, nseg as u64);
            }
            let ep = UdpEndpoints {
                src: peer.ip(),
                dst: group.unwrap_or(self.local.ip()),
                src_port: peer.port(),
                dst_port: if group.is_some() { DEFAULT_PORT } else { self.local.port() },
            };
            // A large message (a GRO batch, or one big datagram) is handed
            // out without a copy: its datagrams are slices of the buffer,
            // which gets a spare in its place. Small ones are copied (cheaper
            // than sharing a 64 KiB buffer).
            let whole = if len >= ZERO_COPY_MIN {
                let fresh = self.spare.pop().unwrap_or_else(|| vec![0u8; self.rx_bufs[i].len()]);
                let b = Bytes::from(std::mem::replace(&mut self.rx_bufs[i], fresh));
                self.lend(b.clone());
                Some(b)
            } else {
                None
            };
            for k in 0..nseg {
                let range = k * seg..((k + 1) * seg).min(len);
                let at = Rx { buf: i, seg: k, tos: m.tos, steered: group.is_none() };
                self.deliver(&ep, at, whole.as_ref(), range, out);
            }
        }
        msgs.len()
    }

    /// Keep a buffer handed out whole, to take it back later (bounded: the
    /// oldest is forgotten, and freed by its last holder).
    fn lend(&mut self, b: Bytes) {
        if self.lent.len() >= MAX_LENT {
            self.lent.pop_front();
        }
        self.lent.push_back(b);
    }

    /// Take back the lent buffers whose datagrams are all dropped.
    fn take_back(&mut self) {
        let want = self.rx_bufs.len();
        for _ in 0..self.lent.len() {
            let Some(b) = self.lent.pop_front() else { break };
            match b.try_into_mut() {
                Ok(m) if self.spare.len() < want => {
                    // (offset 0: no bytes move; the buffer keeps its length)
                    self.spare.push(Vec::from(m));
                    TransportCounters::add(&self.counters.rx_buffers_reused, 1);
                }
                Ok(_) => {}
                Err(b) => self.lent.push_back(b),
            }
        }
    }

    // (the arguments are one datagram's: where it is and what it is)
    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &mut self,
        ep: &UdpEndpoints,
        Rx { buf, seg: k, tos, steered }: Rx,
        whole: Option<&Bytes>,
        r: Range<usize>,
        out: &mut Vec<Datagram>,
    ) {
        // (the counters by field, not a clone of the Arc per datagram)
        let c = &*self.counters;
        let payload = match whole {
            Some(b) => &b[r.clone()],
            None => &self.rx_bufs[buf][r.clone()],
        };
        TransportCounters::add(&c.dgrams_in, 1);
        TransportCounters::add(&c.bytes_in, payload.len() as u64);
        let mut ep = *ep;
        let mut r = r;
        if let Some(tap) = self.steer.as_ref().filter(|_| steered) {
            if !steer_one(tap, &self.sock, c, &mut ep, &mut r, payload) {
                return;
            }
        }
        let payload = match whole {
            Some(b) => &b[r.clone()],
            None => &self.rx_bufs[buf][r.clone()],
        };
        let ep = &ep;
        let id = match self.cfg.rx_icrc {
            RxIcrcPolicy::Off => {
                TransportCounters::add(&c.icrc_unchecked, 1);
                0
            }
            policy if ep.src.is_ipv4() => {
                let next = self.last_id.get(&ep.src).map(|v| v.wrapping_add(1)).unwrap_or(0);
                let expected = [0, k as u16, next];
                match self.crc.solve_id(ep, payload, &expected) {
                    Some((id, true)) => {
                        TransportCounters::add(&c.icrc_ok_exact, 1);
                        id
                    }
                    Some((id, false)) if policy == RxIcrcPolicy::SolveId => {
                        TransportCounters::add(&c.icrc_ok_solved_id, 1);
                        id
                    }
                    _ => {
                        TransportCounters::add(&c.icrc_bad, 1);
                        tracing::debug!(src = %ep.src, len = payload.len(), "bad ICRC; dropped");
                        return;
                    }
                }
            }
            policy => match rxcheck::check(ep, payload, &[0], policy == RxIcrcPolicy::SolveId) {
                RxIcrc::Exact { ipv4_id } => {
                    TransportCounters::add(&c.icrc_ok_exact, 1);
                    ipv4_id
                }
                RxIcrc::SolvedId { ipv4_id } => {
                    TransportCounters::add(&c.icrc_ok_solved_id, 1);
                    ipv4_id
                }
                RxIcrc::Bad => {
                    TransportCounters::add(&c.icrc_bad, 1);
                    tracing::debug!(src = %ep.src, len = payload.len(), "bad ICRC; dropped");
                    return;
                }
            },
        };
        if ep.src.is_ipv4() && self.cfg.rx_icrc != RxIcrcPolicy::Off {
            // Bounded: a sender spoofing many source addresses cannot grow it.
            if self.last_id.len() >= MAX_PEERS && !self.last_id.contains_key(&ep.src) {
                self.last_id.clear();
            }
            self.last_id.insert(ep.src, id);
        }
        let meta = IpMeta { ipv4_id: id, tos, ..IpMeta::default() };
        let payload = match whole {
            Some(b) => {
                TransportCounters::add(&c.rx_zero_copy, 1);
                b.slice(r)
            }
            None => {
                let b = &self.rx_bufs[buf][r];
                self.arena.copy(b, c)
            }
        };
        if let Some(p) = &mut self.pcap {
            p.record(ep, &meta, &payload, c);
        }
        out.push(Datagram { endpoints: *ep, meta, payload, body: None });
    }
}

/// The steering of one received datagram of a shared device's member
/// (see [`crate::steer`]): `false` if it was answered or forwarded here,
/// `true` to go on with it (an envelope's datagram: `ep` and `r` now say
/// its source and where it is).
fn steer_one(
    tap: &SteerTap,
    sock: &UdpSocket,
    c: &TransportCounters,
    ep: &mut UdpEndpoints,
    r: &mut Range<usize>,
    payload: &[u8],
) -> bool {
    match tap.classify(payload) {
        Verdict::Mine => true,
        Verdict::Foreign(slot) => {
            // Forwarded to its member, not lost.
            TransportCounters::add(&c.steer_foreign, 1);
            tap.shared.note_foreign(slot);
            let src = SocketAddr::new(ep.src, ep.src_port);
            forward(sock, c, ep, &crate::steer::wrap(payload, src, slot, 1));
            false
        }
        // (only members of this device forward: from its address, which
        // the kernel takes from nowhere else)
        Verdict::Envelope { .. } if ep.src != ep.dst => {
            TransportCounters::add(&c.steer_forward_dropped, 1);
            false
        }
        Verdict::Envelope { slot, .. } if slot != tap.slot => {
            tap.shared.note_foreign(slot);
            match crate::steer::rewrap(payload) {
                Some(env) => forward(sock, c, ep, &env),
                None => TransportCounters::add(&c.steer_forward_dropped, 1),
            }
            false
        }
        Verdict::Envelope { src, .. } => {
            TransportCounters::add(&c.steer_forwarded_in, 1);
            ep.src = src.ip();
            ep.src_port = src.port();
            *r = r.start + crate::steer::FORWARD_HDR..r.end;
            true
        }
        Verdict::Probe(p) => {
            TransportCounters::add(&c.steer_probes, 1);
            let a = crate::steer::answer(&p, tap.slot, tap.pid);
            if sock.send_to(&a, SocketAddr::new(ep.src, ep.src_port)).is_err() {
                TransportCounters::add(&c.send_errors, 1);
            }
            false
        }
    }
}

/// Send an envelope (see [`crate::steer`]) to the device's own address,
/// where the group's program steers it to its member.
fn forward(sock: &UdpSocket, c: &TransportCounters, ep: &UdpEndpoints, env: &[u8]) {
    if sock.send_to(env, SocketAddr::new(ep.dst, ep.dst_port)).is_ok() {
        TransportCounters::add(&c.steer_forwarded_out, 1);
    } else {
        TransportCounters::add(&c.steer_forward_dropped, 1);
    }
}

/// Where small received datagrams are copied, one after another.
#[derive(Default)]
struct RxArena {
    buf: BytesMut,
    /// Address of the start of the current allocation (compared, never
    /// dereferenced): `reserve` returns there when it takes the allocation
    /// back.
    base: usize,
}

impl RxArena {
    /// Copy `p` in and split it off. When there is no room, `reserve` takes
    /// the whole allocation back if every earlier datagram is gone (no
    /// allocation), or else allocates anew.
    fn copy(&mut self, p: &[u8], c: &TransportCounters) -> Bytes {
        TransportCounters::add(&c.rx_arena_copies, 1);
        if self.buf.capacity() < p.len() {
            self.buf.reserve(ARENA_BYTES.max(p.len()));
            let at = self.buf.as_ptr() as usize;
            if at != self.base {
                self.base = at;
                TransportCounters::add(&c.rx_arenas, 1);
            }
        }
        self.buf.extend_from_slice(p);
        self.buf.split().freeze()
    }
}

/// Size of a receive arena (about 100 small datagrams).
const ARENA_BYTES: usize = 16 * 1024;

/// Messages at least this long are received without a copy (see
/// [`UdpTransport::recv`]).
const ZERO_COPY_MIN: usize = 2048;
/// Most receive buffers remembered for taking back.
const MAX_LENT: usize = 256;

/// The last four bytes of a datagram's `payload`: its ICRC (a datagram
/// with a region body keeps them there too, after the pad).
fn icrc_of(d: &Datagram) -> Option<[u8; 4]> {
    let n = d.payload.len();
    d.payload.get(n.checked_sub(4)?..)?.try_into().ok()
}

/// The parts of a gathered send: each datagram's headers, its region bytes
/// if it has any, then the rest of its payload with the last four bytes
/// replaced by the new ICRC where there is one.
fn gather_parts<'a>(
    d: &'a [Datagram],
    icrcs: &'a [Option<[u8; 4]>],
) -> SmallVec<[roce_region::TxPart<'a>; 16]> {
    use roce_region::TxPart;
    let mut parts = SmallVec::with_capacity(4 * d.len());
    for (x, c) in d.iter().zip(icrcs) {
        let p = &x.payload[..];
        let end = if c.is_some() { p.len() - 4 } else { p.len() };
        let at = x.body.as_ref().map_or(end, |b| b.at.min(end));
        parts.push(TxPart::Bytes(&p[..at]));
        if let Some(b) = &x.body {
            parts.push(TxPart::Region { mem: &b.mem, off: b.off, len: b.len });
        }
        if at < end {
            parts.push(TxPart::Bytes(&p[at..end]));
        }
        if let Some(c) = c {
            parts.push(TxPart::Bytes(c));
        }
    }
    parts
}

impl AsFd for UdpTransport {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl core::fmt::Debug for UdpTransport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UdpTransport")
            .field("local", &self.local)
            .field("gso", &self.gso)
            .field("gro", &self.gro)
            .finish_non_exhaustive()
    }
}

/// The socket a datagram goes to and the byte a shared device's members
/// are steered by, for the credits.
fn credit_dest(d: &Datagram) -> (SocketAddr, u8) {
    let to = SocketAddr::new(d.endpoints.dst, d.endpoints.dst_port);
    (to, crate::steer::steer_byte(&d.payload))
}
