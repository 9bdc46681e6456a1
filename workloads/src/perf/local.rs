//! The devices of a `roce perf` run in one process: two UDP devices (each
//! on its own engine, or both on one busy-polled engine), their CQs and the
//! connected QP pairs, with a buffer on each side.

use super::loops::CqSet;
use super::{PerfConfig, PollMode, TestKind};
use crate::pattern::Pattern;
use anyhow::{anyhow, bail, Context as _};
use roce_host::{DeviceConfig, GroupOptions};
use roce_transport::{CountersSnapshot, EngineConfig, TransportCounters};
use roce_verbs_api::{AccessFlags, ConnectOptions, Context, Cq, Device, Mr, PathMtu, Pd, Qp};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// Positive ACKs wait up to this long so that one covers several requests
/// (`GroupOptions::ack_delay`, the cores' `LinkProfile::ack_delay`), in
/// both polling modes. (20 us in
/// event mode was slower in every test: 64 B WRITEs 0.39 against 0.5-1.2 M
/// msg/s, SEND round trips 15 against 8-12 us.)
const ACK_DELAY: Duration = Duration::from_micros(200);

pub(crate) struct Dev {
    pub(crate) ctx: Context,
    pub(crate) counters: Arc<TransportCounters>,
    pub(crate) name: String,
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

pub(crate) struct Pair {
    pub(crate) qa: Qp,
    pub(crate) qb: Qp,
    /// On A: WRITE/SEND source, READ destination, atomic result.
    pub(crate) ma: Mr,
    /// On B: WRITE/SEND destination, READ source, atomic target.
    pub(crate) mb: Mr,
    psn_a: u32,
    psn_b: u32,
}

impl Pair {
    /// The pattern of run `k`'s source buffer: B's for READ, else A's
    /// (seeded by its QP number and first PSN, as across processes; the
    /// PSN moved on by `k`, so each run moves new bytes).
    pub(crate) fn pattern(&self, k: u32, from_b: bool) -> Pattern {
        match from_b {
            true => Pattern::of_qp(self.qb.qpn().value(), self.psn_b.wrapping_add(k)),
            false => Pattern::of_qp(self.qa.qpn().value(), self.psn_a.wrapping_add(k)),
        }
    }
}

/// Two devices, their CQs and the QP pairs of one test.
pub struct Setup {
    pub(crate) a: Dev,
    pub(crate) b: Dev,
    pub(crate) cq_a: CqSet,
    pub(crate) cq_b: CqSet,
    pub(crate) pairs: Vec<Pair>,
    pub(crate) slots: u32,
    /// SENDs completed per QP in earlier runs: the receive ring keeps
    /// turning across runs, so the next send slot continues from here.
    pub(crate) sends_before: std::cell::RefCell<Vec<u64>>,
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
        let cq_a = CqSet::new(&a.ctx, cfg.qps, per_qp, events).map_err(|e| anyhow!(e))?;
        let cq_b = CqSet::new(&b.ctx, cfg.qps, per_qp, events).map_err(|e| anyhow!(e))?;
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
        let line = |side: &str, qp: &Qp, psn: u32, mr: &Mr| {
            format!(
                " {side} address: QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#016x}",
                qp.qpn().value(),
                psn,
                mr.rkey().value(),
                mr.addr()
            )
        };
        let gid = |a: IpAddr| format!(" GID: {}", roce_verbs_api::gid::roce_v2_gid(a));
        vec![
            line("local", &p.qa, p.psn_a, &p.ma),
            gid(self.a.ctx.addr()),
            line("remote", &p.qb, p.psn_b, &p.mb),
            gid(self.b.ctx.addr()),
        ]
    }
}
