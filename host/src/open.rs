//! Opening configured devices: each device's core and transport, put
//! together for each other in one place ([`DeviceConfig::open`],
//! [`DeviceConfig::open_group`]) — UDP or raw, with injected faults
//! (`ROCE_EMU_FAULTS`), joined to its group of processes when shared
//! ([`crate::steer`]) — and run by an [`EngineDriver`] that publishes
//! their counters ([`crate::publish`]).

use crate::config::{sharing_enabled, DeviceConfig, TransportKind};
use crate::driver::EngineDriver;
use roce_emulator::{Hca, LinkProfile};
use roce_transport::faults::{FaultSpec, FaultyTransport};
use roce_transport::{EngineConfig, Link, RawConfig, RawTransport, UdpConfig, UdpTransport};
use roce_verbs_api::Device;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
        source: crate::JoinError,
    },
    /// The steering of the shared device could not be set up.
    #[error("device {name}: cannot steer the shared device: {source}")]
    Steer {
        /// The device.
        name: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// `ROCE_EMU_CC` does not parse.
    #[error("device {name}: ROCE_EMU_CC: {why}")]
    Congestion {
        /// The device.
        name: String,
        /// What is wrong with the setting.
        why: String,
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

/// A device's core and its transport, configured for each other, and for
/// a shared device the joining member with a handle on its socket.
type Assembled = (Arc<Mutex<Hca>>, Box<dyn Link>, Option<(crate::Joining, MemberSocket)>);

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
    /// Hold positive ACKs this long (the cores' [`LinkProfile::ack_delay`]),
    /// so that one ACK covers several requests: they ride with the next
    /// request once this old, leave alone at twice it, after 16 PSNs, and
    /// when the engine goes idle. The peer's send completions are delayed
    /// by as much; its send queue must be deep enough.
    pub ack_delay: Option<Duration>,
    /// Publish each device's counters for `roce stats` ([`crate::publish`]).
    pub publish: bool,
    /// Join each UDP device's group of processes (see [`crate::steer`]): other
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

impl DeviceConfig {
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
            let (core, t, join) = c.assemble(opts.share, opts.ack_delay)?;
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
        let links: Vec<_> = parts.iter().map(|(_, t)| t.counters()).collect();
        let drv = EngineDriver::new(parts, opts.engine, kind)
            .map_err(|source| OpenError::Thread { name, source })?;
        let publishers = match opts.publish {
            true => {
                let shared = !joins.is_empty();
                cores
                    .iter()
                    .zip(links)
                    .filter_map(|(h, l)| {
                        crate::publish::Publisher::start(h.clone(), shared, Some(l))
                    })
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

    /// Bind the device's transport, then make its core with the link
    /// profile that transport needs: the one place a real device is put
    /// together.
    fn assemble(&self, share: bool, ack_delay: Option<Duration>) -> Result<Assembled, OpenError> {
        let mut hcfg = self.hca_config();
        let share = share && self.transport != TransportKind::Sim;
        let join = match share {
            true => {
                let at = SocketAddr::new(self.addr, self.port);
                let j = match &self.transport {
                    TransportKind::Raw { ifname } => crate::Joining::start_raw(ifname, at),
                    _ => crate::Joining::start(at),
                }
                .map_err(|source| OpenError::Join { name: self.name.clone(), source })?;
                hcfg.qpns = j.qpns();
                hcfg.first_qpn = j.first_qpn();
                hcfg.comm_id_tag = Some(j.slot());
                Some(j)
            }
            false => None,
        };
        // congestion management (ROCE_EMU_CC): ECN, CNPs, DCQCN
        hcfg.congestion = congestion_from_env()
            .map_err(|why| OpenError::Congestion { name: self.name.clone(), why })?;
        let mut member = None;
        // seeded fault injection on the real wire (ROCE_EMU_FAULTS)
        let faults = FaultSpec::from_env()
            .map_err(|why| OpenError::Faults { name: self.name.clone(), why })?
            .filter(FaultSpec::is_active);
        let t: Box<dyn Link> = match &self.transport {
            TransportKind::Udp => {
                let local = SocketAddr::new(self.addr, self.port);
                let mut uc = UdpConfig::new(local);
                uc.pcap = self.effective_pcap();
                uc.reuseport = join.is_some();
                // (the ICRC mutation switch: the core is the one checker, and
                // it skips the check)
                #[cfg(feature = "mutants")]
                if self.mutant == Some(roce_emulator::Mutant::NoIcrcCheck) {
                    uc.rx_icrc = roce_transport::RxIcrcPolicy::Off;
                }
                // the members of a shared device record to files of their own
                // (slot 0 keeps the unshared name)
                if let (Some(j), Some(p)) = (&join, &uc.pcap) {
                    if j.slot() > 0 {
                        uc.pcap = Some(p.with_extension(format!("s{}.pcap", j.slot())));
                    }
                }
                let mut t =
                    UdpTransport::bind(uc).map_err(|source| self.bind_error(local, source))?;
                // no datagram lost between the devices of this host
                self.take_credits(&mut t, join.as_ref().map(|j| j.slot()));
                if let Some(j) = join {
                    t.set_steer(j.tap());
                    let sock = t
                        .try_clone_socket()
                        .map_err(|source| OpenError::Steer { name: self.name.clone(), source })?;
                    member = Some((j, MemberSocket::Udp(sock)));
                }
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
        let t = match faults {
            Some(f) => Box::new(FaultyTransport::new(t, f, self.name.clone())) as Box<dyn Link>,
            None => t,
        };
        // What the link does, as it says (who checks ICRCs, the source
        // port, region bodies); and a real device's one ACK policy: a
        // positive ACK still queued when a newer one for the same QP is due
        // is replaced by it (the simulator keeps rxe's one ACK per request).
        hcfg.link = LinkProfile { ack_coalescing: true, ack_delay, ..t.profile() };
        let core = Hca::new(hcfg);
        Ok((Arc::new(Mutex::new(core)), t, member))
    }

    /// The error of a failed bind: when another user's processes hold the
    /// address, say so (sockets of one `SO_REUSEPORT` group must all
    /// belong to one user).
    fn bind_error(&self, local: SocketAddr, source: roce_transport::TransportError) -> OpenError {
        let in_use = matches!(&source, roce_transport::TransportError::Bind { source: e, .. }
            if e.kind() == std::io::ErrorKind::AddrInUse);
        let me = nix::unistd::getuid().as_raw();
        match crate::registry::udp_owner(local) {
            Some(uid) if in_use && uid != me => {
                OpenError::HeldByOtherUser { name: self.name.clone(), addr: local, uid }
            }
            Some(_) if in_use => OpenError::HeldAlone { name: self.name.clone(), addr: local },
            _ => OpenError::Transport { name: self.name.clone(), source },
        }
    }
}

impl DeviceConfig {
    /// The socket's credits in the host's table (`roce_transport::credits`),
    /// unless [`ENV_CREDITS`] says no; a failure is logged (the device
    /// works, its receive buffer may overflow).
    fn take_credits(&self, t: &mut UdpTransport, member: Option<u8>) {
        if !credits_wanted() {
            return;
        }
        let table = crate::registry::credits_path().map_err(|e| e.to_string()).and_then(|p| {
            roce_transport::credits::CreditTable::open(&p).map_err(|e| e.to_string())
        });
        match table {
            Ok(table) if t.use_credits(&table, member) => {}
            Ok(_) => {
                tracing::warn!(dev = %self.name, "the host's credit table has no slot free: this device's receive buffer may overflow")
            }
            Err(e) => {
                tracing::warn!(dev = %self.name, "no credits between this host's devices: {e}")
            }
        }
    }
}

/// Environment variable: the congestion management of this process's
/// devices, a `key=value,...` list of `roce_emulator::congestion`'s
/// parameters (mlx5's names: `ecn=off|ect0|ect1`, `np=on|off`,
/// `rp=on|off`, `line_rate` in Mb/s, `min_time_between_cnps`,
/// `rpg_ai_rate`, ...), or `off` (no ECN, no CNPs, no DCQCN: as rxe).
/// Unset: on, ECT(0), mlx5's defaults.
pub const ENV_CC: &str = "ROCE_EMU_CC";

/// The congestion management `ROCE_EMU_CC` asks for.
pub fn congestion_from_env() -> Result<roce_emulator::CongestionConfig, String> {
    let mut c = roce_emulator::CongestionConfig::default();
    if let Ok(spec) = std::env::var(ENV_CC) {
        c.apply_spec(&spec)?;
    }
    Ok(c)
}

/// Environment variable: `0` or `off` keeps the UDP devices of this process
/// out of the host's credits (`roce_transport::credits`): their senders
/// are not held, and their receive buffers may overflow.
pub const ENV_CREDITS: &str = "ROCE_EMU_CREDITS";

fn credits_wanted() -> bool {
    !matches!(std::env::var(ENV_CREDITS).as_deref(), Ok("0") | Ok("off") | Ok("no"))
}
