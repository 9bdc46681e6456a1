//! Devices on a real host: configuration ([`DeviceConfig`]), the rxe-like
//! GID table ([`gid_table`]), and the UDP driver ([`UdpDriver`]) that runs
//! an emulated HCA over a plain UDP socket with a
//! [`roce_transport::Driver`] thread.
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
use roce_transport::{DriverHandle, RawConfig, RawTransport, Transport, UdpConfig, UdpTransport};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

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
    /// `$ROCE_EMU_PCAP/<name>-<addr>.pcap`, else none.
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
        c
    }

    /// Open the device: bind its socket, start its driver thread. Dropping
    /// the last handle of the device (and of everything created on it)
    /// stops the thread and flushes the pcap.
    pub fn open(&self) -> Result<Device, OpenError> {
        // ROCE_EMU_SPIN_US: the driver polls this long before it sleeps
        // (see `DriverConfig::spin`); off by default
        let spin = std::env::var("ROCE_EMU_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|us| Duration::from_micros(us.min(10_000)))
            .unwrap_or(Duration::ZERO);
        let cfg = roce_transport::DriverConfig {
            name: format!("roce-{}", self.name),
            max_idle: Duration::from_millis(20),
            spin,
            ..Default::default()
        };
        let hca = Arc::new(Mutex::new(Hca::new(self.hca_config())));
        // seeded fault injection on the real wire (ROCE_EMU_FAULTS)
        let faults = FaultSpec::from_env()
            .map_err(|why| OpenError::Faults { name: self.name.clone(), why })?
            .filter(FaultSpec::is_active);
        match &self.transport {
            TransportKind::Udp => {
                let mut uc = UdpConfig::new(SocketAddr::new(self.addr, self.port));
                uc.pcap = self.effective_pcap();
                let t = UdpTransport::bind(uc)
                    .map_err(|source| OpenError::Transport { name: self.name.clone(), source })?;
                // The transport verifies every ICRC it delivers, so the core need
                // not; not with injected faults, which may corrupt after that check.
                if faults.is_none() && t.config().rx_icrc != roce_transport::RxIcrcPolicy::Off {
                    hca.lock().unwrap_or_else(|e| e.into_inner()).set_rx_icrc_checked(true);
                }
                {
                    // The socket sends from its own port: ICRCs computed for
                    // it need no adjustment. The driver coalesces ACKs, so the
                    // core need not build the superseded ones.
                    let mut core = hca.lock().unwrap_or_else(|e| e.into_inner());
                    core.set_tx_src_port(Some(t.local_addr().port()));
                    core.set_ack_coalescing(true);
                }
                if let Some(f) = faults {
                    let t = FaultyTransport::new(t, f, self.name.clone());
                    return self.start(hca, t, cfg, "udp");
                }
                self.start(hca, t, cfg, "udp")
            }
            TransportKind::Raw { ifname } => {
                let mut rc = RawConfig::new(ifname.clone(), self.addr);
                rc.port = self.port;
                rc.pcap = self.effective_pcap();
                let t = RawTransport::open(rc)
                    .map_err(|source| OpenError::Raw { name: self.name.clone(), source })?;
                // Exact receive-side ICRC checks on the real IP header (unless
                // injected faults may corrupt frames after that check).
                if faults.is_none() {
                    hca.lock().unwrap_or_else(|e| e.into_inner()).set_rx_icrc_checked(true);
                }
                if let Some(f) = faults {
                    let t = FaultyTransport::new(t, f, self.name.clone());
                    return self.start(hca, t, cfg, "raw");
                }
                self.start(hca, t, cfg, "raw")
            }
            k @ TransportKind::Sim => Err(OpenError::Unsupported {
                name: self.name.clone(),
                kind: k.clone(),
                why: "simulated devices live on a SimNet: use SimNet::add_device",
            }),
        }
    }
}

impl DeviceConfig {
    /// Start the driver thread of an opened transport and make the device.
    fn start<T: roce_transport::Transport>(
        &self,
        hca: Arc<Mutex<Hca>>,
        t: T,
        cfg: roce_transport::DriverConfig,
        kind: &str,
    ) -> Result<Device, OpenError> {
        let handle = roce_transport::Driver::spawn_with(hca.clone(), t, cfg)
            .map_err(|source| OpenError::Thread { name: self.name.clone(), source })?;
        let publisher = crate::publish::Publisher::start(hca.clone());
        let drv = Arc::new(ThreadDriver::<T>::new(handle, kind).with_publisher(publisher));
        Ok(Device::new(hca, drv))
    }
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

/// The verbs [`Driver`] of a device whose frames a
/// [`roce_transport::Driver`] thread moves over a transport `T` (UDP or
/// raw).
/// [`Driver::progress`] blocks on the thread's progress condition variable
/// (no busy polling), and async code registers wakers
/// ([`Driver::register_waker`]) that the thread wakes after every round
/// that received datagrams or fired timers.
pub struct ThreadDriver<T: Transport = UdpTransport> {
    handle: DriverHandle<T>,
    wakers: Arc<Mutex<Vec<Waker>>>,
    name: String,
    // dropped after `handle`: the final snapshot follows the driver's last round
    publisher: Option<crate::publish::Publisher>,
}

/// The driver of a UDP device.
pub type UdpDriver = ThreadDriver<UdpTransport>;

impl<T: Transport> fmt::Debug for ThreadDriver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadDriver").field("local", &self.handle.local_addr()).finish()
    }
}

impl<T: Transport> ThreadDriver<T> {
    /// Wrap a running driver thread; `name` is what [`Driver::name`]
    /// reports (`"udp"`, `"raw"`).
    pub fn new(handle: DriverHandle<T>, name: &str) -> ThreadDriver<T> {
        let wakers: Arc<Mutex<Vec<Waker>>> = Arc::new(Mutex::new(Vec::new()));
        let w = wakers.clone();
        handle.on_progress(move || {
            let list: Vec<Waker> = match w.lock() {
                Ok(mut g) => std::mem::take(&mut *g),
                Err(p) => std::mem::take(&mut *p.into_inner()),
            };
            for wk in list {
                wk.wake();
            }
        });
        ThreadDriver { handle, wakers, name: name.to_string(), publisher: None }
    }

    /// Publish the device's counters while this driver runs (see
    /// [`crate::publish`]); [`DeviceConfig::open`] does this for every device.
    pub fn with_publisher(mut self, p: Option<crate::publish::Publisher>) -> ThreadDriver<T> {
        self.publisher = p;
        self
    }

    /// The driver thread's handle (counters, local address).
    pub fn handle(&self) -> &DriverHandle<T> {
        &self.handle
    }
}

impl<T: Transport> Driver for ThreadDriver<T> {
    fn name(&self) -> &str {
        &self.name
    }

    fn kick(&self) {
        self.handle.notify();
    }

    fn now(&self) -> Option<roce_emulator::Instant> {
        Some(self.handle.now())
    }

    fn progress(&self, cond: &mut dyn FnMut() -> bool, budget: Budget) -> bool {
        let start = Instant::now();
        loop {
            // Read the progress count before checking, so a round that
            // completes between the check and the wait is not missed.
            let seen = self.handle.progress();
            if cond() {
                return true;
            }
            let left = budget.wall.saturating_sub(start.elapsed());
            if left.is_zero() {
                return false;
            }
            // Bounded slices: completions that no datagram announces (UC
            // sends, flushes) are seen within a few milliseconds.
            self.handle.wait_for_progress(seen, left.min(Duration::from_millis(5)));
        }
    }

    fn register_waker(&self, waker: &Waker) -> bool {
        let mut g = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
        if !g.iter().any(|w| w.will_wake(waker)) {
            g.push(waker.clone());
        }
        true
    }
}

/// One device of a [`PolledDriver`]: its core and its transport.
struct PolledNode<T: Transport> {
    hca: Arc<Mutex<Hca>>,
    io: Mutex<PolledIo<T>>,
    /// The transport's address (to recognise datagrams sent to this node
    /// by another node of the same driver).
    local: std::net::SocketAddr,
    /// How many datagrams another node of this driver just sent to this
    /// one: over loopback they are already queued, so the next receive
    /// skips the `poll` and reads no more messages than that.
    expect: std::sync::atomic::AtomicUsize,
    /// The core may have packets to send that no kick announced (it received
    /// or fired timers since its last pull): [`Driver::kick_device`] for
    /// another device pulls this one too.
    dirty: std::sync::atomic::AtomicBool,
}

struct PolledIo<T: Transport> {
    t: T,
    rx: Vec<roce_emulator::Datagram>,
    tx: Vec<roce_emulator::Datagram>,
}

/// Most datagrams taken from the core per flush.
const POLLED_TX_BATCH: usize = 256;

/// A driver **without a thread** for one or more devices (busy-poll mode):
/// the application thread moves the frames itself. [`Driver::kick`] (after
/// `post_send`) sends what the cores have queued, in one batch per device;
/// [`Driver::progress`] (behind `poll`-and-wait loops) receives, feeds the
/// cores, fires their timers and sends, spinning until the condition holds.
///
/// Packets a core queues while receiving (ACKs) are not sent at once when
/// the awaited condition already holds: they leave with the next kick or
/// progress call, in the same system call as the next request (an ACK is
/// cumulative, so a late one is as good). An application that stops calling
/// the verbs leaves them queued; the peer then retransmits after its
/// timeout. Devices sharing one `PolledDriver` are all driven by every call
/// (two devices of a benchmark in one thread).
pub struct PolledDriver<T: Transport = UdpTransport> {
    nodes: Vec<PolledNode<T>>,
    start: Instant,
    ticks: std::sync::atomic::AtomicU64,
    ack_delay: Duration,
    name: String,
}

/// Which of `nodes` have a datagram waiting: one zero-timeout `poll` over
/// all sockets (cheaper than an empty `recvmmsg` per socket when spinning).
fn readable<T: Transport>(nodes: &[PolledNode<T>]) -> Vec<bool> {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let guards: Vec<_> =
        nodes.iter().map(|n| n.io.lock().unwrap_or_else(|e| e.into_inner())).collect();
    let mut fds: Vec<PollFd<'_>> =
        guards.iter().map(|g| PollFd::new(g.t.as_fd(), PollFlags::POLLIN)).collect();
    match nix::poll::poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect(),
        Err(_) => vec![true; nodes.len()],
    }
}

impl<T: Transport> fmt::Debug for PolledDriver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolledDriver").field("devices", &self.nodes.len()).finish()
    }
}

impl<T: Transport> PolledDriver<T> {
    /// A driver for these devices (core and transport each); `name` is what
    /// [`Driver::name`] reports.
    pub fn new(devices: Vec<(Arc<Mutex<Hca>>, T)>, name: &str) -> PolledDriver<T> {
        let nodes = devices
            .into_iter()
            .map(|(hca, t)| PolledNode {
                hca,
                local: t.local_addr(),
                expect: std::sync::atomic::AtomicUsize::new(0),
                dirty: std::sync::atomic::AtomicBool::new(false),
                io: Mutex::new(PolledIo { t, rx: Vec::new(), tx: Vec::new() }),
            })
            .collect();
        PolledDriver {
            nodes,
            start: Instant::now(),
            ticks: std::sync::atomic::AtomicU64::new(0),
            ack_delay: Duration::ZERO,
            name: name.to_string(),
        }
    }

    /// Hold positive ACKs back (default zero: they leave with the next
    /// flush), so that one ACK covers several requests (IBA allows a
    /// responder to coalesce acknowledgements): each core holds them
    /// ([`Hca::set_ack_delay`]) and they ride with the next request once `d`
    /// old, leave alone at `2 d`, after 16 PSNs, and when the driver goes
    /// idle. The peer's send completions are delayed by as much; its send
    /// queue must be deep enough.
    pub fn with_ack_delay(mut self, d: Duration) -> PolledDriver<T> {
        self.ack_delay = d;
        for n in &self.nodes {
            n.hca.lock().unwrap_or_else(|e| e.into_inner()).set_ack_delay(Some(d));
        }
        self
    }

    fn now(&self) -> roce_emulator::Instant {
        self.core_time(Instant::now())
    }

    /// The cores' clock at wall time `t`.
    fn core_time(&self, t: Instant) -> roce_emulator::Instant {
        roce_emulator::Instant::from_nanos(
            u64::try_from(t.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX),
        )
    }

    /// Receive everything waiting on every device and feed it to the cores
    /// (and fire due timers); returns the number of datagrams handled.
    pub fn poll_rx(&self) -> usize {
        let mut handled = 0;
        let ticks = self.ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A node another node just sent to is read without asking `poll`
        // first (the same system calls as a plain UDP ping-pong: send, then
        // receive on the socket it went to); otherwise one `poll` for all.
        // (On the stack for up to 8 devices: this runs once per spin.)
        let mut wbuf = [0usize; 8];
        let mut wvec = Vec::new();
        let wants: &mut [usize] = if self.nodes.len() <= wbuf.len() {
            &mut wbuf[..self.nodes.len()]
        } else {
            wvec.resize(self.nodes.len(), 0);
            &mut wvec
        };
        for (w, n) in wants.iter_mut().zip(&self.nodes) {
            *w = n.expect.swap(0, std::sync::atomic::Ordering::Relaxed);
        }
        let polled = if wants.iter().any(|w| *w > 0) { None } else { Some(readable(&self.nodes)) };
        for (i, (n, &mut want)) in self.nodes.iter().zip(wants.iter_mut()).enumerate() {
            let ready = match &polled {
                Some(r) => r[i],
                None => want > 0,
            };
            let mut io = n.io.lock().unwrap_or_else(|e| e.into_inner());
            let io = &mut *io;
            // Timers are looked at every 64th call when nothing arrives.
            if !ready {
                if ticks.is_multiple_of(64) {
                    let now = self.now();
                    let mut hca = n.hca.lock().unwrap_or_else(|e| e.into_inner());
                    if roce_emulator::SansIo::poll_timeout(&*hca).is_some_and(|d| d <= now) {
                        roce_emulator::SansIo::handle_timeout(&mut *hca, now);
                        n.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                continue;
            }
            let batch = io.t.batch();
            // Expected datagrams: one read of at most that many messages
            // (a ping-pong's one datagram costs one plain receive).
            // (Every 64th round reads fully anyway: datagrams from outside
            // this driver must not pile up behind the expected ones.)
            let want = if ticks.is_multiple_of(64) { 0 } else { want };
            let first_full =
                want == 0 || matches!(io.t.recv_at_most(&mut io.rx, want), Ok(k) if k >= batch);
            if first_full {
                for _ in 0..8 {
                    match io.t.recv(&mut io.rx) {
                        Ok(k) if k >= batch => continue,
                        _ => break,
                    }
                }
            }
            let now = self.now();
            let mut hca = n.hca.lock().unwrap_or_else(|e| e.into_inner());
            handled += io.rx.len();
            if !io.rx.is_empty() {
                n.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            for d in io.rx.drain(..) {
                roce_emulator::SansIo::handle_datagram(&mut *hca, now, d);
            }
            if roce_emulator::SansIo::poll_timeout(&*hca).is_some_and(|d| d <= now) {
                roce_emulator::SansIo::handle_timeout(&mut *hca, now);
                n.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        handled
    }

    /// Send one batch of what each core has queued (the rest at the next
    /// call); returns the number of datagrams sent.
    pub fn flush(&self) -> usize {
        self.flush_with(false, None)
    }

    /// Flush every device (`only` None), or only the device whose core is
    /// `only` and those marked dirty (their last pull left nothing behind,
    /// and nothing arrived since: pulling them would find nothing).
    fn flush_with(&self, force: bool, only: Option<&Arc<Mutex<Hca>>>) -> usize {
        let mut sent = 0;
        // The clock is read at most once per flush (reading it is a visible
        // part of a ping-pong's user time).
        let mut wall: Option<Instant> = None;
        for n in &self.nodes {
            let chosen = only.is_none_or(|h| Arc::ptr_eq(h, &n.hca));
            let dirty = n.dirty.swap(false, std::sync::atomic::Ordering::Relaxed);
            let mut io = n.io.lock().unwrap_or_else(|e| e.into_inner());
            let io = &mut *io;
            if io.tx.is_empty() && !chosen && !dirty {
                continue;
            }
            if io.tx.is_empty() {
                let now = self.core_time(*wall.get_or_insert_with(Instant::now));
                let mut hca = n.hca.lock().unwrap_or_else(|e| e.into_inner());
                if force {
                    hca.flush_acks(); // idle: held ACKs leave
                }
                while io.tx.len() < POLLED_TX_BATCH {
                    match roce_emulator::SansIo::poll_transmit(&mut *hca, now) {
                        Some(d) => io.tx.push(d),
                        None => break,
                    }
                }
                if io.tx.len() >= POLLED_TX_BATCH {
                    n.dirty.store(true, std::sync::atomic::Ordering::Relaxed); // more left
                }
            }
            if io.tx.is_empty() {
                continue;
            }
            let k = roce_transport::coalesce::coalesce_acks(&mut io.tx);
            if k > 0 {
                let c = io.t.counters();
                roce_transport::TransportCounters::add(&c.acks_coalesced, k as u64);
            }
            // One batch per call: the caller receives in between, so a peer
            // in the same thread is not flooded past its socket buffer; the
            // rest (or what the socket refused) goes at the next call.
            let o = io.t.send(&io.tx);
            let k = o.consumed.min(io.tx.len());
            for d in &io.tx[..k] {
                let to = std::net::SocketAddr::new(d.endpoints.dst, d.endpoints.dst_port);
                if let Some(peer) = self.nodes.iter().find(|p| p.local == to) {
                    peer.expect.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            io.tx.drain(..k);
            sent += k;
        }
        sent
    }
}

impl<T: Transport> Driver for PolledDriver<T> {
    fn name(&self) -> &str {
        &self.name
    }

    fn now(&self) -> Option<roce_emulator::Instant> {
        Some(PolledDriver::now(self))
    }

    fn kick(&self) {
        self.flush();
    }

    fn kick_device(&self, hca: &Arc<Mutex<Hca>>) {
        // Only the posting device and those with unannounced work: another
        // idle device of this driver has nothing to pull.
        self.flush_with(false, Some(hca));
    }

    fn recv_posted(&self) {}

    fn progress(&self, cond: &mut dyn FnMut() -> bool, budget: Budget) -> bool {
        // The clock starts after the first round (a ping-pong's answer is
        // usually there at once; reading the clock is then wasted).
        let mut start: Option<Instant> = None;
        let mut idle: u32 = 0;
        loop {
            let got = self.poll_rx();
            if cond() {
                return true;
            }
            let start = *start.get_or_insert_with(Instant::now);
            let sent = self.flush();
            if got + sent > 0 {
                idle = 0;
                continue;
            }
            idle = idle.wrapping_add(1);
            if idle == 64 && !self.ack_delay.is_zero() {
                self.flush_with(true, None); // idle: let held ACKs go
            }
            if idle.is_multiple_of(256) && start.elapsed() >= budget.wall {
                return false;
            }
            std::hint::spin_loop();
        }
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
