//! The device's completion queues and shared receive queues: where the
//! roles put their results ([`CqSink`]: completions, completion events and
//! the asynchronous events raised on the same paths) and where a QP on an
//! SRQ takes its receive WQEs ([`SrqTable`]).

use crate::objects::{AsyncEvent, CqHandle, PdHandle, SrqAttr, SrqHandle};
use crate::wr::{RecvWr, WcStatus, WorkCompletion};
use roce_packet::Qpn;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;

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
/// completed before it on that QP, as mlx5 frees them), for the QP of that
/// QPN in that incarnation only (a QP reset or destroyed since, or another
/// QP now holding the QPN, is not touched). A receive completion frees
/// nothing ([`SqRelease::is_empty`]).
///
/// [`Hca::poll_cq`](crate::Hca::poll_cq) applies it itself; a consumer that
/// takes completions ahead of the program ([`Hca::poll_cq_deferred`](crate::Hca::poll_cq_deferred))
/// hands it back with [`Hca::release_sq`](crate::Hca::release_sq) when the
/// program reads the completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqRelease {
    pub(crate) qpn: Qpn,
    pub(crate) epoch: u32,
    pub(crate) slots: u32,
}

impl SqRelease {
    /// Frees nothing (a receive completion).
    pub fn is_empty(&self) -> bool {
        self.slots == 0
    }

    /// The number of send-queue slots it frees.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Add `other` to `self` when both are for the same QP incarnation
    /// (a poll's run of completions of one QP is released at once).
    pub(crate) fn merge(&mut self, other: SqRelease) -> bool {
        if self.qpn == other.qpn && self.epoch == other.epoch {
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

pub(crate) struct Cq {
    pub depth: usize,
    pub entries: VecDeque<Cqe>,
    pub errored: bool,
    pub users: u32,
    /// `req_notify_cq` armed: None, or Some(solicited_only).
    pub armed: Option<bool>,
}

impl Cq {
    /// Push a completion; `false` on overflow (the CQ enters error).
    pub fn push(&mut self, cqe: Cqe) -> bool {
        if self.errored {
            return false;
        }
        if self.entries.len() >= self.depth {
            self.errored = true;
            return false;
        }
        self.entries.push_back(cqe);
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
        let was = c.errored;
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
