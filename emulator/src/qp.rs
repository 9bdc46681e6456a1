//! The queue pair context (IBA §10.2.4 QP, §10.3 QP states) shared by the
//! three RC roles: [`crate::requester`], [`crate::responder`],
//! [`crate::completer`]. All of a QP's processing runs on the single-threaded
//! `Hca`, so the roles call each other directly (no shared flags).
//!
//! Error handling follows IBA §10.3.1 / C10-31: when a QP enters ERR every
//! outstanding and later work request on both queues completes with
//! `WR_FLUSH_ERR` (flushed completions are generated even for unsignaled
//! send WRs).

use crate::counters::Counters;
use crate::objects::{AsyncEvent, CqHandle, PdHandle};
use crate::qp_attr::{AccessFlags, AhAttr, PathMtu, QpCap, QpState, QpType};
use crate::queues::{CqSink, SqRelease, SrqTable};
use crate::time::Instant;
use crate::wr::{RecvWr, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use roce_packet::{BthRepr, Msn, Opcode, PKey, Psn, Qpn, RKey, RoceRepr};
use std::collections::VecDeque;

/// `struct ibv_qp_init_attr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInitAttr {
    /// Protection domain of the QP (MRs it touches must share it).
    pub pd: PdHandle,
    /// CQ for send completions.
    pub send_cq: CqHandle,
    /// CQ for receive completions.
    pub recv_cq: CqHandle,
    /// RC, UC or UD (the transports the core implements).
    pub qp_type: QpType,
    /// Queue depths and limits, checked against [`crate::DeviceAttr`].
    pub cap: QpCap,
    /// Generate a completion for every send WR (not only SIGNALED ones).
    pub sq_sig_all: bool,
    /// Take receive WQEs from this shared receive queue instead of the QP's
    /// own receive queue.
    pub srq: Option<crate::objects::SrqHandle>,
}

impl QpInitAttr {
    /// An XRC target's (`QpType::XrcRecv`): no send queue, `pd` and `cq`
    /// (placeholders or, for a request, its XRC SRQ's) and `srq`.
    pub(crate) fn xrc_target(
        pd: PdHandle,
        cq: CqHandle,
        srq: Option<crate::objects::SrqHandle>,
    ) -> QpInitAttr {
        QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type: QpType::XrcRecv,
            cap: QpCap::default(),
            sq_sig_all: false,
            srq,
        }
    }
}

pub(crate) use crate::sq_ring::{SendWqe, WqeState};

/// A READ or atomic the responder executed, kept for duplicates
/// (IBA §9.7.5.1.2 responder resources; C9-128 atomics exactly once).
#[derive(Clone, Copy, Debug)]
pub(crate) enum RdResource {
    Read { first: Psn, npkts: u32 },
    Atomic { psn: Psn, orig: u64 },
}

/// The responder's message in progress.
pub(crate) enum InMsg {
    Send { recv: RecvWr, offset: u64 },
    Write { va: u64, rkey: RKey, remaining: u64, total: u64 },
}

/// READ responses still to be generated (built one packet at a time in
/// `poll_transmit`, so a large READ costs no memory up front).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadJob {
    pub next_psn: Psn,
    pub va: u64,
    pub rkey: RKey,
    pub remaining: u64,
    pub first: bool,
    pub msn: Msn,
}

/// The responder's output queue, in wire order.
pub(crate) enum RespItem {
    Packet(crate::io::Datagram),
    Read(ReadJob),
    /// An ACK or NAK, built when it leaves (so that one superseded by a
    /// newer ACK under [`LinkProfile::ack_coalescing`](crate::LinkProfile::ack_coalescing)
    /// is never built at all).
    Aeth {
        psn: roce_packet::Psn,
        syndrome: roce_packet::Syndrome,
        msn: roce_packet::Msn,
    },
}

/// Connection attributes set by `modify_qp`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpParams {
    pub access: AccessFlags,
    pub pkey_index: u16,
    pub port: u8,
    pub qkey: u32,
    pub ah: Option<AhAttr>,
    pub mtu: PathMtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub rq_psn: Psn,
    pub sq_psn: Psn,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub dest_qpn: Qpn,
    pub en_sqd_async_notify: bool,
}

/// The requester's state (rxe's `qp->req`): where it is in the send queue.
#[derive(Default)]
pub(crate) struct ReqState {
    /// Index in `sq` of the WQE the requester works on next.
    pub idx: usize,
    /// Next PSN to send.
    pub psn: Psn,
    /// Packets sent since the last one with AckReq.
    pub noack_pkts: u32,
}

/// The completer's state (rxe's `qp->comp`): acknowledgements, retries
/// and the two timers.
#[derive(Default)]
pub(crate) struct CompState {
    /// Oldest unacknowledged PSN.
    pub psn: Psn,
    pub retry_left: u8,
    pub rnr_left: u8,
    pub retrans_deadline: Option<Instant>,
    /// An RNR NAK's wait: the requester sends nothing until it fires.
    pub rnr_deadline: Option<Instant>,
    /// PSN the completer started its go-back-N from (rxe's `started_retry`);
    /// until progress, responses start no other retry (see completer.rs).
    pub gap_retry: Option<Psn>,
}

/// The responder's state (rxe's `qp->resp`).
#[derive(Default)]
pub(crate) struct RespState {
    /// Expected PSN.
    pub epsn: Psn,
    /// Messages completed (the AETH's MSN).
    pub msn: Msn,
    /// A PSN SEQUENCE ERROR NAK was sent; later out-of-sequence packets are
    /// dropped until the expected PSN arrives (C9-113).
    pub nak_sent: bool,
    pub in_msg: Option<InMsg>,
    /// UC: discarding the rest of a dropped message (see responder.rs).
    pub uc_discard: bool,
    /// READs and atomics executed, kept for duplicates.
    pub resources: VecDeque<RdResource>,
    /// ACKs, NAKs and READ responses waiting for `poll_transmit`.
    pub queue: VecDeque<RespItem>,
    /// With an ACK delay ([`LinkProfile::ack_delay`](crate::LinkProfile::ack_delay)):
    /// since when the positive ACK alone at the front of `queue` is held.
    pub ack_held_since: Option<Instant>,
    /// PSN of the last positive ACK this responder sent.
    pub last_ack_psn: Option<Psn>,
}

pub(crate) struct Qp {
    pub qpn: Qpn,
    pub init: QpInitAttr,
    pub state: QpState,
    pub p: QpParams,
    pub src_port: u16,
    pub sq: VecDeque<SendWqe>,
    /// Send-queue accounting (as mlx5 frees send-queue slots): a WQE's
    /// slot stays held after it leaves `sq` (completed, successfully or
    /// not) until the application polls the completion that frees it
    /// ([`SqRelease`]): its own CQE, or for an unsignaled WQE the next CQE
    /// of this QP's send queue. The program's queue ([`crate::SqRing`])
    /// counts the WQEs posted; this counter the slots freed by polls so
    /// far, added to by whoever polls (no device lock, see
    /// [`crate::queues::CqRing`]); a new counter for each incarnation, so
    /// the CQEs of an earlier one free nothing here.
    pub sq_freed: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// What the program posted without the device lock, moved to `sq`
    /// when the device answers its doorbell or changes the QP's state
    /// ([`crate::SqRing`]); kept over a reset (the program's handle holds
    /// it).
    pub sq_ring: std::sync::Arc<crate::sq_ring::SqRing>,
    /// Of the WQEs moved from `sq_ring`, those to multicast groups not
    /// counted yet (`mcast_sent`: the device adds them).
    pub posted_groups: u32,
    /// The device's `max_msg_sz` (what posts are checked against).
    pub max_msg: u32,
    /// The unsignaled WQEs completed since this QP's last
    /// send CQE: that CQE's successor frees them with its own slot.
    pub sq_unsignaled: u32,
    pub rq: VecDeque<RecvWr>,
    /// What the program posted without the device lock, moved to `rq` when
    /// the device needs it ([`crate::queues::RqRing`]); kept over a reset
    /// (the program's handle holds it).
    pub rq_ring: std::sync::Arc<crate::queues::RqRing>,
    pub req: ReqState,
    pub comp: CompState,
    pub resp: RespState,
    /// The device's mutation switch ([`crate::mutant`]; `None` normally,
    /// always without the `mutants` feature).
    pub mutant: Option<crate::Mutant>,
    /// An XRC target's domain: the XRC SRQs its requests may name.
    pub xrcd: Option<crate::objects::XrcdHandle>,
    /// An XRC target's own (placeholder) PD and CQs, which `init` takes
    /// back from the XRC SRQ of each request ([`crate::xrc`]): what its
    /// creation counted as used, to release at destruction.
    pub xrc_home: Option<QpInitAttr>,
    /// An XRC target whose requests name SRQs of other members of a shared
    /// device ([`crate::xrc_relay`]): the request awaited and those held.
    pub relay: Option<Box<crate::xrc_relay::RelayQp>>,
    /// Congestion management: the notification point's last CNP, the
    /// reaction point (DCQCN) and its pacer ([`crate::congestion`]).
    pub cc: crate::congestion::QpCongestion,
}

/// Packets a message of `len` bytes takes at `mtu` (at least one): the
/// requester's segmentation and the PSNs a READ consumes at the responder.
pub(crate) fn packets_for(len: u64, mtu: u64) -> u32 {
    u32::try_from(len.div_ceil(mtu).max(1)).unwrap_or(u32::MAX)
}

/// UDP source port for a QP: 0xC000 plus a 14-bit hash of the QPN (as rxe).
pub(crate) fn src_port_for(qpn: Qpn) -> u16 {
    let mut h = qpn.value().wrapping_mul(0x9E37_79B1);
    h ^= h >> 15;
    0xC000 | (h & 0x3FFF) as u16
}

impl Qp {
    pub fn new(qpn: Qpn, init: QpInitAttr, mtu: PathMtu) -> Qp {
        let freed = std::sync::Arc::<std::sync::atomic::AtomicU32>::default();
        Qp {
            qpn,
            init,
            state: QpState::Reset,
            p: QpParams {
                access: AccessFlags::EMPTY,
                pkey_index: 0,
                port: 1,
                qkey: 0,
                ah: None,
                mtu,
                timeout: 0,
                retry_cnt: 0,
                rnr_retry: 0,
                rq_psn: Psn::new(0),
                sq_psn: Psn::new(0),
                max_rd_atomic: 0,
                max_dest_rd_atomic: 0,
                min_rnr_timer: 0,
                dest_qpn: Qpn::new(0),
                en_sqd_async_notify: false,
            },
            src_port: src_port_for(qpn),
            sq: VecDeque::new(),
            sq_freed: freed.clone(),
            sq_ring: std::sync::Arc::new(crate::sq_ring::SqRing::new(qpn, None, freed)),
            posted_groups: 0,
            max_msg: u32::MAX,
            sq_unsignaled: 0,
            rq: VecDeque::new(),
            rq_ring: Default::default(),
            req: ReqState::default(),
            comp: CompState::default(),
            resp: RespState::default(),
            mutant: None,
            xrcd: None,
            xrc_home: None,
            relay: None,
            cc: crate::congestion::QpCongestion::new(
                &crate::congestion::CongestionConfig::default(),
            ),
        }
    }

    /// Unreliable Connected: no ACKs, no retries, no READ/atomics.
    pub fn is_uc(&self) -> bool {
        self.init.qp_type == QpType::Uc
    }

    /// Unreliable Datagram: single-packet SENDs with a DETH.
    pub fn is_ud(&self) -> bool {
        self.init.qp_type == QpType::Ud
    }

    /// Unacknowledged transports (UC, UD): WQEs complete when sent.
    pub fn unacked(&self) -> bool {
        matches!(self.init.qp_type, QpType::Uc | QpType::Ud)
    }

    /// An XRC initiator's request carries the XRCETH naming the XRC SRQ
    /// its work request targets (IBA Annex A14).
    pub(crate) fn stamp_xrc(&self, r: &mut RoceRepr, wr: &crate::wr::SendWr) {
        if self.init.qp_type == QpType::XrcSend {
            r.xrceth = Some(wr.xrc_remote_srqn & 0x00FF_FFFF);
        }
    }

    pub fn mtu(&self) -> u64 {
        self.p.mtu.bytes() as u64
    }

    /// Back to the RESET state: queues emptied without completions, every
    /// send-queue slot free; a new incarnation (the CQEs still in the CQs
    /// free nothing when polled: their counter is the old one's).
    pub fn reset(&mut self) {
        let (qpn, init, mtu, mutant) = (self.qpn, self.init, self.p.mtu, self.mutant);
        let (xrcd, home) = (self.xrcd, self.xrc_home);
        // (the posted receives go without completions)
        self.rq_ring.set_state(QpState::Reset);
        self.sync_rq();
        self.rq_ring.took(self.rq.len() as u32);
        let ring = self.rq_ring.clone();
        let (sq_ring, max_msg) = (self.sq_ring.clone(), self.max_msg);
        let mut cc = self.cc;
        cc.reset();
        *self = Qp::new(qpn, init, mtu);
        self.cc = cc;
        self.mutant = mutant;
        self.xrcd = xrcd;
        self.xrc_home = home;
        self.rq_ring = ring;
        self.max_msg = max_msg;
        // (the posted sends go without completions; a new incarnation)
        sq_ring.reset(self.sq_shape(), self.sq_freed.clone());
        self.sq_ring = sq_ring;
    }

    /// What the program's posts are checked against now.
    pub(crate) fn sq_shape(&self) -> crate::sq_ring::SqShape {
        crate::sq_ring::SqShape {
            state: self.state,
            cap: self.init.cap,
            qp_type: self.init.qp_type,
            max_msg: self.max_msg,
            mtu: self.mtu(),
            max_rd_atomic: self.p.max_rd_atomic,
            sig_all: self.init.sq_sig_all,
            rtr_takes: crate::mutant::is(self.mutant, crate::Mutant::RtrAcceptsPosts),
        }
    }

    /// Tell the program's send queue what the QP is now (after its state
    /// or attributes changed), moving what it posted into `sq` first.
    pub(crate) fn publish_sq(&mut self) {
        let shape = self.sq_shape();
        self.posted_groups += self.sq_ring.publish(shape, &mut self.sq);
    }

    /// Move what the program posted without the device lock into `sq`.
    pub(crate) fn sync_sq(&mut self) {
        self.posted_groups += self.sq_ring.drain_into(&mut self.sq);
    }

    /// Move what the program posted without the device lock into `rq`.
    pub(crate) fn sync_rq(&mut self) {
        self.rq_ring.drain_into(&mut self.rq);
    }

    /// Set the state, and tell the program's receive queue.
    pub(crate) fn set_state(&mut self, s: QpState) {
        self.state = s;
        self.rq_ring.set_state(s);
        self.publish_sq();
    }

    /// Send-queue slots held: WQEs not completed, and completed ones whose
    /// freeing CQE has not been polled.
    pub fn sq_held(&self) -> usize {
        self.sq_ring.held() as usize
    }

    /// A send WQE left `sq` (or never entered it: posted in ERR): its slot
    /// stays held until a CQE that frees it is polled. With `wc` that CQE
    /// is queued now and frees this slot and those of the unsignaled WQEs
    /// before it; without, the WQE waits for the next CQE.
    pub fn retire_send(&mut self, sink: &mut CqSink, wc: Option<WorkCompletion>) {
        match wc {
            None => self.sq_unsignaled = self.sq_unsignaled.saturating_add(1),
            Some(wc) => {
                let slots = self.sq_unsignaled.saturating_add(1);
                self.sq_unsignaled = 0;
                let rel = SqRelease { freed: Some(self.sq_freed.clone()), slots };
                sink.complete_send(self.init.send_cq, wc, rel);
            }
        }
    }

    /// A BTH for a packet of this QP (pad computed from the payload length).
    pub fn repr(&self, opcode: Opcode, psn: Psn, ack_req: bool, payload_len: usize) -> RoceRepr {
        // XRC QPs send RC's operations in the XRC opcode space (0xA0 up)
        let opcode = match self.init.qp_type.is_xrc() && opcode.0 < 0x20 {
            true => Opcode(opcode.0 | 0xA0),
            false => opcode,
        };
        RoceRepr {
            bth: BthRepr {
                opcode,
                pad_count: roce_packet::pad_for(payload_len),
                pkey: PKey::DEFAULT,
                dest_qp: self.p.dest_qpn,
                ack_req,
                psn,
                ..BthRepr::default()
            },
            payload_len,
            ..RoceRepr::default()
        }
    }

    /// The retransmit timeout: 4.096 µs × 2^timeout (IBA §9.7.6.1.3); None for 0.
    pub fn retrans_period(&self) -> Option<core::time::Duration> {
        if self.p.timeout == 0 {
            return None;
        }
        let ns = 4096u64.checked_shl(u32::from(self.p.timeout.min(31)))?;
        if crate::mutant::is(self.mutant, crate::Mutant::EarlyRetransmit) {
            return Some(core::time::Duration::from_nanos(ns / 4));
        }
        Some(core::time::Duration::from_nanos(ns))
    }

    pub fn arm_retrans(&mut self, now: Instant) {
        self.comp.retrans_deadline = self.retrans_period().map(|d| now + d);
        if let Some(d) = self.retrans_period() {
            tracing::trace!(qpn = %self.qpn, kind = "retransmit", after_us = d.as_micros() as u64,
                "timer set");
        }
    }

    /// Whether `next_response` or `next_packet` may produce a packet now.
    /// When false, both return nothing at once and change nothing (an empty
    /// response queue; a send queue that is not running or has no WQE at
    /// or after `req.idx`), so `poll_transmit` may skip the QP
    /// ([`crate::qp_table`]).
    pub fn may_transmit(&self) -> bool {
        // (a READ response waits for the pacer's gate, an ACK never)
        let resp = match self.resp.queue.front() {
            None => false,
            Some(RespItem::Read(_)) => self.cc.gate.is_none(),
            Some(_) => true,
        };
        resp || (self.state.allows().send_queue
            && self.comp.rnr_deadline.is_none()
            && self.cc.gate.is_none()
            && self.req.idx < self.sq.len())
    }

    /// The earliest of this QP's deadlines: the retransmit and RNR timers,
    /// and a held ACK's (it leaves alone at twice the ACK delay).
    pub fn next_deadline(&self, ack_delay: Option<core::time::Duration>) -> Option<Instant> {
        // Plain comparisons rather than flatten/min over [Option<Instant>; 3]:
        // the optimised iterator reads an uninitialised niche that valgrind
        // reports (harmlessly) in every drop-in run.
        let held = ack_delay.and_then(|d| self.resp.ack_held_since.map(|t| t + 2 * d));
        let earlier = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, None) => x,
            (None, y) => y,
        };
        let timers = earlier(self.comp.retrans_deadline, self.comp.rnr_deadline);
        earlier(earlier(timers, held), self.cc.gate)
    }

    /// A receive WQE is available (own queue or SRQ).
    pub fn recv_available(&self, srqs: &SrqTable) -> bool {
        match self.init.srq.filter(|_| !crate::mutant::is(self.mutant, crate::Mutant::SrqIgnored)) {
            Some(h) => srqs.get(&h).is_some_and(|s| !s.wrs.is_empty()),
            None => !self.rq.is_empty() || !self.rq_ring.is_empty(),
        }
    }

    /// Take the next receive WQE (own queue or SRQ; an armed SRQ limit
    /// fires when the SRQ drops below it, IBA §10.2.9.3).
    pub fn take_recv(&mut self, srqs: &mut SrqTable, sink: &mut CqSink) -> Option<RecvWr> {
        let srq =
            self.init.srq.filter(|_| !crate::mutant::is(self.mutant, crate::Mutant::SrqIgnored));
        let Some(h) = srq else {
            if self.rq.is_empty() {
                self.sync_rq();
            }
            let r = self.rq.pop_front();
            if r.is_some() {
                self.rq_ring.took(1);
            }
            return r;
        };
        let s = srqs.get_mut(&h)?;
        let r = s.wrs.pop_front()?;
        if s.attr.srq_limit != 0 && (s.wrs.len() as u32) < s.attr.srq_limit {
            s.attr.srq_limit = 0;
            sink.events.push_back(AsyncEvent::SrqLimitReached(h));
        }
        Some(r)
    }

    /// Put back a receive WQE that was taken but not used (UC drops).
    pub fn return_recv(&mut self, srqs: &mut SrqTable, r: RecvWr) {
        match self.init.srq.and_then(|h| srqs.get_mut(&h)) {
            Some(s) => s.wrs.push_front(r),
            None => {
                self.rq.push_front(r);
                self.rq_ring.returned();
            }
        }
    }

    /// Completion for a send WQE.
    pub fn send_wc(&self, w: &SendWqe, status: WcStatus) -> WorkCompletion {
        WorkCompletion {
            wr_id: w.wr.wr_id,
            status,
            opcode: w.wr.opcode.wc_opcode(),
            byte_len: if status == WcStatus::Success {
                u32::try_from(w.length).unwrap_or(u32::MAX)
            } else {
                0
            },
            imm: None,
            qp_num: self.qpn.value(),
            src_qp: 0,
            wc_flags: WcFlags::EMPTY,
        }
    }

    /// Completion for a receive WQE.
    pub fn recv_wc(
        &self,
        r: &RecvWr,
        status: WcStatus,
        byte_len: u64,
        imm: Option<u32>,
        write_imm: bool,
    ) -> WorkCompletion {
        let imm = imm.filter(|_| !crate::mutant::is(self.mutant, crate::Mutant::ImmediateLost));
        WorkCompletion {
            wr_id: r.wr_id,
            status,
            opcode: if write_imm { WcOpcode::RecvRdmaWithImm } else { WcOpcode::Recv },
            byte_len: u32::try_from(byte_len).unwrap_or(u32::MAX),
            imm,
            qp_num: self.qpn.value(),
            src_qp: self.p.dest_qpn.value(),
            wc_flags: if imm.is_some() { WcFlags::WITH_IMM } else { WcFlags::EMPTY },
        }
    }

    /// Complete the oldest send WQE successfully (CQE only if signaled).
    pub fn complete_front(&mut self, sink: &mut CqSink, ctrs: &mut Counters) {
        if let Some(w) = self.sq.pop_front() {
            self.req.idx = self.req.idx.saturating_sub(1);
            if matches!(w.wr.opcode, crate::wr::WrOpcode::Send | crate::wr::WrOpcode::SendWithImm) {
                ctrs.rdma_sends += 1;
            }
            let wc = w.signaled.then(|| self.send_wc(&w, WcStatus::Success));
            self.retire_send(sink, wc);
        }
    }

    /// Fail the oldest send WQE with `status` and move the QP to ERR.
    pub fn fail_front(&mut self, sink: &mut CqSink, status: WcStatus) {
        tracing::debug!(qpn = %self.qpn, ?status, "send WQE failed");
        if let Some(w) = self.sq.pop_front() {
            self.req.idx = self.req.idx.saturating_sub(1);
            let wc = self.send_wc(&w, status);
            self.retire_send(sink, Some(wc));
        }
        self.enter_error(sink);
    }

    /// Enter ERR and flush both queues (IBA §10.3.1, C10-31).
    pub fn enter_error(&mut self, sink: &mut CqSink) {
        let entering = self.state != QpState::Err;
        if entering {
            tracing::info!(qpn = %self.qpn, from = %self.state, to = %QpState::Err, "QP state change");
            self.set_state(QpState::Err);
            sink.events.push_back(AsyncEvent::QpFatal(self.qpn));
        }
        self.comp.retrans_deadline = None;
        self.comp.rnr_deadline = None;
        self.flush(sink);
        // a QP on an SRQ takes no more SRQ WQEs (IBA §10.2.9.5, o10-2.2.2)
        if entering && self.init.srq.is_some() {
            sink.events.push_back(AsyncEvent::QpLastWqeReached(self.qpn));
        }
    }

    /// Complete every queued WQE with WR_FLUSH_ERR.
    pub fn flush(&mut self, sink: &mut CqSink) {
        while let Some(w) = self.sq.pop_front() {
            let wc = self.send_wc(&w, WcStatus::WrFlushErr);
            self.retire_send(sink, Some(wc));
        }
        self.req.idx = 0;
        if let Some(InMsg::Send { recv, .. }) = self.resp.in_msg.take() {
            let wc = self.recv_wc(&recv, WcStatus::WrFlushErr, 0, None, false);
            sink.complete(self.init.recv_cq, wc);
        }
        self.flush_rq(sink);
    }

    /// Complete every queued receive WQE (those posted without the device
    /// lock included) with WR_FLUSH_ERR.
    pub(crate) fn flush_rq(&mut self, sink: &mut CqSink) {
        if crate::mutant::is(self.mutant, crate::Mutant::ErrKeepsReceives) {
            return;
        }
        self.sync_rq();
        self.rq_ring.took(self.rq.len() as u32);
        while let Some(r) = self.rq.pop_front() {
            let wc = self.recv_wc(&r, WcStatus::WrFlushErr, 0, None, false);
            sink.complete(self.init.recv_cq, wc);
        }
    }
}
