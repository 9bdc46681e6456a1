//! The references a `roce perf` run is compared with, between the same two
//! addresses: the raw-UDP ceiling (plain, sendmmsg, GSO+GRO) of the
//! bandwidth tests and the raw-UDP ping-pong of the latency tests.

use super::lat::LatResult;
use super::{LatKind, PerfConfig, PollMode, TestKind};
use anyhow::{anyhow, bail};
use roce_transport::ceiling::{self, CeilingMode};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// UDP payload of one full RoCE packet of this test (BTH 12 + ICRC 4 +
/// the first packet's extension header + data up to the MTU).
pub fn datagram_size(cfg: &PerfConfig) -> usize {
    let data = cfg.size.min(cfg.mtu) as usize;
    match cfg.test {
        TestKind::Atomic => 12 + 28 + 4,
        TestKind::Write | TestKind::Read => 12 + 4 + data,
        TestKind::Send => 12 + 4 + data,
        TestKind::Lat => match cfg.lat_op {
            LatKind::Write => 12 + 16 + 4 + data,
            _ => 12 + 4 + data,
        },
    }
}

/// Where the data flows: B -> A for READ, A -> B otherwise.
pub fn data_flow(cfg: &PerfConfig) -> (IpAddr, IpAddr) {
    if cfg.test == TestKind::Read {
        (cfg.addr_b, cfg.addr_a)
    } else {
        (cfg.addr_a, cfg.addr_b)
    }
}

/// The raw-UDP ceiling of the three modes, Gb/s (None when a mode failed).
#[derive(Clone, Copy, Debug, Default)]
pub struct Ceiling {
    /// Plain `sendto`.
    pub plain: Option<f64>,
    /// `sendmmsg`.
    pub mmsg: Option<f64>,
    /// GSO and GRO.
    pub gso_gro: Option<f64>,
    /// Datagram bytes.
    pub payload: usize,
}

impl Ceiling {
    /// The best mode: Gb/s and its name.
    pub fn best(&self) -> Option<(f64, &'static str)> {
        [(self.plain, "plain"), (self.mmsg, "mmsg"), (self.gso_gro, "gso+gro")]
            .into_iter()
            .filter_map(|(v, n)| v.map(|v| (v, n)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    }
}

fn ceiling_of(cfg: &PerfConfig, mode: CeilingMode, secs: f64) -> Option<f64> {
    let (src, dst) = data_flow(cfg);
    let r = ceiling::measure(
        SocketAddr::new(src, 0),
        SocketAddr::new(dst, 0),
        mode,
        datagram_size(cfg),
        Duration::from_secs_f64(secs),
    );
    r.ok().map(|r| r.gbytes_per_sec() * 8.0)
}

/// The ceiling in each mode, `secs` each (`progress`: a line on stderr).
pub fn measure_ceiling(cfg: &PerfConfig, secs: f64, progress: bool) -> Ceiling {
    let mut c = Ceiling { payload: datagram_size(cfg), ..Default::default() };
    for mode in CeilingMode::ALL {
        if progress {
            eprint!("\r  measuring raw UDP ceiling ({})...            ", mode.name());
        }
        let v = ceiling_of(cfg, mode, secs);
        match mode {
            CeilingMode::Plain => c.plain = v,
            CeilingMode::Mmsg => c.mmsg = v,
            CeilingMode::GsoGro => c.gso_gro = v,
        }
    }
    if progress {
        eprint!("\r{:60}\r", "");
    }
    c
}

/// The GSO+GRO ceiling alone, measured right after a run (`--repeat`):
/// each run gets a ratio against a ceiling of the same moment (the host's
/// speed drifts between runs; paired ratios see less of it).
pub fn paired_ceiling(cfg: &PerfConfig, secs: f64, progress: bool) -> Option<f64> {
    if progress {
        eprint!("\r  measuring raw UDP ceiling (gso+gro, paired)...            ");
    }
    let v = ceiling_of(cfg, CeilingMode::GsoGro, secs);
    if progress {
        eprint!("\r{:60}\r", "");
    }
    v
}

/// Raw-UDP ping-pong round trips between the two addresses, `payload`-byte
/// datagrams, as many as the test's iterations, in the test's polling mode:
/// blocking sockets and an echo thread (event; with `--spin-us` each
/// receiver first polls that long, as our driver threads do), or one thread
/// spinning on two non-blocking sockets (busy, as `--poll busy` drives both
/// devices).
pub fn udp_rtt(cfg: &PerfConfig, payload: usize) -> anyhow::Result<LatResult> {
    match cfg.poll {
        PollMode::Event => udp_rtt_echo(cfg, payload),
        PollMode::Busy => udp_rtt_busy(cfg, payload),
    }
}

/// Busy receive on a non-blocking socket (gives up after about 4 s).
fn spin_recv(s: &UdpSocket, buf: &mut [u8]) -> anyhow::Result<(usize, SocketAddr)> {
    spin_then_block_recv(s, buf, Duration::from_secs(2))
}

fn udp_rtt_busy(cfg: &PerfConfig, payload: usize) -> anyhow::Result<LatResult> {
    let a = UdpSocket::bind(SocketAddr::new(cfg.addr_a, 0))?;
    let b = UdpSocket::bind(SocketAddr::new(cfg.addr_b, 0))?;
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    let (aa, ba) = (a.local_addr()?, b.local_addr()?);
    let n = cfg.iters + (cfg.iters / 10).min(10);
    let warm = n - cfg.iters;
    let msg = vec![0xA5u8; payload];
    let mut buf = vec![0u8; 65536];
    let mut samples = Vec::new();
    for i in 0..n {
        let t0 = Instant::now();
        a.send_to(&msg, ba)?;
        let (len, from) = spin_recv(&b, &mut buf)?;
        if len != payload || from != aa {
            bail!("unexpected datagram from {from} ({len} bytes)");
        }
        b.send_to(&buf[..len], aa)?;
        let (len, from) = spin_recv(&a, &mut buf)?;
        let dt = t0.elapsed();
        if len != payload || from != ba {
            bail!("unexpected echo from {from} ({len} bytes)");
        }
        if i >= warm {
            samples.push(dt.as_secs_f64() * 1e6);
        }
    }
    Ok(LatResult::new(samples, Ok("echo".into())))
}

/// Receive on a non-blocking socket: poll it for `spin`, then sleep in
/// `poll(2)` until a datagram arrives (at most 2 s).
fn spin_then_block_recv(
    s: &UdpSocket,
    buf: &mut [u8],
    spin: Duration,
) -> anyhow::Result<(usize, SocketAddr)> {
    use std::os::fd::AsFd;
    let start = Instant::now();
    let mut n = 0u32;
    loop {
        match s.recv_from(buf) {
            Ok(r) => return Ok(r),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        n = n.wrapping_add(1);
        if n.is_multiple_of(16) && start.elapsed() >= spin {
            let mut fds = [nix::poll::PollFd::new(s.as_fd(), nix::poll::PollFlags::POLLIN)];
            let ready = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(2000u16))?;
            if ready == 0 {
                bail!("raw UDP ping-pong: no datagram for 2 s");
            }
        }
        std::hint::spin_loop();
    }
}

/// Receive for the event-mode reference: blocking (`spin` None), or poll
/// the non-blocking socket for `spin`, then sleep.
fn echo_recv(
    s: &UdpSocket,
    buf: &mut [u8],
    spin: Option<Duration>,
) -> anyhow::Result<(usize, SocketAddr)> {
    match spin {
        Some(sp) => spin_then_block_recv(s, buf, sp),
        None => Ok(s.recv_from(buf)?),
    }
}

/// The event-mode reference: an echo thread on B and the test thread on A,
/// both blocking in `recv` (`spin_us` 0) or, as our driver threads do, first
/// polling their non-blocking socket for `spin_us`.
fn udp_rtt_echo(cfg: &PerfConfig, payload: usize) -> anyhow::Result<LatResult> {
    let spin = (cfg.spin_us > 0).then(|| Duration::from_micros(cfg.spin_us));
    let a = UdpSocket::bind(SocketAddr::new(cfg.addr_a, 0))?;
    let b = UdpSocket::bind(SocketAddr::new(cfg.addr_b, 0))?;
    let ba = b.local_addr()?;
    for s in [&a, &b] {
        match spin {
            Some(_) => s.set_nonblocking(true)?,
            None => s.set_read_timeout(Some(Duration::from_secs(2)))?,
        }
    }
    let n = cfg.iters + (cfg.iters / 10).min(10);
    let echo = std::thread::spawn(move || -> anyhow::Result<()> {
        let mut buf = vec![0u8; 65536];
        for _ in 0..n {
            let (len, from) = echo_recv(&b, &mut buf, spin)?;
            b.send_to(&buf[..len], from)?;
        }
        Ok(())
    });
    let msg = vec![0xA5u8; payload];
    let mut buf = vec![0u8; 65536];
    let mut samples = Vec::new();
    let warm = n - cfg.iters;
    for i in 0..n {
        let t0 = Instant::now();
        a.send_to(&msg, ba)?;
        let (len, from) = echo_recv(&a, &mut buf, spin)?;
        let dt = t0.elapsed();
        if len != payload || from != ba {
            bail!("unexpected echo from {from} ({len} bytes)");
        }
        if i >= warm {
            samples.push(dt.as_secs_f64() * 1e6);
        }
    }
    echo.join().map_err(|_| anyhow!("echo thread panicked"))??;
    let how = match spin {
        Some(_) => format!("echo, {} us spin", cfg.spin_us),
        None => "echo".to_string(),
    };
    Ok(LatResult::new(samples, Ok(how)))
}
