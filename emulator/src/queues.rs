//! The device's completion queues and shared receive queues: where the
//! roles put their results ([`CqSink`]: completions, completion events and
//! the asynchronous events raised on the same paths) and where a QP on an
//! SRQ takes its receive WQEs ([`SrqTable`]).

use crate::objects::{AsyncEvent, CqHandle, PdHandle, SrqAttr, SrqHandle};
use crate::wr::{RecvWr, WcStatus, WorkCompletion};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) struct Srq {
    pub pd: PdHandle,
    pub attr: SrqAttr,
    pub wrs: VecDeque<RecvWr>,
    pub users: u32,
    /// An XRC SRQ (`IBV_SRQT_XRC`): its XRC domain and the CQ its
    /// receives complete on (an XRC target QP has none of its own).
    pub xrc: Option<(crate::objects::XrcdHandle, CqHandle)>,
}

/// The shared receive queues, by handle.
pub(crate) type SrqTable = HashMap<SrqHandle, Srq>;

/// What polling a send completion gives back to its QP: the send-queue
/// slots it frees (its own WQE's and those of the unsignaled WQEs that
/// completed before it on that QP, as mlx5 frees them), for the QP
/// incarnation that completed it only (a QP reset or destroyed since, or
/// another QP now holding the QPN, is not touched: each incarnation counts
/// its freed slots in a counter of its own). A receive completion frees
/// nothing ([`SqRelease::is_empty`]).
///
/// Freeing is one atomic addition to that counter, so whoever polls does it
/// without the device lock ([`CqRing`]); a consumer that takes completions
/// ahead of the program ([`Hca::poll_cq_deferred`](crate::Hca::poll_cq_deferred))
/// calls [`SqRelease::release`] when the program reads the completion.
#[derive(Clone, Debug, Default)]
pub struct SqRelease {
    pub(crate) freed: Option<Arc<AtomicU32>>,
    pub(crate) slots: u32,
}

impl PartialEq for SqRelease {
    fn eq(&self, o: &SqRelease) -> bool {
        self.slots == o.slots && self.same_qp(o)
    }
}

impl Eq for SqRelease {}

impl SqRelease {
    /// Frees nothing (a receive completion).
    pub fn is_empty(&self) -> bool {
        self.slots == 0
    }

    /// The number of send-queue slots it frees.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Free the slots (once: the release is consumed).
    pub fn release(self) {
        if let (Some(f), n) = (&self.freed, self.slots) {
            if n > 0 {
                f.fetch_add(n, Ordering::AcqRel);
            }
        }
    }

    fn same_qp(&self, o: &SqRelease) -> bool {
        match (&self.freed, &o.freed) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// Add `other` to `self` when both are for the same QP incarnation
    /// (a poll's run of completions of one QP is released at once).
    pub(crate) fn merge(&mut self, other: &SqRelease) -> bool {
        if self.same_qp(other) {
            self.slots = self.slots.saturating_add(other.slots);
            return true;
        }
        false
    }
}

/// A completion in its CQ, with what polling it frees.
pub(crate) struct Cqe {
    pub wc: WorkCompletion,
    pub rel: SqRelease,
}

/// A QP's receive queue as the program posts to it: `ibv_post_recv`
/// appends under this queue's own lock, never the device's (issue 41's
/// second step); the device moves what was posted into the QP's queue when
/// it needs a receive WQE or changes the QP's state. `held` counts the WRs
/// the device has not taken yet (here and in the QP's queue), against
/// `max_recv_wr`; `state` is the QP's state as the device last set it, so
/// that a post in RESET or ERR takes the device's path (an error, or a
/// flush completion at once).
pub struct RqRing {
    q: Mutex<VecDeque<RecvWr>>,
    /// WRs in `q` (read without the lock).
    len: AtomicUsize,
    /// WRs posted and not taken by the device.
    held: AtomicU32,
    /// The QP's state (`QpState as u8`).
    state: std::sync::atomic::AtomicU8,
}

impl std::fmt::Debug for RqRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RqRing").field("len", &self.len()).field("held", &self.held()).finish()
    }
}

/// Why [`RqRing::post`] did not take a WR.
#[derive(Debug)]
pub enum RingPost {
    /// `max_recv_wr` WRs are held already.
    Full,
    /// More SGEs than the QP takes.
    TooManySge(usize),
    /// The QP is in RESET or ERR: the device decides (the WR is returned).
    Device(RecvWr),
}

impl RqRing {
    fn new() -> RqRing {
        RqRing {
            q: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
            held: AtomicU32::new(0),
            state: std::sync::atomic::AtomicU8::new(crate::qp_attr::QpState::Reset as u8),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<RecvWr>> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// WRs posted here and not moved to the QP yet.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Nothing posted here waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// WRs the device has not taken (here and in the QP's queue).
    pub fn held(&self) -> u32 {
        self.held.load(Ordering::Acquire)
    }

    /// Whether the QP is in a state whose posts this queue takes (INIT
    /// and later, not ERR).
    fn open(&self) -> bool {
        use crate::qp_attr::QpState as S;
        let s = self.state.load(Ordering::SeqCst);
        s != S::Reset as u8 && s != S::Err as u8
    }

    pub(crate) fn set_state(&self, s: crate::qp_attr::QpState) {
        self.state.store(s as u8, Ordering::SeqCst);
    }

    /// `ibv_post_recv` of `wr` on a QP of `max_wr` WRs and `max_sge` SGEs
    /// (no SRQ) without the device: appended, or why not. A QP that moved
    /// to RESET or ERR meanwhile gets its WR back ([`RingPost::Device`]):
    /// the caller takes the device's path ([`crate::Hca::post_recv`]),
    /// which also settles what this queue still holds.
    pub fn post(&self, wr: RecvWr, max_wr: u32, max_sge: u32) -> Result<(), RingPost> {
        if !self.open() {
            return Err(RingPost::Device(wr));
        }
        if wr.sg_list.len() > max_sge as usize {
            return Err(RingPost::TooManySge(wr.sg_list.len()));
        }
        if !self.reserve(max_wr) {
            return Err(RingPost::Full);
        }
        let mut q = self.lock();
        q.push_back(wr);
        self.len.store(q.len(), Ordering::Release);
        drop(q);
        // (a state change to RESET or ERR sets `state` before the device
        // looks at this queue: if it looked before the push, the state
        // says so now, and the caller has the device settle the queue)
        if !self.open() {
            let mut q = self.lock();
            if let Some(wr) = q.pop_back() {
                self.len.store(q.len(), Ordering::Release);
                self.held.fetch_sub(1, Ordering::AcqRel);
                return Err(RingPost::Device(wr));
            }
        }
        Ok(())
    }

    /// Move what was posted here to the end of `rq` (the device, under its
    /// lock).
    pub(crate) fn drain_into(&self, rq: &mut VecDeque<RecvWr>) {
        if self.is_empty() {
            return;
        }
        let mut q = self.lock();
        rq.extend(q.drain(..));
        self.len.store(0, Ordering::Release);
    }

    /// The device took `n` WRs (consumed or flushed).
    pub(crate) fn took(&self, n: u32) {
        debug_assert!(n <= self.held(), "took {n} of {} held", self.held());
        self.held.fetch_sub(n.min(self.held()), Ordering::AcqRel);
    }

    /// A WR went back (a UC message dropped: its receive is reused).
    pub(crate) fn returned(&self) {
        self.held.fetch_add(1, Ordering::AcqRel);
    }

    /// One more WR held, if `max_wr` allows (a post here, or the device's
    /// own, `Hca::post_recv`).
    pub(crate) fn reserve(&self, max_wr: u32) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| (h < max_wr).then_some(h + 1))
            .is_ok()
    }
}

impl Default for RqRing {
    fn default() -> RqRing {
        RqRing::new()
    }
}

/// A completion queue's entries, shared between the device (which writes
/// them, under its lock) and the program's threads (which poll them under
/// the CQ's own lock, never the device's: a poll and the device's work on
/// other queues do not wait for each other; an empty poll takes no lock).
#[derive(Default)]
pub struct CqRing {
    q: Mutex<VecDeque<Cqe>>,
    /// Entries in `q` (read without the lock).
    len: AtomicUsize,
    /// The CQ overflowed (IBA 11.4.2.1): once its entries are polled,
    /// polls fail.
    errored: AtomicBool,
}

impl std::fmt::Debug for CqRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqRing").field("len", &self.len()).finish()
    }
}

impl CqRing {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Cqe>> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// No completion waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the CQ overflowed.
    pub fn errored(&self) -> bool {
        self.errored.load(Ordering::Acquire)
    }

    /// `ibv_poll_cq` into `out`: how many completions were written, oldest
    /// first; `Err(())` once an overflowed CQ is empty. Frees the send-queue
    /// slots the completions free.
    #[allow(clippy::result_unit_err)]
    pub fn poll_into(&self, out: &mut [WorkCompletion]) -> Result<usize, ()> {
        if self.is_empty() {
            // (the flag is set after the last entry went in)
            return if self.errored() && self.is_empty() { Err(()) } else { Ok(0) };
        }
        let mut q = self.lock();
        let n = out.len().min(q.len());
        // one release per run of CQEs of one QP (usually the whole batch)
        let mut run = SqRelease::default();
        for (slot, e) in out.iter_mut().zip(q.drain(..n)) {
            if !e.rel.is_empty() && !run.merge(&e.rel) {
                std::mem::replace(&mut run, e.rel).release();
            }
            *slot = e.wc;
        }
        self.len.store(q.len(), Ordering::Release);
        drop(q);
        run.release();
        Ok(n)
    }

    /// Up to `max` completions with what each frees, nothing freed now
    /// (see [`SqRelease`]); `Err(())` once an overflowed CQ is empty.
    #[allow(clippy::result_unit_err)]
    pub fn poll_deferred(&self, max: usize) -> Result<Vec<(WorkCompletion, SqRelease)>, ()> {
        if self.is_empty() && self.errored() {
            return Err(());
        }
        let mut q = self.lock();
        let n = max.min(q.len());
        let v = q.drain(..n).map(|e| (e.wc, e.rel)).collect();
        self.len.store(q.len(), Ordering::Release);
        Ok(v)
    }
}

pub(crate) struct Cq {
    pub depth: usize,
    pub ring: Arc<CqRing>,
    pub users: u32,
    /// `req_notify_cq` armed: None, or Some(solicited_only).
    pub armed: Option<bool>,
}

impl Cq {
    pub fn new(depth: usize) -> Cq {
        Cq { depth, ring: Arc::default(), users: 0, armed: None }
    }

    /// Whether the CQ overflowed.
    pub fn errored(&self) -> bool {
        self.ring.errored()
    }

    /// Push a completion; `false` on overflow (the CQ enters error).
    pub fn push(&mut self, cqe: Cqe) -> bool {
        if self.ring.errored() {
            return false;
        }
        let mut q = self.ring.lock();
        if q.len() >= self.depth {
            self.ring.errored.store(true, Ordering::Release);
            return false;
        }
        q.push_back(cqe);
        self.ring.len.store(q.len(), Ordering::Release);
        true
    }
}

/// What the application polls: the CQs, the completion channel's events,
/// and the asynchronous events (a CQ overflow, a QP entering ERR, an SRQ
/// limit — raised on the same paths that complete work).
#[derive(Default)]
pub(crate) struct CqSink {
    pub cqs: HashMap<CqHandle, Cq>,
    /// CQs whose armed notification fired (`ibv_get_cq_event`).
    pub comp_events: VecDeque<CqHandle>,
    pub events: VecDeque<AsyncEvent>,
    /// CQs that overflowed; their QPs are moved to ERR by
    /// [`Hca::settle`](crate::Hca::settle).
    pub errored_cqs: Vec<CqHandle>,
    /// CQ overflows so far (reported as [`crate::Counters::cq_overflow`]).
    pub overflows: u64,
}

impl CqSink {
    /// Queue a completion; on overflow the CQ enters error (IBA §11.4.2.1)
    /// and its QPs are moved to ERR by [`Hca::settle`](crate::Hca::settle).
    pub fn complete(&mut self, cq: CqHandle, wc: WorkCompletion) {
        self.push_cqe(cq, Cqe { wc, rel: SqRelease::default() }, false);
    }

    /// [`CqSink::complete`] for a send completion that frees `rel`'s
    /// send-queue slots when it is polled (lost with it on overflow, as
    /// the slots of a CQE an HCA could not write).
    pub fn complete_send(&mut self, cq: CqHandle, wc: WorkCompletion, rel: SqRelease) {
        self.push_cqe(cq, Cqe { wc, rel }, false);
    }

    /// [`CqSink::complete`] for a receive whose last packet had the Solicited
    /// Event bit `se`: a CQ armed solicited-only notifies only on such
    /// completions and on errors (IBA §11.4.2.2).
    pub fn complete_se(&mut self, cq: CqHandle, wc: WorkCompletion, se: bool) {
        self.push_cqe(cq, Cqe { wc, rel: SqRelease::default() }, se);
    }

    fn push_cqe(&mut self, cq: CqHandle, cqe: Cqe, se: bool) {
        let Some(c) = self.cqs.get_mut(&cq) else { return };
        let wc = &cqe.wc;
        let was = c.errored();
        let notify = match c.armed {
            Some(false) => true,
            Some(true) => wc.status != WcStatus::Success || se,
            None => false,
        };
        let pushed = c.push(cqe);
        if pushed && notify {
            c.armed = None;
            self.comp_events.push_back(cq);
        }
        if !pushed && !was {
            tracing::warn!(cq = cq.0, "CQ overflow");
            self.overflows += 1;
            self.events.push_back(AsyncEvent::CqErr(cq));
            self.errored_cqs.push(cq);
        }
    }
}

#[cfg(test)]
mod ring_tests {
    use super::*;
    use crate::wr::{WcFlags, WcOpcode};

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id: id,
            opcode: WcOpcode::RdmaWrite,
            wc_flags: WcFlags(0),
            ..WorkCompletion::EMPTY
        }
    }

    /// The program polls the ring alone (no device), frees
    /// the send-queue slots through the QP's counter, and meets the
    /// overflow only once the entries before it are polled.
    #[test]
    fn a_cq_is_polled_without_the_device_and_frees_slots_by_counter() {
        let mut cq = Cq::new(3);
        let freed: Arc<AtomicU32> = Arc::default();
        let rel = |n| SqRelease { freed: Some(freed.clone()), slots: n };
        assert!(cq.push(Cqe { wc: wc(1), rel: rel(2) }));
        assert!(cq.push(Cqe { wc: wc(2), rel: rel(1) }));
        assert!(cq.push(Cqe { wc: wc(3), rel: SqRelease::default() }));
        assert!(!cq.push(Cqe { wc: wc(4), rel: rel(1) }), "depth 3: overflow");
        // (only the ring: no device in reach)
        let ring: Arc<CqRing> = cq.ring.clone();
        drop(cq);
        let mut two = [WorkCompletion::EMPTY; 2];
        let n = ring.poll_into(&mut two).unwrap();
        let ids = two.map(|w| w.wr_id);
        assert_eq!((n, ids), (2, [1, 2]));
        assert_eq!(freed.load(Ordering::Acquire), 3, "one run of one QP: 2 + 1 slots");
        let mut out = [WorkCompletion::EMPTY; 4];
        assert_eq!(ring.poll_into(&mut out), Ok(1), "what it holds first");
        assert_eq!(out[0].wr_id, 3);
        assert_eq!(ring.poll_into(&mut out), Err(()), "then the overflow");
        assert_eq!(freed.load(Ordering::Acquire), 3, "the lost CQE freed nothing");
    }
}
