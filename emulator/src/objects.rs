//! Device objects other than QPs, at the bottom of the core's layers:
//! their handles (PD, MR, MW, CQ, SRQ), device/port attributes,
//! asynchronous events, and the records of protection domains and memory
//! regions (IBA §10.2 memory management, §10.6 protection domains). The
//! tables that use them: `mem.rs` (regions, windows), `queues.rs` (CQs,
//! SRQs).
//!
//! A memory region's bytes are a [`RegionMem`]: an owned zeroed buffer
//! (the safe API, the simulator) or the application's own pages (the C
//! ABI). The core reaches them only through that type's copies and
//! atomics, so it needs no `unsafe`. The region table shares each one
//! (`MrMem`) with the datagrams that carry its bytes to the socket
//! ([`crate::io::RegionBody`]); removing a region from the table revokes
//! it, so nothing touches its bytes after `ibv_dereg_mr` returns.

use crate::qp_attr::{AccessFlags, PathMtu};
use roce_packet::{LKey, Qpn, RKey};
pub use roce_region::RegionMem;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

/// A region's memory as the region table holds it: shared with datagrams
/// that send from it, and revoked when the table lets go (deregistration,
/// re-registration with new memory, the device's end).
pub(crate) struct MrMem(Arc<RegionMem>);

impl MrMem {
    pub fn new(mem: RegionMem) -> MrMem {
        MrMem(Arc::new(mem))
    }

    /// Another handle on the memory, for a datagram that sends from it.
    pub fn share(&self) -> Arc<RegionMem> {
        Arc::clone(&self.0)
    }
}

impl core::ops::Deref for MrMem {
    type Target = RegionMem;
    fn deref(&self) -> &RegionMem {
        &self.0
    }
}

impl Drop for MrMem {
    fn drop(&mut self) {
        // Waits for a send from it under way; queued datagrams that still
        // point into it are dropped by the transport (their bytes are gone).
        self.0.revoke();
    }
}

/// A protection domain handle (`ibv_pd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdHandle(pub(crate) u32);
/// A memory region handle (`ibv_mr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MrHandle(pub(crate) u32);
/// A completion queue handle (`ibv_cq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqHandle(pub(crate) u32);

/// A shared receive queue handle (`ibv_srq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqHandle(pub(crate) u32);

/// An XRC domain handle (`ibv_xrcd`, [`crate::Hca::alloc_xrcd`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct XrcdHandle(pub(crate) u32);

impl XrcdHandle {
    /// The handle's number (for traces).
    pub fn id(self) -> u32 {
        self.0
    }
}

impl SrqHandle {
    /// The shared receive queue whose number (`ibv_get_srq_num`, the XRC
    /// SRQ number of an XRCETH) is `n`.
    pub fn from_number(n: u32) -> SrqHandle {
        SrqHandle(n)
    }
    /// The handle's number (for traces).
    pub fn id(self) -> u32 {
        self.0
    }
}

impl PdHandle {
    /// The handle's number (for traces).
    pub fn id(self) -> u32 {
        self.0
    }
}
impl MrHandle {
    /// The handle's number (for traces).
    pub fn id(self) -> u32 {
        self.0
    }
}
impl CqHandle {
    /// The handle's number (for traces).
    pub fn id(self) -> u32 {
        self.0
    }
}

// ---- memory windows (crate::mw) ----

/// A memory window handle (`ibv_mw`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MwHandle(pub(crate) u32);

impl MwHandle {
    /// The handle's number (for traces).
    pub fn id(self) -> u32 {
        self.0
    }
}

/// `enum ibv_mw_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MwType {
    /// IBV_MW_TYPE_1: bound with `ibv_bind_mw`, checked against the PD.
    Type1,
    /// IBV_MW_TYPE_2: bound by a work request to one QP, invalidatable.
    Type2,
}

/// `struct ibv_mw_bind_info`: what a window exposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The region the window lies in (needs MW_BIND access).
    pub mr: MrHandle,
    /// First virtual address of the window.
    pub addr: u64,
    /// Bytes (0 unbinds a type 1 window; not allowed for type 2).
    pub length: u64,
    /// Remote rights: REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC.
    pub access: AccessFlags,
}

/// Device attributes (`struct ibv_device_attr`, the fields that matter here).
/// Defaults mirror rxe: max_qp_wr 16384, max_sge 32, max_cqe 32767,
/// max_qp_rd_atom 128, max_mr_size 2^32, max_msg_sz 2^31.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (derived from the address).
    pub node_guid: u64,
    /// Largest memory region (2^32).
    pub max_mr_size: u64,
    /// QPs per device.
    pub max_qp: u32,
    /// Work requests per queue (16384).
    pub max_qp_wr: u32,
    /// SGEs per work request (32).
    pub max_sge: u32,
    /// CQs per device.
    pub max_cq: u32,
    /// Entries per CQ (32767).
    pub max_cqe: u32,
    /// MRs per device.
    pub max_mr: u32,
    /// PDs per device.
    pub max_pd: u32,
    /// Responder resources per QP (max_dest_rd_atomic bound).
    pub max_qp_rd_atom: u8,
    /// Initiator depth per QP (max_rd_atomic bound).
    pub max_qp_init_rd_atom: u8,
    /// Inline data per send WR (512).
    pub max_inline_data: u32,
    /// Largest message (2^31).
    pub max_msg_sz: u32,
    /// Ports (1).
    pub phys_port_cnt: u8,
    /// SRQs per device.
    pub max_srq: u32,
    /// WRs per SRQ (like max_qp_wr).
    pub max_srq_wr: u32,
    /// SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// Memory windows per device (types 1 and 2 work).
    pub max_mw: u32,
    /// Address handles per device.
    pub max_ah: u32,
    /// Multicast groups per device (rxe: 8192).
    pub max_mcast_grp: u32,
    /// QPs attached to one multicast group (rxe: 56).
    pub max_mcast_qp_attach: u32,
    /// Attachments of QPs to groups, device-wide (rxe: 0x70000).
    pub max_total_mcast_qp_attach: u32,
}

impl Default for DeviceAttr {
    fn default() -> Self {
        DeviceAttr {
            fw_ver: "0.1.0".into(),
            node_guid: 0,
            max_mr_size: 1 << 32,
            max_qp: 1 << 16,
            max_qp_wr: 16384,
            max_sge: 32,
            max_cq: 1 << 16,
            max_cqe: 32767,
            max_mr: 1 << 16,
            max_pd: 1 << 16,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_inline_data: 512,
            max_msg_sz: 1 << 31,
            phys_port_cnt: 1,
            max_srq: 1 << 16,
            max_srq_wr: 16384,
            max_srq_sge: 32,
            max_mw: 1 << 16,
            max_ah: 1 << 16,
            max_mcast_grp: 8192,
            max_mcast_qp_attach: 56,
            max_total_mcast_qp_attach: 0x70000,
        }
    }
}

/// Port states (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// IBV_PORT_DOWN.
    Down,
    /// IBV_PORT_ACTIVE.
    Active,
}

/// Port attributes (`struct ibv_port_attr`). Port 1 only; `active_mtu`
/// defaults to 1024 (what rxe picks on a 1500-byte Ethernet), `max_mtu` 4096,
/// one P_Key (0xFFFF), GID table of 1024 entries like rxe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Always active.
    pub state: PortState,
    /// 4096.
    pub max_mtu: PathMtu,
    /// From [`crate::HcaConfig::active_mtu`] (default 1024).
    pub active_mtu: PathMtu,
    /// 1024 like rxe (only index 0 is populated).
    pub gid_tbl_len: u32,
    /// 1 (the default P_Key 0xFFFF).
    pub pkey_tbl_len: u16,
    /// Largest message (2^31).
    pub max_msg_sz: u32,
}

/// The MAC address of an emulated port: `02:00` (locally administered)
/// followed by the IPv4 address, or by the last four bytes of an IPv6 one.
pub fn mac_of(addr: IpAddr) -> [u8; 6] {
    let o = match addr {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let b = v6.octets();
            [b[12], b[13], b[14], b[15]]
        }
    };
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

/// The modified EUI-64 of a MAC (universal/local bit flipped, `ff:fe` in
/// the middle): rxe's node GUID and link-local interface id.
pub fn eui64(mac: [u8; 6]) -> [u8; 8] {
    [mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]]
}

/// The port's GID table as rxe fills it: index 0 the link-local GID
/// (`fe80::` + the EUI-64 of the port's MAC), index 1 the RoCEv2 GID of the
/// address. The one GID table of the project: the core, the Rust API and
/// the libibverbs drop-in all answer from it.
pub fn gid_table(addr: IpAddr) -> [Ipv6Addr; 2] {
    let e = eui64(mac_of(addr));
    let mut ll = [0u8; 16];
    ll[0] = 0xfe;
    ll[1] = 0x80;
    ll[8..].copy_from_slice(&e);
    [Ipv6Addr::from(ll), gid_of(addr)]
}

/// The RoCEv2 GID of an address: IPv4 becomes `::ffff:a.b.c.d`.
pub fn gid_of(addr: IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// Asynchronous events (`enum ibv_event_type`, the ones we raise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A CQ overflowed; it is unusable and its QPs went to ERR.
    CqErr(CqHandle),
    /// A QP entered the error state because of a transport/local error.
    QpFatal(Qpn),
    /// A QP attached to an SRQ entered ERR: it will take no more WQEs from
    /// the SRQ (IBV_EVENT_QP_LAST_WQE_REACHED). Not raised for QPs without SRQ.
    QpLastWqeReached(Qpn),
    /// An armed SRQ fell below its limit (IBV_EVENT_SRQ_LIMIT_REACHED);
    /// the limit disarms.
    SrqLimitReached(SrqHandle),
    /// A QP moved RTS→SQD with `en_sqd_async_notify` finished every WQE it
    /// had started (IBV_EVENT_SQ_DRAINED).
    SqDrained(Qpn),
    /// The port is active (IBV_EVENT_PORT_ACTIVE); the verbs layer reports
    /// it once when a device is opened.
    PortActive,
}

/// `resize_cq` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResizeCqError {
    /// Unknown CQ.
    #[error("unknown completion queue {0:?}")]
    UnknownCq(CqHandle),
    /// The depth is outside 1..=max_cqe.
    #[error("cqe {cqe} outside 1..={max}")]
    InvalidDepth {
        /// Requested depth.
        cqe: u32,
        /// Device limit.
        max: u32,
    },
    /// The CQ holds more completions than the new depth.
    #[error("cqe {cqe} below the {entries} completions the CQ holds")]
    BelowEntries {
        /// Requested depth.
        cqe: u32,
        /// Completions queued now.
        entries: usize,
    },
}

/// `struct ibv_srq_init_attr` / `ibv_srq_attr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SrqAttr {
    /// Receive WRs the SRQ holds.
    pub max_wr: u32,
    /// SGEs per receive WR.
    pub max_sge: u32,
    /// Raise [`AsyncEvent::SrqLimitReached`] when fewer WRs remain (0 = off).
    pub srq_limit: u32,
}

pub(crate) struct Pd {
    pub users: u32,
}

pub(crate) struct Mr {
    pub pd: PdHandle,
    pub access: AccessFlags,
    pub iova: u64,
    pub lkey: LKey,
    pub rkey: RKey,
    pub mem: MrMem,
}

impl Mr {
    /// Offset of `[va, va+len)` inside the region, without overflow.
    pub fn range(&self, va: u64, len: u64) -> Option<usize> {
        let end = va.checked_add(len)?;
        let mr_end = self.iova.checked_add(self.mem.len() as u64)?;
        if va < self.iova || end > mr_end {
            return None;
        }
        usize::try_from(va - self.iova).ok()
    }
}

/// Why a memory access was refused (local: LOC_PROT_ERR; remote: NAK
/// remote access error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemError {
    /// No region with that key.
    BadKey,
    /// Region belongs to another protection domain.
    WrongPd,
    /// Region lacks the access right.
    Access,
    /// Range outside the region (or overflowing u64).
    Bounds,
    /// A type 2 window's rkey used on another QP than the one it is bound to.
    WrongQp,
}

/// The memory regions, by handle.
pub(crate) type Mrs = rustc_hash::FxHashMap<MrHandle, Mr>;

// ---- multicast groups and XRC domains (crate::mcast, crate::xrc) ----

/// Whether `gid` (as an address; IPv4-mapped IPv6 taken as IPv4) is a
/// multicast group address.
pub fn is_mcast_gid(gid: std::net::IpAddr) -> bool {
    canonical_gid(gid).is_multicast()
}

/// IPv4-mapped IPv6 addresses as IPv4 (the form datagrams carry).
pub fn canonical_gid(gid: std::net::IpAddr) -> std::net::IpAddr {
    match gid {
        std::net::IpAddr::V6(v6) => {
            v6.to_ipv4_mapped().map(std::net::IpAddr::V4).unwrap_or(std::net::IpAddr::V6(v6))
        }
        v4 => v4,
    }
}

/// The groups of a device and their QPs.
#[derive(Default, Debug)]
pub(crate) struct McastTable {
    pub groups: std::collections::BTreeMap<std::net::IpAddr, Vec<roce_packet::Qpn>>,
    pub attached: usize,
}

impl McastTable {
    /// The groups `qpn` is attached to.
    pub fn groups_of(&self, qpn: roce_packet::Qpn) -> Vec<std::net::IpAddr> {
        self.groups.iter().filter(|(_, q)| q.contains(&qpn)).map(|(g, _)| *g).collect()
    }

    /// Forget `qpn` (destroyed): the groups it was the last QP of.
    pub fn remove_qp(&mut self, qpn: roce_packet::Qpn) -> Vec<std::net::IpAddr> {
        let mut gone = Vec::new();
        for (g, qs) in self.groups.iter_mut() {
            let before = qs.len();
            qs.retain(|q| *q != qpn);
            self.attached -= before - qs.len();
            if qs.is_empty() {
                gone.push(*g);
            }
        }
        for g in &gone {
            self.groups.remove(g);
        }
        gone
    }
}

/// An XRC domain: its users (SRQs and target QPs), and the file it was
/// opened by (`(st_dev, st_ino)`): members of a shared device with the same
/// key hold one domain ([`crate::xrc_relay`]).
#[derive(Debug)]
pub(crate) struct Xrcd {
    pub users: u32,
    pub key: Option<(u64, u64)>,
}
