//! Device configuration: which devices this host has ([`DeviceConfig`]),
//! read from the environment, a file or the API, and what moves each
//! one's frames ([`TransportKind`]). [`crate::open`] opens them.
//!
//! ```no_run
//! use roce_host::DeviceConfig;
//! let dev = DeviceConfig::udp("roce0", "127.0.0.2".parse().unwrap()).open().unwrap();
//! let ctx = dev.open();
//! assert_eq!(ctx.query_gid(1).unwrap().to_string(), "::ffff:127.0.0.2");
//! ```
//!
//! Where devices come from (see `docs/devices.md`), first match wins:
//! 1. `ROCE_EMU_DEVICES="roce0=udp:127.0.0.2,roce1=udp:127.0.0.3"`;
//! 2. the file named by `ROCE_EMU_CONFIG`, else
//!    `$XDG_CONFIG_HOME/roce-emu/devices.conf` (or `~/.config/roce-emu/devices.conf`);
//! 3. the API ([`DeviceConfig::udp`] and friends).
//!
//! `ROCE_EMU_PCAP=DIR` makes every device opened with [`DeviceConfig::open`]
//! record all its frames to `DIR/<name>-<addr>.pcap` (unless its
//! configuration names a pcap file already).
//!
//! Every opened device publishes its counters for `roce stats` (see
//! [`crate::publish`]; `ROCE_EMU_STATS=0` turns it off).

use roce_emulator::{HcaConfig, PathMtu};
use roce_transport::EngineConfig;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Environment variable listing devices (`name=kind:addr[,...]`).
pub const ENV_DEVICES: &str = "ROCE_EMU_DEVICES";
/// Environment variable naming the configuration file.
pub const ENV_CONFIG: &str = "ROCE_EMU_CONFIG";
/// The devices when nothing is configured: two UDP devices on loopback
/// addresses, enough for a server and a client on one machine.
pub const DEFAULT_DEVICES: &str = "roce0=udp:127.0.0.2,roce1=udp:127.0.0.3";
/// Environment variable naming a directory where every device records a pcap.
pub use roce_verbs_api::ENV_PCAP;

/// What moves a configured device's frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportKind {
    /// A plain UDP socket bound to the device address (no privileges).
    Udp,
    /// A raw (AF_PACKET) socket on a network interface
    /// ([`roce_transport::RawTransport`]; needs CAP_NET_RAW, otherwise
    /// opening fails with [`crate::OpenError::Raw`]).
    Raw {
        /// The interface, e.g. `eth0`.
        ifname: String,
    },
    /// A device on a simulated fabric (`roce_sim::SimNet`); it cannot be
    /// opened alone.
    Sim,
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportKind::Udp => f.write_str("udp"),
            TransportKind::Raw { ifname } => write!(f, "raw:{ifname}"),
            TransportKind::Sim => f.write_str("sim"),
        }
    }
}

/// One device's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// The device name (`-d NAME` of the tools).
    pub name: String,
    /// The transport.
    pub transport: TransportKind,
    /// The port's IP address (its RoCEv2 GID is GID index 1).
    pub addr: IpAddr,
    /// Local UDP port (4791; peers always send to 4791).
    pub port: u16,
    /// Record every frame to this pcap file.
    pub pcap: Option<PathBuf>,
    /// The port's active MTU (default 1024, as rxe on a 1500-byte Ethernet).
    pub mtu: PathMtu,
    /// A broken IBA rule for `roce conform`'s self-check
    /// ([`roce_emulator::mutant`]); never set from the environment or a
    /// configuration file. Only with the `mutants` feature.
    #[cfg(feature = "mutants")]
    pub mutant: Option<roce_emulator::Mutant>,
}

/// A configuration that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A device entry is malformed.
    #[error("{origin}: {msg}")]
    Syntax {
        /// Where the entry came from (`ROCE_EMU_DEVICES`, `FILE:LINE`).
        origin: String,
        /// What is wrong.
        msg: String,
    },
    /// The configuration file could not be read.
    #[error("cannot read {path}: {msg}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        msg: String,
    },
}

fn mtu_from_bytes(v: &str) -> Option<PathMtu> {
    match v.trim() {
        "256" => Some(PathMtu::Mtu256),
        "512" => Some(PathMtu::Mtu512),
        "1024" => Some(PathMtu::Mtu1024),
        "2048" => Some(PathMtu::Mtu2048),
        "4096" => Some(PathMtu::Mtu4096),
        _ => None,
    }
}

impl DeviceConfig {
    /// A UDP device `name` at `addr`, port 4791, active MTU 1024, no pcap.
    pub fn udp(name: impl Into<String>, addr: IpAddr) -> DeviceConfig {
        DeviceConfig {
            name: name.into(),
            transport: TransportKind::Udp,
            addr,
            port: roce_transport::DEFAULT_PORT,
            pcap: None,
            mtu: PathMtu::Mtu1024,
            #[cfg(feature = "mutants")]
            mutant: None,
        }
    }

    /// Parse one `ROCE_EMU_DEVICES` entry value: `udp:ADDR[:PORT]` (an IPv6
    /// address with a port in brackets: `udp:[fd00::1]:4791`),
    /// `raw:IFNAME:ADDR` or `sim:ADDR`; a bare address means `udp:ADDR`.
    pub fn parse_spec(name: &str, spec: &str) -> Result<DeviceConfig, String> {
        let name = name.trim();
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == '=' || c == ',') {
            return Err(format!("bad device name {name:?}"));
        }
        let spec = spec.trim();
        let (kind, rest) = match spec.split_once(':') {
            Some((k @ ("udp" | "raw" | "sim"), rest)) => (k, rest),
            _ => ("udp", spec),
        };
        let mut cfg = DeviceConfig::udp(name, IpAddr::from([0, 0, 0, 0]));
        match kind {
            "raw" => {
                let (ifname, addr) = rest
                    .split_once(':')
                    .ok_or_else(|| format!("expected raw:IFNAME:ADDR, got {spec:?}"))?;
                cfg.transport = TransportKind::Raw { ifname: ifname.to_string() };
                cfg.addr = parse_addr(addr)?;
            }
            "sim" => {
                cfg.transport = TransportKind::Sim;
                cfg.addr = parse_addr(rest)?;
            }
            _ => {
                if let Ok(sa) = rest.parse::<SocketAddr>() {
                    cfg.addr = sa.ip();
                    cfg.port = sa.port();
                } else if let Ok(ip) = rest.parse::<IpAddr>() {
                    cfg.addr = ip;
                } else if let Some((a, p)) = rest.rsplit_once(':') {
                    cfg.addr = parse_addr(a)?;
                    cfg.port = p.parse().map_err(|_| format!("bad port {p:?}"))?;
                } else {
                    return Err(format!("bad address {rest:?}"));
                }
            }
        }
        if cfg.addr.is_unspecified() {
            return Err(format!("unspecified address in {spec:?}: name a local address"));
        }
        Ok(cfg)
    }

    /// Parse a `ROCE_EMU_DEVICES` value: comma-separated `NAME=SPEC`
    /// entries (see [`DeviceConfig::parse_spec`]).
    pub fn parse_env_list(value: &str) -> Result<Vec<DeviceConfig>, ConfigError> {
        let mut out = Vec::new();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let err = |msg: String| ConfigError::Syntax { origin: ENV_DEVICES.into(), msg };
            let (name, spec) = entry
                .split_once('=')
                .ok_or_else(|| err(format!("expected NAME=SPEC, got {entry:?}")))?;
            out.push(DeviceConfig::parse_spec(name, spec).map_err(err)?);
        }
        Ok(out)
    }

    /// Parse a configuration file (INI style, see `docs/devices.md`):
    ///
    /// ```text
    /// # comment
    /// [roce0]
    /// transport = udp          # udp | raw | sim
    /// addr = 127.0.0.2
    /// port = 4791              # optional
    /// ifname = eth0            # raw only
    /// mtu = 1024               # optional active MTU
    /// pcap = /tmp/roce0.pcap   # optional
    /// ```
    pub fn parse_file(text: &str, origin: &str) -> Result<Vec<DeviceConfig>, ConfigError> {
        let mut out: Vec<DeviceConfig> = Vec::new();
        let mut kinds: Vec<(String, Option<String>)> = Vec::new();
        let mut has_addr: Vec<bool> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let err =
                |msg: String| ConfigError::Syntax { origin: format!("{origin}:{}", i + 1), msg };
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                let name = name.trim();
                if name.is_empty() || name.contains(char::is_whitespace) {
                    return Err(err(format!("bad device name {name:?}")));
                }
                if out.iter().any(|d| d.name == name) {
                    return Err(err(format!("device {name} defined twice")));
                }
                out.push(DeviceConfig::udp(name, IpAddr::from([0, 0, 0, 0])));
                kinds.push(("udp".into(), None));
                has_addr.push(false);
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| err(format!("expected KEY = VALUE, got {line:?}")))?;
            let (k, v) = (k.trim(), v.trim());
            let Some(dev) = out.last_mut() else {
                return Err(err("a [name] section must come first".into()));
            };
            let last = kinds.len() - 1;
            match k {
                "transport" => match v {
                    "udp" | "raw" | "sim" => kinds[last].0 = v.to_string(),
                    _ => return Err(err(format!("unknown transport {v:?} (udp, raw, sim)"))),
                },
                "addr" => {
                    dev.addr = parse_addr(v).map_err(err)?;
                    has_addr[last] = true;
                }
                "port" => dev.port = v.parse().map_err(|_| err(format!("bad port {v:?}")))?,
                "ifname" => kinds[last].1 = Some(v.to_string()),
                "mtu" => {
                    dev.mtu = mtu_from_bytes(v)
                        .ok_or_else(|| err(format!("bad mtu {v:?} (256..4096)")))?
                }
                "pcap" => dev.pcap = Some(PathBuf::from(v)),
                _ => return Err(err(format!("unknown key {k:?}"))),
            }
        }
        for ((dev, (kind, ifname)), addr) in out.iter_mut().zip(kinds).zip(has_addr) {
            let err = |msg: String| ConfigError::Syntax { origin: origin.into(), msg };
            if !addr || dev.addr.is_unspecified() {
                return Err(err(format!("device {}: no addr", dev.name)));
            }
            dev.transport = match kind.as_str() {
                "raw" => TransportKind::Raw {
                    ifname: ifname
                        .ok_or_else(|| err(format!("device {}: raw needs ifname", dev.name)))?,
                },
                "sim" => TransportKind::Sim,
                _ => TransportKind::Udp,
            };
        }
        Ok(out)
    }

    /// The configuration file to read: `$ROCE_EMU_CONFIG`, else
    /// `$XDG_CONFIG_HOME/roce-emu/devices.conf`, else
    /// `$HOME/.config/roce-emu/devices.conf`.
    pub fn config_path() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os(ENV_CONFIG) {
            return Some(PathBuf::from(p));
        }
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))?;
        Some(base.join("roce-emu").join("devices.conf"))
    }

    /// Every configured device: `ROCE_EMU_DEVICES` if set, else the
    /// configuration file (a missing `ROCE_EMU_CONFIG` file is an error),
    /// else — nothing configured — [`DEFAULT_DEVICES`], so the tools and
    /// the libibverbs drop-in show devices on a bare machine.
    pub fn load_all() -> Result<Vec<DeviceConfig>, ConfigError> {
        let v = DeviceConfig::load_configured()?;
        if v.is_empty() {
            return DeviceConfig::parse_env_list(DEFAULT_DEVICES);
        }
        Ok(v)
    }

    /// The devices configured by `ROCE_EMU_DEVICES` or the configuration
    /// file, without the default (empty when nothing is configured).
    pub fn load_configured() -> Result<Vec<DeviceConfig>, ConfigError> {
        if let Ok(v) = std::env::var(ENV_DEVICES) {
            if !v.trim().is_empty() {
                return DeviceConfig::parse_env_list(&v);
            }
        }
        let Some(path) = DeviceConfig::config_path() else { return Ok(Vec::new()) };
        match std::fs::read_to_string(&path) {
            Ok(text) => DeviceConfig::parse_file(&text, &path.display().to_string()),
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && std::env::var_os(ENV_CONFIG).is_none() =>
            {
                Ok(Vec::new())
            }
            Err(e) => Err(ConfigError::Io { path, msg: e.to_string() }),
        }
    }

    /// The configured device named `name`, if any.
    pub fn find(name: &str) -> Result<Option<DeviceConfig>, ConfigError> {
        Ok(DeviceConfig::load_all()?.into_iter().find(|d| d.name == name))
    }

    /// The pcap file this device records to: its own `pcap`, else
    /// `$ROCE_EMU_PCAP/<name>-<addr>.pcap`, else none. (A process in slot
    /// `s > 0` of a shared device records to that name with `.s<s>.pcap`
    /// for its extension: `roce0-127.0.0.2.s1.pcap`.)
    pub fn effective_pcap(&self) -> Option<PathBuf> {
        if let Some(p) = &self.pcap {
            return Some(p.clone());
        }
        let dir = std::env::var_os(ENV_PCAP)?;
        if dir.is_empty() {
            return None;
        }
        let addr = self.addr.to_string().replace(':', "_");
        Some(Path::new(&dir).join(format!("{}-{}.pcap", self.name, addr)))
    }

    /// The emulator configuration of this device (for querying attributes
    /// without opening it; the key seed is random).
    pub fn hca_config(&self) -> HcaConfig {
        let mut c = HcaConfig::new(self.name.clone(), self.addr, rand::random());
        c.active_mtu = self.mtu;
        // CQs as deep as a ConnectX's (4194303; rxe allows 32767): libfabric's
        // RDM endpoints (ofi_rxm over verbs) open 262144-entry CQs by default,
        // which a kernel rxe refuses (fi_enable: EINVAL) unless the user
        // shrinks FI_UNIVERSE_SIZE. A CQ's memory grows with what it holds,
        // not with its depth.
        c.device_attr.max_cqe = MAX_CQE;
        #[cfg(feature = "mutants")]
        {
            c.mutant = self.mutant;
        }
        c
    }

    /// The engine settings [`DeviceConfig::open`] uses: a thread, and
    /// `ROCE_EMU_SPIN_US` microseconds of polling before a waiting caller or
    /// the thread sleeps (0 by default; at most 10,000).
    pub fn engine_config(&self) -> EngineConfig {
        let spin = std::env::var("ROCE_EMU_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|us| Duration::from_micros(us.min(10_000)))
            .unwrap_or(Duration::ZERO);
        EngineConfig {
            name: format!("roce-{}", self.name),
            max_idle: Duration::from_millis(20),
            caller_spin: spin,
            thread_spin: spin,
            post_batch: post_batch(),
            handoff: std::env::var("ROCE_EMU_HANDOFF_US")
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(EngineConfig::default().handoff, |us| {
                    Duration::from_micros(us.min(10_000))
                }),
            ..Default::default()
        }
    }
}

/// Entries per CQ of a real device (ConnectX's limit, see
/// [`DeviceConfig::hca_config`]).
pub const MAX_CQE: u32 = 4_194_303;

/// `ROCE_EMU_POST_BATCH_US` (default 5; 0 = every post sends at once):
/// see [`EngineConfig::post_batch`].
fn post_batch() -> Duration {
    let us = std::env::var("ROCE_EMU_POST_BATCH_US")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(5);
    Duration::from_micros(us.min(10_000))
}

/// Environment variable: `0` makes [`DeviceConfig::open`] bind a device's
/// address alone (one process per device, as before devices were shared).
pub const ENV_SHARED: &str = "ROCE_EMU_SHARED";

/// Whether [`DeviceConfig::open`] shares devices (`ROCE_EMU_SHARED`, on by
/// default).
pub fn sharing_enabled() -> bool {
    !matches!(std::env::var(ENV_SHARED).as_deref().map(str::trim), Ok("0" | "no" | "off" | "false"))
}

fn parse_addr(s: &str) -> Result<IpAddr, String> {
    let s = s.trim().trim_start_matches('[').trim_end_matches(']');
    s.parse().map_err(|_| format!("bad IP address {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_list() {
        let v = DeviceConfig::parse_env_list(
            "roce0=udp:127.0.0.2, roce1=127.0.0.3:4792,r6=udp:[fd00::1]:4791,r7=sim:10.0.0.1,r8=raw:eth0:10.0.0.2",
        )
        .unwrap();
        assert_eq!(v.len(), 5);
        assert_eq!(v[0], DeviceConfig::udp("roce0", "127.0.0.2".parse().unwrap()));
        assert_eq!((v[1].addr.to_string().as_str(), v[1].port), ("127.0.0.3", 4792));
        assert_eq!(v[2].addr.to_string(), "fd00::1");
        assert_eq!(v[3].transport, TransportKind::Sim);
        assert_eq!(v[4].transport, TransportKind::Raw { ifname: "eth0".into() });
        for bad in ["roce0", "roce0=udp:nothing", "=1.2.3.4", "a=0.0.0.0", "a=raw:10.0.0.1"] {
            assert!(DeviceConfig::parse_env_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn config_file() {
        let text = "# devices\n[roce0]\naddr = 127.0.0.2\npcap = /tmp/x.pcap # rec\n\n[eth]\ntransport = raw\nifname = eth0\naddr = 10.1.1.1\nmtu = 4096\n";
        let v = DeviceConfig::parse_file(text, "f").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].pcap.as_deref(), Some(Path::new("/tmp/x.pcap")));
        assert_eq!(v[0].port, 4791);
        assert_eq!(v[1].transport, TransportKind::Raw { ifname: "eth0".into() });
        assert_eq!(v[1].mtu, PathMtu::Mtu4096);
        let e = DeviceConfig::parse_file("[a]\naddr=1.2.3.4\nbogus=1\n", "f").unwrap_err();
        assert_eq!(e.to_string(), "f:3: unknown key \"bogus\"");
        assert!(DeviceConfig::parse_file("addr=1.2.3.4\n", "f").is_err());
        assert!(DeviceConfig::parse_file("[a]\n", "f").is_err());
        assert!(DeviceConfig::parse_file("[a]\naddr=1.2.3.4\n[a]\naddr=1.2.3.5\n", "f").is_err());
        assert!(DeviceConfig::parse_file("[a]\ntransport=raw\naddr=1.2.3.4\n", "f").is_err());
    }
}
