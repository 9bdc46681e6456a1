//! `roce perf`: perftest-like bandwidth and latency tests between two
//! emulated HCAs (two UDP devices on two loopback addresses in one
//! process, each with its own engine), next to the raw-UDP ceiling
//! between the same two addresses, or one side of a run across processes
//! (`remote.rs`). The engine is `roce_workloads::perf`; this is its front:
//! the options (`args.rs`) and the report. See docs/perf.md.

mod args;
mod remote;

pub use args::{PerfArgs, PERF_AFTER, PERF_LONG};
use roce_workloads::perf::reference::data_flow;
use roce_workloads::perf::{self as perf_workload, median, min_med_max, reported_spin};
use roce_workloads::perf::{BwSeries, DevCounters, LatResult, LatSeries, SeriesOptions, Setup};
use roce_workloads::perf::{LatKind, PerfConfig, PollMode, TestKind};
use serde_json::{json, Value};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

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

fn gbps_to_gbytes(v: Option<f64>) -> String {
    v.map(|v| format!("{:.3} GB/s", v / 8.0)).unwrap_or_else(|| "n/a".into())
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
    let args = &match args::resolve_operands(args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if args::is_remote(args) {
        return remote::run(args);
    }
    let cfg = match args::validate(args) {
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
    if !args.json {
        print!("{}", header(&cfg, &setup));
    }
    let opts = SeriesOptions {
        repeat: args.repeat,
        stats: args.stats,
        reference: !args.no_ceiling,
        ceiling_secs: args.ceiling_secs,
        progress,
    };
    let data_ok = if cfg.test == TestKind::Lat {
        match perf_workload::lat_series(&cfg, setup, &opts) {
            Ok(s) => report_lat(&cfg, args, &s),
            Err(f) => return failed(f),
        }
    } else {
        match perf_workload::bw_series(&cfg, setup, &opts) {
            Ok(s) => report_bw(&cfg, args, &s),
            Err(f) => return failed(f),
        }
    };
    if data_ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("roce perf: data check failed");
        ExitCode::from(1)
    }
}

/// A run failed: the error, the counters when asked for; status 1.
fn failed(f: perf_workload::SeriesFailed) -> ExitCode {
    eprintln!("roce perf: {:#}", f.error);
    if let Some(st) = &f.stats {
        print_stats(st);
    }
    ExitCode::from(1)
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

/// The bandwidth report (JSON or text); returns whether the data checks passed.
fn report_bw(cfg: &PerfConfig, args: &PerfArgs, s: &BwSeries) -> bool {
    if args.json {
        println!("{}", bw_json(cfg, s));
    } else {
        print_bw(cfg, s);
    }
    s.data_ok()
}

fn bw_json(cfg: &PerfConfig, s: &BwSeries) -> Value {
    let runs = &s.runs;
    let gbps = s.gbps();
    let (_, gmed, _) = min_med_max(&gbps);
    let mid = s.mid();
    let best = s.best();
    let ratios = s.ratios();
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
        "data_check": if s.data_ok() { "ok" } else { "FAILED" },
        "wire": mid.wire_json(),
        "poll": cfg.poll.name(),
        "spin_us": reported_spin(cfg),
    });
    if let Some(st) = &s.stats {
        o["stats"] = stats_json(st);
    }
    if let Some(c) = &s.ceiling {
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
            "gbps": spread(&gbps),
            "ratio": best.map(|_| spread(&ratios)),
            "runs_gbps": gbps,
        });
        if let (Some(c), Some(r)) = (&s.paired, &s.paired_ratios()) {
            o["repeat"]["runs_ceiling_gbps"] = json!(c);
            o["repeat"]["ceiling_gbps"] = spread(c);
            o["repeat"]["paired_ratio"] = spread(r);
        }
    }
    o
}

/// The minimum, median and maximum of `v` as JSON.
fn spread(v: &[f64]) -> Value {
    let (min, median, max) = min_med_max(v);
    json!({"min": min, "median": median, "max": max})
}

fn print_bw(cfg: &PerfConfig, s: &BwSeries) {
    let runs = &s.runs;
    println!(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]");
    for r in runs {
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
    let (gmin, gmed, gmax) = min_med_max(&s.gbps());
    if runs.len() > 1 {
        println!(
            " {} runs: BW average min / median / max = {gmin:.2} / {gmed:.2} / {gmax:.2} Gb/s",
            runs.len()
        );
    }
    println!(" wire (median run): {}", s.mid().wire_line());
    if s.ceiling.is_some() {
        print_bw_ceiling(cfg, s, gmed);
    }
    for (i, r) in runs.iter().enumerate() {
        let tag = if runs.len() > 1 { format!(" (run {})", i + 1) } else { String::new() };
        match &r.data_check {
            Ok(what) => println!(" data check{tag}: OK ({what})"),
            Err(what) => println!(" data check{tag}: FAILED ({what})"),
        }
    }
    println!("{LINE}");
    if let Some(st) = &s.stats {
        print_stats(st);
    }
}

/// The ceiling, the ratio, and the paired ratios.
fn print_bw_ceiling(cfg: &PerfConfig, s: &BwSeries, gmed: f64) {
    let Some(c) = &s.ceiling else { return };
    let (src, dst) = data_flow(cfg);
    println!(
        " raw UDP ceiling {src} -> {dst}, {}-byte datagrams: plain {}  mmsg {}  gso+gro {}",
        c.payload,
        gbps_to_gbytes(c.plain),
        gbps_to_gbytes(c.mmsg),
        gbps_to_gbytes(c.gso_gro)
    );
    let ratios = s.ratios();
    match s.best() {
        Some((b, name)) if s.runs.len() > 1 => {
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
    if let (Some(c), Some(r)) = (&s.paired, &s.paired_ratios()) {
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

fn lat_json(v: &LatResult) -> Value {
    json!({"min": v.min(), "median": v.percentile(0.5), "p99": v.percentile(0.99)})
}

/// The latency report (JSON or text); returns whether the data checks passed.
fn report_lat(cfg: &PerfConfig, args: &PerfArgs, s: &LatSeries) -> bool {
    if let Some(e) = &s.udp_error {
        eprintln!("roce perf: raw UDP ping-pong: {e}");
    }
    if args.json {
        println!("{}", lat_series_json(cfg, s));
    } else {
        print_lat(cfg, s);
    }
    s.data_ok()
}

fn lat_series_json(cfg: &PerfConfig, s: &LatSeries) -> Value {
    let (runs, mid, udp) = (&s.runs, s.mid(), &s.udp);
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
        "data_check": if s.data_ok() { "ok" } else { "FAILED" },
        "udp_rtt_us": udp.as_ref().map(lat_json),
        "ratio": udp.as_ref().map(|u| u.percentile(0.5) / mid.percentile(0.5)),
        "poll": cfg.poll.name(),
        "spin_us": reported_spin(cfg),
    });
    if let Some(st) = &s.stats {
        o["stats"] = stats_json(st);
    }
    if runs.len() > 1 {
        let medians = s.medians();
        o["repeat"] = json!({"k": runs.len(), "median_us": spread(&medians)});
        if let (Some(p), Some(sd)) = (&s.paired, &s.slowdown()) {
            o["repeat"]["runs_median_us"] = json!(medians);
            o["repeat"]["runs_udp_rtt_median_us"] = json!(p);
            o["repeat"]["udp_rtt_median_us"] = spread(p);
            o["repeat"]["slowdown"] = spread(sd);
        }
    }
    o
}

fn print_lat(cfg: &PerfConfig, s: &LatSeries) {
    let runs = &s.runs;
    println!(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ");
    for r in runs {
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
    println!(
        " times are full round trips (perftest halves them for send/write lat); t_typical = median"
    );
    if runs.len() > 1 {
        let (a, b, c) = min_med_max(&s.medians());
        println!(
            " {} runs: median round trip min / median / max = {a:.2} / {b:.2} / {c:.2} usec",
            runs.len()
        );
    }
    if let Some(u) = &s.udp {
        println!(
            " raw UDP ping-pong {} <-> {} ({} mode), {}-byte datagrams: min {:.2}  median {:.2}  p99 {:.2} usec",
            cfg.addr_a,
            cfg.addr_b,
            if cfg.poll == PollMode::Busy { "busy-poll, one thread" } else { "blocking, echo thread" },
            perf_workload::reference::datagram_size(cfg),
            u.min(),
            u.percentile(0.5),
            u.percentile(0.99)
        );
        println!(
            " ratio = raw UDP median / ours median = {:.3}",
            u.percentile(0.5) / s.mid().percentile(0.5)
        );
    }
    if let (Some(p), Some(sd)) = (&s.paired, &s.slowdown()) {
        let (pa, pb, pc) = min_med_max(p);
        let (sa, sb, sc) = min_med_max(sd);
        println!(
            " paired: raw UDP median right after each run min / median / max = {pa:.2} / {pb:.2} / {pc:.2} usec; ours / raw = {sa:.3} / {sb:.3} / {sc:.3}"
        );
    }
    for r in runs {
        match &r.data_check {
            Ok(w) => println!(" data check: OK ({w})"),
            Err(w) => println!(" data check: FAILED ({w})"),
        }
    }
    println!("{LINE}");
    if let Some(st) = &s.stats {
        print_stats(st);
    }
}
