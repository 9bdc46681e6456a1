//! The options of `roce perf`, their help, and their checks: the
//! configuration of a run in one process ([`PerfConfig`]) or across
//! processes ([`RemoteConfig`]).

use roce_workloads::perf::remote::{RemoteConfig, DEFAULT_PORT};
use roce_workloads::perf::PerfConfig;
pub use roce_workloads::perf::{LatKind, PollMode, TestKind};
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

/// Long help of `roce perf`.
pub const PERF_LONG: &str = "\
Measure bandwidth (write, read, send, atomic) or round-trip latency (lat) between two emulated \
RoCEv2 HCAs in this process: device A on --addr-a sends, device B on --addr-b answers; each has \
its own UDP socket (port 4791) and engine (the test thread moves the frames itself when it posts and while it waits; an engine thread serves a device nobody waits on). In the same run the raw-UDP ceiling between \
the same two addresses is measured (plain sendto, sendmmsg, GSO+GRO) and the ratio \
ours / best ceiling is printed. Bandwidth runs verify the moved data at the end (exit 1 if \
the check fails).

Exit status: 0 on success, 1 if the test failed (a completion error, a stall, a data check \
mismatch, a socket that cannot be bound), 2 on bad arguments.";

/// Examples of `roce perf`.
pub const PERF_AFTER: &str = "\
Examples:
  roce perf write -s 65536 -n 2000          RDMA WRITE bandwidth, 64 KiB messages
  roce perf send -s 4096 -D 2 -q 2          SEND bandwidth for 2 s over 2 QPs
  roce perf read -s 65536 --repeat 5        5 runs: min/median/max of Gb/s and ratio
  roce perf lat send -s 8 -n 1000           SEND/RECV ping-pong round trips
  roce perf write -s 4096 -n 200 --json     one JSON object (docs/perf.md)";

/// Options of `roce perf`.
#[derive(clap::Args, Debug, Clone)]
pub struct PerfArgs {
    /// The test: write | read | send | atomic (bandwidth) or lat (latency).
    #[arg(value_enum)]
    pub test: TestKind,
    /// For `lat`: the operation (default send); set from `operands`.
    #[arg(skip)]
    pub lat_op: Option<LatKind>,
    /// `send|write|read` after `lat`, and/or the server's address (cross-process client).
    #[arg(value_name = "OP|SERVER", num_args = 0..=2)]
    pub operands: Vec<String>,
    /// Cross-process client: the server's address (set from `operands`).
    #[arg(skip)]
    pub server: Option<String>,
    /// Message size in bytes (default 65536 for bandwidth, 8 for lat; atomic is always 8).
    #[arg(short = 's', long = "size", value_name = "SIZE")]
    pub size: Option<u32>,
    /// Iterations (messages per QP; default 5000 for bandwidth, 1000 for lat).
    #[arg(short = 'n', long = "iters", value_name = "ITERS", conflicts_with = "duration")]
    pub iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations (bandwidth tests).
    #[arg(short = 'D', long = "duration", value_name = "SECS")]
    pub duration: Option<f64>,
    /// Number of QP pairs (bandwidth tests).
    #[arg(short = 'q', long = "qps", value_name = "QPS", default_value_t = 1)]
    pub qps: u32,
    /// Outstanding work requests per QP (bandwidth tests).
    #[arg(short = 't', long = "tx-depth", value_name = "N", default_value_t = 128)]
    pub tx_depth: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (both ports and the QPs).
    #[arg(short = 'm', long = "mtu", value_name = "M", default_value_t = 1024)]
    pub mtu: u32,
    /// Address of device A (the requester).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.2")]
    pub addr_a: IpAddr,
    /// Address of device B (the responder).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.3")]
    pub addr_b: IpAddr,
    /// Print one JSON object instead of the perftest-style report.
    #[arg(long)]
    pub json: bool,
    /// Skip the raw-UDP ceiling measurement (no ratio).
    #[arg(long)]
    pub no_ceiling: bool,
    /// Seconds per ceiling mode (three modes).
    #[arg(long, value_name = "SECS", default_value_t = 0.5)]
    pub ceiling_secs: f64,
    /// Run the test K times (same devices) and report min/median/max; with
    /// K > 1 each run is also paired with a reference measured right after
    /// it (GSO+GRO ceiling, or the raw ping-pong for lat).
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub repeat: u32,
    /// How the test thread waits: blocked in a completion channel after
    /// `--spin-us` of polling (event, perftest's `-e`), or busy-polling
    /// both sockets (busy). The raw-UDP ping-pong of `lat` uses the same
    /// mode.
    #[arg(long, value_enum, default_value = "event")]
    pub poll: PollMode,
    /// Event mode: a thread waiting for a completion (and each device's
    /// engine thread) keeps polling the socket this many microseconds
    /// before it sleeps (as the kernel's SO_BUSY_POLL), so a busy stream
    /// wakes nobody; 0 = sleep at once. Also ROCE_EMU_SPIN_US for the
    /// devices of other programs.
    #[arg(long, value_name = "US", default_value_t = 20)]
    pub spin_us: u64,
    /// Print both devices' counters (rxe names) after the run.
    #[arg(long)]
    pub stats: bool,
    /// Bandwidth in Gb/s (perftest's `--report_gbits`; also `--report`). The
    /// in-process mode always reports Gb/s; across processes the default is
    /// perftest's MB/s.
    #[arg(long = "report_gbits", visible_alias = "report")]
    pub report_gbits: bool,
    /// Cross-process server: wait for a perftest (or `roce perf`) client on TCP `-p`.
    #[arg(long = "server")]
    pub listen: bool,
    /// Cross-process: TCP port of perftest's exchange (default 18515).
    #[arg(short = 'p', long = "port", value_name = "PORT")]
    pub port: Option<u16>,
    /// Cross-process: the configured device to use (ROCE_EMU_DEVICES, devices.conf).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// Cross-process: a UDP device at this local address (no configuration needed).
    #[arg(long = "local", value_name = "ADDR")]
    pub local: Option<IpAddr>,
    /// Cross-process: source GID index (default 1, the RoCEv2 IPv4/IPv6 GID).
    #[arg(short = 'x', long = "gid-index", value_name = "N")]
    pub gid_index: Option<u32>,
    /// Cross-process: receives posted per QP for send/lat (default 512).
    #[arg(short = 'r', long = "rx-depth", value_name = "N")]
    pub rx_depth: Option<u32>,
    /// Cross-process atomic test: FETCH_AND_ADD (default) or CMP_AND_SWAP.
    #[arg(short = 'A', long = "atomic_type", value_name = "TYPE")]
    pub atomic_type: Option<String>,
    /// Cross-process: use a wrong R_Key on purpose (client: in our requests; server: the one
    /// we advertise), to see REM_ACCESS_ERR.
    #[arg(long = "bad-rkey")]
    pub bad_rkey: bool,
    /// Inject faults on the real transport, e.g. `loss=0.05,seed=7` (as ROCE_EMU_FAULTS).
    #[arg(long = "faults", value_name = "SPEC")]
    pub faults: Option<String>,
    /// Cross-process write test: RDMA WRITE with immediate (the server posts one receive per
    /// WRITE and checks every immediate; `roce perf` on both sides: perftest 4.5 has no such test).
    #[arg(long = "imm")]
    pub imm: bool,
    /// Cross-process send server: wait this many milliseconds before re-posting each receive
    /// (a slow receiver: with `-r 1` every SEND meets an empty receive queue, RNR NAKs).
    #[arg(long = "recv-delay", value_name = "MS")]
    pub recv_delay: Option<u64>,
    /// Cross-process: write the out-of-band messages (direction, length, hex) to this file.
    #[arg(long = "oob-log", value_name = "FILE")]
    pub oob_log: Option<std::path::PathBuf>,
}

/// Resolve the free operands after the test name: an operation after
/// `lat` (`send|write|read`) and/or the server's address. Returns the
/// arguments with `lat_op` and `server` set, or the exit code of a usage
/// error.
pub(super) fn resolve_operands(a: &PerfArgs) -> Result<PerfArgs, ExitCode> {
    let mut out = a.clone();
    for op in &a.operands {
        let kind = match op.as_str() {
            "send" => Some(LatKind::Send),
            "write" => Some(LatKind::Write),
            "read" => Some(LatKind::Read),
            _ => None,
        };
        match kind {
            Some(k) if out.lat_op.is_none() && out.server.is_none() => out.lat_op = Some(k),
            _ if out.server.is_none() => out.server = Some(op.clone()),
            _ => {
                eprintln!("roce perf: unexpected operand {op:?}");
                return Err(ExitCode::from(2));
            }
        }
    }
    Ok(out)
}

/// Whether the arguments ask for the cross-process mode.
pub(super) fn is_remote(a: &PerfArgs) -> bool {
    a.server.is_some() || a.listen || a.ib_dev.is_some() || a.local.is_some() || a.port.is_some()
}

/// The message size (`-s`; atomics are 8 bytes), `lat_default` for `lat`
/// without `-s`.
fn message_size(a: &PerfArgs, lat_default: u32) -> Result<u32, String> {
    Ok(match (a.test, a.size) {
        (TestKind::Atomic, Some(s)) if s != 8 => {
            return Err(format!("atomic messages are 8 bytes, not -s {s}"))
        }
        (TestKind::Atomic, _) => 8,
        (_, Some(0)) => return Err("-s must be at least 1".into()),
        (_, Some(s)) if s > 8 << 20 => return Err(format!("-s {s} is larger than 8 MiB")),
        (_, Some(s)) => s,
        (TestKind::Lat, None) => lat_default,
        (_, None) => 65536,
    })
}

/// `--mtu` as the IBA's enum (1 for 256 ... 5 for 4096).
fn mtu_enum(mtu: u32) -> Result<u8, String> {
    match mtu {
        256 => Ok(1),
        512 => Ok(2),
        1024 => Ok(3),
        2048 => Ok(4),
        4096 => Ok(5),
        m => Err(format!("--mtu {m} is not one of 256, 512, 1024, 2048, 4096")),
    }
}

/// `-D`, when given.
fn seconds(d: Option<f64>) -> Result<Option<Duration>, String> {
    match d {
        Some(d) if !(d > 0.0 && d <= 3600.0) => Err(format!("-D {d} must be in (0, 3600]")),
        Some(d) => Ok(Some(Duration::from_secs_f64(d))),
        None => Ok(None),
    }
}

/// `-n`, 1000 for `lat` and 5000 otherwise when not given.
fn iterations(a: &PerfArgs) -> Result<u64, String> {
    let iters = a.iters.unwrap_or(if a.test == TestKind::Lat { 1000 } else { 5000 });
    if iters == 0 || iters > 100_000_000 {
        return Err(format!("-n {iters} must be 1..=100000000"));
    }
    Ok(iters)
}

/// `--tx-depth`.
fn check_tx_depth(a: &PerfArgs) -> Result<(), String> {
    if a.tx_depth == 0 || a.tx_depth > 1024 {
        return Err(format!("--tx-depth {} must be 1..=1024", a.tx_depth));
    }
    Ok(())
}

/// The one-process configuration of the arguments.
pub(super) fn validate(a: &PerfArgs) -> Result<PerfConfig, String> {
    let lat = a.test == TestKind::Lat;
    if a.lat_op.is_some() && !lat {
        return Err("a second operand (send|write|read) is only valid after `lat`".into());
    }
    let size = message_size(a, 8)?;
    mtu_enum(a.mtu)?;
    if a.qps == 0 || a.qps > 4096 {
        return Err(format!("-q {} must be 1..=4096", a.qps));
    }
    check_tx_depth(a)?;
    if a.repeat == 0 || a.repeat > 100 {
        return Err(format!("--repeat {} must be 1..=100", a.repeat));
    }
    if !(a.ceiling_secs > 0.0 && a.ceiling_secs <= 10.0) {
        return Err("--ceiling-secs must be in (0, 10]".into());
    }
    if a.addr_a == a.addr_b {
        return Err("--addr-a and --addr-b must differ (each device binds port 4791)".into());
    }
    if a.addr_a.is_ipv4() != a.addr_b.is_ipv4() {
        return Err("--addr-a and --addr-b must be of the same IP version".into());
    }
    let duration = match a.duration {
        Some(d) if lat => return Err(format!("-D {d}: lat runs a number of iterations (-n)")),
        d => seconds(d)?,
    };
    let iters = iterations(a)?;
    if lat && a.qps != 1 {
        return Err("lat uses one QP (-q 1)".into());
    }
    // Buffers: both devices register size × slots per QP (see roce_workloads::perf).
    let slots = match a.test {
        TestKind::Lat | TestKind::Atomic => 1,
        TestKind::Send => a.tx_depth.clamp(1, 512),
        _ => a.tx_depth.clamp(1, 64),
    };
    let mem = 2 * u64::from(a.qps) * u64::from(size) * u64::from(slots);
    if mem > 2 << 30 {
        return Err(format!(
            "{} MiB of buffers (2 devices x -q {} x -s {size} x {slots} slots): use a smaller -t, -s or -q",
            mem >> 20,
            a.qps
        ));
    }
    Ok(PerfConfig {
        test: a.test,
        lat_op: a.lat_op.unwrap_or(LatKind::Send),
        size,
        iters,
        duration,
        qps: a.qps,
        tx_depth: a.tx_depth,
        mtu: a.mtu,
        addr_a: a.addr_a,
        addr_b: a.addr_b,
        poll: a.poll,
        spin_us: a.spin_us,
    })
}

/// The cross-process configuration of the arguments.
pub(super) fn validate_remote(a: &PerfArgs) -> Result<RemoteConfig, String> {
    let test = a.test;
    if test == TestKind::Lat && a.lat_op.unwrap_or(LatKind::Send) != LatKind::Send {
        return Err("across processes, lat is the SEND ping-pong (ib_send_lat) only".into());
    }
    let size = message_size(a, 2)?;
    let mtu_enum = mtu_enum(a.mtu)?;
    if a.qps == 0 || a.qps > 64 {
        return Err(format!("-q {} must be 1..=64", a.qps));
    }
    if test == TestKind::Lat && a.qps != 1 {
        return Err("lat uses one QP (-q 1)".into());
    }
    check_tx_depth(a)?;
    let rx_depth = a.rx_depth.unwrap_or(512);
    if rx_depth == 0 || rx_depth > 4096 {
        return Err(format!("--rx-depth {rx_depth} must be 1..=4096"));
    }
    let duration = match a.duration {
        Some(_) if matches!(test, TestKind::Lat | TestKind::Send) => {
            return Err("-D: across processes, send and lat run a number of iterations (-n)".into())
        }
        d => seconds(d)?,
    };
    let iters = iterations(a)?;
    let cas = match a.atomic_type.as_deref() {
        None | Some("FETCH_AND_ADD") => false,
        Some("CMP_AND_SWAP") => true,
        Some(o) => return Err(format!("-A {o}: FETCH_AND_ADD or CMP_AND_SWAP")),
    };
    if a.atomic_type.is_some() && test != TestKind::Atomic {
        return Err("-A is for the atomic test".into());
    }
    if a.imm && (test != TestKind::Write || duration.is_some() || iters > 16384) {
        return Err("--imm is for the write test with -n at most 16384 (no -D)".into());
    }
    // WRITE with immediate: one receive per WRITE, all posted before the run
    let rx_depth = if a.imm { iters as u32 } else { rx_depth };
    Ok(RemoteConfig {
        test,
        size,
        iters,
        duration,
        qps: a.qps,
        tx_depth: a.tx_depth,
        rx_depth,
        mtu_enum,
        port: a.port.unwrap_or(DEFAULT_PORT),
        gid_index: a.gid_index,
        cas,
        bad_rkey: a.bad_rkey,
        imm: a.imm,
        recv_delay: Duration::from_millis(a.recv_delay.unwrap_or(0).min(10_000)),
        server: a.server.clone(),
        mtu: a.mtu,
        ib_dev: a.ib_dev.clone(),
        local: a.local,
    })
}
