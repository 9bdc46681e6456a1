//! The requester of a cross-process run: the bandwidth tests (WRITE,
//! WRITE with immediate, READ, atomics, SEND) through the bandwidth loop,
//! and what the client then checks in its own memory.

use super::setup::{pattern_of, Geo, Res};
use super::{Outcome, RemoteConfig, BAD_RKEY_XOR, STALL};
use crate::perf::loops::{self, AtDeadline, BwPlan, BwRun, Requester};
use crate::perf::TestKind;
use crate::perftest::{Negotiated, PerftestDest};
use roce_verbs_api::{RKey, SendWr, WorkCompletion, WrOpcode};
use std::time::{Duration, Instant};

/// Atomics: per QP and slot, the value the target is known to hold, and
/// whether every fetched value continued the chain.
struct Chains {
    known: Vec<Vec<Option<u64>>>,
    ok: Vec<bool>,
    msg: Vec<String>,
}

/// The client's side of a bandwidth run, for the bandwidth loop.
struct Client<'a> {
    cfg: &'a RemoteConfig,
    geo: &'a Geo,
    res: &'a Res,
    rem: &'a [PerftestDest],
    depth: u64,
    chains: Chains,
    /// The current 100 ms window: its start and completions.
    window: (Instant, u64),
    peak_mbps: f64,
}

impl Client<'_> {
    /// The atomic of request `i` of QP `q` (FETCH_AND_ADD 1, or a
    /// CMP_AND_SWAP that continues the slot's chain).
    fn atomic(&self, q: usize, i: u64, id: u64, rkey: RKey) -> SendWr {
        let (geo, r, mr) = (self.geo, &self.rem[q], &self.res.mrs[q]);
        let res_off = geo.results + (i % self.depth) * 8;
        let slot = (i % geo.slots) as usize;
        let op = if self.cfg.cas { WrOpcode::AtomicCmpAndSwp } else { WrOpcode::AtomicFetchAndAdd };
        let mut wr = SendWr::new(id, op)
            .sge(mr.addr() + res_off, 8, mr.lkey())
            .remote(r.vaddr + geo.off(i), rkey);
        if self.cfg.cas {
            let v = self.chains.known[q][slot];
            wr.compare_add = v.unwrap_or(0);
            wr.swap = v.map_or(0, |v| v.wrapping_add(1));
        } else {
            wr.compare_add = 1;
        }
        wr
    }
}

impl Requester for Client<'_> {
    fn qps(&self) -> usize {
        self.res.qps.len()
    }

    fn request(&mut self, q: usize, i: u64) -> SendWr {
        let (cfg, r, mr) = (self.cfg, &self.rem[q], &self.res.mrs[q]);
        let off = self.geo.off(i);
        let rkey = RKey::new(r.rkey ^ if cfg.bad_rkey { BAD_RKEY_XOR } else { 0 });
        let id = loops::wr_id(q, i);
        let data = |op| SendWr::new(id, op).sge(mr.addr() + off, cfg.size, mr.lkey());
        match cfg.test {
            TestKind::Write if cfg.imm => {
                data(WrOpcode::RdmaWriteWithImm).remote(r.vaddr + off, rkey).with_imm(i as u32)
            }
            TestKind::Write => data(WrOpcode::RdmaWrite).remote(r.vaddr + off, rkey),
            TestKind::Read => data(WrOpcode::RdmaRead).remote(r.vaddr + off, rkey),
            TestKind::Send | TestKind::Lat => data(WrOpcode::Send),
            TestKind::Atomic => self.atomic(q, i, id, rkey),
        }
    }

    fn post(&mut self, q: usize, wrs: Vec<SendWr>) -> Result<(), String> {
        for wr in wrs {
            self.res.qps[q].post_send(wr).map_err(|e| match self.cfg.test {
                TestKind::Send => format!("post_send: {e}"),
                _ => format!("post_send on QP {q}: {e}"),
            })?;
        }
        Ok(())
    }

    fn poll(&mut self, max: usize, wait: Duration) -> Result<Vec<WorkCompletion>, String> {
        loops::poll(&self.res.ctx, &self.res.cq, max, wait)
    }

    /// Atomics: the fetched value must continue the slot's chain.
    fn completed(&mut self, q: usize, i: u64) {
        if self.cfg.test != TestKind::Atomic {
            return;
        }
        let res_off = self.geo.results + (i % self.depth) * 8;
        let slot = (i % self.geo.slots) as usize;
        let got = self.res.mrs[q].read_u64(res_off).unwrap_or(0);
        let c = &mut self.chains;
        let expect = c.known[q][slot];
        if expect.is_some_and(|v| got != v) && c.ok[q] {
            c.ok[q] = false;
            c.msg[q] = format!(
                "QP {q} op {i} slot {slot}: fetched {got:#x}, expected {:#x}",
                expect.unwrap_or(0)
            );
        }
        let first_cas = self.cfg.cas && expect.is_none();
        c.known[q][slot] = Some(if first_cas { got } else { got.wrapping_add(1) });
    }

    /// The peak: the best 100 ms window, MB/s (not measured for SEND).
    fn tick(&mut self, _now: Instant, n: usize, _total: u64) {
        if n == 0 || self.cfg.test == TestKind::Send {
            return;
        }
        self.window.1 += n as u64;
        let we = self.window.0.elapsed();
        if we >= Duration::from_millis(100) {
            let mbps = self.window.1 as f64 * self.geo.size as f64 / we.as_secs_f64() / 1_048_576.0;
            self.peak_mbps = self.peak_mbps.max(mbps);
            self.window = (Instant::now(), 0);
        }
    }

    fn stalled(&self, run: &BwRun, stall: Duration) -> String {
        match self.cfg.test {
            TestKind::Send => format!("no completion for {} s", stall.as_secs()),
            _ => format!("no completion for {} s (done {:?})", stall.as_secs(), run.done),
        }
    }
}

/// The client of the WRITE/READ/atomic/SEND bandwidth tests: the run, then
/// the checks of what it can see from its side.
pub(super) fn run_bw_client(
    cfg: &RemoteConfig,
    geo: &Geo,
    res: &Res,
    (rem, neg): (&[PerftestDest], &Negotiated),
    out: &mut Outcome,
) {
    let n = res.qps.len();
    let depth = match cfg.test {
        TestKind::Atomic => u64::from(cfg.tx_depth).min(geo.slots).min(16),
        _ => u64::from(cfg.tx_depth),
    };
    let chains = Chains {
        known: vec![vec![None; geo.slots as usize]; n],
        ok: vec![true; n],
        msg: vec![String::new(); n],
    };
    let mut client =
        Client { cfg, geo, res, rem, depth, chains, window: (Instant::now(), 0), peak_mbps: 0.0 };
    let plan = BwPlan {
        depth,
        iters: cfg.iters,
        duration: cfg.duration,
        at_deadline: AtDeadline::Equalize,
        max_wcs: 64,
        wait: Duration::from_millis(200),
        stall: STALL,
    };
    let run = loops::bw_loop(&mut client, &plan);
    out.elapsed = run.end.duration_since(run.start);
    out.ops = run.done.clone();
    out.peak_mbps = client.peak_mbps;
    if let Some(e) = run.error {
        out.error = Some(e);
        return;
    }
    if cfg.test == TestKind::Send {
        let total: u64 = run.done.iter().sum();
        out.check(true, format!("{total} SENDs of {} B completed successfully", cfg.size));
        return;
    }
    for (q, &done) in run.done.iter().enumerate() {
        match cfg.test {
            TestKind::Read => res.check_peer_slots(geo, (rem, neg), (q, done), out, |used, bad| {
                let size = geo.size;
                if neg.remote_is_ours {
                    format!("QP {q}: {used} READ slots of {size} B equal the peer's pattern ({bad} differ)")
                } else {
                    format!("QP {q}: {used} READ slots of {size} B were filled from the peer ({bad} still hold our own fill)")
                }
            }),
            TestKind::Atomic => {
                let c = &client.chains;
                let what = if cfg.cas {
                    "CMP_AND_SWAP chains (each hit, +1)"
                } else {
                    "FETCH_AND_ADD results (+1 per op)"
                };
                let how = if c.ok[q] { "unbroken".to_string() } else { c.msg[q].clone() };
                out.check(c.ok[q], format!("QP {q}: {done} ops, {what} per slot {how}"));
            }
            _ => {
                // WRITE: the source is untouched
                let mem = res.mrs[q].to_vec();
                let used = done.min(geo.slots);
                let mine = pattern_of(&res.mine[q]);
                let ok = (0..used).all(|k| {
                    let o = k * geo.stride;
                    mine.matches(o, &mem[o as usize..(o + geo.size) as usize])
                });
                out.check(
                    ok,
                    format!(
                        "QP {q}: {done} WRITEs of {} B sent from {used} slots of our pattern",
                        geo.size
                    ),
                );
            }
        }
    }
}
