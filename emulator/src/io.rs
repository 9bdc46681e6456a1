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
/// the ICRC over (see `roce_packet::frame::IpUdpHeader`), and the ICRC is
/// valid for them (see [`LinkProfile`] for who owns the ICRC on each path).
/// For reception, `meta` is what the link knows of the received header.
///
/// A datagram to send may carry its payload in region memory (`body`, only
/// from a core whose [`LinkProfile::region_bodies`] is set): then the UDP
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

    /// Length of the Ethernet frame that carries it: header, IP header,
    /// UDP header, payload, FCS (what DCQCN's pacer books and a simulated
    /// switch queues).
    pub fn frame_len(&self) -> usize {
        let ip = if self.endpoints.dst.is_ipv6() { 40 } else { 20 };
        14 + ip + 8 + self.wire_len() + 4
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

/// How the link below a core moves its datagrams: fixed when the core is
/// made (`HcaConfig::link`), for the life of the device. The simulator's
/// links take [`LinkProfile::default`]: whole payloads, the core checks
/// every ICRC, one ACK per AckReq, as rxe behaves.
///
/// **The ICRC has one owner per direction.**
/// - Transmit: the core computes the ICRC of every datagram for the IP/UDP
///   header the datagram describes (`endpoints`, `meta`: IPv4
///   identification 0, DF). A link that puts another header on the wire
///   re-seals the ICRC in one place, `roce_packet::icrc_math`'s
///   `fix_fields` (from the header difference, without re-reading the
///   payload): the UDP link does so for the identification Linux gives the
///   k-th segment of a GSO send (k), and for the socket's port when
///   [`LinkProfile::src_port`] is not set; the raw link for its own IPv4
///   identification counter. Nothing else changes an ICRC.
/// - Receive: [`LinkProfile::rx_icrc`] names who verifies it: the core
///   ([`RxIcrc::Core`], against the datagram's `meta`) or the link
///   ([`RxIcrc::Link`]: the UDP link, which never sees the IPv4
///   identification, finds it with `roce_packet::icrc_math`'s `solve_id`
///   (the expected ones first: 0, the GRO segment index, one past the
///   peer's last; see `roce_transport::rxcheck`) and delivers the datagram
///   with it in `meta`; the raw link checks against the real IP header);
///   never both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkProfile {
    /// Who verifies the ICRC of received datagrams.
    pub rx_icrc: RxIcrc,
    /// The UDP source port of every datagram, when the link fixes it (a
    /// UDP socket sends from its own port): the core then computes each
    /// ICRC for that port. `None`: each QP's own RoCEv2 source port, as
    /// rxe sends (the raw link keeps it).
    pub src_port: Option<u16>,
    /// Large payloads may stay in region memory ([`RegionBody`]): a request
    /// or READ response payload of at least 1 KiB in one SGE is not copied
    /// into the packet; the link gathers it into its send, so the kernel
    /// makes the only copy. Only for a link that gathers bodies (the UDP
    /// link; [`Datagram::flatten`] elsewhere).
    pub region_bodies: bool,
    /// Coalesce acknowledgements: a positive ACK still queued when a newer
    /// one for the same QP is due is replaced by it (counted in
    /// `acks_merged`), and ACKs are built only when they leave. IBA allows
    /// one ACK for several packets (§9.7.5.1.3); rxe answers every AckReq,
    /// so the simulator keeps this off and real devices turn it on.
    pub ack_coalescing: bool,
    /// Hold a positive ACK back this long (implies coalescing; `None` or
    /// zero: never). A held ACK leaves once it is this old and other
    /// packets leave in the same transmit burst, alone at twice the delay,
    /// at once when it acknowledges [`ACK_EVERY_PSNS`](crate::ACK_EVERY_PSNS)
    /// more PSNs than its QP's last ACK, as soon as anything else of its
    /// QP's responder is queued behind it, and when the driver goes idle
    /// ([`SansIo::on_idle`]). `poll_timeout` includes its deadline.
    pub ack_delay: Option<core::time::Duration>,
}

/// Who verifies the ICRC of received datagrams ([`LinkProfile::rx_icrc`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxIcrc {
    /// The core checks every ICRC against the datagram's `meta` (rxe's
    /// behaviour; the simulator, and any link with injected faults that
    /// may corrupt a datagram after the link's own check).
    #[default]
    Core,
    /// The link verified every ICRC it delivers, against the `meta` it
    /// delivers it with; the core does not compute it a second time.
    Link,
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
    /// The driver is going idle (nothing received, nothing to send): what
    /// the node was holding back to batch may leave with the next
    /// `poll_transmit` (the HCA's held ACKs, [`LinkProfile::ack_delay`]).
    /// An event of the sans-IO contract, not a setting: a driver that
    /// never idles never calls it. Default: nothing is held.
    fn on_idle(&mut self) {}
}

/// `SansIo` for a pointer to a node: every call goes to the node.
macro_rules! forward_sans_io {
    ($(#[$doc:meta])* $ptr:ty) => {
        $(#[$doc])*
        impl<T: SansIo + ?Sized> SansIo for $ptr {
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
            fn on_idle(&mut self) {
                (**self).on_idle()
            }
        }
    };
}

forward_sans_io!(
    /// A boxed node (the default node type of `roce_sim::Fabric`).
    Box<T>
);
forward_sans_io!(
    /// A node lent to a driver for one run (`roce_sim::Fabric<&mut Hca>`):
    /// the driver moves its frames, its owner keeps it.
    &mut T
);

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
    fn on_idle(&mut self) {
        lock(self).on_idle()
    }
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
