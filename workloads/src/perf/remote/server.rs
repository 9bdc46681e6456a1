//! The target of a cross-process run: the receives of SEND, the
//! immediates of WRITE with immediate, and after the client's end the
//! check of what it did to our memory.

use super::setup::{pattern_of, u64_at, Geo, Res};
use super::{Outcome, RemoteConfig, STALL};
use crate::perf::loops::{self, wr_of};
use crate::perf::TestKind;
use crate::perftest::{Negotiated, PerftestDest};
use roce_verbs_api::{RecvWr, WcOpcode, WcStatus};
use std::time::{Duration, Instant};

/// Post `rx_depth` receives on every QP (perftest's ctx_set_recv_wqes).
pub(super) fn post_initial_recvs(cfg: &RemoteConfig, geo: &Geo, res: &Res) -> Result<(), String> {
    for (q, qp) in res.qps.iter().enumerate() {
        let mr = &res.mrs[q];
        for i in 0..u64::from(cfg.rx_depth) {
            let o = geo.rx_off(i);
            qp.post_recv(RecvWr::new(loops::wr_id(q, i), mr.addr() + o, cfg.size, mr.lkey()))
                .map_err(|e| format!("couldn't post receive: {e}"))?;
        }
    }
    Ok(())
}

/// WRITE with immediate: one zero-length receive per WRITE, all posted
/// before the run.
pub(super) fn post_imm_recvs(cfg: &RemoteConfig, res: &Res) -> Result<(), String> {
    for (q, qp) in res.qps.iter().enumerate() {
        for i in 0..cfg.iters {
            qp.post_recv(RecvWr::new(loops::wr_id(q, i), res.mrs[q].addr(), 0, res.mrs[q].lkey()))
                .map_err(|e| format!("couldn't post receive: {e}"))?;
        }
    }
    Ok(())
}

/// The server of the SEND bandwidth test: every SEND received (its
/// length, and between two `roce perf` its bytes, checked), the receive
/// reposted.
pub(super) fn run_send_server(
    cfg: &RemoteConfig,
    geo: &Geo,
    res: &Res,
    (rem, neg): (&[PerftestDest], &Negotiated),
    out: &mut Outcome,
) {
    let n = res.qps.len();
    let mut got = vec![0u64; n];
    let mut bad_len = 0u64;
    let mut bad_data = 0u64;
    let start = Instant::now();
    let mut take = |wc: &roce_verbs_api::WorkCompletion| {
        let (q, i) = wr_of(wc.wr_id);
        let q = q.min(n - 1);
        let k = got[q];
        bad_len += u64::from(wc.byte_len != cfg.size);
        let mr = &res.mrs[q];
        if neg.remote_is_ours {
            let mut b = vec![0u8; cfg.size as usize];
            let _ = mr.read(geo.rx_off(i), &mut b);
            bad_data += u64::from(!pattern_of(&rem[q]).matches(geo.off(k), &b));
        }
        got[q] += 1;
        // repost the receive (more than iters in total is harmless), late
        // with --recv-delay
        if !cfg.recv_delay.is_zero() {
            std::thread::sleep(cfg.recv_delay);
        }
        let next = i + u64::from(cfg.rx_depth);
        let _ = res.qps[q].post_recv(RecvWr::new(
            loops::wr_id(q, next),
            mr.addr() + geo.rx_off(next),
            cfg.size,
            mr.lkey(),
        ));
        Ok(got.iter().all(|&g| g >= cfg.iters))
    };
    // (iters is at least 1: there is always a SEND to wait for)
    let waited =
        loops::wait_for(&res.ctx, &res.cq, (64, Duration::from_millis(200), STALL), &mut take);
    if let Err(e) = waited {
        out.error =
            Some(e.words(|| format!("no SEND for {} s (received {got:?})", STALL.as_secs())));
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

/// The server of WRITE with immediate: one receive completion per WRITE,
/// in order, carrying the WRITE's index as its immediate.
pub(super) fn check_immediates(
    cfg: &RemoteConfig,
    res: &Res,
    reported_iters: u64,
    out: &mut Outcome,
) {
    let n = res.qps.len();
    let want = reported_iters / n as u64;
    let mut got = vec![0u64; n];
    let mut bad = 0u64;
    let mut last = Instant::now();
    while got.iter().any(|&g| g < want) && last.elapsed() < Duration::from_secs(5) {
        match loops::poll(&res.ctx, &res.cq, 64, Duration::from_millis(100)) {
            Ok(wcs) => {
                if !wcs.is_empty() {
                    last = Instant::now();
                }
                for wc in wcs {
                    let q = wr_of(wc.wr_id).0.min(n - 1);
                    let ok = wc.status == WcStatus::Success
                        && wc.opcode == WcOpcode::RecvRdmaWithImm
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

/// The server of the WRITE/READ/atomic tests, after the client's end:
/// check what the client did to our memory.
pub(super) fn check_server_memory(
    cfg: &RemoteConfig,
    geo: &Geo,
    res: &Res,
    (rem, neg): (&[PerftestDest], &Negotiated),
    reported_iters: u64,
    out: &mut Outcome,
) {
    // perftest reports the total over all QPs; every QP did the same number
    let iters = reported_iters / res.mrs.len() as u64;
    for q in 0..res.mrs.len() {
        out.ops[q] = iters;
        match cfg.test {
            TestKind::Write => {
                res.check_peer_slots(geo, (rem, neg), (q, iters), out, |used, bad| {
                    let what = if neg.remote_is_ours {
                        "equal the writer's pattern"
                    } else {
                        "were overwritten (perftest's random bytes)"
                    };
                    format!("QP {q}: {used} written slots of {} B {what} ({bad} not)", geo.size)
                })
            }
            TestKind::Read => {
                let mem = res.mrs[q].to_vec();
                let same = pattern_of(&res.mine[q]).matches(0, &mem[..geo.buf_len as usize]);
                out.check(same, format!("QP {q}: memory the peer READ is unchanged"));
            }
            TestKind::Atomic => check_atomics(cfg, geo, res, neg, (q, iters), out),
            _ => {}
        }
    }
}

/// Atomics: per 64-byte slot, how many operations hit it.
fn check_atomics(
    cfg: &RemoteConfig,
    geo: &Geo,
    res: &Res,
    neg: &Negotiated,
    (q, iters): (usize, u64),
    out: &mut Outcome,
) {
    let mem = res.mrs[q].to_vec();
    let mine = pattern_of(&res.mine[q]);
    let mut sum: i128 = 0;
    let mut misplaced = 0u64;
    let mut wrong_slots = 0u64;
    for w in 0..(geo.span / 8) {
        let o = (w * 8) as usize;
        let init = u64_at(&mine.bytes(o as u64, 8), 0);
        let delta = u64_at(&mem, o).wrapping_sub(init) as i64 as i128;
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
    if neg.remote_is_ours {
        out.check(misplaced == 0 && wrong_slots == 0, format!("QP {q}: {iters} atomics: every slot holds its initial value + its operations ({wrong_slots} slots wrong, {misplaced} words hit off-slot)"));
    } else if cfg.cas {
        out.check(sum == 0 && misplaced == 0, format!("QP {q}: {iters} CMP_AND_SWAP(0 -> 0) left our memory unchanged (sum of changes {sum})"));
    } else {
        out.check(sum == i128::from(iters) && misplaced == 0, format!("QP {q}: {iters} FETCH_AND_ADD(1): our memory grew by {sum} in total, at 64-byte slots ({misplaced} off-slot words)"));
    }
}
