//! Requester (IBA §9.5 transaction ordering, §9.7.1 PSNs, §9.7.6.1.3
//! retries; rxe's `rxe_req.c`): turns send WQEs into packets.
//!
//! - Segmentation by path MTU into FIRST/MIDDLE/LAST/ONLY (C9-22: every
//!   packet but the last of a message carries exactly PMTU bytes), gather
//!   from several SGEs or from inline data.
//! - One PSN per packet; an RDMA READ request consumes as many PSNs as the
//!   responder will send response packets (§9.7.1.1, C9-54); atomics one.
//! - AckReq on the last packet of each message, on READ/atomic requests,
//!   and at least every [`MAX_PKTS_PER_ACK`] packets (rxe's policy).
//! - At most [`MAX_UNACKED_PSNS`] PSNs outstanding (rxe's window); at most
//!   `max_rd_atomic` READ/atomic requests outstanding (initiator depth,
//!   §9.5 / C9-72); a FENCEd WR waits for every earlier READ/atomic (§10.8.3.3).
//! - Go-back-N: `Qp::rewind_to` is called by the completer with the PSN to
//!   resend from; packets are regenerated from the WQEs (READs are re-issued
//!   for the remaining part with an adjusted RETH, §9.7.5.1.5 / C9-106).
//! - Packets are built lazily in `poll_transmit`, so window, fence and RNR
//!   waits are simply "no packet yet".
//! - UC (§9.7.7): same segmentation with UC opcodes, no AckReq, no
//!   window, no timer; a WQE completes when its last packet is sent.
//! - UD (§9.8): one SEND_ONLY packet per WR with a DETH (Q_Key, source
//!   QPN) to the WR's own address handle and QPN.

use crate::dev::ReqCtx;
use crate::io::Datagram;
use crate::mutant::{self, Mutant};
use crate::mw::BindOn;
use crate::qp::{packets_for, Qp, WqeState};
use crate::qp_attr::QpState;
use crate::time::Instant;
use crate::tx::BODY_MIN;
use crate::wr::{SendFlags, WcStatus, WrOpcode};
use roce_packet::{AtomicEthRepr, DethRepr, Opcode, Position, Psn, QKey, Qpn, RethRepr, RoceRepr};

/// Most PSNs a requester keeps unacknowledged (rxe's RXE_MAX_UNACKED_PSNS).
pub const MAX_UNACKED_PSNS: i32 = 128;
/// A packet without AckReq is followed by one with it within this many.
pub const MAX_PKTS_PER_ACK: u32 = 64;

impl Qp {
    /// Resend from `psn` (go-back-N): the WQE holding `psn` restarts at the
    /// matching offset, every later WQE from its beginning.
    pub fn rewind_to(&mut self, psn: Psn) {
        let Some(i) = self.sq.iter().position(|w| w.contains(psn)) else {
            return;
        };
        let mtu = self.mtu();
        for w in self.sq.iter_mut().skip(i + 1) {
            w.state = WqeState::Posted;
            w.sent_bytes = 0;
        }
        let w = &mut self.sq[i];
        let k = u64::from(psn.value().wrapping_sub(w.first_psn.value()) & 0xFF_FFFF);
        w.state = WqeState::Sending;
        w.sent_bytes = if w.wr.opcode.is_atomic()
            || (w.wr.opcode == WrOpcode::RdmaRead
                && mutant::is(self.mutant, Mutant::ReissueWholeRead))
        {
            0
        } else {
            (k * mtu).min(w.length)
        };
        tracing::debug!(qpn = %self.qpn, %psn, wqe = i, "requester rewind (go-back-N)");
        self.req.idx = i;
        self.req.psn = psn;
        self.req.noack_pkts = 0;
    }

    /// The next request packet, if the QP may send one now and its pacer
    /// lets it ([`crate::congestion`]: a QP whose rate a CNP cut).
    pub(crate) fn next_request(&mut self, cx: &mut ReqCtx<'_>, now: Instant) -> Option<Datagram> {
        if !self.cc.may_send(now) {
            return None;
        }
        let d = self.next_packet(cx, now)?;
        if self.cc.rp.limited {
            self.cc.on_sent(cx.cc, now, d.frame_len());
        }
        Some(d)
    }

    /// The next request packet, if the QP may send one now.
    pub(crate) fn next_packet(&mut self, cx: &mut ReqCtx<'_>, now: Instant) -> Option<Datagram> {
        let sqd = self.state == QpState::Sqd && !mutant::is(self.mutant, Mutant::SqdStartsNew);
        if !self.state.allows().send_queue || self.comp.rnr_deadline.is_some() {
            return None;
        }
        // LOCAL_INV / BIND_MW run once every earlier WQE completed (crate::mw)
        while self.sq.get(self.req.idx).is_some_and(|w| w.wr.opcode.is_local()) {
            if self.req.idx != 0 {
                return None;
            }
            self.local_op(cx);
        }
        let idx = self.req.idx;
        let w = self.sq.get(idx)?;
        // SQD finishes (and retransmits) WQEs already started, starts none
        if sqd && w.state == WqeState::Posted && w.npkts == 0 {
            return None;
        }
        if !self.unacked() && self.req.psn.distance(self.comp.psn) >= MAX_UNACKED_PSNS {
            return None;
        }
        if w.state == WqeState::Posted {
            // (counted only when it matters: a scan of the whole send queue
            // per message was visible in small-message profiles)
            let fenced = w.wr.flags.contains(SendFlags::FENCE)
                || mutant::is(self.mutant, Mutant::FenceAlways);
            let n_rd = if fenced || w.wr.opcode.is_read_or_atomic() {
                self.sq.iter().take(idx).filter(|x| x.wr.opcode.is_read_or_atomic()).count()
            } else {
                0
            };
            if fenced && n_rd > 0 && !mutant::is(self.mutant, Mutant::IgnoreFence) {
                return None;
            }
            if w.wr.opcode.is_read_or_atomic()
                && n_rd >= usize::from(self.p.max_rd_atomic.max(1))
                && !mutant::is(self.mutant, Mutant::IgnoreMaxRdAtomic)
            {
                return None;
            }
            // local keys are checked when the WQE starts (C10-... LOC_PROT)
            let write = w.wr.opcode.lands_locally();
            let inline = w.wr.flags.contains(SendFlags::INLINE);
            if !inline {
                if let Err(e) = cx.mem.check_sges(self.init.pd, &w.wr.sg_list, write) {
                    if idx != 0 {
                        return None; // fail in order, once earlier WQEs complete
                    }
                    tracing::debug!(qpn = %self.qpn, ?e, "local SGE check failed");
                    self.fail_front(cx.sink, WcStatus::LocProtErr);
                    return None;
                }
            }
            let mtu = self.mtu();
            let psn = self.req.psn;
            let w = &mut self.sq[idx];
            w.first_psn = psn;
            w.npkts = if w.wr.opcode.is_atomic() { 1 } else { packets_for(w.length, mtu) };
            w.sent_bytes = 0;
            w.state = WqeState::Sending;
            if w.length == 0
                && idx == 0
                && !w.wr.opcode.is_atomic()
                && mutant::is(self.mutant, Mutant::ZeroLengthCompletesLocally)
            {
                self.complete_front(cx.sink, cx.ctrs);
                return None;
            }
        }
        self.build_packet(cx, now, idx)
    }

    /// Execute the LOCAL_INV / BIND_MW at the front of the send queue and
    /// complete it (crate::mw).
    fn local_op(&mut self, cx: &mut ReqCtx<'_>) {
        let Some(w) = self.sq.front() else { return };
        let pd = self.init.pd;
        let r = match w.wr.opcode {
            WrOpcode::LocalInv { rkey } => {
                let r = cx.mem.invalidate(pd, rkey);
                cx.ctrs.count_invalidate(r.is_ok());
                r.map_err(|e| (e, WcStatus::LocQpOpErr))
            }
            WrOpcode::BindMw { mw, rkey, bind } => {
                let on = BindOn { qpn: self.qpn, pd, wr_id: w.wr.wr_id };
                let r = match mutant::is(self.mutant, Mutant::BindNoOp) {
                    true => Ok(rkey),
                    false => cx.mem.bind_wr(on, mw, rkey, bind),
                };
                cx.ctrs.count_bind(r.is_ok());
                r.map(|_| ()).map_err(|e| (e, WcStatus::MwBindErr))
            }
            _ => return,
        };
        match r {
            Ok(()) => {
                tracing::debug!(qpn = %self.qpn, op = ?w.wr.opcode, "local operation done");
                self.complete_front(cx.sink, cx.ctrs);
            }
            Err((e, st)) => {
                tracing::debug!(qpn = %self.qpn, %e, ?st, "local operation failed");
                self.fail_front(cx.sink, st);
            }
        }
    }

    /// The next packet of the WQE at `idx`: build it (headers and payload),
    /// hand it to the transmit path, then move the PSN, the WQE's progress
    /// and the timers on.
    fn build_packet(&mut self, cx: &mut ReqCtx<'_>, now: Instant, idx: usize) -> Option<Datagram> {
        let psn = self.req.psn;
        let w = &self.sq[idx];
        let op = w.wr.opcode;
        let (repr, payload, consumed, done) = match op {
            WrOpcode::RdmaRead
            | WrOpcode::AtomicCmpAndSwp
            | WrOpcode::AtomicFetchAndAdd
            | WrOpcode::Flush { .. } => self.one_psn_request(idx, psn)?,
            _ => self.payload_request(cx, idx, psn)?,
        };
        let dgram = self.emit_request(cx, idx, &repr, payload);
        self.request_sent(cx, now, idx, &repr, consumed, done);
        dgram
    }

    /// A READ, atomic or FLUSH request: headers only (a READ asks for the
    /// rest of its data and takes one PSN per response packet).
    fn one_psn_request(&self, idx: usize, psn: Psn) -> Option<(RoceRepr, Built, u32, bool)> {
        let w = &self.sq[idx];
        let op = w.wr.opcode;
        let remaining = w.length - w.sent_bytes.min(w.length);
        match op {
            WrOpcode::RdmaRead => {
                let mut r = self.repr(op.packet_opcode(Position::Only)?, psn, true, 0);
                self.stamp_xrc(&mut r, &w.wr);
                r.reth = Some(RethRepr {
                    va: w.wr.remote_addr.wrapping_add(w.sent_bytes),
                    rkey: w.wr.rkey,
                    dma_len: u32::try_from(remaining).unwrap_or(u32::MAX),
                });
                let k = psn.value().wrapping_sub(w.first_psn.value()) & 0xFF_FFFF;
                Some((r, Built::Empty, w.npkts.saturating_sub(k).max(1), true))
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let mut r = self.repr(op.packet_opcode(Position::Only)?, psn, true, 0);
                self.stamp_xrc(&mut r, &w.wr);
                let (swap_add, compare) = if op == WrOpcode::AtomicCmpAndSwp {
                    (w.wr.swap, w.wr.compare_add)
                } else {
                    (w.wr.compare_add, 0)
                };
                r.atomic_eth = Some(AtomicEthRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    swap_add,
                    compare,
                });
                Some((r, Built::Empty, 1, true))
            }
            // IBA 1.5 FLUSH: FETH + RETH, no payload, one PSN (crate::mw)
            WrOpcode::Flush { len, placement, level } => {
                let mut r = self.repr(op.packet_opcode(Position::Only)?, psn, true, 0);
                self.stamp_xrc(&mut r, &w.wr);
                r.feth = Some(u32::from(placement & 0x0F) | (u32::from(level & 0x03) << 4));
                r.reth = Some(RethRepr { va: w.wr.remote_addr, rkey: w.wr.rkey, dma_len: len });
                Some((r, Built::Empty, 1, true))
            }
            _ => None,
        }
    }

    /// The next SEND/WRITE packet of the WQE at `idx`: MTU segmentation,
    /// the opcode for its position and transport, the extension headers,
    /// and the payload (from inline data, gathered from the registered
    /// memory, or sent from the region itself). `None` when the gather
    /// failed (the WQE is then failed) or the packet cannot be built.
    fn payload_request(
        &mut self,
        cx: &mut ReqCtx<'_>,
        idx: usize,
        psn: Psn,
    ) -> Option<(RoceRepr, Built, u32, bool)> {
        let mtu = self.mtu();
        let pd = self.init.pd;
        let w = &self.sq[idx];
        let op = w.wr.opcode;
        let remaining = w.length - w.sent_bytes.min(w.length);
        let first = w.sent_bytes == 0;
        let seg = match mutant::is(self.mutant, Mutant::SegmentShort) {
            true => mtu - 1,
            false => mtu,
        };
        let n = remaining.min(seg);
        let last = w.sent_bytes + n >= w.length;
        let pos = match (first, last) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, false) => Position::Middle,
            (false, true) => Position::Last,
        };
        let ack_req = !self.unacked() && (last || self.req.noack_pkts + 1 >= MAX_PKTS_PER_ACK);
        let mut opcode = op.packet_opcode(pos)?;
        if self.is_uc() {
            // same low five bits, UC transport prefix (IBA Table 38)
            opcode = Opcode(opcode.0 | 0x20);
        } else if self.is_ud() {
            opcode = Opcode(opcode.0 | 0x60);
        }
        let mut r = self.repr(opcode, psn, ack_req, n as usize);
        self.stamp_xrc(&mut r, &w.wr);
        if let (true, Some(ud)) = (self.is_ud(), w.wr.ud) {
            // C10-15: a Q_Key with the high bit set means the QP's own
            let qkey = if ud.remote_qkey & 0x8000_0000 != 0 { self.p.qkey } else { ud.remote_qkey };
            r.deth = Some(DethRepr { qkey: QKey::new(qkey), src_qp: self.qpn, resv8: 0 });
            r.bth.dest_qp = Qpn::new(ud.remote_qpn);
        }
        let info = r.bth.opcode.info()?;
        if info.headers.contains(roce_packet::ExtHeader::Reth) {
            r.reth = Some(RethRepr {
                va: w.wr.remote_addr,
                rkey: w.wr.rkey,
                dma_len: u32::try_from(w.length).unwrap_or(u32::MAX),
            });
        }
        if info.has_imm() {
            r.immdt = match mutant::is(self.mutant, Mutant::RequesterImmediateZero) {
                true => Some(0),
                false => Some(w.wr.imm),
            };
        }
        if let (true, WrOpcode::SendWithInv { invalidate_rkey }) = (info.has_inv(), op) {
            r.ieth = Some(invalidate_rkey); // IETH (crate::mw)
        }
        r.bth.solicited = last && w.wr.flags.contains(SendFlags::SOLICITED);
        // A large payload in one SGE is sent from the region itself
        // when the transport takes that (RegionBody); otherwise the
        // packet is built in place: headers, then the payload
        // straight from the inline data or the registered memory.
        let inline = w.wr.flags.contains(SendFlags::INLINE);
        let direct = cx.tx.region_bodies && !inline && n as usize >= BODY_MIN;
        let span = match direct {
            true => cx.mem.span(pd, &w.wr.sg_list, w.sent_bytes, n as usize),
            false => Ok(None),
        };
        let built = match span {
            Ok(Some((mem, off))) => Ok(Built::Body(mem, off, n)),
            Ok(None) => {
                let Ok(mut buf) = r.start_in(crate::bufpool::take) else { return None };
                if inline {
                    let s = w.sent_bytes as usize;
                    buf.extend_from_slice(w.wr.inline_data.get(s..s + n as usize)?);
                    Ok(Built::Packet(buf, n))
                } else {
                    cx.mem
                        .gather(pd, &w.wr.sg_list, w.sent_bytes, n as usize, &mut buf)
                        .map(|()| Built::Packet(buf, n))
                }
            }
            Err(e) => Err(e),
        };
        match built {
            Ok(Built::Packet(mut buf, n)) => {
                r.finish_vec(&mut buf).ok()?;
                Some((r, Built::Packet(buf, n), 1, last))
            }
            Ok(b) => Some((r, b, 1, last)),
            Err(e) => {
                // the MR was deregistered under us
                tracing::debug!(qpn = %self.qpn, ?e, "gather failed");
                if idx == 0 {
                    self.fail_front(cx.sink, WcStatus::LocProtErr);
                }
                None
            }
        }
    }

    /// Hand a built request to the transmit path (`None`, counted as a
    /// send error, when the destination has no address).
    fn emit_request(
        &mut self,
        cx: &mut ReqCtx<'_>,
        idx: usize,
        repr: &RoceRepr,
        payload: Built,
    ) -> Option<Datagram> {
        let w = &self.sq[idx];
        let psn = repr.bth.psn;
        let av = match (self.is_ud(), w.wr.ud) {
            (true, Some(ud)) => Some(ud.ah),
            _ => self.p.ah,
        };
        let (dgram, sent) = match payload {
            Built::Packet(buf, n) => (av.and_then(|a| cx.tx.finish_to(self, &a, buf)), n),
            Built::Body(mem, off, n) => {
                (av.and_then(|a| cx.tx.finish_body(self, &a, repr, mem, off)), n)
            }
            Built::Empty => (av.and_then(|a| cx.tx.datagram_to(self, &a, repr, &[])), 0),
        };
        if dgram.is_none() {
            cx.ctrs.send_err += 1;
        }
        tracing::trace!(qpn = %self.qpn, opcode = %repr.bth.opcode, %psn, ack_req = repr.bth.ack_req, "request");
        self.sq[idx].sent_bytes += sent;
        dgram
    }

    /// After a request packet left: the ACK-request spacing, the next PSN,
    /// the WQE's state, and completion (UC/UD) or the transport timer (RC).
    fn request_sent(
        &mut self,
        cx: &mut ReqCtx<'_>,
        now: Instant,
        idx: usize,
        repr: &RoceRepr,
        consumed: u32,
        done: bool,
    ) {
        let psn = repr.bth.psn;
        if repr.bth.ack_req {
            self.req.noack_pkts = 0;
        } else {
            self.req.noack_pkts += 1;
        }
        self.req.psn = psn.add(consumed);
        let op = self.sq[idx].wr.opcode;
        let w = &mut self.sq[idx];
        if op == WrOpcode::RdmaRead {
            w.read_start = psn;
        }
        if done {
            w.state = WqeState::Sent;
            self.req.idx += 1;
        }
        if self.unacked() {
            // UC/UD: a WQE is complete once its last packet is handed over
            // (IBA §9.7.7, §9.8, no acknowledgements); earlier WQEs already are.
            if done {
                self.complete_front(cx.sink, cx.ctrs);
            }
            self.comp.psn = self.req.psn;
        } else {
            // The transport timer runs from the last packet sent, as rxe's
            // (re-armed on every request packet): a QP whose packets leave
            // slowly, interleaved with many other QPs' packets, is not
            // timed out while its window is still on its way.
            self.arm_retrans(now);
        }
    }
}

/// A request packet as `next_packet` builds it: no payload (headers only,
/// emitted at the end), built in place with `n` payload bytes, or with `n`
/// payload bytes sent from a region at an offset.
enum Built {
    Empty,
    Packet(Vec<u8>, u64),
    Body(std::sync::Arc<roce_region::RegionMem>, usize, u64),
}
