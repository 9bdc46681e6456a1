//! Raw UDP throughput between two local addresses: the "ceiling" any
//! RoCE-over-UDP device can reach on this host, for three ways of using the
//! socket API ([`CeilingMode`]).
//!
//! A receiver thread counts what arrives on `dst` while the calling thread
//! sends `payload`-byte datagrams from `src` for `duration` as fast as it
//! can (the sockets have `IP_PMTUDISC_DO`, like [`crate::UdpTransport`]).
//! The result is what was *received*, per second of the interval from the
//! first send to the last receive (loopback UDP drops what the receiver
//! cannot keep up with; the drop is reported too).

use crate::udp::{enable_gro, set_pmtudisc_do};
use nix::errno::Errno;
use nix::sys::socket::{
    self as nsock, sockopt, ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage,
};
use rustix::net::{MMsgHdr, SendAncillaryBuffer, SendFlags, SocketAddrAny};
use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the socket API is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CeilingMode {
    /// One `sendto` / `recvfrom` per datagram.
    Plain,
    /// `sendmmsg` / `recvmmsg`, 32 datagrams per call.
    Mmsg,
    /// `sendmsg` with `UDP_SEGMENT` (up to 64 KiB per call) and `recvmmsg`
    /// with `UDP_GRO`.
    GsoGro,
}

impl CeilingMode {
    /// All modes, slowest first.
    pub const ALL: [CeilingMode; 3] = [CeilingMode::Plain, CeilingMode::Mmsg, CeilingMode::GsoGro];
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            CeilingMode::Plain => "plain",
            CeilingMode::Mmsg => "mmsg",
            CeilingMode::GsoGro => "gso+gro",
        }
    }
}

/// What one [`measure`] run saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CeilingResult {
    /// The mode measured.
    pub mode: CeilingMode,
    /// UDP payload bytes per datagram.
    pub payload: usize,
    /// Datagrams handed to the kernel.
    pub sent_datagrams: u64,
    /// Datagrams received.
    pub recv_datagrams: u64,
    /// Payload bytes received.
    pub recv_bytes: u64,
    /// From the first send to the last receive.
    pub elapsed: Duration,
    /// Send system calls.
    pub send_syscalls: u64,
    /// Receive system calls that returned data.
    pub recv_syscalls: u64,
}

impl CeilingResult {
    /// Received payload throughput in GB/s (10^9 bytes per second).
    pub fn gbytes_per_sec(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.recv_bytes as f64 / s / 1e9
        } else {
            0.0
        }
    }
    /// Fraction of sent datagrams that were not received.
    pub fn loss(&self) -> f64 {
        if self.sent_datagrams == 0 {
            return 0.0;
        }
        1.0 - (self.recv_datagrams as f64 / self.sent_datagrams as f64).min(1.0)
    }
}

/// Min/median/max of several runs' GB/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CeilingSummary {
    /// The mode measured.
    pub mode: CeilingMode,
    /// Slowest run, GB/s.
    pub min: f64,
    /// Median run, GB/s.
    pub median: f64,
    /// Fastest run, GB/s.
    pub max: f64,
    /// Mean loss over the runs.
    pub loss: f64,
}

/// Summarize runs of one mode (`None` if `runs` is empty).
pub fn summarize(runs: &[CeilingResult]) -> Option<CeilingSummary> {
    let first = runs.first()?;
    let mut v: Vec<f64> = runs.iter().map(|r| r.gbytes_per_sec()).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    let median =
        if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 };
    Some(CeilingSummary {
        mode: first.mode,
        min: v[0],
        median,
        max: v[v.len() - 1],
        loss: runs.iter().map(|r| r.loss()).sum::<f64>() / runs.len() as f64,
    })
}

const BATCH: usize = 32;
const BUF: usize = 65_536;

fn socket(addr: SocketAddr) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(addr)?;
    set_pmtudisc_do(s.as_fd(), addr.is_ipv6())?;
    let _ = nsock::setsockopt(&s, sockopt::SndBuf, &(8usize << 20));
    let _ = nsock::setsockopt(&s, sockopt::RcvBuf, &(8usize << 20));
    Ok(s)
}

struct RxStats {
    bytes: u64,
    syscalls: u64,
    last: Option<Instant>,
}

fn receive(s: UdpSocket, mode: CeilingMode, stop: Arc<AtomicBool>) -> RxStats {
    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
    let mut st = RxStats { bytes: 0, syscalls: 0, last: None };
    let mut bufs = vec![vec![0u8; BUF]; if mode == CeilingMode::Plain { 1 } else { BATCH }];
    let mut idle = 0;
    loop {
        let got = match mode {
            CeilingMode::Plain => match s.recv_from(&mut bufs[0]) {
                Ok((n, _)) => Some(n as u64),
                Err(_) => None,
            },
            _ => {
                let mut hdrs: MultiHeaders<SockaddrStorage> =
                    MultiHeaders::preallocate(bufs.len(), Some(nix::cmsg_space!(i32)));
                let mut iovs: Vec<[IoSliceMut<'_>; 1]> =
                    bufs.iter_mut().map(|b| [IoSliceMut::new(&mut b[..])]).collect();
                match nsock::recvmmsg(
                    s.as_raw_fd(),
                    &mut hdrs,
                    &mut iovs,
                    MsgFlags::MSG_WAITFORONE,
                    None,
                ) {
                    Ok(r) => Some(r.map(|m| m.bytes as u64).sum()),
                    Err(_) => None,
                }
            }
        };
        match got {
            Some(n) => {
                st.bytes += n;
                st.syscalls += 1;
                st.last = Some(Instant::now());
                idle = 0;
            }
            None => {
                // Timed out: finish once the sender is done and the queue is dry.
                if stop.load(Ordering::SeqCst) {
                    idle += 1;
                    if idle >= 2 {
                        return st;
                    }
                }
            }
        }
    }
}

/// Measure raw UDP throughput from `src` to `dst` (use port 0 in `src` and
/// a free port in `dst`, or port 0 in both: the real receive port is used).
pub fn measure(
    src: SocketAddr,
    dst: SocketAddr,
    mode: CeilingMode,
    payload: usize,
    duration: Duration,
) -> io::Result<CeilingResult> {
    if payload == 0 || payload > 65_000 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "payload must be 1..=65000 bytes"));
    }
    let rx = socket(dst)?;
    let dst = rx.local_addr()?;
    if mode == CeilingMode::GsoGro && !enable_gro(rx.as_fd()) {
        return Err(io::Error::new(io::ErrorKind::Unsupported, "UDP_GRO refused"));
    }
    let tx = socket(src)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let rx_thread = std::thread::spawn(move || receive(rx, mode, stop2));
    let data = vec![0x5Au8; payload * 64];
    let dst_any = SocketAddrAny::from(dst);
    let dst_nix = SockaddrStorage::from(dst);
    let segs = (65_000 / payload).clamp(1, 64);
    let seg16 = payload as u16;
    let (mut sent, mut calls) = (0u64, 0u64);
    let start = Instant::now();
    let mut send_err = None;
    while start.elapsed() < duration {
        let r: io::Result<u64> = match mode {
            CeilingMode::Plain => tx.send_to(&data[..payload], dst).map(|_| 1),
            CeilingMode::Mmsg => {
                let iovs: Vec<[IoSlice<'_>; 1]> = (0..BATCH)
                    .map(|i| [IoSlice::new(&data[i % 64 * payload..][..payload])])
                    .collect();
                let mut ctl: Vec<SendAncillaryBuffer<'_, '_, '_>> =
                    (0..BATCH).map(|_| SendAncillaryBuffer::default()).collect();
                let mut msgs: Vec<MMsgHdr<'_>> = iovs
                    .iter()
                    .zip(ctl.iter_mut())
                    .map(|(iov, c)| MMsgHdr::new_with_addr(&dst_any, iov, c))
                    .collect();
                rustix::net::sendmmsg(&tx, &mut msgs, SendFlags::empty())
                    .map(|n| n as u64)
                    .map_err(io::Error::from)
            }
            CeilingMode::GsoGro => {
                let iov = [IoSlice::new(&data[..segs * payload])];
                let cmsg = [ControlMessage::UdpGsoSegments(&seg16)];
                nsock::sendmsg(tx.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), Some(&dst_nix))
                    .map(|_| segs as u64)
                    .map_err(io::Error::from)
            }
        };
        calls += 1;
        match r {
            Ok(n) => sent += n,
            Err(e) if e.raw_os_error() == Some(Errno::ENOBUFS as i32) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                send_err = Some(e);
                break;
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    let st = rx_thread.join().map_err(|_| io::Error::other("receiver thread panicked"))?;
    if let Some(e) = send_err {
        return Err(e);
    }
    let elapsed = st.last.map(|l| l.saturating_duration_since(start)).unwrap_or(duration);
    Ok(CeilingResult {
        mode,
        payload,
        sent_datagrams: sent,
        recv_datagrams: st.bytes / payload as u64,
        recv_bytes: st.bytes,
        elapsed,
        send_syscalls: calls,
        recv_syscalls: st.syscalls,
    })
}
