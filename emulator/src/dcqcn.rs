//! DCQCN's reaction point (Zhu et al., "Congestion Control for Large-Scale
//! RDMA Deployments", SIGCOMM 2015), per QP, as ConnectX NICs run it: a
//! CNP cuts the QP's current rate by a factor set by alpha (the
//! estimated share of marked traffic), a timer and a byte counter raise
//! it back (fast recovery, then additive, then hyper increase), and a
//! rate limiter paces the QP's packets at the current rate.
//!
//! Sans-IO and deterministic: integer arithmetic only (rates in kbit/s,
//! alpha in 1/1024), and no timer of its own. What the periodic timers of
//! a NIC would have done by `now` (alpha's decay every `dce_tcp_rtt`, a
//! rate increase every `rpg_time_reset`) is caught up when the QP next
//! sends or gets a CNP, so a QP at line rate costs nothing and an idle
//! limited QP arms nothing.
//!
//! The parameters ([`RpParams`]) carry mlx5's names, units and defaults
//! (the `roce_rp` files a ConnectX driver exposes, `mlxconfig`'s
//! `ROCE_CC_*`).

use crate::time::Instant;
use core::time::Duration;

/// The reaction point's parameters: mlx5's names, units and defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RpParams {
    /// The reaction point runs (a CNP cuts the rate). Off: CNPs are
    /// counted in `rp_cnp_ignored` and nothing is paced.
    pub enabled: bool,
    /// µs between two rate-increase events of the timer (300).
    pub rpg_time_reset: u32,
    /// Bytes sent between two rate-increase events of the byte counter
    /// (32767).
    pub rpg_byte_reset: u32,
    /// Increase events of the timer and of the byte counter before fast
    /// recovery gives way to additive, then hyper, increase (1).
    pub rpg_threshold: u32,
    /// The highest rate, Mb/s; 0: the line rate (0).
    pub rpg_max_rate: u32,
    /// Additive increase of the target rate, Mb/s (5).
    pub rpg_ai_rate: u32,
    /// Hyper increase step of the target rate, Mb/s (50).
    pub rpg_hai_rate: u32,
    /// A cut takes `rate * alpha / 2^rpg_gd` with alpha in 1/1024: 11
    /// is the paper's `rate * (1 - alpha / 2)` (11).
    pub rpg_gd: u32,
    /// A cut leaves at least this % of the rate (50).
    pub rpg_min_dec_fac: u32,
    /// The lowest rate, Mb/s (1).
    pub rpg_min_rate: u32,
    /// The rate the first CNP of a QP at line rate sets, Mb/s; 0: cut
    /// from the line rate as any other CNP (0).
    pub rate_to_set_on_first_cnp: u32,
    /// Alpha's gain, in 1/1024: each period alpha becomes `alpha * g /
    /// 1024`, plus `1024 - g` if a CNP came in it (1019: the paper's
    /// `g` is `(1024 - dce_tcp_g) / 1024`).
    pub dce_tcp_g: u32,
    /// Alpha's update period, µs (1).
    pub dce_tcp_rtt: u32,
    /// µs after a cut during which CNPs cut no further (4).
    pub rate_reduce_monitor_period: u32,
    /// Alpha set by the first CNP of a QP at line rate, in 1/1024 (1023).
    pub initial_alpha_value: u32,
}

impl Default for RpParams {
    fn default() -> RpParams {
        RpParams {
            enabled: true,
            rpg_time_reset: 300,
            rpg_byte_reset: 32767,
            rpg_threshold: 1,
            rpg_max_rate: 0,
            rpg_ai_rate: 5,
            rpg_hai_rate: 50,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 1,
            rate_to_set_on_first_cnp: 0,
            dce_tcp_g: 1019,
            dce_tcp_rtt: 1,
            rate_reduce_monitor_period: 4,
            initial_alpha_value: 1023,
        }
    }
}

impl RpParams {
    /// The DCQCN paper's parameters (Zhu et al., SIGCOMM 2015, as its
    /// public simulators set them): `g` = 1/256 (`dce_tcp_g` 1020), alpha
    /// and the increase timer every 55 µs, a 10 MB byte counter, F = 5,
    /// R_AI = 40 Mb/s; R_HAI = 200 Mb/s (5 R_AI: our choice); cuts
    /// unbounded but by alpha (`rpg_min_dec_fac` 0); 100 Mb/s minimum.
    pub fn paper() -> RpParams {
        RpParams {
            enabled: true,
            rpg_time_reset: 55,
            rpg_byte_reset: 10_000_000,
            rpg_threshold: 5,
            rpg_max_rate: 0,
            rpg_ai_rate: 40,
            rpg_hai_rate: 200,
            rpg_gd: 11,
            rpg_min_dec_fac: 0,
            rpg_min_rate: 100,
            rate_to_set_on_first_cnp: 0,
            dce_tcp_g: 1020,
            dce_tcp_rtt: 55,
            rate_reduce_monitor_period: 4,
            initial_alpha_value: 1023,
        }
    }
}

/// Catch-up steps of one call at most: the rates converge long before
/// (64 halvings reach any target), the rest of the elapsed time is
/// skipped.
const MAX_STEPS: u64 = 4096;

/// Alpha's one.
const ONE: u64 = 1024;

/// The rates, in kbit/s, a set of parameters allows on a line of
/// `line_kbps`: `(lowest, highest)`, lowest ≥ 1 and ≤ highest.
pub(crate) fn bounds(p: &RpParams, line_kbps: u64) -> (u64, u64) {
    let line = line_kbps.max(1);
    let max = match p.rpg_max_rate {
        0 => line,
        m => (u64::from(m) * 1000).min(line),
    };
    let min = (u64::from(p.rpg_min_rate) * 1000).clamp(1, max);
    (min, max)
}

/// One QP's reaction point: its rates, alpha, the increase stages and
/// the pacer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dcqcn {
    /// Current rate, kbit/s (what the pacer sends at).
    pub rc: u64,
    /// Target rate, kbit/s.
    pub rt: u64,
    /// Alpha, in 1/1024.
    pub alpha: u64,
    /// A CNP cut the rate and it has not recovered to the highest rate:
    /// packets are paced.
    pub limited: bool,
    /// Start of alpha's current period.
    alpha_at: Instant,
    /// A CNP came in alpha's current period.
    cnp_in_period: bool,
    /// The last cut.
    last_cut: Option<Instant>,
    /// The last increase event of the timer (or the last cut).
    timer_at: Instant,
    /// Increase events of the timer and of the byte counter since the cut.
    t_stage: u64,
    b_stage: u64,
    /// Bytes sent since the byte counter's last event.
    bytes: u64,
    /// When the pacer lets the next packet go.
    next_tx: Instant,
}

impl Dcqcn {
    /// A QP at the highest rate.
    pub fn new(p: &RpParams, line_kbps: u64) -> Dcqcn {
        Dcqcn::at(bounds(p, line_kbps).1)
    }

    /// A QP at `max` kbit/s, not limited.
    pub fn at(max: u64) -> Dcqcn {
        Dcqcn {
            rc: max,
            rt: max,
            alpha: ONE,
            limited: false,
            alpha_at: Instant::ZERO,
            cnp_in_period: false,
            last_cut: None,
            timer_at: Instant::ZERO,
            t_stage: 0,
            b_stage: 0,
            bytes: 0,
            next_tx: Instant::ZERO,
        }
    }

    /// A CNP for this QP at `now`: alpha notes it, and the rate is cut
    /// unless the last cut is younger than `rate_reduce_monitor_period`.
    /// True if it cut.
    pub fn on_cnp(&mut self, p: &RpParams, line_kbps: u64, now: Instant) -> bool {
        let (min, max) = bounds(p, line_kbps);
        if !self.limited {
            // the first CNP of a QP at full rate starts a new episode
            self.alpha = u64::from(p.initial_alpha_value).min(ONE);
            self.alpha_at = now;
            self.cnp_in_period = false;
            self.next_tx = now;
            if p.rate_to_set_on_first_cnp != 0 {
                self.rc = (u64::from(p.rate_to_set_on_first_cnp) * 1000).clamp(min, max);
            }
        } else {
            self.catch_up(p, line_kbps, now);
        }
        self.cnp_in_period = true;
        let monitor = Duration::from_micros(u64::from(p.rate_reduce_monitor_period));
        if self.limited && self.last_cut.is_some_and(|t| now < t + monitor) {
            return false;
        }
        self.rt = self.rc;
        let gd = p.rpg_gd.min(63);
        let cut = (u128::from(self.rc) * u128::from(self.alpha)) >> gd;
        let floor = self.rc * u64::from(p.rpg_min_dec_fac.min(100)) / 100;
        let cut = u64::try_from(cut).unwrap_or(u64::MAX);
        self.rc = self.rc.saturating_sub(cut).max(floor).clamp(min, max);
        self.limited = true;
        self.last_cut = Some(now);
        self.timer_at = now;
        (self.t_stage, self.b_stage, self.bytes) = (0, 0, 0);
        true
    }

    /// A packet of `frame_bytes` (its Ethernet frame) leaves at `now`:
    /// the byte counter counts it and the pacer books its time. Returns
    /// when the next packet may leave (`None`: at once, the QP is not
    /// limited).
    pub fn on_sent(
        &mut self,
        p: &RpParams,
        line_kbps: u64,
        now: Instant,
        frame_bytes: usize,
    ) -> Option<Instant> {
        if !self.limited {
            return None;
        }
        self.catch_up(p, line_kbps, now);
        let byte_reset = u64::from(p.rpg_byte_reset.max(64));
        self.bytes += frame_bytes as u64;
        let mut steps = 0;
        while self.limited && self.bytes >= byte_reset && steps < MAX_STEPS {
            self.bytes -= byte_reset;
            self.b_stage += 1;
            self.increase(p, line_kbps);
            steps += 1;
        }
        if !self.limited {
            return None;
        }
        // bits / (kbit/s) = ms; in ns: bits * 1e6 / kbps
        let ns = (frame_bytes as u64 * 8 * 1_000_000).div_ceil(self.rc.max(1));
        self.next_tx = self.next_tx.max(now) + Duration::from_nanos(ns);
        Some(self.next_tx)
    }

    /// What alpha's decay and the increase timer did up to `now`.
    fn catch_up(&mut self, p: &RpParams, line_kbps: u64, now: Instant) {
        let period = Duration::from_micros(u64::from(p.dce_tcp_rtt.max(1)));
        let g = u64::from(p.dce_tcp_g.min(1024));
        let periods =
            (now.saturating_duration_since(self.alpha_at).as_nanos() / period.as_nanos()) as u64;
        for i in 0..periods.min(MAX_STEPS) {
            self.alpha = self.alpha * g / ONE;
            if i == 0 && self.cnp_in_period {
                self.alpha = (self.alpha + (ONE - g)).min(ONE);
            }
            if self.alpha == 0 {
                break;
            }
        }
        if periods > 0 {
            self.cnp_in_period = false;
            self.alpha_at = match periods < MAX_STEPS {
                true => self.alpha_at + period * (periods as u32),
                false => now,
            };
        }
        let reset = Duration::from_micros(u64::from(p.rpg_time_reset.max(1)));
        let mut steps = 0;
        while self.limited && now >= self.timer_at + reset {
            if steps == MAX_STEPS {
                self.skip_timer_events(p, line_kbps, now, reset);
                break;
            }
            self.timer_at += reset;
            self.t_stage += 1;
            self.increase(p, line_kbps);
            steps += 1;
        }
    }

    /// The timer's events from `timer_at` to `now` in closed form, after
    /// [`MAX_STEPS`] of them one by one: with the byte counter's stage
    /// fixed (nothing is sent while catching up) each event raises the
    /// target by the same step, and the current rate trails it by that
    /// step once the halvings have converged (they have, after thousands).
    fn skip_timer_events(&mut self, p: &RpParams, line_kbps: u64, now: Instant, reset: Duration) {
        let (min, max) = bounds(p, line_kbps);
        let n = (now.saturating_duration_since(self.timer_at).as_nanos() / reset.as_nanos()) as u64;
        self.timer_at = now;
        self.t_stage = self.t_stage.saturating_add(n);
        let f = u64::from(p.rpg_threshold);
        let lo = self.t_stage.min(self.b_stage);
        let step = match lo > f {
            true => (u64::from(p.rpg_hai_rate) * 1000).saturating_mul(lo - f),
            false => u64::from(p.rpg_ai_rate) * 1000,
        };
        self.rt = self.rt.saturating_add(step.saturating_mul(n)).clamp(min, max);
        self.rc = self.rc.max(self.rt.saturating_sub(step)).clamp(min, max);
        if self.rc >= max {
            self.limited = false;
            (self.rc, self.rt) = (max, max);
        }
    }

    /// One increase event (of the timer or the byte counter, already
    /// counted in its stage).
    fn increase(&mut self, p: &RpParams, line_kbps: u64) {
        let (min, max) = bounds(p, line_kbps);
        let f = u64::from(p.rpg_threshold);
        let (lo, hi) = (self.t_stage.min(self.b_stage), self.t_stage.max(self.b_stage));
        if hi < f {
            // fast recovery: halfway back to the target
        } else if lo > f {
            let i = lo - f;
            self.rt = self.rt.saturating_add(u64::from(p.rpg_hai_rate) * 1000 * i);
        } else {
            self.rt = self.rt.saturating_add(u64::from(p.rpg_ai_rate) * 1000);
        }
        self.rt = self.rt.clamp(min, max);
        // halfway to the target, rounded towards it (so it is reached)
        self.rc = match self.rt >= self.rc {
            true => self.rc + (self.rt - self.rc).div_ceil(2),
            false => self.rt + (self.rc - self.rt) / 2,
        }
        .clamp(min, max);
        if self.rc >= max {
            self.limited = false;
            self.rc = max;
            self.rt = max;
        }
    }

    /// The current rate, Mb/s (what `roce stats` shows).
    pub fn rate_mbps(&self) -> u64 {
        self.rc / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: u64 = 40_000_000; // 40 Gb/s in kbit/s

    fn us(n: u64) -> Instant {
        Instant::from_micros(n)
    }

    #[test]
    fn a_cnp_halves_a_fresh_qp_and_the_monitor_period_holds_the_next() {
        let p = RpParams::default();
        let mut d = Dcqcn::new(&p, LINE);
        assert_eq!(d.on_sent(&p, LINE, us(0), 1000), None, "not limited: not paced");
        assert!(d.on_cnp(&p, LINE, us(10)));
        // alpha 1023/1024: rc * (1 - 1023/2048), floored at 50 %
        assert_eq!(d.rc, 20_019_532);
        assert_eq!(d.rt, LINE);
        assert!(d.limited);
        // within 4 µs: noted, no second cut
        assert!(!d.on_cnp(&p, LINE, us(12)));
        assert_eq!(d.rc, 20_019_532);
        // after it: cut again (alpha decayed for a few µs, raised by the CNP)
        assert!(d.on_cnp(&p, LINE, us(15)));
        assert!(d.rc < 20_019_532 && d.rc >= 10_009_766, "{}", d.rc);
        assert_eq!(d.rt, 20_019_532);
    }

    #[test]
    fn the_pacer_spaces_packets_at_the_current_rate() {
        let p = RpParams::default();
        let mut d = Dcqcn::new(&p, LINE);
        d.on_cnp(&p, LINE, us(0));
        d.rc = 1_000_000; // 1 Gb/s: 1000 bytes take 8 µs
        let a = d.on_sent(&p, LINE, us(0), 1000).unwrap();
        assert_eq!(a, us(8));
        let b = d.on_sent(&p, LINE, us(1), 1000).unwrap();
        assert_eq!(b, us(16), "booked after the previous packet, not after now");
        let c = d.on_sent(&p, LINE, us(100), 1000).unwrap();
        assert!(c > us(100) && c <= us(108), "{c:?}");
    }

    #[test]
    fn the_timer_brings_the_rate_back_to_the_line() {
        let p = RpParams::default();
        let mut d = Dcqcn::new(&p, LINE);
        d.on_cnp(&p, LINE, us(0));
        let cut = d.rc;
        // one timer event: fast recovery (threshold 1: additive at once)
        d.on_sent(&p, LINE, us(300), 64);
        assert!(d.rc > cut && d.rc < LINE, "{}", d.rc);
        // long enough idle: back at line rate, not paced
        assert_eq!(d.on_sent(&p, LINE, us(1_000_000), 64), None);
        assert!(!d.limited);
        assert_eq!((d.rc, d.rt), (LINE, LINE));
    }

    #[test]
    fn a_cnp_flood_never_takes_the_rate_below_the_minimum() {
        let p = RpParams::default();
        let mut d = Dcqcn::new(&p, LINE);
        for i in 0..100_000u64 {
            d.on_cnp(&p, LINE, Instant::from_nanos(i * 5000));
        }
        assert_eq!(d.rc, 1000, "rpg_min_rate 1 Mb/s");
        assert_eq!(d.rate_mbps(), 1);
    }

    #[test]
    fn first_cnp_rate_and_min_dec_fac() {
        let p = RpParams {
            rate_to_set_on_first_cnp: 5000,
            rpg_min_dec_fac: 100,
            ..RpParams::default()
        };
        let mut d = Dcqcn::new(&p, LINE);
        d.on_cnp(&p, LINE, us(0));
        assert_eq!(d.rc, 5_000_000, "min_dec_fac 100: no cut beyond the first CNP's rate");
        let p = RpParams { rpg_max_rate: 10_000, ..RpParams::default() };
        let d = Dcqcn::new(&p, LINE);
        assert_eq!(d.rc, 10_000_000, "rpg_max_rate caps the line");
    }

    /// Any parameters, any events: the rate stays within
    /// [rpg_min_rate, highest], never 0, and comes back to the highest
    /// rate once CNPs stop (or stays at a positive target).
    #[test]
    fn no_parameter_setting_breaks_the_rate_bounds() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..300 {
            let mut r = |m: u64| (next() % m) as u32;
            let p = RpParams {
                enabled: true,
                rpg_time_reset: r(2000),
                rpg_byte_reset: r(100_000),
                rpg_threshold: r(10),
                rpg_max_rate: r(200_000),
                rpg_ai_rate: r(1000),
                rpg_hai_rate: r(5000),
                rpg_gd: r(70),
                rpg_min_dec_fac: r(150),
                rpg_min_rate: r(100_000),
                rate_to_set_on_first_cnp: r(100_000),
                dce_tcp_g: r(2000),
                dce_tcp_rtt: r(100),
                rate_reduce_monitor_period: r(100),
                initial_alpha_value: r(2000),
            };
            let line = 1 + next() % 400_000_000;
            let (min, max) = bounds(&p, line);
            let mut d = Dcqcn::new(&p, line);
            let mut now = 0u64;
            for _ in 0..400 {
                now += next() % 50_000;
                if next() % 3 == 0 {
                    d.on_cnp(&p, line, Instant::from_nanos(now));
                } else {
                    d.on_sent(&p, line, Instant::from_nanos(now), (next() % 9000) as usize);
                }
                assert!(d.rc >= min && d.rc <= max && d.rc > 0, "{p:?} line {line}: {d:?}");
                assert!(d.rt >= min && d.rt <= max, "{p:?} line {line}: {d:?}");
                assert!(d.alpha <= ONE);
            }
            // CNPs stop: within a simulated minute the rate is back up
            // (or at its target when the increase steps are zero)
            let end = Instant::from_nanos(now) + Duration::from_secs(60);
            d.on_sent(&p, line, end, 64);
            assert!(!d.limited || d.rc >= d.rt.min(max) / 2, "{p:?} line {line}: {d:?}");
        }
    }
}
