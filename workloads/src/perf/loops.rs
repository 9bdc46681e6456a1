//! The loops of `roce perf`, one of each, driven by the runs in one process
//! ([`super::local`]) and across processes ([`super::remote`]): the
//! completion queues and the one poll helper ([`CqSet`], [`poll`],
//! [`wait_for`]), the bandwidth loop ([`bw_loop`], over a [`Requester`])
//! and the latency loop ([`lat_loop`]).

use roce_verbs_api::{Budget, CompChannel, Context, Cq, SendWr, WcStatus, WorkCompletion};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// The CQs of one side: as many as it takes to give every QP room for all
/// its completions within the device's `max_cqe` (QP `q` reports to
/// `cqs[q / per_cq]`). Polled round-robin as one.
pub struct CqSet {
    cqs: Vec<Cq>,
    per_cq: usize,
    next: Cell<usize>,
    /// Event mode: the completion channel every CQ reports to (waits
    /// block in it, as `ib_*_lat -e` / `ib_*_bw -e` do).
    chan: Option<CompChannel>,
}

impl CqSet {
    /// CQs for `qps` QPs that each may have `per_qp` completions queued;
    /// with `events`, on one completion channel.
    pub(crate) fn new(ctx: &Context, qps: u32, per_qp: u32, events: bool) -> Result<CqSet, String> {
        let chan = match events {
            true => {
                Some(ctx.create_comp_channel().map_err(|e| format!("create_comp_channel: {e}"))?)
            }
            false => None,
        };
        let max = ctx.query_device().max_cqe;
        if per_qp > max {
            return Err(format!(
                "one QP needs room for {per_qp} completions, more than max_cqe {max}: lower -t"
            ));
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
            cqs.push(cq.map_err(|e| format!("create_cq: {e}"))?);
            left -= n;
        }
        Ok(CqSet { cqs, per_cq: per_cq as usize, next: Cell::new(0), chan })
    }

    /// One CQ for every QP, polled (no channel).
    pub(crate) fn single(cq: Cq) -> CqSet {
        CqSet { cqs: vec![cq], per_cq: usize::MAX, next: Cell::new(0), chan: None }
    }

    /// The CQ QP `q` reports to.
    pub(crate) fn for_qp(&self, q: usize) -> &Cq {
        &self.cqs[(q / self.per_cq).min(self.cqs.len() - 1)]
    }

    /// Up to `max` completions from the CQs, starting after the one that
    /// gave completions last time (so none is starved); does not wait.
    pub(crate) fn poll(&self, max: usize) -> Result<Vec<WorkCompletion>, String> {
        let err = |e: roce_verbs_api::PollCqError| format!("poll_cq: {e}");
        if self.cqs.len() == 1 {
            return self.cqs[0].poll(max).map_err(err);
        }
        let mut out = Vec::new();
        let n = self.cqs.len();
        let start = self.next.get();
        for i in 0..n {
            if out.len() >= max {
                break;
            }
            let k = (start + i) % n;
            let got = self.cqs[k].poll(max - out.len()).map_err(err)?;
            if !got.is_empty() {
                self.next.set((k + 1) % n);
            }
            out.extend(got);
        }
        Ok(out)
    }
}

/// Poll `cqs` for up to `max` completions, waiting at most `wait` for the
/// first: with a completion channel blocked in it (poll, arm, poll again,
/// `get_cq_event`, acknowledge: perftest's `-e` loop), else letting `ctx`'s
/// driver move frames while it looks.
pub fn poll(
    ctx: &Context,
    cqs: &CqSet,
    max: usize,
    wait: Duration,
) -> Result<Vec<WorkCompletion>, String> {
    if let Some(ch) = &cqs.chan {
        let end = Instant::now() + wait;
        loop {
            let v = cqs.poll(max)?;
            if !v.is_empty() {
                return Ok(v);
            }
            for c in &cqs.cqs {
                c.req_notify(false).map_err(|e| format!("req_notify_cq: {e}"))?;
            }
            let v = cqs.poll(max)?;
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
        || match cqs.poll(max) {
            Ok(v) => {
                out = v;
                !out.is_empty()
            }
            Err(e) => {
                err = Some(e);
                true
            }
        },
        Budget { events: 1_000_000, wall: wait },
    );
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// A failed completion, in words.
pub fn wc_error(wc: &WorkCompletion) -> String {
    format!(
        "completion with error: status {} ({}) opcode {:?} on QP 0x{:06x}, wr_id 0x{:x}",
        wc.status.code(),
        wc.status,
        wc.opcode,
        wc.qp_num,
        wc.wr_id
    )
}

/// Why [`wait_for`] gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitError {
    /// No completion at all for the stall time.
    Stalled,
    /// A failed poll or completion, in words.
    Failed(String),
}

impl WaitError {
    /// In words, a stall worded by `stalled`.
    pub fn words(self, stalled: impl FnOnce() -> String) -> String {
        match self {
            WaitError::Stalled => stalled(),
            WaitError::Failed(e) => e,
        }
    }
}

/// Poll (`max` at a time, `tick` per look) until `take` has accepted a
/// completion: every completion of a batch goes to `take`, which says
/// whether the wait is over; a failed one ends the wait with its error, as
/// does no completion at all for `stall`.
pub fn wait_for(
    ctx: &Context,
    cqs: &CqSet,
    (max, tick, stall): (usize, Duration, Duration),
    mut take: impl FnMut(&WorkCompletion) -> Result<bool, String>,
) -> Result<(), WaitError> {
    let mut last = Instant::now();
    loop {
        let wcs = poll(ctx, cqs, max, tick).map_err(WaitError::Failed)?;
        if wcs.is_empty() {
            if last.elapsed() > stall {
                return Err(WaitError::Stalled);
            }
            continue;
        }
        last = Instant::now();
        let mut over = false;
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                return Err(WaitError::Failed(wc_error(wc)));
            }
            over |= take(wc).map_err(WaitError::Failed)?;
        }
        if over {
            return Ok(());
        }
    }
}

/// The work request id of request `i` of QP `q` (the bandwidth loop's).
pub const fn wr_id(q: usize, i: u64) -> u64 {
    ((q as u64) << 40) | i
}

/// The QP and request index of a work request id made by [`wr_id`].
pub const fn wr_of(wr_id: u64) -> (usize, u64) {
    ((wr_id >> 40) as usize, wr_id & ((1 << 40) - 1))
}

/// What a time-bounded (`-D`) bandwidth run does when its time is up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtDeadline {
    /// Post no more; finish what is in flight.
    Stop,
    /// Every QP completes as many requests as the busiest has posted
    /// (perftest's report divides the total by the QPs).
    Equalize,
}

/// The shape of a bandwidth run.
#[derive(Clone, Copy, Debug)]
pub struct BwPlan {
    /// Requests in flight per QP.
    pub depth: u64,
    /// Requests per QP (without `duration`).
    pub iters: u64,
    /// Run for this long instead.
    pub duration: Option<Duration>,
    /// When the time is up.
    pub at_deadline: AtDeadline,
    /// Completions taken per poll.
    pub max_wcs: usize,
    /// Longest single wait for a completion.
    pub wait: Duration,
    /// No completion for this long with requests in flight: the run failed.
    pub stall: Duration,
}

/// The requester side of a bandwidth run, as [`bw_loop`] drives it.
pub trait Requester {
    /// QPs (requests of QP `q` have ids [`wr_id`]`(q, i)`).
    fn qps(&self) -> usize;
    /// Request `i` of QP `q`.
    fn request(&mut self, q: usize, i: u64) -> SendWr;
    /// Post QP `q`'s next requests.
    fn post(&mut self, q: usize, wrs: Vec<SendWr>) -> Result<(), String>;
    /// After a round of posts on some QPs (ring a deferred doorbell).
    fn kick(&mut self) {}
    /// Completions, waiting at most `wait` for the first.
    fn poll(&mut self, max: usize, wait: Duration) -> Result<Vec<WorkCompletion>, String>;
    /// Request `i` of QP `q` completed successfully (in order).
    fn completed(&mut self, _q: usize, _i: u64) {}
    /// After each poll: serve the other side (the receives of SEND).
    fn serve(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// After each poll: `n` completions taken now, `total` so far.
    fn tick(&mut self, _now: Instant, _n: usize, _total: u64) {}
    /// The error of a stall, with whatever explains it.
    fn stalled(&self, run: &BwRun, stall: Duration) -> String;
}

/// What the bandwidth loop did.
#[derive(Clone, Debug)]
pub struct BwRun {
    /// Requests posted per QP.
    pub posted: Vec<u64>,
    /// Requests completed per QP.
    pub done: Vec<u64>,
    /// Completed requests (all QPs).
    pub total: u64,
    /// First post.
    pub start: Instant,
    /// Last completion.
    pub last: Instant,
    /// The loop's end.
    pub end: Instant,
    /// Why the run ended early.
    pub error: Option<String>,
}

impl BwRun {
    /// Requests in flight.
    pub fn outstanding(&self) -> u64 {
        self.posted.iter().zip(&self.done).map(|(p, d)| p - d).sum()
    }
}

/// The bandwidth loop: keep `plan.depth` requests in flight on every QP of
/// `req` until each has completed its `plan.iters` (or the time is up),
/// taking completions in order per QP. An error (a failed post or
/// completion, a stall) ends the loop and is returned in [`BwRun::error`].
pub fn bw_loop(req: &mut impl Requester, plan: &BwPlan) -> BwRun {
    let n = req.qps();
    let start = Instant::now();
    let mut run = BwRun {
        posted: vec![0; n],
        done: vec![0; n],
        total: 0,
        start,
        last: start,
        end: start,
        error: None,
    };
    let mut target = vec![if plan.duration.is_some() { u64::MAX } else { plan.iters }; n];
    let mut timed_out = false;
    if let Err(e) = bw_rounds(req, plan, &mut run, &mut target, &mut timed_out) {
        run.error = Some(e);
    }
    run.end = Instant::now();
    run
}

fn bw_rounds(
    req: &mut impl Requester,
    plan: &BwPlan,
    run: &mut BwRun,
    target: &mut [u64],
    timed_out: &mut bool,
) -> Result<(), String> {
    loop {
        if let Some(d) = plan.duration {
            if !*timed_out && run.start.elapsed() >= d {
                *timed_out = true;
                let most = run.posted.iter().copied().max().unwrap_or(0).max(1);
                for (t, p) in target.iter_mut().zip(&run.posted) {
                    *t = match plan.at_deadline {
                        AtDeadline::Stop => *p,
                        AtDeadline::Equalize => most,
                    };
                }
            }
        }
        post_round(req, plan, run, target)?;
        if run.done.iter().zip(target.iter()).all(|(d, t)| d >= t) {
            return Ok(());
        }
        let wait = match plan.duration {
            Some(d) if !*timed_out => {
                d.saturating_sub(run.start.elapsed()).min(plan.wait).max(Duration::from_millis(1))
            }
            _ => plan.wait,
        };
        let wcs = req.poll(plan.max_wcs, wait)?;
        let now = Instant::now();
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                return Err(wc_error(wc));
            }
            let (q, i) = wr_of(wc.wr_id);
            if q >= run.done.len() || i != run.done[q] {
                return Err(format!("completion out of order: QP {q} op {i}"));
            }
            req.completed(q, i);
            run.done[q] += 1;
            run.total += 1;
        }
        if !wcs.is_empty() {
            run.last = now;
        } else if now.duration_since(run.last) >= plan.stall && run.outstanding() > 0 {
            return Err(req.stalled(run, plan.stall));
        }
        req.serve()?;
        req.tick(now, wcs.len(), run.total);
    }
}

/// Fill every QP's window up to its target, one post per QP, then kick.
fn post_round(
    req: &mut impl Requester,
    plan: &BwPlan,
    run: &mut BwRun,
    target: &[u64],
) -> Result<(), String> {
    let mut any = false;
    for (q, &t) in target.iter().enumerate() {
        let mut list = Vec::new();
        while run.posted[q] < t && run.posted[q] - run.done[q] < plan.depth {
            list.push(req.request(q, run.posted[q]));
            run.posted[q] += 1;
        }
        if !list.is_empty() {
            req.post(q, list)?;
            any = true;
        }
    }
    if any {
        req.kick();
    }
    Ok(())
}

/// The latency loop: round trips `0..warm + iters`, each made by `round`,
/// which returns the time it measured (`None` on a side that measures
/// nothing); the first `warm` are not kept. `progress` sees each index
/// first. Returns the kept samples in µs, and the error that ended the
/// loop early.
pub fn lat_loop(
    warm: u64,
    iters: u64,
    mut round: impl FnMut(u64) -> Result<Option<Duration>, String>,
    mut progress: impl FnMut(u64, u64),
) -> (Vec<f64>, Option<String>) {
    let mut samples = Vec::with_capacity(iters.min(1 << 24) as usize);
    for i in 0..warm + iters {
        progress(i, warm + iters);
        match round(i) {
            Ok(Some(dt)) if i >= warm => samples.push(dt.as_secs_f64() * 1e6),
            Ok(_) => {}
            Err(e) => return (samples, Some(e)),
        }
    }
    (samples, None)
}
