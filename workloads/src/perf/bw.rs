//! One bandwidth run in one process: A's QPs post WRITE, READ, SEND or
//! FETCH_AND_ADD through the bandwidth loop ([`super::loops::bw_loop`]),
//! B serves (and, for SEND, reposts its receive ring); then the moved bytes
//! are checked against the run's [`Pattern`].

use super::local::{Pair, Setup};
use super::loops::{self, AtDeadline, BwPlan, BwRun, Requester};
use super::{PerfConfig, TestKind};
use crate::pattern::Pattern;
use crate::progress::Progress;
use anyhow::anyhow;
use roce_transport::CountersSnapshot;
use roce_verbs_api::{Mr, RecvWr, SendWr, WcOpcode, WorkCompletion, WrOpcode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// No completion for this long: the run failed.
const STALL: Duration = Duration::from_secs(10);

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

/// A's side of a run, for the bandwidth loop.
struct Local<'a> {
    s: &'a Setup,
    cfg: &'a PerfConfig,
    k: u32,
    /// Receives taken on B per QP (SEND).
    recvd: Vec<u64>,
    qpn_b: HashMap<u32, usize>,
    /// (time, completions so far) after each poll that took some.
    stamps: Vec<(Instant, u64)>,
    bar: Progress,
    start: Instant,
}

impl Requester for Local<'_> {
    fn qps(&self) -> usize {
        self.s.pairs.len()
    }

    fn request(&mut self, q: usize, i: u64) -> SendWr {
        let (cfg, p) = (self.cfg, &self.s.pairs[q]);
        let base = if cfg.test == TestKind::Send { self.s.sends_before.borrow()[q] } else { 0 };
        let off = ((base + i) % u64::from(self.s.slots)) * u64::from(cfg.size);
        let id = loops::wr_id(q, i);
        match cfg.test {
            TestKind::Write => SendWr::new(id, WrOpcode::RdmaWrite)
                .sge(p.ma.addr() + off, cfg.size, p.ma.lkey())
                .remote(p.mb.remote_addr(off), p.mb.rkey()),
            TestKind::Read => SendWr::new(id, WrOpcode::RdmaRead)
                .sge(p.ma.addr() + off, cfg.size, p.ma.lkey())
                .remote(p.mb.remote_addr(off), p.mb.rkey()),
            TestKind::Send => {
                SendWr::new(id, WrOpcode::Send).sge(p.ma.addr() + off, cfg.size, p.ma.lkey())
            }
            TestKind::Atomic | TestKind::Lat => {
                let mut w = SendWr::new(id, WrOpcode::AtomicFetchAndAdd)
                    .sge(p.ma.addr(), 8, p.ma.lkey())
                    .remote(p.mb.remote_addr(0), p.mb.rkey());
                w.compare_add = 1;
                w
            }
        }
    }

    /// Every free slot in one post list (one driver kick).
    fn post(&mut self, q: usize, wrs: Vec<SendWr>) -> Result<(), String> {
        self.s.pairs[q]
            .qa
            .post_send_list_deferred(wrs)
            .map_err(|(_, e)| format!("post_send: {e}"))?;
        Ok(())
    }

    /// One doorbell for the lists of every QP.
    fn kick(&mut self) {
        self.s.pairs[0].qa.doorbell();
    }

    fn poll(&mut self, max: usize, wait: Duration) -> Result<Vec<WorkCompletion>, String> {
        loops::poll(&self.s.a.ctx, &self.s.cq_a, max, wait)
    }

    /// SEND: take B's receives and repost their slots.
    fn serve(&mut self) -> Result<(), String> {
        if self.cfg.test != TestKind::Send {
            return Ok(());
        }
        let (size, slots) = (self.cfg.size, self.s.slots);
        for wc in self.s.cq_b.poll(256)? {
            if wc.status != roce_verbs_api::WcStatus::Success {
                return Err(loops::wc_error(&wc));
            }
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            let q = self.recv_qp(&wc)?;
            let p = &self.s.pairs[q];
            self.recvd[q] += 1;
            let off = (wc.wr_id % u64::from(slots)) * u64::from(size);
            p.qb.post_recv(RecvWr::new(wc.wr_id, p.mb.addr() + off, size, p.mb.lkey()))
                .map_err(|e| format!("post_recv: {e}"))?;
        }
        Ok(())
    }

    fn tick(&mut self, now: Instant, n: usize, total: u64) {
        if n > 0 {
            self.stamps.push((now, total));
        }
        let k = self.k + 1;
        match self.cfg.duration {
            Some(d) => self.bar.update(
                now.duration_since(self.start).as_millis() as u64,
                d.as_millis() as u64,
                &format!("ms of run {k}"),
            ),
            None => self.bar.update(
                total,
                self.cfg.iters * self.s.pairs.len() as u64,
                &format!("messages, run {k}"),
            ),
        }
    }

    fn stalled(&self, run: &BwRun, stall: Duration) -> String {
        let (a, b) = (self.s.a.counters.snapshot(), self.s.b.counters.snapshot());
        let (ca, cb) = (self.s.a.ctx.counters(), self.s.b.ctx.counters());
        format!(
            "stalled: no completion for {:?} ({} of {} done); A: {} dgrams out, {} in, \
             retransmits {}; B: {} out, {} in, {} dropped as duplicates/out of sequence",
            stall,
            run.total,
            run.posted.iter().sum::<u64>(),
            a.dgrams_out,
            a.dgrams_in,
            ca.completer_retry_err,
            b.dgrams_out,
            b.dgrams_in,
            cb.duplicate_request + cb.out_of_seq_request
        )
    }
}

impl Local<'_> {
    fn recv_qp(&self, wc: &WorkCompletion) -> Result<usize, String> {
        self.qpn_b.get(&wc.qp_num).copied().ok_or_else(|| "completion for unknown QP".to_string())
    }

    /// Drain the receive side of SEND (receives complete before the ACK).
    fn drain_receives(&mut self, done: &[u64]) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.recvd.iter().zip(done).any(|(r, d)| r < d) && Instant::now() < deadline {
            let wcs = loops::poll(&self.s.b.ctx, &self.s.cq_b, 256, Duration::from_millis(10))?;
            for wc in wcs {
                if wc.status != roce_verbs_api::WcStatus::Success {
                    return Err(loops::wc_error(&wc));
                }
                if let Ok(q) = self.recv_qp(&wc) {
                    self.recvd[q] += 1;
                }
            }
        }
        Ok(())
    }

    /// Peak: the best of ~20 equal slices (by completion count) of the run, Gb/s.
    fn peak_gbps(&self, total: u64) -> f64 {
        let mut peak: f64 = 0.0;
        let slice = (total / 20).max(1);
        let (mut t0, mut n0) = (self.start, 0u64);
        for &(t, n) in &self.stamps {
            if n - n0 >= slice {
                let dt = t.duration_since(t0).as_secs_f64();
                if dt > 0.0 {
                    peak = peak.max((n - n0) as f64 * f64::from(self.cfg.size) * 8.0 / dt / 1e9);
                }
                (t0, n0) = (t, n);
            }
        }
        peak
    }
}

/// Fresh data for run `k`: the source gets the run's pattern, the target
/// zeros; the SEND receive ring is posted once (completions repost their slot).
fn prepare(s: &Setup, cfg: &PerfConfig, k: u32) -> anyhow::Result<()> {
    let size = cfg.size as usize;
    let slots = s.slots as usize;
    let region = size * slots;
    for p in &s.pairs {
        let pat = p.pattern(k, cfg.test == TestKind::Read).bytes(0, region);
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
    Ok(())
}

/// Run one bandwidth test (run index `k`).
pub fn run_bw(s: &Setup, cfg: &PerfConfig, k: u32, progress: bool) -> anyhow::Result<BwResult> {
    prepare(s, cfg, k)?;
    let w0 = (s.a.counters.snapshot(), s.b.counters.snapshot());
    let plan = BwPlan {
        depth: u64::from(cfg.tx_depth),
        iters: cfg.iters,
        duration: cfg.duration,
        at_deadline: AtDeadline::Stop,
        max_wcs: 256,
        wait: STALL,
        stall: STALL,
    };
    let mut local = Local {
        s,
        cfg,
        k,
        recvd: vec![0; s.pairs.len()],
        qpn_b: s.pairs.iter().enumerate().map(|(i, p)| (p.qb.qpn().value(), i)).collect(),
        stamps: Vec::new(),
        bar: Progress::new(progress.then(std::io::stderr)),
        start: Instant::now(),
    };
    let run = loops::bw_loop(&mut local, &plan);
    local.bar.finish();
    if let Some(e) = run.error {
        return Err(anyhow!(e));
    }
    // the loop's start, for the peak's first slice
    local.start = run.start;
    let elapsed = run.last.duration_since(run.start);
    let w1 = (s.a.counters.snapshot(), s.b.counters.snapshot());
    let peak = local.peak_gbps(run.total);
    if cfg.test == TestKind::Send {
        local.drain_receives(&run.done).map_err(|e| anyhow!(e))?;
    }
    let data_check = verify(s, cfg, k, &run.done, &local.recvd)?;
    for (b, d) in s.sends_before.borrow_mut().iter_mut().zip(&run.done) {
        *b += d;
    }
    Ok(BwResult {
        iters_per_qp: run.done.iter().copied().min().unwrap_or(0),
        msgs: run.total,
        size: cfg.size,
        elapsed,
        peak_gbps: if peak > 0.0 { peak } else { 0.0 },
        data_check,
        wire: (w1.0.since(&w0.0), w1.1.since(&w0.1)),
    })
}

/// The slots of `mr` that QP `q` used in this run (`idx`), each checked
/// against the pattern; `Err`: the first differing byte, counted over the
/// used slots in order.
fn check_slots(
    mr: &Mr,
    pat: Pattern,
    idx: &[usize],
    size: usize,
) -> anyhow::Result<Result<(), usize>> {
    let mut buf = vec![0u8; size];
    for (n, &j) in idx.iter().enumerate() {
        mr.read((j * size) as u64, &mut buf)?;
        if let Err(at) = pat.verify((j * size) as u64, &buf) {
            return Ok(Err(n * size + at));
        }
    }
    Ok(Ok(()))
}

fn verify(
    s: &Setup,
    cfg: &PerfConfig,
    k: u32,
    done: &[u64],
    recvd: &[u64],
) -> anyhow::Result<Result<String, String>> {
    let size = cfg.size as usize;
    let slots = s.slots as u64;
    let mut bytes = 0usize;
    for (q, p) in s.pairs.iter().enumerate() {
        let base = if cfg.test == TestKind::Send { s.sends_before.borrow()[q] } else { 0 };
        // the slots this run wrote, in order
        let idx: Vec<usize> =
            (0..done[q].min(slots)).map(|i| ((base + i) % slots) as usize).collect();
        let pat: Pattern = p.pattern(k, cfg.test == TestKind::Read);
        if let Some(bad) = verify_qp(q, p, cfg, pat, &idx, (done[q], recvd[q]))? {
            return Ok(Err(bad));
        }
        bytes += match cfg.test {
            TestKind::Atomic | TestKind::Lat => 8,
            _ => idx.len() * size,
        };
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

/// One QP's data check: what is wrong, if anything.
fn verify_qp(
    q: usize,
    p: &Pair,
    cfg: &PerfConfig,
    pat: Pattern,
    idx: &[usize],
    (done, recvd): (u64, u64),
) -> anyhow::Result<Option<String>> {
    let size = cfg.size as usize;
    Ok(match cfg.test {
        TestKind::Send if recvd != done => {
            Some(format!("QP {q}: {done} sends completed, {recvd} received"))
        }
        TestKind::Write | TestKind::Send => check_slots(&p.mb, pat, idx, size)?
            .err()
            .map(|at| format!("QP {q}: target differs from the source at byte {at}")),
        TestKind::Read => check_slots(&p.ma, pat, idx, size)?
            .err()
            .map(|at| format!("QP {q}: read buffer differs from the remote at byte {at}")),
        TestKind::Atomic | TestKind::Lat => {
            let v = p.mb.read_u64(0)?;
            (v != done).then(|| format!("QP {q}: counter is {v}, expected {done}"))
        }
    })
}
