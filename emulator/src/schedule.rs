//! The driver side of [`Hca`] ([`SansIo`]): the transmit round-robin over
//! the QPs that may have work, the timers, and `settle` (the device-wide
//! consequences of a call: CQ overflow moves QPs to ERR, SQ_DRAINED).
//! Only the QPs the [`crate::qp_table`] indexes name are visited.

use crate::hca::Hca;
use crate::objects::AsyncEvent;
use crate::qp::WqeState;
use crate::qp_attr::QpState;
use crate::time::Instant;
use crate::{Datagram, SansIo};
use core::ops::Bound;
use roce_packet::Qpn;

impl Hca {
    /// Move every QP of an overflowed CQ to ERR; raise SQ_DRAINED for
    /// QPs in SQD whose started WQEs have all completed.
    pub(crate) fn settle(&mut self) {
        if self.dev.sqd_draining.is_empty() && self.dev.sink.errored_cqs.is_empty() {
            return; // the usual case, once per packet
        }
        let qps = &self.qps;
        let drained: Vec<Qpn> = self
            .dev
            .sqd_draining
            .iter()
            .copied()
            .filter(|q| {
                qps.get(q).is_some_and(|qp| {
                    qp.state == QpState::Sqd
                        && !qp.sq.iter().any(|w| w.state != WqeState::Posted || w.npkts > 0)
                })
            })
            .collect();
        for q in drained {
            self.dev.sqd_draining.remove(&q);
            self.dev.sink.events.push_back(AsyncEvent::SqDrained(q));
        }
        while let Some(cq) = self.dev.sink.errored_cqs.pop() {
            let sink = &mut self.dev.sink;
            self.qps.for_each_mut(|qp| {
                if (qp.init.send_cq == cq || qp.init.recv_cq == cq) && qp.state != QpState::Err {
                    qp.enter_error(sink);
                }
            });
        }
    }
}

impl SansIo for Hca {
    /// Held ACKs ([`crate::LinkProfile::ack_delay`]) leave with the next
    /// transmits; ends when `poll_transmit` has nothing more to send.
    fn on_idle(&mut self) {
        self.dev.tx.acks_forced = true;
    }

    fn handle_datagram(&mut self, now: Instant, dgram: Datagram) {
        let span = tracing::debug_span!("hca", dev = %self.dev.name);
        let _g = span.enter();
        self.cm.note_time(now);
        self.receive(now, &dgram);
        self.settle();
        // its bytes build a later packet (when nothing else holds them)
        crate::bufpool::give(dgram.payload);
    }

    /// Round-robin over QPs (starting after the last one served); each QP
    /// sends its queued responses before new requests.
    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        let span = tracing::debug_span!("hca", dev = %self.dev.name);
        let _g = span.enter();
        // what the programs posted since the last call
        self.answer_doorbells();
        // management datagrams first (the CM's MADs from QP1)
        let cm = if self.cm_owns_qp1() { self.cm.transmit(&self.dev.tx, now) } else { None };
        // then CNPs (a NIC sends them ahead of its queues), then the last
        // ACKs of destroyed QPs
        if let Some(d) =
            cm.or_else(|| self.dev.cnps.pop_front()).or_else(|| self.parting.pop_front())
        {
            self.dev.counters.sent_pkts += 1;
            self.dev.counters.sent_bytes += d.payload.len() as u64;
            self.dev.tx.burst = true;
            return Some(d);
        }
        // Round-robin over the QPs that may transmit (`qp_table`), in QPN
        // order after the cursor, then up to it: the order of a scan of
        // every QP, without visiting the idle ones.
        let cursor = Qpn::new(self.rr_cursor);
        let dev = &mut self.dev;
        let mut out = None;
        let mut served = None;
        let passes = [
            (Bound::Excluded(cursor), Bound::Unbounded),
            (Bound::Unbounded, Bound::Included(cursor)),
        ];
        'passes: for (mut lo, hi) in passes {
            while let Some(k) = self.qps.first_ready(lo, hi) {
                lo = Bound::Excluded(k);
                let Some(mut qp) = self.qps.get_mut(&k) else { break };
                // the responder's queue (ACKs, NAKs, READ responses) first
                if let Some(d) = qp
                    .next_paced_response(&mut dev.resp(), now)
                    .or_else(|| qp.next_request(&mut dev.req(), now))
                {
                    served = Some(k);
                    out = Some(d);
                    break 'passes;
                }
            }
        }
        if let Some(k) = served {
            self.rr_cursor = k.value();
        }
        // a WQE that failed locally may have overflowed a CQ
        self.settle();
        match &out {
            Some(d) => {
                self.dev.counters.sent_pkts += 1;
                self.dev.counters.sent_bytes += d.payload.len() as u64;
                self.dev.tx.burst = true;
            }
            None => {
                self.dev.tx.acks_forced = false;
                self.dev.tx.burst = false;
            }
        }
        out
    }

    fn poll_timeout(&self) -> Option<Instant> {
        // (a QP's deadlines include a held ACK's: it leaves alone at twice the delay)
        match (self.cm.deadline(), self.qps.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, None) => a,
            (None, b) => b,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        let span = tracing::debug_span!("hca", dev = %self.dev.name);
        let _g = span.enter();
        self.cm.timeout(now);
        // only the QPs with a deadline at or before `now`, in QPN order
        for qpn in self.qps.due(now) {
            let Some(mut qp) = self.qps.get_mut(&qpn) else { continue };
            if qp.comp.rnr_deadline.is_some_and(|d| d <= now) {
                qp.on_rnr_timeout(now);
            }
            if qp.comp.retrans_deadline.is_some_and(|d| d <= now) {
                qp.on_retrans_timeout(&mut self.dev.comp(), now);
            }
            // the pacer's gate opened: the QP may send again
            if qp.cc.gate.is_some_and(|g| g <= now) {
                qp.cc.gate = None;
            }
        }
        self.settle();
    }
}
