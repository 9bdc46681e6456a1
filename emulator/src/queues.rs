//! The device's completion queues and shared receive queues: where the
//! roles put their results ([`CqSink`]: completions, completion events and
//! the asynchronous events raised on the same paths) and where a QP on an
//! SRQ takes its receive WQEs ([`SrqTable`]).

use crate::objects::{AsyncEvent, CqHandle, PdHandle, SrqAttr, SrqHandle};
use crate::wr::{RecvWr, WcStatus, WorkCompletion};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;

pub(crate) struct Srq {
    pub pd: PdHandle,
    pub attr: SrqAttr,
    pub wrs: VecDeque<RecvWr>,
    pub users: u32,
}

/// The shared receive queues, by handle.
pub(crate) type SrqTable = HashMap<SrqHandle, Srq>;

pub(crate) struct Cq {
    pub depth: usize,
    pub entries: VecDeque<WorkCompletion>,
    pub errored: bool,
    pub users: u32,
    /// `req_notify_cq` armed: None, or Some(solicited_only).
    pub armed: Option<bool>,
}

impl Cq {
    /// Push a completion; `false` on overflow (the CQ enters error).
    pub fn push(&mut self, wc: WorkCompletion) -> bool {
        if self.errored {
            return false;
        }
        if self.entries.len() >= self.depth {
            self.errored = true;
            return false;
        }
        self.entries.push_back(wc);
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
        self.complete_se(cq, wc, false);
    }

    /// [`CqSink::complete`] for a receive whose last packet had the Solicited
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
            self.overflows += 1;
            self.events.push_back(AsyncEvent::CqErr(cq));
            self.errored_cqs.push(cq);
        }
    }
}
