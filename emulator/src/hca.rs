//! The device: configuration, the verbs and their object tables. The
//! device context the roles borrow is `dev.rs`; the `SansIo` driver
//! side (transmit round-robin, timers) is `schedule.rs`.
//!
//! `Hca` is single-threaded and owns everything (MR buffers included); the
//! three RC roles of each QP run inside its calls, so per-QP processing is
//! serialized by construction. Wrappers that need sharing put the `Hca`
//! behind one lock.

use crate::counters::Counters;
use crate::dev::Dev;
use crate::error::*;
use crate::io::{LinkProfile, RxIcrc};
use crate::mem::MemTable;
use crate::mw::{Mw, MwBindWr, MwError};
use crate::objects::*;
use crate::qp::{Qp, QpInitAttr};
use crate::qp_attr::{
    validate_modify, AccessFlags, AttrMask, ModifyLimits, PathMtu, QpAttr, QpState, QpType,
};
use crate::queues::{Cq, CqRing, CqSink, SqRelease, Srq};
use crate::tx::Tx;
use crate::wr::{RecvWr, SendWr, WcStatus, WorkCompletion, WrOpcode};
use core::time::Duration;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roce_packet::{LKey, Psn, Qpn, RKey};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

/// Configuration of one emulated device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HcaConfig {
    /// Device name, e.g. `roce0` (shows in traces).
    pub name: String,
    /// The IP address of the port; its RoCEv2 GID is GID index 0.
    pub addr: IpAddr,
    /// Seed of the device RNG (memory key bytes). Same seed, same keys.
    pub seed: u64,
    /// The port's active MTU (default 1024, what rxe picks on 1500-byte Ethernet).
    pub active_mtu: PathMtu,
    /// Device limits (rxe-like defaults, see [`DeviceAttr`]).
    pub device_attr: DeviceAttr,
    /// The QPNs `create_qp` hands out (default `2..2^24`): a member of a
    /// device shared by several processes gets its slot's range.
    pub qpns: std::ops::Range<u32>,
    /// The first QPN tried (default 17, as rxe); the next ones follow it,
    /// wrapping inside `qpns`.
    pub first_qpn: u32,
    /// The top byte of the CM's local communication IDs
    /// ([`roce_cm::CmConfig::comm_id_tag`]): a shared device's member slot.
    pub comm_id_tag: Option<u8>,
    /// What the link below does (ICRC ownership, source port, region
    /// bodies, ACK batching); default: the simulator's.
    pub link: LinkProfile,
    /// Congestion management: the ECN field sent, the notification and
    /// reaction points (default: on, ECT(0), mlx5's parameters; see
    /// [`crate::congestion`]).
    pub congestion: crate::CongestionConfig,
    /// A broken IBA rule, for `roce conform`'s self-check only
    /// ([`crate::mutant`]); `None` for every real device. Only with the
    /// `mutants` feature.
    #[cfg(feature = "mutants")]
    pub mutant: Option<crate::Mutant>,
}

impl HcaConfig {
    /// A configuration with rxe-like defaults.
    pub fn new(name: impl Into<String>, addr: IpAddr, seed: u64) -> HcaConfig {
        HcaConfig {
            name: name.into(),
            addr,
            seed,
            active_mtu: PathMtu::Mtu1024,
            device_attr: DeviceAttr::default(),
            qpns: 2..1 << 24,
            first_qpn: 17,
            comm_id_tag: None,
            link: LinkProfile::default(),
            congestion: crate::CongestionConfig::default(),
            #[cfg(feature = "mutants")]
            mutant: None,
        }
    }

    /// The switch the device runs with: [`HcaConfig::mutant`].
    #[cfg(feature = "mutants")]
    fn switch(&self) -> Option<crate::Mutant> {
        self.mutant
    }

    /// The switch the device runs with: none (no `mutants` feature).
    #[cfg(not(feature = "mutants"))]
    fn switch(&self) -> Option<crate::Mutant> {
        None
    }
}

/// Public information about a registered memory region (`struct ibv_mr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInfo {
    /// Handle for `dereg_mr`, `mr_read`, `mr_write`.
    pub handle: MrHandle,
    /// The region's I/O virtual address (what SGEs and RETHs name).
    pub addr: u64,
    /// Bytes.
    pub length: u64,
    /// Key for local SGEs.
    pub lkey: LKey,
    /// Key the peer puts in RETHs and AtomicETHs.
    pub rkey: RKey,
    /// Access rights given at registration.
    pub access: AccessFlags,
}

impl MrInfo {
    /// What the application is told of region `m` (handle `handle`).
    fn of(handle: MrHandle, m: &Mr) -> MrInfo {
        MrInfo {
            handle,
            addr: m.iova,
            length: m.mem.len() as u64,
            lkey: m.lkey,
            rkey: m.rkey,
            access: m.access,
        }
    }
}

/// A software RoCEv2 HCA (one port), sans IO.
pub struct Hca {
    pub(crate) dev: Dev,
    pub(crate) qps: crate::qp_table::QpTable,
    next_qpn: u32,
    /// The QPNs this device may hand out ([`HcaConfig::qpns`]).
    qpns: std::ops::Range<u32>,
    /// QPN of the QP `poll_transmit` served last (round-robin).
    pub(crate) rr_cursor: u32,
    /// Who verifies received ICRCs ([`LinkProfile::rx_icrc`]).
    pub(crate) rx_icrc: RxIcrc,
    /// The mutation switch given to every QP (`HcaConfig::mutant`; always
    /// `None` without the `mutants` feature).
    pub(crate) mutant: Option<crate::Mutant>,
    /// The port's communication manager on QP1 ([`crate::cm_port`]).
    pub(crate) cm: crate::cm_port::CmPort,
    /// The ACKs and NAKs destroyed QPs still owed their peers: they leave
    /// first ([`Hca::destroy_qp`]).
    pub(crate) parting: std::collections::VecDeque<crate::io::Datagram>,
    /// Multicast groups and their QPs ([`crate::mcast`]).
    pub(crate) mcast: crate::objects::McastTable,
    /// XRC domains ([`crate::xrc`]).
    pub(crate) xrcds: std::collections::BTreeMap<crate::objects::XrcdHandle, crate::objects::Xrcd>,
    /// A shared device's member slot ([`HcaConfig::comm_id_tag`]): the top
    /// byte of XRC SRQ numbers ([`crate::xrc_relay`]).
    pub(crate) member_slot: Option<u8>,
    /// Shadows of other members' XRC target QPs whose requests named an
    /// SRQ of this member, by (owner's slot, QPN) ([`crate::xrc_relay`]).
    pub(crate) xrc_shadows: HashMap<(u8, roce_packet::Qpn), (u32, Qp)>,
}

impl Hca {
    /// Create a device.
    /// An IPv4-mapped IPv6 address is taken as the IPv4 address.
    pub fn new(cfg: HcaConfig) -> Hca {
        let mut cfg = cfg;
        if let IpAddr::V6(v6) = cfg.addr {
            if let Some(v4) = v6.to_ipv4_mapped() {
                cfg.addr = IpAddr::V4(v4);
            }
        }
        let mut attr = cfg.device_attr.clone();
        // rxe's node GUID: the EUI-64 of the port's MAC
        attr.node_guid = u64::from_be_bytes(eui64(mac_of(cfg.addr)));
        let cm = crate::cm_port::CmPort::new(cfg.addr, attr.node_guid, cfg.seed, cfg.comm_id_tag);
        let qpns = cfg.qpns.start.max(2)..cfg.qpns.end.min(1 << 24);
        let mutant = cfg.switch();
        let first_qpn = match qpns.contains(&cfg.first_qpn) {
            true => cfg.first_qpn,
            false => qpns.start,
        };
        Hca {
            dev: Dev {
                name: cfg.name,
                port: PortAttr {
                    state: PortState::Active,
                    max_mtu: PathMtu::Mtu4096,
                    active_mtu: cfg.active_mtu,
                    gid_tbl_len: 1024,
                    pkey_tbl_len: 1,
                    max_msg_sz: attr.max_msg_sz,
                },
                attr,
                rng: SmallRng::seed_from_u64(cfg.seed),
                pds: HashMap::default(),
                mem: MemTable::default(),
                srqs: HashMap::default(),
                sink: CqSink::default(),
                counters: Counters::default(),
                tx: Tx::new(cfg.addr, &cfg.link, cfg.congestion.ecn),
                cc: cfg.congestion,
                cnps: std::collections::VecDeque::new(),
                sqd_draining: Default::default(),
                bell: Default::default(),
                rung: Vec::new(),
                next_id: 0,
                next_key: 0,
                next_iova: 0x7f00_0000_0000,
            },
            qps: Default::default(),
            next_qpn: first_qpn,
            qpns,
            rr_cursor: 0,
            parting: std::collections::VecDeque::new(),
            rx_icrc: cfg.link.rx_icrc,
            mutant,
            cm,
            mcast: Default::default(),
            xrcds: Default::default(),
            member_slot: cfg.comm_id_tag,
            xrc_shadows: HashMap::default(),
        }
        .with_ack_delay()
    }

    /// The QP table files held ACKs by the link profile's ACK delay.
    fn with_ack_delay(mut self) -> Hca {
        self.qps.set_ack_delay(self.dev.tx.ack_delay);
        self
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.dev.name
    }
    /// The port's IP address.
    pub fn addr(&self) -> IpAddr {
        self.dev.tx.addr
    }
    /// `ibv_query_device`.
    pub fn query_device(&self) -> DeviceAttr {
        self.dev.attr.clone()
    }
    /// `ibv_query_port` (port 1).
    pub fn query_port(&self) -> PortAttr {
        self.dev.port
    }
    /// `ibv_query_gid` with rxe's table ([`crate::objects::gid_table`]):
    /// index 0 the link-local GID from the port's MAC, index 1 the
    /// address's RoCEv2 GID (IPv4-mapped for IPv4); other indices are empty.
    pub fn query_gid(&self, index: u32) -> Option<Ipv6Addr> {
        gid_table(self.dev.tx.addr).get(index as usize).copied()
    }
    /// Counter snapshot.
    pub fn counters(&self) -> Counters {
        self.dev.counters()
    }
    /// Take the oldest asynchronous event (`ibv_get_async_event`).
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.dev.sink.events.pop_front()
    }

    // ---- protection domains ----

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> Result<PdHandle, AllocPdError> {
        if self.dev.pds.len() >= self.dev.attr.max_pd as usize {
            return Err(AllocPdError::TooMany { max: self.dev.attr.max_pd });
        }
        let h = PdHandle(self.dev.id());
        self.dev.pds.insert(h, Pd { users: 0 });
        Ok(h)
    }

    /// `ibv_dealloc_pd`: fails while MRs or QPs use the PD.
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), DeallocPdError> {
        let p = self.dev.pds.get(&pd).ok_or(DeallocPdError::UnknownPd(pd))?;
        if p.users > 0 {
            return Err(DeallocPdError::InUse { pd, users: p.users });
        }
        self.dev.pds.remove(&pd);
        Ok(())
    }

    // ---- memory regions ----

    /// `ibv_reg_mr`: a zeroed buffer of `len` bytes owned by the device, at a
    /// fresh 4 KiB-aligned I/O virtual address (a guard page between
    /// regions). lkey and rkey differ; their low byte comes from the seeded
    /// RNG. REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is rejected
    /// (IBA §10.6.3.1 C10-...; as libibverbs documents).
    pub fn reg_mr(
        &mut self,
        pd: PdHandle,
        len: usize,
        access: AccessFlags,
    ) -> Result<MrInfo, RegMrError> {
        self.check_reg(pd, len as u64, access)?;
        self.reg_mr_mem(pd, RegionMem::owned(len), None, access)
    }

    /// The checks every registration makes (PD, access flags, size, count).
    fn check_reg(&self, pd: PdHandle, len: u64, access: AccessFlags) -> Result<(), RegMrError> {
        let d = &self.dev;
        d.pds.get(&pd).ok_or(RegMrError::UnknownPd(pd))?;
        check_access(access)?;
        // an implicit on-demand region (the whole address space) has no size
        let implicit = access.contains(AccessFlags::ON_DEMAND) && len == usize::MAX as u64;
        if len > d.attr.max_mr_size && !implicit {
            return Err(RegMrError::TooLarge { len, max: d.attr.max_mr_size });
        }
        if d.mem.mrs.len() >= d.attr.max_mr as usize {
            return Err(RegMrError::TooMany { max: d.attr.max_mr });
        }
        Ok(())
    }

    /// `ibv_reg_mr` over given memory: an owned buffer, or the
    /// application's own pages ([`RegionMem::external`], the C ABI). `iova`
    /// `None` allocates an address as [`Hca::reg_mr`] does; `Some(v)` uses
    /// `v` (the C ABI passes the application's address, as a NIC does).
    pub fn reg_mr_mem(
        &mut self,
        pd: PdHandle,
        mem: RegionMem,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<MrInfo, RegMrError> {
        let len = mem.len();
        self.check_reg(pd, len as u64, access)?;
        if let Some(v) = iova {
            if v.checked_add(len as u64).is_none() {
                return Err(RegMrError::IovaOverflow { iova: v, len: len as u64 });
            }
        }
        let d = &mut self.dev;
        let p = d.pds.get_mut(&pd).ok_or(RegMrError::UnknownPd(pd))?;
        p.users += 1;
        let iova = match iova {
            Some(v) => v,
            None => {
                let at = d.next_iova;
                let span = (len as u64).div_ceil(4096).max(1) * 4096 + 4096;
                d.next_iova = d.next_iova.wrapping_add(span);
                at
            }
        };
        let k1: u8 = d.rng.gen();
        let k2: u8 = d.rng.gen();
        d.next_key += 1;
        let lkey = LKey::new((d.next_key << 8) | u32::from(k1));
        d.next_key += 1;
        let rkey = RKey::new((d.next_key << 8) | u32::from(k2));
        d.next_id += 1;
        let h = MrHandle(d.next_id);
        d.mem.mrs.insert(h, Mr { pd, access, iova, lkey, rkey, mem: MrMem::new(mem) });
        d.mem.by_lkey.insert(lkey, h);
        d.mem.by_rkey.insert(rkey, h);
        tracing::debug!(dev = %d.name, mr = h.0, iova, len, %lkey, %rkey, "reg_mr");
        Ok(MrInfo { handle: h, addr: iova, length: len as u64, lkey, rkey, access })
    }

    /// `ibv_rereg_mr`: change a region's PD (`IBV_REREG_MR_CHANGE_PD`), its
    /// memory and address (`_CHANGE_TRANSLATION`: the new memory and its
    /// iova) and/or its access rights (`_CHANGE_ACCESS`). The keys stay the
    /// same; the same checks as a registration apply, and on an error
    /// nothing changes.
    pub fn rereg_mr(
        &mut self,
        mr: MrHandle,
        pd: Option<PdHandle>,
        mem: Option<(RegionMem, u64)>,
        access: Option<AccessFlags>,
    ) -> Result<MrInfo, RegMrError> {
        let d = &mut self.dev;
        let m = d.mem.mrs.get(&mr).ok_or(RegMrError::UnknownMr(mr))?;
        let new_pd = pd.unwrap_or(m.pd);
        d.pds.get(&new_pd).ok_or(RegMrError::UnknownPd(new_pd))?;
        let new_access = access.unwrap_or(m.access);
        check_access(new_access)?;
        if let Some((mem, iova)) = &mem {
            let len = mem.len() as u64;
            if len > d.attr.max_mr_size {
                return Err(RegMrError::TooLarge { len, max: d.attr.max_mr_size });
            }
            if iova.checked_add(len).is_none() {
                return Err(RegMrError::IovaOverflow { iova: *iova, len });
            }
        }
        let old_pd = m.pd;
        if new_pd != old_pd {
            if let Some(p) = d.pds.get_mut(&old_pd) {
                p.users = p.users.saturating_sub(1);
            }
            if let Some(p) = d.pds.get_mut(&new_pd) {
                p.users += 1;
            }
        }
        let m = d.mem.mrs.get_mut(&mr).ok_or(RegMrError::UnknownMr(mr))?;
        m.pd = new_pd;
        m.access = new_access;
        if let Some((mem, iova)) = mem {
            m.mem = MrMem::new(mem);
            m.iova = iova;
        }
        tracing::debug!(dev = %d.name, mr = mr.0, "rereg_mr");
        Ok(MrInfo::of(mr, m))
    }

    /// Information about a registered region.
    pub fn mr_info(&self, mr: MrHandle) -> Option<MrInfo> {
        self.dev.mem.mrs.get(&mr).map(|m| MrInfo::of(mr, m))
    }

    /// The region of `pd` whose local key is `lkey` (`ibv_advise_mr`'s
    /// lookup): `None` for an unknown key or a region of another PD.
    pub fn mr_by_lkey(&self, pd: PdHandle, lkey: roce_packet::LKey) -> Option<MrInfo> {
        let h = *self.dev.mem.by_lkey.get(&lkey)?;
        let m = self.dev.mem.mrs.get(&h)?;
        (m.pd == pd).then(|| MrInfo::of(h, m))
    }

    /// `ibv_dereg_mr`.
    pub fn dereg_mr(&mut self, mr: MrHandle) -> Result<(), DeregMrError> {
        let m = self.dev.mem.mrs.remove(&mr).ok_or(DeregMrError::UnknownMr(mr))?;
        self.dev.mem.by_lkey.remove(&m.lkey);
        self.dev.mem.by_rkey.remove(&m.rkey);
        if let Some(p) = self.dev.pds.get_mut(&m.pd) {
            p.users = p.users.saturating_sub(1);
        }
        Ok(())
    }

    /// `copy` (a read or a write of `len` bytes at an index into the
    /// region's memory) on region `mr` at `offset`, bounds checked first;
    /// a copy that fails (pages gone from under an external region) is out
    /// of bounds as well.
    fn mr_copy(
        &self,
        mr: MrHandle,
        offset: u64,
        len: usize,
        copy: impl FnOnce(&RegionMem, usize) -> Option<()>,
    ) -> Result<(), MrAccessError> {
        let m = self.dev.mem.mrs.get(&mr).ok_or(MrAccessError::UnknownMr(mr))?;
        let (len, size) = (len as u64, m.mem.len() as u64);
        let out = MrAccessError::OutOfBounds { offset, len, size };
        match offset.checked_add(len) {
            Some(end) if end <= size => copy(&m.mem, offset as usize).ok_or(out),
            _ => Err(out),
        }
    }

    /// Read `buf.len()` bytes at `offset` into the region (application side).
    pub fn mr_read(&self, mr: MrHandle, offset: u64, buf: &mut [u8]) -> Result<(), MrAccessError> {
        self.mr_copy(mr, offset, buf.len(), |mem, off| mem.read(off, buf))
    }

    /// Write `data` at `offset` into the region (application side).
    pub fn mr_write(
        &mut self,
        mr: MrHandle,
        offset: u64,
        data: &[u8],
    ) -> Result<(), MrAccessError> {
        self.mr_copy(mr, offset, data.len(), |mem, off| mem.write(off, data))
    }

    // ---- completion queues ----

    /// `ibv_create_cq` with a fixed depth of `cqe` entries (1..=max_cqe).
    pub fn create_cq(&mut self, cqe: u32) -> Result<CqHandle, CreateCqError> {
        let max = self.dev.attr.max_cqe;
        if cqe == 0 || cqe > max {
            return Err(CreateCqError::InvalidDepth { cqe, max });
        }
        let h = CqHandle(self.dev.id());
        self.dev.sink.cqs.insert(h, Cq::new(cqe as usize));
        Ok(h)
    }

    /// `ibv_poll_cq`: up to `max` completions, oldest first. A CQ that
    /// overflowed returns its remaining entries, then `Overrun`.
    ///
    /// Polling a send completion frees send-queue slots of its QP, as
    /// mlx5 does: its own WQE's and those of the unsignaled WQEs completed
    /// before it ([`Hca::post_send`] counts slots held until then).
    pub fn poll_cq(
        &mut self,
        cq: CqHandle,
        max: usize,
    ) -> Result<Vec<WorkCompletion>, PollCqError> {
        let c = self.dev.sink.cqs.get(&cq).ok_or(PollCqError::UnknownCq(cq))?;
        let mut out = vec![WorkCompletion::EMPTY; max.min(c.ring.len())];
        let n = self.poll_cq_into(cq, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// [`Hca::poll_cq`] into the caller's array, as `ibv_poll_cq` does (no
    /// allocation): returns how many entries were written, oldest first.
    pub fn poll_cq_into(
        &mut self,
        cq: CqHandle,
        out: &mut [WorkCompletion],
    ) -> Result<usize, PollCqError> {
        let c = self.dev.sink.cqs.get(&cq).ok_or(PollCqError::UnknownCq(cq))?;
        c.ring.poll_into(out).map_err(|()| PollCqError::Overrun(cq))
    }

    /// The entries of a CQ, for pollers that do not take the device lock
    /// ([`CqRing::poll_into`]; `roce_verbs_api::Cq::poll` polls there).
    pub fn cq_ring(&self, cq: CqHandle) -> Option<Arc<CqRing>> {
        self.dev.sink.cqs.get(&cq).map(|c| c.ring.clone())
    }

    /// [`Hca::poll_cq`] for a consumer that takes completions ahead of the
    /// program (the C ABI's extended CQ buffers a batch): nothing is freed
    /// now; call each completion's [`SqRelease::release`] (or
    /// [`Hca::release_sq`]) when the program reads it.
    pub fn poll_cq_deferred(
        &mut self,
        cq: CqHandle,
        max: usize,
    ) -> Result<Vec<(WorkCompletion, SqRelease)>, PollCqError> {
        let c = self.dev.sink.cqs.get(&cq).ok_or(PollCqError::UnknownCq(cq))?;
        c.ring.poll_deferred(max).map_err(|()| PollCqError::Overrun(cq))
    }

    /// Free the send-queue slots of a completion taken with
    /// [`Hca::poll_cq_deferred`]. Nothing happens when its QP was reset or
    /// destroyed since (its QPN possibly reused): the slots went with it.
    pub fn release_sq(&mut self, rel: SqRelease) {
        rel.release();
    }

    /// Send-queue slots `qpn` holds: WQEs not completed, and completed
    /// ones whose freeing completion has not been polled. `post_send`
    /// refuses with [`PostSendError::QueueFull`] when this reaches
    /// `max_send_wr`.
    pub fn sq_slots_held(&self, qpn: Qpn) -> Option<u32> {
        self.qps.get(&qpn).map(|q| u32::try_from(q.sq_held()).unwrap_or(u32::MAX))
    }

    /// `ibv_req_notify_cq`: the next completion (or, with `solicited_only`,
    /// the next error or receive completion) queues a completion event for
    /// [`Hca::poll_comp_event`]; one-shot, re-arm after each event.
    pub fn req_notify_cq(
        &mut self,
        cq: CqHandle,
        solicited_only: bool,
    ) -> Result<(), NotifyCqError> {
        let c = self.dev.sink.cqs.get_mut(&cq).ok_or(NotifyCqError::UnknownCq(cq))?;
        c.armed = Some(solicited_only);
        Ok(())
    }

    /// `ibv_resize_cq`: change the depth to `cqe` entries (1..=max_cqe);
    /// refused if fewer than the completions it holds now.
    pub fn resize_cq(&mut self, cq: CqHandle, cqe: u32) -> Result<(), ResizeCqError> {
        let max = self.dev.attr.max_cqe;
        let c = self.dev.sink.cqs.get_mut(&cq).ok_or(ResizeCqError::UnknownCq(cq))?;
        if cqe == 0 || cqe > max {
            return Err(ResizeCqError::InvalidDepth { cqe, max });
        }
        if (cqe as usize) < c.ring.len() {
            return Err(ResizeCqError::BelowEntries { cqe, entries: c.ring.len() });
        }
        c.depth = cqe as usize;
        Ok(())
    }

    /// The depth of a CQ (`ibv_cq.cqe`).
    pub fn cq_depth(&self, cq: CqHandle) -> Option<u32> {
        self.dev.sink.cqs.get(&cq).map(|c| c.depth as u32)
    }

    /// `ibv_get_cq_event` without blocking: the oldest notified CQ.
    pub fn poll_comp_event(&mut self) -> Option<CqHandle> {
        self.dev.sink.comp_events.pop_front()
    }

    // ---- shared receive queues ----

    /// `ibv_create_srq`.
    pub fn create_srq(&mut self, pd: PdHandle, attr: SrqAttr) -> Result<SrqHandle, CreateSrqError> {
        let a = &self.dev.attr;
        if attr.max_wr > a.max_srq_wr {
            return Err(CreateSrqError::CapTooLarge {
                what: "max_wr",
                requested: attr.max_wr,
                max: a.max_srq_wr,
            });
        }
        if attr.max_sge > a.max_srq_sge {
            return Err(CreateSrqError::CapTooLarge {
                what: "max_sge",
                requested: attr.max_sge,
                max: a.max_srq_sge,
            });
        }
        if attr.srq_limit != 0 && attr.srq_limit >= attr.max_wr {
            return Err(CreateSrqError::BadLimit { limit: attr.srq_limit, max_wr: attr.max_wr });
        }
        let p = self.dev.pds.get_mut(&pd).ok_or(CreateSrqError::UnknownPd(pd))?;
        p.users += 1;
        let h = SrqHandle(self.dev.id());
        self.dev.srqs.insert(h, Srq { pd, attr, wrs: VecDeque::new(), users: 0, xrc: None });
        Ok(h)
    }

    /// `ibv_modify_srq` with IBV_SRQ_LIMIT: arm the limit event (0 disarms).
    pub fn modify_srq(&mut self, srq: SrqHandle, srq_limit: u32) -> Result<(), ModifySrqError> {
        let s = self.dev.srqs.get_mut(&srq).ok_or(ModifySrqError::UnknownSrq(srq))?;
        if srq_limit != 0 && srq_limit >= s.attr.max_wr {
            return Err(ModifySrqError::BadLimit { limit: srq_limit, max_wr: s.attr.max_wr });
        }
        s.attr.srq_limit = srq_limit;
        Ok(())
    }

    /// `ibv_modify_srq` with IBV_SRQ_MAX_WR (rxe's resize): the queue
    /// holds up to `max_wr` WRs from now on. EINVAL, as rxe answers: 0 or
    /// over the device's `max_srq_wr`, fewer than the WRs queued now, or
    /// not above an armed limit.
    pub fn resize_srq(&mut self, srq: SrqHandle, max_wr: u32) -> Result<(), ModifySrqError> {
        let max = self.dev.attr.max_srq_wr;
        let s = self.dev.srqs.get_mut(&srq).ok_or(ModifySrqError::UnknownSrq(srq))?;
        if max_wr == 0 || max_wr > max || (max_wr as usize) < s.wrs.len() {
            return Err(ModifySrqError::BadSize { max_wr, queued: s.wrs.len(), max });
        }
        if s.attr.srq_limit != 0 && s.attr.srq_limit >= max_wr {
            return Err(ModifySrqError::BadLimit { limit: s.attr.srq_limit, max_wr });
        }
        s.attr.max_wr = max_wr;
        Ok(())
    }

    /// `ibv_query_srq`: attributes and the number of queued WRs.
    pub fn query_srq(&self, srq: SrqHandle) -> Option<(SrqAttr, usize)> {
        self.dev.srqs.get(&srq).map(|s| (s.attr, s.wrs.len()))
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: RecvWr) -> Result<(), PostSrqRecvError> {
        let s = self.dev.srqs.get_mut(&srq).ok_or(PostSrqRecvError::UnknownSrq(srq))?;
        if s.wrs.len() >= s.attr.max_wr as usize {
            return Err(PostSrqRecvError::QueueFull { max: s.attr.max_wr });
        }
        if wr.sg_list.len() > s.attr.max_sge as usize {
            return Err(PostSrqRecvError::TooManySge { n: wr.sg_list.len(), max: s.attr.max_sge });
        }
        s.wrs.push_back(wr);
        Ok(())
    }

    /// `ibv_destroy_srq`: fails while a QP uses it; queued WRs are dropped.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), DestroySrqError> {
        let s = self.dev.srqs.get(&srq).ok_or(DestroySrqError::UnknownSrq(srq))?;
        if s.users > 0 {
            return Err(DestroySrqError::InUse { srq, users: s.users });
        }
        if let Some(s) = self.dev.srqs.remove(&srq) {
            if let Some(p) = self.dev.pds.get_mut(&s.pd) {
                p.users = p.users.saturating_sub(1);
            }
            if let Some((d, cq)) = s.xrc {
                if let Some(c) = self.dev.sink.cqs.get_mut(&cq) {
                    c.users = c.users.saturating_sub(1);
                }
                if let Some(x) = self.xrcds.get_mut(&d) {
                    x.users = x.users.saturating_sub(1);
                }
            }
        }
        Ok(())
    }

    /// `ibv_destroy_cq`: fails while a QP uses it.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), DestroyCqError> {
        let c = self.dev.sink.cqs.get(&cq).ok_or(DestroyCqError::UnknownCq(cq))?;
        if c.users > 0 {
            return Err(DestroyCqError::InUse { cq, users: c.users });
        }
        self.dev.sink.cqs.remove(&cq);
        Ok(())
    }

    // ---- queue pairs ----

    /// `ibv_create_qp`: RC, UC and UD. QPNs start at 17 like rxe (QP0/QP1,
    /// the special QPs, are not created).
    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<Qpn, CreateQpError> {
        self.create_qp_at(init, None)
    }

    /// [`Hca::create_qp`] at a fixed QPN (the GSI's) or the next free one.
    fn create_qp_at(&mut self, init: QpInitAttr, at: Option<Qpn>) -> Result<Qpn, CreateQpError> {
        let a = &self.dev.attr;
        for (what, requested, max) in [
            ("max_send_wr", init.cap.max_send_wr, a.max_qp_wr),
            ("max_recv_wr", init.cap.max_recv_wr, a.max_qp_wr),
            ("max_send_sge", init.cap.max_send_sge, a.max_sge),
            ("max_recv_sge", init.cap.max_recv_sge, a.max_sge),
            ("max_inline_data", init.cap.max_inline_data, a.max_inline_data),
        ] {
            if requested > max {
                return Err(CreateQpError::CapTooLarge { what, requested, max });
            }
        }
        if !self.dev.pds.contains_key(&init.pd) {
            return Err(CreateQpError::UnknownPd(init.pd));
        }
        for cq in [init.send_cq, init.recv_cq] {
            if !self.dev.sink.cqs.contains_key(&cq) {
                return Err(CreateQpError::UnknownCq(cq));
            }
        }
        if let Some(srq) = init.srq {
            if !self.dev.srqs.contains_key(&srq) {
                return Err(CreateQpError::UnknownSrq(srq));
            }
        }
        if self.qps.len() >= self.dev.attr.max_qp as usize {
            return Err(CreateQpError::TooMany);
        }
        let qpn = match at {
            Some(q) => q,
            None => {
                let r = self.qpns.clone();
                if r.is_empty() {
                    return Err(CreateQpError::TooMany);
                }
                let wrap = |n: u32| if n + 1 >= r.end { r.start } else { n + 1 };
                let mut n = self.next_qpn;
                let mut tries = r.len();
                while self.qps.contains_key(&Qpn::new(n)) {
                    tries = tries.saturating_sub(1);
                    if tries == 0 {
                        return Err(CreateQpError::TooMany);
                    }
                    n = wrap(n);
                }
                self.next_qpn = wrap(n);
                Qpn::new(n)
            }
        };
        if let Some(p) = self.dev.pds.get_mut(&init.pd) {
            p.users += 1;
        }
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(c) = self.dev.sink.cqs.get_mut(&cq) {
                c.users += 1;
            }
        }
        if let Some(s) = init.srq.and_then(|h| self.dev.srqs.get_mut(&h)) {
            s.users += 1;
        }
        let mut qp = Qp::new(qpn, init, self.dev.port.active_mtu);
        qp.cc = crate::congestion::QpCongestion::new(&self.dev.cc);
        qp.mutant = self.mutant;
        qp.max_msg = self.dev.attr.max_msg_sz;
        // the program's send queue rings this device's doorbell
        qp.sq_ring = std::sync::Arc::new(crate::sq_ring::SqRing::new(
            qpn,
            Some(self.dev.bell.clone()),
            qp.sq_freed.clone(),
        ));
        qp.publish_sq();
        self.qps.insert(qp);
        tracing::debug!(dev = %self.dev.name, %qpn, "create_qp");
        Ok(qpn)
    }

    /// The port's GSI QP (QP1, IBA 13.5.1): a UD QP with QPN 1, where the
    /// communication manager's MADs arrive (a UD SEND to QPN 1 with the Q_Key
    /// 0x80010000, `roce_packet::mad::GSI_QKEY`). One per device; it is moved
    /// through INIT/RTR/RTS like any UD QP (give it that Q_Key at INIT, or
    /// send with a Q_Key whose high bit is set, which means "the QP's own").
    /// Ordinary [`Hca::create_qp`] never hands out QPN 0 or 1.
    pub fn create_gsi_qp(&mut self, init: QpInitAttr) -> Result<Qpn, CreateQpError> {
        if init.qp_type != QpType::Ud {
            return Err(CreateQpError::GsiNotUd);
        }
        let gsi = Qpn::new(1);
        if self.qps.contains_key(&gsi) {
            return Err(CreateQpError::GsiExists);
        }
        self.create_qp_at(init, Some(gsi))
    }

    /// `ibv_modify_qp`: checked by [`validate_modify`], then applied.
    pub fn modify_qp(&mut self, qpn: Qpn, attr: &QpAttr) -> Result<(), ModifyQpError> {
        let limits = ModifyLimits {
            max_qp_rd_atom: self.dev.attr.max_qp_rd_atom,
            max_qp_init_rd_atom: self.dev.attr.max_qp_init_rd_atom,
            active_mtu: self.dev.port.active_mtu,
            pkey_table_len: self.dev.port.pkey_tbl_len,
            phys_port_cnt: self.dev.attr.phys_port_cnt,
        };
        let mut entry = self.qps.get_mut(&qpn).ok_or(ModifyQpError::UnknownQp(qpn))?;
        let qp = &mut *entry;
        let to = validate_modify(qp.init.qp_type, qp.state, attr, &limits)?;
        let m = attr.mask;
        let p = &mut qp.p;
        if m.contains(AttrMask::ACCESS_FLAGS) {
            p.access = attr.qp_access_flags;
        }
        if m.contains(AttrMask::PKEY_INDEX) {
            p.pkey_index = attr.pkey_index;
        }
        if m.contains(AttrMask::PORT) {
            p.port = attr.port_num;
        }
        if m.contains(AttrMask::QKEY) {
            p.qkey = attr.qkey;
        }
        if m.contains(AttrMask::AV) {
            p.ah = attr.ah_attr;
        }
        if m.contains(AttrMask::PATH_MTU) {
            if let Some(mtu) = attr.path_mtu {
                p.mtu = mtu;
            }
        }
        if m.contains(AttrMask::TIMEOUT) {
            p.timeout = attr.timeout;
        }
        if m.contains(AttrMask::RETRY_CNT) {
            p.retry_cnt = attr.retry_cnt.min(7);
            qp.comp.retry_left = p.retry_cnt;
        }
        if m.contains(AttrMask::RNR_RETRY) {
            p.rnr_retry = attr.rnr_retry.min(7);
            qp.comp.rnr_left = p.rnr_retry;
        }
        if m.contains(AttrMask::RQ_PSN) {
            p.rq_psn = Psn::new(attr.rq_psn);
            qp.resp.epsn = p.rq_psn;
        }
        if m.contains(AttrMask::MAX_QP_RD_ATOMIC) {
            p.max_rd_atomic = attr.max_rd_atomic;
        }
        if m.contains(AttrMask::MIN_RNR_TIMER) {
            p.min_rnr_timer = attr.min_rnr_timer & 0x1F;
        }
        if m.contains(AttrMask::SQ_PSN) {
            p.sq_psn = Psn::new(attr.sq_psn);
            qp.req.psn = p.sq_psn;
            if crate::mutant::is(qp.mutant, crate::Mutant::SqPsnPlusOne) {
                qp.req.psn = p.sq_psn.next();
            }
            qp.comp.psn = qp.req.psn;
        }
        if m.contains(AttrMask::MAX_DEST_RD_ATOMIC) {
            p.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if m.contains(AttrMask::DEST_QPN) {
            p.dest_qpn = Qpn::new(attr.dest_qp_num);
        }
        if m.contains(AttrMask::EN_SQD_ASYNC_NOTIFY) {
            p.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        let from = qp.state;
        // (a move to ERR is logged once, by `enter_error`)
        if from != to && to != QpState::Err {
            tracing::info!(dev = %self.dev.name, %qpn, %from, %to, "QP state change");
        }
        if to == QpState::Sqd && from == QpState::Rts && qp.p.en_sqd_async_notify {
            self.dev.sqd_draining.insert(qpn);
        } else if to != QpState::Sqd {
            self.dev.sqd_draining.remove(&qpn);
        }
        match to {
            QpState::Reset => qp.reset(),
            QpState::Err => qp.enter_error(&mut self.dev.sink),
            s => qp.set_state(s),
        }
        self.dev.counters.mcast_sent += u64::from(std::mem::take(&mut qp.posted_groups));
        drop(entry); // re-files the QP (qp_table)
        self.settle();
        Ok(())
    }

    /// `ibv_query_qp`: current attributes (mask lists every attribute) and
    /// the creation attributes.
    pub fn query_qp(&self, qpn: Qpn) -> Result<(QpAttr, QpInitAttr), QpLookupError> {
        let qp = self.qps.get(&qpn).ok_or(QpLookupError::UnknownQp(qpn))?;
        let p = &qp.p;
        let mut a = QpAttr::new()
            .state(qp.state)
            .cur_state(qp.state)
            .access_flags(p.access)
            .pkey_index(p.pkey_index)
            .port(p.port)
            .qkey(p.qkey)
            .mtu(p.mtu)
            .timeout(p.timeout)
            .retry_cnt(p.retry_cnt)
            .rnr_retry(p.rnr_retry)
            .rq_psn(qp.resp.epsn.value())
            .max_rd_atomic(p.max_rd_atomic)
            .min_rnr_timer(p.min_rnr_timer)
            .sq_psn(qp.req.psn.value())
            .max_dest_rd_atomic(p.max_dest_rd_atomic)
            .cap(qp.init.cap)
            .dest_qpn(p.dest_qpn.value());
        if let Some(ah) = p.ah {
            a = a.ah(ah);
        }
        Ok((a, qp.init))
    }

    /// `ibv_destroy_qp` (outstanding work is dropped without completions).
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), QpLookupError> {
        let mut qp = self.qps.remove(&qpn).ok_or(QpLookupError::UnknownQp(qpn))?;
        // what the program posted is the QP's to send (UD, UC) or drop; a
        // later post through a handle kept by mistake finds no QP
        qp.posted_groups += qp.sq_ring.close(&mut qp.sq);
        self.dev.counters.mcast_sent += u64::from(std::mem::take(&mut qp.posted_groups));
        // (the verbs refuse to destroy an attached QP, EBUSY; a core user
        // that does is not left with attachments to a QP that is gone)
        self.mcast.remove_qp(qpn);
        // The ACKs, NAKs and atomic ACKs it still owes leave (READ
        // responses do not): a NIC sends them as the packets arrive, before
        // the program can see the completion that lets it destroy the QP.
        // Lost here, the peer would retransmit for them, forever at
        // retry_cnt 7 (rxe's reading). (The time only decides whether a
        // held ACK is due; forced, every one is.)
        qp.resp.queue.retain(|i| !matches!(i, crate::qp::RespItem::Read(_)));
        let now = self.cm.last_now;
        let forced = std::mem::replace(&mut self.dev.tx.acks_forced, true);
        while let Some(d) = qp.next_response(&mut self.dev.resp(), now) {
            self.parting.push_back(d);
        }
        self.dev.tx.acks_forced = forced;
        // A UD or UC QP's posted sends leave too: nothing answers them, and
        // a NIC has them on the wire long before a program that posts and
        // then destroys at once (rdma-core's mckey sender) gets to the
        // destroy. Dropped here, every datagram such a program sends would
        // be lost. (Bounded: what the queue holds, a few packets each.)
        if matches!(qp.init.qp_type, QpType::Ud | QpType::Uc) && qp.state == QpState::Rts {
            let budget = qp.sq.len().saturating_mul(8).min(1 << 16);
            for _ in 0..budget {
                match qp.next_packet(&mut self.dev.req(), now) {
                    Some(d) => self.parting.push_back(d),
                    None => break,
                }
            }
        }
        // (an XRC target's creation counted its placeholders, not the XRC
        // SRQ its last request ran with)
        let init = qp.xrc_home.unwrap_or(qp.init);
        if let Some(d) = qp.xrcd.and_then(|d| self.xrcds.get_mut(&d)) {
            d.users = d.users.saturating_sub(1);
        }
        if let Some(p) = self.dev.pds.get_mut(&init.pd) {
            p.users = p.users.saturating_sub(1);
        }
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(c) = self.dev.sink.cqs.get_mut(&cq) {
                c.users = c.users.saturating_sub(1);
            }
        }
        if let Some(s) = init.srq.and_then(|h| self.dev.srqs.get_mut(&h)) {
            s.users = s.users.saturating_sub(1);
        }
        Ok(())
    }

    /// The state of a QP.
    /// Switch a QP's notification and reaction points
    /// ([`crate::congestion`]; a new QP takes the device's). Turning the
    /// reaction point off lifts the QP's rate limit at once.
    pub fn set_qp_congestion(&mut self, qpn: Qpn, sw: crate::QpCc) -> Result<(), QpLookupError> {
        let mut qp = self.qps.get_mut(&qpn).ok_or(QpLookupError::UnknownQp(qpn))?;
        qp.cc.sw = sw;
        if !sw.rp {
            qp.cc.reset();
            qp.cc.sw = sw;
        }
        Ok(())
    }

    /// A QP's congestion switches and its reaction point's current rate
    /// in Mb/s (`None` while it is not limited: it sends at line rate).
    pub fn qp_congestion(&self, qpn: Qpn) -> Option<(crate::QpCc, Option<u64>)> {
        let qp = self.qps.get(&qpn)?;
        Some((qp.cc.sw, qp.cc.rp.limited.then(|| qp.cc.rp.rate_mbps())))
    }

    /// The CNP a connected QP's notification point sends its peer QP
    /// ([`crate::congestion`]; for tests and `roce conform`, which send
    /// CNPs to a device under test). `None` for a QP without a path.
    pub fn cnp_for(&self, qpn: Qpn) -> Option<crate::Datagram> {
        let qp = self.qps.get(&qpn)?;
        let to = qp.p.ah?.dgid;
        self.dev.tx.cnp(qp, to, qp.p.dest_qpn, self.dev.cc.np.cnp_dscp)
    }

    /// Every QP whose reaction point limits its rate (a CNP cut it and it
    /// has not recovered), with that rate in Mb/s, by QPN (what `roce
    /// stats` shows).
    pub fn qp_rates(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self
            .qps
            .iter()
            .filter(|(_, q)| q.cc.sw.rp && q.cc.rp.limited)
            .map(|(n, q)| (n.value(), q.cc.rp.rate_mbps()))
            .collect();
        v.sort_unstable();
        v
    }

    /// The device's congestion management ([`HcaConfig::congestion`]).
    pub fn congestion(&self) -> &crate::CongestionConfig {
        &self.dev.cc
    }

    pub fn qp_state(&self, qpn: Qpn) -> Option<QpState> {
        self.qps.get(&qpn).map(|q| q.state)
    }

    // ---- work requests ----

    /// `ibv_post_send`. Local keys are checked when the WQE executes (a bad
    /// one completes with LOC_PROT_ERR). On a QP in ERR the WR is accepted
    /// and completes at once with WR_FLUSH_ERR.
    pub fn post_send(&mut self, qpn: Qpn, wr: SendWr) -> Result<(), PostSendError> {
        let mut entry = self.qps.get_mut(&qpn).ok_or(PostSendError::UnknownQp(qpn))?;
        let qp = &mut *entry;
        // under the program's queue's lock: what it posted goes first, and
        // the slot count is the one its posts check
        let ring = qp.sq_ring.clone();
        let mut g = ring.lock();
        qp.posted_groups += ring.drain_locked(&mut g, &mut qp.sq);
        let w = crate::sq_ring::check(&qp.sq_shape(), wr, g.held())?;
        g.count_post();
        drop(g);
        if qp.state == QpState::Err {
            let wc = qp.send_wc(&w, WcStatus::WrFlushErr);
            qp.retire_send(&mut self.dev.sink, Some(wc));
        } else {
            if crate::sq_ring::to_group(&w) {
                qp.posted_groups += 1;
            }
            qp.sq.push_back(w);
        }
        self.dev.counters.mcast_sent += u64::from(std::mem::take(&mut qp.posted_groups));
        drop(entry); // re-files the QP (qp_table)
        self.settle();
        Ok(())
    }

    /// The send queue a program posts to without the device lock (`None`:
    /// no such QP). [`crate::SqRing::post`] says when to come back here
    /// instead.
    pub fn sq_ring(&self, qpn: Qpn) -> Option<std::sync::Arc<crate::sq_ring::SqRing>> {
        self.qps.get(&qpn).map(|q| q.sq_ring.clone())
    }

    /// Take what the programs posted to the send queues whose doorbells
    /// rang (one atomic load when none did): the WQEs join their QPs'
    /// queues, which the transmit scheduler then serves.
    pub(crate) fn answer_doorbells(&mut self) {
        let mut rung = std::mem::take(&mut self.dev.rung);
        self.dev.bell.take(&mut rung);
        for qpn in rung.drain(..) {
            if let Some(mut qp) = self.qps.get_mut(&qpn) {
                qp.sync_sq();
                self.dev.counters.mcast_sent += u64::from(std::mem::take(&mut qp.posted_groups));
            }
        }
        self.dev.rung = rung;
    }

    /// The receive queue a program posts to without the device lock
    /// (`None`: no such QP). [`crate::queues::RqRing::post`] says when to
    /// come back here instead.
    /// With the QP's `max_recv_wr` and `max_recv_sge`; `None` for a QP on
    /// an SRQ or an XRC QP (they have no receive queue of their own).
    pub fn rq_ring(&self, qpn: Qpn) -> Option<(std::sync::Arc<crate::queues::RqRing>, u32, u32)> {
        let q = self.qps.get(&qpn)?;
        if q.init.srq.is_some() || q.init.qp_type.is_xrc() {
            return None;
        }
        Some((q.rq_ring.clone(), q.init.cap.max_recv_wr, q.init.cap.max_recv_sge))
    }

    /// `ibv_post_recv`. On a QP in ERR the WR completes at once with WR_FLUSH_ERR.
    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), PostRecvError> {
        let mut entry = self.qps.get_mut(&qpn).ok_or(PostRecvError::UnknownQp(qpn))?;
        let qp = &mut *entry;
        // what the program posted without the device lock goes first; in
        // ERR it is flushed now, in RESET it is gone
        match qp.state {
            QpState::Err => qp.flush_rq(&mut self.dev.sink),
            QpState::Reset => {
                qp.sync_rq();
                qp.rq_ring.took(qp.rq.len() as u32);
                qp.rq.clear();
            }
            _ => qp.sync_rq(),
        }
        if !qp.state.allows().post_recv {
            return Err(PostRecvError::InvalidState(qp.state));
        }
        if qp.init.srq.is_some() {
            return Err(PostRecvError::UsesSrq);
        }
        let cap = qp.init.cap;
        if wr.sg_list.len() > cap.max_recv_sge as usize {
            return Err(PostRecvError::TooManySge { n: wr.sg_list.len(), max: cap.max_recv_sge });
        }
        if qp.state == QpState::Err {
            let wc = qp.recv_wc(&wr, WcStatus::WrFlushErr, 0, None, false);
            self.dev.sink.complete(qp.init.recv_cq, wc);
        } else if qp.rq_ring.reserve(cap.max_recv_wr) {
            qp.rq.push_back(wr);
        } else {
            return Err(PostRecvError::QueueFull { max: cap.max_recv_wr });
        }
        drop(entry); // re-files the QP (qp_table)
        self.settle();
        Ok(())
    }
}

// ---- the port's communication manager (crate::cm_port) ----

impl Hca {
    /// This port's communication manager (IBA chapter 12): listen, connect,
    /// accept, reject, disconnect, SIDR, and its events
    /// ([`roce_cm::Cm::poll_event`]). Its MADs travel over QP1 when the
    /// device is driven. Times the engine wants are the device's
    /// ([`Hca::cm_now`]).
    pub fn cm(&mut self) -> &mut roce_cm::Cm {
        &mut self.cm.cm
    }

    /// The engine, read-only (state, counters).
    pub fn cm_ref(&self) -> &roce_cm::Cm {
        &self.cm.cm
    }

    /// The device's latest time (of its latest input) in the engine's
    /// units, for the calls that take a `now` ([`roce_cm::Cm::connect`],
    /// [`roce_cm::Cm::disconnect`], ...).
    pub fn cm_now(&self) -> Duration {
        self.cm.now()
    }

    /// Whether QP1's traffic goes to the engine (no application GSI QP).
    pub(crate) fn cm_owns_qp1(&self) -> bool {
        !self.qps.contains_key(&Qpn::new(1))
    }
}

// ---- memory windows (crate::mw) ----

impl Hca {
    /// `ibv_alloc_mw`: an unbound window in `pd` with a fresh rkey.
    pub fn alloc_mw(&mut self, pd: PdHandle, ty: MwType) -> Result<(MwHandle, RKey), MwError> {
        let d = &mut self.dev;
        if d.mem.mw.mws.len() >= d.attr.max_mw as usize {
            return Err(MwError::TooMany { max: d.attr.max_mw });
        }
        let p = d.pds.get_mut(&pd).ok_or(MwError::UnknownPd(pd))?;
        p.users += 1;
        let (id, key) = d.next_mw_ids();
        let h = MwHandle(id);
        let rkey = RKey::new(key);
        let mw = Mw { pd, ty, rkey, bound: None, posted_rkey: rkey, verb_binds: Vec::new() };
        d.mem.mw.mws.insert(h, mw);
        d.mem.mw.by_rkey.insert(rkey, h);
        tracing::debug!(dev = %d.name, mw = id, ?ty, %rkey, "alloc_mw");
        Ok((h, rkey))
    }

    /// `ibv_dealloc_mw`.
    pub fn dealloc_mw(&mut self, mw: MwHandle) -> Result<(), MwError> {
        let d = &mut self.dev;
        let m = d.mem.mw.mws.remove(&mw).ok_or(MwError::UnknownMw(mw))?;
        d.mem.mw.by_rkey.remove(&m.rkey);
        if let Some(p) = d.pds.get_mut(&m.pd) {
            p.users = p.users.saturating_sub(1);
        }
        tracing::debug!(dev = %d.name, mw = mw.0, "dealloc_mw");
        Ok(())
    }

    /// The window's current rkey (changes when a bind executes).
    pub fn mw_rkey(&self, mw: MwHandle) -> Option<RKey> {
        self.dev.mem.mw.mws.get(&mw).map(|m| m.rkey)
    }

    fn qp_pd(&self, qpn: Qpn) -> Result<PdHandle, MwError> {
        Ok(self.qps.get(&qpn).ok_or(MwError::UnknownQp(qpn))?.init.pd)
    }

    /// `ibv_bind_mw` for a type 1 window: posts a BIND_MW work request on
    /// `qpn`'s send queue and returns the rkey the window will have (the
    /// next key byte, libibverbs' `ibv_inc_rkey`). The bind executes after
    /// every earlier work request of the QP and completes with opcode
    /// BIND_MW (signalled per `wr.send_flags`), or with MW_BIND_ERR if a
    /// check fails then (the rkey then stays what it was). A zero length
    /// unbinds.
    ///
    /// Refused at once: a type 2 window ([`MwError::WrongType`]), a region
    /// in another PD than the window (as rxe's provider does), and whatever
    /// `post_send` refuses ([`MwError::Post`]).
    pub fn bind_mw(&mut self, qpn: Qpn, mw: MwHandle, wr: MwBindWr) -> Result<RKey, MwError> {
        let mem = &self.dev.mem;
        let m = mem.mw.mws.get(&mw).ok_or(MwError::UnknownMw(mw))?;
        if m.ty != MwType::Type1 {
            return Err(MwError::WrongType(m.ty));
        }
        let mr = mem.mrs.get(&wr.bind.mr).ok_or(MwError::UnknownMr(wr.bind.mr))?;
        if mr.pd != m.pd {
            return Err(MwError::PdMismatch);
        }
        self.qp_pd(qpn)?;
        let rkey = crate::mw::inc_rkey(m.posted_rkey);
        let ticket = (qpn, wr.wr_id, rkey);
        let op = WrOpcode::BindMw { mw, rkey, bind: wr.bind };
        let mut swr = SendWr::new(wr.wr_id, op);
        swr.flags = wr.send_flags;
        if let Some(m) = self.dev.mem.mw.mws.get_mut(&mw) {
            m.verb_binds.push(ticket);
        }
        if let Err(e) = self.post_send(qpn, swr) {
            if let Some(m) = self.dev.mem.mw.mws.get_mut(&mw) {
                m.verb_binds.retain(|t| *t != ticket);
            }
            return Err(e.into());
        }
        let flushed = self.qps.get(&qpn).is_some_and(|q| q.state == QpState::Err);
        if let Some(m) = self.dev.mem.mw.mws.get_mut(&mw) {
            m.posted_rkey = rkey;
            if flushed {
                // completed at once with WR_FLUSH_ERR: it will never execute
                m.verb_binds.retain(|t| *t != ticket);
            }
        }
        tracing::debug!(dev = %self.dev.name, %qpn, mw = mw.0, %rkey, "bind_mw posted");
        Ok(rkey)
    }

    /// Invalidate `rkey` for `qpn`'s PD directly, outside the send queue
    /// (what a [`crate::WrOpcode::LocalInv`] work request does in order).
    pub fn local_invalidate(&mut self, qpn: Qpn, rkey: RKey) -> Result<(), MwError> {
        let pd = self.qp_pd(qpn)?;
        let r = self.dev.mem.invalidate(pd, rkey);
        self.dev.counters.count_invalidate(r.is_ok());
        r
    }
}

/// The access flags a region may have: known flags only, and REMOTE_WRITE
/// or REMOTE_ATOMIC only with LOCAL_WRITE (IBA §10.6.3.1; as libibverbs
/// documents).
fn check_access(access: AccessFlags) -> Result<(), RegMrError> {
    let supported = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
        | AccessFlags::MW_BIND
        | AccessFlags::FLUSH_GLOBAL
        | AccessFlags::FLUSH_PERSISTENT
        // on-demand paging: the region's pages are reached when used (the
        // C ABI's regions always are; see roce_region::RegionMem)
        | AccessFlags::ON_DEMAND;
    if !access.difference(supported).is_empty() {
        return Err(RegMrError::UnsupportedAccess(access.difference(supported).0));
    }
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(RegMrError::RemoteWriteWithoutLocalWrite);
    }
    Ok(())
}
