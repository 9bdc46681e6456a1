//! The device context every role borrows: everything of an [`crate::Hca`]
//! but its QP table (so a QP and the rest borrow disjointly) — object
//! tables, memory, counters, events, transport tuning — and the datagram
//! builder the roles send with.

use crate::counters::Counters;
use crate::io::Datagram;
use crate::objects::*;
use crate::qp::Qp;
use crate::wr::{WcStatus, WorkCompletion};
use bytes::Bytes;
use core::time::Duration;
use rand::rngs::SmallRng;
use rand::Rng;
use roce_packet::{
    BthRepr, IpMeta, IpUdpHeader, Opcode, PKey, Psn, Qpn, RoceRepr, UdpEndpoints, ROCE_V2_PORT,
};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::net::IpAddr;

/// Everything but the QP table (so a QP and the rest borrow disjointly).
pub(crate) struct Dev {
    pub name: String,
    pub addr: IpAddr,
    pub attr: DeviceAttr,
    pub port: PortAttr,
    pub rng: SmallRng,
    pub pds: HashMap<PdHandle, Pd>,
    pub mem: MemTable,
    pub cqs: HashMap<CqHandle, Cq>,
    pub srqs: HashMap<SrqHandle, Srq>,
    /// CQs whose armed notification fired (`ibv_get_cq_event`).
    pub comp_events: VecDeque<CqHandle>,
    pub counters: Counters,
    pub events: VecDeque<AsyncEvent>,
    pub errored_cqs: Vec<CqHandle>,
    /// QPs moved RTS→SQD with `en_sqd_async_notify`, not yet drained.
    pub sqd_draining: std::collections::BTreeSet<Qpn>,
    pub(crate) next_id: u32,
    pub(crate) next_key: u32,
    pub(crate) next_iova: u64,
    /// See [`Hca::set_tx_src_port`](crate::Hca::set_tx_src_port).
    pub(crate) tx_src_port: Option<u16>,
    /// See [`Hca::set_ack_coalescing`](crate::Hca::set_ack_coalescing).
    pub(crate) coalesce_acks: bool,
    /// See [`Hca::set_ack_delay`](crate::Hca::set_ack_delay).
    pub(crate) ack_delay: Option<Duration>,
    /// Held ACKs leave at the next transmits, whatever their age
    /// ([`Hca::flush_acks`](crate::Hca::flush_acks)); cleared when nothing is left to send.
    pub(crate) acks_forced: bool,
    /// `poll_transmit` returned a packet since it last returned none (a due
    /// held ACK rides along with such a burst).
    pub(crate) tx_burst: bool,
}

impl Dev {
    /// Queue a completion; on overflow the CQ enters error (IBA §11.4.2.1)
    /// and its QPs are moved to ERR by [`Hca::settle`](crate::Hca::settle).
    pub fn complete(&mut self, cq: CqHandle, wc: WorkCompletion) {
        self.complete_se(cq, wc, false);
    }

    /// [`Dev::complete`] for a receive whose last packet had the Solicited
    /// Event bit `se`: a CQ armed solicited-only notifies only on such
    /// completions and on errors (IBA §11.4.2.2).
    pub fn complete_se(&mut self, cq: CqHandle, wc: WorkCompletion, se: bool) {
        let Some(c) = self.cqs.get_mut(&cq) else { return };
        let was = c.errored;
        let notify = match c.armed {
            Some(false) => true,
            Some(true) => wc.status != WcStatus::Success || se,
            None => false,
        };
        let pushed = c.push(wc);
        if pushed && notify {
            c.armed = None;
            self.comp_events.push_back(cq);
        }
        if !pushed && !was {
            tracing::warn!(cq = cq.0, "CQ overflow");
            self.counters.cq_overflow += 1;
            self.events.push_back(AsyncEvent::CqErr(cq));
            self.errored_cqs.push(cq);
        }
    }

    /// A BTH for a packet of this QP (pad computed from the payload length).
    pub fn repr(qp: &Qp, opcode: Opcode, psn: Psn, ack_req: bool, payload_len: usize) -> RoceRepr {
        RoceRepr {
            bth: BthRepr {
                opcode,
                pad_count: roce_packet::pad_for(payload_len),
                pkey: PKey::DEFAULT,
                dest_qp: qp.p.dest_qpn,
                ack_req,
                psn,
                ..BthRepr::default()
            },
            payload_len,
            ..RoceRepr::default()
        }
    }

    /// Build the datagram for a packet of `qp` (ICRC filled).
    pub fn datagram(&self, qp: &Qp, repr: &RoceRepr, payload: &[u8]) -> Option<Datagram> {
        self.datagram_to(qp, qp.p.ah?.dgid, repr, payload)
    }

    /// Build a datagram of `qp` to the GID `dgid` (ICRC filled).
    pub fn datagram_to(
        &self,
        qp: &Qp,
        dgid: IpAddr,
        repr: &RoceRepr,
        payload: &[u8],
    ) -> Option<Datagram> {
        self.finish_to(qp, dgid, repr.to_vec(payload).ok()?)
    }

    /// Complete a packet of `qp` to `dgid` built in place (headers and
    /// payload from [`RoceRepr::start_vec`] / [`RoceRepr::finish_vec`]):
    /// fill the ICRC and wrap it as a datagram.
    pub fn finish_to(&self, qp: &Qp, dgid: IpAddr, mut buf: Vec<u8>) -> Option<Datagram> {
        let dst = match dgid {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        };
        let src_port = self.tx_src_port.unwrap_or(qp.src_port);
        let endpoints = UdpEndpoints { src: self.addr, dst, src_port, dst_port: ROCE_V2_PORT };
        let meta = IpMeta::default();
        IpUdpHeader::build(&endpoints, &meta, buf.len()).ok()?.fill_icrc(&mut buf);
        Some(Datagram { endpoints, meta, payload: Bytes::from(buf) })
    }

    /// A fresh object handle number.
    pub(crate) fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    /// A fresh handle number and a fresh rkey for a memory window.
    pub(crate) fn next_mw_ids(&mut self) -> (u32, u32) {
        let k: u8 = self.rng.gen();
        self.next_key += 1;
        ((self.id()), (self.next_key << 8) | u32::from(k))
    }
}
