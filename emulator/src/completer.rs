//! Completer (IBA §9.7.5.2 requester side of acknowledgements, §9.9.2
//! requester error behaviour; rxe's `rxe_comp.c`): turns ACKs, NAKs, read
//! responses and atomic ACKs into send completions.
//!
//! - An ACK with PSN n completes every WQE whose last PSN is at or before n
//!   (coalesced ACKs, C9-117); a NAK, read response or atomic ACK at n
//!   implicitly acknowledges everything before n (§9.7.5.2.1).
//! - Implied NAK (§9.7.5.2.3, C9-127): a READ/atomic whose response never
//!   came but that a later PSN acknowledges, or a read-response PSN gap,
//!   is retried from the first missing PSN.
//! - Retransmit timer (§9.7.6.1.3, C9-140/141): 4.096 µs × 2^timeout,
//!   restarted on forward progress; `retry_cnt` retries, then
//!   RETRY_EXC_ERR. **`retry_cnt` 7 means "retry forever", as in Linux
//!   rxe** (and what rdma-core's tools, which pass 7, get from it); IBA
//!   reserves "forever" for `rnr_retry` 7 only. We follow rxe so that a
//!   program behaves the same against us and against the kernel driver
//!   (see captures/host_udp: rxe retransmitting one SEND ~217 times with
//!   retry_cnt 7). Values 0..=6 are counted exactly; use them to get
//!   RETRY_EXC_ERR (a request or its response lost retry_cnt + 1 times in
//!   a row with no progress). With 7, a silent peer is retried until the
//!   application destroys or resets the QP, as with rxe.
//! - RNR NAK (§9.7.5.2.8): wait the NAK's timer, then resend from its PSN;
//!   `rnr_retry` 7 is infinite, otherwise exhaustion gives RNR_RETRY_EXC_ERR.
//! - PSN sequence error NAK: go back N from the NAKed PSN (counts as a
//!   retry, as in rxe); a NAK for a PSN after the oldest unacknowledged
//!   one acknowledges everything before it, which is progress. Other NAKs map to REM_INV_REQ_ERR, REM_ACCESS_ERR,
//!   REM_OP_ERR; every error moves the QP to ERR and flushes the rest.
//! - One retry per loss: once a go-back-N has been started (by a timeout,
//!   an implied NAK, a read-response gap or a PSN sequence error NAK), the
//!   responses still in flight from before the rewind — later ACKs past
//!   the missing READ/atomic response, further read-response gaps, repeated
//!   or duplicated NAKs for the same PSN — start no other retry and charge
//!   nothing; they are dropped (`stale_response`). Only forward progress
//!   (the oldest unacknowledged PSN advancing, which also resets the retry
//!   counters) or the retransmit timer ends that state. rxe keeps the same
//!   rule with its `comp.started_retry` flag.
//! - Stale and duplicate responses are dropped (C9-118); a response that
//!   does not fit the oldest outstanding WQE gives BAD_RESP_ERR. A READ
//!   re-issued for its remaining part restarts at READ RESPONSE FIRST, but
//!   late MIDDLE/LAST packets of an earlier issue for the same PSNs carry
//!   the same bytes and are accepted too.

use crate::dev::CompCtx;
use crate::mutant::{self, Mutant};

/// `retry_cnt` value that means "retry forever" (rxe's reading; IBA
/// gives this meaning only to `rnr_retry` 7).
pub const RETRY_FOREVER: u8 = 7;
use crate::qp::{CompState, Qp, QpParams, WqeState};
use crate::time::Instant;
use crate::wr::{CompletedBy, WcStatus};
use roce_packet::{NakCode, OpKind, Psn, RnrTimer, RoceRepr, Syndrome};

enum Implicit {
    /// Everything covered was completed.
    Done,
    /// A READ/atomic was covered without its response: retry from it.
    ImpliedNak,
}

/// The completer's own state: these take nothing of the QP but its `comp`
/// part and the retry attributes.
impl CompState {
    /// Forward progress: retry counters back to their attribute values, and
    /// any retry under way is over (a new loss may start a new one).
    fn progress(&mut self, p: &QpParams) {
        self.gap_retry = None;
        self.retry_left = p.retry_cnt;
        self.rnr_left = p.rnr_retry;
    }

    /// Everything before `psn` is acknowledged: move the oldest
    /// unacknowledged PSN up to it (never back); moving counts as progress.
    fn advance_to(&mut self, p: &QpParams, psn: Psn) {
        if psn.is_after(self.psn) {
            self.psn = psn;
            self.progress(p);
        }
    }
}

impl Qp {
    /// Complete SEND/WRITE WQEs acknowledged by `psn` (inclusive or not).
    fn complete_covered(&mut self, cx: &mut CompCtx<'_>, psn: Psn, inclusive: bool) -> Implicit {
        while let Some(w) = self.sq.front() {
            if w.state != WqeState::Sent {
                break;
            }
            let last = w.last_psn();
            let covered = if inclusive { psn.is_at_or_after(last) } else { psn.is_after(last) };
            if !covered {
                break;
            }
            if w.wr.opcode.is_read_or_atomic() && !mutant::is(self.mutant, Mutant::NoImpliedNak) {
                return Implicit::ImpliedNak;
            }
            self.comp.psn = last.next();
            self.comp.progress(&self.p);
            self.complete_front(cx.sink, cx.ctrs);
            if mutant::is(self.mutant, Mutant::AckCompletesOne) {
                break;
            }
        }
        Implicit::Done
    }

    /// A response shows that the request at `psn` (the oldest
    /// unacknowledged PSN) or its response went missing: go back N from
    /// it, unless a retry is already under way, in which case the response
    /// is one of those still in flight from before the rewind and is
    /// dropped without charging a retry.
    fn response_retry(&mut self, cx: &mut CompCtx<'_>, psn: Psn, why: &'static str) {
        if let Some(started) = self.comp.gap_retry {
            cx.ctrs.stale_response += 1;
            tracing::debug!(qpn = %self.qpn, %psn, %started, trigger = why,
                reason = "retry already under way", "drop");
            return;
        }
        self.retry_from(cx, psn, why);
    }

    fn restart_timer(&mut self, now: Instant) {
        if self.sq.iter().any(|w| w.state != WqeState::Posted) {
            self.arm_retrans(now);
        } else {
            self.comp.retrans_deadline = None;
        }
    }

    /// Go back N from `psn`, charging one retry; RETRY_EXC_ERR when none left.
    fn retry_from(&mut self, cx: &mut CompCtx<'_>, psn: Psn, why: &'static str) {
        let forever =
            self.p.retry_cnt == RETRY_FOREVER || mutant::is(self.mutant, Mutant::IgnoreRetryCount);
        if self.comp.retry_left == 0 && !forever {
            tracing::info!(qpn = %self.qpn, reason = why, "retry count exceeded");
            cx.ctrs.retry_exceeded_err += 1;
            self.fail_front(cx.sink, WcStatus::RetryExcErr);
            return;
        }
        self.comp.retry_left = self.comp.retry_left.saturating_sub(1);
        cx.ctrs.completer_retry_err += 1;
        tracing::debug!(qpn = %self.qpn, %psn, reason = why, retries_left = self.comp.retry_left, "retry");
        self.comp.gap_retry = Some(psn);
        self.rewind_to(psn);
        self.comp.retrans_deadline = None;
    }

    /// Retransmit timer fired.
    pub(crate) fn on_retrans_timeout(&mut self, cx: &mut CompCtx<'_>, _now: Instant) {
        self.comp.retrans_deadline = None;
        let outstanding = self.sq.iter().any(|w| w.state != WqeState::Posted);
        if !outstanding {
            return;
        }
        cx.ctrs.retransmit_timeouts += 1;
        tracing::debug!(qpn = %self.qpn, kind = "retransmit", comp_psn = %self.comp.psn, "retransmit timer fired");
        let psn = self.comp.psn;
        self.retry_from(cx, psn, "timeout");
    }

    /// RNR wait over: resend from the NAKed PSN (already rewound).
    pub(crate) fn on_rnr_timeout(&mut self, _now: Instant) {
        tracing::debug!(qpn = %self.qpn, kind = "rnr", psn = %self.req.psn, "RNR timer fired");
        self.comp.rnr_deadline = None;
    }

    /// Handle one response packet (ACK, NAK, read response, atomic ACK).
    pub(crate) fn on_response(
        &mut self,
        cx: &mut CompCtx<'_>,
        now: Instant,
        r: &RoceRepr,
        payload: &[u8],
    ) {
        let psn = r.bth.psn;
        let Ok(info) = r.info() else { return };
        // Stale (before the oldest unacknowledged PSN) or ghost (never sent).
        if psn.is_before(self.comp.psn) || psn.is_at_or_after(self.req.psn) {
            if info.kind == OpKind::Ack
                && psn.is_before(self.comp.psn)
                && mutant::is(self.mutant, Mutant::StaleAckCompletes)
                && self.sq.front().is_some_and(|w| w.state == WqeState::Sent)
            {
                self.complete_front(cx.sink, cx.ctrs);
                return;
            }
            cx.ctrs.stale_response += 1;
            tracing::debug!(qpn = %self.qpn, %psn, comp_psn = %self.comp.psn, req_psn = %self.req.psn,
                reason = "stale or ghost response", "drop");
            return;
        }
        if self.sq.iter().all(|w| w.state == WqeState::Posted) {
            cx.ctrs.stale_response += 1;
            return;
        }
        let syndrome = r.aeth.map(|a| a.syndrome);
        match (info.kind, syndrome) {
            (OpKind::Ack, Some(Syndrome::Ack { .. })) => {
                let before = self.comp.psn;
                if let Implicit::ImpliedNak = self.complete_covered(cx, psn, true) {
                    let p = self.comp.psn;
                    self.response_retry(cx, p, "implied NAK (ACK past READ/atomic)");
                    return;
                }
                let in_rd = self.sq.front().is_some_and(|w| {
                    w.wr.opcode.is_read_or_atomic() && w.state != WqeState::Posted
                });
                if !in_rd {
                    self.comp.advance_to(&self.p, psn.next());
                }
                // the timer restarts on progress only (C9-140): an ACK that
                // acknowledges nothing new must not postpone a timeout
                if self.comp.psn != before {
                    self.restart_timer(now);
                }
            }
            (OpKind::Ack, Some(Syndrome::RnrNak(t))) => self.on_rnr_nak(cx, now, psn, t),
            (OpKind::Ack, Some(Syndrome::Nak(code))) => {
                tracing::debug!(qpn = %self.qpn, %psn, code = code.name(), "NAK received");
                if code == NakCode::PsnSequenceError {
                    cx.ctrs.rcvd_seq_err += 1;
                }
                if let Implicit::ImpliedNak = self.complete_covered(cx, psn, false) {
                    // the NAK acknowledges a READ/atomic whose response was
                    // lost: resend from it (its response is still owed)
                    let p = self.comp.psn;
                    self.response_retry(cx, p, "implied NAK (NAK past READ/atomic)");
                    return;
                }
                let wrong = mutant::is(self.mutant, Mutant::WrongNakStatus);
                let status = match code {
                    NakCode::PsnSequenceError => {
                        // everything before `psn` arrived; a NAK for the
                        // PSN a retry already rewound to (a duplicate, or
                        // one sent before the resent packets arrived)
                        // starts no second go-back-N and charges nothing
                        self.comp.advance_to(&self.p, psn);
                        if !mutant::is(self.mutant, Mutant::IgnoreSequenceNak) {
                            self.response_retry(cx, psn, "PSN sequence error NAK");
                        }
                        return;
                    }
                    // (the switch rotates the three error statuses)
                    NakCode::InvalidRequest if wrong => WcStatus::RemAccessErr,
                    NakCode::RemoteAccessError if wrong => WcStatus::RemOpErr,
                    NakCode::RemoteOperationalError if wrong => WcStatus::RemInvReqErr,
                    NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                    NakCode::InvalidRdRequest | NakCode::Reserved(_) => WcStatus::RemInvReqErr,
                };
                self.fail_front(cx.sink, status);
            }
            (OpKind::ReadResponse, _) => self.on_read_response(cx, now, r, payload),
            (OpKind::AtomicAck, Some(Syndrome::Ack { .. })) => self.on_atomic_ack(cx, now, r),
            _ => {
                cx.ctrs.stale_response += 1;
                tracing::debug!(qpn = %self.qpn, %psn, reason = "reserved AETH syndrome", "drop");
            }
        }
    }

    /// An RNR NAK at `psn` (§9.7.5.2.8): what it acknowledges before `psn`
    /// completes, then the request waits out the NAK's timer, or fails
    /// with RNR_RETRY_EXC_ERR when `rnr_retry` is spent.
    fn on_rnr_nak(&mut self, cx: &mut CompCtx<'_>, now: Instant, psn: Psn, t: RnrTimer) {
        cx.ctrs.rcvd_rnr_err += 1;
        if let Implicit::ImpliedNak = self.complete_covered(cx, psn, false) {
            let p = self.comp.psn;
            self.response_retry(cx, p, "implied NAK (RNR NAK past READ/atomic)");
            return;
        }
        self.comp.advance_to(&self.p, psn);
        if self.comp.rnr_left == 0 && !mutant::is(self.mutant, Mutant::IgnoreRetryCount) {
            tracing::info!(qpn = %self.qpn, %psn, "RNR retry count exceeded");
            cx.ctrs.retry_rnr_exceeded_err += 1;
            self.fail_front(cx.sink, crate::wr::WcStatus::RnrRetryExcErr);
            return;
        }
        if self.p.rnr_retry != 7 {
            self.comp.rnr_left = self.comp.rnr_left.saturating_sub(1);
        }
        let wait = match mutant::is(self.mutant, Mutant::RnrRetryAtOnce) {
            true => core::time::Duration::ZERO,
            false => core::time::Duration::from_micros(u64::from(t.micros())),
        };
        tracing::debug!(qpn = %self.qpn, %psn, wait_us = t.micros(), "RNR NAK: waiting");
        match mutant::is(self.mutant, Mutant::RnrSkipsRequest) {
            true => self.rewind_to(psn.next()),
            false => self.rewind_to(psn),
        }
        self.comp.rnr_deadline = Some(now + wait);
        self.comp.retrans_deadline = None;
    }

    fn on_read_response(
        &mut self,
        cx: &mut CompCtx<'_>,
        now: Instant,
        r: &RoceRepr,
        payload: &[u8],
    ) {
        let psn = r.bth.psn;
        if mutant::is(self.mutant, Mutant::ReadResponseNoImplicitAck) {
            // (the requests before the READ stay unacknowledged)
        } else if let Implicit::ImpliedNak = self.complete_covered(cx, psn, false) {
            let p = self.comp.psn;
            self.response_retry(cx, p, "implied NAK (response past READ/atomic)");
            return;
        }
        let mtu = self.mtu();
        let Some(w) = self.sq.front() else { return };
        // READ, or FLUSH's zero-length READ RESPONSE ONLY (crate::mw)
        if w.wr.opcode.info().completed_by != CompletedBy::ReadResponse || !w.contains(psn) {
            tracing::debug!(qpn = %self.qpn, %psn, "read response does not match the oldest WQE");
            self.fail_front(cx.sink, WcStatus::BadRespErr);
            return;
        }
        if psn != self.comp.psn && mutant::is(self.mutant, Mutant::IgnoreReadGap) {
            return;
        }
        if psn != self.comp.psn {
            // a read response went missing: implied NAK from the first one
            // missing, once per gap (later gap packets are dropped)
            let p = self.comp.psn;
            self.response_retry(cx, p, "implied NAK (read response gap)");
            return;
        }
        let k = u64::from(psn.value().wrapping_sub(w.first_psn.value()) & 0xFF_FFFF);
        let off = k * mtu;
        // (a FLUSH's or an ATOMIC WRITE's answer carries no data: IBA 1.5)
        let remaining = match w.wr.opcode.lands_locally() {
            true => w.length.saturating_sub(off),
            false => 0,
        };
        let at = match mutant::is(self.mutant, Mutant::ReadResponseOffsetStuck) {
            true => 0,
            false => off,
        };
        let Ok(info) = r.info() else { return };
        // The packet at `psn` may come from any issue of this READ that
        // started at or before `psn`: a re-issue at `read_start` answers
        // with FIRST/ONLY there, while a late response of an earlier issue
        // carries MIDDLE/LAST for the same PSN — same bytes, same offset
        // (C9-106: a re-issued READ covers the remaining part). So: the
        // READ's first PSN must start, only an issue's start may start,
        // and the last packet (and only it) must end.
        let pos = info.position;
        let start_ok = if pos.starts() {
            psn == w.read_start || psn == w.first_psn
        } else {
            psn != w.first_psn
        };
        if !start_ok
            || pos.ends() != (remaining <= mtu)
            || payload.len() as u64 != remaining.min(mtu)
        {
            tracing::debug!(qpn = %self.qpn, %psn, read_start = %w.read_start, got = ?pos,
                len = payload.len(), "read response of unexpected position/length");
            self.fail_front(cx.sink, WcStatus::BadRespErr);
            return;
        }
        // (the SGE list borrowed, not cloned: this runs once per packet)
        if cx.mem.scatter(self.init.pd, &w.wr.sg_list, at, payload).is_err() {
            self.fail_front(cx.sink, WcStatus::LocProtErr);
            return;
        }
        self.comp.psn = psn.next();
        self.comp.progress(&self.p);
        if pos.ends() {
            self.complete_front(cx.sink, cx.ctrs);
        }
        self.restart_timer(now);
    }

    fn on_atomic_ack(&mut self, cx: &mut CompCtx<'_>, now: Instant, r: &RoceRepr) {
        let psn = r.bth.psn;
        if let Implicit::ImpliedNak = self.complete_covered(cx, psn, false) {
            let p = self.comp.psn;
            self.response_retry(cx, p, "implied NAK (atomic ACK past READ/atomic)");
            return;
        }
        let Some(w) = self.sq.front() else { return };
        if w.wr.opcode.info().completed_by != CompletedBy::AtomicAck
            || w.first_psn != psn
            || w.state != WqeState::Sent
        {
            self.fail_front(cx.sink, WcStatus::BadRespErr);
            return;
        }
        let orig = r.atomic_ack_eth.map(|a| a.orig_rem_data).unwrap_or(0);
        let sges = w.wr.sg_list.clone();
        if !mutant::is(self.mutant, Mutant::AtomicResultLost)
            && cx.mem.scatter(self.init.pd, &sges, 0, &orig.to_le_bytes()).is_err()
        {
            self.fail_front(cx.sink, WcStatus::LocProtErr);
            return;
        }
        self.comp.psn = psn.next();
        self.comp.progress(&self.p);
        self.complete_front(cx.sink, cx.ctrs);
        self.restart_timer(now);
    }
}
