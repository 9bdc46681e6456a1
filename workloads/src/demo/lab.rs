//! `roce demo --scenario NAME`: small, deterministic lessons. Two emulated
//! HCAs on the simulated fabric do one thing (one WRITE, a SEND that meets
//! no receive buffer, a bad rkey, ...) and every verb, every completion
//! (with its status) and every asynchronous event is printed with the
//! virtual time it happened at. The docs/course chapters run them.
//!
//! Each scenario checks its own outcome (the statuses it is meant to
//! produce, the bytes it moved): exit status 0 when it behaved as described,
//! 1 otherwise. The scenarios themselves are in `scenarios.rs`, the runner in
//! `lesson.rs`; this file is the lab they run in.

use roce_sim::{LinkConfig, SimNet};
use roce_verbs_api::{
    AccessFlags, ConnectOptions, Context, Cq, HcaConfig, Mr, PathMtu, Pd, Qp, QpEndpoint, QpType,
    WcOpcode, WcStatus, WorkCompletion,
};
use std::fmt::Write as _;
use std::time::Duration;

/// One named lesson.
pub struct Scenario {
    /// Its `--scenario` name.
    pub name: &'static str,
    /// One line for `roce demo --help`.
    pub about: &'static str,
    /// The lesson; `Err` for a setup failure (exit 2).
    pub run: fn(&mut Lab) -> Result<(), String>,
}

/// The ibverbs name of a completion status (`IBV_WC_` dropped).
pub fn status_name(s: WcStatus) -> &'static str {
    use WcStatus::*;
    match s {
        Success => "SUCCESS",
        LocLenErr => "LOC_LEN_ERR",
        LocQpOpErr => "LOC_QP_OP_ERR",
        LocEecOpErr => "LOC_EEC_OP_ERR",
        LocProtErr => "LOC_PROT_ERR",
        WrFlushErr => "WR_FLUSH_ERR",
        MwBindErr => "MW_BIND_ERR",
        BadRespErr => "BAD_RESP_ERR",
        LocAccessErr => "LOC_ACCESS_ERR",
        RemInvReqErr => "REM_INV_REQ_ERR",
        RemAccessErr => "REM_ACCESS_ERR",
        RemOpErr => "REM_OP_ERR",
        RetryExcErr => "RETRY_EXC_ERR",
        RnrRetryExcErr => "RNR_RETRY_EXC_ERR",
        LocRddViolErr => "LOC_RDD_VIOL_ERR",
        RemInvRdReqErr => "REM_INV_RD_REQ_ERR",
        RemAbortErr => "REM_ABORT_ERR",
        InvEecnErr => "INV_EECN_ERR",
        InvEecStateErr => "INV_EEC_STATE_ERR",
        FatalErr => "FATAL_ERR",
        RespTimeoutErr => "RESP_TIMEOUT_ERR",
        GeneralErr => "GENERAL_ERR",
    }
}

/// The ibverbs name of a completion opcode (`IBV_WC_` dropped).
pub fn wc_opcode_name(o: WcOpcode) -> &'static str {
    match o {
        WcOpcode::Send => "SEND",
        WcOpcode::RdmaWrite => "RDMA_WRITE",
        WcOpcode::RdmaRead => "RDMA_READ",
        WcOpcode::CompSwap => "COMP_SWAP",
        WcOpcode::FetchAdd => "FETCH_ADD",
        WcOpcode::BindMw => "BIND_MW",
        WcOpcode::LocalInv => "LOCAL_INV",
        WcOpcode::Flush => "FLUSH",
        WcOpcode::AtomicWrite => "ATOMIC_WRITE",
        WcOpcode::Recv => "RECV",
        WcOpcode::RecvRdmaWithImm => "RECV_RDMA_WITH_IMM",
    }
}

/// One side of a connection: its device, PD, CQ, QP and a memory region.
#[derive(Clone)]
pub struct End {
    /// Device name (`roce0`, `roce1`).
    pub dev: String,
    /// The opened device.
    pub ctx: Context,
    /// Protection domain.
    pub pd: Pd,
    /// Send and receive completion queue.
    pub cq: Cq,
    /// The queue pair.
    pub qp: Qp,
    /// A registered buffer.
    pub mr: Mr,
    /// This QP's endpoint (address, QPN, first PSN).
    pub ep: QpEndpoint,
}

impl End {
    /// `qp 0x11 on roce0`-style name used in the transcript.
    pub fn who(&self) -> String {
        format!("{} QP {:#x}", self.dev, self.ep.qpn)
    }
}

/// How a pair is built.
#[derive(Clone, Copy)]
pub struct PairSpec {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// roce0's connection options.
    pub a: ConnectOptions,
    /// roce1's connection options.
    pub b: ConnectOptions,
    /// Bytes of each side's memory region.
    pub mr_len: usize,
    /// Access rights of the regions.
    pub mr_access: AccessFlags,
    /// Where roce0's QP sends to (None: roce1's real address).
    pub a_dest: Option<std::net::IpAddr>,
    /// Receive queue depth.
    pub max_recv_wr: u32,
}

impl Default for PairSpec {
    fn default() -> Self {
        PairSpec {
            qp_type: QpType::Rc,
            a: ConnectOptions::default(),
            b: ConnectOptions::default(),
            mr_len: 4096,
            mr_access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            a_dest: None,
            max_recv_wr: 16,
        }
    }
}

/// The lab bench a scenario runs on: the network, the two devices, the
/// transcript and the expectations.
pub struct Lab {
    /// The simulated network.
    pub net: SimNet,
    /// roce0 (10.0.0.1).
    pub a: Context,
    /// roce1 (10.0.0.2).
    pub b: Context,
    /// Devices a scenario added ([`Lab::add_device`]): roce2 (10.0.0.3), ...
    pub more: Vec<Context>,
    pub(super) out: String,
    pub(super) unexpected: Vec<String>,
    watched: Vec<(String, Cq)>,
    pairs: u32,
    seed: u64,
    active_mtu: PathMtu,
}

/// Link latency of the scenarios' fabric (one way).
pub const LATENCY: Duration = Duration::from_micros(10);

impl Lab {
    pub(super) fn new(seed: u64, active_mtu: PathMtu, link_mtu: usize) -> Lab {
        let net = SimNet::new(seed);
        net.set_default_link(LinkConfig { latency: LATENCY, rate: None, mtu: link_mtu });
        // each device its own key seed (as SimNet::add_device does), so the two
        // HCAs hand out different keys
        let dev = |name: &str, addr: &str, n: u64| {
            let key_seed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(n);
            let mut cfg = HcaConfig::new(name, addr.parse().expect("address"), key_seed);
            cfg.active_mtu = active_mtu;
            net.add_device_with(cfg).open()
        };
        let a = dev("roce0", "10.0.0.1", 1);
        let b = dev("roce1", "10.0.0.2", 2);
        Lab {
            net,
            a,
            b,
            more: Vec::new(),
            out: String::new(),
            unexpected: Vec::new(),
            watched: Vec::new(),
            pairs: 0,
            seed,
            active_mtu,
        }
    }

    /// One more device on the fabric: roce2 at 10.0.0.3, then roce3 at
    /// 10.0.0.4, ... (keys seeded as roce0's and roce1's are).
    pub fn add_device(&mut self) -> Context {
        let n = 2 + self.more.len() as u64;
        let key_seed = self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(n + 1);
        let addr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, n as u8 + 1));
        let mut cfg = HcaConfig::new(format!("roce{n}"), addr, key_seed);
        cfg.active_mtu = self.active_mtu;
        let ctx = self.net.add_device_with(cfg).open();
        self.more.push(ctx.clone());
        ctx
    }

    /// roce0, roce1 and the devices a scenario added, in that order.
    pub fn devices(&self) -> Vec<Context> {
        [self.a.clone(), self.b.clone()].into_iter().chain(self.more.iter().cloned()).collect()
    }

    /// Virtual milliseconds since the start.
    fn ms(&self) -> f64 {
        self.net.elapsed().as_secs_f64() * 1e3
    }

    /// Print one transcript line: time, actor, text.
    pub fn say(&mut self, who: &str, what: impl AsRef<str>) {
        let t = self.ms();
        let _ = writeln!(self.out, "{t:>9.3} ms  {who:<14} {}", what.as_ref());
    }

    /// Print a line of commentary (no time).
    pub fn note(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(self.out, "{}", text.as_ref());
    }

    /// Record a failed expectation (the scenario then exits 1).
    pub fn expect(&mut self, ok: bool, what: impl Into<String>) {
        if !ok {
            let w = what.into();
            let _ = writeln!(self.out, "UNEXPECTED: {w}");
            self.unexpected.push(w);
        }
    }

    /// Print completions of every watched CQ as they appear.
    pub fn watch(&mut self, label: &str, cq: &Cq) {
        self.watched.push((label.to_string(), cq.clone()));
    }

    fn poll_all(&mut self, got: &mut Vec<WorkCompletion>) {
        let mut labelled = Vec::new();
        self.poll_all_labelled(&mut labelled);
        got.extend(labelled.into_iter().map(|(_, wc)| wc));
    }

    /// Poll every watched CQ (printing what arrives), keeping each
    /// completion with the label of its CQ.
    fn poll_all_labelled(&mut self, got: &mut Vec<(String, WorkCompletion)>) {
        for i in 0..self.watched.len() {
            let (label, cq) = self.watched[i].clone();
            while let Ok(wcs) = cq.poll(16) {
                if wcs.is_empty() {
                    break;
                }
                for wc in wcs {
                    let line = wc_line(&wc);
                    self.say(&label, line);
                    got.push((label.clone(), wc));
                }
            }
        }
        for ctx in self.devices() {
            while let Some(ev) = ctx.poll_async_event() {
                if ev == roce_verbs_api::AsyncEvent::PortActive {
                    continue; // every device raises it once at start
                }
                self.say(ctx.name(), format!("async event {}", event_name(ev)));
            }
        }
    }

    /// Run the fabric until nothing is in flight and no timer is armed
    /// (at most `max_events` events), printing completions as they appear;
    /// returns them.
    pub fn run(&mut self, max_events: usize) -> Vec<WorkCompletion> {
        let mut got = Vec::new();
        self.poll_all(&mut got);
        for _ in 0..max_events {
            // a step also runs work that needs no packet (a local error, a bind)
            let more = self.net.step();
            self.poll_all(&mut got);
            if !more {
                break;
            }
        }
        got
    }

    /// [`Lab::run`], each completion with the label of the watched CQ it
    /// came from (for scenarios with several CQs on one device).
    pub fn run_by_cq(&mut self, max_events: usize) -> Vec<(String, WorkCompletion)> {
        let mut got = Vec::new();
        self.poll_all_labelled(&mut got);
        for _ in 0..max_events {
            let more = self.net.step();
            self.poll_all_labelled(&mut got);
            if !more {
                break;
            }
        }
        got
    }

    /// Run the fabric until the virtual clock reaches `ms` (or nothing is
    /// left to do), printing completions.
    pub fn run_until_ms(&mut self, ms: f64) -> Vec<WorkCompletion> {
        let mut got = Vec::new();
        self.poll_all(&mut got);
        for _ in 0..1_000_000 {
            if self.ms() >= ms {
                break;
            }
            let more = self.net.step();
            self.poll_all(&mut got);
            if !more {
                break;
            }
        }
        got
    }

    /// Two connected QPs, one on each device, with a region each; both CQs
    /// are watched. QPNs and PSNs are fixed, so runs are comparable.
    pub fn pair(&mut self, spec: &PairSpec) -> Result<(End, End), String> {
        let n = self.pairs;
        self.pairs += 1;
        let mk = |ctx: &Context, psn: u32| -> Result<End, String> {
            let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
            let cq = ctx.create_cq(64).map_err(|e| e.to_string())?;
            let mr = pd.reg_mr(spec.mr_len, spec.mr_access).map_err(|e| e.to_string())?;
            let qp = pd
                .qp_builder(&cq, &cq)
                .qp_type(spec.qp_type)
                .max_recv_wr(spec.max_recv_wr)
                .build()
                .map_err(|e| e.to_string())?;
            let ep = qp.endpoint(psn);
            Ok(End { dev: ctx.name().to_string(), ctx: ctx.clone(), pd, cq, qp, mr, ep })
        };
        let a = mk(&self.a.clone(), 0x100 + n * 0x100)?;
        let b = mk(&self.b.clone(), 0x1000 + n * 0x1000)?;
        let mut a_remote = b.ep;
        if let Some(d) = spec.a_dest {
            a_remote.addr = d;
        }
        let e = |e: roce_verbs_api::ModifyQpError| e.to_string();
        match spec.qp_type {
            // (the lab's connected pairs are RC, UC or UD; an XRC pair
            // connects as RC does)
            QpType::Rc | QpType::XrcSend | QpType::XrcRecv => {
                a.qp.connect(&a.ep, &a_remote, &spec.a).map_err(e)?;
                b.qp.connect(&b.ep, &a.ep, &spec.b).map_err(e)?;
            }
            QpType::Uc => {
                a.qp.connect_uc(&a.ep, &a_remote, &spec.a).map_err(e)?;
                b.qp.connect_uc(&b.ep, &a.ep, &spec.b).map_err(e)?;
            }
            QpType::Ud => {
                a.qp.activate_ud(roce_verbs_api::DEFAULT_QKEY, a.ep.psn).map_err(e)?;
                b.qp.activate_ud(roce_verbs_api::DEFAULT_QKEY, b.ep.psn).map_err(e)?;
            }
        }
        self.watch(&a.who(), &a.cq);
        self.watch(&b.who(), &b.cq);
        let conn = if spec.qp_type == QpType::Ud {
            "(no connection: each send names its peer)"
        } else {
            "connected"
        };
        let line = format!(
            "{} QP {:#x} (10.0.0.1, first PSN {:#x}) <-> {} QP {:#x} (10.0.0.2, first PSN {:#x}): \
             {} {}, path MTU {}",
            a.dev,
            a.ep.qpn,
            a.ep.psn,
            b.dev,
            b.ep.qpn,
            b.ep.psn,
            spec.qp_type,
            conn,
            spec.a.mtu.bytes()
        );
        self.say("setup", line);
        Ok((a, b))
    }

    /// The fabric's and both devices' non-zero counters, as a summary.
    pub(super) fn summary(&mut self) {
        let f = self.net.stats();
        let mut s =
            format!("fabric       {} frames sent, {} delivered", f.transmitted, f.delivered);
        for (n, v) in [
            ("copies to multicast group members", f.mcast_copies),
            ("lost (fault flags)", f.dropped_loss),
            ("dropped by the scenario's fault", f.dropped_filter),
            ("dropped: larger than the link MTU", f.dropped_mtu),
            ("dropped: no such address", f.dropped_unroutable),
            ("duplicated", f.duplicated),
            ("reordered", f.reordered),
            ("corrupted", f.corrupted),
        ] {
            if v > 0 {
                let _ = write!(s, ", {v} {n}");
            }
        }
        self.note(s);
        for ctx in self.devices() {
            let c = ctx.counters();
            let nz: Vec<String> =
                c.iter().filter(|(_, v)| *v != 0).map(|(n, v)| format!("{n}={v}")).collect();
            let prefix = if ctx.name() == "roce0" { "counters    " } else { "            " };
            let list = if nz.is_empty() { "all zero".to_string() } else { nz.join(" ") };
            self.note(format!("{prefix} {}: {list}", ctx.name()));
        }
    }
}

/// The ibverbs name of an asynchronous event (`IBV_EVENT_` dropped).
fn event_name(ev: roce_verbs_api::AsyncEvent) -> String {
    use roce_verbs_api::AsyncEvent as E;
    match ev {
        E::QpFatal(q) => format!("QP_FATAL (QP {:#x} entered ERR)", q.value()),
        E::SrqLimitReached(_) => "SRQ_LIMIT_REACHED".to_string(),
        E::SqDrained(q) => format!("SQ_DRAINED (QP {:#x})", q.value()),
        E::QpLastWqeReached(q) => format!("QP_LAST_WQE_REACHED (QP {:#x})", q.value()),
        other => format!("{other:?}"),
    }
}

/// `wr_id=1 RDMA_WRITE status=SUCCESS byte_len=3000` (+ imm, flags, src QP).
fn wc_line(wc: &WorkCompletion) -> String {
    let mut s = format!(
        "completion wr_id={} {} status={}",
        wc.wr_id,
        wc_opcode_name(wc.opcode),
        status_name(wc.status)
    );
    if wc.status != WcStatus::Success {
        let _ = write!(s, " ({}: {})", wc.status.code(), wc.status.as_str());
        return s;
    }
    let _ = write!(s, " byte_len={}", wc.byte_len);
    if let Some(imm) = wc.imm {
        let _ = write!(s, " imm={imm:#x}");
    }
    if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
        let _ = write!(s, " src_qp={:#x}", wc.src_qp);
        if wc.wc_flags.contains(roce_verbs_api::WcFlags::GRH) {
            s.push_str(" GRH");
        }
    }
    s
}

/// Events a single scenario step may take at most (every scenario is small).
pub const STEP_EVENTS: usize = 20_000;
