//! The device context: everything of an [`crate::Hca`] but its QP table
//! (so a QP and the rest borrow disjointly), in named parts, and the
//! narrow views the roles borrow from it ([`Dev::req`], [`Dev::comp`],
//! [`Dev::resp`]): each role gets only the parts it uses.

use crate::counters::Counters;
use crate::mem::MemTable;
use crate::objects::{DeviceAttr, Pd, PdHandle, PortAttr};
use crate::queues::{CqSink, SrqTable};
use crate::tx::Tx;
use rand::rngs::SmallRng;
use rand::Rng;
use roce_packet::Qpn;
use rustc_hash::FxHashMap as HashMap;

/// Everything but the QP table (so a QP and the rest borrow disjointly).
pub(crate) struct Dev {
    pub name: String,
    pub attr: DeviceAttr,
    pub port: PortAttr,
    pub rng: SmallRng,
    pub pds: HashMap<PdHandle, Pd>,
    /// Regions and windows: key lookups and checked copies.
    pub mem: MemTable,
    pub srqs: SrqTable,
    /// CQs, completion events and async events.
    pub sink: CqSink,
    pub counters: Counters,
    /// Address, source port, ACK settings; the datagram builder.
    pub tx: Tx,
    /// Congestion management ([`crate::congestion`]).
    pub cc: crate::CongestionConfig,
    /// CNPs the notification point owes: they leave before anything else.
    pub cnps: std::collections::VecDeque<crate::io::Datagram>,
    /// QPs moved RTS→SQD with `en_sqd_async_notify`, not yet drained.
    pub sqd_draining: std::collections::BTreeSet<Qpn>,
    /// Rung by the programs' send queues ([`crate::SqRing`]).
    pub bell: std::sync::Arc<crate::sq_ring::Doorbell>,
    /// The doorbell's list while the device answers it (kept: no
    /// allocation per round).
    pub rung: Vec<Qpn>,
    pub(crate) next_id: u32,
    pub(crate) next_key: u32,
    pub(crate) next_iova: u64,
}

/// What the requester borrows: memory (local key checks, gather, the
/// LOCAL_INV / BIND_MW it executes), the sink it completes into, the
/// counters, and the datagram builder.
pub(crate) struct ReqCtx<'a> {
    pub mem: &'a mut MemTable,
    pub sink: &'a mut CqSink,
    pub ctrs: &'a mut Counters,
    pub tx: &'a Tx,
    /// The reaction point's parameters (the pacer).
    pub cc: &'a crate::CongestionConfig,
}

/// What the completer borrows: memory (READ responses and atomic results
/// are scattered into it), the sink and the counters. It sends nothing.
pub(crate) struct CompCtx<'a> {
    pub mem: &'a mut MemTable,
    pub sink: &'a mut CqSink,
    pub ctrs: &'a mut Counters,
}

/// What the responder borrows: memory (R_Key checks, placement, READ
/// sources, IETH invalidation), the SRQs it takes receive WQEs from, the
/// sink, the counters, the datagram builder and ACK settings, and the
/// device's message size limit.
pub(crate) struct RespCtx<'a> {
    pub mem: &'a mut MemTable,
    pub srqs: &'a mut SrqTable,
    pub sink: &'a mut CqSink,
    pub ctrs: &'a mut Counters,
    pub tx: &'a Tx,
    pub max_msg_sz: u32,
    /// The reaction point's parameters (READ responses are paced).
    pub cc: &'a crate::CongestionConfig,
}

impl Dev {
    /// The requester's view.
    pub fn req(&mut self) -> ReqCtx<'_> {
        ReqCtx {
            mem: &mut self.mem,
            sink: &mut self.sink,
            ctrs: &mut self.counters,
            tx: &self.tx,
            cc: &self.cc,
        }
    }

    /// The completer's view.
    pub fn comp(&mut self) -> CompCtx<'_> {
        CompCtx { mem: &mut self.mem, sink: &mut self.sink, ctrs: &mut self.counters }
    }

    /// The responder's view.
    pub fn resp(&mut self) -> RespCtx<'_> {
        RespCtx {
            mem: &mut self.mem,
            srqs: &mut self.srqs,
            sink: &mut self.sink,
            ctrs: &mut self.counters,
            tx: &self.tx,
            max_msg_sz: self.attr.max_msg_sz,
            cc: &self.cc,
        }
    }

    /// The counters, with the sink's CQ overflows.
    pub fn counters(&self) -> Counters {
        Counters { cq_overflow: self.sink.overflows, ..self.counters }
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
