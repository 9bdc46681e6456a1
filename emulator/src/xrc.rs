//! XRC, eXtended Reliable Connected (IBA Vol 1 Annex A14): one target QP
//! serves every shared receive queue of an XRC domain.
//!
//! - An **XRC domain** ([`Hca::alloc_xrcd`]) groups XRC SRQs and target QPs.
//! - An **XRC SRQ** ([`Hca::create_xrc_srq`]) belongs to a domain and a PD
//!   and has its own CQ: the receives taken from it complete there.
//! - The **initiator** (`QpType::XrcSend`) is RC's requester with no
//!   receive queue; every request carries an XRCETH with the number of the
//!   XRC SRQ its work request names (`SendWr::xrc`), and the opcodes are
//!   RC's in the XRC space (0xA0 up).
//! - The **target** (`QpType::XrcRecv`, [`Hca::create_xrc_tgt_qp`]) is RC's
//!   responder (PSNs, ACKs, NAKs, READ responses, atomics) with no PD, CQ or
//!   receive queue of its own (it is created on placeholders the caller
//!   names): each request runs with the SRQ its XRCETH
//!   names, which must be an XRC SRQ of the target's domain: its receive
//!   WQEs, its CQ, and its PD for the keys of RDMA and atomics. A request
//!   naming anything else is an invalid request (NAK, the QP goes to ERR).
//!
//! rxe has no XRC; the wire format follows IBA (the XRCETH: a reserved byte
//! and the 24-bit XRC SRQ number, right after the BTH of every request) as
//! mlx5 sends it.

use crate::error::{CreateQpError, CreateSrqError};
use crate::hca::Hca;
use crate::objects::{CqHandle, PdHandle, SrqAttr, SrqHandle, Xrcd, XrcdHandle};
use crate::qp::QpInitAttr;
use crate::queues::SrqTable;
use roce_packet::Qpn;

/// `xrcd` calls failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum XrcError {
    /// No such XRC domain.
    #[error("unknown XRC domain {0:?}")]
    UnknownXrcd(XrcdHandle),
    /// SRQs or QPs still use the domain (EBUSY).
    #[error("XRC domain {xrcd:?} still has {users} SRQ(s) or QP(s)")]
    InUse { xrcd: XrcdHandle, users: u32 },
    /// Too many XRC domains (ENOMEM).
    #[error("too many XRC domains")]
    NoResources,
}

impl XrcError {
    /// The errno rdma-core gives.
    pub fn errno(&self) -> i32 {
        match self {
            XrcError::UnknownXrcd(_) => 22, // EINVAL
            XrcError::InUse { .. } => 16,   // EBUSY
            XrcError::NoResources => 12,    // ENOMEM
        }
    }
}

/// The SRQ an XRC request to a target of `xrcd` names (its XRCETH word):
/// its handle, PD and CQ; `None` if it is not an XRC SRQ of that domain.
pub(crate) fn target_srq(
    srqs: &SrqTable,
    xrcd: Option<XrcdHandle>,
    xrceth: Option<u32>,
) -> Option<(SrqHandle, PdHandle, CqHandle)> {
    let h = SrqHandle::from_number(xrceth? & 0x00FF_FFFF);
    let s = srqs.get(&h)?;
    let (d, cq) = s.xrc?;
    (Some(d) == xrcd).then_some((h, s.pd, cq))
}

/// The XRC SRQ of `xrcd` with the lowest number ([`crate::Mutant::XrcIgnoresXrceth`]).
pub(crate) fn first_srq(
    srqs: &SrqTable,
    xrcd: Option<XrcdHandle>,
) -> Option<(SrqHandle, PdHandle, CqHandle)> {
    srqs.iter()
        .filter(|(_, s)| s.xrc.is_some_and(|(d, _)| Some(d) == xrcd))
        .min_by_key(|(h, _)| h.id())
        .and_then(|(h, s)| s.xrc.map(|(_, cq)| (*h, s.pd, cq)))
}

impl Hca {
    /// `ibv_open_xrcd`: a new XRC domain.
    pub fn alloc_xrcd(&mut self) -> Result<XrcdHandle, XrcError> {
        if self.xrcds.len() >= 1 << 16 {
            return Err(XrcError::NoResources);
        }
        let h = XrcdHandle(self.dev.id());
        self.xrcds.insert(h, Xrcd { users: 0, key: None });
        Ok(h)
    }

    /// The file a domain was opened by (`(st_dev, st_ino)` of the
    /// `ibv_open_xrcd` descriptor): on a device shared by several
    /// processes, the domains of the members with one key are one domain,
    /// and a target QP's requests reach the XRC SRQs of the others
    /// ([`crate::xrc_relay`]).
    pub fn set_xrcd_key(&mut self, xrcd: XrcdHandle, key: (u64, u64)) -> Result<(), XrcError> {
        let d = self.xrcds.get_mut(&xrcd).ok_or(XrcError::UnknownXrcd(xrcd))?;
        d.key = Some(key);
        Ok(())
    }

    /// `ibv_close_xrcd`: EBUSY while SRQs or target QPs use it.
    pub fn dealloc_xrcd(&mut self, xrcd: XrcdHandle) -> Result<(), XrcError> {
        let d = self.xrcds.get(&xrcd).ok_or(XrcError::UnknownXrcd(xrcd))?;
        if d.users > 0 {
            return Err(XrcError::InUse { xrcd, users: d.users });
        }
        self.xrcds.remove(&xrcd);
        Ok(())
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an SRQ of `pd` in the
    /// domain `xrcd`, whose receives complete on `cq`.
    pub fn create_xrc_srq(
        &mut self,
        pd: PdHandle,
        attr: SrqAttr,
        xrcd: XrcdHandle,
        cq: CqHandle,
    ) -> Result<SrqHandle, CreateSrqError> {
        if !self.xrcds.contains_key(&xrcd) {
            return Err(CreateSrqError::UnknownXrcd(xrcd));
        }
        if !self.dev.sink.cqs.contains_key(&cq) {
            return Err(CreateSrqError::UnknownCq(cq));
        }
        let h = self.create_srq(pd, attr)?;
        // on a shared device the number carries the member's slot in its
        // top byte, as QPNs do: an owner sees whose SRQ a request names
        let h = match self.member_slot {
            Some(slot) => self.renumber_srq(h, slot),
            None => h,
        };
        if let Some(s) = self.dev.srqs.get_mut(&h) {
            s.xrc = Some((xrcd, cq));
        }
        if let Some(c) = self.dev.sink.cqs.get_mut(&cq) {
            c.users += 1;
        }
        if let Some(d) = self.xrcds.get_mut(&xrcd) {
            d.users += 1;
        }
        Ok(h)
    }

    /// The SRQ `h` under a number `slot << 16 | n` (`n` from 1, not in use).
    fn renumber_srq(&mut self, h: SrqHandle, slot: u8) -> SrqHandle {
        let Some(s) = self.dev.srqs.remove(&h) else { return h };
        let base = u32::from(slot) << 16;
        let mut n = h.0 & 0xFFFF;
        for _ in 0..=0xFFFF {
            if n != 0 && !self.dev.srqs.contains_key(&SrqHandle(base | n)) {
                break;
            }
            n = (n + 1) & 0xFFFF;
        }
        let new = SrqHandle(base | n);
        self.dev.srqs.insert(new, s);
        new
    }

    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: a target QP of the domain
    /// `xrcd`. It has no PD, CQ or receive queue of its own: `pd` and `cq`
    /// are placeholders it is created on (counted as used until it is
    /// destroyed; each request runs with its XRC SRQ's instead).
    pub fn create_xrc_tgt_qp(
        &mut self,
        xrcd: XrcdHandle,
        pd: PdHandle,
        cq: CqHandle,
    ) -> Result<Qpn, CreateQpError> {
        if !self.xrcds.contains_key(&xrcd) {
            return Err(CreateQpError::UnknownXrcd(xrcd));
        }
        let init = QpInitAttr::xrc_target(pd, cq, None);
        let qpn = self.create_qp(init)?;
        if let Some(mut q) = self.qps.get_mut(&qpn) {
            q.xrcd = Some(xrcd);
            q.xrc_home = Some(init);
        }
        if let Some(d) = self.xrcds.get_mut(&xrcd) {
            d.users += 1;
        }
        Ok(qpn)
    }

    /// The SRQs and target QPs of an XRC domain (`None`: no such domain).
    pub fn xrcd_users(&self, xrcd: XrcdHandle) -> Option<u32> {
        self.xrcds.get(&xrcd).map(|d| d.users)
    }

    /// A shared device's member slot (the top byte of this member's QPNs
    /// and XRC SRQ numbers); `None` for a device of one process.
    pub fn member_slot(&self) -> Option<u8> {
        self.member_slot
    }

    /// The XRC domain of a target QP.
    pub fn qp_xrcd(&self, qpn: Qpn) -> Option<XrcdHandle> {
        self.qps.get(&qpn).and_then(|q| q.xrcd)
    }

    /// An XRC SRQ's domain (`None` for an ordinary SRQ).
    pub fn srq_xrcd(&self, srq: SrqHandle) -> Option<XrcdHandle> {
        self.dev.srqs.get(&srq).and_then(|s| s.xrc).map(|(d, _)| d)
    }
}
