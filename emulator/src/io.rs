//! The sans-IO contract between the HCA core and whatever moves its frames
//! (the simulated fabric, a UDP socket, a raw socket). Modelled on
//! quinn-proto's `Connection`: inputs carry `now`, outputs are pulled.

use crate::time::Instant;
use bytes::Bytes;
use roce_packet::{IpMeta, UdpEndpoints};

/// One RoCEv2 UDP datagram: addressing, the IP header fields the ICRC
/// covers, and the UDP payload (BTH through ICRC).
///
/// For transmission, `endpoints` and `meta` are the header the core computed
/// the ICRC over (see `roce_packet::frame::IpUdpHeader`), and the ICRC must
/// be valid for them: a transport that must send different invariant fields
/// (the UDP socket's own source port, a raw transport's IPv4 identification)
/// recomputes the ICRC, or adjusts it from the header difference without
/// re-reading the payload (the UDP transport does). For reception, `meta` is
/// what the transport knows of the received header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    pub endpoints: UdpEndpoints,
    pub meta: IpMeta,
    pub payload: Bytes,
}

/// Something that consumes and produces datagrams and owns timers.
/// `Hca` implements it; the sim fabric drives any number of them.
pub trait SansIo {
    /// Feed one received datagram.
    fn handle_datagram(&mut self, now: Instant, dgram: Datagram);
    /// Take the next datagram to send, if any.
    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram>;
    /// The earliest deadline at which `handle_timeout` must be called.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Fire every timer whose deadline is at or before `now`. Spurious calls
    /// are harmless.
    fn handle_timeout(&mut self, now: Instant);
}

/// A boxed node (the default node type of a [`crate::sim::Fabric`]).
impl<T: SansIo + ?Sized> SansIo for Box<T> {
    fn handle_datagram(&mut self, now: Instant, dgram: Datagram) {
        (**self).handle_datagram(now, dgram)
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        (**self).poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now)
    }
}

/// A node lent to a driver for one run (`sim::Fabric<&mut Hca>`): the
/// driver moves its frames, its owner keeps it.
impl<T: SansIo + ?Sized> SansIo for &mut T {
    fn handle_datagram(&mut self, now: Instant, dgram: Datagram) {
        (**self).handle_datagram(now, dgram)
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        (**self).poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now)
    }
}
