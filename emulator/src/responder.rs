//! Responder (IBA §9.7.5.1 responder behaviour, §9.9.3 responder errors;
//! rxe's `rxe_resp.c`). The check chain, in the order IBA prescribes:
//!
//! 1. PSN (§9.7.5.1.1): the expected PSN executes; a duplicate (earlier, in
//!    the window) is re-acknowledged for SEND/WRITE (C9-108), re-executed
//!    for RDMA READ from the saved request with the RETH of the duplicate
//!    (C9-111), and for atomics the saved result is replayed without
//!    touching memory again (C9-128, exactly once); a PSN after the
//!    expected one is NAKed once with PSN SEQUENCE ERROR, and further
//!    out-of-sequence packets are silently dropped until the expected PSN
//!    arrives (C9-113).
//! 2. Opcode sequence (C9-40): MIDDLE/LAST only inside a message of the same
//!    kind, FIRST/ONLY only between messages → NAK INVALID REQUEST.
//! 3. Opcode valid for RC and allowed by the QP's access flags and
//!    responder resources → NAK INVALID REQUEST.
//! 4. Resources: a SEND (or WRITE with immediate) needs a receive WQE, else
//!    RNR NAK with the QP's min_rnr_timer (§9.7.5.1.6) and drop.
//! 5. Length (C9-22 packet length; message longer than the receive WQE →
//!    NAK INVALID REQUEST and LOC_LEN_ERR on the receive, §9.9.3.1.3).
//! 6. R_Key, PD, access rights, bounds (§10.6.6) → NAK REMOTE ACCESS ERROR.
//! 7. Execute: scatter, WRITE, READ responses (one PSN per response packet,
//!    the READ consumes them), 8-byte aligned atomics (misaligned → NAK
//!    INVALID REQUEST) answered with an AtomicAckETH.
//! 8. Acknowledge when AckReq is set; the AETH carries the MSN, the count of
//!    completed messages (§9.7.5.1.3, coalesced ACKs).
//!
//! Class B/C/D errors (invalid request, remote access, remote operational)
//! NAK the offending PSN and move the responder QP to ERR, as rxe does.
//!
//! UC (§9.7.7.2): the same chain without acknowledgements: a PSN gap, a
//! missing receive WQE or a failed check silently drops the message in
//! progress (its receive WQE is reused) and the responder resynchronises on
//! the next FIRST/ONLY packet; the QP never enters ERR because of a packet.

use crate::counters::Counters;
use crate::dev::RespCtx;
use crate::io::Datagram;
use crate::mutant::{self, Mutant};
use crate::objects::{MemError, MrHandle};
use crate::qp::{packets_for, InMsg, Qp, RdResource, ReadJob, RespItem, RespState};
use crate::qp_attr::AccessFlags;
use crate::time::Instant;
use crate::tx::{Tx, BODY_MIN};
use crate::wr::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use roce_packet::{
    AethRepr, AtomicAckEthRepr, DethRepr, NakCode, OpInfo, OpKind, Opcode, Position, Psn, QKey,
    Qpn, RKey, RnrTimer, RoceRepr, Syndrome,
};

/// AETH credit value meaning "no end-to-end credit information" (rxe's
/// AETH_ACK_UNLIMITED).
const CREDIT_UNLIMITED: u8 = 0x1F;

/// With an ACK delay, a held ACK leaves at once when it acknowledges this
/// many more PSNs than the last ACK its QP sent (a streaming requester is
/// never left waiting for the delay; a ping-pong still gets one ACK per
/// several round trips).
pub const ACK_EVERY_PSNS: u32 = 16;

/// What a step of the request chain decided instead of going on: the
/// responder's answer to a packet it does not execute (IBA §9.7.5, §9.9.3).
enum Outcome {
    /// Dropped silently (a UC packet outside its message, one out of
    /// sequence after the NAK, a request without its headers).
    Drop,
    /// An earlier PSN: answered from saved state (C9-108 .. C9-128).
    Duplicate,
    /// A PSN ahead of the expected one: NAK PSN SEQUENCE ERROR, once (C9-113).
    SequenceNak,
    /// No receive WQE on RC: RNR NAK (§9.7.5.1.6).
    RnrNak,
    /// No receive WQE on UC: the message is dropped (§9.7.7.2).
    UcDropMessage(&'static str),
    /// A class B/C/D error: NAK with this code and move to ERR (UC: drop
    /// the message); the receive WQE in progress completes with the status.
    Error(NakCode, Option<WcStatus>),
}

/// What an executed request leaves to do.
enum Executed {
    /// Step 8: expect the next PSN and acknowledge (SEND, WRITE, ATOMIC_WRITE).
    Acknowledge,
    /// Answered by its own response, PSNs already consumed (READ, atomics, FLUSH).
    Answered,
}

/// The responder's own state: the queue of ACKs, NAKs and READ responses,
/// the saved READ/atomic resources. These take nothing of the QP but its
/// `resp` part (and what they are given).
impl RespState {
    /// Queue an ACK/NAK (built when it leaves, with the QP's current
    /// address). With ACK coalescing on, a positive ACK replaces a positive
    /// ACK still waiting at the back of the queue when it acknowledges the
    /// same or a later PSN: the newer one covers everything the older one
    /// did (IBA §9.7.5.1.3, coalesced acknowledgements).
    fn send_aeth(&mut self, tx: &Tx, ctrs: &mut Counters, psn: Psn, syndrome: Syndrome) {
        let msn = self.msn;
        if tx.coalesce_acks && matches!(syndrome, Syndrome::Ack { .. }) {
            if let Some(RespItem::Aeth { psn: p, syndrome: s @ Syndrome::Ack { .. }, msn: m }) =
                self.queue.back_mut()
            {
                if !psn.is_before(*p) {
                    *p = psn;
                    *s = syndrome;
                    *m = msn;
                    ctrs.acks_merged += 1;
                    return;
                }
            }
        }
        self.queue.push_back(RespItem::Aeth { psn, syndrome, msn });
    }

    /// Keep an executed READ/atomic for duplicates, at most
    /// `max_dest_rd_atomic` of them (the oldest goes).
    fn save_resource(&mut self, max_dest_rd_atomic: u8, r: RdResource) {
        let max = usize::from(max_dest_rd_atomic.max(1));
        while self.resources.len() >= max {
            self.resources.pop_front();
        }
        self.resources.push_back(r);
    }

    /// Schedule READ responses for `[va, va+len)` starting at PSN `psn0`.
    fn send_read_responses(&mut self, psn0: Psn, va: u64, rkey: RKey, len: u64) {
        self.queue.push_back(RespItem::Read(ReadJob {
            next_psn: psn0,
            va,
            rkey,
            remaining: len,
            first: true,
            msn: self.msn,
        }));
    }

    /// Whether the positive ACK `psn` alone at the front of `queue` stays
    /// held at `now` (see [`crate::LinkProfile::ack_delay`]).
    fn ack_held(&mut self, tx: &Tx, now: Instant, psn: Psn) -> bool {
        let Some(delay) = tx.ack_delay else { return false };
        if tx.acks_forced || self.queue.len() > 1 {
            return false;
        }
        if self.last_ack_psn.is_none_or(|l| psn.distance(l) >= ACK_EVERY_PSNS as i32) {
            return false;
        }
        let since = *self.ack_held_since.get_or_insert(now);
        let age = now.saturating_duration_since(since);
        // due: rides with other packets of this transmit burst; alone at 2x
        !(age >= 2 * delay || (age >= delay && tx.burst))
    }
}

impl Qp {
    /// Queue a response packet behind earlier ones of this QP.
    fn queue(&mut self, cx: &mut RespCtx<'_>, r: &RoceRepr, payload: &[u8]) {
        match cx.tx.datagram(self, r, payload) {
            Some(d) => self.resp.queue.push_back(RespItem::Packet(d)),
            None => {
                cx.ctrs.send_err += 1;
                tracing::warn!(qpn = %self.qpn, "cannot build response (no address vector)");
            }
        }
    }

    fn send_ack(&mut self, cx: &mut RespCtx<'_>, psn: Psn) {
        let psn = match mutant::is(self.mutant, Mutant::AckPsnOffByOne) {
            true => psn.sub(1),
            false => psn,
        };
        cx.ctrs.acks_sent += 1;
        self.resp.send_aeth(cx.tx, cx.ctrs, psn, Syndrome::Ack { credit: CREDIT_UNLIMITED });
    }

    /// [`Mutant::CnpAcked`]: a CNP taken for a request and acknowledged
    /// with the newest PSN, as a duplicate would be.
    pub(crate) fn ack_as_request(&mut self, cx: &mut RespCtx<'_>) {
        let psn = self.resp.epsn.sub(1);
        self.send_ack(cx, psn);
    }

    /// UC's responder rules apply (§9.7.7): no ACK, NAK, RNR or error
    /// state, messages dropped instead.
    fn resp_is_uc(&self) -> bool {
        self.is_uc() && !mutant::is(self.mutant, Mutant::UcAsRc)
    }

    fn send_nak(&mut self, cx: &mut RespCtx<'_>, psn: Psn, code: NakCode) {
        cx.ctrs.naks_sent += 1;
        tracing::debug!(qpn = %self.qpn, %psn, code = code.name(), "NAK sent");
        self.resp.send_aeth(cx.tx, cx.ctrs, psn, Syndrome::Nak(code));
    }

    /// Step 6: the R_Key, PD, access rights and bounds of `[va, va+len)`
    /// for a request that arrived on this QP (§10.6.6; a type 2 window
    /// answers only on the QP it is bound to, crate::mw).
    fn check_rkey(
        &self,
        cx: &RespCtx<'_>,
        rkey: RKey,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(MrHandle, usize), MemError> {
        let need = match mutant::is(self.mutant, Mutant::NoRegionRights) {
            true => AccessFlags::EMPTY,
            false => need,
        };
        let len = match mutant::is(self.mutant, Mutant::KeyChecksStartOnly) {
            true => len.min(1),
            false => len,
        };
        if len > 0 && mutant::is(self.mutant, Mutant::BoundsEndExclusive) {
            cx.mem.check_remote(self.init.pd, Some(self.qpn), rkey, va, len + 1, need)?;
        }
        cx.mem.check_remote(self.init.pd, Some(self.qpn), rkey, va, len, need)
    }

    /// A READ of `reth` passes the rkey/PD/access/bounds check (IBA
    /// §10.6.6); zero-length READs need no access. Used for new READs and
    /// for re-executed duplicates alike.
    fn read_allowed(&self, cx: &RespCtx<'_>, reth: &roce_packet::RethRepr) -> bool {
        (reth.dma_len == 0 && !mutant::is(self.mutant, Mutant::ZeroLengthChecksKey))
            || self
                .check_rkey(
                    cx,
                    reth.rkey,
                    reth.va,
                    u64::from(reth.dma_len),
                    AccessFlags::REMOTE_READ,
                )
                .is_ok()
    }

    /// NAK a class B/C/D error and move the QP to ERR; `recv_status`
    /// completes the receive WQE in progress with that status first.
    /// On UC there is no NAK and no error state: the message is dropped
    /// (a length error still completes its receive WQE with LOC_LEN_ERR).
    fn responder_error(
        &mut self,
        cx: &mut RespCtx<'_>,
        psn: Psn,
        code: NakCode,
        recv_status: Option<WcStatus>,
    ) {
        if let Some(st) = recv_status {
            let uc_keeps = self.resp_is_uc() && st != WcStatus::LocLenErr;
            if !uc_keeps {
                if let Some(InMsg::Send { recv, offset }) = self.resp.in_msg.take() {
                    let wc = self.recv_wc(&recv, st, offset, None, false);
                    cx.sink.complete(self.init.recv_cq, wc);
                }
            }
        }
        if self.resp_is_uc() {
            tracing::debug!(qpn = %self.qpn, %psn, code = code.name(), "UC message dropped");
            self.uc_drop_message(cx, code.name());
            return;
        }
        self.send_nak(cx, psn, code);
        self.enter_error(cx.sink);
    }

    /// UC: forget the message in progress; an unfinished receive WQE goes
    /// back to the head of the receive queue for the next message. Returns
    /// whether a message was in progress (counting is the caller's).
    fn uc_abandon(&mut self, cx: &mut RespCtx<'_>, why: &str) -> bool {
        match self.resp.in_msg.take() {
            Some(InMsg::Send { recv, .. }) => {
                self.return_recv(cx.srqs, recv);
                tracing::debug!(qpn = %self.qpn, reason = why, "UC message abandoned");
                true
            }
            Some(InMsg::Write { .. }) => {
                tracing::debug!(qpn = %self.qpn, reason = why, "UC message abandoned");
                true
            }
            None => false,
        }
    }

    /// UC: the message of the packet being processed is dropped: count it
    /// once and discard its remaining packets up to the next FIRST/ONLY.
    fn uc_drop_message(&mut self, cx: &mut RespCtx<'_>, why: &str) {
        self.uc_abandon(cx, why);
        cx.ctrs.uc_msg_dropped += 1;
        self.resp.uc_discard = true;
    }

    /// UC PSN check (IBA §9.7.7.2): no NAK; after a gap the message in
    /// progress is dropped and the receiver resynchronises on the next
    /// FIRST/ONLY, whatever its PSN. Each lost message is counted once in
    /// `uc_msg_dropped`: a partly received one, one whose head was lost
    /// (its later packets are discarded silently), or — a forward gap
    /// between whole messages — at least one lost entirely. A packet from
    /// behind (late, reordered, or a duplicate) is dropped by itself and
    /// never starts a message. Returns whether to go on with this packet.
    fn uc_check_psn(&mut self, cx: &mut RespCtx<'_>, psn: Psn, starts: bool) -> bool {
        if psn != self.resp.epsn && psn.distance(self.resp.epsn) < 0 {
            // A packet from behind: on RoCE the IP network may reorder, so
            // this is a late packet of a message already given up or
            // already overtaken. Resynchronising on it (as rxe does on any
            // FIRST/ONLY) would deliver an old message after newer ones —
            // an old WRITE over memory a newer message already filled, an
            // old SEND into a newer receive. It is dropped alone; the
            // message in progress, if any, goes on.
            cx.ctrs.out_of_seq_request += 1;
            tracing::debug!(qpn = %self.qpn, %psn, epsn = %self.resp.epsn, reason = "UC: late packet", "drop");
            return false;
        }
        if psn != self.resp.epsn {
            cx.ctrs.out_of_seq_request += 1;
            let partial = self.uc_abandon(cx, "PSN gap");
            let ahead = psn.distance(self.resp.epsn) > 0;
            if partial || (ahead && !self.resp.uc_discard) {
                cx.ctrs.uc_msg_dropped += 1;
            }
            self.resp.uc_discard = true;
        }
        if self.resp.uc_discard {
            if !starts {
                return false;
            }
            self.resp.uc_discard = false;
            self.resp.epsn = psn;
        }
        true
    }

    fn send_rnr(&mut self, cx: &mut RespCtx<'_>, psn: Psn) {
        cx.ctrs.send_rnr_err += 1;
        let code = match mutant::is(self.mutant, Mutant::RnrTimerZero) {
            true => 0,
            false => self.p.min_rnr_timer,
        };
        let t = RnrTimer::new(code);
        tracing::debug!(qpn = %self.qpn, %psn, code = "RNR_NAK", timer_us = t.micros(), "RNR NAK sent");
        self.resp.send_aeth(cx.tx, cx.ctrs, psn, Syndrome::RnrNak(t));
        self.resp.nak_sent = true;
        if mutant::is(self.mutant, Mutant::RnrConsumesPsn) {
            self.resp.epsn = psn.next();
        }
    }

    /// The next queued response packet (ACK/NAK or one READ response).
    /// The next response, READ responses paced as requests are while the
    /// QP's rate is limited ([`crate::congestion`]); ACKs and NAKs never.
    pub(crate) fn next_paced_response(
        &mut self,
        cx: &mut RespCtx<'_>,
        now: Instant,
    ) -> Option<Datagram> {
        let read = matches!(self.resp.queue.front(), Some(RespItem::Read(_)));
        if read && !self.cc.may_send(now) {
            return None;
        }
        let d = self.next_response(cx, now)?;
        if read && self.cc.rp.limited {
            self.cc.on_sent(cx.cc, now, d.frame_len());
        }
        Some(d)
    }

    pub(crate) fn next_response(&mut self, cx: &mut RespCtx<'_>, now: Instant) -> Option<Datagram> {
        loop {
            if let Some(&RespItem::Aeth { psn, syndrome: Syndrome::Ack { .. }, .. }) =
                self.resp.queue.front()
            {
                if self.resp.ack_held(cx.tx, now, psn) {
                    return None;
                }
                self.resp.ack_held_since = None;
                self.resp.last_ack_psn = Some(psn);
            }
            match self.resp.queue.front()? {
                RespItem::Packet(_) => match self.resp.queue.pop_front() {
                    Some(RespItem::Packet(d)) => return Some(d),
                    _ => return None,
                },
                &RespItem::Aeth { psn, syndrome, msn } => {
                    self.resp.queue.pop_front();
                    let mut r = self.repr(Opcode::RC_ACKNOWLEDGE, psn, false, 0);
                    r.aeth = Some(AethRepr { syndrome, msn });
                    match cx.tx.datagram(self, &r, &[]) {
                        Some(d) => return Some(d),
                        None => {
                            cx.ctrs.send_err += 1;
                            tracing::warn!(qpn = %self.qpn, "cannot build ACK (no address vector)");
                            continue;
                        }
                    }
                }
                RespItem::Read(job) => {
                    let j = *job;
                    if let Some(d) = self.read_response(cx, j) {
                        return Some(d);
                    }
                }
            }
        }
    }

    /// The next packet of the READ response `j` at the front of the queue
    /// (the job moves on, or leaves the queue with its last packet). `None`
    /// when nothing could be sent for it this time: the source vanished
    /// (then a NAK is queued) or the packet could not be built (counted).
    fn read_response(&mut self, cx: &mut RespCtx<'_>, j: ReadJob) -> Option<Datagram> {
        let mtu = self.mtu();
        let chunk = j.remaining.min(mtu);
        let last = j.remaining <= mtu;
        let (pos, op) = match (j.first, last) {
            (true, true) => (Position::Only, Opcode::RC_RDMA_READ_RESPONSE_ONLY),
            (true, false) => (Position::First, Opcode::RC_RDMA_READ_RESPONSE_FIRST),
            (false, false) => (Position::Middle, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE),
            (false, true) => (Position::Last, Opcode::RC_RDMA_READ_RESPONSE_LAST),
        };
        let mut r = self.repr(op, j.next_psn, false, chunk as usize);
        if pos != Position::Middle {
            r.aeth =
                Some(AethRepr { syndrome: Syndrome::Ack { credit: CREDIT_UNLIMITED }, msn: j.msn });
        }
        // Built in place: headers, then the bytes straight from
        // the region (re-checked per packet: it may be gone now);
        // or, for a large chunk when the transport takes it, sent
        // from the region itself (RegionBody).
        let direct_ok = cx.tx.region_bodies && chunk as usize >= BODY_MIN;
        // (a packet sent from the region builds its own small buffer)
        let started = if direct_ok { Ok(Vec::new()) } else { r.start_in(crate::bufpool::take) };
        let Ok(mut buf) = started else {
            cx.ctrs.send_err += 1;
            self.resp.queue.pop_front();
            return None;
        };
        let mut direct = None;
        if chunk > 0 {
            // (checked on arrival, type 2 window QP included)
            let loc = cx.mem.check_remote(
                self.init.pd,
                None,
                j.rkey,
                j.va,
                match mutant::is(self.mutant, Mutant::KeyChecksStartOnly) {
                    true => chunk.min(1),
                    false => chunk,
                },
                match mutant::is(self.mutant, Mutant::NoRegionRights) {
                    true => AccessFlags::EMPTY,
                    false => AccessFlags::REMOTE_READ,
                },
            );
            let got = loc.ok().and_then(|(h, off)| {
                if direct_ok {
                    direct = Some((cx.mem.share(h)?, off));
                    Some(())
                } else {
                    cx.mem.read_into(h, off, chunk as usize, &mut buf)
                }
            });
            if got.is_none() {
                // the pages went away (unmapped by the
                // application) or the region was deregistered:
                // the rest of the READ is answered with a NAK
                tracing::debug!(qpn = %self.qpn, "READ source vanished; NAK");
                if loc.is_ok() {
                    cx.ctrs.region_faults += 1;
                }
                self.resp.queue.pop_front();
                self.responder_error(cx, j.next_psn, NakCode::RemoteAccessError, None);
                return None;
            }
        }
        if let Some(RespItem::Read(job)) = self.resp.queue.front_mut() {
            job.first = false;
            if !mutant::is(self.mutant, Mutant::ReadSourceStuck) {
                job.va = job.va.wrapping_add(chunk);
            }
            job.remaining -= chunk;
            job.next_psn = job.next_psn.next();
        }
        if last {
            self.resp.queue.pop_front();
        }
        let built = match direct {
            Some((mem, off)) => {
                let d = self.p.ah.and_then(|ah| cx.tx.finish_body(self, &ah, &r, mem, off));
                if d.is_none() && self.p.ah.is_some() {
                    // (the ICRC pass over the region faulted)
                    tracing::debug!(qpn = %self.qpn, "READ source vanished; NAK");
                    cx.ctrs.region_faults += 1;
                    if !last {
                        self.resp.queue.pop_front();
                    }
                    self.responder_error(cx, r.bth.psn, NakCode::RemoteAccessError, None);
                    return None;
                }
                d
            }
            None => {
                r.finish_vec(&mut buf).ok().and_then(|()| cx.tx.finish_to(self, &self.p.ah?, buf))
            }
        };
        if built.is_none() {
            cx.ctrs.send_err += 1;
        }
        built
    }

    /// Handle one request packet addressed to this QP: the check chain of
    /// IBA §9.7.5, one named step each, then the answer. A step that stops
    /// the packet returns the [`Outcome`] the responder gives instead.
    pub(crate) fn on_request(
        &mut self,
        cx: &mut RespCtx<'_>,
        _now: Instant,
        r: &RoceRepr,
        payload: &[u8],
    ) {
        let Ok(info) = r.info() else { return };
        if (!r.bth.ack_req && mutant::is(self.mutant, Mutant::AckReqClearDropped))
            || ((r.bth.fecn || r.bth.becn) && mutant::is(self.mutant, Mutant::EcnDrops))
        {
            return;
        }
        match self.check_and_execute(cx, r, info, payload) {
            Ok(Executed::Acknowledge) => self.acknowledge(cx, r),
            Ok(Executed::Answered) => {}
            Err(outcome) => self.answer(cx, r, outcome),
        }
    }

    /// A request to an XRC target: run it with the XRC SRQ its XRCETH names
    /// (`srq`: handle, PD, CQ; see [`crate::xrc`]), whose receive WQEs, CQ
    /// and PD the QP takes from now on; an XRCETH that names no XRC SRQ of
    /// the target's domain is an invalid request.
    pub(crate) fn on_xrc_request(
        &mut self,
        cx: &mut RespCtx<'_>,
        now: Instant,
        r: &RoceRepr,
        payload: &[u8],
        srq: Option<(
            crate::objects::SrqHandle,
            crate::objects::PdHandle,
            crate::objects::CqHandle,
        )>,
    ) {
        let Some((h, pd, cq)) = srq else {
            tracing::debug!(qpn = %self.qpn, xrceth = ?r.xrceth, "XRC: no XRC SRQ of the target's domain");
            self.responder_error(cx, r.bth.psn, NakCode::InvalidRequest, None);
            return;
        };
        self.init.srq = Some(h);
        self.init.pd = pd;
        self.init.recv_cq = cq;
        self.on_request(cx, now, r, payload);
    }

    /// The chain, top to bottom (numbers as in the module documentation).
    fn check_and_execute(
        &mut self,
        cx: &mut RespCtx<'_>,
        r: &RoceRepr,
        info: &OpInfo,
        payload: &[u8],
    ) -> Result<Executed, Outcome> {
        self.check_psn(cx, r.bth.psn, info)?; // 1. §9.7.5.1.1
        self.steps_2_to_7(cx, r, info, payload)
    }

    /// Steps 2..7 of the chain (a shadow of another member's XRC target
    /// runs these alone: its owner checked the PSN, [`crate::xrc_relay`]).
    fn steps_2_to_7(
        &mut self,
        cx: &mut RespCtx<'_>,
        r: &RoceRepr,
        info: &OpInfo,
        payload: &[u8],
    ) -> Result<Executed, Outcome> {
        self.check_opcode_sequence(r, info)?; // 2. C9-40
        self.check_opcode_allowed(r, info)?; // 3. QP type, access flags, resources
        self.check_recv_wqe(cx, r.bth.psn, info)?; // 4. §9.7.5.1.6
        self.check_packet_length(r.bth.psn, info, payload.len() as u64)?; // 5. C9-22
        match info.kind {
            // 6. R_Key/PD/access/bounds and 7. execution, per opcode
            // (a SEND also checks its message against the receive WQE, 5.)
            OpKind::Send => self.execute_send(cx, r, info, payload),
            OpKind::Write => self.execute_write(cx, r, info, payload),
            OpKind::ReadRequest => self.execute_read(cx, r),
            OpKind::CompareSwap | OpKind::FetchAdd => self.execute_atomic(cx, r, info),
            OpKind::Flush => self.execute_flush(cx, r),
            OpKind::AtomicWrite => self.execute_atomic_write(cx, r, payload),
            _ => Err(Outcome::Drop),
        }
    }

    /// XRC relay, the target's owner ([`crate::xrc_relay`]): step 1 for a
    /// request whose XRC SRQ is another member's. `Some(dup)`: send it
    /// there (`dup`: a duplicate READ inside a saved one, executed there
    /// again); `None`: answered or dropped here (a duplicate SEND, WRITE or
    /// atomic is answered from this QP's saved state, as always).
    pub(crate) fn relay_check_psn(&mut self, cx: &mut RespCtx<'_>, r: &RoceRepr) -> Option<bool> {
        let info = r.info().ok()?;
        if (!r.bth.ack_req && mutant::is(self.mutant, Mutant::AckReqClearDropped))
            || ((r.bth.fecn || r.bth.becn) && mutant::is(self.mutant, Mutant::EcnDrops))
        {
            return None;
        }
        match self.check_psn(cx, r.bth.psn, info) {
            Ok(()) => Some(false),
            Err(Outcome::Duplicate) if info.kind == OpKind::ReadRequest => {
                let (psn, reth) = (r.bth.psn, r.reth?);
                let within = self.resp.resources.iter().any(|x| match *x {
                    RdResource::Read { first, npkts } => {
                        let k = psn.value().wrapping_sub(first.value()) & 0xFF_FFFF;
                        psn.in_range(first, npkts)
                            && k + packets_for(u64::from(reth.dma_len), self.mtu()) <= npkts
                    }
                    _ => false,
                });
                if !within {
                    tracing::debug!(qpn = %self.qpn, %psn, reason = "duplicate READ without resource", "drop");
                }
                within.then_some(true)
            }
            Err(o) => {
                self.answer(cx, r, o);
                None
            }
        }
    }

    /// XRC relay, the target's owner: the member's verdict on the request
    /// `r` (`dup` as [`Qp::relay_check_psn`] said).
    pub(crate) fn relay_finish(
        &mut self,
        cx: &mut RespCtx<'_>,
        r: &RoceRepr,
        dup: bool,
        v: crate::xrc_relay::Verdict,
    ) {
        use crate::xrc_relay::Verdict as V;
        let psn = r.bth.psn;
        match v {
            _ if dup => {}
            V::Ack => {
                // the member completed a message: count it here too, the
                // ACK carries the MSN (IBA §9.7.5.1.3)
                if r.info().is_ok_and(|i| i.position.ends()) {
                    self.resp.msn = self.resp.msn.next();
                }
                self.acknowledge(cx, r)
            }
            V::Drop => {}
            V::Rnr => self.answer(cx, r, Outcome::RnrNak),
            V::Error(code) => {
                self.answer(cx, r, Outcome::Error(NakCode::from_u5(code), None));
            }
            V::Answered { npkts, orig } => {
                let res = match orig {
                    Some(orig) => RdResource::Atomic { psn, orig },
                    None => RdResource::Read { first: psn, npkts },
                };
                self.resp.save_resource(self.p.max_dest_rd_atomic, res);
                self.resp.msn = self.resp.msn.next();
                self.resp.epsn = psn.add(npkts.max(1));
            }
        }
    }

    /// XRC relay, the SRQ's member: run steps 2..7 of a request on this
    /// shadow of the owner's target QP; READ responses and atomic
    /// acknowledgements leave from here (into `out`); the verdict goes
    /// back to the owner. An error completes the receive in progress with
    /// its status (the owner NAKs and moves its QP to ERR).
    pub(crate) fn relay_execute(
        &mut self,
        cx: &mut RespCtx<'_>,
        now: Instant,
        r: &RoceRepr,
        payload: &[u8],
        out: &mut std::collections::VecDeque<Datagram>,
    ) -> crate::xrc_relay::Verdict {
        use crate::xrc_relay::Verdict as V;
        let Ok(info) = r.info() else { return V::Drop };
        let psn = r.bth.psn;
        self.resp.epsn = psn;
        match self.steps_2_to_7(cx, r, info, payload) {
            Ok(Executed::Acknowledge) => V::Ack,
            Ok(Executed::Answered) => {
                let npkts = self.resp.epsn.value().wrapping_sub(psn.value()) & 0xFF_FFFF;
                let orig = self.resp.resources.iter().rev().find_map(|x| match *x {
                    RdResource::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                while let Some(d) = self.next_response(cx, now) {
                    out.push_back(d);
                }
                V::Answered { npkts: npkts.max(1), orig }
            }
            Err(Outcome::RnrNak) => V::Rnr,
            Err(Outcome::Error(code, st)) => {
                if let (Some(st), Some(InMsg::Send { recv, offset })) =
                    (st, self.resp.in_msg.take())
                {
                    let wc = self.recv_wc(&recv, st, offset, None, false);
                    cx.sink.complete(self.init.recv_cq, wc);
                }
                self.resp.in_msg = None;
                V::Error(code.to_u5())
            }
            Err(_) => V::Drop,
        }
    }

    /// What the responder does with a packet the chain stopped.
    fn answer(&mut self, cx: &mut RespCtx<'_>, r: &RoceRepr, outcome: Outcome) {
        let psn = r.bth.psn;
        match outcome {
            Outcome::Drop => {}
            Outcome::Duplicate => self.on_duplicate(cx, r),
            Outcome::SequenceNak => {
                self.resp.nak_sent = true;
                let at = match mutant::is(self.mutant, Mutant::SequenceNakAtReceivedPsn) {
                    true => psn,
                    false => self.resp.epsn,
                };
                self.send_nak(cx, at, NakCode::PsnSequenceError);
            }
            Outcome::RnrNak => self.send_rnr(cx, psn),
            Outcome::UcDropMessage(why) => self.uc_drop_message(cx, why),
            Outcome::Error(NakCode::RemoteAccessError, _)
                if mutant::is(self.mutant, Mutant::AccessErrorsSilent) => {}
            Outcome::Error(code, recv_status) => self.responder_error(cx, psn, code, recv_status),
        }
    }

    /// Step 8: A SEND/WRITE/ATOMIC_WRITE packet executed: the next PSN is
    /// expected, and an RC responder acknowledges when AckReq is set.
    fn acknowledge(&mut self, cx: &mut RespCtx<'_>, r: &RoceRepr) {
        let psn = r.bth.psn;
        self.resp.epsn = match mutant::is(self.mutant, Mutant::PsnSaturates) {
            true if psn.value() == 0xFF_FFFF => psn,
            _ => psn.next(),
        };
        if self.resp_is_uc() {
            return;
        }
        if r.bth.ack_req {
            self.send_ack(cx, psn);
        } else {
            cx.ctrs.ack_deferred += 1;
        }
    }

    /// Step 1: PSN (§9.7.5.1.1): the expected PSN goes on; a duplicate is
    /// answered from saved state; a PSN ahead is NAKed once (C9-113). UC
    /// has its own rule (`uc_check_psn`) before the same comparison.
    fn check_psn(&mut self, cx: &mut RespCtx<'_>, psn: Psn, info: &OpInfo) -> Result<(), Outcome> {
        if self.resp_is_uc() && !self.uc_check_psn(cx, psn, info.position.starts()) {
            return Err(Outcome::Drop);
        }
        let mut d = psn.distance(self.resp.epsn);
        if d > 1 << 16 && mutant::is(self.mutant, Mutant::NarrowPsnWindow) {
            d = -1;
        }
        if d > 0 && !mutant::is(self.mutant, Mutant::AcceptPsnGap) {
            cx.ctrs.out_of_seq_request += 1;
            if !self.resp.nak_sent || mutant::is(self.mutant, Mutant::NakEveryGapPacket) {
                return Err(Outcome::SequenceNak);
            }
            tracing::debug!(qpn = %self.qpn, %psn, epsn = %self.resp.epsn,
                reason = "out of sequence after NAK", "drop");
            return Err(Outcome::Drop);
        }
        if d < 0 {
            cx.ctrs.duplicate_request += 1;
            let again = match info.kind {
                OpKind::Send | OpKind::Write => {
                    mutant::is(self.mutant, Mutant::ReexecuteDuplicates)
                }
                OpKind::CompareSwap | OpKind::FetchAdd => {
                    mutant::is(self.mutant, Mutant::ReexecuteDuplicateAtomics)
                }
                _ => false,
            };
            if !again {
                return Err(Outcome::Duplicate);
            }
        }
        self.resp.nak_sent = false;
        Ok(())
    }

    /// Step 2: Opcode sequence (C9-40): MIDDLE/LAST only inside a message of the
    /// same kind, FIRST/ONLY only between messages.
    fn check_opcode_sequence(&self, r: &RoceRepr, info: &OpInfo) -> Result<(), Outcome> {
        if mutant::is(self.mutant, Mutant::NoOpcodeSequence) {
            return Ok(());
        }
        let seq_ok = match &self.resp.in_msg {
            Some(InMsg::Send { .. }) => info.kind == OpKind::Send && !info.position.starts(),
            Some(InMsg::Write { .. }) => info.kind == OpKind::Write && !info.position.starts(),
            None => info.position.starts(),
        };
        if !seq_ok {
            tracing::debug!(qpn = %self.qpn, psn = %r.bth.psn, opcode = %r.bth.opcode, "opcode out of sequence");
            return Err(Outcome::Error(NakCode::InvalidRequest, Some(WcStatus::RemInvReqErr)));
        }
        Ok(())
    }

    /// Step 3: The opcode is valid for this QP: its access flags allow it and,
    /// for READ/atomic/FLUSH, it has responder resources.
    fn check_opcode_allowed(&self, r: &RoceRepr, info: &OpInfo) -> Result<(), Outcome> {
        let acc = self.p.access;
        let valid = match info.kind {
            OpKind::Send => !info.has_inv() || !self.resp_is_uc(),
            // IBA 1.5 ATOMIC_WRITE: a write right, as rxe checks, and a
            // responder resource (crate::mw)
            OpKind::AtomicWrite => {
                acc.contains(AccessFlags::REMOTE_WRITE) && self.p.max_dest_rd_atomic > 0
            }
            OpKind::Flush => {
                let need = flush_access(r.feth.unwrap_or(0));
                acc.contains(need) && self.p.max_dest_rd_atomic > 0
            }
            OpKind::Write => acc.contains(AccessFlags::REMOTE_WRITE),
            OpKind::ReadRequest => {
                acc.contains(AccessFlags::REMOTE_READ) && self.p.max_dest_rd_atomic > 0
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                acc.contains(AccessFlags::REMOTE_ATOMIC) && self.p.max_dest_rd_atomic > 0
            }
            _ => false,
        };
        if !valid {
            tracing::debug!(qpn = %self.qpn, psn = %r.bth.psn, opcode = %r.bth.opcode, "opcode not allowed");
            return Err(Outcome::Error(NakCode::InvalidRequest, None));
        }
        Ok(())
    }

    /// Step 4: Resources (§9.7.5.1.6): a packet that consumes a receive WQE
    /// (a SEND's first, a WRITE with immediate) needs one: else RNR NAK
    /// (RC) or the message is dropped (UC, §9.7.7.2).
    fn check_recv_wqe(&self, cx: &RespCtx<'_>, psn: Psn, info: &OpInfo) -> Result<(), Outcome> {
        let needs_recv = match info.kind {
            OpKind::Send => info.position.starts(),
            OpKind::Write => {
                (info.has_imm() && !mutant::is(self.mutant, Mutant::WriteImmNeedsNoReceive))
                    || mutant::is(self.mutant, Mutant::WriteNeedsReceive)
            }
            _ => false,
        };
        if needs_recv && !self.recv_available(cx.srqs) {
            if self.init.srq.is_some() && mutant::is(self.mutant, Mutant::SrqEmptyDrops) {
                return Err(Outcome::Drop);
            }
            if self.resp_is_uc() {
                tracing::debug!(qpn = %self.qpn, %psn, reason = "UC: no receive WQE", "drop");
                return Err(Outcome::UcDropMessage("no receive WQE"));
            }
            return Err(Outcome::RnrNak);
        }
        Ok(())
    }

    /// Step 5: Packet length (C9-22): FIRST and MIDDLE carry exactly the path
    /// MTU, LAST 1..=MTU bytes, ONLY at most the MTU.
    fn check_packet_length(&self, psn: Psn, info: &OpInfo, len: u64) -> Result<(), Outcome> {
        if mutant::is(self.mutant, Mutant::NoPacketLength) {
            return Ok(());
        }
        let mtu = self.mtu();
        let len_ok = match info.position {
            Position::First | Position::Middle => len == mtu,
            Position::Last => len >= 1 && len <= mtu,
            Position::Only => len <= mtu,
        };
        if !len_ok {
            tracing::debug!(qpn = %self.qpn, %psn, len, "bad packet length");
            return Err(Outcome::Error(NakCode::InvalidRequest, Some(WcStatus::RemInvReqErr)));
        }
        Ok(())
    }

    /// SEND: the message fits the receive WQE (§9.9.3.1.3, LOC_LEN_ERR),
    /// scatter, complete the receive at the last packet (SEND_WITH_INVALIDATE
    /// invalidates the IETH rkey first).
    fn execute_send(
        &mut self,
        cx: &mut RespCtx<'_>,
        r: &RoceRepr,
        info: &OpInfo,
        payload: &[u8],
    ) -> Result<Executed, Outcome> {
        let psn = r.bth.psn;
        let len = payload.len() as u64;
        if len == 0 && mutant::is(self.mutant, Mutant::ZeroLengthSendDropped) {
            return Err(Outcome::Drop);
        }
        if info.position.starts() {
            if let Some(recv) = self.take_recv(cx.srqs, cx.sink) {
                self.resp.in_msg = Some(InMsg::Send { recv, offset: 0 });
            }
        }
        let Some(InMsg::Send { recv, offset }) = self.resp.in_msg.as_mut() else {
            return Err(Outcome::Drop);
        };
        if *offset + len > recv.length() && !mutant::is(self.mutant, Mutant::NoReceiveLength) {
            tracing::debug!(qpn = %self.qpn, %psn, "message longer than receive WQE");
            return Err(Outcome::Error(NakCode::InvalidRequest, Some(WcStatus::LocLenErr)));
        }
        if cx.mem.scatter(self.init.pd, &recv.sg_list, *offset, payload).is_err() {
            return Err(Outcome::Error(
                NakCode::RemoteOperationalError,
                Some(WcStatus::LocProtErr),
            ));
        }
        *offset += len;
        if info.position.ends() {
            if let Some(InMsg::Send { recv, offset }) = self.resp.in_msg.take() {
                let counted = match mutant::is(self.mutant, Mutant::ByteLenLastPacket) {
                    true => len,
                    false => offset,
                };
                let mut wc = self.recv_wc(&recv, WcStatus::Success, counted, r.immdt, false);
                // SEND_WITH_INVALIDATE: invalidate the IETH rkey (crate::mw)
                if let Some(rkey) = r.ieth {
                    let inv = match mutant::is(self.mutant, Mutant::IgnoreInvalidate) {
                        true => Ok(()),
                        false => cx.mem.invalidate(self.init.pd, rkey),
                    };
                    cx.ctrs.count_invalidate(inv.is_ok());
                    if let Err(e) = inv {
                        tracing::debug!(qpn = %self.qpn, %psn, %rkey, %e, "IETH invalidate failed");
                        self.resp.in_msg = Some(InMsg::Send { recv, offset });
                        return Err(Outcome::Error(
                            NakCode::InvalidRequest,
                            Some(WcStatus::RemInvReqErr),
                        ));
                    }
                    tracing::debug!(qpn = %self.qpn, %psn, %rkey, "rkey invalidated (IETH)");
                    wc.wc_flags |= WcFlags::WITH_INV;
                    wc.imm = Some(rkey.value());
                }
                cx.ctrs.rdma_recvs += 1;
                cx.sink.complete_se(self.init.recv_cq, wc, r.bth.solicited);
            }
            self.resp.msn = self.resp.msn.next();
        }
        Ok(Executed::Acknowledge)
    }

    /// RDMA WRITE: the RETH's R_Key/PD/access/bounds at the first packet
    /// (§10.6.6), each packet within the RETH's DMA length, then placed;
    /// WRITE with immediate completes a receive WQE at the last packet.
    fn execute_write(
        &mut self,
        cx: &mut RespCtx<'_>,
        r: &RoceRepr,
        info: &OpInfo,
        payload: &[u8],
    ) -> Result<Executed, Outcome> {
        let psn = r.bth.psn;
        let len = payload.len() as u64;
        if info.position.starts() {
            let Some(reth) = r.reth else { return Err(Outcome::Drop) };
            let total = u64::from(reth.dma_len);
            if (total > 0 || mutant::is(self.mutant, Mutant::ZeroLengthChecksKey))
                && self
                    .check_rkey(cx, reth.rkey, reth.va, total, AccessFlags::REMOTE_WRITE)
                    .is_err()
            {
                tracing::debug!(qpn = %self.qpn, %psn, rkey = %reth.rkey, va = reth.va,
                    len = total, "remote access error (WRITE)");
                return Err(Outcome::Error(NakCode::RemoteAccessError, None));
            }
            self.resp.in_msg =
                Some(InMsg::Write { va: reth.va, rkey: reth.rkey, remaining: total, total });
        }
        let Some(InMsg::Write { va, rkey, remaining, .. }) = self.resp.in_msg.as_mut() else {
            return Err(Outcome::Drop);
        };
        if (len > *remaining || (info.position.ends() && len != *remaining))
            && !mutant::is(self.mutant, Mutant::NoDmaLength)
        {
            tracing::debug!(qpn = %self.qpn, %psn, "WRITE length differs from RETH DMA length");
            return Err(Outcome::Error(NakCode::InvalidRequest, None));
        }
        if len > 0 {
            let (va0, rk) = (*va, *rkey);
            match self.check_rkey(cx, rk, va0, len, AccessFlags::REMOTE_WRITE) {
                Ok((h, off)) => {
                    // (the write fails when the application unmapped or
                    // write-protected the pages since it registered them:
                    // as for a bad R_Key, the peer gets a NAK)
                    let wrote = cx.mem.region(h).and_then(|m| m.write(off, payload));
                    if wrote.is_none() {
                        tracing::debug!(qpn = %self.qpn, %psn, va = va0, "WRITE target vanished");
                        cx.ctrs.region_faults += 1;
                        return Err(Outcome::Error(NakCode::RemoteAccessError, None));
                    }
                }
                Err(_) => return Err(Outcome::Error(NakCode::RemoteAccessError, None)),
            }
        }
        let Some(InMsg::Write { va, remaining, total, .. }) = self.resp.in_msg.as_mut() else {
            return Err(Outcome::Drop);
        };
        if !mutant::is(self.mutant, Mutant::WriteOffsetStuck) {
            *va = va.wrapping_add(len);
        }
        *remaining = remaining.saturating_sub(len);
        let total = match mutant::is(self.mutant, Mutant::ByteLenLastPacket) {
            true => len,
            false => *total,
        };
        if info.position.ends() {
            self.resp.in_msg = None;
            if info.has_imm() {
                if let Some(recv) = self.take_recv(cx.srqs, cx.sink) {
                    let wc = self.recv_wc(&recv, WcStatus::Success, total, r.immdt, true);
                    cx.ctrs.rdma_recvs += 1;
                    cx.sink.complete_se(self.init.recv_cq, wc, r.bth.solicited);
                }
            }
            self.resp.msn = self.resp.msn.next();
        }
        Ok(Executed::Acknowledge)
    }

    /// RDMA READ: length, R_Key (§10.6.6) and responder resources (§9.4.4),
    /// then the responses are queued; the READ consumes one PSN per response.
    fn execute_read(&mut self, cx: &mut RespCtx<'_>, r: &RoceRepr) -> Result<Executed, Outcome> {
        let psn = r.bth.psn;
        let Some(reth) = r.reth else { return Err(Outcome::Drop) };
        let len = u64::from(reth.dma_len);
        if len > u64::from(cx.max_msg_sz) {
            return Err(Outcome::Error(NakCode::InvalidRequest, None));
        }
        if !self.read_allowed(cx, &reth) {
            tracing::debug!(qpn = %self.qpn, %psn, rkey = %reth.rkey, "remote access error (READ)");
            return Err(Outcome::Error(NakCode::RemoteAccessError, None));
        }
        // Responder resources (IBA §9.4.4, max_dest_rd_atomic): a
        // requester may have at most that many READs outstanding,
        // and each still owed here is outstanding there. One more is
        // a requester breaking the rule; queueing it would let a
        // peer grow our queue of owed responses without bound.
        let owed = self.resp.queue.iter().filter(|i| matches!(i, RespItem::Read(_))).count();
        if owed >= usize::from(self.p.max_dest_rd_atomic.max(1)) {
            tracing::debug!(qpn = %self.qpn, %psn, owed, "READ beyond the responder resources");
            return Err(Outcome::Error(NakCode::InvalidRequest, None));
        }
        let npkts = packets_for(len, self.mtu());
        self.resp.save_resource(self.p.max_dest_rd_atomic, RdResource::Read { first: psn, npkts });
        self.resp.msn = self.resp.msn.next();
        self.resp.send_read_responses(psn, reth.va, reth.rkey, len);
        self.resp.epsn = match mutant::is(self.mutant, Mutant::ReadUsesOnePsn) {
            true => psn.next(),
            false => psn.add(npkts),
        };
        Ok(Executed::Answered)
    }

    /// CMP_AND_SWP / FETCH_AND_ADD: 8-byte aligned (else INVALID REQUEST),
    /// R_Key, executed once and answered with an AtomicAckETH (C9-128).
    fn execute_atomic(
        &mut self,
        cx: &mut RespCtx<'_>,
        r: &RoceRepr,
        info: &OpInfo,
    ) -> Result<Executed, Outcome> {
        let psn = r.bth.psn;
        let Some(a) = r.atomic_eth else { return Err(Outcome::Drop) };
        if a.va % 8 != 0 && !mutant::is(self.mutant, Mutant::NoAtomicAlignment) {
            tracing::debug!(qpn = %self.qpn, %psn, va = a.va, "misaligned atomic");
            return Err(Outcome::Error(NakCode::InvalidRequest, None));
        }
        let loc = self.check_rkey(cx, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC);
        // Memory holds the 64-bit value little-endian (host order on
        // the platforms we target); the wire carries big-endian.
        let cas = info.kind == OpKind::CompareSwap;
        let done = loc.ok().and_then(|(h, off)| {
            let m = cx.mem.region(h)?;
            if cas && mutant::is(self.mutant, Mutant::CmpSwapAlwaysSwaps) {
                let now = m.fetch_add(off, 0)?;
                m.compare_swap(off, now, a.swap_add)
            } else if cas {
                m.compare_swap(off, a.compare, a.swap_add)
            } else {
                m.fetch_add(off, a.swap_add)
            }
        });
        let done = match mutant::is(self.mutant, Mutant::AtomicReturnsNew) {
            true => done.map(|v| match cas {
                true if v == a.compare => a.swap_add,
                true => v,
                false => v.wrapping_add(a.swap_add),
            }),
            false => done,
        };
        let Some(orig) = done else {
            if loc.is_ok() {
                // (the key was good: the page is gone or read-only)
                cx.ctrs.region_faults += 1;
            }
            tracing::debug!(qpn = %self.qpn, %psn, rkey = %a.rkey, "remote access error (atomic)");
            return Err(Outcome::Error(NakCode::RemoteAccessError, None));
        };
        self.resp.save_resource(self.p.max_dest_rd_atomic, RdResource::Atomic { psn, orig });
        self.resp.msn = self.resp.msn.next();
        self.send_atomic_ack(cx, psn, orig);
        if !mutant::is(self.mutant, Mutant::AtomicKeepsPsn) {
            self.resp.epsn = psn.next();
        }
        Ok(Executed::Answered)
    }

    /// IBA 1.5 FLUSH (crate::mw): a valid FETH, R_Key for its placement
    /// type, answered by a zero-length READ RESPONSE ONLY.
    fn execute_flush(&mut self, cx: &mut RespCtx<'_>, r: &RoceRepr) -> Result<Executed, Outcome> {
        let psn = r.bth.psn;
        let (Some(reth), Some(feth)) = (r.reth, r.feth) else { return Err(Outcome::Drop) };
        let placement = feth & 0x0F;
        let level = (feth >> 4) & 0x03;
        if placement == 0 || placement > 3 || level > 1 {
            tracing::debug!(qpn = %self.qpn, %psn, placement, level, "FLUSH: bad FETH");
            cx.ctrs.flush_err += 1;
            return Err(Outcome::Error(NakCode::InvalidRequest, None));
        }
        // whole-region selectivity: only the rkey (and va inside it) matter
        let len = if level == 1 { 0 } else { u64::from(reth.dma_len) };
        let need = flush_access(feth);
        if let Err(e) = self.check_rkey(cx, reth.rkey, reth.va, len, need) {
            tracing::debug!(qpn = %self.qpn, %psn, rkey = %reth.rkey, ?e, "remote access error (FLUSH)");
            cx.ctrs.flush_err += 1;
            return Err(Outcome::Error(NakCode::RemoteAccessError, None));
        }
        tracing::debug!(qpn = %self.qpn, %psn, placement, level, "FLUSH done (memory is ours)");
        cx.ctrs.flush_ops += 1;
        self.resp
            .save_resource(self.p.max_dest_rd_atomic, RdResource::Read { first: psn, npkts: 1 });
        self.resp.msn = self.resp.msn.next();
        if !mutant::is(self.mutant, Mutant::FlushNotAnswered) {
            self.resp.send_read_responses(psn, reth.va, reth.rkey, 0);
        }
        self.resp.epsn = psn.next();
        Ok(Executed::Answered)
    }

    /// IBA 1.5 ATOMIC_WRITE (crate::mw): 8 aligned bytes, R_Key with a
    /// write right, one 8-byte store; answered by a zero-length READ
    /// RESPONSE ONLY, as a FLUSH is.
    fn execute_atomic_write(
        &mut self,
        cx: &mut RespCtx<'_>,
        r: &RoceRepr,
        payload: &[u8],
    ) -> Result<Executed, Outcome> {
        let psn = r.bth.psn;
        let Some(reth) = r.reth else { return Err(Outcome::Drop) };
        let misaligned = reth.va % 8 != 0 && !mutant::is(self.mutant, Mutant::NoAtomicAlignment);
        if payload.len() != 8 || reth.dma_len != 8 || misaligned {
            tracing::debug!(qpn = %self.qpn, %psn, len = payload.len(), va = reth.va,
                "ATOMIC_WRITE: not 8 aligned bytes");
            return Err(Outcome::Error(NakCode::InvalidRequest, None));
        }
        let loc = self.check_rkey(cx, reth.rkey, reth.va, 8, AccessFlags::REMOTE_WRITE);
        let mut word = [0u8; 8];
        word.copy_from_slice(payload);
        // one 8-byte store
        let done = match mutant::is(self.mutant, Mutant::AtomicWriteNotStored) {
            true => loc.ok().map(|_| ()),
            false => loc.ok().and_then(|(h, off)| cx.mem.region(h)?.atomic_write(off, word)),
        };
        if done.is_none() {
            tracing::debug!(qpn = %self.qpn, %psn, rkey = %reth.rkey, "remote access error (ATOMIC_WRITE)");
            return Err(Outcome::Error(NakCode::RemoteAccessError, None));
        }
        // answered like a FLUSH: a zero-length READ RESPONSE ONLY, from a
        // responder resource (a duplicate is answered again from it)
        self.resp
            .save_resource(self.p.max_dest_rd_atomic, RdResource::Read { first: psn, npkts: 1 });
        self.resp.msn = self.resp.msn.next();
        self.resp.send_read_responses(psn, reth.va, reth.rkey, 0);
        self.resp.epsn = psn.next();
        Ok(Executed::Answered)
    }

    fn send_atomic_ack(&mut self, cx: &mut RespCtx<'_>, psn: Psn, orig: u64) {
        let mut r = self.repr(Opcode::RC_ATOMIC_ACKNOWLEDGE, psn, false, 0);
        r.aeth = Some(AethRepr {
            syndrome: Syndrome::Ack { credit: CREDIT_UNLIMITED },
            msn: self.resp.msn,
        });
        r.atomic_ack_eth = Some(AtomicAckEthRepr { orig_rem_data: orig });
        self.queue(cx, &r, &[]);
    }

    /// A request with a PSN before the expected one (C9-108..C9-111, C9-128).
    fn on_duplicate(&mut self, cx: &mut RespCtx<'_>, r: &RoceRepr) {
        let Ok(info) = r.info() else { return };
        let psn = r.bth.psn;
        tracing::debug!(qpn = %self.qpn, %psn, epsn = %self.resp.epsn, opcode = %r.bth.opcode, "duplicate request");
        match info.kind {
            // Re-acknowledge (C9-105) every duplicate SEND/WRITE packet,
            // AckReq or not, with the newest PSN (epsn - 1), as rxe does
            // (seen in the lab's rc_pingpong capture: four ACKs for a
            // retransmitted four-packet SEND). Exception: when a READ or
            // atomic executed after the duplicate, the ACK carries the
            // duplicate's own PSN instead, since an ACK past a READ/atomic
            // the requester is re-issuing would be taken as an implied NAK
            // for it, and the re-issued responses would then be stale.
            OpKind::Send | OpKind::Write => {
                let rd_atomic_after = self.resp.resources.iter().any(|x| match *x {
                    RdResource::Read { first, .. } => first.is_after(psn),
                    RdResource::Atomic { psn: p, .. } => p.is_after(psn),
                });
                let ack_psn = if rd_atomic_after { psn } else { self.resp.epsn.sub(1) };
                self.send_ack(cx, ack_psn);
            }
            OpKind::ReadRequest => {
                let Some(reth) = r.reth else { return };
                if mutant::is(self.mutant, Mutant::NoDuplicateRead) {
                    return;
                }
                let found = self.resp.resources.iter().find_map(|x| match *x {
                    RdResource::Read { first, npkts } if psn.in_range(first, npkts) => {
                        Some((first, npkts))
                    }
                    _ => None,
                });
                let Some((first, npkts)) = found else {
                    tracing::debug!(qpn = %self.qpn, %psn, reason = "duplicate READ without resource", "drop");
                    return;
                };
                let len = u64::from(reth.dma_len);
                let k = psn.value().wrapping_sub(first.value()) & 0xFF_FFFF;
                if k + packets_for(len, self.mtu()) > npkts {
                    tracing::debug!(qpn = %self.qpn, %psn, reason = "duplicate READ overruns the original", "drop");
                    return;
                }
                if !self.read_allowed(cx, &reth) {
                    self.responder_error(cx, psn, NakCode::RemoteAccessError, None);
                    return;
                }
                self.resp.send_read_responses(psn, reth.va, reth.rkey, len);
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let found = self.resp.resources.iter().find_map(|x| match *x {
                    RdResource::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                match found {
                    Some(orig) => self.send_atomic_ack(cx, psn, orig),
                    None => tracing::debug!(qpn = %self.qpn, %psn,
                        reason = "duplicate atomic without resource", "drop"),
                }
            }
            // ---- IBA 1.5 (crate::mw): re-answer an ATOMIC_WRITE or a FLUSH ----
            OpKind::AtomicWrite | OpKind::Flush => {
                let Some(reth) = r.reth else { return };
                let known =
                    self.resp.resources.iter().any(
                        |x| matches!(*x, RdResource::Read { first, npkts: 1 } if first == psn),
                    );
                if known {
                    self.resp.send_read_responses(psn, reth.va, reth.rkey, 0);
                } else {
                    tracing::debug!(qpn = %self.qpn, %psn, reason = "duplicate FLUSH without resource", "drop");
                }
            }
            _ => {}
        }
    }

    /// A UD SEND (IBA §9.8.3): Q_Key check (§10.2.4) and length (at most
    /// the path MTU, C9-22), then the
    /// datagram lands in the next receive WQE after a 40-byte GRH area
    /// (for IPv4 the IP header fills its last 20 bytes, as rxe does).
    /// No PSN checks and no acknowledgements; problems drop the datagram.
    pub(crate) fn on_ud_request(
        &mut self,
        cx: &mut RespCtx<'_>,
        r: &RoceRepr,
        payload: &[u8],
        d: &Datagram,
    ) {
        // (the transport-check switch: an RC or UC SEND, without a DETH,
        // taken as a datagram from QP 0 with the right Q_Key)
        let loose = mutant::is(self.mutant, Mutant::NoTransportCheck).then(|| DethRepr {
            qkey: QKey::new(self.p.qkey),
            src_qp: Qpn::new(0),
            resv8: 0,
        });
        let Some(deth) = r.deth.or(loose) else { return };
        if deth.qkey.value() != self.p.qkey && !mutant::is(self.mutant, Mutant::NoQkeyCheck) {
            cx.ctrs.ud_dropped += 1;
            tracing::debug!(qpn = %self.qpn, qkey = %deth.qkey, reason = "Q_Key mismatch", "drop");
            return;
        }
        // A UD message is one packet of at most the path MTU (C9-22); a
        // longer one is dropped before it can take a receive.
        if payload.len() as u64 > self.mtu() && !mutant::is(self.mutant, Mutant::NoPacketLength) {
            cx.ctrs.ud_dropped += 1;
            tracing::debug!(qpn = %self.qpn, len = payload.len(), reason = "UD: payload over the path MTU", "drop");
            return;
        }
        if mutant::is(self.mutant, Mutant::UdChecksPsn) {
            if r.bth.psn != self.resp.epsn {
                return;
            }
            self.resp.epsn = r.bth.psn.next();
        }
        let Some(recv) = self.take_recv(cx.srqs, cx.sink) else {
            cx.ctrs.ud_dropped += 1;
            tracing::debug!(qpn = %self.qpn, reason = "UD: no receive WQE", "drop");
            if mutant::is(self.mutant, Mutant::UdNoReceiveErr) {
                self.enter_error(cx.sink);
            }
            return;
        };
        let mut grh = [0u8; GRH_LEN];
        if let Ok(h) = roce_packet::IpUdpHeader::build(&d.endpoints, &d.meta, d.payload.len()) {
            let ip = h.ip();
            let at = GRH_LEN.saturating_sub(ip.len());
            grh[at..at + ip.len().min(GRH_LEN)].copy_from_slice(&ip[..ip.len().min(GRH_LEN)]);
        }
        let area = match mutant::is(self.mutant, Mutant::UdNoGrhArea) {
            true => 0,
            false => GRH_LEN,
        };
        let total = (area + payload.len()) as u64;
        let mut wc = WorkCompletion {
            wr_id: recv.wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: total as u32,
            imm: r.immdt.filter(|_| !mutant::is(self.mutant, Mutant::ImmediateLost)),
            qp_num: self.qpn.value(),
            src_qp: deth.src_qp.value(),
            wc_flags: if r.immdt.is_some() {
                WcFlags::GRH | WcFlags::WITH_IMM
            } else {
                WcFlags::GRH
            },
        };
        if total > recv.length() {
            wc.status = WcStatus::LocLenErr;
        } else if cx.mem.scatter(self.init.pd, &recv.sg_list, 0, &grh).is_err()
            || cx.mem.scatter(self.init.pd, &recv.sg_list, area as u64, payload).is_err()
        {
            wc.status = WcStatus::LocProtErr;
        }
        if wc.status == WcStatus::Success {
            cx.ctrs.rdma_recvs += 1;
        } else {
            wc.byte_len = 0;
            wc.imm = None;
        }
        cx.sink.complete_se(self.init.recv_cq, wc, r.bth.solicited);
    }
}

/// Bytes reserved for the GRH at the start of a UD receive buffer.
pub const GRH_LEN: usize = 40;

/// The access a FLUSH needs for its FETH placement type (crate::mw).
fn flush_access(feth: u32) -> AccessFlags {
    let mut need = AccessFlags::EMPTY;
    if feth & 1 != 0 {
        need |= AccessFlags::FLUSH_GLOBAL;
    }
    if feth & 2 != 0 {
        need |= AccessFlags::FLUSH_PERSISTENT;
    }
    need
}
