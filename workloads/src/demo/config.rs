//! What a workload runs and what it reports: the operation kinds, the
//! transports, the configuration, the progress and the report, and the
//! data pattern of each operation.

use roce_emulator::Counters;
use roce_sim::{FabricStats, FaultConfig};
use roce_verbs_api::{ConnectOptions, PathMtu, QpType, WcStatus, WrOpcode};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// One kind of operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// SEND (consumes a receive WR at the target).
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// ATOMIC CMP_AND_SWP.
    CmpSwap,
    /// ATOMIC FETCH_AND_ADD.
    FetchAdd,
}

impl OpKind {
    /// Every kind.
    pub const ALL: [OpKind; 5] =
        [OpKind::Send, OpKind::Write, OpKind::Read, OpKind::CmpSwap, OpKind::FetchAdd];

    /// The name used in summaries (`SEND`, `WRITE`, `READ`, `CMP_AND_SWP`,
    /// `FETCH_AND_ADD`).
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::Send => "SEND",
            OpKind::Write => "WRITE",
            OpKind::Read => "READ",
            OpKind::CmpSwap => "CMP_AND_SWP",
            OpKind::FetchAdd => "FETCH_AND_ADD",
        }
    }

    pub(crate) const fn wr_opcode(self) -> WrOpcode {
        match self {
            OpKind::Send => WrOpcode::Send,
            OpKind::Write => WrOpcode::RdmaWrite,
            OpKind::Read => WrOpcode::RdmaRead,
            OpKind::CmpSwap => WrOpcode::AtomicCmpAndSwp,
            OpKind::FetchAdd => WrOpcode::AtomicFetchAndAdd,
        }
    }

    pub(crate) const fn is_atomic(self) -> bool {
        matches!(self, OpKind::CmpSwap | OpKind::FetchAdd)
    }

    /// Parse a mix such as `send,write,read,atomic`. Names: `send`,
    /// `write`, `read`, `atomic` (both atomics), `cas`/`cmp_and_swp`,
    /// `faa`/`fetch_and_add`, `all`. Repeating a name weights it.
    pub fn parse_mix(s: &str) -> Result<Vec<OpKind>, String> {
        let mut v = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.to_ascii_lowercase().as_str() {
                "send" => v.push(OpKind::Send),
                "write" => v.push(OpKind::Write),
                "read" => v.push(OpKind::Read),
                "atomic" | "atomics" => v.extend([OpKind::CmpSwap, OpKind::FetchAdd]),
                "cas" | "cmp_and_swp" | "cmp_swap" => v.push(OpKind::CmpSwap),
                "faa" | "fetch_and_add" | "fetch_add" => v.push(OpKind::FetchAdd),
                "all" => v.extend(OpKind::ALL),
                other => {
                    return Err(format!(
                        "unknown operation {other:?} (expected send, write, read, atomic, cas, faa, all)"
                    ))
                }
            }
        }
        if v.is_empty() {
            return Err("empty operation mix".into());
        }
        Ok(v)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The QP type of one QP pair (what `QpTypes` picks for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PairType {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

impl PairType {
    /// `RC`, `UC`, `UD`.
    pub const fn name(self) -> &'static str {
        match self {
            PairType::Rc => "RC",
            PairType::Uc => "UC",
            PairType::Ud => "UD",
        }
    }
    /// Whether this transport can carry `kind` (UC: SEND and WRITE; UD:
    /// SEND).
    pub const fn supports(self, kind: OpKind) -> bool {
        match self {
            PairType::Rc => true,
            PairType::Uc => matches!(kind, OpKind::Send | OpKind::Write),
            PairType::Ud => matches!(kind, OpKind::Send),
        }
    }
    pub(crate) const fn qp_type(self) -> QpType {
        match self {
            PairType::Rc => QpType::Rc,
            PairType::Uc => QpType::Uc,
            PairType::Ud => QpType::Ud,
        }
    }
}

impl fmt::Display for PairType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which transports a workload uses (`roce demo --qp-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum QpTypes {
    /// Every pair RC (the default).
    #[default]
    Rc,
    /// Every pair UC.
    Uc,
    /// Every pair UD.
    Ud,
    /// RC, UC and UD pairs at once (at least one of each), sharing each
    /// device's CQ; RC and UD receive from one SRQ per device.
    Mixed,
}

impl QpTypes {
    /// Parse `rc`, `uc`, `ud` or `mixed`.
    pub fn parse(s: &str) -> Result<QpTypes, String> {
        match s.to_ascii_lowercase().as_str() {
            "rc" => Ok(QpTypes::Rc),
            "uc" => Ok(QpTypes::Uc),
            "ud" => Ok(QpTypes::Ud),
            "mixed" | "mix" => Ok(QpTypes::Mixed),
            o => Err(format!("unknown QP type {o:?} (expected rc, uc, ud or mixed)")),
        }
    }
    /// The transport of pair `q`.
    pub fn of_pair(self, q: usize) -> PairType {
        match self {
            QpTypes::Rc => PairType::Rc,
            QpTypes::Uc => PairType::Uc,
            QpTypes::Ud => PairType::Ud,
            QpTypes::Mixed => [PairType::Rc, PairType::Uc, PairType::Ud][q % 3],
        }
    }
    /// Refuse a mix with operations the transport cannot carry (for
    /// `mixed`, RC pairs carry everything and the others what they can).
    pub fn check_mix(self, mix: &[OpKind]) -> Result<(), String> {
        let t = match self {
            QpTypes::Rc | QpTypes::Mixed => return Ok(()),
            QpTypes::Uc => PairType::Uc,
            QpTypes::Ud => PairType::Ud,
        };
        let bad: Vec<&str> = mix.iter().filter(|k| !t.supports(**k)).map(|k| k.name()).collect();
        if bad.is_empty() {
            return Ok(());
        }
        let can = if t == PairType::Uc { "send and write" } else { "send" };
        Err(format!(
            "{t} QPs cannot carry {} (a {t} QP supports {can} only; use --qp-type rc or mixed)",
            bad.join(", ")
        ))
    }
}

/// Messages of one unreliable transport: how many were sent (successful
/// send completions) and how many arrived. `lost() = sent - received`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    /// Messages (SENDs and, on UC, WRITEs with immediate) sent.
    pub sent: u64,
    /// Of them, received (and checked byte for byte).
    pub received: u64,
    /// Still awaited at the end, counted message by message; must equal
    /// `sent - received`.
    pub missing: u64,
    /// Extra copies of received messages: UD has no sequence check, so a
    /// duplicating fabric delivers some messages twice (a UC duplicate
    /// comes from behind the expected PSN and is dropped). Each copy is
    /// checked byte for byte too.
    pub duplicates: u64,
}

impl Delivery {
    /// Messages that vanished.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }
    /// `received + lost == sent`, every lost message identified.
    pub fn accounted(&self) -> bool {
        self.received <= self.sent && self.missing == self.lost()
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// Operations to complete in total (all streams together).
    pub ops: u64,
    /// Largest message in bytes (READ/WRITE/SEND sizes are drawn from 0 to
    /// this; atomics are 8 bytes).
    pub max_size: usize,
    /// Kinds to draw from, uniformly (repeat one to weight it).
    pub mix: Vec<OpKind>,
    /// Random faults on every link.
    pub faults: FaultConfig,
    /// The seed of everything random.
    pub seed: u64,
    /// QP pairs between the two devices.
    pub qps: usize,
    /// Operations in flight per stream (two streams per QP pair).
    pub window: usize,
    /// Connection parameters (path MTU, timeout, retries, depths).
    pub connect: ConnectOptions,
    /// Check the ICRC of every delivered frame on the side (a capture tap)
    /// and report how many were bad, to compare with the devices'
    /// `icrc_err` counters. Costs one more CRC per frame.
    pub audit_icrc: bool,
    /// Give up (report a stall) after this many fabric events without any
    /// completion.
    pub stall_events: u64,
    /// The transports of the QP pairs.
    pub qp_type: QpTypes,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            ops: 1000,
            max_size: 4096,
            mix: OpKind::ALL.to_vec(),
            faults: FaultConfig::default(),
            seed: 1,
            qps: 2,
            window: 16,
            connect: ConnectOptions::default(),
            audit_icrc: false,
            stall_events: 2_000_000,
            qp_type: QpTypes::Rc,
        }
    }
}

impl WorkloadConfig {
    /// Set the path MTU.
    pub fn mtu(mut self, mtu: PathMtu) -> Self {
        self.connect.mtu = mtu;
        self
    }
}

/// Progress, reported while a workload runs.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Operations completed.
    pub done: u64,
    /// Operations requested.
    pub total: u64,
    /// Virtual time so far.
    pub virtual_time: Duration,
    /// Wall time so far.
    pub wall_time: Duration,
}

/// The result of a run. [`Report::ok`] says whether it passed.
#[derive(Clone, Debug)]
pub struct Report {
    /// The seed (replays the run).
    pub seed: u64,
    /// Operations requested.
    pub ops_requested: u64,
    /// Operations whose send-side completion arrived (any status).
    pub ops_completed: u64,
    /// Operations posted, by kind.
    pub ops_by_kind: BTreeMap<OpKind, u64>,
    /// Payload bytes posted, by kind (atomics count 8).
    pub bytes_by_kind: BTreeMap<OpKind, u64>,
    /// Data, value or length mismatches (must be 0).
    pub mismatches: u64,
    /// Completions out of posting order, or for unknown work (must be 0).
    pub order_errors: u64,
    /// The first problems found, in words.
    pub problems: Vec<String>,
    /// Completions (send and receive) by status.
    pub completions: BTreeMap<u8, (WcStatus, u64)>,
    /// The fabric's counters.
    pub fabric: FabricStats,
    /// Each device's name and counters.
    pub counters: Vec<(String, Counters)>,
    /// With [`WorkloadConfig::audit_icrc`]: delivered frames and how many
    /// of them had a bad ICRC.
    pub icrc_audit: Option<(u64, u64)>,
    /// Virtual time the run took.
    pub virtual_time: Duration,
    /// Wall time the run took.
    pub wall_time: Duration,
    /// Part of the wall time spent inside the fabric (delivering frames,
    /// running the HCAs' receive paths, timers and transmit polls); the
    /// rest is the traffic generator (posting, polling CQs, generating and checking
    /// data).
    pub fabric_time: Duration,
    /// Fabric events processed.
    pub events: u64,
    /// Why the run stopped early, if it did.
    pub stalled: Option<String>,
    /// Per unreliable transport in use: messages sent, received, lost.
    pub delivery: BTreeMap<PairType, Delivery>,
    /// QP pairs per transport.
    pub pairs: BTreeMap<PairType, usize>,
}

impl Report {
    /// Completions with a status other than SUCCESS.
    pub fn failed_completions(&self) -> u64 {
        self.completions.values().filter(|(s, _)| *s != WcStatus::Success).map(|(_, n)| n).sum()
    }

    /// All completions.
    pub fn total_completions(&self) -> u64 {
        self.completions.values().map(|(_, n)| n).sum()
    }

    /// Passed: every operation completed successfully, in order, with the
    /// right data, the run did not stall, and on UC/UD every message sent
    /// either arrived intact or is counted lost.
    pub fn ok(&self) -> bool {
        self.mismatches == 0
            && self.order_errors == 0
            && self.failed_completions() == 0
            && self.ops_completed == self.ops_requested
            && self.stalled.is_none()
            && self.delivery.values().all(Delivery::accounted)
    }

    /// Messages lost over all unreliable transports.
    pub fn lost(&self) -> u64 {
        self.delivery.values().map(Delivery::lost).sum()
    }

    /// Sum of one counter over the devices.
    pub fn counter_sum(&self, name: &str) -> u64 {
        self.counters.iter().filter_map(|(_, c)| c.get(name)).sum()
    }

    /// Total payload bytes posted.
    pub fn total_bytes(&self) -> u64 {
        self.bytes_by_kind.values().sum()
    }

    /// Everything a failed run's message needs: the seed and how to replay
    /// it, what completed and what went wrong, per QP pair and per
    /// transport, the fabric's, the ICRC audit's and the devices' counters
    /// (the non-zero ones), the times.
    pub fn failure_summary(&self) -> String {
        let r = self;
        format!(
            "seed {} (replay with ROCE_SIM_SEED={})\nok {} completed {}/{} mismatches {} order errors {} \
             stalled {:?}\npairs {:?}\ndelivery {:?}\ncompletions {:?}\nproblems {:#?}\nfabric {:?}\n\
             audit {:?}\ncounters {:#?}\nvirtual {:?} wall {:?} events {}",
            r.seed,
            r.seed,
            r.ok(),
            r.ops_completed,
            r.ops_requested,
            r.mismatches,
            r.order_errors,
            r.stalled,
            r.pairs,
            r.delivery,
            r.completions.values().collect::<Vec<_>>(),
            r.problems,
            r.fabric,
            r.icrc_audit,
            r.counters
                .iter()
                .map(|(n, c)| (n, c.iter().filter(|(_, v)| *v != 0).collect::<Vec<_>>()))
                .collect::<Vec<_>>(),
            r.virtual_time,
            r.wall_time,
            r.events
        )
    }
}

/// Fill `buf` with the pattern of `tag` (splitmix64 stream).
pub fn fill_pattern(tag: u64, buf: &mut [u8]) {
    let mut s = tag;
    for chunk in buf.chunks_mut(8) {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
    }
}
