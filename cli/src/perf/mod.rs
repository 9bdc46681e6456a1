//! `roce perf`: perftest-like bandwidth and latency tests between two
//! emulated HCAs (two UDP devices on two loopback addresses in one
//! process, each with its own engine), next to the raw-UDP ceiling
//! between the same two addresses. See docs/perf.md.

mod args;
mod remote;

pub use args::{PerfArgs, PERF_AFTER, PERF_LONG};
use roce_transport::ceiling::{self, CeilingMode};
use roce_workloads::perf::{self as perf_engine, LatResult, Setup};
use roce_workloads::perf::{LatKind, PerfConfig, PollMode, TestKind};
use serde_json::{json, Value};
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

fn validate(a: &PerfArgs) -> Result<PerfConfig, String> {
    let lat = a.test == TestKind::Lat;
    if a.lat_op.is_some() && !lat {
        return Err("a second operand (send|write|read) is only valid after `lat`".into());
    }
    let size = match (a.test, a.size) {
        (TestKind::Atomic, Some(s)) if s != 8 => {
            return Err(format!("atomic messages are 8 bytes, not -s {s}"))
        }
        (TestKind::Atomic, _) => 8,
        (_, Some(0)) => return Err("-s must be at least 1".into()),
        (_, Some(s)) if s > 8 << 20 => return Err(format!("-s {s} is larger than 8 MiB")),
        (_, Some(s)) => s,
        (TestKind::Lat, None) => 8,
        (_, None) => 65536,
    };
    if ![256, 512, 1024, 2048, 4096].contains(&a.mtu) {
        return Err(format!("--mtu {} is not one of 256, 512, 1024, 2048, 4096", a.mtu));
    }
    if a.qps == 0 || a.qps > 4096 {
        return Err(format!("-q {} must be 1..=4096", a.qps));
    }
    if a.tx_depth == 0 || a.tx_depth > 1024 {
        return Err(format!("--tx-depth {} must be 1..=1024", a.tx_depth));
    }
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
        Some(d) if !(d > 0.0 && d <= 3600.0) => return Err(format!("-D {d} must be in (0, 3600]")),
        Some(d) => Some(Duration::from_secs_f64(d)),
        None => None,
    };
    let iters = a.iters.unwrap_or(if lat { 1000 } else { 5000 });
    if iters == 0 || iters > 100_000_000 {
        return Err(format!("-n {iters} must be 1..=100000000"));
    }
    if lat && a.qps != 1 {
        return Err("lat uses one QP (-q 1)".into());
    }
    // Buffers: both devices register size × slots per QP (see perf_engine).
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

/// Title as perftest prints it.
fn title(cfg: &PerfConfig) -> &'static str {
    match (cfg.test, cfg.lat_op) {
        (TestKind::Write, _) => "RDMA_Write BW Test",
        (TestKind::Read, _) => "RDMA_Read BW Test",
        (TestKind::Send, _) => "Send BW Test",
        (TestKind::Atomic, _) => "Atomic FETCH_AND_ADD BW Test",
        (TestKind::Lat, LatKind::Send) => "Send Latency Test",
        (TestKind::Lat, LatKind::Write) => "RDMA_Write Latency Test",
        (TestKind::Lat, LatKind::Read) => "RDMA_Read Latency Test",
    }
}

fn test_name(cfg: &PerfConfig) -> String {
    match cfg.test {
        TestKind::Write => "write".into(),
        TestKind::Read => "read".into(),
        TestKind::Send => "send".into(),
        TestKind::Atomic => "atomic".into(),
        TestKind::Lat => match cfg.lat_op {
            LatKind::Send => "lat_send".into(),
            LatKind::Write => "lat_write".into(),
            LatKind::Read => "lat_read".into(),
        },
    }
}

const LINE: &str =
    "---------------------------------------------------------------------------------------";

/// UDP payload of one full RoCE packet of this test (BTH 12 + ICRC 4 +
/// the first packet's extension header + data up to the MTU).
fn datagram_size(cfg: &PerfConfig) -> usize {
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

/// The raw-UDP ceiling of the three modes, Gb/s (None when a mode failed).
#[derive(Clone, Copy, Debug, Default)]
struct Ceiling {
    plain: Option<f64>,
    mmsg: Option<f64>,
    gso_gro: Option<f64>,
    payload: usize,
}

impl Ceiling {
    fn best(&self) -> Option<(f64, &'static str)> {
        [(self.plain, "plain"), (self.mmsg, "mmsg"), (self.gso_gro, "gso+gro")]
            .into_iter()
            .filter_map(|(v, n)| v.map(|v| (v, n)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    }
}

fn measure_ceiling(cfg: &PerfConfig, secs: f64, progress: bool) -> Ceiling {
    // Data flows B -> A for READ, A -> B otherwise.
    let (src, dst) = if cfg.test == TestKind::Read {
        (cfg.addr_b, cfg.addr_a)
    } else {
        (cfg.addr_a, cfg.addr_b)
    };
    let payload = datagram_size(cfg);
    let mut c = Ceiling { payload, ..Default::default() };
    for mode in CeilingMode::ALL {
        if progress {
            eprint!("\r  measuring raw UDP ceiling ({})...            ", mode.name());
        }
        let r = ceiling::measure(
            SocketAddr::new(src, 0),
            SocketAddr::new(dst, 0),
            mode,
            payload,
            Duration::from_secs_f64(secs),
        );
        let v = r.ok().map(|r| r.gbytes_per_sec() * 8.0);
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

fn gbps_to_gbytes(v: Option<f64>) -> String {
    v.map(|v| format!("{:.3} GB/s", v / 8.0)).unwrap_or_else(|| "n/a".into())
}

fn median(v: &[f64]) -> f64 {
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

fn min_med_max(v: &[f64]) -> (f64, f64, f64) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, median(v), max)
}

fn header(cfg: &PerfConfig, setup: &Setup) -> String {
    let mut s = String::new();
    s += &format!("{LINE}\n                    {}\n", title(cfg));
    s += &format!(
        " Number of qps   : {:<10}Transport type : IB (RoCEv2, emulated)\n",
        if cfg.test == TestKind::Lat { 1 } else { cfg.qps }
    );
    s += " Connection type : RC        Using SRQ      : OFF\n";
    if cfg.test == TestKind::Lat {
        s += " TX depth        : 1\n";
    } else {
        s += &format!(" TX depth        : {}\n", cfg.tx_depth);
        s += " CQ Moderation   : 1\n";
    }
    s += &format!(" Mtu             : {}[B]\n", cfg.mtu);
    s += match cfg.poll {
        PollMode::Event if cfg.spin_us > 0 => format!(
            " Link type       : Ethernet (UDP sockets, completion channel, {} us spin)\n",
            cfg.spin_us
        ),
        PollMode::Event => {
            " Link type       : Ethernet (UDP sockets, completion channel)\n".to_string()
        }
        PollMode::Busy => {
            " Link type       : Ethernet (UDP sockets, busy-polled by the test thread)\n"
                .to_string()
        }
    }
    .as_str();
    s += " GID index       : 1\n";
    s += &format!(" Device A        : {} {}\n", setup.a_name(), cfg.addr_a);
    s += &format!(" Device B        : {} {}\n", setup.b_name(), cfg.addr_b);
    s += &format!("{LINE}\n");
    for l in setup.address_lines() {
        s += &l;
        s.push('\n');
    }
    s += &format!("{LINE}\n");
    s
}

/// Run `roce perf`; returns the exit status.
pub fn run(args: &PerfArgs) -> ExitCode {
    let args = &match remote::resolve_operands(args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if remote::is_remote(args) {
        return remote::run(args);
    }
    let cfg = match validate(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("roce perf: {e}");
            return ExitCode::from(2);
        }
    };
    let progress = !args.json && std::io::stderr().is_terminal();
    let setup = match Setup::new(&cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("roce perf: {e:#}");
            return ExitCode::from(1);
        }
    };
    if cfg.test == TestKind::Lat {
        run_lat(&cfg, args, setup, progress)
    } else {
        run_bw(&cfg, args, setup, progress)
    }
}

/// Device counters taken after the runs (`--stats`).
type DevCounters = Vec<(String, roce_verbs_api::Counters, roce_transport::CountersSnapshot)>;

/// Print the header (text mode), run `one` `--repeat` times on the same
/// devices, take the device counters (`--stats`), then release the devices
/// (before the ceiling is measured on the same addresses). A failed run
/// ends the command with status 1.
fn repeated<R>(
    cfg: &PerfConfig,
    args: &PerfArgs,
    setup: Setup,
    progress: bool,
    one: fn(&Setup, &PerfConfig, u32, bool) -> anyhow::Result<R>,
    after: &mut dyn FnMut(u32),
) -> Result<(Vec<R>, Option<DevCounters>), ExitCode> {
    if !args.json {
        print!("{}", header(cfg, &setup));
    }
    let mut runs = Vec::new();
    for k in 0..args.repeat {
        match one(&setup, cfg, k, progress) {
            Ok(r) => {
                runs.push(r);
                after(k);
            }
            Err(e) => {
                eprintln!("roce perf: {e:#}");
                if args.stats {
                    print_stats(&setup.device_counters());
                }
                return Err(ExitCode::from(1));
            }
        }
    }
    let stats = args.stats.then(|| setup.device_counters());
    drop(setup);
    Ok((runs, stats))
}

/// `--stats` in text mode: each device's counters in rxe's layout, then
/// its transport counters.
fn print_stats(stats: &DevCounters) {
    let mut out = std::io::stdout().lock();
    for (name, core, wire) in stats {
        let _ = crate::counters_fmt::print_counters(name, core, &mut out);
        let pairs: Vec<(String, u64)> =
            wire.pairs().into_iter().map(|(n, v)| (n.to_string(), v)).collect();
        let _ = writeln!(out, "{name} transport:");
        for (n, v) in pairs {
            let _ = writeln!(out, "{n}: {v}");
        }
    }
}

/// `--stats` in JSON: `{"perf-a": {"counters": {..}, "transport": {..}}, ..}`.
fn stats_json(stats: &DevCounters) -> Value {
    let mut o = serde_json::Map::new();
    for (name, core, wire) in stats {
        let t: serde_json::Map<String, Value> =
            wire.pairs().into_iter().map(|(n, v)| (n.to_string(), json!(v))).collect();
        o.insert(
            name.clone(),
            json!({"counters": crate::counters_fmt::counters_json(core), "transport": t}),
        );
    }
    Value::Object(o)
}

/// With `--repeat` > 1, the GSO+GRO ceiling is also measured right after
/// each run, so that each run has a ratio against a ceiling of the same
/// moment (the host's speed drifts between runs; paired ratios see less of it).
fn paired_ceiling(cfg: &PerfConfig, args: &PerfArgs, progress: bool) -> Option<f64> {
    let (src, dst) = if cfg.test == TestKind::Read {
        (cfg.addr_b, cfg.addr_a)
    } else {
        (cfg.addr_a, cfg.addr_b)
    };
    if progress {
        eprint!("\r  measuring raw UDP ceiling (gso+gro, paired)...            ");
    }
    let r = ceiling::measure(
        SocketAddr::new(src, 0),
        SocketAddr::new(dst, 0),
        CeilingMode::GsoGro,
        datagram_size(cfg),
        Duration::from_secs_f64(args.ceiling_secs),
    );
    if progress {
        eprint!("\r{:60}\r", "");
    }
    r.ok().map(|r| r.gbytes_per_sec() * 8.0)
}

fn run_bw(cfg: &PerfConfig, args: &PerfArgs, setup: Setup, progress: bool) -> ExitCode {
    let pair = !args.no_ceiling && args.repeat > 1;
    let mut paired: Vec<Option<f64>> = Vec::new();
    let mut after = |_k: u32| {
        if pair {
            paired.push(paired_ceiling(cfg, args, progress));
        }
    };
    let (runs, stats) = match repeated(cfg, args, setup, progress, perf_engine::run_bw, &mut after)
    {
        Ok(r) => r,
        Err(code) => return code,
    };
    // Per-run ratios against the ceiling measured right after that run.
    let paired: Option<Vec<f64>> =
        (pair && paired.len() == runs.len()).then(|| paired.iter().copied().collect()).flatten();
    let paired_ratios: Option<Vec<f64>> =
        paired.as_ref().map(|c| runs.iter().zip(c).map(|(r, c)| r.gbps() / c).collect());
    let ceil = if args.no_ceiling {
        None
    } else {
        Some(measure_ceiling(cfg, args.ceiling_secs, progress))
    };
    let best = ceil.as_ref().and_then(|c| c.best());
    let gbps: Vec<f64> = runs.iter().map(|r| r.gbps()).collect();
    let ratios: Vec<f64> = gbps.iter().map(|g| best.map(|b| g / b.0).unwrap_or(0.0)).collect();
    let data_ok = runs.iter().all(|r| r.data_check.is_ok());
    let (gmin, gmed, gmax) = min_med_max(&gbps);
    let mid = &runs[runs.len() / 2];
    if args.json {
        let mut o = json!({
            "test": test_name(cfg),
            "size": cfg.size,
            "iters": mid.iters_per_qp,
            "qps": cfg.qps,
            "tx_depth": cfg.tx_depth,
            "mtu": cfg.mtu,
            "addr_a": cfg.addr_a.to_string(),
            "addr_b": cfg.addr_b.to_string(),
            "gbps": gmed,
            "gbps_peak": median(&runs.iter().map(|r| r.peak_gbps).collect::<Vec<_>>()),
            "msgs_per_s": median(&runs.iter().map(|r| r.msgs_per_s()).collect::<Vec<_>>()),
            "elapsed_s": median(&runs.iter().map(|r| r.elapsed.as_secs_f64()).collect::<Vec<_>>()),
            "data_check": if data_ok { "ok" } else { "FAILED" },
            "wire": mid.wire_json(),
            "poll": cfg.poll.name(),
            "spin_us": if cfg.poll == PollMode::Event { cfg.spin_us } else { 0 },
        });
        if let Some(st) = &stats {
            o["stats"] = stats_json(st);
        }
        if let Some(c) = &ceil {
            o["ceiling_datagram_bytes"] = json!(c.payload);
            o["ceiling_gbps"] = json!({"plain": c.plain, "mmsg": c.mmsg, "gso_gro": c.gso_gro});
            o["ceiling_best_gbps"] = json!(best.map(|b| b.0));
            o["ratio"] = json!(best.map(|_| median(&ratios)));
        } else {
            o["ceiling_gbps"] = Value::Null;
            o["ceiling_best_gbps"] = Value::Null;
            o["ratio"] = Value::Null;
        }
        if runs.len() > 1 {
            o["repeat"] = json!({
                "k": runs.len(),
                "gbps": {"min": gmin, "median": gmed, "max": gmax},
                "ratio": best.map(|_| {
                    let (a, b, c) = min_med_max(&ratios);
                    json!({"min": a, "median": b, "max": c})
                }),
                "runs_gbps": gbps,
            });
            if let (Some(c), Some(r)) = (&paired, &paired_ratios) {
                let (a, b, x) = min_med_max(c);
                let (ra, rb, rx) = min_med_max(r);
                o["repeat"]["runs_ceiling_gbps"] = json!(c);
                o["repeat"]["ceiling_gbps"] = json!({"min": a, "median": b, "max": x});
                o["repeat"]["paired_ratio"] = json!({"min": ra, "median": rb, "max": rx});
            }
        }
        println!("{o}");
    } else {
        println!(
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
        );
        for r in &runs {
            println!(
                " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
                cfg.size,
                r.iters_per_qp,
                r.peak_gbps,
                r.gbps(),
                r.msgs_per_s() / 1e6
            );
        }
        println!("{LINE}");
        if runs.len() > 1 {
            println!(
                " {} runs: BW average min / median / max = {gmin:.2} / {gmed:.2} / {gmax:.2} Gb/s",
                runs.len()
            );
        }
        println!(" wire (median run): {}", mid.wire_line());
        if let Some(c) = &ceil {
            let (src, dst) = if cfg.test == TestKind::Read {
                (cfg.addr_b, cfg.addr_a)
            } else {
                (cfg.addr_a, cfg.addr_b)
            };
            println!(
                " raw UDP ceiling {src} -> {dst}, {}-byte datagrams: plain {}  mmsg {}  gso+gro {}",
                c.payload,
                gbps_to_gbytes(c.plain),
                gbps_to_gbytes(c.mmsg),
                gbps_to_gbytes(c.gso_gro)
            );
            match best {
                Some((b, name)) if runs.len() > 1 => {
                    let (a, m, x) = min_med_max(&ratios);
                    println!(
                        " ratio = ours / best ceiling ({name}, {b:.2} Gb/s): min / median / max = {a:.3} / {m:.3} / {x:.3}"
                    );
                }
                Some((b, name)) => println!(
                    " ratio = ours / best ceiling = {gmed:.2} / {b:.2} Gb/s ({name}) = {:.3}",
                    ratios[0]
                ),
                None => println!(" ratio = n/a (no ceiling mode could be measured)"),
            }
            if let (Some(c), Some(r)) = (&paired, &paired_ratios) {
                let (a, b, x) = min_med_max(c);
                let (ra, rb, rx) = min_med_max(r);
                println!(
                    " paired: gso+gro ceiling right after each run min / median / max = {:.3} / {:.3} / {:.3} GB/s; ours / it = {ra:.3} / {rb:.3} / {rx:.3}",
                    a / 8.0,
                    b / 8.0,
                    x / 8.0
                );
            }
        }
        for (i, r) in runs.iter().enumerate() {
            let tag = if runs.len() > 1 { format!(" (run {})", i + 1) } else { String::new() };
            match &r.data_check {
                Ok(what) => println!(" data check{tag}: OK ({what})"),
                Err(what) => println!(" data check{tag}: FAILED ({what})"),
            }
        }
        println!("{LINE}");
        if let Some(st) = &stats {
            print_stats(st);
        }
    }
    if data_ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("roce perf: data check failed");
        ExitCode::from(1)
    }
}

fn lat_json(v: &LatResult) -> Value {
    json!({"min": v.min(), "median": v.percentile(0.5), "p99": v.percentile(0.99)})
}

fn run_lat(cfg: &PerfConfig, args: &PerfArgs, setup: Setup, progress: bool) -> ExitCode {
    // With --repeat > 1 the raw ping-pong also runs right after each run
    // (paired: the host's speed drifts between runs).
    let pair = !args.no_ceiling && args.repeat > 1;
    let mut paired: Vec<Option<f64>> = Vec::new();
    let mut after = |_k: u32| {
        if pair {
            let u = perf_engine::udp_rtt(cfg, datagram_size(cfg)).ok();
            paired.push(u.map(|u| u.percentile(0.5)));
        }
    };
    let (runs, stats) = match repeated(cfg, args, setup, progress, perf_engine::run_lat, &mut after)
    {
        Ok(r) => r,
        Err(code) => return code,
    };
    let paired: Option<Vec<f64>> =
        (pair && paired.len() == runs.len()).then(|| paired.iter().copied().collect()).flatten();
    // ours / raw, run by run
    let slowdown: Option<Vec<f64>> =
        paired.as_ref().map(|p| runs.iter().zip(p).map(|(r, u)| r.percentile(0.5) / u).collect());
    let udp = if args.no_ceiling {
        None
    } else {
        match perf_engine::udp_rtt(cfg, datagram_size(cfg)) {
            Ok(u) => Some(u),
            Err(e) => {
                eprintln!("roce perf: raw UDP ping-pong: {e:#}");
                None
            }
        }
    };
    let medians: Vec<f64> = runs.iter().map(|r| r.percentile(0.5)).collect();
    let mid = &runs[runs.len() / 2];
    let data_ok = runs.iter().all(|r| r.data_check.is_ok());
    if args.json {
        let mut o = json!({
            "test": test_name(cfg),
            "size": cfg.size,
            "iters": mid.samples.len(),
            "qps": 1,
            "mtu": cfg.mtu,
            "addr_a": cfg.addr_a.to_string(),
            "addr_b": cfg.addr_b.to_string(),
            "rtt_us": lat_json(mid),
            "rtt_avg_us": mid.avg(),
            "rtt_max_us": mid.max(),
            "data_check": if data_ok { "ok" } else { "FAILED" },
            "udp_rtt_us": udp.as_ref().map(lat_json),
            "ratio": udp.as_ref().map(|u| u.percentile(0.5) / mid.percentile(0.5)),
            "poll": cfg.poll.name(),
            "spin_us": if cfg.poll == PollMode::Event { cfg.spin_us } else { 0 },
        });
        if let Some(st) = &stats {
            o["stats"] = stats_json(st);
        }
        if runs.len() > 1 {
            let (a, b, c) = min_med_max(&medians);
            o["repeat"] = json!({"k": runs.len(), "median_us": {"min": a, "median": b, "max": c}});
            if let (Some(p), Some(sd)) = (&paired, &slowdown) {
                let (pa, pb, pc) = min_med_max(p);
                let (sa, sb, sc) = min_med_max(sd);
                o["repeat"]["runs_median_us"] = json!(medians);
                o["repeat"]["runs_udp_rtt_median_us"] = json!(p);
                o["repeat"]["udp_rtt_median_us"] = json!({"min": pa, "median": pb, "max": pc});
                o["repeat"]["slowdown"] = json!({"min": sa, "median": sb, "max": sc});
            }
        }
        println!("{o}");
    } else {
        println!(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ");
        for r in &runs {
            println!(
                " {:<7} {:<10}  {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
                cfg.size,
                r.samples.len(),
                r.min(),
                r.max(),
                r.percentile(0.5),
                r.avg(),
                r.stdev(),
                r.percentile(0.99),
                r.percentile(0.999)
            );
        }
        println!("{LINE}");
        println!(" times are full round trips (perftest halves them for send/write lat); t_typical = median");
        if runs.len() > 1 {
            let (a, b, c) = min_med_max(&medians);
            println!(
                " {} runs: median round trip min / median / max = {a:.2} / {b:.2} / {c:.2} usec",
                runs.len()
            );
        }
        if let Some(u) = &udp {
            println!(
                " raw UDP ping-pong {} <-> {} ({} mode), {}-byte datagrams: min {:.2}  median {:.2}  p99 {:.2} usec",
                cfg.addr_a,
                cfg.addr_b,
                if cfg.poll == PollMode::Busy { "busy-poll, one thread" } else { "blocking, echo thread" },
                datagram_size(cfg),
                u.min(),
                u.percentile(0.5),
                u.percentile(0.99)
            );
            println!(
                " ratio = raw UDP median / ours median = {:.3}",
                u.percentile(0.5) / mid.percentile(0.5)
            );
        }
        if let (Some(p), Some(sd)) = (&paired, &slowdown) {
            let (pa, pb, pc) = min_med_max(p);
            let (sa, sb, sc) = min_med_max(sd);
            println!(
                " paired: raw UDP median right after each run min / median / max = {pa:.2} / {pb:.2} / {pc:.2} usec; ours / raw = {sa:.3} / {sb:.3} / {sc:.3}"
            );
        }
        for r in &runs {
            match &r.data_check {
                Ok(w) => println!(" data check: OK ({w})"),
                Err(w) => println!(" data check: FAILED ({w})"),
            }
        }
        println!("{LINE}");
        if let Some(st) = &stats {
            print_stats(st);
        }
    }
    if data_ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("roce perf: data check failed");
        ExitCode::from(1)
    }
}
