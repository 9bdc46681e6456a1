//! The engine of `roce perf` (the front is `cli/src/perf/mod.rs`): two UDP devices, QP pairs, the bandwidth
//! loop, the ping-pong loops and the raw-UDP ping-pong.

use anyhow::{anyhow, bail, Context as _};
use roce_host::{DeviceConfig, GroupOptions};
use roce_transport::{CountersSnapshot, EngineConfig, TransportCounters};
use roce_verbs_api::{
    AccessFlags, Budget, CompChannel, ConnectOptions, Context, Cq, Device, Mr, PathMtu, Pd, Qp,
    RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TestKind {
    /// RDMA WRITE bandwidth (ib_write_bw).
    Write,
    /// RDMA READ bandwidth (ib_read_bw).
    Read,
    /// SEND/RECV bandwidth (ib_send_bw).
    Send,
    /// FETCH_AND_ADD rate (ib_atomic_bw; 8-byte messages).
    Atomic,
    /// Round-trip latency (ib_send_lat / ib_write_lat / ib_read_lat).
    Lat,
}

/// Which operation a latency test uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum LatKind {
    /// SEND/RECV ping-pong (ib_send_lat).
    Send,
    /// RDMA WRITE ping-pong, each side polling its memory (ib_write_lat).
    Write,
    /// RDMA READ, one outstanding (ib_read_lat).
    Read,
}

/// Who moves the frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum PollMode {
    /// One engine per device: the test thread sends on post_send and, to
    /// wait, polls for `--spin-us` and then blocks in a completion channel
    /// (sleeping on the socket, woken by the datagram); each device's
    /// engine thread serves it while nobody waits on it.
    Event,
    /// One engine without a thread for both devices: the test thread sends
    /// on post_send and busy-polls both sockets while it waits.
    Busy,
}

impl PollMode {
    /// The name used in output.
    pub fn name(self) -> &'static str {
        match self {
            PollMode::Event => "event",
            PollMode::Busy => "busy",
        }
    }
}

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct PerfConfig {
    /// The test.
    pub test: TestKind,
    /// For lat.
    pub lat_op: LatKind,
    /// Message size.
    pub size: u32,
    /// Iterations per QP (ignored with `duration`).
    pub iters: u64,
    /// Time-bounded run.
    pub duration: Option<Duration>,
    /// QP pairs.
    pub qps: u32,
    /// Outstanding WRs per QP.
    pub tx_depth: u32,
    /// Path MTU bytes.
    pub mtu: u32,
    /// Device A address.
    pub addr_a: IpAddr,
    /// Device B address.
    pub addr_b: IpAddr,
    /// Driver threads or busy polling.
    pub poll: PollMode,
    /// Event mode: driver spin before sleeping, microseconds.
    pub spin_us: u64,
}

/// Positive ACKs wait up to this long so that one covers several requests
/// (see `EngineDriver::with_ack_delay`), in both polling modes. (20 us in
/// event mode was slower in every test: 64 B WRITEs 0.39 against 0.5-1.2 M
/// msg/s, SEND round trips 15 against 8-12 us.)
const ACK_DELAY: Duration = Duration::from_micros(200);

/// No completion for this long: the run failed.
const STALL: Duration = Duration::from_secs(10);

struct Dev {
    ctx: Context,
    counters: Arc<TransportCounters>,
    name: String,
}

fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

fn dev_config(name: &str, addr: IpAddr, mtu: PathMtu) -> DeviceConfig {
    let mut c = DeviceConfig::udp(name, addr);
    c.mtu = mtu;
    c
}

fn dev_of(d: Device, name: &str) -> anyhow::Result<Dev> {
    let ctx = d.open();
    let counters =
        roce_host::transport_counters(&ctx).ok_or_else(|| anyhow!("{name}: no transport"))?;
    Ok(Dev { ctx, counters, name: name.to_string() })
}

/// One device on its own engine (event mode): a waiting caller spins for
/// `spin_us`, then sleeps on the socket; the engine's thread serves the
/// device while nobody waits on it (a WRITE target).
fn open_dev(name: &str, addr: IpAddr, mtu: PathMtu, spin_us: u64) -> anyhow::Result<Dev> {
    let engine = EngineConfig {
        name: format!("roce-{name}"),
        max_idle: Duration::from_millis(20),
        caller_spin: Duration::from_micros(spin_us),
        thread_spin: Duration::from_micros(spin_us),
        ..Default::default()
    };
    let opts = GroupOptions { engine, ack_delay: Some(ACK_DELAY), publish: false, share: false };
    let d = DeviceConfig::open_group(&[dev_config(name, addr, mtu)], opts)
        .with_context(|| format!("device {name}"))?;
    dev_of(d.into_iter().next().ok_or_else(|| anyhow!("no device"))?, name)
}

/// Both devices on one engine without a thread (busy mode): the test
/// thread never sleeps and moves every frame.
fn open_polled(
    (na, aa): (&str, IpAddr),
    (nb, ab): (&str, IpAddr),
    mtu: PathMtu,
) -> anyhow::Result<(Dev, Dev)> {
    let engine = EngineConfig {
        name: "roce-perf".into(),
        caller_spin: Duration::MAX,
        thread: false,
        ..Default::default()
    };
    let opts = GroupOptions { engine, ack_delay: Some(ACK_DELAY), publish: false, share: false };
    let mut d = DeviceConfig::open_group(&[dev_config(na, aa, mtu), dev_config(nb, ab, mtu)], opts)
        .context("devices")?
        .into_iter();
    let (Some(a), Some(b)) = (d.next(), d.next()) else { bail!("no devices") };
    Ok((dev_of(a, na)?, dev_of(b, nb)?))
}

struct Pair {
    qa: Qp,
    qb: Qp,
    /// On A: WRITE/SEND source, READ destination, atomic result.
    ma: Mr,
    /// On B: WRITE/SEND destination, READ source, atomic target.
    mb: Mr,
    psn_a: u32,
    psn_b: u32,
}

/// The CQs of one side: as many as it takes to give every QP room for all
/// its completions within the device's `max_cqe` (QP `q` reports to
/// `cqs[q / per_cq]`). Polled round-robin as one.
pub struct CqSet {
    cqs: Vec<Cq>,
    per_cq: usize,
    next: std::cell::Cell<usize>,
    /// Event mode: the completion channel every CQ reports to (waits
    /// block in it, as `ib_*_lat -e` / `ib_*_bw -e` do).
    chan: Option<CompChannel>,
}

impl CqSet {
    /// CQs for `qps` QPs that each may have `per_qp` completions queued;
    /// with `events`, on one completion channel.
    fn new(ctx: &Context, qps: u32, per_qp: u32, events: bool) -> anyhow::Result<CqSet> {
        let chan = match events {
            true => Some(ctx.create_comp_channel().context("create_comp_channel")?),
            false => None,
        };
        let max = ctx.query_device().max_cqe;
        if per_qp > max {
            bail!("one QP needs room for {per_qp} completions, more than max_cqe {max}: lower -t");
        }
        let per_cq = (max / per_qp).clamp(1, qps.max(1));
        let mut cqs = Vec::new();
        let mut left = qps.max(1);
        while left > 0 {
            let n = left.min(per_cq);
            let cq = match &chan {
                Some(ch) => ctx.create_cq_with_channel(n * per_qp, ch),
                None => ctx.create_cq(n * per_qp),
            };
            cqs.push(cq.map_err(|e| anyhow!("create_cq: {e}"))?);
            left -= n;
        }
        Ok(CqSet { cqs, per_cq: per_cq as usize, next: std::cell::Cell::new(0), chan })
    }

    /// The CQ QP `q` reports to.
    fn for_qp(&self, q: usize) -> &Cq {
        &self.cqs[(q / self.per_cq).min(self.cqs.len() - 1)]
    }

    /// Up to `max` completions from the CQs, starting after the one that
    /// gave completions last time (so none is starved).
    fn poll(&self, max: usize) -> Result<Vec<WorkCompletion>, roce_verbs_api::PollCqError> {
        if self.cqs.len() == 1 {
            return self.cqs[0].poll(max);
        }
        let mut out = Vec::new();
        let n = self.cqs.len();
        let start = self.next.get();
        for i in 0..n {
            if out.len() >= max {
                break;
            }
            let k = (start + i) % n;
            let got = self.cqs[k].poll(max - out.len())?;
            if !got.is_empty() {
                self.next.set((k + 1) % n);
            }
            out.extend(got);
        }
        Ok(out)
    }
}

/// Two devices, their CQs and the QP pairs of one test.
pub struct Setup {
    a: Dev,
    b: Dev,
    cq_a: CqSet,
    cq_b: CqSet,
    pairs: Vec<Pair>,
    slots: u32,
    /// SENDs completed per QP in earlier runs: the receive ring keeps
    /// turning across runs, so the next send slot continues from here.
    sends_before: std::cell::RefCell<Vec<u64>>,
    _pds: (Pd, Pd),
}

impl Setup {
    /// Open both devices and connect `cfg.qps` QP pairs.
    pub fn new(cfg: &PerfConfig) -> anyhow::Result<Setup> {
        let mtu = PathMtu::from_bytes(cfg.mtu as usize).ok_or_else(|| anyhow!("bad mtu"))?;
        let (a, b) = match cfg.poll {
            PollMode::Event => (
                open_dev("perf-a", cfg.addr_a, mtu, cfg.spin_us)?,
                open_dev("perf-b", cfg.addr_b, mtu, cfg.spin_us)?,
            ),
            PollMode::Busy => open_polled(("perf-a", cfg.addr_a), ("perf-b", cfg.addr_b), mtu)?,
        };
        let lat = cfg.test == TestKind::Lat;
        // lat keeps one request outstanding, but with delayed ACKs (busy
        // mode) several SENDs may await their acknowledgement.
        let depth = if lat { 32 } else { cfg.tx_depth };
        // Buffer slots per QP: WRITE/READ cycle through up to 64 message
        // buffers; SEND needs one receive buffer per outstanding message.
        let slots = match cfg.test {
            TestKind::Lat | TestKind::Atomic => 1,
            TestKind::Send => depth.clamp(1, 512),
            _ => depth.clamp(1, 64),
        };
        let per_qp = depth + slots + 16;
        let events = cfg.poll == PollMode::Event;
        let cq_a = CqSet::new(&a.ctx, cfg.qps, per_qp, events)?;
        let cq_b = CqSet::new(&b.ctx, cfg.qps, per_qp, events)?;
        let pd_a = a.ctx.alloc_pd().map_err(|e| anyhow!("alloc_pd: {e}"))?;
        let pd_b = b.ctx.alloc_pd().map_err(|e| anyhow!("alloc_pd: {e}"))?;
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let opts = ConnectOptions { mtu, ..Default::default() };
        let mut pairs = Vec::new();
        let len = (cfg.size as usize * slots as usize).max(8);
        for q in 0..cfg.qps {
            let ma = pd_a.reg_mr(len, access).map_err(|e| anyhow!("reg_mr: {e}"))?;
            let mb = pd_b.reg_mr(len, access).map_err(|e| anyhow!("reg_mr: {e}"))?;
            let build = |pd: &Pd, cq: &Cq| {
                pd.qp_builder(cq, cq)
                    .max_send_wr(depth.max(2))
                    .max_recv_wr(slots.max(2))
                    .build()
                    .map_err(|e| anyhow!("create_qp: {e}"))
            };
            let qa = build(&pd_a, cq_a.for_qp(q as usize))?;
            let qb = build(&pd_b, cq_b.for_qp(q as usize))?;
            let (psn_a, psn_b) =
                ((seed() as u32 ^ (q * 7919)) & 0xff_ffff, (seed() as u32 >> 3) & 0xff_ffff);
            let (ea, eb) = (qa.endpoint(psn_a), qb.endpoint(psn_b));
            qa.connect(&ea, &eb, &opts).map_err(|e| anyhow!("connect: {e}"))?;
            qb.connect(&eb, &ea, &opts).map_err(|e| anyhow!("connect: {e}"))?;
            pairs.push(Pair { qa, qb, ma, mb, psn_a, psn_b });
        }
        let sends_before = std::cell::RefCell::new(vec![0; pairs.len()]);
        Ok(Setup { a, b, cq_a, cq_b, pairs, slots, sends_before, _pds: (pd_a, pd_b) })
    }

    /// Name of device A.
    pub fn a_name(&self) -> &str {
        &self.a.name
    }
    /// Name of device B.
    pub fn b_name(&self) -> &str {
        &self.b.name
    }
    /// Each device's name, core counters (rxe names) and transport counters.
    pub fn device_counters(&self) -> Vec<(String, roce_verbs_api::Counters, CountersSnapshot)> {
        [&self.a, &self.b]
            .iter()
            .map(|d| (d.name.clone(), d.ctx.counters(), d.counters.snapshot()))
            .collect()
    }

    /// perftest's "local address / remote address" lines (QP pair 0).
    pub fn address_lines(&self) -> Vec<String> {
        let p = &self.pairs[0];
        let gid = |a: IpAddr| roce_verbs_api::gid::roce_v2_gid(a).to_string();
        vec![
            format!(
                " local address: QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#016x}",
                p.qa.qpn().value(),
                p.psn_a,
                p.ma.rkey().value(),
                p.ma.addr()
            ),
            format!(" GID: {}", gid(self.a.ctx.addr())),
            format!(
                " remote address: QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#016x}",
                p.qb.qpn().value(),
                p.psn_b,
                p.mb.rkey().value(),
                p.mb.addr()
            ),
            format!(" GID: {}", gid(self.b.ctx.addr())),
        ]
    }
}

/// Byte `i` of the pattern of run `k`, QP `q`.
fn pattern(k: u32, q: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x =
                (i as u64).wrapping_mul(0x9E37_79B9).wrapping_add(u64::from(k) * 131 + q as u64);
            (x ^ (x >> 13) ^ (i as u64 >> 8)) as u8
        })
        .collect()
}

/// One bandwidth run.
#[derive(Clone, Debug)]
pub struct BwResult {
    /// Completed messages per QP.
    pub iters_per_qp: u64,
    /// Completed messages (all QPs).
    pub msgs: u64,
    /// Message bytes.
    pub size: u32,
    /// First post to last completion.
    pub elapsed: Duration,
    /// Best of ~20 equal slices of the run, Gb/s.
    pub peak_gbps: f64,
    /// Data check outcome.
    pub data_check: Result<String, String>,
    /// Transport counters of A and B over the run.
    pub wire: (CountersSnapshot, CountersSnapshot),
}

impl BwResult {
    /// Average Gb/s of message payload.
    pub fn gbps(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.msgs as f64 * f64::from(self.size) * 8.0 / s / 1e9
        } else {
            0.0
        }
    }
    /// Messages per second.
    pub fn msgs_per_s(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.msgs as f64 / s
        } else {
            0.0
        }
    }
    fn per_msg(&self, v: u64) -> f64 {
        v as f64 / self.msgs.max(1) as f64
    }
    /// The transport counters as JSON.
    pub fn wire_json(&self) -> Value {
        let side = |c: &CountersSnapshot| {
            json!({
                "dgrams_out": c.dgrams_out, "send_syscalls": c.send_syscalls,
                "gso_sends": c.gso_sends, "gso_segments": c.gso_segments,
                "dgrams_in": c.dgrams_in, "recv_syscalls": c.recv_syscalls,
                "gro_coalesced": c.gro_coalesced, "icrc_bad": c.icrc_bad,
            })
        };
        let (a, b) = &self.wire;
        json!({
            "a": side(a), "b": side(b),
            "dgrams_per_msg": self.per_msg(a.dgrams_out + b.dgrams_out),
            "send_syscalls_per_msg": self.per_msg(a.send_syscalls + b.send_syscalls),
            "recv_syscalls_per_msg": self.per_msg(a.recv_syscalls + b.recv_syscalls),
        })
    }
    /// The transport counters in one line.
    pub fn wire_line(&self) -> String {
        let (a, b) = &self.wire;
        let segs = |c: &CountersSnapshot| {
            if c.gso_sends > 0 {
                c.gso_segments as f64 / c.gso_sends as f64
            } else {
                0.0
            }
        };
        format!(
            "per message {:.2} datagrams, {:.3} send + {:.3} recv syscalls; A: {} dgrams out in {} sends ({} GSO, {:.1} segs each), B: {} out in {} sends ({} GSO, {:.1} segs each)",
            self.per_msg(a.dgrams_out + b.dgrams_out),
            self.per_msg(a.send_syscalls + b.send_syscalls),
            self.per_msg(a.recv_syscalls + b.recv_syscalls),
            a.dgrams_out,
            a.send_syscalls,
            a.gso_sends,
            segs(a),
            b.dgrams_out,
            b.send_syscalls,
            b.gso_sends,
            segs(b)
        )
    }
}

fn diff(a: CountersSnapshot, b: CountersSnapshot) -> CountersSnapshot {
    b.since(&a)
}

fn check_wc(wc: &WorkCompletion) -> anyhow::Result<()> {
    if wc.status != WcStatus::Success {
        bail!("completion wr_id {} on QP {:#x} failed: {:?}", wc.wr_id, wc.qp_num, wc.status);
    }
    Ok(())
}

/// Poll `cq` for up to `max`, waiting at most `wait`: in event mode blocked
/// in the completion channel (poll, arm, poll again, `get_cq_event`,
/// acknowledge: perftest's `-e` loop), in busy mode letting `ctx`'s driver
/// spin.
fn poll_wait(
    ctx: &Context,
    cq: &CqSet,
    max: usize,
    wait: Duration,
) -> anyhow::Result<Vec<WorkCompletion>> {
    if let Some(ch) = &cq.chan {
        let end = Instant::now() + wait;
        loop {
            let v = cq.poll(max).map_err(|e| anyhow!("poll_cq: {e}"))?;
            if !v.is_empty() {
                return Ok(v);
            }
            for c in &cq.cqs {
                c.req_notify(false).map_err(|e| anyhow!("req_notify_cq: {e}"))?;
            }
            let v = cq.poll(max).map_err(|e| anyhow!("poll_cq: {e}"))?;
            if !v.is_empty() {
                return Ok(v);
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(v);
            }
            if let Some(c) = ch.get_cq_event(left) {
                c.ack_events(1);
            }
        }
    }
    let mut out = Vec::new();
    let mut err = None;
    ctx.progress(
        || match cq.poll(max) {
            Ok(v) => {
                out = v;
                !out.is_empty()
            }
            Err(e) => {
                err = Some(e);
                true
            }
        },
        Budget { events: 0, wall: wait },
    );
    if let Some(e) = err {
        bail!("poll_cq: {e}");
    }
    Ok(out)
}

/// Run one bandwidth test (run index `k`).
pub fn run_bw(s: &Setup, cfg: &PerfConfig, k: u32, progress: bool) -> anyhow::Result<BwResult> {
    let size = cfg.size as usize;
    let slots = s.slots as usize;
    let region = size * slots;
    let nq = s.pairs.len();
    // Fresh data each run: the source gets run k's pattern, the target zeros.
    for (q, p) in s.pairs.iter().enumerate() {
        let pat = pattern(k, q, region);
        let zero = vec![0u8; region.max(8)];
        match cfg.test {
            TestKind::Write | TestKind::Send => {
                p.ma.write(0, &pat)?;
                p.mb.write(0, &zero)?;
            }
            TestKind::Read => {
                p.mb.write(0, &pat)?;
                p.ma.write(0, &zero)?;
            }
            TestKind::Atomic | TestKind::Lat => {
                p.mb.write_u64(0, 0)?;
            }
        }
        // The receive ring is posted once; completions repost their slot.
        if cfg.test == TestKind::Send && k == 0 {
            for slot in 0..slots {
                p.qb.post_recv(RecvWr::new(
                    slot as u64,
                    p.mb.addr() + (slot * size) as u64,
                    cfg.size,
                    p.mb.lkey(),
                ))
                .map_err(|e| anyhow!("post_recv: {e}"))?;
            }
        }
    }
    let w0 = (s.a.counters.snapshot(), s.b.counters.snapshot());
    let depth = u64::from(cfg.tx_depth);
    let mut posted = vec![0u64; nq];
    let mut done = vec![0u64; nq];
    let mut recvd = vec![0u64; nq];
    let qpn_index: std::collections::HashMap<u32, usize> =
        s.pairs.iter().enumerate().map(|(i, p)| (p.qa.qpn().value(), i)).collect();
    let qpn_index_b: std::collections::HashMap<u32, usize> =
        s.pairs.iter().enumerate().map(|(i, p)| (p.qb.qpn().value(), i)).collect();
    let mut stamps: Vec<(Instant, u64)> = Vec::new();
    let mut total = 0u64;
    let start = Instant::now();
    let mut bar = crate::progress::Progress::new(progress.then(std::io::stderr));
    let mut rang = true;
    let mut last_completion = start;
    let mut stop_posting = false;
    loop {
        if let Some(d) = cfg.duration {
            if start.elapsed() >= d {
                stop_posting = true;
            }
        }
        for (q, p) in s.pairs.iter().enumerate() {
            // Every free slot in one post list (one driver kick).
            let mut list = Vec::new();
            let first = posted[q];
            while !stop_posting
                && posted[q] - done[q] < depth
                && (cfg.duration.is_some() || posted[q] < cfg.iters)
            {
                let base = if cfg.test == TestKind::Send { s.sends_before.borrow()[q] } else { 0 };
                let slot = ((base + posted[q]) % slots as u64) as usize;
                let off = (slot * size) as u64;
                let wr = match cfg.test {
                    TestKind::Write => SendWr::new(posted[q], WrOpcode::RdmaWrite)
                        .sge(p.ma.addr() + off, cfg.size, p.ma.lkey())
                        .remote(p.mb.remote_addr(off), p.mb.rkey()),
                    TestKind::Read => SendWr::new(posted[q], WrOpcode::RdmaRead)
                        .sge(p.ma.addr() + off, cfg.size, p.ma.lkey())
                        .remote(p.mb.remote_addr(off), p.mb.rkey()),
                    TestKind::Send => SendWr::new(posted[q], WrOpcode::Send).sge(
                        p.ma.addr() + off,
                        cfg.size,
                        p.ma.lkey(),
                    ),
                    TestKind::Atomic | TestKind::Lat => {
                        let mut w = SendWr::new(posted[q], WrOpcode::AtomicFetchAndAdd)
                            .sge(p.ma.addr(), 8, p.ma.lkey())
                            .remote(p.mb.remote_addr(0), p.mb.rkey());
                        w.compare_add = 1;
                        w
                    }
                };
                list.push(wr);
                posted[q] += 1;
            }
            if !list.is_empty() {
                let n =
                    p.qa.post_send_list_deferred(list)
                        .map_err(|(_, e)| anyhow!("post_send: {e}"))?;
                debug_assert_eq!(n as u64, posted[q] - first);
                rang = false;
            }
        }
        // One doorbell for the lists of every QP.
        if !rang {
            s.pairs[0].qa.doorbell();
            rang = true;
        }
        let outstanding: u64 = posted.iter().zip(&done).map(|(p, d)| p - d).sum();
        let finished = if cfg.duration.is_some() {
            stop_posting && outstanding == 0
        } else {
            done.iter().all(|&d| d >= cfg.iters)
        };
        if finished {
            break;
        }
        let wait = match cfg.duration {
            Some(d) if !stop_posting => {
                d.saturating_sub(start.elapsed()).min(STALL).max(Duration::from_millis(1))
            }
            _ => STALL,
        };
        let wcs = poll_wait(&s.a.ctx, &s.cq_a, 256, wait)?;
        let now = Instant::now();
        for wc in &wcs {
            check_wc(wc)?;
            let q =
                *qpn_index.get(&wc.qp_num).ok_or_else(|| anyhow!("completion for unknown QP"))?;
            done[q] += 1;
            total += 1;
        }
        if !wcs.is_empty() {
            stamps.push((now, total));
            last_completion = now;
        } else if now.duration_since(last_completion) >= STALL && outstanding > 0 {
            let (a, b) = (s.a.counters.snapshot(), s.b.counters.snapshot());
            let (ca, cb) = (s.a.ctx.counters(), s.b.ctx.counters());
            bail!(
                "stalled: no completion for {:?} ({} of {} done); A: {} dgrams out, {} in, \
                 retransmits {}; B: {} out, {} in, {} dropped as duplicates/out of sequence",
                STALL,
                total,
                posted.iter().sum::<u64>(),
                a.dgrams_out,
                a.dgrams_in,
                ca.completer_retry_err,
                b.dgrams_out,
                b.dgrams_in,
                cb.duplicate_request + cb.out_of_seq_request
            );
        }
        if cfg.test == TestKind::Send {
            for wc in s.cq_b.poll(256).map_err(|e| anyhow!("poll_cq: {e}"))? {
                check_wc(&wc)?;
                if wc.opcode != WcOpcode::Recv {
                    continue;
                }
                let q = *qpn_index_b
                    .get(&wc.qp_num)
                    .ok_or_else(|| anyhow!("completion for unknown QP"))?;
                let p = &s.pairs[q];
                recvd[q] += 1;
                let slot = wc.wr_id as usize % slots;
                p.qb.post_recv(RecvWr::new(
                    wc.wr_id,
                    p.mb.addr() + (slot * size) as u64,
                    cfg.size,
                    p.mb.lkey(),
                ))
                .map_err(|e| anyhow!("post_recv: {e}"))?;
            }
        }
        match cfg.duration {
            Some(d) => bar.update(
                now.duration_since(start).as_millis() as u64,
                d.as_millis() as u64,
                &format!("ms of run {}", k + 1),
            ),
            None => bar.update(total, cfg.iters * nq as u64, &format!("messages, run {}", k + 1)),
        }
    }
    let elapsed = last_completion.duration_since(start);
    bar.finish();
    let w1 = (s.a.counters.snapshot(), s.b.counters.snapshot());
    // Peak: the best of ~20 equal slices (by completion count) of the run.
    let mut peak: f64 = 0.0;
    let slice = (total / 20).max(1);
    let (mut t0, mut n0) = (start, 0u64);
    for &(t, n) in &stamps {
        if n - n0 >= slice {
            let dt = t.duration_since(t0).as_secs_f64();
            if dt > 0.0 {
                peak = peak.max((n - n0) as f64 * f64::from(cfg.size) * 8.0 / dt / 1e9);
            }
            (t0, n0) = (t, n);
        }
    }
    // Drain the receive side of SEND (receives complete before the ACK).
    if cfg.test == TestKind::Send {
        let deadline = Instant::now() + Duration::from_secs(2);
        while recvd.iter().zip(&done).any(|(r, d)| r < d) && Instant::now() < deadline {
            for wc in poll_wait(&s.b.ctx, &s.cq_b, 256, Duration::from_millis(10))? {
                check_wc(&wc)?;
                if let Some(&q) = qpn_index_b.get(&wc.qp_num) {
                    recvd[q] += 1;
                }
            }
        }
    }
    let data_check = verify(s, cfg, k, &done, &recvd)?;
    for (b, d) in s.sends_before.borrow_mut().iter_mut().zip(&done) {
        *b += d;
    }
    Ok(BwResult {
        iters_per_qp: done.iter().copied().min().unwrap_or(0),
        msgs: total,
        size: cfg.size,
        elapsed,
        peak_gbps: if peak > 0.0 { peak } else { 0.0 },
        data_check,
        wire: (diff(w0.0, w1.0), diff(w0.1, w1.1)),
    })
}

fn verify(
    s: &Setup,
    cfg: &PerfConfig,
    k: u32,
    done: &[u64],
    recvd: &[u64],
) -> anyhow::Result<Result<String, String>> {
    let size = cfg.size as usize;
    let slots = s.slots as usize;
    let mut bytes = 0usize;
    for (q, p) in s.pairs.iter().enumerate() {
        let base = if cfg.test == TestKind::Send { s.sends_before.borrow()[q] } else { 0 };
        let n = done[q].min(slots as u64);
        let pat = pattern(k, q, size * slots);
        // The slots this run wrote, in order, gathered into one buffer.
        let idx: Vec<usize> = (0..n).map(|i| ((base + i) % slots as u64) as usize).collect();
        let want: Vec<u8> =
            idx.iter().flat_map(|&j| pat[j * size..(j + 1) * size].iter().copied()).collect();
        let gather = |mr: &Mr| -> anyhow::Result<Vec<u8>> {
            let mut out = vec![0u8; idx.len() * size];
            for (n, &j) in idx.iter().enumerate() {
                mr.read((j * size) as u64, &mut out[n * size..(n + 1) * size])?;
            }
            Ok(out)
        };
        let used = want.len();
        match cfg.test {
            TestKind::Write | TestKind::Send => {
                if cfg.test == TestKind::Send && recvd[q] != done[q] {
                    return Ok(Err(format!(
                        "QP {q}: {} sends completed, {} received",
                        done[q], recvd[q]
                    )));
                }
                let got = gather(&p.mb)?;
                if got != want {
                    let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
                    return Ok(Err(format!("QP {q}: target differs from the source at byte {at}")));
                }
                bytes += used;
            }
            TestKind::Read => {
                let got = gather(&p.ma)?;
                if got != want {
                    let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
                    return Ok(Err(format!(
                        "QP {q}: read buffer differs from the remote at byte {at}"
                    )));
                }
                bytes += used;
            }
            TestKind::Atomic | TestKind::Lat => {
                let v = p.mb.read_u64(0)?;
                if v != done[q] {
                    return Ok(Err(format!("QP {q}: counter is {v}, expected {}", done[q])));
                }
                bytes += 8;
            }
        }
    }
    Ok(Ok(match cfg.test {
        TestKind::Atomic | TestKind::Lat => {
            format!(
                "remote counters equal the {} completed FETCH_AND_ADDs",
                done.iter().sum::<u64>()
            )
        }
        TestKind::Send => format!(
            "{bytes} bytes of the last receive buffers match what was sent, every send received"
        ),
        _ => format!("{bytes} bytes of the last message buffers match the source pattern"),
    }))
}

/// Round-trip samples, microseconds.
#[derive(Clone, Debug)]
pub struct LatResult {
    /// Sorted samples, µs.
    pub samples: Vec<f64>,
    /// Data check outcome.
    pub data_check: Result<String, String>,
}

impl LatResult {
    fn new(mut samples: Vec<f64>, data_check: Result<String, String>) -> LatResult {
        samples.sort_by(|a, b| a.total_cmp(b));
        LatResult { samples, data_check }
    }
    /// Smallest.
    pub fn min(&self) -> f64 {
        self.samples.first().copied().unwrap_or(0.0)
    }
    /// Largest.
    pub fn max(&self) -> f64 {
        self.samples.last().copied().unwrap_or(0.0)
    }
    /// Mean.
    pub fn avg(&self) -> f64 {
        if self.samples.is_empty() {
            return 0.0;
        }
        self.samples.iter().sum::<f64>() / self.samples.len() as f64
    }
    /// Standard deviation.
    pub fn stdev(&self) -> f64 {
        let n = self.samples.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.avg();
        (self.samples.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64).sqrt()
    }
    /// The `p` quantile (nearest rank; 0.5 = median = perftest's t_typical).
    pub fn percentile(&self, p: f64) -> f64 {
        let n = self.samples.len();
        if n == 0 {
            return 0.0;
        }
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
        self.samples[rank - 1]
    }
}

fn wait_recv(ctx: &Context, cq: &CqSet) -> anyhow::Result<WorkCompletion> {
    let start = Instant::now();
    loop {
        // Up to 16 at a time: send completions (a coalesced ACK completes
        // several SENDs at once) may sit in front of the receive.
        let mut got = None;
        for wc in poll_wait(ctx, cq, 16, Duration::from_millis(100))? {
            check_wc(&wc)?;
            if wc.opcode == WcOpcode::Recv && got.is_none() {
                got = Some(wc);
            }
        }
        if let Some(wc) = got {
            return Ok(wc);
        }
        if start.elapsed() > STALL {
            bail!("stalled: no receive completion for {STALL:?}");
        }
    }
}

fn wait_send(ctx: &Context, cq: &CqSet) -> anyhow::Result<WorkCompletion> {
    let start = Instant::now();
    loop {
        if let Some(wc) = poll_wait(ctx, cq, 1, Duration::from_millis(100))?.into_iter().next() {
            check_wc(&wc)?;
            return Ok(wc);
        }
        if start.elapsed() > STALL {
            bail!("stalled: no completion for {STALL:?}");
        }
    }
}

fn wait_byte(ctx: &Context, mr: &Mr, off: u64, want: u8) -> anyhow::Result<()> {
    // The test thread moves the frames while it polls the memory (in both
    // modes: an event-mode engine sleeps on the socket between looks).
    // Spinning on `Mr::read` alone would leave the receive to the engine
    // thread and contend with it for the device lock.
    let mut b = [0u8; 1];
    let ok = ctx.progress(
        || mr.read(off, &mut b).is_ok() && b[0] == want,
        Budget { events: 0, wall: STALL },
    );
    if !ok {
        bail!("stalled: memory at offset {off} never became {want:#x}");
    }
    Ok(())
}

/// Run one latency test (run index `k`).
pub fn run_lat(s: &Setup, cfg: &PerfConfig, k: u32, progress: bool) -> anyhow::Result<LatResult> {
    let p = &s.pairs[0];
    let size = cfg.size as usize;
    let warm = (cfg.iters / 10).min(10);
    let mut samples = Vec::with_capacity(cfg.iters as usize);
    let pat = pattern(k, 0, size);
    p.ma.write(0, &pat)?;
    p.mb.write(0, &vec![0u8; size])?;
    let mut bar = crate::progress::Progress::new(progress.then(std::io::stderr));
    let busy = cfg.poll == PollMode::Busy;
    let last = (size - 1) as u64;
    for i in 0..warm + cfg.iters {
        bar.update(i, warm + cfg.iters, &format!("round trips, run {}", k + 1));
        let t0 = Instant::now();
        match cfg.lat_op {
            LatKind::Send => {
                p.qb.post_recv(RecvWr::new(i, p.mb.addr(), cfg.size, p.mb.lkey()))
                    .map_err(|e| anyhow!("post_recv: {e}"))?;
                p.qa.post_recv(RecvWr::new(i, p.ma.addr(), cfg.size, p.ma.lkey()))
                    .map_err(|e| anyhow!("post_recv: {e}"))?;
                // The receive buffers on A are the send buffers too: A's
                // pattern comes back from B unchanged.
                let t0 = Instant::now();
                p.qa.post_send(SendWr::new(i, WrOpcode::Send).sge(
                    p.ma.addr(),
                    cfg.size,
                    p.ma.lkey(),
                ))
                .map_err(|e| anyhow!("post_send: {e}"))?;
                wait_recv(&s.b.ctx, &s.cq_b)?;
                p.qb.post_send(SendWr::new(i, WrOpcode::Send).sge(
                    p.mb.addr(),
                    cfg.size,
                    p.mb.lkey(),
                ))
                .map_err(|e| anyhow!("post_send: {e}"))?;
                wait_recv(&s.a.ctx, &s.cq_a)?;
                let dt = t0.elapsed();
                if i >= warm {
                    samples.push(dt.as_secs_f64() * 1e6);
                }
                // Reap the two SEND completions outside the timed part.
                let _ = s.cq_a.poll(16);
                let _ = s.cq_b.poll(16);
                continue;
            }
            LatKind::Write => {
                // ib_write_lat: each side writes the other's buffer; the
                // receiver spins on the last byte, which carries the
                // iteration tag.
                let tag = (i % 127) as u8 + 1;
                let reply = tag + 128;
                p.ma.write(last, &[tag])?;
                p.qa.post_send(
                    SendWr::new(i, WrOpcode::RdmaWrite)
                        .sge(p.ma.addr(), cfg.size, p.ma.lkey())
                        .remote(p.mb.remote_addr(0), p.mb.rkey()),
                )
                .map_err(|e| anyhow!("post_send: {e}"))?;
                wait_byte(&s.b.ctx, &p.mb, last, tag)?;
                p.mb.write(last, &[reply])?;
                p.qb.post_send(
                    SendWr::new(i, WrOpcode::RdmaWrite)
                        .sge(p.mb.addr(), cfg.size, p.mb.lkey())
                        .remote(p.ma.remote_addr(0), p.ma.rkey()),
                )
                .map_err(|e| anyhow!("post_send: {e}"))?;
                wait_byte(&s.a.ctx, &p.ma, last, reply)?;
                let dt = t0.elapsed();
                // Reap both WRITE completions outside the timed part.
                wait_send(&s.a.ctx, &s.cq_a)?;
                wait_send(&s.b.ctx, &s.cq_b)?;
                if i >= warm {
                    samples.push(dt.as_secs_f64() * 1e6);
                }
                continue;
            }
            LatKind::Read => {
                p.qa.post_send(
                    SendWr::new(i, WrOpcode::RdmaRead)
                        .sge(p.ma.addr(), cfg.size, p.ma.lkey())
                        .remote(p.mb.remote_addr(0), p.mb.rkey()),
                )
                .map_err(|e| anyhow!("post_send: {e}"))?;
                wait_send(&s.a.ctx, &s.cq_a)?;
            }
        }
        if i >= warm {
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    bar.finish();
    if busy {
        // Let the ACKs the busy-poll driver held back go (it releases them
        // when idle), so the last requests complete before the counters
        // are read.
        s.a.ctx.progress(|| false, Budget { events: 0, wall: Duration::from_millis(3) });
    }
    // Data check: after the ping-pong both buffers hold A's pattern (READ
    // copies B's zeros... so for READ, B holds zeros and A must too).
    let mut a = vec![0u8; size];
    let mut b = vec![0u8; size];
    p.ma.read(0, &mut a)?;
    p.mb.read(0, &mut b)?;
    let check = match cfg.lat_op {
        LatKind::Read => {
            if a == b {
                Ok(format!("{size} bytes read equal the remote buffer"))
            } else {
                Err("read buffer differs from the remote buffer".into())
            }
        }
        _ => {
            if a == b && a[..size - 1] == pat[..size - 1] {
                Ok(format!("{size} bytes arrived intact both ways"))
            } else {
                Err("the buffers differ after the ping-pong".into())
            }
        }
    };
    Ok(LatResult::new(samples, check))
}

/// Raw-UDP ping-pong round trips between the two addresses, `payload`-byte
/// datagrams, as many as the test's iterations, in the test's polling mode:
/// blocking sockets and an echo thread (event; with `--spin-us` each
/// receiver first polls that long, as our driver threads do), or one thread
/// spinning on two non-blocking sockets (busy, as `--poll busy` drives both
/// devices).
pub fn udp_rtt(cfg: &PerfConfig, payload: usize) -> anyhow::Result<LatResult> {
    match cfg.poll {
        PollMode::Event => udp_rtt_echo(cfg, payload),
        PollMode::Busy => udp_rtt_busy(cfg, payload),
    }
}

/// Busy receive on a non-blocking socket (gives up after about 4 s).
fn spin_recv(s: &UdpSocket, buf: &mut [u8]) -> anyhow::Result<(usize, SocketAddr)> {
    spin_then_block_recv(s, buf, Duration::from_secs(2))
}

fn udp_rtt_busy(cfg: &PerfConfig, payload: usize) -> anyhow::Result<LatResult> {
    let a = UdpSocket::bind(SocketAddr::new(cfg.addr_a, 0))?;
    let b = UdpSocket::bind(SocketAddr::new(cfg.addr_b, 0))?;
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    let (aa, ba) = (a.local_addr()?, b.local_addr()?);
    let n = cfg.iters + (cfg.iters / 10).min(10);
    let warm = n - cfg.iters;
    let msg = vec![0xA5u8; payload];
    let mut buf = vec![0u8; 65536];
    let mut samples = Vec::new();
    for i in 0..n {
        let t0 = Instant::now();
        a.send_to(&msg, ba)?;
        let (len, from) = spin_recv(&b, &mut buf)?;
        if len != payload || from != aa {
            bail!("unexpected datagram from {from} ({len} bytes)");
        }
        b.send_to(&buf[..len], aa)?;
        let (len, from) = spin_recv(&a, &mut buf)?;
        let dt = t0.elapsed();
        if len != payload || from != ba {
            bail!("unexpected echo from {from} ({len} bytes)");
        }
        if i >= warm {
            samples.push(dt.as_secs_f64() * 1e6);
        }
    }
    Ok(LatResult::new(samples, Ok("echo".into())))
}

/// Receive on a non-blocking socket: poll it for `spin`, then sleep in
/// `poll(2)` until a datagram arrives (at most 2 s).
fn spin_then_block_recv(
    s: &UdpSocket,
    buf: &mut [u8],
    spin: Duration,
) -> anyhow::Result<(usize, SocketAddr)> {
    use std::os::fd::AsFd;
    let start = Instant::now();
    let mut n = 0u32;
    loop {
        match s.recv_from(buf) {
            Ok(r) => return Ok(r),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        n = n.wrapping_add(1);
        if n.is_multiple_of(16) && start.elapsed() >= spin {
            let mut fds = [nix::poll::PollFd::new(s.as_fd(), nix::poll::PollFlags::POLLIN)];
            let ready = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(2000u16))?;
            if ready == 0 {
                bail!("raw UDP ping-pong: no datagram for 2 s");
            }
        }
        std::hint::spin_loop();
    }
}

/// Receive for the event-mode reference: blocking (`spin` None), or poll
/// the non-blocking socket for `spin`, then sleep.
fn echo_recv(
    s: &UdpSocket,
    buf: &mut [u8],
    spin: Option<Duration>,
) -> anyhow::Result<(usize, SocketAddr)> {
    match spin {
        Some(sp) => spin_then_block_recv(s, buf, sp),
        None => Ok(s.recv_from(buf)?),
    }
}

/// The event-mode reference: an echo thread on B and the test thread on A,
/// both blocking in `recv` (`spin_us` 0) or, as our driver threads do, first
/// polling their non-blocking socket for `spin_us`.
fn udp_rtt_echo(cfg: &PerfConfig, payload: usize) -> anyhow::Result<LatResult> {
    let spin = (cfg.spin_us > 0).then(|| Duration::from_micros(cfg.spin_us));
    let a = UdpSocket::bind(SocketAddr::new(cfg.addr_a, 0))?;
    let b = UdpSocket::bind(SocketAddr::new(cfg.addr_b, 0))?;
    let ba = b.local_addr()?;
    for s in [&a, &b] {
        match spin {
            Some(_) => s.set_nonblocking(true)?,
            None => s.set_read_timeout(Some(Duration::from_secs(2)))?,
        }
    }
    let n = cfg.iters + (cfg.iters / 10).min(10);
    let echo = std::thread::spawn(move || -> anyhow::Result<()> {
        let mut buf = vec![0u8; 65536];
        for _ in 0..n {
            let (len, from) = echo_recv(&b, &mut buf, spin)?;
            b.send_to(&buf[..len], from)?;
        }
        Ok(())
    });
    let msg = vec![0xA5u8; payload];
    let mut buf = vec![0u8; 65536];
    let mut samples = Vec::new();
    let warm = n - cfg.iters;
    for i in 0..n {
        let t0 = Instant::now();
        a.send_to(&msg, ba)?;
        let (len, from) = echo_recv(&a, &mut buf, spin)?;
        let dt = t0.elapsed();
        if len != payload || from != ba {
            bail!("unexpected echo from {from} ({len} bytes)");
        }
        if i >= warm {
            samples.push(dt.as_secs_f64() * 1e6);
        }
    }
    echo.join().map_err(|_| anyhow!("echo thread panicked"))??;
    let how = match spin {
        Some(_) => format!("echo, {} us spin", cfg.spin_us),
        None => "echo".to_string(),
    };
    Ok(LatResult::new(samples, Ok(how)))
}
