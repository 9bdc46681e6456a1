//! A QP's send queue as the program posts to it (issue 41's third step):
//! `ibv_post_send` checks the work request against what the device last
//! published of the QP ([`SqShape`]: its state, capabilities, type, MTU),
//! appends the WQE under this queue's own lock, never the device's, and
//! rings the device's [`Doorbell`] when the queue was empty. The device
//! answers the doorbells when it next runs (`Hca::poll_transmit`: the
//! engine's flush after the post, or its next round) and moves the WQEs
//! into the QP's send queue, in order.
//!
//! Only a QP in RTS takes posts here; in any other state the poster gets
//! its WR back ([`RingSend::Device`]) and takes the device's path (an
//! error, SQD's queue, or ERR's flush completion). A state change takes
//! this queue's lock: it moves what was posted into the QP before the new
//! state is published, so a post either lands before the change (and is
//! flushed, drained or discarded with the rest) or sees the new state.
//!
//! Send-queue slots: `posted` counts the WQEs of this incarnation of the
//! QP (both paths), `freed` the slots polls gave back ([`crate::SqRelease`]);
//! a post is refused with `QueueFull` when `posted - freed` reaches
//! `max_send_wr`. A reset starts a new incarnation (new counters; the
//! completions still in the CQs free nothing).

use crate::error::PostSendError;
use crate::qp_attr::{QpCap, QpState, QpType};
use crate::wr::{SendFlags, SendWr, WrOpcode};
use roce_packet::{Psn, Qpn};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Progress of a send WQE through the requester and completer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WqeState {
    /// Not started; has no PSNs yet.
    Posted,
    /// Some packets sent (`sent_bytes` is the offset of the next one).
    Sending,
    /// Every packet sent, waiting for its acknowledgement/response.
    Sent,
}

pub(crate) struct SendWqe {
    pub wr: SendWr,
    pub state: WqeState,
    pub length: u64,
    pub first_psn: Psn,
    /// PSNs the WQE consumes (READ: the number of response packets).
    pub npkts: u32,
    /// Offset of the next byte the requester sends (or, for READ, requests).
    pub sent_bytes: u64,
    pub signaled: bool,
    /// READ: PSN of the latest (re)issued request; its responses restart
    /// at READ_RESPONSE_FIRST there.
    pub read_start: Psn,
}

impl SendWqe {
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.saturating_sub(1))
    }
    pub fn contains(&self, p: Psn) -> bool {
        self.state != WqeState::Posted && p.in_range(self.first_psn, self.npkts)
    }
}

/// What a post is checked against: the QP as the device last published it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SqShape {
    pub state: QpState,
    pub cap: QpCap,
    pub qp_type: QpType,
    /// The device's `max_msg_sz`.
    pub max_msg: u32,
    /// The path MTU in bytes (a UD SEND in RTS must fit).
    pub mtu: u64,
    pub max_rd_atomic: u8,
    pub sig_all: bool,
    /// The `RtrAcceptsPosts` mutation switch is on (`crate::mutant`).
    pub rtr_takes: bool,
}

/// `ibv_post_send`'s checks (rdma-core's errnos: see `PostSendError`), in
/// the order the device has always made them; `held` is the slots in use.
pub(crate) fn check(s: &SqShape, wr: SendWr, held: u32) -> Result<SendWqe, PostSendError> {
    // SQD queues new WRs without starting them (IBA §10.3.1)
    let rtr_takes = s.state == QpState::Rtr && s.rtr_takes;
    if !s.state.allows().post_send && !rtr_takes {
        return Err(PostSendError::InvalidState(s.state));
    }
    let cap = s.cap;
    // slots are freed when completions are polled (crate::SqRelease)
    if held >= cap.max_send_wr {
        return Err(PostSendError::QueueFull { max: cap.max_send_wr });
    }
    if wr.flags.contains(SendFlags::INLINE) {
        if wr.opcode.lands_locally() {
            return Err(PostSendError::InlineNotAllowed);
        }
        // ATOMIC_WRITE's 8 bytes are its operand (`ibv_wr_atomic_write`
        // passes them by pointer), not inline data of the QP's budget.
        let operand = wr.opcode == WrOpcode::AtomicWrite && wr.inline_data.len() == 8;
        if !operand && wr.inline_data.len() > cap.max_inline_data as usize {
            return Err(PostSendError::InlineTooLarge {
                len: wr.inline_data.len(),
                max: cap.max_inline_data,
            });
        }
    } else if wr.sg_list.len() > cap.max_send_sge as usize {
        return Err(PostSendError::TooManySge { n: wr.sg_list.len(), max: cap.max_send_sge });
    }
    let length = wr.length();
    if length > u64::from(s.max_msg) {
        return Err(PostSendError::MessageTooLarge { len: length, max: s.max_msg });
    }
    // which QP types may post it: the work-request opcode table
    if !wr.opcode.info().qp_types.contains(s.qp_type) {
        return Err(PostSendError::UnsupportedOpcode { opcode: wr.opcode, qp_type: s.qp_type });
    }
    if s.qp_type == QpType::Ud {
        if wr.ud.is_none() {
            return Err(PostSendError::MissingUdDest);
        }
        if length > s.mtu && s.state == QpState::Rts {
            return Err(PostSendError::UdMessageTooLarge { len: length, mtu: s.mtu });
        }
    }
    if wr.opcode.is_atomic() && (wr.sg_list.len() != 1 || length != 8) {
        return Err(PostSendError::BadAtomicSge);
    }
    // IBA 1.5 ATOMIC_WRITE carries exactly 8 bytes (crate::mw)
    if wr.opcode == WrOpcode::AtomicWrite && length != 8 {
        tracing::debug!(length, "ATOMIC_WRITE rejected: not 8 bytes");
        return Err(PostSendError::BadAtomicSge);
    }
    if wr.opcode.is_read_or_atomic() && s.max_rd_atomic == 0 && s.state == QpState::Rts {
        return Err(PostSendError::NoRdAtomic);
    }
    let signaled = s.sig_all || wr.flags.contains(SendFlags::SIGNALED);
    Ok(SendWqe {
        wr,
        state: WqeState::Posted,
        length,
        first_psn: Psn::new(0),
        npkts: 0,
        sent_bytes: 0,
        signaled,
        read_start: Psn::new(0),
    })
}

/// Whether a WQE is a UD SEND to a multicast group (counted as
/// `mcast_sent` when the device takes it).
pub(crate) fn to_group(w: &SendWqe) -> bool {
    w.wr.ud.is_some_and(|u| crate::objects::is_mcast_gid(u.ah.dgid))
}

/// The device's doorbell: the QPs whose send queues got WQEs since the
/// device last looked. A poster rings it once per empty-to-non-empty
/// transition of a queue; the device swaps the list out (no allocation
/// once both lists have grown to the device's QP count).
#[derive(Debug, Default)]
pub(crate) struct Doorbell {
    qpns: Mutex<Vec<Qpn>>,
    rung: AtomicBool,
}

impl Doorbell {
    fn ring(&self, qpn: Qpn) {
        let mut g = self.qpns.lock().unwrap_or_else(|e| e.into_inner());
        g.push(qpn);
        self.rung.store(true, Ordering::Release);
    }

    /// Swap the rung QPs into `out` (emptied first); one atomic load when
    /// nothing was rung.
    pub(crate) fn take(&self, out: &mut Vec<Qpn>) {
        out.clear();
        if !self.rung.load(Ordering::Acquire) {
            return;
        }
        let mut g = self.qpns.lock().unwrap_or_else(|e| e.into_inner());
        self.rung.store(false, Ordering::Release);
        std::mem::swap(&mut *g, out);
    }
}

pub(crate) struct SqInner {
    q: VecDeque<SendWqe>,
    pub(crate) shape: Option<SqShape>,
    /// WQEs posted in this incarnation (wraps).
    posted: u32,
    /// Slots freed by polls in this incarnation (the QP's `sq_freed`).
    freed: Arc<AtomicU32>,
    /// The doorbell was rung for what `q` holds.
    rung: bool,
}

impl SqInner {
    /// Slots in use: posted and not freed by a poll.
    pub(crate) fn held(&self) -> u32 {
        self.posted.wrapping_sub(self.freed.load(Ordering::Acquire))
    }

    /// One more WQE of this incarnation (the device's own path).
    pub(crate) fn count_post(&mut self) {
        self.posted = self.posted.wrapping_add(1);
    }
}

/// A QP's send queue as the program posts to it. See the
/// [module documentation](self).
pub struct SqRing {
    inner: Mutex<SqInner>,
    /// WQEs in the queue (read without the lock).
    len: AtomicUsize,
    qpn: Qpn,
    /// `None`: a QP of no device (tests, XRC shadows): every post takes
    /// the device's path.
    bell: Option<Arc<Doorbell>>,
}

impl std::fmt::Debug for SqRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqRing").field("qpn", &self.qpn).field("len", &self.len()).finish()
    }
}

/// Why [`SqRing::post`] did not take a WR.
#[derive(Debug)]
pub enum RingSend {
    /// Refused, with the error `ibv_post_send` returns.
    Refused(PostSendError),
    /// The QP is not in RTS: the device decides (the WR is returned).
    Device(SendWr),
}

impl SqRing {
    pub(crate) fn new(qpn: Qpn, bell: Option<Arc<Doorbell>>, freed: Arc<AtomicU32>) -> SqRing {
        SqRing {
            inner: Mutex::new(SqInner {
                q: VecDeque::new(),
                shape: None,
                posted: 0,
                freed,
                rung: false,
            }),
            len: AtomicUsize::new(0),
            qpn,
            bell,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, SqInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// WQEs posted here and not moved to the QP yet.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Nothing posted here waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Send-queue slots in use (posted, not freed by a poll).
    pub fn held(&self) -> u32 {
        self.lock().held()
    }

    /// `ibv_post_send` of `wr` without the device: checked and appended,
    /// refused, or returned when the QP is not in RTS.
    // (the WR comes back by value: boxing it would allocate on every post
    // a QP outside RTS makes)
    #[allow(clippy::result_large_err)]
    pub fn post(&self, wr: SendWr) -> Result<(), RingSend> {
        let mut g = self.lock();
        let shape = match (&self.bell, g.shape) {
            (Some(_), Some(s)) if s.state == QpState::Rts => s,
            _ => return Err(RingSend::Device(wr)),
        };
        let w = check(&shape, wr, g.held()).map_err(RingSend::Refused)?;
        g.q.push_back(w);
        g.count_post();
        self.len.store(g.q.len(), Ordering::Release);
        let ring = !std::mem::replace(&mut g.rung, true);
        drop(g);
        if let (true, Some(b)) = (ring, &self.bell) {
            b.ring(self.qpn);
        }
        Ok(())
    }

    /// Move what was posted (under `g`, this queue's lock) to the end of
    /// `sq`; returns how many went to multicast groups.
    pub(crate) fn drain_locked(&self, g: &mut SqInner, sq: &mut VecDeque<SendWqe>) -> u32 {
        g.rung = false;
        if g.q.is_empty() {
            return 0;
        }
        let groups = g.q.iter().filter(|w| to_group(w)).count() as u32;
        sq.extend(g.q.drain(..));
        self.len.store(0, Ordering::Release);
        groups
    }

    /// [`SqRing::drain_locked`], taking the lock (nothing to take: no lock).
    pub(crate) fn drain_into(&self, sq: &mut VecDeque<SendWqe>) -> u32 {
        if self.is_empty() {
            return 0;
        }
        let mut g = self.lock();
        self.drain_locked(&mut g, sq)
    }

    /// The device changed the QP: what was posted moves to `sq` first,
    /// then posts are checked against `shape`.
    pub(crate) fn publish(&self, shape: SqShape, sq: &mut VecDeque<SendWqe>) -> u32 {
        let mut g = self.lock();
        let groups = self.drain_locked(&mut g, sq);
        g.shape = Some(shape);
        groups
    }

    /// The QP is destroyed: what was posted moves to `sq` (counted as
    /// [`SqRing::publish`] does), and later posts take the device's path
    /// (which finds no QP).
    pub(crate) fn close(&self, sq: &mut VecDeque<SendWqe>) -> u32 {
        let mut g = self.lock();
        let groups = self.drain_locked(&mut g, sq);
        g.shape = None;
        groups
    }

    /// A reset: what was posted goes without completions; a new
    /// incarnation counting into `freed`.
    pub(crate) fn reset(&self, shape: SqShape, freed: Arc<AtomicU32>) {
        let mut g = self.lock();
        g.q.clear();
        g.rung = false;
        g.posted = 0;
        g.freed = freed;
        g.shape = Some(shape);
        self.len.store(0, Ordering::Release);
    }
}

impl Default for SqRing {
    fn default() -> SqRing {
        SqRing::new(Qpn::new(0), None, Arc::default())
    }
}
