//! `roce perf` across processes: one side of a perftest run, talking
//! perftest's out-of-band TCP exchange ([`roce_workloads::perftest`]), so the
//! other side can be `ib_write_bw`, `ib_read_bw`, `ib_send_bw`,
//! `ib_atomic_bw`, `ib_send_lat` (perftest 4.5-0.17) on a real or soft
//! RoCE device, or another `roce perf`.
//!
//! * server: `roce perf write --server` (or with `-d DEV`, `--local IP`,
//!   `-p PORT` and no address): listens on TCP `-p` (18515);
//! * client: `roce perf write 192.168.77.2 -s 4096 -n 100`.
//!
//! The work is perftest's: the client is the requester (WRITE, READ,
//! atomics, SEND) and the server's memory is the target; a `lat` run is a
//! SEND ping-pong. Remote addresses cycle over the negotiated cycle buffer
//! in cache-line strides as perftest's do.
//!
//! Data checks. Every buffer is filled with a pattern derived from its
//! QP's number and PSN (both sent in the exchange). Between two `roce perf`
//! processes (recognised by the mark after the version string) each side
//! checks every byte the other moved: the WRITE target, what READ fetched,
//! every received SEND, and every atomic's result and final value. Facing
//! perftest, which moves random bytes and checks nothing, we check what
//! can be checked from one side: written/fetched slots changed from our
//! fill, every SEND's length, that atomics fetched an unbroken chain of
//! values (+1 per FETCH_AND_ADD, compare-and-swap chains that always hit),
//! that the sum of perftest's FETCH_AND_ADDs on our memory equals its
//! number of operations, and that memory perftest only reads or
//! compare-and-swaps with 0 stays unchanged.

use super::args::{LatKind, PerfArgs, TestKind};
use roce_host::DeviceConfig;
use roce_verbs_api::gid::gid_to_addr;
use roce_verbs_api::{
    AccessFlags, AhAttr, Budget, Context, Cq, Device, Mr, PathMtu, Pd, Qp, QpAttr, QpState, QpType,
    RKey, RecvWr, SendWr, WcStatus, WorkCompletion, WrOpcode,
};
use roce_workloads::perftest::{BwReport, Flow, Negotiated, Oob, PerftestDest, Role};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Default TCP port (perftest's).
pub const DEFAULT_PORT: u16 = 18515;
/// Our cycle buffer (the page size perftest sends) and cache line.
const CYCLE_BUFFER: u32 = 4096;
const CACHE_LINE: u32 = 64;
/// What our requester XORs into the R_Key with `--bad-rkey`.
pub const BAD_RKEY_XOR: u32 = 0x00a5_5a00;
/// Give up when no completion arrived for this long.
const STALL: Duration = Duration::from_secs(30);

/// Resolve the free operands after the test name: an operation after
/// `lat` (`send|write|read`) and/or the server's address. Returns the
/// arguments with `lat_op` and `server` set, or the exit code of a usage
/// error.
pub fn resolve_operands(a: &PerfArgs) -> Result<PerfArgs, ExitCode> {
    let mut out = a.clone();
    for op in &a.operands {
        let kind = match op.as_str() {
            "send" => Some(LatKind::Send),
            "write" => Some(LatKind::Write),
            "read" => Some(LatKind::Read),
            _ => None,
        };
        match kind {
            Some(k) if out.lat_op.is_none() && out.server.is_none() => out.lat_op = Some(k),
            _ if out.server.is_none() => out.server = Some(op.clone()),
            _ => {
                eprintln!("roce perf: unexpected operand {op:?}");
                return Err(ExitCode::from(2));
            }
        }
    }
    Ok(out)
}

/// Whether the arguments ask for the cross-process mode.
pub fn is_remote(a: &PerfArgs) -> bool {
    a.server.is_some() || a.listen || a.ib_dev.is_some() || a.local.is_some() || a.port.is_some()
}

/// The validated cross-process configuration.
#[derive(Clone, Debug)]
struct Cfg {
    test: TestKind,
    size: u32,
    iters: u64,
    duration: Option<Duration>,
    qps: u32,
    tx_depth: u32,
    rx_depth: u32,
    mtu_enum: u8,
    port: u16,
    gid_index: Option<u32>,
    cas: bool,
    bad_rkey: bool,
    imm: bool,
    recv_delay: Duration,
    server: Option<String>,
    /// `--report_gbits`: bandwidth columns in Gb/s instead of MB/s.
    gbits: bool,
}

fn validate(a: &PerfArgs) -> Result<Cfg, String> {
    let test = a.test;
    if test == TestKind::Lat && a.lat_op.unwrap_or(LatKind::Send) != LatKind::Send {
        return Err("across processes, lat is the SEND ping-pong (ib_send_lat) only".into());
    }
    let size = match (test, a.size) {
        (TestKind::Atomic, Some(s)) if s != 8 => {
            return Err(format!("atomic messages are 8 bytes, not -s {s}"))
        }
        (TestKind::Atomic, _) => 8,
        (_, Some(0)) => return Err("-s must be at least 1".into()),
        (_, Some(s)) if s > 8 << 20 => return Err(format!("-s {s} is larger than 8 MiB")),
        (_, Some(s)) => s,
        (TestKind::Lat, None) => 2,
        (_, None) => 65536,
    };
    let mtu_enum = match a.mtu {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        4096 => 5,
        m => return Err(format!("--mtu {m} is not one of 256, 512, 1024, 2048, 4096")),
    };
    if a.qps == 0 || a.qps > 64 {
        return Err(format!("-q {} must be 1..=64", a.qps));
    }
    if test == TestKind::Lat && a.qps != 1 {
        return Err("lat uses one QP (-q 1)".into());
    }
    if a.tx_depth == 0 || a.tx_depth > 1024 {
        return Err(format!("--tx-depth {} must be 1..=1024", a.tx_depth));
    }
    let rx_depth = a.rx_depth.unwrap_or(512);
    if rx_depth == 0 || rx_depth > 4096 {
        return Err(format!("--rx-depth {rx_depth} must be 1..=4096"));
    }
    let duration = match a.duration {
        Some(_) if matches!(test, TestKind::Lat | TestKind::Send) => {
            return Err("-D: across processes, send and lat run a number of iterations (-n)".into())
        }
        Some(d) if !(d > 0.0 && d <= 3600.0) => return Err(format!("-D {d} must be in (0, 3600]")),
        Some(d) => Some(Duration::from_secs_f64(d)),
        None => None,
    };
    let iters = a.iters.unwrap_or(if test == TestKind::Lat { 1000 } else { 5000 });
    if iters == 0 || iters > 100_000_000 {
        return Err(format!("-n {iters} must be 1..=100000000"));
    }
    let cas = match a.atomic_type.as_deref() {
        None | Some("FETCH_AND_ADD") => false,
        Some("CMP_AND_SWAP") => true,
        Some(o) => return Err(format!("-A {o}: FETCH_AND_ADD or CMP_AND_SWAP")),
    };
    if a.atomic_type.is_some() && test != TestKind::Atomic {
        return Err("-A is for the atomic test".into());
    }
    if a.imm && (test != TestKind::Write || duration.is_some() || iters > 16384) {
        return Err("--imm is for the write test with -n at most 16384 (no -D)".into());
    }
    // WRITE with immediate: one receive per WRITE, all posted before the run
    let rx_depth = if a.imm { iters as u32 } else { rx_depth };
    Ok(Cfg {
        test,
        size,
        iters,
        duration,
        qps: a.qps,
        tx_depth: a.tx_depth,
        rx_depth,
        mtu_enum,
        port: a.port.unwrap_or(DEFAULT_PORT),
        gid_index: a.gid_index,
        cas,
        bad_rkey: a.bad_rkey,
        imm: a.imm,
        recv_delay: Duration::from_millis(a.recv_delay.unwrap_or(0).min(10_000)),
        server: a.server.clone(),
        gbits: a.report_gbits,
    })
}

/// Run the cross-process mode; returns the exit status (0 ok, 1 test
/// failure, 2 usage).
pub fn run(a: &PerfArgs) -> ExitCode {
    let cfg = match validate(a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("roce perf: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(spec) = &a.faults {
        // the transports read it when the device is opened
        std::env::set_var("ROCE_EMU_FAULTS", spec);
    }
    match run_cfg(&cfg, a) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("roce perf: {e}");
            ExitCode::from(1)
        }
    }
}

fn open_device(a: &PerfArgs) -> Result<Device, String> {
    let cfg = match (&a.ib_dev, a.local) {
        (n, Some(addr)) => {
            // a device of our own: -m sets its port's MTU too, as in the
            // one-process run (a configured device keeps its own)
            let mut c = DeviceConfig::udp(n.as_deref().unwrap_or("roce0"), addr);
            if let Some(m) = PathMtu::from_bytes(a.mtu as usize) {
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
    cfg.open().map_err(|e| format!("couldn't open {}: {e}", cfg.name))
}

fn connect_tcp(host: &str, port: u16) -> Result<TcpStream, String> {
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

/// A deterministic fill byte for a buffer owned by the QP `d`.
pub fn pattern(d: &PerftestDest, off: u64) -> u8 {
    let seed = d.psn.wrapping_mul(0x9e37_79b1) ^ d.qpn.rotate_left(13);
    let x = (off as u32).wrapping_mul(0x85eb_ca6b) ^ seed;
    let x = x ^ (x >> 15);
    (x ^ (x >> 7) ^ (x >> 23)) as u8
}

fn fill(d: &PerftestDest, len: usize) -> Vec<u8> {
    (0..len as u64).map(|o| pattern(d, o)).collect()
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Geometry of the buffers (perftest's cycling of remote addresses).
#[derive(Clone, Copy, Debug)]
struct Geo {
    size: u64,
    stride: u64,
    slots: u64,
    span: u64,
    /// Atomic results: 8 bytes per outstanding operation.
    results: u64,
    /// Receive buffers: `size` bytes per posted receive.
    rx_base: u64,
    rx_depth: u64,
    buf_len: u64,
}

impl Geo {
    fn new(cfg: &Cfg, n: &Negotiated) -> Geo {
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
    fn off(&self, i: u64) -> u64 {
        (i % self.slots) * self.stride
    }
    fn rx_off(&self, i: u64) -> u64 {
        self.rx_base + (i % self.rx_depth) * self.size
    }
}

struct Res {
    ctx: Context,
    _pd: Pd,
    cq: Cq,
    qps: Vec<Qp>,
    mrs: Vec<Mr>,
    mine: Vec<PerftestDest>,
    sgid_index: u8,
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

fn setup(ctx: Context, cfg: &Cfg, geo: &Geo) -> Result<Res, String> {
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
        mr.write(0, &fill(&d, geo.buf_len as usize)).map_err(|e| e.to_string())?;
        qps.push(qp);
        mrs.push(mr);
        mine.push(d);
    }
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

fn connect(res: &Res, neg: &Negotiated, rem: &[PerftestDest]) -> Result<(), String> {
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

/// Poll up to `max` completions, waiting at most `wait` for the first.
fn poll(ctx: &Context, cq: &Cq, max: usize, wait: Duration) -> Result<Vec<WorkCompletion>, String> {
    let mut got = Vec::new();
    let mut err = None;
    ctx.progress(
        || match cq.poll(max) {
            Ok(v) => {
                got = v;
                !got.is_empty()
            }
            Err(e) => {
                err = Some(e);
                true
            }
        },
        Budget { events: 1_000_000, wall: wait },
    );
    match err {
        Some(e) => Err(format!("poll CQ failed: {e}")),
        None => Ok(got),
    }
}

fn wc_error(wc: &WorkCompletion) -> String {
    format!(
        "completion with error: status {} ({}) opcode {:?} on QP 0x{:06x}, wr_id 0x{:x}",
        wc.status.code(),
        wc.status,
        wc.opcode,
        wc.qp_num,
        wc.wr_id
    )
}

/// What a run measured and checked.
struct Outcome {
    ops: Vec<u64>,
    elapsed: Duration,
    peak_mbps: f64,
    checks: Vec<(bool, String)>,
    error: Option<String>,
    rtt_us: Vec<f64>,
}

impl Outcome {
    fn new(qps: usize) -> Outcome {
        Outcome {
            ops: vec![0; qps],
            elapsed: Duration::ZERO,
            peak_mbps: 0.0,
            checks: Vec::new(),
            error: None,
            rtt_us: Vec::new(),
        }
    }
    fn check(&mut self, ok: bool, what: String) {
        self.checks.push((ok, what));
    }
}

fn run_cfg(cfg: &Cfg, a: &PerfArgs) -> Result<bool, String> {
    let dev = open_device(a)?;
    let ctx = dev.open();
    let (stream, role) = match &cfg.server {
        Some(host) => (connect_tcp(host, cfg.port)?, Role::Client),
        None => {
            let l = TcpListener::bind(("0.0.0.0", cfg.port))
                .map_err(|e| format!("couldn't listen on TCP port {}: {e}", cfg.port))?;
            println!("\n************************************");
            println!("* Waiting for client to connect... *");
            println!("************************************");
            let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
            (s, Role::Server)
        }
    };
    let slack = cfg.duration.map(|d| d * 2).unwrap_or_default();
    let _ = stream.set_read_timeout(Some(Duration::from_secs(300) + slack));
    let _ = stream.set_nodelay(true);
    let mut oob = Oob::new(stream, role);
    let neg = oob.prologue(CYCLE_BUFFER, CACHE_LINE, cfg.mtu_enum).map_err(|e| e.to_string())?;
    let geo = Geo::new(cfg, &neg);
    let res = setup(ctx, cfg, &geo)?;
    let flow = match cfg.test {
        TestKind::Send | TestKind::Lat => Flow::Send,
        _ => Flow::Bw,
    };
    print_header(cfg, &neg, &dev, &res);
    let rem =
        oob.connect_phase(flow, &res.mine, &mut |rem: &[PerftestDest]| connect(&res, &neg, rem))?;
    for (i, (m, r)) in res.mine.iter().zip(&rem).enumerate() {
        println!(
            " local address: LID {:#06x} QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x}  GID {}",
            m.lid,
            m.qpn,
            m.psn,
            m.rkey,
            m.vaddr,
            m.gid_addr()
        );
        println!(
            " remote address: LID {:#06x} QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x}  GID {}  (QP {i})",
            r.lid,
            r.qpn,
            r.psn,
            r.rkey,
            r.vaddr,
            r.gid_addr()
        );
    }
    println!(
        " peer: {} (perftest version {}), cycle buffer {} B, cache line {} B, MTU {}",
        if neg.remote_is_ours { "roce perf" } else { "perftest" },
        neg.remote_version,
        neg.cycle_buffer,
        neg.cache_line,
        neg.mtu_bytes()
    );
    let e = |e: roce_workloads::perftest::OobError| e.to_string();
    let mut out = Outcome::new(res.qps.len());
    let client = role == Role::Client;
    // a failure from here on still prints what happened and the counters
    let phase = (|| -> Result<(), String> {
        match flow {
            Flow::Bw => {
                if cfg.imm && !neg.remote_is_ours {
                    return Err("--imm: perftest 4.5 has no WRITE_WITH_IMM test; run roce perf on both sides".into());
                }
                if cfg.imm && !client {
                    for (q, qp) in res.qps.iter().enumerate() {
                        for i in 0..cfg.iters {
                            qp.post_recv(RecvWr::new(
                                ((q as u64) << 40) | i,
                                res.mrs[q].addr(),
                                0,
                                res.mrs[q].lkey(),
                            ))
                            .map_err(|e| format!("couldn't post receive: {e}"))?;
                        }
                    }
                }
                oob.hand_shake(&res.mine[0]).map_err(e)?;
                if client {
                    run_bw_client(cfg, &geo, &res, &rem, &neg, &mut out);
                    oob.hand_shake(&res.mine[0]).map_err(e)?;
                    let report = my_report(cfg, &out);
                    oob.xchg_bw_report(&report).map_err(e)?;
                } else {
                    println!(" (server: the client runs the test; waiting for its end)");
                    let start = Instant::now();
                    oob.hand_shake(&res.mine[0]).map_err(e)?;
                    out.elapsed = start.elapsed();
                    let theirs = oob.xchg_bw_report(&my_report(cfg, &out)).map_err(e)?;
                    println!(
                        " peer reported: {} B x {} iterations, BW average {:.2} MB/sec, {:.6} Mpps",
                        theirs.size, theirs.iters, theirs.bw_avg, theirs.msg_rate
                    );
                    if cfg.imm {
                        check_immediates(cfg, &res, theirs.iters, &mut out);
                    }
                    check_server_memory(cfg, &geo, &res, &rem, &neg, theirs.iters, &mut out);
                }
                oob.close(&res.mine[0]).map_err(e)?;
            }
            Flow::Send => {
                // receives first (perftest's ctx_set_recv_wqes), then the sync
                if !client || cfg.test == TestKind::Lat {
                    post_initial_recvs(cfg, &geo, &res)?;
                }
                oob.hand_shake(&res.mine[0]).map_err(e)?;
                match (cfg.test, client) {
                    (TestKind::Lat, _) => run_lat(cfg, &geo, &res, &rem, &neg, client, &mut out),
                    (_, true) => run_send_client(cfg, &geo, &res, &mut out),
                    (_, false) => run_send_server(cfg, &geo, &res, &rem, &neg, &mut out),
                }
                oob.close(&res.mine[0]).map_err(e)?;
            }
        }
        Ok(())
    })();
    if let Err(m) = phase {
        out.error = Some(match out.error.take() {
            Some(first) => format!("{first}; then {m}"),
            None => m,
        });
    }
    if let Some(path) = &a.oob_log {
        let mut s = String::new();
        for (d, m) in &oob.transcript {
            s += &format!("{:?} {} {}\n", d, m.len(), hex(m));
        }
        std::fs::write(path, s).map_err(|e| format!("--oob-log {}: {e}", path.display()))?;
    }
    print_results(cfg, client, &out, &geo);
    let c = res.ctx.counters();
    let nz: Vec<String> =
        c.iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k}={v}")).collect();
    println!(" counters: {}", nz.join(" "));
    let mut ok = true;
    for (good, what) in &out.checks {
        println!(" data check: {} ({what})", if *good { "OK" } else { "FAILED" });
        ok &= *good;
    }
    if let Some(err) = &out.error {
        println!(" {err}");
        ok = false;
    }
    let ops: Vec<String> = out.ops.iter().map(|o| o.to_string()).collect();
    println!(
        " result: role={} peer={} ops={} checks_ok={} checks_failed={} error={}",
        if client { "client" } else { "server" },
        if neg.remote_is_ours { "roce" } else { "perftest" },
        ops.join(","),
        out.checks.iter().filter(|c| c.0).count(),
        out.checks.iter().filter(|c| !c.0).count(),
        if out.error.is_some() { "yes" } else { "no" }
    );
    Ok(ok)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn my_report(cfg: &Cfg, out: &Outcome) -> BwReport {
    let total: u64 = out.ops.iter().sum();
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    let bytes = total as f64 * f64::from(cfg.size);
    BwReport {
        size: u64::from(cfg.size),
        iters: total,
        bw_peak: out.peak_mbps,
        bw_avg: bytes / secs / 1_048_576.0,
        msg_rate: total as f64 / secs / 1e6,
    }
}

fn print_header(cfg: &Cfg, neg: &Negotiated, dev: &Device, res: &Res) {
    let title = match (cfg.test, cfg.cas) {
        (TestKind::Write, _) => "RDMA_Write BW Test",
        (TestKind::Read, _) => "RDMA_Read BW Test",
        (TestKind::Send, _) => "Send BW Test",
        (TestKind::Atomic, false) => "Atomic FETCH_AND_ADD BW Test",
        (TestKind::Atomic, true) => "Atomic CMP_AND_SWAP BW Test",
        (TestKind::Lat, _) => "Send Latency Test",
    };
    let line =
        "---------------------------------------------------------------------------------------";
    println!("{line}\n                    {title}");
    println!(" Dual-port       : OFF\t\tDevice         : {}", dev.name());
    println!(" Number of qps   : {}\t\tTransport type : IB", cfg.qps);
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    println!(" TX depth        : {}", cfg.tx_depth);
    if matches!(cfg.test, TestKind::Send | TestKind::Lat) {
        println!(" RX depth        : {}", cfg.rx_depth);
    }
    println!(" Mtu             : {}[B]", neg.mtu_bytes());
    println!(" Link type       : Ethernet");
    println!(" GID index       : {}", res.sgid_index);
    println!(" Max inline data : 0[B]");
    println!(" rdma_cm QPs     : OFF");
    println!(" Data ex. method : Ethernet");
    println!("{line}");
}

fn print_results(cfg: &Cfg, client: bool, out: &Outcome, geo: &Geo) {
    let line =
        "---------------------------------------------------------------------------------------";
    let total: u64 = out.ops.iter().sum();
    if cfg.test == TestKind::Lat {
        let mut s = out.rtt_us.clone();
        s.sort_by(|a, b| a.total_cmp(b));
        println!(
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
        );
        if s.is_empty() {
            println!(" {:<7} {:<10}  (no samples on this side)", cfg.size, out.ops[0]);
        } else {
            let avg = s.iter().sum::<f64>() / s.len() as f64;
            println!(
                " {:<7} {:<10}  {:<7.2}        {:<7.2}      {:<7.2}          {:<7.2}",
                cfg.size,
                s.len(),
                s[0] / 2.0,
                s[s.len() - 1] / 2.0,
                s[s.len() / 2] / 2.0,
                avg / 2.0
            );
        }
        println!("{line}");
        return;
    }
    if !client {
        println!(" (server side) {} operations per QP counted here: {:?}", geo.size, out.ops);
        println!("{line}");
        return;
    }
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    let mbps = total as f64 * geo.size as f64 / secs / 1_048_576.0;
    // perftest's units: MB/sec = 2^20 bytes/s; with --report_gbits, Gb/sec = 10^9 bits/s
    let (unit, scale) =
        if cfg.gbits { ("Gb/sec", 1_048_576.0 * 8.0 / 1e9) } else { ("MB/sec", 1.0) };
    println!(" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]");
    println!(
        " {:<10} {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        cfg.size,
        out.ops.first().copied().unwrap_or(0),
        out.peak_mbps.max(mbps) * scale,
        mbps * scale,
        total as f64 / secs / 1e6
    );
    println!("{line}");
}

/// The client of the WRITE/READ/atomic bandwidth tests.
fn run_bw_client(
    cfg: &Cfg,
    geo: &Geo,
    res: &Res,
    rem: &[PerftestDest],
    neg: &Negotiated,
    out: &mut Outcome,
) {
    let n = res.qps.len();
    let depth = match cfg.test {
        TestKind::Atomic => u64::from(cfg.tx_depth).min(geo.slots).min(16),
        _ => u64::from(cfg.tx_depth),
    };
    let mut posted = vec![0u64; n];
    let mut done = vec![0u64; n];
    let mut target = vec![if cfg.duration.is_some() { u64::MAX } else { cfg.iters }; n];
    // atomics: per QP and slot, the value the target is known to hold
    let mut known: Vec<Vec<Option<u64>>> = vec![vec![None; geo.slots as usize]; n];
    let mut chain_ok = vec![true; n];
    let mut chain_msg = vec![String::new(); n];
    let start = Instant::now();
    let end = cfg.duration.map(|d| start + d);
    let mut last_progress = Instant::now();
    let mut window = (Instant::now(), 0u64);
    loop {
        if let Some(e) = end {
            if Instant::now() >= e && target[0] == u64::MAX {
                // the time is up: every QP finishes the same number of operations
                let m = *posted.iter().max().unwrap_or(&0);
                target.iter_mut().for_each(|t| *t = m.max(1));
            }
        }
        for q in 0..n {
            while posted[q] < target[q] && posted[q] - done[q] < depth {
                let i = posted[q];
                let off = geo.off(i);
                let r = &rem[q];
                let rkey = RKey::new(r.rkey ^ if cfg.bad_rkey { BAD_RKEY_XOR } else { 0 });
                let mr = &res.mrs[q];
                let wr_id = ((q as u64) << 40) | i;
                let wr = match cfg.test {
                    TestKind::Write if cfg.imm => SendWr::new(wr_id, WrOpcode::RdmaWriteWithImm)
                        .sge(mr.addr() + off, cfg.size, mr.lkey())
                        .remote(r.vaddr + off, rkey)
                        .with_imm(i as u32),
                    TestKind::Write => SendWr::new(wr_id, WrOpcode::RdmaWrite)
                        .sge(mr.addr() + off, cfg.size, mr.lkey())
                        .remote(r.vaddr + off, rkey),
                    TestKind::Read => SendWr::new(wr_id, WrOpcode::RdmaRead)
                        .sge(mr.addr() + off, cfg.size, mr.lkey())
                        .remote(r.vaddr + off, rkey),
                    _ => {
                        let res_off = geo.results + (i % depth) * 8;
                        let slot = (i % geo.slots) as usize;
                        let op = if cfg.cas {
                            WrOpcode::AtomicCmpAndSwp
                        } else {
                            WrOpcode::AtomicFetchAndAdd
                        };
                        let mut wr = SendWr::new(wr_id, op)
                            .sge(mr.addr() + res_off, 8, mr.lkey())
                            .remote(r.vaddr + off, rkey);
                        if cfg.cas {
                            match known[q][slot] {
                                Some(v) => {
                                    wr.compare_add = v;
                                    wr.swap = v.wrapping_add(1);
                                }
                                None => {
                                    wr.compare_add = 0;
                                    wr.swap = 0;
                                }
                            }
                        } else {
                            wr.compare_add = 1;
                        }
                        wr
                    }
                };
                if let Err(e) = res.qps[q].post_send(wr) {
                    out.error = Some(format!("post_send on QP {q}: {e}"));
                    out.elapsed = start.elapsed();
                    out.ops = done;
                    return;
                }
                posted[q] += 1;
            }
        }
        if (0..n).all(|q| done[q] >= target[q]) {
            break;
        }
        let wcs = match poll(&res.ctx, &res.cq, 64, Duration::from_millis(200)) {
            Ok(w) => w,
            Err(e) => {
                out.error = Some(e);
                break;
            }
        };
        if wcs.is_empty() {
            if last_progress.elapsed() > STALL {
                out.error =
                    Some(format!("no completion for {} s (done {done:?})", STALL.as_secs()));
                break;
            }
            continue;
        }
        last_progress = Instant::now();
        let mut failed = false;
        for wc in wcs {
            if wc.status != WcStatus::Success {
                out.error = Some(wc_error(&wc));
                failed = true;
                break;
            }
            let q = (wc.wr_id >> 40) as usize;
            let i = wc.wr_id & ((1 << 40) - 1);
            if q >= n || i != done[q] {
                out.error = Some(format!("completion out of order: QP {q} op {i}"));
                failed = true;
                break;
            }
            if cfg.test == TestKind::Atomic {
                let res_off = geo.results + (i % depth) * 8;
                let slot = (i % geo.slots) as usize;
                let got = res.mrs[q].read_u64(res_off).unwrap_or(0);
                let expect = known[q][slot];
                let fine = match (cfg.cas, expect) {
                    (_, None) => true,
                    (_, Some(v)) => got == v,
                };
                if !fine && chain_ok[q] {
                    chain_ok[q] = false;
                    chain_msg[q] = format!(
                        "QP {q} op {i} slot {slot}: fetched {got:#x}, expected {:#x}",
                        expect.unwrap_or(0)
                    );
                }
                known[q][slot] = Some(if cfg.cas {
                    if expect.is_none() {
                        got
                    } else {
                        got.wrapping_add(1)
                    }
                } else {
                    got.wrapping_add(1)
                });
            }
            done[q] += 1;
            window.1 += 1;
        }
        if failed {
            break;
        }
        let we = window.0.elapsed();
        if we >= Duration::from_millis(100) {
            let mbps = window.1 as f64 * geo.size as f64 / we.as_secs_f64() / 1_048_576.0;
            out.peak_mbps = out.peak_mbps.max(mbps);
            window = (Instant::now(), 0);
        }
    }
    out.elapsed = start.elapsed();
    out.ops = done.clone();
    if out.error.is_some() {
        return;
    }
    // data checks
    for q in 0..n {
        let mem = res.mrs[q].to_vec();
        let used = done[q].min(geo.slots);
        match cfg.test {
            TestKind::Read => {
                let mut bad = 0u64;
                let mut unchanged = 0u64;
                for k in 0..used {
                    let o = (k * geo.stride) as usize;
                    let got = &mem[o..o + geo.size as usize];
                    if neg.remote_is_ours {
                        if (0..geo.size).any(|j| got[j as usize] != pattern(&rem[q], o as u64 + j))
                        {
                            bad += 1;
                        }
                    } else if (0..geo.size)
                        .all(|j| got[j as usize] == pattern(&res.mine[q], o as u64 + j))
                    {
                        unchanged += 1;
                    }
                }
                if neg.remote_is_ours {
                    out.check(bad == 0, format!("QP {q}: {used} READ slots of {} B equal the peer's pattern ({bad} differ)", geo.size));
                } else {
                    out.check(unchanged == 0 || geo.size < 4, format!("QP {q}: {used} READ slots of {} B were filled from the peer ({unchanged} still hold our own fill)", geo.size));
                }
            }
            TestKind::Atomic => {
                let what = if cfg.cas {
                    "CMP_AND_SWAP chains (each hit, +1)"
                } else {
                    "FETCH_AND_ADD results (+1 per op)"
                };
                out.check(
                    chain_ok[q],
                    format!(
                        "QP {q}: {} ops, {what} per slot {}",
                        done[q],
                        if chain_ok[q] { "unbroken".to_string() } else { chain_msg[q].clone() }
                    ),
                );
            }
            _ => {
                // WRITE: the source is untouched
                let ok = (0..used).all(|k| {
                    let o = k * geo.stride;
                    (0..geo.size).all(|j| mem[(o + j) as usize] == pattern(&res.mine[q], o + j))
                });
                out.check(
                    ok,
                    format!(
                        "QP {q}: {} WRITEs of {} B sent from {used} slots of our pattern",
                        done[q], geo.size
                    ),
                );
            }
        }
    }
}

/// The server of the WRITE/READ/atomic tests, after the client's end:
/// check what the client did to our memory.
fn check_server_memory(
    cfg: &Cfg,
    geo: &Geo,
    res: &Res,
    rem: &[PerftestDest],
    neg: &Negotiated,
    reported_iters: u64,
    out: &mut Outcome,
) {
    // perftest reports the total over all QPs; every QP did the same number
    let iters = reported_iters / res.mrs.len() as u64;
    for (q, mr) in res.mrs.iter().enumerate() {
        let mem = mr.to_vec();
        let mine = &res.mine[q];
        match cfg.test {
            TestKind::Write => {
                let used = iters.min(geo.slots);
                let mut bad = 0u64;
                for k in 0..used {
                    let o = k * geo.stride;
                    let slot = &mem[o as usize..(o + geo.size) as usize];
                    let wrong = if neg.remote_is_ours {
                        (0..geo.size).any(|j| slot[j as usize] != pattern(&rem[q], o + j))
                    } else {
                        geo.size >= 4
                            && (0..geo.size).all(|j| slot[j as usize] == pattern(mine, o + j))
                    };
                    bad += u64::from(wrong);
                }
                out.ops[q] = iters;
                let what = if neg.remote_is_ours {
                    "equal the writer's pattern"
                } else {
                    "were overwritten (perftest's random bytes)"
                };
                out.check(
                    bad == 0,
                    format!("QP {q}: {used} written slots of {} B {what} ({bad} not)", geo.size),
                );
            }
            TestKind::Read => {
                let same = (0..geo.buf_len).all(|o| mem[o as usize] == pattern(mine, o));
                out.ops[q] = iters;
                out.check(same, format!("QP {q}: memory the peer READ is unchanged"));
            }
            TestKind::Atomic => {
                // per 64-byte slot: how many operations hit it
                let mut sum: i128 = 0;
                let mut misplaced = 0u64;
                let mut wrong_slots = 0u64;
                for w in 0..(geo.span / 8) {
                    let o = (w * 8) as usize;
                    let init = u64::from_le_bytes(
                        fill(mine, o + 8)[o..o + 8].try_into().unwrap_or([0; 8]),
                    );
                    let now = u64_at(&mem, o);
                    let delta = now.wrapping_sub(init) as i64 as i128;
                    if delta != 0 && (w * 8) % geo.stride != 0 {
                        misplaced += 1;
                    }
                    sum += delta;
                    if neg.remote_is_ours && (w * 8) % geo.stride == 0 {
                        let k = (w * 8) / geo.stride;
                        if k < geo.slots {
                            let ops_k = if iters > k { (iters - k).div_ceil(geo.slots) } else { 0 };
                            let expect = if cfg.cas { ops_k.saturating_sub(1) } else { ops_k };
                            wrong_slots += u64::from(delta != expect as i128);
                        }
                    }
                }
                out.ops[q] = iters;
                if neg.remote_is_ours {
                    out.check(misplaced == 0 && wrong_slots == 0, format!("QP {q}: {iters} atomics: every slot holds its initial value + its operations ({wrong_slots} slots wrong, {misplaced} words hit off-slot)"));
                } else if cfg.cas {
                    out.check(sum == 0 && misplaced == 0, format!("QP {q}: {iters} CMP_AND_SWAP(0 -> 0) left our memory unchanged (sum of changes {sum})"));
                } else {
                    out.check(sum == i128::from(iters) && misplaced == 0, format!("QP {q}: {iters} FETCH_AND_ADD(1): our memory grew by {sum} in total, at 64-byte slots ({misplaced} off-slot words)"));
                }
            }
            _ => {}
        }
    }
}

/// The server of WRITE with immediate: one receive completion per WRITE,
/// in order, carrying the WRITE's index as its immediate.
fn check_immediates(cfg: &Cfg, res: &Res, reported_iters: u64, out: &mut Outcome) {
    let n = res.qps.len();
    let want = reported_iters / n as u64;
    let mut got = vec![0u64; n];
    let mut bad = 0u64;
    let mut last = Instant::now();
    while got.iter().any(|&g| g < want) && last.elapsed() < Duration::from_secs(5) {
        match poll(&res.ctx, &res.cq, 64, Duration::from_millis(100)) {
            Ok(wcs) => {
                if !wcs.is_empty() {
                    last = Instant::now();
                }
                for wc in wcs {
                    let q = ((wc.wr_id >> 40) as usize).min(n - 1);
                    let ok = wc.status == WcStatus::Success
                        && wc.opcode == roce_verbs_api::WcOpcode::RecvRdmaWithImm
                        && wc.imm == Some(got[q] as u32)
                        && wc.byte_len == cfg.size;
                    bad += u64::from(!ok);
                    got[q] += 1;
                }
            }
            Err(e) => {
                out.error = Some(e);
                return;
            }
        }
    }
    let total: u64 = got.iter().sum();
    out.check(
        bad == 0 && got.iter().all(|&g| g == want),
        format!("{total} WRITE_WITH_IMM receive completions, immediates 0..{want} in order per QP ({bad} wrong)"),
    );
}

fn post_initial_recvs(cfg: &Cfg, geo: &Geo, res: &Res) -> Result<(), String> {
    for (q, qp) in res.qps.iter().enumerate() {
        let mr = &res.mrs[q];
        for i in 0..u64::from(cfg.rx_depth) {
            let o = geo.rx_off(i);
            qp.post_recv(RecvWr::new(((q as u64) << 40) | i, mr.addr() + o, cfg.size, mr.lkey()))
                .map_err(|e| format!("couldn't post receive: {e}"))?;
        }
    }
    Ok(())
}

fn run_send_client(cfg: &Cfg, geo: &Geo, res: &Res, out: &mut Outcome) {
    let n = res.qps.len();
    let depth = u64::from(cfg.tx_depth);
    let mut posted = vec![0u64; n];
    let mut done = vec![0u64; n];
    let start = Instant::now();
    let mut last = Instant::now();
    'outer: loop {
        for q in 0..n {
            while posted[q] < cfg.iters && posted[q] - done[q] < depth {
                let i = posted[q];
                let mr = &res.mrs[q];
                let wr = SendWr::new(((q as u64) << 40) | i, WrOpcode::Send).sge(
                    mr.addr() + geo.off(i),
                    cfg.size,
                    mr.lkey(),
                );
                if let Err(e) = res.qps[q].post_send(wr) {
                    out.error = Some(format!("post_send: {e}"));
                    break 'outer;
                }
                posted[q] += 1;
            }
        }
        if done.iter().all(|&d| d >= cfg.iters) {
            break;
        }
        match poll(&res.ctx, &res.cq, 64, Duration::from_millis(200)) {
            Ok(wcs) if wcs.is_empty() => {
                if last.elapsed() > STALL {
                    out.error = Some(format!("no completion for {} s", STALL.as_secs()));
                    break;
                }
            }
            Ok(wcs) => {
                last = Instant::now();
                for wc in wcs {
                    if wc.status != WcStatus::Success {
                        out.error = Some(wc_error(&wc));
                        break 'outer;
                    }
                    let q = ((wc.wr_id >> 40) as usize).min(n - 1);
                    done[q] += 1;
                }
            }
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    out.elapsed = start.elapsed();
    let total: u64 = done.iter().sum();
    out.ops = done;
    if out.error.is_none() {
        out.check(true, format!("{total} SENDs of {} B completed successfully", cfg.size));
    }
}

fn run_send_server(
    cfg: &Cfg,
    geo: &Geo,
    res: &Res,
    rem: &[PerftestDest],
    neg: &Negotiated,
    out: &mut Outcome,
) {
    let n = res.qps.len();
    let mut got = vec![0u64; n];
    let mut bad_len = 0u64;
    let mut bad_data = 0u64;
    let start = Instant::now();
    let mut last = Instant::now();
    'outer: while got.iter().any(|&g| g < cfg.iters) {
        match poll(&res.ctx, &res.cq, 64, Duration::from_millis(200)) {
            Ok(wcs) if wcs.is_empty() => {
                if last.elapsed() > STALL {
                    out.error =
                        Some(format!("no SEND for {} s (received {got:?})", STALL.as_secs()));
                    break;
                }
            }
            Ok(wcs) => {
                last = Instant::now();
                for wc in wcs {
                    if wc.status != WcStatus::Success {
                        out.error = Some(wc_error(&wc));
                        break 'outer;
                    }
                    let q = ((wc.wr_id >> 40) as usize).min(n - 1);
                    let i = wc.wr_id & ((1 << 40) - 1);
                    let k = got[q];
                    if wc.byte_len != cfg.size {
                        bad_len += 1;
                    }
                    let mr = &res.mrs[q];
                    let o = geo.rx_off(i);
                    if neg.remote_is_ours {
                        let mut b = vec![0u8; cfg.size as usize];
                        let _ = mr.read(o, &mut b);
                        let src = geo.off(k);
                        if b.iter().enumerate().any(|(j, &x)| x != pattern(&rem[q], src + j as u64))
                        {
                            bad_data += 1;
                        }
                    }
                    got[q] += 1;
                    // repost the receive (more than iters in total is harmless),
                    // late with --recv-delay
                    if !cfg.recv_delay.is_zero() {
                        std::thread::sleep(cfg.recv_delay);
                    }
                    let next = i + u64::from(cfg.rx_depth);
                    let _ = res.qps[q].post_recv(RecvWr::new(
                        ((q as u64) << 40) | next,
                        mr.addr() + geo.rx_off(next),
                        cfg.size,
                        mr.lkey(),
                    ));
                }
            }
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    out.elapsed = start.elapsed();
    out.ops = got.clone();
    let total: u64 = got.iter().sum();
    out.check(
        bad_len == 0,
        format!("{total} SENDs received, {bad_len} with a length other than {}", cfg.size),
    );
    if neg.remote_is_ours {
        out.check(
            bad_data == 0,
            format!("{total} SEND payloads equal the sender's pattern ({bad_data} differ)"),
        );
    }
}

fn run_lat(
    cfg: &Cfg,
    geo: &Geo,
    res: &Res,
    rem: &[PerftestDest],
    neg: &Negotiated,
    client: bool,
    out: &mut Outcome,
) {
    let qp = &res.qps[0];
    let mr = &res.mrs[0];
    let mut sent = 0u64;
    let mut rcvd = 0u64;
    let mut bad = 0u64;
    let mut send_inflight = false;
    let mut t0 = Instant::now();
    let start = Instant::now();
    let mut last = Instant::now();
    let post =
        |i: u64| qp.post_send(SendWr::new(i, WrOpcode::Send).sge(mr.addr(), cfg.size, mr.lkey()));
    if client {
        if let Err(e) = post(0) {
            out.error = Some(format!("post_send: {e}"));
            return;
        }
        send_inflight = true;
        sent = 1;
    }
    while rcvd < cfg.iters || send_inflight {
        let wcs = match poll(&res.ctx, &res.cq, 4, Duration::from_millis(200)) {
            Ok(w) => w,
            Err(e) => {
                out.error = Some(e);
                break;
            }
        };
        if wcs.is_empty() {
            if last.elapsed() > STALL {
                out.error = Some(format!(
                    "no completion for {} s (sent {sent}, received {rcvd})",
                    STALL.as_secs()
                ));
                break;
            }
            continue;
        }
        last = Instant::now();
        let mut fail = false;
        for wc in wcs {
            if wc.status != WcStatus::Success {
                out.error = Some(wc_error(&wc));
                fail = true;
                break;
            }
            if wc.opcode == roce_verbs_api::WcOpcode::Send {
                send_inflight = false;
                continue;
            }
            // a receive
            let i = wc.wr_id & ((1 << 40) - 1);
            let o = geo.rx_off(i);
            if neg.remote_is_ours {
                let mut b = vec![0u8; cfg.size as usize];
                let _ = mr.read(o, &mut b);
                if b.iter().enumerate().any(|(j, &x)| x != pattern(&rem[0], j as u64)) {
                    bad += 1;
                }
            }
            if wc.byte_len != cfg.size {
                bad += 1;
            }
            rcvd += 1;
            let next = i + u64::from(cfg.rx_depth);
            let _ =
                qp.post_recv(RecvWr::new(next, mr.addr() + geo.rx_off(next), cfg.size, mr.lkey()));
            if client {
                out.rtt_us.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            if sent < cfg.iters {
                // (a completed previous send is not awaited: the reply proves it arrived)
                t0 = Instant::now();
                if let Err(e) = post(sent) {
                    out.error = Some(format!("post_send: {e}"));
                    fail = true;
                    break;
                }
                send_inflight = true;
                sent += 1;
            }
        }
        if fail {
            break;
        }
    }
    out.elapsed = start.elapsed();
    out.ops = vec![rcvd];
    let what = if neg.remote_is_ours {
        "of the right length and equal to the sender's pattern"
    } else {
        "of the right length"
    };
    out.check(
        bad == 0 && rcvd == cfg.iters,
        format!("{rcvd} of {} ping-pong messages received, {what} ({bad} not)", cfg.iters),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scripts/interop/pyverbs_peer.py` (the rxe-side peer of the interop
    /// matrix) reimplements `pattern` in Python; its `--self-test` checks the
    /// same vectors, so the two sides fill and check the same bytes.
    #[test]
    fn pattern_matches_the_python_peer() {
        let d = |psn: u32, qpn: u32| PerftestDest { psn, qpn, ..PerftestDest::default() };
        let vectors: [(u32, u32, u64, u8); 6] = [
            (0, 0, 0, 0x00),
            (0x12_3456, 0x11, 0, 0x15),
            (0x12_3456, 0x11, 1, 0x21),
            (0x12_3456, 0x11, 4095, 0x89),
            (0xAB_CDEF, 0x2A, 65535, 0x15),
            (0xFF_FFFF, 0xFF_FFFF, 7, 0x72),
        ];
        for (psn, qpn, off, want) in vectors {
            assert_eq!(pattern(&d(psn, qpn), off), want, "psn {psn:#x} qpn {qpn:#x} off {off}");
        }
        // and the script carries the same table
        let py = include_str!("../../../scripts/interop/pyverbs_peer.py");
        for (psn, qpn, off, want) in vectors {
            let row = format!("({psn:#X}, {qpn:#X}, {off}, {want:#04x})").replace("0X", "0x");
            let alt = format!("({psn}, {qpn}, {off}, {want:#04x})");
            assert!(py.contains(&row) || py.contains(&alt), "{row} missing from the script");
        }
    }

    /// The script's own self-test (pattern, QP message, geometry) when a
    /// Python is at hand.
    #[test]
    fn python_peer_self_test() {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/interop/pyverbs_peer.py");
        match std::process::Command::new("python3").arg(script).arg("--self-test").output() {
            Ok(o) => {
                let out = String::from_utf8_lossy(&o.stdout);
                assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
                assert_eq!(out.trim(), "self-test: pattern ok, QP message ok, geometry ok");
            }
            Err(e) => eprintln!("SKIPPED: no python3 ({e})"),
        }
    }
}
