//! The device's QP table, with the two indexes the driver interface needs
//! so that a round costs nothing per idle QP:
//!
//! - `ready`: the QPs that may have a packet for `poll_transmit`
//!   ([`Qp::may_transmit`]); every other QP would answer "nothing" at once,
//!   without side effects, so the round-robin visits only these, in the same
//!   QPN order as a scan of the whole table would.
//! - `timers`: `(earliest deadline, QPN)` of every QP with a timer
//!   ([`Qp::next_deadline`]): its first entry is the QPs' part of
//!   `poll_timeout`, and `handle_timeout` visits only the QPs due.
//!
//! Both are kept exact, not lazily: every mutable access to a QP goes
//! through a [`QpMut`] guard that re-files the QP when it is dropped, so no
//! code path can change a QP and leave the indexes behind.

use crate::qp::Qp;
use crate::time::Instant;
use core::ops::{Bound, Deref, DerefMut};
use core::time::Duration;
use roce_packet::Qpn;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;

struct Slot {
    qp: Qp,
    /// Filed in `ready`.
    ready: bool,
    /// Filed in `timers` with this deadline.
    deadline: Option<Instant>,
}

/// The QPs of a device, by QPN, with their transmit and timer indexes.
#[derive(Default)]
pub(crate) struct QpTable {
    /// By QPN (a hash map: the QPN order lives in the indexes, and in
    /// [`QpTable::for_each_mut`]).
    map: HashMap<Qpn, Slot>,
    ready: BTreeSet<Qpn>,
    timers: BTreeSet<(Instant, Qpn)>,
    /// The device's ACK delay (a held ACK's deadline depends on it).
    ack_delay: Option<Duration>,
}

/// Mutable access to one QP; re-files it in the indexes when dropped.
pub(crate) struct QpMut<'a> {
    slot: &'a mut Slot,
    ready: &'a mut BTreeSet<Qpn>,
    timers: &'a mut BTreeSet<(Instant, Qpn)>,
    ack_delay: Option<Duration>,
}

impl Deref for QpMut<'_> {
    type Target = Qp;
    fn deref(&self) -> &Qp {
        &self.slot.qp
    }
}

impl DerefMut for QpMut<'_> {
    fn deref_mut(&mut self) -> &mut Qp {
        &mut self.slot.qp
    }
}

impl Drop for QpMut<'_> {
    fn drop(&mut self) {
        refile(self.slot, self.ready, self.timers, self.ack_delay);
    }
}

fn refile(
    slot: &mut Slot,
    ready: &mut BTreeSet<Qpn>,
    timers: &mut BTreeSet<(Instant, Qpn)>,
    ack_delay: Option<Duration>,
) {
    let qpn = slot.qp.qpn;
    let r = slot.qp.may_transmit();
    if r != slot.ready {
        slot.ready = r;
        if r {
            ready.insert(qpn);
        } else {
            ready.remove(&qpn);
        }
    }
    let d = slot.qp.next_deadline(ack_delay);
    if d != slot.deadline {
        if let Some(old) = slot.deadline {
            timers.remove(&(old, qpn));
        }
        if let Some(new) = d {
            timers.insert((new, qpn));
        }
        slot.deadline = d;
    }
}

impl QpTable {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn contains_key(&self, qpn: &Qpn) -> bool {
        self.map.contains_key(qpn)
    }

    pub fn get(&self, qpn: &Qpn) -> Option<&Qp> {
        self.map.get(qpn).map(|s| &s.qp)
    }

    pub fn get_mut(&mut self, qpn: &Qpn) -> Option<QpMut<'_>> {
        let slot = self.map.get_mut(qpn)?;
        Some(QpMut {
            slot,
            ready: &mut self.ready,
            timers: &mut self.timers,
            ack_delay: self.ack_delay,
        })
    }

    pub fn insert(&mut self, qp: Qp) {
        let qpn = qp.qpn;
        if self.map.contains_key(&qpn) {
            self.remove(&qpn);
        }
        self.map.insert(qpn, Slot { qp, ready: false, deadline: None });
        drop(self.get_mut(&qpn)); // file it
    }

    /// Give a polled CQE's send-queue slots back to its QP, if that QP
    /// still exists in the same incarnation. Slots change neither index
    /// (`may_transmit`, deadlines), so the QP is not re-filed: O(1).
    pub fn remove(&mut self, qpn: &Qpn) -> Option<Qp> {
        let slot = self.map.remove(qpn)?;
        if slot.ready {
            self.ready.remove(qpn);
        }
        if let Some(d) = slot.deadline {
            self.timers.remove(&(d, *qpn));
        }
        Some(slot.qp)
    }

    /// Every QP, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&Qpn, &Qp)> + '_ {
        self.map.iter().map(|(k, s)| (k, &s.qp))
    }

    /// `f` on every QP in QPN order (each re-filed after).
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&mut Qp)) {
        let mut keys: Vec<Qpn> = self.map.keys().copied().collect();
        keys.sort_unstable();
        for k in keys {
            if let Some(slot) = self.map.get_mut(&k) {
                f(&mut slot.qp);
                refile(slot, &mut self.ready, &mut self.timers, self.ack_delay);
            }
        }
    }

    /// A new ACK delay moves the deadline of every held ACK: re-file all.
    pub fn set_ack_delay(&mut self, delay: Option<Duration>) {
        self.ack_delay = delay;
        self.for_each_mut(|_| {});
    }

    /// The first QP that may transmit within `(lo, hi)`, in QPN order.
    pub fn first_ready(&self, lo: Bound<Qpn>, hi: Bound<Qpn>) -> Option<Qpn> {
        self.ready.range((lo, hi)).next().copied()
    }

    /// The earliest deadline of any QP's timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// The QPs with a deadline at or before `now`, in QPN order.
    pub fn due(&self, now: Instant) -> Vec<Qpn> {
        let mut v: Vec<Qpn> =
            self.timers.iter().take_while(|&&(t, _)| t <= now).map(|&(_, q)| q).collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{CqHandle, PdHandle};
    use crate::qp::QpInitAttr;
    use crate::qp_attr::{PathMtu, QpCap, QpState, QpType};
    use crate::wr::{SendWr, WrOpcode};

    fn qp(n: u32) -> Qp {
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInitAttr {
            pd: PdHandle(1),
            send_cq: CqHandle(1),
            recv_cq: CqHandle(1),
            qp_type: QpType::Rc,
            cap,
            sq_sig_all: false,
            srq: None,
        };
        Qp::new(Qpn::new(n), init, PathMtu::Mtu1024)
    }

    fn wqe() -> crate::qp::SendWqe {
        crate::qp::SendWqe {
            wr: SendWr::new(1, WrOpcode::Send),
            state: crate::qp::WqeState::Posted,
            length: 0,
            first_psn: roce_packet::Psn::new(0),
            npkts: 0,
            sent_bytes: 0,
            signaled: false,
            read_start: roce_packet::Psn::new(0),
        }
    }

    /// The indexes agree with a scan of every QP after each change.
    fn check(t: &QpTable) {
        let mut ready: Vec<Qpn> =
            t.map.values().filter(|s| s.qp.may_transmit()).map(|s| s.qp.qpn).collect();
        ready.sort_unstable();
        assert_eq!(t.ready.iter().copied().collect::<Vec<_>>(), ready);
        let mut timers: Vec<(Instant, Qpn)> = t
            .map
            .values()
            .filter_map(|s| s.qp.next_deadline(t.ack_delay).map(|d| (d, s.qp.qpn)))
            .collect();
        timers.sort();
        assert_eq!(t.timers.iter().copied().collect::<Vec<_>>(), timers);
    }

    #[test]
    fn indexes_follow_every_change() {
        let mut t = QpTable::default();
        for n in [20, 17, 18, 19] {
            t.insert(qp(n));
        }
        check(&t);
        assert_eq!(t.first_ready(Bound::Unbounded, Bound::Unbounded), None);
        assert_eq!(t.next_deadline(), None);

        // a running send queue with a WQE: ready
        let mut q = t.get_mut(&Qpn::new(18)).unwrap();
        q.state = QpState::Rts;
        q.sq.push_back(wqe());
        drop(q);
        check(&t);
        assert_eq!(t.first_ready(Bound::Unbounded, Bound::Unbounded), Some(Qpn::new(18)));
        assert_eq!(t.first_ready(Bound::Excluded(Qpn::new(18)), Bound::Unbounded), None);

        // timers, earliest first; due in QPN order
        t.get_mut(&Qpn::new(20)).unwrap().comp.retrans_deadline = Some(Instant::from_micros(5));
        t.get_mut(&Qpn::new(17)).unwrap().comp.rnr_deadline = Some(Instant::from_micros(7));
        let mut q = t.get_mut(&Qpn::new(18)).unwrap();
        q.comp.rnr_deadline = Some(Instant::from_micros(9)); // an RNR wait stops the requester
        q.resp.ack_held_since = Some(Instant::from_micros(1));
        drop(q);
        check(&t);
        assert_eq!(t.first_ready(Bound::Unbounded, Bound::Unbounded), None);
        assert_eq!(t.next_deadline(), Some(Instant::from_micros(5)));
        assert_eq!(t.due(Instant::from_micros(7)), vec![Qpn::new(17), Qpn::new(20)]);

        // a held ACK's deadline appears with the ACK delay
        t.set_ack_delay(Some(Duration::from_micros(1)));
        check(&t);
        assert_eq!(t.next_deadline(), Some(Instant::from_micros(3)));

        // a queued response makes a QP ready whatever its send queue
        t.for_each_mut(|q| {
            q.resp.queue.push_back(crate::qp::RespItem::Aeth {
                psn: roce_packet::Psn::new(0),
                syndrome: roce_packet::Syndrome::Ack { credit: 0 },
                msn: roce_packet::Msn::new(0),
            })
        });
        check(&t);
        assert_eq!(t.ready.len(), 4);

        // removed QPs leave both indexes
        t.get_mut(&Qpn::new(19)).unwrap().reset();
        assert!(t.remove(&Qpn::new(18)).is_some());
        check(&t);
        assert_eq!(t.due(Instant::from_micros(100)), vec![Qpn::new(17), Qpn::new(20)]);
    }
}
