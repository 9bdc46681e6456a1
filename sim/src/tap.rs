//! Capture taps: every datagram on the fabric as an Ethernet frame with
//! real IPv4/IPv6 and UDP headers, in a pcap file (nanosecond timestamps
//! from the virtual clock, so the capture of a run is as reproducible as
//! the run) or handed to a closure.
//!
//! Where the tap sits ([`TapPoint`]):
//! * `Ingress` (what [`Fabric::record_pcap`] uses): the datagram as it is
//!   handed to the receiving node, at its arrival time — after corruption,
//!   duplication, reordering and delay, without the lost ones. The capture
//!   shows what the receivers saw, in the order they saw it; timestamps
//!   never decrease.
//! * `Egress`: the datagram as the sending node produced it, at its
//!   transmission time, before any fault — lost datagrams included.
//!
//! MAC addresses are derived from IP addresses ([`mac_for`]).

use crate::{Fabric, FabricStats};
use core::net::IpAddr;
use core::time::Duration;
use roce_emulator::io::{Datagram, SansIo};
use roce_emulator::time::Instant;
use roce_packet::frame::ethernet_frame;
use roce_pcap::{CaptureError, LinkType, PcapWriter};
use std::any::Any;
use std::io::Write;
use tracing::warn;

/// Where on the path a tap records.
///
/// `Ingress` shows what the receivers saw (after corruption, duplication,
/// reordering and delay; lost datagrams absent) at arrival times, so its
/// timestamps never decrease. `Egress` shows what the senders sent (before
/// any fault; lost datagrams present) at transmission times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TapPoint {
    /// Delivered datagrams, at their arrival time (after faults).
    #[default]
    Ingress,
    /// Transmitted datagrams, at their transmission time (before faults).
    Egress,
}

/// Identifies a tap added to a fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TapId(pub usize);

/// The locally administered MAC the fabric gives an IP address:
/// `02:00` followed by the last four bytes of the address (for IPv4, the
/// address itself: 10.0.0.1 → 02:00:0a:00:00:01). A multicast group gets
/// the Ethernet multicast MAC every NIC derives from it (RFC 1112:
/// `01:00:5e` and the low 23 bits, 239.1.1.1 → 01:00:5e:01:01:01; RFC 2464:
/// `33:33` and the low 32 bits of an IPv6 group).
pub fn mac_for(ip: IpAddr) -> [u8; 6] {
    match roce_emulator::mcast::canonical_gid(ip) {
        IpAddr::V4(g) if g.is_multicast() => {
            let o = g.octets();
            return [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]];
        }
        IpAddr::V6(g) if g.is_multicast() => {
            let o = g.octets();
            return [0x33, 0x33, o[12], o[13], o[14], o[15]];
        }
        _ => {}
    }
    let b: [u8; 4] = match ip {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => {
            let o = a.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [0x02, 0x00, b[0], b[1], b[2], b[3]]
}

/// Something frames can be written to.
trait FrameSink: Send {
    fn write(&mut self, ts: Duration, frame: &[u8]) -> Result<(), CaptureError>;
    /// Finish (flush) and return the underlying writer, boxed.
    fn finish(self: Box<Self>) -> Result<Box<dyn Any>, CaptureError>;
}

impl<W: Write + Send + 'static> FrameSink for PcapWriter<W> {
    fn write(&mut self, ts: Duration, frame: &[u8]) -> Result<(), CaptureError> {
        self.write_frame(ts, frame)
    }
    fn finish(self: Box<Self>) -> Result<Box<dyn Any>, CaptureError> {
        Ok(Box::new(self.into_inner()?))
    }
}

struct FnSink<F>(F);

impl<F: FnMut(Duration, &[u8]) + Send + 'static> FrameSink for FnSink<F> {
    fn write(&mut self, ts: Duration, frame: &[u8]) -> Result<(), CaptureError> {
        (self.0)(ts, frame);
        Ok(())
    }
    fn finish(self: Box<Self>) -> Result<Box<dyn Any>, CaptureError> {
        Ok(Box::new(()))
    }
}

pub(crate) struct Tap {
    point: TapPoint,
    sink: Box<dyn FrameSink>,
    /// The first write error; once set, nothing more is written.
    error: Option<CaptureError>,
}

impl Tap {
    fn record(&mut self, now: Instant, d: &Datagram, stats: &mut FabricStats) {
        if self.error.is_some() {
            stats.tap_errors += 1;
            return;
        }
        let ep = &d.endpoints;
        let res = ethernet_frame(mac_for(ep.src), mac_for(ep.dst), ep, &d.meta, &d.payload)
            .map_err(|e| CaptureError::Unwritable(e.to_string()))
            .and_then(|f| self.sink.write(Duration::from_nanos(now.as_nanos()), &f));
        if let Err(e) = res {
            warn!(error = %e, "sim capture tap failed; recording stops");
            stats.tap_errors += 1;
            self.error = Some(e);
        }
    }
}

impl<N: SansIo> Fabric<N> {
    /// Record every delivered datagram into a pcap file written to `w`
    /// (the file header is written now), as Ethernet frames with real IP
    /// and UDP headers, timestamped with the virtual clock.
    ///
    /// The tap sits at the receivers ([`TapPoint::Ingress`]): a frame is
    /// written when its datagram is handed to a node, after every fault, so
    /// the capture shows what the receivers saw (corrupted bytes, both
    /// copies of a duplicate, reordered arrivals) and not what was lost.
    /// Use [`Fabric::record_pcap_at`] with [`TapPoint::Egress`] for the
    /// senders' view. Get the writer back with [`Fabric::finish_pcap`].
    pub fn record_pcap<W: Write + Send + 'static>(&mut self, w: W) -> Result<TapId, CaptureError> {
        self.record_pcap_at(w, TapPoint::Ingress)
    }

    /// Record into a pcap file at the given point.
    pub fn record_pcap_at<W: Write + Send + 'static>(
        &mut self,
        w: W,
        point: TapPoint,
    ) -> Result<TapId, CaptureError> {
        let writer = PcapWriter::new(w, LinkType::Ethernet)?;
        Ok(self.add_tap(point, Box::new(writer)))
    }

    /// Hand every frame at `point` to a closure (timestamp, Ethernet frame).
    pub fn record_frames(
        &mut self,
        point: TapPoint,
        f: impl FnMut(Duration, &[u8]) + Send + 'static,
    ) -> TapId {
        self.add_tap(point, Box::new(FnSink(f)))
    }

    fn add_tap(&mut self, point: TapPoint, sink: Box<dyn FrameSink>) -> TapId {
        self.taps.push(Some(Tap { point, sink, error: None }));
        TapId(self.taps.len() - 1)
    }

    /// Stop a pcap tap and return its writer (flushed). Fails with the
    /// first write error the tap hit, or `Unwritable` if `id` is not a
    /// running pcap tap writing to a `W`.
    pub fn finish_pcap<W: Write + Send + 'static>(&mut self, id: TapId) -> Result<W, CaptureError> {
        let tap = self
            .taps
            .get_mut(id.0)
            .and_then(Option::take)
            .ok_or_else(|| CaptureError::Unwritable(format!("no running tap {}", id.0)))?;
        if let Some(e) = tap.error {
            return Err(e);
        }
        tap.sink
            .finish()?
            .downcast::<W>()
            .map(|b| *b)
            .map_err(|_| CaptureError::Unwritable("tap writes to another writer type".into()))
    }

    /// Stop any tap (its writer is dropped). False if it was not running.
    pub fn stop_tap(&mut self, id: TapId) -> bool {
        self.taps.get_mut(id.0).and_then(Option::take).is_some()
    }

    pub(crate) fn tap(&mut self, point: TapPoint, d: &Datagram) {
        let now = self.now;
        for t in self.taps.iter_mut().flatten() {
            if t.point == point {
                t.record(now, d, &mut self.stats);
            }
        }
    }
}
