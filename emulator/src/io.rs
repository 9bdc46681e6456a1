//! The sans-IO contract between the HCA core and whatever moves its frames
//! (the simulated fabric, a UDP socket, a raw socket). Modelled on
//! quinn-proto's `Connection`: inputs carry `now`, outputs are pulled.

use crate::time::Instant;
use bytes::Bytes;
use roce_packet::{IpMeta, UdpEndpoints};
use roce_region::RegionMem;
use std::sync::{Arc, Mutex};

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
///
/// A datagram to send may carry its payload in region memory (`body`, only
/// from a core told [`crate::Hca::set_tx_region_bodies`]): then the UDP
/// payload is `payload[..body.at]`, the region's bytes, then
/// `payload[body.at..]` (pad and ICRC). The ICRC covers all of it.
/// [`Datagram::flatten`] gives the contiguous form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    pub endpoints: UdpEndpoints,
    pub meta: IpMeta,
    pub payload: Bytes,
    pub body: Option<RegionBody>,
}

/// Payload bytes a datagram sends straight from a registered region (see
/// [`Datagram`]): the transport gathers them into its `sendmsg`, so the
/// kernel makes the only copy, as a NIC's DMA read does.
#[derive(Clone, Debug)]
pub struct RegionBody {
    pub mem: Arc<RegionMem>,
    /// Offset in the region.
    pub off: usize,
    /// Bytes.
    pub len: usize,
    /// Where in `payload` they go (after the headers).
    pub at: usize,
}

impl PartialEq for RegionBody {
    fn eq(&self, o: &RegionBody) -> bool {
        Arc::ptr_eq(&self.mem, &o.mem) && (self.off, self.len, self.at) == (o.off, o.len, o.at)
    }
}

impl Eq for RegionBody {}

impl Datagram {
    /// A datagram whose UDP payload is `payload` (no region body).
    pub fn new(endpoints: UdpEndpoints, meta: IpMeta, payload: Bytes) -> Datagram {
        Datagram { endpoints, meta, payload, body: None }
    }

    /// Length of the UDP payload on the wire (BTH through ICRC).
    pub fn wire_len(&self) -> usize {
        self.payload.len() + self.body.as_ref().map_or(0, |b| b.len)
    }

    /// The same datagram with its whole UDP payload in `payload` (a copy of
    /// the region bytes; free without a body). `None` if the region was
    /// deregistered in the meantime (the datagram cannot be sent).
    pub fn flatten(self) -> Option<Datagram> {
        let Some(b) = &self.body else { return Some(self) };
        let at = b.at.min(self.payload.len());
        let mut v = Vec::with_capacity(self.wire_len());
        v.extend_from_slice(&self.payload[..at]);
        b.mem.read_into_vec(b.off, b.len, &mut v)?;
        v.extend_from_slice(&self.payload[at..]);
        Some(Datagram::new(self.endpoints, self.meta, Bytes::from(v)))
    }
}

/// Something that consumes and produces datagrams and owns timers.
/// `Hca` implements it; the simulated fabric (the `roce-sim` crate) drives
/// any number of them.
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

/// A boxed node (the default node type of `roce_sim::Fabric`).
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

/// A node lent to a driver for one run (`roce_sim::Fabric<&mut Hca>`): the
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

/// A node shared between a driver and someone else (e.g. a verbs API
/// posting work to the device the simulated fabric drives): the driver
/// locks it for each call. A poisoned lock is used anyway (the node's state
/// is whatever the panicking holder left).
impl<T: SansIo + ?Sized> SansIo for Arc<Mutex<T>> {
    fn handle_datagram(&mut self, now: Instant, dgram: Datagram) {
        lock(self).handle_datagram(now, dgram)
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        lock(self).poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        lock(self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        lock(self).handle_timeout(now)
    }
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
