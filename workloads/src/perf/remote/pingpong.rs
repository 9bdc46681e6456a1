//! The SEND ping-pong across processes (ib_send_lat): the client sends and
//! times each round trip until the answer arrives, the server answers
//! every message; both through the latency loop.

use super::setup::{pattern_of, Geo, Res};
use super::{Outcome, RemoteConfig, STALL};
use crate::perf::loops::{self, wr_of};
use crate::perftest::{Negotiated, PerftestDest};
use roce_verbs_api::{RecvWr, SendWr, WcOpcode, WorkCompletion, WrOpcode};
use std::time::{Duration, Instant};

/// One side of the ping-pong.
struct PingPong<'a> {
    cfg: &'a RemoteConfig,
    geo: &'a Geo,
    res: &'a Res,
    peer: &'a PerftestDest,
    neg: &'a Negotiated,
    sent: u64,
    rcvd: u64,
    bad: u64,
    /// A SEND whose completion has not been seen.
    inflight: bool,
}

impl PingPong<'_> {
    fn send(&mut self, i: u64) -> Result<(), String> {
        let mr = &self.res.mrs[0];
        let wr = SendWr::new(i, WrOpcode::Send).sge(mr.addr(), self.cfg.size, mr.lkey());
        self.res.qps[0].post_send(wr).map_err(|e| format!("post_send: {e}"))?;
        self.inflight = true;
        self.sent += 1;
        Ok(())
    }

    /// A completion: a SEND's ends its flight; a receive is checked (its
    /// length, and between two `roce perf` its bytes) and reposted.
    fn take(&mut self, wc: &WorkCompletion) -> bool {
        if wc.opcode == WcOpcode::Send {
            self.inflight = false;
            return false;
        }
        let (cfg, geo, mr) = (self.cfg, self.geo, &self.res.mrs[0]);
        let i = wr_of(wc.wr_id).1;
        if self.neg.remote_is_ours {
            let mut b = vec![0u8; cfg.size as usize];
            let _ = mr.read(geo.rx_off(i), &mut b);
            self.bad += u64::from(!pattern_of(self.peer).matches(0, &b));
        }
        self.bad += u64::from(wc.byte_len != cfg.size);
        self.rcvd += 1;
        let next = i + u64::from(cfg.rx_depth);
        let _ = self.res.qps[0].post_recv(RecvWr::new(
            next,
            mr.addr() + geo.rx_off(next),
            cfg.size,
            mr.lkey(),
        ));
        true
    }

    /// Wait for the next receive (or, `last`, for the last SEND's completion).
    fn wait(&mut self, last: bool) -> Result<(), String> {
        let res = self.res;
        let (sent, rcvd) = (self.sent, self.rcvd);
        loops::wait_for(&res.ctx, &res.cq, (4, Duration::from_millis(200), STALL), |wc| {
            let got = self.take(wc);
            Ok(if last { !self.inflight } else { got })
        })
        .map_err(|e| {
            e.words(|| {
                format!("no completion for {} s (sent {sent}, received {rcvd})", STALL.as_secs())
            })
        })
    }

    /// Round trip `i`: the client sends, the answer's arrival ends it
    /// (timed); the server waits for the message and answers.
    fn round(&mut self, client: bool, i: u64) -> Result<Option<Duration>, String> {
        if client {
            let t0 = Instant::now();
            self.send(i)?;
            self.wait(false)?;
            Ok(Some(t0.elapsed()))
        } else {
            self.wait(false)?;
            self.send(i)?;
            Ok(None)
        }
    }
}

/// The ping-pong, `cfg.iters` round trips; the client keeps the samples.
pub(super) fn run_lat(
    cfg: &RemoteConfig,
    geo: &Geo,
    res: &Res,
    (rem, neg): (&[PerftestDest], &Negotiated),
    client: bool,
    out: &mut Outcome,
) {
    let mut pp =
        PingPong { cfg, geo, res, peer: &rem[0], neg, sent: 0, rcvd: 0, bad: 0, inflight: false };
    let start = Instant::now();
    let (samples, error) = loops::lat_loop(0, cfg.iters, |i| pp.round(client, i), |_, _| {});
    out.rtt_us = samples;
    out.error = error;
    // (a completed earlier send is not awaited: the reply proves it arrived)
    if out.error.is_none() && pp.inflight {
        out.error = pp.wait(true).err();
    }
    out.elapsed = start.elapsed();
    out.ops = vec![pp.rcvd];
    let what = if neg.remote_is_ours {
        "of the right length and equal to the sender's pattern"
    } else {
        "of the right length"
    };
    out.check(
        pp.bad == 0 && pp.rcvd == cfg.iters,
        format!(
            "{} of {} ping-pong messages received, {what} ({} not)",
            pp.rcvd, cfg.iters, pp.bad
        ),
    );
}
