//! Devices on a real host: configuration ([`DeviceConfig`]), the rxe-like
//! GID table ([`gid_table`]), and the driver of real devices
//! ([`EngineDriver`], [`UdpDriver`] for UDP) that runs emulated HCAs over UDP
//! or raw sockets with a [`roce_transport::Engine`]: progress in the calling
//! thread, an engine thread for timers and devices nobody polls.
//!
//! ```no_run
//! use roce_verbs_api::udp::DeviceConfig;
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

use crate::device::Device;
use crate::driver::{Budget, Driver};
use roce_emulator::{Hca, HcaConfig, PathMtu};
use roce_transport::faults::{FaultSpec, FaultyTransport};
use roce_transport::{
    Engine, EngineConfig, EngineHandle, RawConfig, RawTransport, Transport, UdpConfig, UdpTransport,
};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Duration;

/// Environment variable listing devices (`name=kind:addr[,...]`).
pub const ENV_DEVICES: &str = "ROCE_EMU_DEVICES";
/// Environment variable naming the configuration file.
pub const ENV_CONFIG: &str = "ROCE_EMU_CONFIG";
/// The devices when nothing is configured: two UDP devices on loopback
/// addresses, enough for a server and a client on one machine.
pub const DEFAULT_DEVICES: &str = "roce0=udp:127.0.0.2,roce1=udp:127.0.0.3";
/// Environment variable naming a directory where every device records a pcap.
pub const ENV_PCAP: &str = "ROCE_EMU_PCAP";

/// What moves a configured device's frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportKind {
    /// A plain UDP socket bound to the device address (no privileges).
    Udp,
    /// A raw (AF_PACKET) socket on a network interface
    /// ([`roce_transport::RawTransport`]; needs CAP_NET_RAW, otherwise
    /// opening fails with [`OpenError::Raw`]).
    Raw {
        /// The interface, e.g. `eth0`.
        ifname: String,
    },
    /// A device on a simulated fabric ([`crate::SimNet`]); it cannot be
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

/// Opening a device failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The UDP socket could not be opened (address not local, port in use...).
    #[error("device {name}: {source}")]
    Transport {
        /// The device.
        name: String,
        /// The transport's error.
        source: roce_transport::TransportError,
    },
    /// The driver thread could not be started.
    #[error("device {name}: cannot start driver thread: {source}")]
    Thread {
        /// The device.
        name: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The raw (AF_PACKET) transport could not be opened (no CAP_NET_RAW,
    /// no such interface...).
    #[error("device {name}: {source}")]
    Raw {
        /// The device.
        name: String,
        /// The raw transport's error.
        source: roce_transport::RawError,
    },
    /// This transport cannot be opened here.
    #[error("device {name}: transport {kind} cannot be opened here ({why})")]
    Unsupported {
        /// The device.
        name: String,
        /// The transport.
        kind: TransportKind,
        /// Why.
        why: &'static str,
    },
    /// The device's address is held by processes of another user (a
    /// device is shared only between the processes of one user).
    #[error("device {name}: {addr} is in use by uid {uid}; a device is shared only between processes of one user (pick another address for this user's devices: ROCE_EMU_DEVICES)")]
    HeldByOtherUser {
        /// The device.
        name: String,
        /// Its address.
        addr: SocketAddr,
        /// The uid of the holder.
        uid: u32,
    },
    /// The device's address is bound by a process of this user that does
    /// not share it (`ROCE_EMU_SHARED=0`, an older roce-emu, another
    /// program on port 4791), or this process does not share and a group
    /// holds it.
    #[error("device {name}: {addr} is in use by a process that does not share it, or this one does not (ROCE_EMU_SHARED=0, an older roce-emu, another program on that port): every process that opens the device must share it")]
    HeldAlone {
        /// The device.
        name: String,
        /// Its address.
        addr: SocketAddr,
    },
    /// The device could not be joined (all slots in use, registry
    /// unusable).
    #[error("device {name}: {source}")]
    Join {
        /// The device.
        name: String,
        /// Why.
        source: roce_host::JoinError,
    },
    /// The steering of the shared device could not be set up.
    #[error("device {name}: cannot steer the shared device: {source}")]
    Steer {
        /// The device.
        name: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// `ROCE_EMU_FAULTS` does not parse.
    #[error("device {name}: {why}")]
    Faults {
        /// The device.
        name: String,
        /// What is wrong with the spec.
        why: String,
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
            ..Default::default()
        }
    }

    /// Open the device: bind its socket, start its engine (see
    /// [`EngineDriver`]). Dropping the last handle of the device (and of
    /// everything created on it) stops the engine and flushes the pcap.
    pub fn open(&self) -> Result<Device, OpenError> {
        let opts = GroupOptions {
            engine: self.engine_config(),
            share: sharing_enabled(),
            ..GroupOptions::default()
        };
        let mut v = DeviceConfig::open_group(std::slice::from_ref(self), opts)?;
        v.pop().ok_or_else(|| OpenError::Unsupported {
            name: self.name.clone(),
            kind: self.transport.clone(),
            why: "no device made",
        })
    }

    /// Open several devices on **one** engine (one thread, or none with
    /// `opts.engine.thread` off): a benchmark's two devices that one thread
    /// drives (`roce perf --poll busy`). Every device is assembled the same
    /// way as [`DeviceConfig::open`]'s.
    pub fn open_group(cfgs: &[DeviceConfig], opts: GroupOptions) -> Result<Vec<Device>, OpenError> {
        let mut parts = Vec::with_capacity(cfgs.len());
        let mut joins = Vec::new();
        for (i, c) in cfgs.iter().enumerate() {
            let (core, t, join) = c.assemble(opts.share)?;
            if let Some(j) = join {
                joins.push((i, c.name.clone(), j));
            }
            parts.push((core, t));
        }
        let kind = match cfgs.first().map(|c| &c.transport) {
            Some(TransportKind::Raw { .. }) => "raw",
            _ => "udp",
        };
        let name = cfgs.first().map(|c| c.name.clone()).unwrap_or_default();
        let cores: Vec<Arc<Mutex<Hca>>> = parts.iter().map(|(h, _)| h.clone()).collect();
        let drv = EngineDriver::new(parts, opts.engine, kind)
            .map_err(|source| OpenError::Thread { name, source })?;
        let drv = match opts.ack_delay {
            Some(d) => drv.with_ack_delay(d, &cores),
            None => drv,
        };
        let publishers = match opts.publish {
            true => {
                let shared = !joins.is_empty();
                cores
                    .iter()
                    .filter_map(|h| crate::publish::Publisher::start(h.clone(), shared))
                    .collect()
            }
            false => Vec::new(),
        };
        // The engine runs and answers probes: map each shared device's
        // group with this member in it.
        let mut stewards = Vec::new();
        for (i, name, (join, sock)) in joins {
            let st = match sock {
                MemberSocket::Udp(s) => join.finish(s),
                MemberSocket::Raw(s) => join.finish_raw(s),
            }
            .map_err(|source| OpenError::Steer { name, source })?;
            stewards.push((cores[i].clone(), st));
        }
        let drv = Arc::new(drv.with_publishers(publishers).with_stewards(stewards));
        Ok(cores.into_iter().map(|h| Device::new(h, drv.clone())).collect())
    }

    /// Make the device's core and bind its transport, each configured for
    /// the other: the one place a real device is put together.
    fn assemble(&self, share: bool) -> Result<Assembled, OpenError> {
        let mut hcfg = self.hca_config();
        let share = share && self.transport != TransportKind::Sim;
        let join = match share {
            true => {
                let at = SocketAddr::new(self.addr, self.port);
                let j = match &self.transport {
                    TransportKind::Raw { ifname } => roce_host::Joining::start_raw(ifname, at),
                    _ => roce_host::Joining::start(at),
                }
                .map_err(|source| OpenError::Join { name: self.name.clone(), source })?;
                hcfg.qpns = j.qpns();
                hcfg.first_qpn = j.first_qpn();
                hcfg.comm_id_tag = Some(j.slot());
                Some(j)
            }
            false => None,
        };
        let mut member = None;
        let mut core = Hca::new(hcfg);
        // seeded fault injection on the real wire (ROCE_EMU_FAULTS)
        let faults = FaultSpec::from_env()
            .map_err(|why| OpenError::Faults { name: self.name.clone(), why })?
            .filter(FaultSpec::is_active);
        let t: Box<dyn Transport> = match &self.transport {
            TransportKind::Udp => {
                let local = SocketAddr::new(self.addr, self.port);
                let mut uc = UdpConfig::new(local);
                uc.pcap = self.effective_pcap();
                uc.reuseport = join.is_some();
                // the members of a shared device record to files of their own
                // (slot 0 keeps the unshared name)
                if let (Some(j), Some(p)) = (&join, &uc.pcap) {
                    if j.slot() > 0 {
                        uc.pcap = Some(p.with_extension(format!("s{}.pcap", j.slot())));
                    }
                }
                let mut t =
                    UdpTransport::bind(uc).map_err(|source| self.bind_error(local, source))?;
                if let Some(j) = join {
                    t.set_steer(j.tap());
                    let sock = t
                        .try_clone_socket()
                        .map_err(|source| OpenError::Steer { name: self.name.clone(), source })?;
                    member = Some((j, MemberSocket::Udp(sock)));
                }
                // The transport verifies every ICRC it delivers, so the core
                // need not (not with injected faults, which may corrupt after
                // that check).
                if faults.is_none() && t.config().rx_icrc != roce_transport::RxIcrcPolicy::Off {
                    core.set_rx_icrc_checked(true);
                }
                // The socket sends from its own port: ICRCs computed for it
                // need no adjustment.
                core.set_tx_src_port(Some(t.local_addr().port()));
                // The socket gathers payloads from region memory into its
                // sends: large payloads are not copied into packets.
                core.set_tx_region_bodies(true);
                Box::new(t)
            }
            TransportKind::Raw { ifname } => {
                let mut rc = RawConfig::new(ifname.clone(), self.addr);
                rc.port = self.port;
                rc.pcap = self.effective_pcap();
                rc.shared = join.is_some();
                if let (Some(j), Some(p)) = (&join, &rc.pcap) {
                    if j.slot() > 0 {
                        rc.pcap = Some(p.with_extension(format!("s{}.pcap", j.slot())));
                    }
                }
                let mut t = RawTransport::open(rc)
                    .map_err(|source| OpenError::Raw { name: self.name.clone(), source })?;
                if let Some(j) = join {
                    t.set_steer(j.tap(), j.answer_gate());
                    let sock = t
                        .try_clone_socket()
                        .map_err(|source| OpenError::Steer { name: self.name.clone(), source })?;
                    member = Some((j, MemberSocket::Raw(sock)));
                }
                // Exact receive-side ICRC checks on the real IP header (unless
                // injected faults may corrupt frames after that check).
                if faults.is_none() {
                    core.set_rx_icrc_checked(true);
                }
                Box::new(t)
            }
            k @ TransportKind::Sim => {
                return Err(OpenError::Unsupported {
                    name: self.name.clone(),
                    kind: k.clone(),
                    why: "simulated devices live on a SimNet: use SimNet::add_device",
                })
            }
        };
        // A positive ACK still queued when a newer one for the same QP is
        // due is replaced by it: the one ACK policy of real devices (off in
        // the simulator, whose replays keep rxe's one ACK per request).
        core.set_ack_coalescing(true);
        let t = match faults {
            Some(f) => {
                Box::new(FaultyTransport::new(t, f, self.name.clone())) as Box<dyn Transport>
            }
            None => t,
        };
        Ok((Arc::new(Mutex::new(core)), t, member))
    }

    /// The error of a failed bind: when another user's processes hold the
    /// address, say so (sockets of one `SO_REUSEPORT` group must all
    /// belong to one user).
    fn bind_error(&self, local: SocketAddr, source: roce_transport::TransportError) -> OpenError {
        let in_use = matches!(&source, roce_transport::TransportError::Bind { source: e, .. }
            if e.kind() == std::io::ErrorKind::AddrInUse);
        let me = nix::unistd::getuid().as_raw();
        match roce_host::registry::udp_owner(local) {
            Some(uid) if in_use && uid != me => {
                OpenError::HeldByOtherUser { name: self.name.clone(), addr: local, uid }
            }
            Some(_) if in_use => OpenError::HeldAlone { name: self.name.clone(), addr: local },
            _ => OpenError::Transport { name: self.name.clone(), source },
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

/// A device's core and its transport, configured for each other, and for
/// a shared device the joining member with a handle on its socket.
type Assembled = (Arc<Mutex<Hca>>, Box<dyn Transport>, Option<(roce_host::Joining, MemberSocket)>);

/// A second handle on a shared device member's socket, for its steering.
enum MemberSocket {
    /// The UDP socket in the device's `SO_REUSEPORT` group.
    Udp(std::net::UdpSocket),
    /// The raw transport's packet socket.
    Raw(std::os::fd::OwnedFd),
}

/// How [`DeviceConfig::open_group`] runs its devices.
#[derive(Clone, Debug)]
pub struct GroupOptions {
    /// The engine (thread or not, spinning).
    pub engine: EngineConfig,
    /// Hold positive ACKs this long ([`EngineDriver::with_ack_delay`]).
    pub ack_delay: Option<Duration>,
    /// Publish each device's counters for `roce stats` ([`crate::publish`]).
    pub publish: bool,
    /// Join each UDP device's group of processes (see `roce_host`): other
    /// processes may open the same device at once. Off, the device binds
    /// its address alone, as one process's device.
    pub share: bool,
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            engine: EngineConfig::default(),
            ack_delay: None,
            publish: true,
            share: false,
        }
    }
}

/// Environment variable: `0` makes [`DeviceConfig::open`] bind a device's
/// address alone (one process per device, as before devices were shared).
pub const ENV_SHARED: &str = "ROCE_EMU_SHARED";

/// Whether [`DeviceConfig::open`] shares devices (`ROCE_EMU_SHARED`, on by
/// default).
pub fn sharing_enabled() -> bool {
    !matches!(std::env::var(ENV_SHARED).as_deref().map(str::trim), Ok("0" | "no" | "off" | "false"))
}

impl Device {
    /// Open a configured device (same as [`DeviceConfig::open`]).
    pub fn open_udp(cfg: &DeviceConfig) -> Result<Device, OpenError> {
        cfg.open()
    }
}

fn parse_addr(s: &str) -> Result<IpAddr, String> {
    let s = s.trim().trim_start_matches('[').trim_end_matches(']');
    s.parse().map_err(|_| format!("bad IP address {s:?}"))
}

/// The MAC address a device at `addr` pretends to have: `02:00` and the
/// last four address bytes (the same as the pcap recorder's frames).
pub use roce_emulator::objects::{eui64, gid_table, mac_of};

/// The node GUID of a device at `addr` (the EUI-64 of its MAC, as rxe).
pub fn node_guid(addr: IpAddr) -> u64 {
    u64::from_be_bytes(eui64(mac_of(addr)))
}

/// The RoCEv2 GID of an address (`::ffff:a.b.c.d` for IPv4).
pub fn roce_v2_gid(addr: IpAddr) -> Ipv6Addr {
    roce_emulator::objects::gid_of(addr)
}

/// The device address a GID names: an ordinary RoCEv2 GID (IPv4-mapped
/// or a global IPv6 address) names itself; the link-local GID of an
/// emulated IPv4 device (index 0 of [`gid_table`]: `fe80::` + the EUI-64 of
/// its MAC `02:00:a:b:c:d`) names the device's address `a.b.c.d`, so a
/// program that addresses a peer by GID index 0, as rdma-core's tests do
/// by default, reaches it over UDP.
pub fn gid_to_addr(gid: Ipv6Addr) -> IpAddr {
    if let Some(v4) = gid.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let o = gid.octets();
    if o[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0]
        && o[8] == 0
        && o[9] == 0
        && o[11] == 0xff
        && o[12] == 0xfe
    {
        return IpAddr::V4(std::net::Ipv4Addr::new(o[10], o[13], o[14], o[15]));
    }
    IpAddr::V6(gid)
}

/// The verbs [`Driver`] of real devices: a [`roce_transport::Engine`] over
/// one or more (core, transport) pairs, UDP or raw.
///
/// Progress happens in the caller's thread (see `transport/README.md`,
/// "Progress in the caller's thread"): [`Driver::kick_device`] (after
/// `post_send`) sends the posted packets from the posting thread;
/// [`Driver::progress`] (`poll_blocking`, the completion-channel wait, the
/// CM's waits) receives and processes datagrams itself, spinning for
/// [`EngineConfig::caller_spin`] and then sleeping on the sockets;
/// [`Driver::poll_once`] (an empty `ibv_poll_cq`) runs one non-blocking
/// round. The engine's thread (unless [`EngineConfig::thread`] is off)
/// fires timers and moves the frames of devices nobody polls, and wakes
/// async tasks ([`Driver::register_waker`]) after every round with progress.
pub struct EngineDriver<T: Transport = UdpTransport> {
    // dropped before `publishers`: the final snapshot follows the last round
    e: EngineHandle<Hca, T>,
    wakers: Arc<Mutex<Vec<Waker>>>,
    name: String,
    threaded: bool,
    publishers: Vec<crate::publish::Publisher>,
    // dropped after `e`: a member leaves its device's group once its
    // engine has stopped
    stewards: Vec<(Arc<Mutex<Hca>>, roce_host::Steward)>,
}

/// The driver of UDP devices.
pub type UdpDriver = EngineDriver<UdpTransport>;

impl<T: Transport> Drop for EngineDriver<T> {
    /// A member of a shared device stops its steward and says it is leaving
    /// while the engine still runs; the fields then drop in order: the
    /// engine stops, the stewards leave their groups.
    fn drop(&mut self) {
        for (_, st) in &mut self.stewards {
            st.prepare_leave();
        }
    }
}

impl<T: Transport> fmt::Debug for EngineDriver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineDriver").field("local", &self.e.local_addrs()).finish()
    }
}

impl<T: Transport> EngineDriver<T> {
    /// Start an engine for these devices (core and transport each); `name`
    /// is what [`Driver::name`] reports (`"udp"`, `"raw"`).
    pub fn new(
        devices: Vec<(Arc<Mutex<Hca>>, T)>,
        cfg: EngineConfig,
        name: &str,
    ) -> std::io::Result<EngineDriver<T>> {
        let threaded = cfg.thread;
        let e = Engine::new(devices, cfg)?.with_idle_hook(Hca::flush_acks).start()?;
        let wakers: Arc<Mutex<Vec<Waker>>> = Arc::new(Mutex::new(Vec::new()));
        let w = wakers.clone();
        // (without a thread nobody registers wakers: no hook, no cost per round)
        if threaded {
            e.on_progress(move || {
                let list: Vec<Waker> = {
                    let mut g = w.lock().unwrap_or_else(|e| e.into_inner());
                    if g.is_empty() {
                        return;
                    }
                    std::mem::take(&mut *g)
                };
                for wk in list {
                    wk.wake();
                }
            });
        }
        Ok(EngineDriver {
            e,
            wakers,
            name: name.to_string(),
            threaded,
            publishers: Vec::new(),
            stewards: Vec::new(),
        })
    }

    /// Publish the devices' counters while this driver runs (see
    /// [`crate::publish`]); [`DeviceConfig::open`] does this for every device.
    pub fn with_publishers(mut self, p: Vec<crate::publish::Publisher>) -> EngineDriver<T> {
        self.publishers = p;
        self
    }

    /// Keep the stewards of shared devices ([`roce_host::Steward`]) until
    /// the engine has stopped.
    pub fn with_stewards(
        mut self,
        s: Vec<(Arc<Mutex<Hca>>, roce_host::Steward)>,
    ) -> EngineDriver<T> {
        self.stewards = s;
        self
    }

    /// The steward of the shared device whose core is `hca`.
    pub fn steward_of(&self, hca: &Arc<Mutex<Hca>>) -> Option<&roce_host::Steward> {
        self.stewards.iter().find(|(h, _)| Arc::ptr_eq(h, hca)).map(|(_, s)| s)
    }

    /// Hold positive ACKs back (default: they leave with the round that
    /// made them), so that one ACK covers several requests (IBA allows a
    /// responder to coalesce acknowledgements): each core holds them
    /// ([`Hca::set_ack_delay`]) and they ride with the next request once `d`
    /// old, leave alone at `2 d` (a timer deadline), after 16 PSNs, and when
    /// the engine goes idle. The peer's send completions are delayed by as
    /// much; its send queue must be deep enough.
    pub fn with_ack_delay(self, d: Duration, cores: &[Arc<Mutex<Hca>>]) -> EngineDriver<T> {
        for c in cores {
            c.lock().unwrap_or_else(|e| e.into_inner()).set_ack_delay(Some(d));
        }
        self
    }

    /// The engine (counters, local addresses, progress count).
    pub fn engine(&self) -> &Engine<Hca, T> {
        &self.e
    }
}

impl<T: Transport> Driver for EngineDriver<T> {
    fn name(&self) -> &str {
        &self.name
    }

    fn kick(&self) {
        self.e.flush(None);
    }

    fn kick_device(&self, hca: &Arc<Mutex<Hca>>) {
        // Only the posting device (and those with unannounced work).
        self.e.flush(Some(hca));
    }

    // Posting a receive sends nothing: no flush.
    fn recv_posted(&self) {}

    fn poll_once(&self) {
        self.e.round();
    }

    fn transport_counters(
        &self,
        hca: &Arc<Mutex<Hca>>,
    ) -> Option<Arc<roce_transport::TransportCounters>> {
        self.e.counters_of(hca)
    }

    fn now(&self) -> Option<roce_emulator::Instant> {
        Some(self.e.now())
    }

    fn progress(&self, cond: &mut dyn FnMut() -> bool, budget: Budget) -> bool {
        self.e.progress(cond, budget.wall)
    }

    fn host_listen(
        &self,
        hca: &Arc<Mutex<Hca>>,
        service_id: u64,
    ) -> std::io::Result<Option<crate::driver::HostHold>> {
        match self.steward_of(hca) {
            Some(st) => Ok(Some(Box::new(st.listen(service_id)?))),
            None => Ok(None),
        }
    }

    fn register_waker(&self, waker: &Waker) -> bool {
        if !self.threaded {
            return false;
        }
        let mut g = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
        if !g.iter().any(|w| w.will_wake(waker)) {
            g.push(waker.clone());
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_table_like_rxe() {
        // rxe: MAC 52:54:00:77:00:02 -> GID[0] fe80::5054:ff:fe77:2, GUID 5054:00ff:fe77:0002
        let e = eui64([0x52, 0x54, 0x00, 0x77, 0x00, 0x02]);
        assert_eq!(e, [0x50, 0x54, 0x00, 0xff, 0xfe, 0x77, 0x00, 0x02]);
        let t = gid_table("127.0.0.2".parse().unwrap());
        assert_eq!(t[0].to_string(), "fe80::7fff:fe00:2");
        assert_eq!(t[1].to_string(), "::ffff:127.0.0.2");
        assert_eq!(node_guid("127.0.0.2".parse().unwrap()), 0x0000_7fff_fe00_0002);
        let t6 = gid_table("fd00::5".parse().unwrap());
        assert_eq!(t6[1].to_string(), "fd00::5");
        assert_eq!(gid_to_addr(t[1]), "127.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(gid_to_addr(t[0]), "127.0.0.2".parse::<IpAddr>().unwrap());
        let other: Ipv6Addr = "fe80::1234:56ff:fe78:9abc".parse().unwrap();
        assert_eq!(gid_to_addr(other), IpAddr::V6(other), "a real NIC's link-local GID");
    }

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
