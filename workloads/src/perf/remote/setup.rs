//! The resources of one side of a cross-process run: the device, the TCP
//! connection of perftest's exchange, the buffers' geometry (perftest's
//! cycling of remote addresses), the QPs and their buffers, and connecting
//! them to the peer's.

use super::{Outcome, RemoteConfig, BAD_RKEY_XOR};
use crate::pattern::Pattern;
use crate::perf::loops::CqSet;
use crate::perf::TestKind;
use crate::perftest::{Negotiated, PerftestDest};
use roce_host::DeviceConfig;
use roce_verbs_api::gid::gid_to_addr;
use roce_verbs_api::{
    AccessFlags, AhAttr, Context, Device, Mr, PathMtu, Pd, Qp, QpAttr, QpState, QpType,
};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The device of `cfg`: a UDP device of our own at `--local` (its port
/// MTU set by `-m`, as in the one-process run), the configured device
/// `-d`, or the first configured one.
pub(super) fn open_device(cfg: &RemoteConfig) -> Result<Device, String> {
    let dc = match (&cfg.ib_dev, cfg.local) {
        (n, Some(addr)) => {
            let mut c = DeviceConfig::udp(n.as_deref().unwrap_or("roce0"), addr);
            if let Some(m) = PathMtu::from_bytes(cfg.mtu as usize) {
                c.mtu = m;
            }
            c
        }
        (Some(n), None) => DeviceConfig::find(n)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("IB device {n} not found"))?,
        (None, None) => DeviceConfig::load_all()
            .map_err(|e| e.to_string())?
            .into_iter()
            .next()
            .ok_or("no device (use -d NAME with ROCE_EMU_DEVICES, or --local IP)")?,
    };
    dc.open().map_err(|e| format!("couldn't open {}: {e}", dc.name))
}

/// Connect to the server's exchange, retrying for 10 s.
pub(super) fn connect_tcp(host: &str, port: u16) -> Result<TcpStream, String> {
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        for sa in &addrs {
            if let Ok(s) = TcpStream::connect_timeout(sa, Duration::from_secs(2)) {
                return Ok(s);
            }
        }
        if Instant::now() > until {
            return Err(format!("couldn't connect to {host}:{port}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The pattern of the buffer of the QP `d` (both sides know its QPN and PSN).
pub(super) fn pattern_of(d: &PerftestDest) -> Pattern {
    Pattern::of_qp(d.qpn, d.psn)
}

impl Res {
    /// Check the first `n` slots (at most all) of QP `q`'s buffer hold
    /// what the peer put there with a WRITE or that a READ fetched from it:
    /// facing roce-emu (`neg.remote_is_ours`) the peer's pattern; facing
    /// perftest (random bytes) no longer our own fill (a slot under 4 bytes
    /// cannot tell). `say(used, bad)` words the check.
    pub(super) fn check_peer_slots(
        &self,
        geo: &Geo,
        (rem, neg): (&[PerftestDest], &Negotiated),
        (q, n): (usize, u64),
        out: &mut Outcome,
        say: impl FnOnce(u64, u64) -> String,
    ) {
        let used = n.min(geo.slots);
        let mem = self.mrs[q].to_vec();
        let (theirs, mine) = (pattern_of(&rem[q]), pattern_of(&self.mine[q]));
        let bad = (0..used)
            .filter(|k| {
                let o = k * geo.stride;
                let slot = &mem[o as usize..(o + geo.size) as usize];
                if neg.remote_is_ours {
                    !theirs.matches(o, slot)
                } else {
                    geo.size >= 4 && mine.matches(o, slot)
                }
            })
            .count() as u64;
        out.check(bad == 0, say(used, bad));
    }
}

pub(super) fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Geometry of the buffers (perftest's cycling of remote addresses).
#[derive(Clone, Copy, Debug)]
pub(super) struct Geo {
    pub(super) size: u64,
    pub(super) stride: u64,
    pub(super) slots: u64,
    pub(super) span: u64,
    /// Atomic results: 8 bytes per outstanding operation.
    pub(super) results: u64,
    /// Receive buffers: `size` bytes per posted receive.
    rx_base: u64,
    rx_depth: u64,
    pub(super) buf_len: u64,
}

impl Geo {
    pub(super) fn new(cfg: &RemoteConfig, n: &Negotiated) -> Geo {
        let size = u64::from(cfg.size);
        let cl = u64::from(n.cache_line.max(1));
        let cycle = u64::from(n.cycle_buffer);
        let stride = size.div_ceil(cl) * cl;
        let slots = if size <= cycle / 2 { (cycle / stride).max(1) } else { 1 };
        // [0, span): target/source slots; then atomic results; then receives
        let span = size.max(cycle);
        let results = span;
        let rx_base = (results + u64::from(cfg.tx_depth) * 8).div_ceil(64) * 64;
        let rx_depth = u64::from(cfg.rx_depth);
        let rx =
            if matches!(cfg.test, TestKind::Send | TestKind::Lat) { rx_depth * size } else { 0 };
        Geo {
            size,
            stride,
            slots,
            span,
            results,
            rx_base,
            rx_depth,
            buf_len: (rx_base + rx).div_ceil(64) * 64,
        }
    }
    pub(super) fn off(&self, i: u64) -> u64 {
        (i % self.slots) * self.stride
    }
    pub(super) fn rx_off(&self, i: u64) -> u64 {
        self.rx_base + (i % self.rx_depth) * self.size
    }
}

/// The verbs objects of one side.
pub(super) struct Res {
    pub(super) ctx: Context,
    _pd: Pd,
    pub(super) cq: CqSet,
    pub(super) qps: Vec<Qp>,
    pub(super) mrs: Vec<Mr>,
    pub(super) mine: Vec<PerftestDest>,
    pub(super) sgid_index: u8,
}

fn access_for(test: TestKind) -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | match test {
            TestKind::Write => AccessFlags::REMOTE_WRITE,
            TestKind::Read => AccessFlags::REMOTE_READ,
            TestKind::Atomic => AccessFlags::REMOTE_ATOMIC,
            _ => AccessFlags::EMPTY,
        }
}

/// PD, CQ, and per QP a registered buffer filled with its pattern and a
/// QP in INIT; `mine` holds what the exchange sends the peer.
pub(super) fn setup(ctx: Context, cfg: &RemoteConfig, geo: &Geo) -> Result<Res, String> {
    let gid_index = match cfg.gid_index {
        Some(i) => i,
        None if ctx.query_gid(1).is_some() => 1,
        None => 0,
    };
    let gid = ctx.query_gid(gid_index).ok_or(format!("no GID at index {gid_index}"))?;
    let pd = ctx.alloc_pd().map_err(|e| format!("couldn't allocate PD: {e}"))?;
    let cqe = cfg.qps * (cfg.tx_depth + cfg.rx_depth) + 16;
    let cq = ctx.create_cq(cqe.min(32767)).map_err(|e| format!("couldn't create CQ: {e}"))?;
    let mut qps = Vec::new();
    let mut mrs = Vec::new();
    let mut mine = Vec::new();
    for _ in 0..cfg.qps {
        let mr = pd
            .reg_mr(geo.buf_len as usize, access_for(cfg.test))
            .map_err(|e| format!("couldn't register {} bytes: {e}", geo.buf_len))?;
        let qp = pd
            .qp_builder(&cq, &cq)
            .qp_type(QpType::Rc)
            .max_send_wr(cfg.tx_depth)
            .max_recv_wr(cfg.rx_depth)
            .max_send_sge(1)
            .max_recv_sge(1)
            .build()
            .map_err(|e| format!("couldn't create QP: {e}"))?;
        let qp_access = match cfg.test {
            TestKind::Send | TestKind::Lat => AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE,
            t => access_for(t),
        };
        qp.modify(
            &QpAttr::new().state(QpState::Init).pkey_index(0).port(1).access_flags(qp_access),
        )
        .map_err(|e| format!("failed to modify QP to INIT: {e}"))?;
        let d = PerftestDest {
            lid: 0,
            out_reads: 16,
            qpn: qp.qpn().value(),
            psn: rand_psn(),
            rkey: mr.rkey().value()
                ^ if cfg.bad_rkey && cfg.server.is_none() { BAD_RKEY_XOR } else { 0 },
            vaddr: mr.addr(),
            gid: gid.octets(),
            srqn: 0,
        };
        mr.write(0, &pattern_of(&d).bytes(0, geo.buf_len as usize)).map_err(|e| e.to_string())?;
        qps.push(qp);
        mrs.push(mr);
        mine.push(d);
    }
    let cq = CqSet::single(cq);
    Ok(Res { ctx, _pd: pd, cq, qps, mrs, mine, sgid_index: gid_index as u8 })
}

fn rand_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(7))
        .unwrap_or(1);
    (t.wrapping_mul(0x2c1b_3c6d) ^ std::process::id().rotate_left(11)) & 0xff_ffff
}

fn path_mtu(e: u8) -> PathMtu {
    match e {
        1 => PathMtu::Mtu256,
        2 => PathMtu::Mtu512,
        4 => PathMtu::Mtu2048,
        5 => PathMtu::Mtu4096,
        _ => PathMtu::Mtu1024,
    }
}

/// Take every QP to RTR and RTS against the peer's QP of the same index.
pub(super) fn connect(res: &Res, neg: &Negotiated, rem: &[PerftestDest]) -> Result<(), String> {
    for (i, (qp, r)) in res.qps.iter().zip(rem).enumerate() {
        let g = r.gid_addr();
        if (g.segments()[0] & 0xffc0) == 0xfe80 || g.is_unspecified() {
            return Err(format!(
                "peer's QP {i} GID {g} is link-local or zero: run it with -x 1 (its RoCEv2 IPv4 GID)"
            ));
        }
        let mut ah = AhAttr::new(gid_to_addr(g));
        ah.sgid_index = res.sgid_index;
        ah.hop_limit = 64;
        ah.port_num = 1;
        let rd = r.out_reads.clamp(1, 16) as u8;
        qp.modify(
            &QpAttr::new()
                .state(QpState::Rtr)
                .ah(ah)
                .mtu(path_mtu(neg.mtu_enum))
                .dest_qpn(r.qpn)
                .rq_psn(r.psn)
                .max_dest_rd_atomic(16)
                .min_rnr_timer(12),
        )
        .map_err(|e| format!("failed to modify QP {i} to RTR: {e}"))?;
        qp.modify(
            &QpAttr::new()
                .state(QpState::Rts)
                .timeout(14)
                .retry_cnt(7)
                .rnr_retry(7)
                .sq_psn(res.mine[i].psn)
                .max_rd_atomic(rd),
        )
        .map_err(|e| format!("failed to modify QP {i} to RTS: {e}"))?;
    }
    Ok(())
}
