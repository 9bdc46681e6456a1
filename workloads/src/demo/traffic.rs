//! The deterministic traffic generator behind `roce demo` and the soak test.
//!
//! Two emulated HCAs (10.0.0.1 and 10.0.0.2) on a [`SimNet`], `qps`
//! connected RC QP pairs, and traffic in both directions: every QP pair
//! carries two *streams* (A initiates to B, B initiates to A). Each stream
//! keeps up to `window` operations in flight, drawn from the configured
//! mix (SEND, RDMA WRITE, RDMA READ, CMP_AND_SWP, FETCH_AND_ADD) with sizes
//! from 0 bytes to `max_size`.
//!
//! Everything is checked:
//!
//! * every byte: each operation's data is a pseudo-random pattern derived
//!   from a per-operation tag; WRITE targets, READ results and received
//!   SEND buffers are compared with it after the completion;
//! * atomics against a model: each stream owns one 8-byte word at the
//!   target, the model applies the stream's atomics in posting order
//!   (RC executes them in order), and each returned original value and the
//!   final word must match;
//! * every completion: status SUCCESS, the right opcode and length, and
//!   send and receive completions in posting order per QP.
//!
//! Randomness (sizes, kinds, tags, initial PSNs) comes from the seed, as do
//! the fabric's faults and the devices' keys: a run replays exactly.
//!
//! [`WorkloadConfig::qp_type`] picks the transport of the QP pairs: RC
//! (above), UC (SEND and RDMA WRITE; writes carry an immediate so the
//! target sees them), UD (SEND of at most one MTU) or a mix of all three
//! (pair `q` is RC, UC, UD for `q % 3` = 0, 1, 2) where RC and UD QPs take
//! their receives from one shared receive queue per device. On UC and UD
//! a lost packet makes its message vanish: the generator counts what was
//! sent and what arrived per transport ([`Delivery`]), and every message
//! that arrived is checked byte for byte (each unreliable SEND starts
//! with its 8-byte work request id, so the receiver knows which one it
//! got even after losses or, on UD, reordering).

use super::config::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roce_packet::frame::LinkType;
use roce_sim::TapPoint;
use roce_sim::{FabricStats, SimNet};
use roce_verbs_api::{
    AccessFlags, AhAttr, Context, Cq, Mr, Qp, RecvWr, SendWr, Srq, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant as WallInstant};

const ALL_ACCESS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

struct Side {
    ctx: Context,
    /// The CQs its QPs share (QP q uses `cqs[q / per_cq]`).
    cqs: Vec<Cq>,
    /// Initiator buffers: sources of WRITE/SEND, sinks of READ and atomics.
    local: Mr,
    /// Targets of the peer's WRITE/READ.
    target: Mr,
    /// Receive buffers for the peer's SENDs.
    recv: Mr,
    /// One atomic word per QP for the peer's atomics.
    atomic: Mr,
    qps: Vec<Qp>,
    qp_index: HashMap<u32, usize>,
    /// With [`QpTypes::Mixed`]: the SRQ of the RC and UD QPs and its
    /// buffers (one receive slot per WR).
    srq: Option<(Srq, Mr)>,
}

/// An unreliable message on its way: what the receiver must find.
#[derive(Clone, Copy, Debug)]
struct Awaited {
    len: usize,
    tag: u64,
    /// UC WRITE with immediate: where it lands at the target.
    write_off: Option<u64>,
}

/// Receive WR ids: bit 63 for a QP's own receive queue (stream and slot),
/// bit 62 for an SRQ slot.
const SRQ_WR: u64 = 1 << 62;
/// Bytes a UD receive buffer starts with (the GRH area).
const GRH: usize = 40;
/// The Q_Key of the UD QPs.
const QKEY: u32 = roce_verbs_api::DEFAULT_QKEY;

#[derive(Clone, Copy, Debug)]
struct Pending {
    wr_id: u64,
    kind: OpKind,
    slot: usize,
    len: usize,
    tag: u64,
    /// Atomics: the original value the model predicts.
    expect: u64,
}

struct Stream {
    q: usize,
    init: usize,
    target: usize,
    free: Vec<usize>,
    outstanding: VecDeque<Pending>,
    /// SENDs whose data the target has not received yet: (tag, len).
    expected_recv: VecDeque<(u64, usize)>,
    /// Receive WRs posted at the target, in order.
    posted_recvs: VecDeque<u64>,
    atomic_model: u64,
    next_seq: u64,
    dead: bool,
    transport: PairType,
    /// The kinds this stream draws from (the mix, filtered by transport).
    kinds: Vec<OpKind>,
    /// UC/UD messages sent and not received yet, by sequence number.
    awaited: HashMap<u64, Awaited>,
    /// UC/UD messages received (a duplicate must match one of them).
    arrived: HashMap<u64, Awaited>,
    /// UC/UD flow control: messages from `floor` on are in flight, at most
    /// `window` of them. An arrival moves it past the message; messages
    /// below it that never arrived are lost (UC) or late (UD).
    floor: u64,
    /// Virtual time of the last arrival (or credit release).
    last_arrival: Duration,
    /// Bookkeeping below this sequence number was dropped (see
    /// [`HORIZON`]): messages still awaited then are counted in `expired`.
    pruned: u64,
    /// Messages given up as lost when their record was pruned.
    expired: u64,
}

/// UC/UD bookkeeping is kept for the last `HORIZON` messages of a stream
/// (a duplicate or a late message further behind than that cannot be in
/// the fabric any more: a stream has at most `window` messages in flight
/// and the fabric holds a reordered frame for a few events), so a long
/// run's memory stays flat.
const HORIZON: u64 = 1 << 16;

/// UC/UD: after this long (virtual time) without an arrival, a stream
/// that used up its window presumes its messages in flight lost.
const UNRELIABLE_TIMEOUT: Duration = Duration::from_millis(20);

/// A prepared workload: devices created and connected, nothing run yet.
/// Set up extra taps on [`Workload::net`] before [`Workload::run`].
pub struct Workload {
    cfg: WorkloadConfig,
    net: SimNet,
    sides: [Side; 2],
    streams: Vec<Stream>,
    rng: SmallRng,
    stride: usize,
    /// Receive buffer stride (room for the GRH).
    rstride: usize,
    recv_slots: usize,
    /// Target slots per QP (RC uses the first `window`; UC WRITEs cycle
    /// through all, so a slot is not rewritten before its check).
    tslots: usize,
    report: Report,
    audit: Option<(Arc<AtomicU64>, Arc<AtomicU64>)>,
    scratch: Vec<u8>,
    expect: Vec<u8>,
}

/// Setting a workload up failed (a verb refused; a configuration bug).
#[derive(Debug, thiserror::Error)]
#[error("workload setup: {0}")]
pub struct SetupError(String);

fn setup<E: fmt::Display>(what: &str) -> impl FnOnce(E) -> SetupError + '_ {
    move |e| SetupError(format!("{what}: {e}"))
}

const MAX_PROBLEMS: usize = 20;

/// The sizes of a workload: QPs, window, buffer strides and slots.
struct Shape {
    qps: usize,
    window: usize,
    stride: usize,
    /// Receive buffer stride (room for the GRH).
    rstride: usize,
    recv_slots: usize,
    tslots: usize,
    /// With [`QpTypes::Mixed`]: receives per SRQ (0: no SRQ).
    srq_slots: usize,
    transports: Vec<PairType>,
}

impl Shape {
    fn of(cfg: &WorkloadConfig) -> Shape {
        let qps = if cfg.qp_type == QpTypes::Mixed { cfg.qps.max(3) } else { cfg.qps.max(1) };
        let window = cfg.window.max(1);
        let stride = cfg.max_size.max(8).div_ceil(64) * 64;
        let transports: Vec<PairType> = (0..qps).map(|q| cfg.qp_type.of_pair(q)).collect();
        let unreliable = transports.iter().any(|t| *t != PairType::Rc);
        // UC/UD senders complete at once, so receivers need more room
        let recv_slots = if unreliable { 4 * window + 16 } else { window + 8 };
        let tslots = if unreliable { 4 * window + 8 } else { window };
        let srq_slots = if cfg.qp_type == QpTypes::Mixed {
            transports.iter().filter(|t| **t != PairType::Uc).count() * recv_slots
        } else {
            0
        };
        Shape {
            qps,
            window,
            stride,
            rstride: stride + 64,
            recv_slots,
            tslots,
            srq_slots,
            transports,
        }
    }
}

impl Side {
    /// One device's CQs, memory, SRQ (mixed) and QPs.
    fn new(shape: &Shape, ctx: Context) -> Result<Side, SetupError> {
        let (qps, window, stride) = (shape.qps, shape.window, shape.stride);
        let (recv_slots, srq_slots) = (shape.recv_slots, shape.srq_slots);
        let pd = ctx.alloc_pd().map_err(setup("alloc_pd"))?;
        // QPs share CQs, as many per CQ as its depth allows (each QP's
        // send and receive entries, plus every SRQ slot, which may
        // complete on any of them)
        let per_qp = 2 * (window + recv_slots);
        let room = (ctx.query_device().max_cqe as usize).saturating_sub(srq_slots + 64);
        let per_cq = (room / per_qp).clamp(1, qps);
        let mut cqs = Vec::new();
        for first in (0..qps).step_by(per_cq) {
            let n = per_cq.min(qps - first);
            let cqe = n * per_qp + srq_slots + 64;
            cqs.push(
                ctx.create_cq(u32::try_from(cqe).unwrap_or(u32::MAX))
                    .map_err(setup("create_cq"))?,
            );
        }
        let reg = |len: usize| pd.reg_mr(len, ALL_ACCESS).map_err(setup("reg_mr"));
        let local = reg(qps * window * stride)?;
        let target = reg(qps * shape.tslots * stride)?;
        let recv = reg(qps * recv_slots * shape.rstride)?;
        let atomic = reg(qps * 8)?;
        let srq = if srq_slots > 0 {
            let srq = pd.create_srq(srq_slots as u32, 1).map_err(setup("create_srq"))?;
            Some((srq, reg(srq_slots * shape.rstride)?))
        } else {
            None
        };
        let mut qv = Vec::new();
        let mut qp_index = HashMap::new();
        for (q, t) in shape.transports.iter().enumerate() {
            let cq = &cqs[q / per_cq];
            let mut b = pd
                .qp_builder(cq, cq)
                .qp_type(t.qp_type())
                .max_send_wr(window as u32 + 8)
                .max_recv_wr(recv_slots as u32)
                .max_send_sge(1)
                .max_recv_sge(1);
            if let (Some((srq, _)), true) = (&srq, *t != PairType::Uc) {
                b = b.srq(srq);
            }
            let qp = b.build().map_err(setup("create_qp"))?;
            qp_index.insert(qp.qpn().value(), q);
            qv.push(qp);
        }
        Ok(Side { ctx, cqs, local, target, recv, atomic, qps: qv, qp_index, srq })
    }
}

/// Connect (RC, UC) or activate (UD) every QP pair.
fn connect_pairs(
    shape: &Shape,
    cfg: &WorkloadConfig,
    (a, b): (&Side, &Side),
    rng: &mut SmallRng,
) -> Result<(), SetupError> {
    for (q, transport) in shape.transports.iter().enumerate() {
        // initial PSNs: random, half of them just before the 24-bit wrap
        let mut psn = || {
            if rng.gen_bool(0.5) {
                0xFF_FFFF - rng.gen_range(0..2048)
            } else {
                rng.gen_range(0..0x100_0000)
            }
        };
        let ea = a.qps[q].endpoint(psn());
        let eb = b.qps[q].endpoint(psn());
        match transport {
            PairType::Rc => {
                a.qps[q].connect(&ea, &eb, &cfg.connect).map_err(setup("connect A"))?;
                b.qps[q].connect(&eb, &ea, &cfg.connect).map_err(setup("connect B"))?;
            }
            PairType::Uc => {
                a.qps[q].connect_uc(&ea, &eb, &cfg.connect).map_err(setup("connect A"))?;
                b.qps[q].connect_uc(&eb, &ea, &cfg.connect).map_err(setup("connect B"))?;
            }
            PairType::Ud => {
                a.qps[q].activate_ud(QKEY, ea.psn).map_err(setup("activate A"))?;
                b.qps[q].activate_ud(QKEY, eb.psn).map_err(setup("activate B"))?;
            }
        }
    }
    Ok(())
}

/// Two streams per QP pair (A to B, B to A), each with the kinds its
/// transport can carry.
fn streams_of(shape: &Shape, cfg: &WorkloadConfig) -> Vec<Stream> {
    let mut streams = Vec::new();
    for (q, &transport) in shape.transports.iter().enumerate() {
        let mut kinds: Vec<OpKind> =
            cfg.mix.iter().copied().filter(|k| transport.supports(*k)).collect();
        if kinds.is_empty() {
            kinds.push(OpKind::Send);
        }
        for init in 0..2 {
            streams.push(Stream {
                transport,
                kinds: kinds.clone(),
                awaited: HashMap::new(),
                arrived: HashMap::new(),
                floor: 0,
                last_arrival: Duration::ZERO,
                pruned: 0,
                expired: 0,
                q,
                init,
                target: 1 - init,
                free: (0..shape.window).rev().collect(),
                outstanding: VecDeque::new(),
                expected_recv: VecDeque::new(),
                posted_recvs: VecDeque::new(),
                atomic_model: 0,
                next_seq: 0,
                dead: false,
            });
        }
    }
    streams
}

/// The report before the run: the pairs per transport, an empty delivery
/// count per unreliable one.
fn new_report(shape: &Shape, cfg: &WorkloadConfig) -> Report {
    let mut report = Report {
        seed: cfg.seed,
        ops_requested: cfg.ops,
        ops_completed: 0,
        ops_by_kind: BTreeMap::new(),
        bytes_by_kind: BTreeMap::new(),
        mismatches: 0,
        order_errors: 0,
        problems: Vec::new(),
        completions: BTreeMap::new(),
        fabric: FabricStats::default(),
        counters: Vec::new(),
        icrc_audit: None,
        virtual_time: Duration::ZERO,
        wall_time: Duration::ZERO,
        fabric_time: Duration::ZERO,
        events: 0,
        stalled: None,
        delivery: BTreeMap::new(),
        pairs: BTreeMap::new(),
    };
    for t in &shape.transports {
        *report.pairs.entry(*t).or_default() += 1;
        if *t != PairType::Rc {
            report.delivery.entry(*t).or_default();
        }
    }
    report
}

impl Workload {
    /// Create the network, the two devices, the QPs and the memory, and
    /// connect everything.
    pub fn new(cfg: WorkloadConfig) -> Result<Workload, SetupError> {
        if cfg.mix.is_empty() {
            return Err(SetupError("empty operation mix".into()));
        }
        cfg.qp_type.check_mix(&cfg.mix).map_err(SetupError)?;
        let shape = Shape::of(&cfg);
        let net = SimNet::new(cfg.seed);
        net.set_faults(cfg.faults.clone());
        let mut rng = SmallRng::seed_from_u64(cfg.seed ^ 0x5EED_0FC0_FFEE);
        let mut sides = Vec::new();
        for (i, name) in ["roce0", "roce1"].iter().enumerate() {
            let addr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1));
            sides.push(Side::new(&shape, net.add_device(name, addr).open())?);
        }
        let [a, b]: [Side; 2] = sides.try_into().map_err(|_| SetupError("two sides".into()))?;
        connect_pairs(&shape, &cfg, (&a, &b), &mut rng)?;
        let streams = streams_of(&shape, &cfg);
        let report = new_report(&shape, &cfg);
        let mut w = Workload {
            cfg: WorkloadConfig { qps: shape.qps, window: shape.window, ..cfg },
            net,
            sides: [a, b],
            streams,
            rng,
            stride: shape.stride,
            rstride: shape.rstride,
            recv_slots: shape.recv_slots,
            tslots: shape.tslots,
            report,
            audit: None,
            scratch: Vec::new(),
            expect: Vec::new(),
        };
        w.arm(shape.srq_slots)?;
        if w.cfg.audit_icrc {
            w.start_audit();
        }
        Ok(w)
    }

    /// Atomic words start at random values; receive buffers posted.
    fn arm(&mut self, srq_slots: usize) -> Result<(), SetupError> {
        for s in 0..self.streams.len() {
            let v: u64 = self.rng.gen();
            let (q, t) = (self.streams[s].q, self.streams[s].target);
            self.sides[t].atomic.write_u64(q as u64 * 8, v).map_err(setup("atomic init"))?;
            self.streams[s].atomic_model = v;
            if self.uses_srq(s) {
                continue;
            }
            for r in 0..self.recv_slots {
                self.post_recv(s, r).map_err(setup("post_recv"))?;
            }
        }
        for side in 0..2 {
            for r in 0..srq_slots {
                self.post_srq_recv(side, r).map_err(setup("post_srq_recv"))?;
            }
        }
        Ok(())
    }

    /// Check the ICRC of every delivered frame on the side (a capture tap).
    fn start_audit(&mut self) {
        let frames = Arc::new(AtomicU64::new(0));
        let bad = Arc::new(AtomicU64::new(0));
        let (f2, b2) = (frames.clone(), bad.clone());
        self.net.with_fabric(|f| {
            f.record_frames(TapPoint::Ingress, move |_, frame| {
                f2.fetch_add(1, Ordering::Relaxed);
                let ok = matches!(
                    roce_packet::frame::parse_frame(LinkType::Ethernet, frame, roce_packet::ROCE_V2_PORT),
                    Ok(Some(ds)) if ds.iter().all(|d| d.icrc_ok())
                );
                if !ok {
                    b2.fetch_add(1, Ordering::Relaxed);
                }
            })
        });
        self.audit = Some((frames, bad));
    }

    /// The simulated network (to add a pcap tap, filters...).
    pub fn net(&self) -> &SimNet {
        &self.net
    }

    /// The configuration in effect (qps and window at least 1).
    pub fn config(&self) -> &WorkloadConfig {
        &self.cfg
    }

    /// A data mismatch: counted, and described.
    fn mismatch(&mut self, msg: String) {
        self.report.mismatches += 1;
        self.problem(msg);
    }

    fn problem(&mut self, msg: String) {
        if self.report.problems.len() < MAX_PROBLEMS {
            self.report.problems.push(msg);
        }
    }

    fn recv_wr_id(s: usize, r: usize) -> u64 {
        (1 << 63) | ((s as u64) << 32) | r as u64
    }

    fn post_recv(&mut self, s: usize, r: usize) -> Result<(), roce_verbs_api::PostRecvError> {
        let st = &self.streams[s];
        let side = &self.sides[st.target];
        let off = ((st.q * self.recv_slots + r) * self.rstride) as u64;
        let wr_id = Self::recv_wr_id(s, r);
        let sge = side.recv.sge(off, self.rstride as u32);
        side.qps[st.q].post_recv(RecvWr { wr_id, sg_list: [sge].into_iter().collect() })?;
        self.streams[s].posted_recvs.push_back(wr_id);
        Ok(())
    }

    /// Whether stream `s`'s receives come from the target's SRQ.
    fn uses_srq(&self, s: usize) -> bool {
        let st = &self.streams[s];
        st.transport != PairType::Uc && self.sides[st.target].srq.is_some()
    }

    fn post_srq_recv(&mut self, side: usize, r: usize) -> Result<(), String> {
        let Some((srq, buf)) = &self.sides[side].srq else { return Err("no SRQ".into()) };
        let sge = buf.sge((r * self.rstride) as u64, self.rstride as u32);
        srq.post_recv(RecvWr { wr_id: SRQ_WR | r as u64, sg_list: [sge].into_iter().collect() })
            .map_err(|e| e.to_string())
    }

    fn pick_len(&mut self, kind: OpKind) -> usize {
        if kind.is_atomic() {
            return 8;
        }
        let max = self.cfg.max_size;
        let mtu = self.cfg.connect.mtu.bytes();
        match self.rng.gen_range(0..100) {
            0..=4 => self.rng.gen_range(0..=max.min(8)),
            5..=39 => self.rng.gen_range(1..=max.min(mtu).max(1)),
            _ => self.rng.gen_range(1..=max.max(1)),
        }
        .min(max)
    }

    /// Post one operation on stream `s`. False if it could not be posted.
    fn post_op(&mut self, s: usize) -> bool {
        let Some(slot) = self.streams[s].free.pop() else { return false };
        let kind = self.streams[s].kinds[self.rng.gen_range(0..self.streams[s].kinds.len())];
        let transport = self.streams[s].transport;
        let mut len = self.pick_len(kind);
        if transport != PairType::Rc && kind == OpKind::Send {
            // room for the 8-byte id; UD: one packet
            len = len.max(8);
            if transport == PairType::Ud {
                len = len.min(self.cfg.connect.mtu.bytes());
            }
        }
        let tag: u64 = self.rng.gen();
        let (q, init, target) = (self.streams[s].q, self.streams[s].init, self.streams[s].target);
        let seq = self.streams[s].next_seq;
        self.streams[s].next_seq += 1;
        let wr_id = ((s as u64) << 40) | seq;
        let slot_off = ((q * self.cfg.window + slot) * self.stride) as u64;
        let mut expect = 0;
        self.scratch.resize(len, 0);
        let unreliable_write = transport == PairType::Uc && kind == OpKind::Write;
        let opcode = if unreliable_write { WrOpcode::RdmaWriteWithImm } else { kind.wr_opcode() };
        let mut wr = SendWr::new(wr_id, opcode);
        // UC WRITEs cycle through all target slots, RC ones use the sender's
        let tgt_off = if unreliable_write {
            ((q * self.tslots + (seq as usize % self.tslots)) * self.stride) as u64
        } else {
            ((q * self.tslots + slot) * self.stride) as u64
        };
        let (ini, tgt) = (&self.sides[init], &self.sides[target]);
        let res = match kind {
            OpKind::Send | OpKind::Write => {
                fill_pattern(tag, &mut self.scratch);
                if transport != PairType::Rc && kind == OpKind::Send {
                    self.scratch[..8].copy_from_slice(&wr_id.to_le_bytes());
                }
                ini.local.write(slot_off, &self.scratch)
            }
            OpKind::Read => {
                fill_pattern(tag, &mut self.scratch);
                tgt.target.write(tgt_off, &self.scratch)
            }
            OpKind::CmpSwap | OpKind::FetchAdd => Ok(()),
        };
        if let Err(e) = res {
            self.problem(format!("stream {s}: preparing {kind}: {e}"));
            self.report.mismatches += 1;
            self.streams[s].free.push(slot);
            self.streams[s].dead = true;
            return false;
        }
        if len > 0 {
            wr = wr.sge(ini.local.addr() + slot_off, len as u32, ini.local.lkey());
        }
        match kind {
            OpKind::Send if transport == PairType::Ud => {
                let peer = &self.sides[target].qps[q];
                wr = wr.ud(AhAttr::new(peer.pd().context().addr()), peer.qpn().value(), QKEY);
            }
            OpKind::Send => {}
            OpKind::Write | OpKind::Read => {
                wr = wr.remote(tgt.target.remote_addr(tgt_off), tgt.target.rkey());
                if unreliable_write {
                    wr = wr.with_imm(seq as u32);
                }
            }
            OpKind::CmpSwap | OpKind::FetchAdd => {
                wr = wr.remote(tgt.atomic.remote_addr(q as u64 * 8), tgt.atomic.rkey());
                let model = self.streams[s].atomic_model;
                expect = model;
                if kind == OpKind::CmpSwap {
                    // compare matches about half of the time
                    let compare = if self.rng.gen_bool(0.5) { model } else { self.rng.gen() };
                    wr.compare_add = compare;
                    wr.swap = tag;
                    if compare == model {
                        self.streams[s].atomic_model = tag;
                    }
                } else {
                    let add = tag >> 16;
                    wr.compare_add = add;
                    self.streams[s].atomic_model = model.wrapping_add(add);
                }
            }
        }
        if let Err(e) = self.sides[init].qps[q].post_send(wr) {
            self.problem(format!("stream {s}: post_send {kind}: {e}"));
            self.report.mismatches += 1;
            self.streams[s].free.push(slot);
            self.streams[s].dead = true;
            return false;
        }
        if transport != PairType::Rc {
            let write_off = unreliable_write.then_some(tgt_off);
            self.streams[s].awaited.insert(seq, Awaited { len, tag, write_off });
        } else if kind == OpKind::Send {
            self.streams[s].expected_recv.push_back((tag, len));
        }
        self.streams[s].outstanding.push_back(Pending { wr_id, kind, slot, len, tag, expect });
        *self.report.ops_by_kind.entry(kind).or_default() += 1;
        *self.report.bytes_by_kind.entry(kind).or_default() += len as u64;
        true
    }

    fn count_status(&mut self, st: WcStatus) {
        self.report.completions.entry(st.code()).or_insert((st, 0)).1 += 1;
    }

    /// Compare `len` bytes at `off` of `mr` with the pattern of `tag`.
    /// `header`: the first 8 bytes are this id instead (unreliable SENDs).
    fn check_bytes(
        &mut self,
        what: &str,
        mr_is: (usize, Region),
        off: u64,
        len: usize,
        tag: u64,
        header: Option<u64>,
    ) {
        self.scratch.resize(len, 0);
        self.expect.resize(len, 0);
        let side = &self.sides[mr_is.0];
        let mr = match mr_is.1 {
            Region::Local => &side.local,
            Region::Target => &side.target,
            Region::Recv => &side.recv,
            Region::Srq => match &side.srq {
                Some((_, buf)) => buf,
                None => &side.recv,
            },
        };
        if let Err(e) = mr.read(off, &mut self.scratch) {
            self.mismatch(format!("{what}: cannot read back: {e}"));
            return;
        }
        fill_pattern(tag, &mut self.expect);
        if let (Some(h), true) = (header, len >= 8) {
            self.expect[..8].copy_from_slice(&h.to_le_bytes());
        }
        if self.scratch != self.expect {
            let first =
                self.scratch.iter().zip(&self.expect).position(|(a, b)| a != b).unwrap_or(0);
            self.mismatch(format!(
                "{what}: {len} bytes differ from the pattern from byte {first} \
                 (got {:#04x}, want {:#04x})",
                self.scratch[first], self.expect[first]
            ));
        }
    }

    /// Count a completion's status and find the index of its QP on
    /// `side` (an order error when the QP is unknown).
    fn qp_of(&mut self, side: usize, wc: &WorkCompletion, kind: &str) -> Option<usize> {
        self.count_status(wc.status);
        let q = self.sides[side].qp_index.get(&wc.qp_num).copied();
        if q.is_none() {
            self.report.order_errors += 1;
            self.problem(format!("{kind} for unknown QP {:#x}", wc.qp_num));
        }
        q
    }

    fn on_send_wc(&mut self, side: usize, wc: &WorkCompletion) {
        let Some(q) = self.qp_of(side, wc, "completion") else { return };
        let s = q * 2 + side;
        let st = &mut self.streams[s];
        let p = match st.outstanding.front() {
            Some(p) if p.wr_id == wc.wr_id => st.outstanding.pop_front(),
            _ => {
                let pos = st.outstanding.iter().position(|p| p.wr_id == wc.wr_id);
                let front = st.outstanding.front().map(|p| p.wr_id);
                let p = pos.and_then(|i| st.outstanding.remove(i));
                self.report.order_errors += 1;
                self.problem(format!(
                    "stream {s}: send completion wr_id {:#x} out of order (expected {front:x?})",
                    wc.wr_id
                ));
                p
            }
        };
        let Some(p) = p else { return };
        self.report.ops_completed += 1;
        self.streams[s].free.push(p.slot);
        let what = format!("stream {s} op {:#x} {}", p.wr_id & 0xFF_FFFF_FFFF, p.kind);
        if wc.status != WcStatus::Success {
            if !self.streams[s].dead {
                self.problem(format!("{what}: completed with status {} ", wc.status));
            }
            self.streams[s].dead = true;
            return;
        }
        let want_op = p.kind.wr_opcode().wc_opcode();
        if wc.opcode != want_op {
            self.mismatch(format!("{what}: completion opcode {:?}, want {want_op:?}", wc.opcode));
        }
        if matches!(p.kind, OpKind::Read | OpKind::CmpSwap | OpKind::FetchAdd)
            && wc.byte_len as usize != p.len
        {
            self.mismatch(format!("{what}: byte_len {} want {}", wc.byte_len, p.len));
        }
        let (q, init, target) = (self.streams[s].q, self.streams[s].init, self.streams[s].target);
        let slot_off = ((q * self.cfg.window + p.slot) * self.stride) as u64;
        let tgt_off = ((q * self.tslots + p.slot) * self.stride) as u64;
        let transport = self.streams[s].transport;
        if transport != PairType::Rc {
            // sent, not necessarily delivered: checked when (if) it arrives
            self.report.delivery.entry(transport).or_default().sent += 1;
            return;
        }
        match p.kind {
            OpKind::Send => {}
            OpKind::Write => {
                self.check_bytes(&what, (target, Region::Target), tgt_off, p.len, p.tag, None)
            }
            OpKind::Read => {
                self.check_bytes(&what, (init, Region::Local), slot_off, p.len, p.tag, None)
            }
            OpKind::CmpSwap | OpKind::FetchAdd => match self.sides[init].local.read_u64(slot_off) {
                Ok(v) if v == p.expect => {}
                Ok(v) => {
                    self.mismatch(format!(
                        "{what}: returned original {v:#018x}, model says {:#018x}",
                        p.expect
                    ));
                }
                Err(e) => {
                    self.mismatch(format!("{what}: cannot read result: {e}"));
                }
            },
        }
    }

    fn on_recv_wc(&mut self, side: usize, wc: &WorkCompletion) {
        let Some(q) = self.qp_of(side, wc, "receive completion") else { return };
        let s = q * 2 + (1 - side);
        let from_srq = wc.wr_id & SRQ_WR != 0;
        let st = &mut self.streams[s];
        match st.posted_recvs.front() {
            _ if from_srq => {}
            Some(&id) if id == wc.wr_id => {
                st.posted_recvs.pop_front();
            }
            front => {
                let front = front.copied();
                if let Some(i) = st.posted_recvs.iter().position(|&id| id == wc.wr_id) {
                    st.posted_recvs.remove(i);
                }
                self.report.order_errors += 1;
                self.problem(format!(
                    "stream {s}: receive completion {:#x} out of order (expected {front:x?})",
                    wc.wr_id
                ));
            }
        }
        if wc.status != WcStatus::Success {
            if !self.streams[s].dead {
                self.problem(format!("stream {s}: receive completed with status {}", wc.status));
            }
            self.streams[s].dead = true;
            return;
        }
        let r = (wc.wr_id & 0xFFFF_FFFF) as usize;
        let what = format!("stream {s} receive #{r}");
        let (region, off) = if from_srq {
            (Region::Srq, (r * self.rstride) as u64)
        } else {
            (Region::Recv, ((q * self.recv_slots + r) * self.rstride) as u64)
        };
        let transport = self.streams[s].transport;
        if transport != PairType::Rc {
            self.on_unreliable_recv(s, side, wc, (region, off), &what);
        } else {
            self.on_rc_recv(s, side, wc, (region, off), &what);
        }
        let reposted = if from_srq {
            self.post_srq_recv(side, r)
        } else {
            self.post_recv(s, r).map_err(|e| e.to_string())
        };
        if let Err(e) = reposted {
            self.problem(format!("{what}: re-posting the receive: {e}"));
            self.streams[s].dead = true;
        }
    }

    /// An RC receive: the next SEND of the stream, in order.
    fn on_rc_recv(
        &mut self,
        s: usize,
        side: usize,
        wc: &WorkCompletion,
        (region, off): (Region, u64),
        what: &str,
    ) {
        let what = what.to_string();
        match self.streams[s].expected_recv.pop_front() {
            None => {
                self.mismatch(format!("{what}: a message arrived that nobody sent"));
            }
            Some((tag, len)) => {
                if wc.byte_len as usize != len || wc.opcode != WcOpcode::Recv {
                    self.mismatch(format!(
                        "{what}: byte_len {} opcode {:?}, want {len} Recv",
                        wc.byte_len, wc.opcode
                    ));
                } else {
                    self.check_bytes(&what, (side, region), off, len, tag, None);
                }
            }
        }
    }

    /// A UC/UD receive: whichever message arrived (the SEND's first 8
    /// bytes or the WRITE's immediate name it), checked and crossed off.
    fn on_unreliable_recv(
        &mut self,
        s: usize,
        side: usize,
        wc: &WorkCompletion,
        (region, off): (Region, u64),
        what: &str,
    ) {
        let transport = self.streams[s].transport;
        let grh = if transport == PairType::Ud { GRH } else { 0 };
        let seq = if wc.opcode == WcOpcode::RecvRdmaWithImm {
            match wc.imm {
                Some(imm) => u64::from(imm),
                None => {
                    self.mismatch(format!("{what}: WRITE with immediate without immediate"));
                    return;
                }
            }
        } else {
            let mut hdr = [0u8; 8];
            let read = match region {
                Region::Srq => match &self.sides[side].srq {
                    Some((_, buf)) => buf.read(off + grh as u64, &mut hdr),
                    None => Ok(()),
                },
                _ => self.sides[side].recv.read(off + grh as u64, &mut hdr),
            };
            let id = u64::from_le_bytes(hdr);
            if read.is_err() || wc.byte_len < (grh + 8) as u32 || (id >> 40) as usize != s {
                self.mismatch(format!(
                    "{what}: {} bytes that do not start with an id of this stream ({id:#x})",
                    wc.byte_len
                ));
                return;
            }
            id & 0xFF_FFFF_FFFF
        };
        let st = &mut self.streams[s];
        st.floor = st.floor.max(seq + 1);
        st.last_arrival = self.net.elapsed();
        if st.floor >= st.pruned + 2 * HORIZON {
            let cut = st.floor - HORIZON;
            let before = st.awaited.len();
            st.awaited.retain(|&k, _| k >= cut);
            st.expired += (before - st.awaited.len()) as u64;
            st.arrived.retain(|&k, _| k >= cut);
            st.awaited.shrink_to_fit();
            st.arrived.shrink_to_fit();
            st.pruned = cut;
        }
        if seq < st.pruned {
            self.mismatch(format!(
                "{what}: message #{seq} arrived more than {HORIZON} messages late (cannot be checked)"
            ));
            return;
        }
        let m = match self.streams[s].awaited.remove(&seq) {
            Some(m) => {
                self.report.delivery.entry(transport).or_default().received += 1;
                self.streams[s].arrived.insert(seq, m);
                m
            }
            None => match self.streams[s].arrived.get(&seq) {
                Some(&m) => {
                    self.report.delivery.entry(transport).or_default().duplicates += 1;
                    m
                }
                None => {
                    self.mismatch(format!("{what}: message #{seq} arrived but was not awaited"));
                    return;
                }
            },
        };
        let what = format!("{what} ({transport} message #{seq})");
        match m.write_off {
            Some(woff) => {
                if wc.byte_len as usize != m.len {
                    self.mismatch(format!("{what}: byte_len {} want {}", wc.byte_len, m.len));
                }
                self.check_bytes(&what, (side, Region::Target), woff, m.len, m.tag, None);
            }
            None => {
                if wc.byte_len as usize != m.len + grh || wc.opcode != WcOpcode::Recv {
                    self.mismatch(format!(
                        "{what}: byte_len {} opcode {:?}, want {} Recv",
                        wc.byte_len,
                        wc.opcode,
                        m.len + grh
                    ));
                    return;
                }
                let id = ((s as u64) << 40) | seq;
                self.check_bytes(&what, (side, region), off + grh as u64, m.len, m.tag, Some(id));
            }
        }
    }

    fn poll(&mut self) -> usize {
        let mut n = 0;
        let cqs: Vec<(usize, usize)> =
            (0..2).flat_map(|s| (0..self.sides[s].cqs.len()).map(move |c| (s, c))).collect();
        for (side, c) in cqs {
            let wcs = match self.sides[side].cqs[c].poll(256) {
                Ok(v) => v,
                Err(e) => {
                    self.report.stalled = Some(format!("device {side}: {e}"));
                    return n;
                }
            };
            n += wcs.len();
            for wc in &wcs {
                if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                    self.on_recv_wc(side, wc);
                } else {
                    self.on_send_wc(side, wc);
                }
            }
        }
        n
    }

    /// Operations one stream may post. With mixed transports, an equal
    /// share of what the dead streams left (UC/UD streams complete much
    /// faster than RC ones and would otherwise take nearly all); else no
    /// limit.
    fn quota(&self, total: u64) -> u64 {
        if self.cfg.qp_type != QpTypes::Mixed {
            return u64::MAX;
        }
        let dead: u64 = self.streams.iter().filter(|s| s.dead).map(|s| s.next_seq).sum();
        let live = self.streams.iter().filter(|s| !s.dead).count() as u64;
        total.saturating_sub(dead).div_ceil(live.max(1))
    }

    /// A UC/UD stream whose window of messages in flight is full.
    fn blocked(&self, s: usize) -> bool {
        let st = &self.streams[s];
        st.transport != PairType::Rc && st.next_seq - st.floor >= self.cfg.window as u64
    }

    /// Release the window of blocked UC/UD streams that heard nothing for
    /// [`UNRELIABLE_TIMEOUT`] (or at all, when `idle`: the fabric is empty,
    /// so nothing more can arrive). Returns whether any was released.
    fn release_blocked(&mut self, idle: bool) -> bool {
        let now = self.net.elapsed();
        let mut any = false;
        for s in 0..self.streams.len() {
            if !self.blocked(s) {
                continue;
            }
            let st = &mut self.streams[s];
            if idle || now.saturating_sub(st.last_arrival) > UNRELIABLE_TIMEOUT {
                st.floor = st.next_seq;
                st.last_arrival = now;
                any = true;
            }
        }
        any
    }

    fn busy(&self) -> bool {
        self.streams
            .iter()
            .any(|s| !s.outstanding.is_empty() || (!s.dead && !s.expected_recv.is_empty()))
    }

    /// Run to the end, calling `progress` now and then (every few thousand
    /// completions). Returns the report.
    pub fn run(mut self, mut progress: impl FnMut(&Progress)) -> Report {
        let wall = WallInstant::now();
        let total = self.cfg.ops;
        let mut issued = 0u64;
        let mut since_completion = 0u64;
        let mut cursor = 0usize;
        let mut next_progress = 4096u64;
        let nstreams = self.streams.len();
        loop {
            self.fill_windows(total, &mut issued, &mut cursor);
            let waiting = (0..nstreams).any(|s| !self.streams[s].dead && self.blocked(s));
            if !self.busy() {
                if issued >= total || self.streams.iter().all(|s| s.dead) {
                    break;
                }
                if !waiting {
                    continue;
                }
            }
            let t = WallInstant::now();
            let stepped = self.net.run_steps(4) as u64;
            if waiting && self.release_blocked(stepped == 0) && stepped == 0 {
                continue;
            }
            self.report.fabric_time += t.elapsed();
            self.report.events += stepped;
            let n = self.poll();
            if self.report.stalled.is_some() {
                break;
            }
            if n > 0 {
                since_completion = 0;
            } else {
                since_completion += stepped;
                if let Some(why) = self.stall(stepped, since_completion) {
                    self.report.stalled = Some(why);
                    break;
                }
            }
            if self.report.ops_completed >= next_progress {
                next_progress = self.report.ops_completed + 4096;
                progress(&Progress {
                    done: self.report.ops_completed,
                    total,
                    virtual_time: self.net.elapsed(),
                    wall_time: wall.elapsed(),
                });
            }
        }
        self.finish(wall)
    }

    /// Keep every stream's window full, round-robin from `cursor`, up to
    /// `total` operations issued.
    fn fill_windows(&mut self, total: u64, issued: &mut u64, cursor: &mut usize) {
        let nstreams = self.streams.len();
        let quota = self.quota(total);
        let mut posted_any = true;
        while *issued < total && posted_any {
            posted_any = false;
            for k in 0..nstreams {
                let s = (*cursor + k) % nstreams;
                if *issued >= total {
                    break;
                }
                if self.streams[s].dead
                    || self.streams[s].free.is_empty()
                    || self.blocked(s)
                    || self.streams[s].next_seq >= quota
                {
                    continue;
                }
                if self.post_op(s) {
                    *issued += 1;
                    posted_any = true;
                }
            }
            *cursor = (*cursor + 1) % nstreams;
        }
    }

    /// Why the run stalls, after a step without completions.
    fn stall(&self, stepped: u64, since_completion: u64) -> Option<String> {
        if stepped == 0 {
            return Some(format!(
                "the fabric went idle with {} operation(s) outstanding",
                self.streams.iter().map(|s| s.outstanding.len()).sum::<usize>()
            ));
        }
        (since_completion > self.cfg.stall_events)
            .then(|| format!("no completion in {} fabric events", self.cfg.stall_events))
    }

    /// After the run: let the last acknowledgements land, check the atomic
    /// words and the unreliable deliveries, and fill the report in.
    fn finish(mut self, wall: WallInstant) -> Report {
        if self.report.stalled.is_none() && !self.net.run_until_idle(1_000_000) {
            self.problem("the fabric did not go idle after the last completion".into());
        }
        self.poll();
        self.check_atomic_words();
        for st in &self.streams {
            if st.transport != PairType::Rc {
                self.report.delivery.entry(st.transport).or_default().missing +=
                    st.awaited.len() as u64 + st.expired;
            }
        }
        for (t, d) in &self.report.delivery {
            if !d.accounted() {
                let msg = format!(
                    "{t}: {} sent, {} received, {} lost, but {} unaccounted for",
                    d.sent,
                    d.received,
                    d.lost(),
                    d.missing
                );
                if self.report.problems.len() < MAX_PROBLEMS {
                    self.report.problems.push(msg);
                }
            }
        }
        self.report.fabric = self.net.stats();
        self.report.counters =
            self.sides.iter().map(|s| (s.ctx.name().to_string(), s.ctx.counters())).collect();
        self.report.icrc_audit = self
            .audit
            .as_ref()
            .map(|(f, b)| (f.load(Ordering::Relaxed), b.load(Ordering::Relaxed)));
        self.report.virtual_time = self.net.elapsed();
        self.report.wall_time = wall.elapsed();
        self.report
    }

    /// Every live stream's atomic word equals its model.
    fn check_atomic_words(&mut self) {
        for s in 0..self.streams.len() {
            let (q, t, dead) = (self.streams[s].q, self.streams[s].target, self.streams[s].dead);
            if dead {
                continue;
            }
            match self.sides[t].atomic.read_u64(q as u64 * 8) {
                Ok(v) if v == self.streams[s].atomic_model => {}
                Ok(v) => {
                    self.report.mismatches += 1;
                    let m = self.streams[s].atomic_model;
                    self.problem(format!(
                        "stream {s}: final atomic word {v:#018x}, model {m:#018x}"
                    ));
                }
                Err(e) => {
                    self.mismatch(format!("stream {s}: reading the atomic word: {e}"));
                }
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Region {
    Local,
    Target,
    Recv,
    Srq,
}

/// Build and run a workload in one call.
pub fn run(cfg: WorkloadConfig) -> Result<Report, SetupError> {
    Ok(Workload::new(cfg)?.run(|_| {}))
}
