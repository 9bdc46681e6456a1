//! UD multicast: groups, the QPs attached to them (`ibv_attach_mcast`), and
//! the fan-out of a received multicast datagram to every attached QP.
//!
//! On RoCEv2 a multicast group is an IP multicast address (its GID: an
//! IPv4-mapped 224.0.0.0/4 address or an IPv6 ff00::/8 one); a datagram to
//! the group carries the multicast QPN 0xFFFFFF in its BTH (IBA vol. 1,
//! "multicast": only UD QPs send and receive multicast) and is delivered to
//! every QP of the port attached to the group, each of which checks the
//! Q_Key and takes a receive WQE of its own, as for a unicast datagram.
//!
//! The core keeps only the attachments; joining the IP group on the wire
//! (the socket's `IP_ADD_MEMBERSHIP`, an Ethernet multicast MAC) is the
//! driver's: [`Hca::attach_mcast`] says when a group gets its first QP and
//! [`Hca::detach_mcast`] when it loses its last, so the driver joins and
//! leaves exactly then.
//!
//! Limits and errors are rxe's (`rxe_mcast.c`, and the kernel's
//! `ib_attach_mcast`): a QP that is not UD or an address that is not
//! multicast is EINVAL, attaching twice is a no-op, detaching a QP that is
//! not attached is EINVAL, more than `max_mcast_grp` groups or
//! `max_mcast_qp_attach` QPs in one group is ENOMEM.

use crate::hca::Hca;
use crate::io::Datagram;
use crate::qp_attr::QpType;
use roce_packet::{Qpn, RoceRepr};
use std::net::IpAddr;

/// The destination QPN of every multicast datagram.
pub const MCAST_QPN: u32 = 0xFF_FFFF;

use crate::objects::canonical_gid as canonical;
pub use crate::objects::{canonical_gid, is_mcast_gid};

/// `attach_mcast` / `detach_mcast` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum McastError {
    /// Unknown QP.
    #[error("unknown QP {0}")]
    UnknownQp(Qpn),
    /// Only UD QPs join multicast groups (EINVAL).
    #[error("QP {0} is not a UD QP: only UD QPs attach to multicast groups")]
    NotUd(Qpn),
    /// The GID is not a multicast address (EINVAL).
    #[error("{0} is not a multicast address (IPv4 224.0.0.0/4 or IPv6 ff00::/8)")]
    NotMulticast(IpAddr),
    /// `detach_mcast` of a QP that is not attached to the group (EINVAL).
    #[error("QP {0} is not attached to {1}")]
    NotAttached(Qpn, IpAddr),
    /// Over `max_mcast_grp`, `max_mcast_qp_attach` or
    /// `max_total_mcast_qp_attach` (ENOMEM).
    #[error("too many multicast {0}")]
    TooMany(&'static str),
}

impl McastError {
    /// The errno rdma-core returns for it.
    pub fn errno(&self) -> i32 {
        match self {
            McastError::TooMany(_) => 12, // ENOMEM
            _ => 22,                      // EINVAL
        }
    }
}

impl Hca {
    /// `ibv_attach_mcast`: attach the UD QP `qpn` to the group `gid`.
    /// Returns whether the group is new on this device (the driver then
    /// joins it on the wire). Attaching an attached QP again is a no-op.
    pub fn attach_mcast(&mut self, qpn: Qpn, gid: IpAddr) -> Result<bool, McastError> {
        let qp = self.qps.get(&qpn).ok_or(McastError::UnknownQp(qpn))?;
        if qp.init.qp_type != QpType::Ud {
            return Err(McastError::NotUd(qpn));
        }
        if !is_mcast_gid(gid) {
            return Err(McastError::NotMulticast(gid));
        }
        let g = canonical(gid);
        let attr = &self.dev.attr;
        let t = &mut self.mcast;
        let new = !t.groups.contains_key(&g);
        if new && t.groups.len() >= attr.max_mcast_grp as usize {
            return Err(McastError::TooMany("groups"));
        }
        let qs = t.groups.get(&g).map(Vec::as_slice).unwrap_or(&[]);
        if qs.contains(&qpn) {
            return Ok(false);
        }
        if qs.len() >= attr.max_mcast_qp_attach as usize {
            return Err(McastError::TooMany("QPs in the group"));
        }
        if t.attached >= attr.max_total_mcast_qp_attach as usize {
            return Err(McastError::TooMany("attachments"));
        }
        t.groups.entry(g).or_default().push(qpn);
        t.attached += 1;
        Ok(new)
    }

    /// `ibv_detach_mcast`. Returns whether the group lost its last QP on
    /// this device (the driver then leaves it on the wire).
    pub fn detach_mcast(&mut self, qpn: Qpn, gid: IpAddr) -> Result<bool, McastError> {
        if !self.qps.contains_key(&qpn) {
            return Err(McastError::UnknownQp(qpn));
        }
        if !is_mcast_gid(gid) {
            return Err(McastError::NotMulticast(gid));
        }
        let g = canonical(gid);
        let t = &mut self.mcast;
        let qs = t.groups.get_mut(&g).ok_or(McastError::NotAttached(qpn, g))?;
        let at = qs.iter().position(|q| *q == qpn).ok_or(McastError::NotAttached(qpn, g))?;
        qs.remove(at);
        t.attached -= 1;
        if qs.is_empty() {
            t.groups.remove(&g);
            return Ok(true);
        }
        Ok(false)
    }

    /// The multicast groups `qpn` is attached to (`ibv_destroy_qp` of an
    /// attached QP is EBUSY, as the kernel's).
    pub fn mcast_groups(&self, qpn: Qpn) -> Vec<IpAddr> {
        self.mcast.groups_of(qpn)
    }

    /// Every group of the device with its QPs.
    pub fn mcast_table(&self) -> Vec<(IpAddr, Vec<Qpn>)> {
        self.mcast.groups.iter().map(|(g, q)| (*g, q.clone())).collect()
    }

    /// A datagram to the multicast QPN: one delivery per attached QP of
    /// the group its destination address names (the transport, P_Key and
    /// ICRC were checked by the caller). Counts `mcast_rcvd` (delivered to
    /// at least one QP) or `mcast_dropped` (no group, no QP ready).
    pub(crate) fn receive_mcast(&mut self, repr: &RoceRepr, payload: &[u8], d: &Datagram) {
        let g = canonical(d.endpoints.dst);
        let any = crate::mutant::is(self.mutant, crate::Mutant::McastAnyGroup);
        let found = match any {
            true => self.mcast.groups.values().next(),
            false => self.mcast.groups.get(&g).filter(|_| g.is_multicast()),
        };
        let qpns: Vec<Qpn> = match found {
            Some(q) => q.clone(),
            None => {
                self.dev.counters.mcast_dropped += 1;
                tracing::debug!(dst = %g, reason = "multicast: no group attached", "drop");
                return;
            }
        };
        let mut delivered = 0;
        for qpn in qpns {
            let Some(mut entry) = self.qps.get_mut(&qpn) else { continue };
            let qp = &mut *entry;
            if !qp.state.allows().requests {
                continue;
            }
            let span = tracing::debug_span!("qp", qpn = %qpn, role = "responder", mcast = %g);
            let _g = span.enter();
            qp.on_ud_request(&mut self.dev.resp(), repr, payload, d);
            delivered += 1;
        }
        let c = &mut self.dev.counters;
        if delivered == 0 {
            c.mcast_dropped += 1;
            return;
        }
        c.mcast_rcvd += 1;
        c.rcvd_pkts += 1;
        c.rcvd_bytes += d.payload.len() as u64;
    }
}
