//! [`Link`]: what the engine needs from whatever moves its frames — a
//! UDP socket ([`UdpTransport`]), a raw Ethernet socket
//! ([`crate::RawTransport`]), or either behind the fault injector
//! ([`crate::faults`]). The engine and the one-port driver use only this.

use crate::counters::TransportCounters;
use crate::udp::{SendOutcome, UdpTransport};
use roce_emulator::{Datagram, LinkProfile, RxIcrc};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

/// What the driver needs from a transport ([`UdpTransport`] implements it;
/// a raw-socket transport can too).
pub trait Link: AsFd + Send + 'static {
    /// What this link does with the datagrams of the core it carries,
    /// declared by the link itself (the host gives it to the core as
    /// `HcaConfig::link` and adds its ACK policy; nothing is inferred from
    /// the kind of link): who verifies received ICRCs
    /// ([`roce_emulator::RxIcrc`]), the UDP source port it sends from when
    /// it fixes one (the core then computes every ICRC for that port, so
    /// the link rewrites no ICRC but GSO's identifications), and whether it
    /// gathers payloads from region memory. The ACK fields are left at
    /// their defaults.
    fn profile(&self) -> LinkProfile;
    /// Send in order without blocking; see [`UdpTransport::send`].
    fn send(&mut self, dgrams: &[Datagram]) -> SendOutcome;
    /// One non-blocking receive batch; returns the number of messages read.
    fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<usize>;
    /// [`Link::recv`] of at most `max` messages (a hint: the caller
    /// knows that many datagrams were just sent here).
    fn recv_at_most(&mut self, out: &mut Vec<Datagram>, max: usize) -> io::Result<usize> {
        let _ = max;
        self.recv(out)
    }
    /// Messages per receive batch (a full batch means: read again).
    fn batch(&self) -> usize;
    /// The local address.
    fn local_addr(&self) -> SocketAddr;
    /// The live counters.
    fn counters(&self) -> Arc<TransportCounters>;
    /// Called when the driver stops (flush recordings).
    fn finish(&mut self) {}
    /// Receive the datagrams of the IP multicast group `group` from now on
    /// (a UDP device: see `crate::mcast`). The default: not supported.
    fn join_group(&mut self, group: IpAddr) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("this transport cannot join the multicast group {group}"),
        ))
    }
    /// Stop receiving `group`'s datagrams.
    fn leave_group(&mut self, group: IpAddr) -> io::Result<()> {
        let _ = group;
        Ok(())
    }
    /// A descriptor that is readable when a joined group has a datagram
    /// waiting (`None` before the first join). The engine sleeps on it too.
    fn group_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

impl Link for UdpTransport {
    /// Verifies what it delivers (unless its policy is `Off`), sends from
    /// its socket's port, gathers region bodies into its sends.
    fn profile(&self) -> LinkProfile {
        let checks = self.config().rx_icrc != crate::RxIcrcPolicy::Off;
        LinkProfile {
            rx_icrc: if checks { RxIcrc::Link } else { RxIcrc::Core },
            src_port: Some(self.local_addr().port()),
            region_bodies: true,
            ..LinkProfile::default()
        }
    }
    fn send(&mut self, dgrams: &[Datagram]) -> SendOutcome {
        UdpTransport::send(self, dgrams)
    }
    fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<usize> {
        UdpTransport::recv(self, out)
    }
    fn recv_at_most(&mut self, out: &mut Vec<Datagram>, max: usize) -> io::Result<usize> {
        UdpTransport::recv_at_most(self, out, max)
    }
    fn batch(&self) -> usize {
        self.config().batch.max(1)
    }
    fn local_addr(&self) -> SocketAddr {
        UdpTransport::local_addr(self)
    }
    fn counters(&self) -> Arc<TransportCounters> {
        UdpTransport::counters(self)
    }
    fn finish(&mut self) {
        self.flush_pcap();
    }
    fn join_group(&mut self, group: IpAddr) -> io::Result<()> {
        UdpTransport::join_group(self, group)
    }
    fn leave_group(&mut self, group: IpAddr) -> io::Result<()> {
        UdpTransport::leave_group(self, group)
    }
    fn group_fd(&self) -> Option<BorrowedFd<'_>> {
        UdpTransport::group_fd(self)
    }
}

/// A boxed transport is a transport: a device assembled with any of them
/// (UDP, raw, behind the fault injector) runs on the same engine.
impl Link for Box<dyn Link> {
    fn profile(&self) -> LinkProfile {
        (**self).profile()
    }
    fn send(&mut self, dgrams: &[Datagram]) -> SendOutcome {
        (**self).send(dgrams)
    }
    fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<usize> {
        (**self).recv(out)
    }
    fn recv_at_most(&mut self, out: &mut Vec<Datagram>, max: usize) -> io::Result<usize> {
        (**self).recv_at_most(out, max)
    }
    fn batch(&self) -> usize {
        (**self).batch()
    }
    fn local_addr(&self) -> SocketAddr {
        (**self).local_addr()
    }
    fn counters(&self) -> Arc<TransportCounters> {
        (**self).counters()
    }
    fn finish(&mut self) {
        (**self).finish()
    }
    fn join_group(&mut self, group: IpAddr) -> io::Result<()> {
        (**self).join_group(group)
    }
    fn leave_group(&mut self, group: IpAddr) -> io::Result<()> {
        (**self).leave_group(group)
    }
    fn group_fd(&self) -> Option<BorrowedFd<'_>> {
        (**self).group_fd()
    }
}
