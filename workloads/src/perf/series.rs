//! `roce perf` in one process, start to end: `--repeat` runs on the same
//! devices, each paired (with more than one run) with a reference measured
//! right after it, the device counters (`--stats`), then the devices
//! released and the reference of the whole series measured on the same
//! addresses. What it returns is what the report prints.

use super::bw::{run_bw, BwResult};
use super::lat::{run_lat, LatResult};
use super::local::Setup;
use super::reference::{self, Ceiling};
use super::{PerfConfig, PollMode};
use roce_transport::CountersSnapshot;

/// Each device's name, core counters (rxe names) and transport counters.
pub type DevCounters = Vec<(String, roce_verbs_api::Counters, CountersSnapshot)>;

/// How a series runs.
#[derive(Clone, Copy, Debug)]
pub struct SeriesOptions {
    /// Runs (`--repeat`).
    pub repeat: u32,
    /// Take the device counters after the runs (`--stats`).
    pub stats: bool,
    /// Measure the references (not `--no-ceiling`).
    pub reference: bool,
    /// Seconds per ceiling mode.
    pub ceiling_secs: f64,
    /// Progress lines on stderr.
    pub progress: bool,
}

impl SeriesOptions {
    /// Whether each run is paired with a reference of its own.
    fn paired(&self) -> bool {
        self.reference && self.repeat > 1
    }
}

/// A run failed: the error, and the device counters when asked for.
#[derive(Debug)]
pub struct SeriesFailed {
    /// What went wrong.
    pub error: anyhow::Error,
    /// `--stats`: the counters at the failure.
    pub stats: Option<DevCounters>,
}

/// Run `one` `opts.repeat` times on the same devices, calling `after`
/// after each run; take the counters (`--stats`), then release the devices.
fn repeated<R>(
    cfg: &PerfConfig,
    setup: Setup,
    opts: &SeriesOptions,
    one: fn(&Setup, &PerfConfig, u32, bool) -> anyhow::Result<R>,
    after: &mut dyn FnMut(),
) -> Result<(Vec<R>, Option<DevCounters>), SeriesFailed> {
    let mut runs = Vec::new();
    for k in 0..opts.repeat {
        match one(&setup, cfg, k, opts.progress) {
            Ok(r) => {
                runs.push(r);
                after();
            }
            Err(error) => {
                let stats = opts.stats.then(|| setup.device_counters());
                return Err(SeriesFailed { error, stats });
            }
        }
    }
    let stats = opts.stats.then(|| setup.device_counters());
    drop(setup);
    Ok((runs, stats))
}

/// Keep paired references only when every run has one.
fn all_paired(pair: bool, paired: Vec<Option<f64>>, runs: usize) -> Option<Vec<f64>> {
    (pair && paired.len() == runs).then(|| paired.into_iter().collect()).flatten()
}

/// The bandwidth runs of a series and their references.
#[derive(Clone, Debug)]
pub struct BwSeries {
    /// Each run.
    pub runs: Vec<BwResult>,
    /// `--stats`: the devices' counters after the runs.
    pub stats: Option<DevCounters>,
    /// More than one run: the GSO+GRO ceiling right after each, Gb/s.
    pub paired: Option<Vec<f64>>,
    /// The ceiling after the series.
    pub ceiling: Option<Ceiling>,
}

impl BwSeries {
    /// Each run's Gb/s.
    pub fn gbps(&self) -> Vec<f64> {
        self.runs.iter().map(|r| r.gbps()).collect()
    }
    /// The best ceiling mode.
    pub fn best(&self) -> Option<(f64, &'static str)> {
        self.ceiling.as_ref().and_then(|c| c.best())
    }
    /// Each run against the best ceiling (0 without one).
    pub fn ratios(&self) -> Vec<f64> {
        let best = self.best();
        self.gbps().iter().map(|g| best.map(|b| g / b.0).unwrap_or(0.0)).collect()
    }
    /// Each run against the ceiling measured right after it.
    pub fn paired_ratios(&self) -> Option<Vec<f64>> {
        self.paired.as_ref().map(|c| self.runs.iter().zip(c).map(|(r, c)| r.gbps() / c).collect())
    }
    /// Every run's data check passed.
    pub fn data_ok(&self) -> bool {
        self.runs.iter().all(|r| r.data_check.is_ok())
    }
    /// The median run (by index).
    pub fn mid(&self) -> &BwResult {
        &self.runs[self.runs.len() / 2]
    }
}

/// A bandwidth series on `setup`'s devices.
pub fn bw_series(
    cfg: &PerfConfig,
    setup: Setup,
    opts: &SeriesOptions,
) -> Result<BwSeries, SeriesFailed> {
    let pair = opts.paired();
    let mut paired = Vec::new();
    let mut after = || {
        if pair {
            paired.push(reference::paired_ceiling(cfg, opts.ceiling_secs, opts.progress));
        }
    };
    let (runs, stats) = repeated(cfg, setup, opts, run_bw, &mut after)?;
    let paired = all_paired(pair, paired, runs.len());
    let ceiling =
        opts.reference.then(|| reference::measure_ceiling(cfg, opts.ceiling_secs, opts.progress));
    Ok(BwSeries { runs, stats, paired, ceiling })
}

/// The latency runs of a series and their references.
#[derive(Clone, Debug)]
pub struct LatSeries {
    /// Each run.
    pub runs: Vec<LatResult>,
    /// `--stats`: the devices' counters after the runs.
    pub stats: Option<DevCounters>,
    /// More than one run: the raw ping-pong's median right after each, µs.
    pub paired: Option<Vec<f64>>,
    /// The raw ping-pong after the series.
    pub udp: Option<LatResult>,
    /// Why the raw ping-pong after the series failed.
    pub udp_error: Option<String>,
}

impl LatSeries {
    /// Each run's median round trip.
    pub fn medians(&self) -> Vec<f64> {
        self.runs.iter().map(|r| r.percentile(0.5)).collect()
    }
    /// Ours / raw, run by run.
    pub fn slowdown(&self) -> Option<Vec<f64>> {
        self.paired
            .as_ref()
            .map(|p| self.runs.iter().zip(p).map(|(r, u)| r.percentile(0.5) / u).collect())
    }
    /// Every run's data check passed.
    pub fn data_ok(&self) -> bool {
        self.runs.iter().all(|r| r.data_check.is_ok())
    }
    /// The median run (by index).
    pub fn mid(&self) -> &LatResult {
        &self.runs[self.runs.len() / 2]
    }
}

/// A latency series on `setup`'s devices.
pub fn lat_series(
    cfg: &PerfConfig,
    setup: Setup,
    opts: &SeriesOptions,
) -> Result<LatSeries, SeriesFailed> {
    let pair = opts.paired();
    let payload = reference::datagram_size(cfg);
    let mut paired = Vec::new();
    let mut after = || {
        if pair {
            let u = reference::udp_rtt(cfg, payload).ok();
            paired.push(u.map(|u| u.percentile(0.5)));
        }
    };
    let (runs, stats) = repeated(cfg, setup, opts, run_lat, &mut after)?;
    let paired = all_paired(pair, paired, runs.len());
    let (udp, udp_error) = match opts.reference.then(|| reference::udp_rtt(cfg, payload)) {
        None => (None, None),
        Some(Ok(u)) => (Some(u), None),
        Some(Err(e)) => (None, Some(format!("{e:#}"))),
    };
    Ok(LatSeries { runs, stats, paired, udp, udp_error })
}

/// The median of `v` (0 when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return 0.0;
    }
    if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    }
}

/// Smallest, median, largest.
pub fn min_med_max(v: &[f64]) -> (f64, f64, f64) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, median(v), max)
}

/// `spin_us` as reported: the spin of event mode, 0 when busy-polling.
pub fn reported_spin(cfg: &PerfConfig) -> u64 {
    if cfg.poll == PollMode::Event {
        cfg.spin_us
    } else {
        0
    }
}
