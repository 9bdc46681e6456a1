//! `roce perf` across processes: one side of a perftest run, talking
//! perftest's out-of-band TCP exchange ([`crate::perftest`]), so the other
//! side can be `ib_write_bw`, `ib_read_bw`, `ib_send_bw`, `ib_atomic_bw`,
//! `ib_send_lat` (perftest 4.5-0.17) on a real or soft RoCE device, or
//! another `roce perf`. (The front, its options and report, is
//! `cli/src/perf/`; it prints what [`run`] reports through [`Event`]s and
//! the [`Outcome`].)
//!
//! The work is perftest's: the client is the requester (WRITE, READ,
//! atomics, SEND) and the server's memory is the target; a `lat` run is a
//! SEND ping-pong. Remote addresses cycle over the negotiated cycle buffer
//! in cache-line strides as perftest's do.
//!
//! Data checks. Every buffer is filled with the [`crate::pattern`] of its
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

mod client;
mod pingpong;
mod server;
mod setup;

use super::TestKind;
use crate::perftest::{BwReport, Dir, Flow, Negotiated, Oob, OobError, PerftestDest, Role};
use std::net::{IpAddr, TcpListener, TcpStream};
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

/// A validated cross-process configuration.
#[derive(Clone, Debug)]
pub struct RemoteConfig {
    /// The test (`lat` is the SEND ping-pong).
    pub test: TestKind,
    /// Message bytes.
    pub size: u32,
    /// Iterations per QP (ignored with `duration`).
    pub iters: u64,
    /// Time-bounded WRITE/READ/atomic run.
    pub duration: Option<Duration>,
    /// QPs.
    pub qps: u32,
    /// Outstanding requests per QP.
    pub tx_depth: u32,
    /// Receives posted per QP (send, lat, WRITE with immediate).
    pub rx_depth: u32,
    /// Path MTU as perftest exchanges it (1 = 256 ... 5 = 4096).
    pub mtu_enum: u8,
    /// Path MTU bytes: the port MTU of a `--local` device.
    pub mtu: u32,
    /// TCP port of the exchange.
    pub port: u16,
    /// Source GID index (default 1 if there is one).
    pub gid_index: Option<u32>,
    /// Atomics: CMP_AND_SWAP instead of FETCH_AND_ADD.
    pub cas: bool,
    /// A wrong R_Key on purpose.
    pub bad_rkey: bool,
    /// WRITE with immediate.
    pub imm: bool,
    /// Send server: wait this long before reposting each receive.
    pub recv_delay: Duration,
    /// Client: the server's address (None: we are the server).
    pub server: Option<String>,
    /// The configured device (`-d`).
    pub ib_dev: Option<String>,
    /// A UDP device of our own at this address (`--local`).
    pub local: Option<IpAddr>,
}

/// What the run has to say while it runs, in order (the front prints it).
pub enum Event<'a> {
    /// The server listens and waits for its client.
    Waiting,
    /// Resources set up: the header's facts.
    Header {
        /// The device's name.
        device: &'a str,
        /// The negotiated exchange.
        neg: &'a Negotiated,
        /// Our source GID index.
        sgid_index: u8,
    },
    /// QPs connected: ours and the peer's, per QP.
    Connected {
        /// Ours.
        mine: &'a [PerftestDest],
        /// The peer's.
        rem: &'a [PerftestDest],
        /// The negotiated exchange.
        neg: &'a Negotiated,
    },
    /// Server of a bandwidth test: the client runs it; waiting for its end.
    ServerWaits,
    /// Server: what the client reported.
    PeerReport(&'a BwReport),
}

/// What a run measured and checked.
#[derive(Debug)]
pub struct Outcome {
    /// Operations per QP.
    pub ops: Vec<u64>,
    /// The run's time.
    pub elapsed: Duration,
    /// Client: the best 100 ms, MB/s.
    pub peak_mbps: f64,
    /// Each data check: passed, and what it checked.
    pub checks: Vec<(bool, String)>,
    /// Why the run ended early.
    pub error: Option<String>,
    /// `lat` client: round trips, µs.
    pub rtt_us: Vec<f64>,
    /// We were the client.
    pub client: bool,
    /// The peer is a `roce perf`.
    pub remote_is_ours: bool,
    /// Every message of the exchange, in order (`--oob-log`).
    pub transcript: Vec<(Dir, Vec<u8>)>,
    /// The device's counters after the run.
    pub counters: roce_verbs_api::Counters,
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
            client: false,
            remote_is_ours: false,
            transcript: Vec::new(),
            counters: Default::default(),
        }
    }
    fn check(&mut self, ok: bool, what: String) {
        self.checks.push((ok, what));
    }
    /// Every check passed and no error.
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.0) && self.error.is_none()
    }
}

/// The report we send in perftest's exchange (its units: MB/s = 2^20 B/s).
fn my_report(cfg: &RemoteConfig, out: &Outcome) -> BwReport {
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

/// Connect to the server, or listen for the client (`Event::Waiting`).
fn exchange_stream(
    cfg: &RemoteConfig,
    events: &mut dyn FnMut(Event),
) -> Result<(TcpStream, Role), String> {
    Ok(match &cfg.server {
        Some(host) => (setup::connect_tcp(host, cfg.port)?, Role::Client),
        None => {
            let l = TcpListener::bind(("0.0.0.0", cfg.port))
                .map_err(|e| format!("couldn't listen on TCP port {}: {e}", cfg.port))?;
            events(Event::Waiting);
            let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
            (s, Role::Server)
        }
    })
}

/// Run one side: open the device, meet the peer, set up and connect the
/// QPs, run the test and check the data. `Err`: the run could not start
/// (the device, the connection, the exchange's first steps); a failure
/// after that is in the [`Outcome`].
pub fn run(cfg: &RemoteConfig, events: &mut dyn FnMut(Event)) -> Result<Outcome, String> {
    let dev = setup::open_device(cfg)?;
    let ctx = dev.open();
    let (stream, role) = exchange_stream(cfg, events)?;
    let slack = cfg.duration.map(|d| d * 2).unwrap_or_default();
    let _ = stream.set_read_timeout(Some(Duration::from_secs(300) + slack));
    let _ = stream.set_nodelay(true);
    let mut oob = Oob::new(stream, role);
    let neg = oob.prologue(CYCLE_BUFFER, CACHE_LINE, cfg.mtu_enum).map_err(|e| e.to_string())?;
    let geo = setup::Geo::new(cfg, &neg);
    let res = setup::setup(ctx, cfg, &geo)?;
    let flow = match cfg.test {
        TestKind::Send | TestKind::Lat => Flow::Send,
        _ => Flow::Bw,
    };
    events(Event::Header { device: dev.name(), neg: &neg, sgid_index: res.sgid_index });
    let rem = oob.connect_phase(flow, &res.mine, &mut |rem: &[PerftestDest]| {
        setup::connect(&res, &neg, rem)
    })?;
    events(Event::Connected { mine: &res.mine, rem: &rem, neg: &neg });
    let mut out = Outcome::new(res.qps.len());
    out.client = role == Role::Client;
    out.remote_is_ours = neg.remote_is_ours;
    // a failure from here on still reports what happened and the counters
    let side = Side { cfg, geo: &geo, res: &res, rem: &rem, neg: &neg };
    let phase = match flow {
        Flow::Bw => side.bw_phase(&mut oob, &mut out, events),
        Flow::Send => side.send_phase(&mut oob, &mut out),
    };
    if let Err(m) = phase {
        out.error = Some(match out.error.take() {
            Some(first) => format!("{first}; then {m}"),
            None => m,
        });
    }
    out.transcript = std::mem::take(&mut oob.transcript);
    out.counters = res.ctx.counters();
    Ok(out)
}

/// One side, set up and connected.
struct Side<'a> {
    cfg: &'a RemoteConfig,
    geo: &'a setup::Geo,
    res: &'a setup::Res,
    rem: &'a [PerftestDest],
    neg: &'a Negotiated,
}

impl Side<'_> {
    /// WRITE, READ, atomics: the client runs the test and reports; the
    /// server waits for the end, then checks its memory.
    fn bw_phase(
        &self,
        oob: &mut Oob<TcpStream>,
        out: &mut Outcome,
        events: &mut dyn FnMut(Event),
    ) -> Result<(), String> {
        let (cfg, res) = (self.cfg, self.res);
        let e = |e: OobError| e.to_string();
        if cfg.imm && !self.neg.remote_is_ours {
            return Err(
                "--imm: perftest 4.5 has no WRITE_WITH_IMM test; run roce perf on both sides"
                    .into(),
            );
        }
        if cfg.imm && !out.client {
            server::post_imm_recvs(cfg, res)?;
        }
        oob.hand_shake(&res.mine[0]).map_err(e)?;
        if out.client {
            client::run_bw_client(cfg, self.geo, res, (self.rem, self.neg), out);
            oob.hand_shake(&res.mine[0]).map_err(e)?;
            oob.xchg_bw_report(&my_report(cfg, out)).map_err(e)?;
        } else {
            events(Event::ServerWaits);
            let start = Instant::now();
            oob.hand_shake(&res.mine[0]).map_err(e)?;
            out.elapsed = start.elapsed();
            let theirs = oob.xchg_bw_report(&my_report(cfg, out)).map_err(e)?;
            events(Event::PeerReport(&theirs));
            if cfg.imm {
                server::check_immediates(cfg, res, theirs.iters, out);
            }
            let peer = (self.rem, self.neg);
            server::check_server_memory(cfg, self.geo, res, peer, theirs.iters, out);
        }
        oob.close(&res.mine[0]).map_err(e)
    }

    /// SEND and the ping-pong: receives first (perftest's
    /// ctx_set_recv_wqes), then the sync, then the test.
    fn send_phase(&self, oob: &mut Oob<TcpStream>, out: &mut Outcome) -> Result<(), String> {
        let (cfg, res, peer) = (self.cfg, self.res, (self.rem, self.neg));
        let e = |e: OobError| e.to_string();
        if !out.client || cfg.test == TestKind::Lat {
            server::post_initial_recvs(cfg, self.geo, res)?;
        }
        oob.hand_shake(&res.mine[0]).map_err(e)?;
        match (cfg.test, out.client) {
            (TestKind::Lat, client) => pingpong::run_lat(cfg, self.geo, res, peer, client, out),
            (_, true) => client::run_bw_client(cfg, self.geo, res, peer, out),
            (_, false) => server::run_send_server(cfg, self.geo, res, peer, out),
        }
        oob.close(&res.mine[0]).map_err(e)
    }
}
