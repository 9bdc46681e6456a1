//! One latency run in one process: SEND, WRITE or READ round trips between
//! A and B, made by this thread alone, through the latency loop
//! ([`super::loops::lat_loop`]).

use super::local::{Pair, Setup};
use super::loops::{self, CqSet};
use super::{LatKind, PerfConfig, PollMode};
use crate::progress::Progress;
use anyhow::anyhow;
use roce_verbs_api::{Budget, Context, Mr, Qp, RecvWr, SendWr, WcOpcode, WorkCompletion, WrOpcode};
use std::time::{Duration, Instant};

/// No completion for this long: the run failed.
const STALL: Duration = Duration::from_secs(10);

/// Round-trip samples, microseconds.
#[derive(Clone, Debug)]
pub struct LatResult {
    /// Sorted samples, µs.
    pub samples: Vec<f64>,
    /// Data check outcome.
    pub data_check: Result<String, String>,
}

impl LatResult {
    pub(crate) fn new(mut samples: Vec<f64>, data_check: Result<String, String>) -> LatResult {
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

fn wait_recv(ctx: &Context, cq: &CqSet) -> Result<WorkCompletion, String> {
    // Up to 16 at a time: send completions (a coalesced ACK completes
    // several SENDs at once) may sit in front of the receive.
    let mut got = None;
    let take = |wc: &WorkCompletion| {
        if wc.opcode == WcOpcode::Recv && got.is_none() {
            got = Some(*wc);
        }
        Ok(got.is_some())
    };
    loops::wait_for(ctx, cq, (16, Duration::from_millis(100), STALL), take)
        .map_err(|e| e.words(|| format!("stalled: no receive completion for {STALL:?}")))?;
    got.ok_or_else(|| "no receive".to_string())
}

fn wait_send(ctx: &Context, cq: &CqSet) -> Result<(), String> {
    loops::wait_for(ctx, cq, (1, Duration::from_millis(100), STALL), |_| Ok(true))
        .map_err(|e| e.words(|| format!("stalled: no completion for {STALL:?}")))
}

fn wait_byte(ctx: &Context, mr: &Mr, off: u64, want: u8) -> Result<(), String> {
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
        return Err(format!("stalled: memory at offset {off} never became {want:#x}"));
    }
    Ok(())
}

fn posted<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// One SEND round trip: A's buffer goes to B and comes back.
fn send_round(s: &Setup, p: &Pair, size: u32, i: u64) -> Result<Duration, String> {
    p.qb.post_recv(RecvWr::new(i, p.mb.addr(), size, p.mb.lkey())).map_err(posted("post_recv"))?;
    p.qa.post_recv(RecvWr::new(i, p.ma.addr(), size, p.ma.lkey())).map_err(posted("post_recv"))?;
    // The receive buffers on A are the send buffers too: A's pattern comes
    // back from B unchanged.
    let t0 = Instant::now();
    p.qa.post_send(SendWr::new(i, WrOpcode::Send).sge(p.ma.addr(), size, p.ma.lkey()))
        .map_err(posted("post_send"))?;
    wait_recv(&s.b.ctx, &s.cq_b)?;
    p.qb.post_send(SendWr::new(i, WrOpcode::Send).sge(p.mb.addr(), size, p.mb.lkey()))
        .map_err(posted("post_send"))?;
    wait_recv(&s.a.ctx, &s.cq_a)?;
    let dt = t0.elapsed();
    // Reap the two SEND completions outside the timed part.
    let _ = s.cq_a.poll(16);
    let _ = s.cq_b.poll(16);
    Ok(dt)
}

/// Post a WRITE of the first `size` bytes of `from` to the start of `to`.
fn write_whole(qp: &Qp, from: &Mr, to: &Mr, size: u32, wr_id: u64) -> Result<(), String> {
    let wr = SendWr::new(wr_id, WrOpcode::RdmaWrite)
        .sge(from.addr(), size, from.lkey())
        .remote(to.remote_addr(0), to.rkey());
    qp.post_send(wr).map_err(posted("post_send"))
}

/// One WRITE round trip (ib_write_lat): each side writes the other's
/// buffer; the receiver spins on the last byte, which carries the
/// iteration tag.
fn write_round(s: &Setup, p: &Pair, size: u32, i: u64) -> Result<Duration, String> {
    let t0 = Instant::now();
    let last = u64::from(size - 1);
    let tag = (i % 127) as u8 + 1;
    let reply = tag + 128;
    p.ma.write(last, &[tag]).map_err(|e| e.to_string())?;
    write_whole(&p.qa, &p.ma, &p.mb, size, i)?;
    wait_byte(&s.b.ctx, &p.mb, last, tag)?;
    p.mb.write(last, &[reply]).map_err(|e| e.to_string())?;
    write_whole(&p.qb, &p.mb, &p.ma, size, i)?;
    wait_byte(&s.a.ctx, &p.ma, last, reply)?;
    let dt = t0.elapsed();
    // Reap both WRITE completions outside the timed part.
    wait_send(&s.a.ctx, &s.cq_a)?;
    wait_send(&s.b.ctx, &s.cq_b)?;
    Ok(dt)
}

/// One READ, one outstanding (ib_read_lat).
fn read_round(s: &Setup, p: &Pair, size: u32, i: u64) -> Result<Duration, String> {
    let t0 = Instant::now();
    p.qa.post_send(
        SendWr::new(i, WrOpcode::RdmaRead)
            .sge(p.ma.addr(), size, p.ma.lkey())
            .remote(p.mb.remote_addr(0), p.mb.rkey()),
    )
    .map_err(posted("post_send"))?;
    wait_send(&s.a.ctx, &s.cq_a)?;
    Ok(t0.elapsed())
}

/// Run one latency test (run index `k`).
pub fn run_lat(s: &Setup, cfg: &PerfConfig, k: u32, progress: bool) -> anyhow::Result<LatResult> {
    let p = &s.pairs[0];
    let size = cfg.size as usize;
    let warm = (cfg.iters / 10).min(10);
    let pat = p.pattern(k, false);
    p.ma.write(0, &pat.bytes(0, size))?;
    p.mb.write(0, &vec![0u8; size])?;
    let mut bar = Progress::new(progress.then(std::io::stderr));
    let round = |i: u64| {
        match cfg.lat_op {
            LatKind::Send => send_round(s, p, cfg.size, i),
            LatKind::Write => write_round(s, p, cfg.size, i),
            LatKind::Read => read_round(s, p, cfg.size, i),
        }
        .map(Some)
    };
    let label = format!("round trips, run {}", k + 1);
    let (samples, error) = loops::lat_loop(warm, cfg.iters, round, |i, n| bar.update(i, n, &label));
    if let Some(e) = error {
        return Err(anyhow!(e));
    }
    bar.finish();
    if cfg.poll == PollMode::Busy {
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
        LatKind::Read if a == b => Ok(format!("{size} bytes read equal the remote buffer")),
        LatKind::Read => Err("read buffer differs from the remote buffer".into()),
        _ if a == b && pat.matches(0, &a[..size - 1]) => {
            Ok(format!("{size} bytes arrived intact both ways"))
        }
        _ => Err("the buffers differ after the ping-pong".into()),
    };
    Ok(LatResult::new(samples, check))
}
