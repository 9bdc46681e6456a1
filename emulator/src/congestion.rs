//! RoCEv2 congestion management (IBA Annex A17.9), the NIC's part:
//!
//! - every RoCE packet leaves ECN-capable ([`Ecn`], ECT(0) by default, as
//!   NICs send with ECN on);
//! - **notification point**: a received packet of a QP whose IP header
//!   says Congestion Experienced (a switch marked it) is counted
//!   (`np_ecn_marked_roce_packets`) and answered with a CNP to the QP
//!   that sent it, at most one per QP per `min_time_between_cnps`
//!   (`np_cnp_sent`);
//! - **reaction point**: a CNP for a QP cuts its rate and paces its
//!   packets ([`crate::dcqcn`]; `rp_cnp_handled`, or `rp_cnp_ignored`
//!   when the reaction point is off for it).
//!
//! A CNP (A17.9.3): BTH opcode 0x81, P_Key 0xFFFF, BECN set, destination
//! QP the sender's QP, A 0, PSN 0, 16 reserved zero bytes, ICRC; it is
//! never acknowledged. It leaves before any other packet of the device,
//! from the IP DSCP `cnp_dscp`, not ECN-capable.
//!
//! Configured per device ([`CongestionConfig`], on by default) and per QP
//! ([`QpCc`], `Hca::set_qp_congestion`); the names and defaults are
//! mlx5's (`roce_np` / `roce_rp`), and [`CongestionConfig::set`] takes
//! them by name (`ROCE_EMU_CC=rpg_ai_rate=10,min_time_between_cnps=4`).

pub use crate::dcqcn::{Dcqcn, RpParams};
use crate::time::Instant;
use core::time::Duration;

/// The IP ECN field: the low two bits of the IPv4 TOS byte or the IPv6
/// traffic class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ecn {
    /// 00: not ECN-capable (a congested switch drops it instead of
    /// marking it).
    NotEct,
    /// 10: ECN-capable transport (0), what NICs send.
    #[default]
    Ect0,
    /// 01: ECN-capable transport (1).
    Ect1,
}

/// The ECN field's Congestion Experienced codepoint (11).
pub const CE: u8 = 0b11;

/// The ECN field of a TOS / traffic class byte says Congestion Experienced.
pub const fn is_ce(tos: u8) -> bool {
    tos & 3 == CE
}

impl Ecn {
    /// The two bits of the field.
    pub const fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0b00,
            Ecn::Ect0 => 0b10,
            Ecn::Ect1 => 0b01,
        }
    }

    /// `off` / `not-ect`, `ect0` / `ect(0)`, `ect1` / `ect(1)`.
    pub fn parse(s: &str) -> Option<Ecn> {
        match s.to_ascii_lowercase().as_str() {
            "off" | "0" | "not-ect" | "notect" => Some(Ecn::NotEct),
            "ect0" | "ect(0)" | "on" | "1" => Some(Ecn::Ect0),
            "ect1" | "ect(1)" => Some(Ecn::Ect1),
            _ => None,
        }
    }

    /// `tos` with its ECN field set to this codepoint.
    pub const fn mark(self, tos: u8) -> u8 {
        (tos & !3) | self.bits()
    }
}

/// The notification point's parameters (mlx5's `roce_np`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NpParams {
    /// CE-marked packets are answered with CNPs. Off: they are only
    /// counted.
    pub enabled: bool,
    /// µs between two CNPs to the same QP at least (50).
    pub min_time_between_cnps: u32,
    /// The DSCP of CNPs (48).
    pub cnp_dscp: u8,
}

impl Default for NpParams {
    fn default() -> NpParams {
        NpParams { enabled: true, min_time_between_cnps: 50, cnp_dscp: 48 }
    }
}

/// A device's congestion management: what it sends, its notification and
/// reaction points, and the line rate DCQCN counts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CongestionConfig {
    /// The ECN field of every packet but CNPs (`ecn`).
    pub ecn: Ecn,
    pub np: NpParams,
    pub rp: RpParams,
    /// The port's line rate, Mb/s (`line_rate`; 100 000).
    pub line_rate_mbps: u64,
}

impl Default for CongestionConfig {
    fn default() -> CongestionConfig {
        CongestionConfig {
            ecn: Ecn::Ect0,
            np: NpParams::default(),
            rp: RpParams::default(),
            line_rate_mbps: 100_000,
        }
    }
}

/// Every name [`CongestionConfig::set`] takes, in the order `roce stats`
/// and the docs list them.
pub const KEYS: &[&str] = &[
    "ecn",
    "np",
    "rp",
    "line_rate",
    "min_time_between_cnps",
    "cnp_dscp",
    "rpg_time_reset",
    "rpg_byte_reset",
    "rpg_threshold",
    "rpg_max_rate",
    "rpg_ai_rate",
    "rpg_hai_rate",
    "rpg_gd",
    "rpg_min_dec_fac",
    "rpg_min_rate",
    "rate_to_set_on_first_cnp",
    "dce_tcp_g",
    "dce_tcp_rtt",
    "rate_reduce_monitor_period",
    "initial_alpha_value",
];

impl CongestionConfig {
    /// No ECN, no notification and no reaction point (a device as rxe).
    pub fn off() -> CongestionConfig {
        let mut c = CongestionConfig { ecn: Ecn::NotEct, ..CongestionConfig::default() };
        c.np.enabled = false;
        c.rp.enabled = false;
        c
    }

    /// The DCQCN paper's parameters ([`RpParams::paper`]), CNPs at most
    /// every 50 µs per QP, ECT(0).
    pub fn paper() -> CongestionConfig {
        CongestionConfig { rp: RpParams::paper(), ..CongestionConfig::default() }
    }

    /// The line rate in kbit/s.
    pub fn line_kbps(&self) -> u64 {
        self.line_rate_mbps.saturating_mul(1000).max(1)
    }

    /// Set one parameter by its name ([`KEYS`]): `ecn` takes
    /// `off|ect0|ect1`, `np` and `rp` take `on|off` (or 1/0), the others
    /// a number in their unit.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let on = |v: &str| match v {
            "on" | "1" | "true" => Ok(true),
            "off" | "0" | "false" => Ok(false),
            _ => Err(format!("{key}: expected on or off, got {v:?}")),
        };
        let num = |v: &str| -> Result<u32, String> {
            v.parse::<u32>().map_err(|_| format!("{key}: expected a number, got {v:?}"))
        };
        let rp = &mut self.rp;
        match key {
            "ecn" => {
                self.ecn = Ecn::parse(value)
                    .ok_or_else(|| format!("ecn: expected off, ect0 or ect1, got {value:?}"))?
            }
            "np" => self.np.enabled = on(value)?,
            "rp" => rp.enabled = on(value)?,
            "line_rate" => self.line_rate_mbps = u64::from(num(value)?.max(1)),
            "min_time_between_cnps" => self.np.min_time_between_cnps = num(value)?,
            "cnp_dscp" => {
                self.np.cnp_dscp = u8::try_from(num(value)?)
                    .ok()
                    .filter(|d| *d < 64)
                    .ok_or_else(|| format!("cnp_dscp: expected 0..63, got {value:?}"))?
            }
            "rpg_time_reset" => rp.rpg_time_reset = num(value)?,
            "rpg_byte_reset" => rp.rpg_byte_reset = num(value)?,
            "rpg_threshold" => rp.rpg_threshold = num(value)?,
            "rpg_max_rate" => rp.rpg_max_rate = num(value)?,
            "rpg_ai_rate" => rp.rpg_ai_rate = num(value)?,
            "rpg_hai_rate" => rp.rpg_hai_rate = num(value)?,
            "rpg_gd" => rp.rpg_gd = num(value)?,
            "rpg_min_dec_fac" => rp.rpg_min_dec_fac = num(value)?,
            "rpg_min_rate" => rp.rpg_min_rate = num(value)?,
            "rate_to_set_on_first_cnp" => rp.rate_to_set_on_first_cnp = num(value)?,
            "dce_tcp_g" => rp.dce_tcp_g = num(value)?,
            "dce_tcp_rtt" => rp.dce_tcp_rtt = num(value)?,
            "rate_reduce_monitor_period" => rp.rate_reduce_monitor_period = num(value)?,
            "initial_alpha_value" => rp.initial_alpha_value = num(value)?,
            _ => {
                return Err(format!(
                    "unknown congestion parameter {key:?} (known: {})",
                    KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// Apply a `key=value,key=value` list ([`CongestionConfig::set`]);
    /// `off` alone is [`CongestionConfig::off`]. Empty items are skipped.
    pub fn apply_spec(&mut self, spec: &str) -> Result<(), String> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "off" {
                *self = CongestionConfig { line_rate_mbps: self.line_rate_mbps, ..Self::off() };
                continue;
            }
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: expected key=value (e.g. rpg_ai_rate=10)"))?;
            self.set(k.trim(), v.trim())?;
        }
        Ok(())
    }
}

/// A QP's own switches (mlx5 enables congestion control per priority;
/// here per device, and per QP with `Hca::set_qp_congestion`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCc {
    /// The QP answers CE-marked packets with CNPs.
    pub np: bool,
    /// The QP's rate follows the CNPs it gets.
    pub rp: bool,
}

/// A QP's congestion state: its switches, its notification point's last
/// CNP, its reaction point and the pacer's gate.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpCongestion {
    pub sw: QpCc,
    /// When this QP last sent a CNP.
    pub last_cnp: Option<Instant>,
    pub rp: Dcqcn,
    /// The pacer holds the QP's requests until then (`None`: not held).
    pub gate: Option<Instant>,
    /// The highest rate, kbit/s.
    max: u64,
}

impl QpCongestion {
    pub fn new(cfg: &CongestionConfig) -> QpCongestion {
        let max = crate::dcqcn::bounds(&cfg.rp, cfg.line_kbps()).1;
        QpCongestion {
            sw: QpCc { np: cfg.np.enabled, rp: cfg.rp.enabled },
            last_cnp: None,
            rp: Dcqcn::at(max),
            gate: None,
            max,
        }
    }

    /// A new incarnation of the QP (RESET): its switches, nothing else.
    pub fn reset(&mut self) {
        *self = QpCongestion { last_cnp: None, rp: Dcqcn::at(self.max), gate: None, ..*self };
    }

    /// The notification point may send a CNP for a marked packet at
    /// `now` (and, if so, notes it).
    pub fn cnp_due(&mut self, np: &NpParams, now: Instant) -> bool {
        if !self.sw.np {
            return false;
        }
        let gap = Duration::from_micros(u64::from(np.min_time_between_cnps));
        if self.last_cnp.is_some_and(|t| now < t + gap) {
            return false;
        }
        self.last_cnp = Some(now);
        true
    }

    /// The pacer lets a request leave at `now` (clearing a gate that has
    /// passed).
    pub fn may_send(&mut self, now: Instant) -> bool {
        match self.gate {
            Some(g) if g > now => false,
            Some(_) => {
                self.gate = None;
                true
            }
            None => true,
        }
    }

    /// A request of `frame_bytes` left at `now`: DCQCN counts it and the
    /// pacer gates the next one while the QP is limited.
    pub fn on_sent(&mut self, cfg: &CongestionConfig, now: Instant, frame_bytes: usize) {
        if !self.sw.rp || !self.rp.limited {
            return;
        }
        self.gate =
            self.rp.on_sent(&cfg.rp, cfg.line_kbps(), now, frame_bytes).filter(|&g| g > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecn_codepoints() {
        assert_eq!(Ecn::Ect0.mark(0xb8), 0xba);
        assert_eq!(Ecn::Ect1.mark(0x03), 0x01);
        assert_eq!(Ecn::NotEct.mark(0xba), 0xb8);
        assert!(is_ce(0xbb) && !is_ce(0xba) && !is_ce(0));
        assert_eq!(Ecn::parse("ECT(1)"), Some(Ecn::Ect1));
        assert_eq!(Ecn::parse("bogus"), None);
    }

    #[test]
    fn parameters_by_name() {
        let mut c = CongestionConfig::default();
        c.apply_spec("rpg_ai_rate=10, min_time_between_cnps=4,ecn=ect1,rp=off,line_rate=40000")
            .unwrap();
        assert_eq!(c.rp.rpg_ai_rate, 10);
        assert_eq!(c.np.min_time_between_cnps, 4);
        assert_eq!(c.ecn, Ecn::Ect1);
        assert!(!c.rp.enabled && c.np.enabled);
        assert_eq!(c.line_kbps(), 40_000_000);
        c.apply_spec("off").unwrap();
        assert_eq!(c.ecn, Ecn::NotEct);
        assert!(!c.np.enabled && !c.rp.enabled);
        assert_eq!(c.line_rate_mbps, 40_000, "off keeps the line rate");
        let e = c.apply_spec("rpg_ai=3").unwrap_err();
        assert!(e.contains("unknown congestion parameter \"rpg_ai\"") && e.contains("rpg_ai_rate"));
        assert!(c.apply_spec("rpg_gd=x").unwrap_err().contains("expected a number"));
        assert!(c.apply_spec("cnp_dscp=64").unwrap_err().contains("0..63"));
        assert!(c.apply_spec("np").unwrap_err().contains("key=value"));
        for k in KEYS {
            let v = match *k {
                "ecn" => "ect0",
                "np" | "rp" => "on",
                _ => "7",
            };
            c.set(k, v).unwrap_or_else(|e| panic!("{k}: {e}"));
        }
    }

    #[test]
    fn one_cnp_per_interval() {
        let cfg = CongestionConfig::default();
        let mut q = QpCongestion::new(&cfg);
        let t = Instant::from_micros;
        assert!(q.cnp_due(&cfg.np, t(100)));
        assert!(!q.cnp_due(&cfg.np, t(149)));
        assert!(q.cnp_due(&cfg.np, t(150)));
        q.sw.np = false;
        assert!(!q.cnp_due(&cfg.np, t(1000)));
    }
}
