//! `roce demo`: two emulated HCAs on a simulated fabric run a verified mix
//! of RDMA operations, or one lesson (`--scenario`, `scenario.rs`). The
//! engines are `roce_workloads::demo`; this is their front: the options
//! (`args.rs`) and the report.

mod args;
mod scenario;

#[cfg(test)]
pub(crate) use args::parse_args;
pub use args::{DemoArgs, DEMO_AFTER, DEMO_LONG};
use roce_verbs_api::{ConnectOptions, WcStatus};
use roce_workloads::demo::{PcapTap, Progress, QpTypes, Report, Workload, WorkloadConfig};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

/// Run `roce demo`; returns the process exit status.
pub fn run(args: &DemoArgs) -> ExitCode {
    if let Some(name) = &args.scenario {
        return scenario::run(name, args);
    }
    let faults = args.faults();
    let cfg = WorkloadConfig {
        ops: args.ops,
        max_size: args.size as usize,
        mix: args.mix(),
        faults,
        qp_type: args.qp_type,
        seed: args.seed,
        qps: usize::from(args.qps),
        window: usize::from(args.window),
        connect: ConnectOptions { mtu: args.mtu, ..ConnectOptions::default() },
        ..WorkloadConfig::default()
    };
    let workload = match Workload::new(cfg) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("roce demo: {e}");
            return ExitCode::from(2);
        }
    };
    let net = workload.net().clone();
    let tap = match &args.pcap {
        None => None,
        Some(path) => match start_capture(&net, path) {
            Ok(t) => Some(t),
            Err(code) => return code,
        },
    };
    // a progress line on a terminal only (runs longer than half a second)
    let mut progress = roce_workloads::progress::Progress::stderr(args.quiet || args.json);
    let report = workload.run(|p: &Progress| progress.update(p.done, p.total, "operations"));
    progress.finish();
    let mut pcap_error = None;
    if let (Some(tap), Some(path)) = (tap, &args.pcap) {
        if let Err(e) = tap.finish(&net) {
            pcap_error = Some(format!("writing {}: {e}", path.display()));
        }
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let res = if args.json {
        writeln!(out, "{}", json(args, &report, pcap_error.as_deref()))
    } else if args.quiet {
        if !report.ok() {
            for p in &report.problems {
                eprintln!("roce demo: {p}");
            }
            eprintln!("roce demo: FAIL (seed {})", report.seed);
        }
        Ok(())
    } else {
        out.write_all(text(args, &report).as_bytes())
    };
    let res = res.and_then(|()| {
        if args.stats && !args.json {
            for (name, c) in &report.counters {
                writeln!(out)?;
                crate::counters_fmt::print_counters(name, c, &mut out)?;
            }
        }
        Ok(())
    });
    if let Err(e) = res {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("roce demo: writing output: {e}");
        }
    }
    if let Some(e) = &pcap_error {
        eprintln!("roce demo: {e}");
        return ExitCode::from(1);
    }
    if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Create `path` and record the fabric into it; on failure the message
/// is printed and the exit status (2) returned.
pub(super) fn start_capture(
    net: &roce_sim::SimNet,
    path: &std::path::Path,
) -> Result<PcapTap<BufWriter<File>>, ExitCode> {
    let file = match File::create(path) {
        Ok(f) => BufWriter::new(f),
        Err(e) => {
            eprintln!("roce demo: cannot create {}: {e}", path.display());
            return Err(ExitCode::from(2));
        }
    };
    PcapTap::start(net, file).map_err(|e| {
        eprintln!("roce demo: cannot write {}: {e}", path.display());
        ExitCode::from(2)
    })
}

fn ops_per_sec(r: &Report) -> f64 {
    r.ops_completed as f64 / r.wall_time.as_secs_f64().max(1e-9)
}

fn bytes_human(b: u64) -> String {
    match b {
        b if b >= 10 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 10 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 10 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn duration_human(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// `2`, or for other transports than RC `6 (2 RC + 2 UC + 2 UD)`.
fn pairs_text(args: &DemoArgs, r: &Report) -> String {
    if args.qp_type == QpTypes::Rc {
        return args.qps.to_string();
    }
    let n: usize = r.pairs.values().sum();
    let each: Vec<String> = r.pairs.iter().map(|(t, n)| format!("{n} {t}")).collect();
    format!("{n} ({})", each.join(" + "))
}

/// The text summary.
fn text(args: &DemoArgs, r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "roce demo: {} operations between 10.0.0.1 (roce0) and 10.0.0.2 (roce1), {} QP pair(s), \
         path MTU {}, sizes {} B, seed {}",
        r.ops_requested,
        pairs_text(args, r),
        args.mtu.bytes(),
        if args.qp_type == QpTypes::Ud {
            // UD messages are one packet (and carry an 8-byte id)
            format!("8..={}", (args.size as usize).min(args.mtu.bytes()))
        } else {
            format!("0..={}", args.size)
        },
        r.seed
    );
    let kinds: Vec<String> = r.ops_by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let _ = writeln!(
        s,
        "  operations   {}; {} completed, {} of payload",
        kinds.join(", "),
        r.ops_completed,
        bytes_human(r.total_bytes())
    );
    let _ = writeln!(
        s,
        "  verified     every byte and every atomic result: {} mismatches, {} completions out of order",
        r.mismatches, r.order_errors
    );
    let st: Vec<String> = r
        .completions
        .values()
        .map(|(st, n)| {
            format!("{} {n}", if *st == WcStatus::Success { "success" } else { st.as_str() })
        })
        .collect();
    let _ = writeln!(s, "  completions  {} ({} total)", st.join(", "), r.total_completions());
    let f = &r.fabric;
    let _ = writeln!(
        s,
        "  fabric       faults loss {} dup {} reorder {} corrupt {}: {} frames sent, {} delivered, \
         {} lost, {} duplicated, {} reordered, {} corrupted",
        args.loss,
        args.dup,
        args.reorder,
        args.corrupt,
        f.transmitted,
        f.delivered,
        f.dropped(),
        f.duplicated,
        f.reordered,
        f.corrupted
    );
    for (i, (name, c)) in r.counters.iter().enumerate() {
        let nz: Vec<String> =
            c.iter().filter(|(_, v)| *v != 0).map(|(n, v)| format!("{n}={v}")).collect();
        let label = if i == 0 { "counters" } else { "" };
        let _ = writeln!(s, "  {label:<12} {name}: {}", nz.join(" "));
    }
    for (t, d) in &r.delivery {
        let _ = writeln!(
            s,
            "  delivery     {t}: {} messages sent, {} received intact, {} lost{}, {} duplicates \
             (also intact)",
            d.sent,
            d.received,
            d.lost(),
            if d.accounted() { "" } else { " (NOT ACCOUNTED FOR)" },
            d.duplicates
        );
    }
    let _ = writeln!(
        s,
        "  time         virtual {}, wall {} ({:.0}% in the fabric and HCAs, the rest posting and \
         verifying), {:.0} simulated ops per wall second, {} fabric events",
        duration_human(r.virtual_time),
        duration_human(r.wall_time),
        100.0 * r.fabric_time.as_secs_f64() / r.wall_time.as_secs_f64().max(1e-9),
        ops_per_sec(r),
        r.events
    );
    if let Some(why) = &r.stalled {
        let _ = writeln!(s, "  stopped      {why}");
    }
    for p in &r.problems {
        let _ = writeln!(s, "  problem      {p}");
    }
    if r.ok() {
        let _ = writeln!(s, "PASS");
    } else {
        let _ = writeln!(s, "FAIL: replay with `roce demo --seed {}` and the same options", r.seed);
    }
    s
}

/// The JSON summary.
fn json(args: &DemoArgs, r: &Report, pcap_error: Option<&str>) -> serde_json::Value {
    let f = &r.fabric;
    let mut j = serde_json::json!({
        "ok": r.ok() && pcap_error.is_none(),
        "seed": r.seed,
        "ops_requested": r.ops_requested,
        "ops_completed": r.ops_completed,
        "qps": args.qps,
        "qp_type": format!("{:?}", args.qp_type).to_ascii_lowercase(),
        "pairs": r.pairs.iter().map(|(t, n)| (t.name().to_string(), (*n).into()))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
        "delivery": r.delivery.iter().map(|(t, d)| (t.name().to_string(), serde_json::json!({
            "sent": d.sent, "received": d.received, "lost": d.lost(),
            "duplicates": d.duplicates, "accounted": d.accounted(),
        }))).collect::<serde_json::Map<String, serde_json::Value>>(),
        "mtu": args.mtu.bytes(),
        "max_size": args.size,
        "ops": r.ops_by_kind.iter().map(|(k, n)| (k.name().to_string(), (*n).into()))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
        "bytes": r.bytes_by_kind.iter().map(|(k, n)| (k.name().to_string(), (*n).into()))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
        "total_bytes": r.total_bytes(),
        "mismatches": r.mismatches,
        "order_errors": r.order_errors,
        "completions": r.completions.values()
            .map(|(st, n)| (format!("{st:?}"), (*n).into()))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
        "faults": { "loss": args.loss, "dup": args.dup, "reorder": args.reorder, "corrupt": args.corrupt },
        "fabric": {
            "transmitted": f.transmitted, "delivered": f.delivered, "dropped": f.dropped(),
            "dropped_loss": f.dropped_loss, "duplicated": f.duplicated,
            "reorder_held": f.reorder_held, "reordered": f.reordered,
            "corrupted": f.corrupted, "timers_fired": f.timers_fired,
        },
        "counters": r.counters.iter().map(|(name, c)| {
            let m: serde_json::Map<String, serde_json::Value> =
                c.iter().filter(|(_, v)| *v != 0).map(|(n, v)| (n.to_string(), v.into())).collect();
            (name.clone(), serde_json::Value::Object(m))
        }).collect::<serde_json::Map<String, serde_json::Value>>(),
        "virtual_time_ns": u64::try_from(r.virtual_time.as_nanos()).unwrap_or(u64::MAX),
        "wall_time_s": r.wall_time.as_secs_f64(),
        "fabric_time_s": r.fabric_time.as_secs_f64(),
        "ops_per_wall_second": ops_per_sec(r),
        "events": r.events,
        "stalled": r.stalled,
        "problems": r.problems,
        "pcap_error": pcap_error,
    });
    if args.stats {
        j["hw_counters"] = r
            .counters
            .iter()
            .map(|(name, c)| (name.clone(), crate::counters_fmt::counters_json(c)))
            .collect::<serde_json::Map<String, serde_json::Value>>()
            .into();
    }
    j
}

#[cfg(test)]
mod demo_tests {
    use super::*;
    use roce_sim::FaultConfig;
    use roce_verbs_api::PathMtu;
    use roce_workloads::demo::OpKind;
    use roce_workloads::demo::{self as workload, WorkloadConfig};

    fn parse(args: &[&str]) -> Result<DemoArgs, clap::Error> {
        parse_args(args)
    }

    #[test]
    fn defaults_and_validation() {
        let a = parse(&[]).unwrap();
        assert_eq!((a.ops, a.size, a.seed, a.qps, a.window), (1000, 4096, 1, 2, 16));
        assert_eq!(a.mtu, PathMtu::Mtu1024);
        assert_eq!(
            a.mix(),
            vec![OpKind::Send, OpKind::Write, OpKind::Read, OpKind::CmpSwap, OpKind::FetchAdd]
        );
        assert_eq!((a.loss, a.dup, a.reorder, a.corrupt), (0.0, 0.0, 0.0, 0.0));
        let a = parse(&["--mix", "read,faa", "--mtu", "4096", "--loss", "0.25"]).unwrap();
        assert_eq!(a.mix(), vec![OpKind::Read, OpKind::FetchAdd]);
        assert_eq!((a.mtu, a.loss), (PathMtu::Mtu4096, 0.25));
        let e = parse(&["--loss", "1.5"]).unwrap_err().to_string();
        assert!(e.contains("not a probability"), "{e}");
        let e = parse(&["--mtu", "1500"]).unwrap_err().to_string();
        assert!(e.contains("256, 512, 1024, 2048, 4096"), "{e}");
        let e = parse(&["--mix", "send,teleport"]).unwrap_err().to_string();
        assert!(e.contains("teleport"), "{e}");
        assert!(parse(&["--quiet", "--json"]).is_err());
        assert!(parse(&["--qps", "0"]).is_err());
    }

    #[test]
    fn summary_reports_verification_and_counters() {
        let args = parse(&["--ops", "300", "--loss", "0.05", "--mix", "send,write"]).unwrap();
        let r = workload::run(WorkloadConfig {
            ops: 300,
            mix: args.mix(),
            faults: FaultConfig::lossy(0.05),
            ..WorkloadConfig::default()
        })
        .unwrap();
        assert!(r.ok());
        let t = text(&args, &r);
        assert!(t.contains("0 mismatches, 0 completions out of order"), "{t}");
        assert!(t.contains("completions  success "), "{t}");
        assert!(t.contains("sent_pkts=") && t.contains("completer_retry_err="), "{t}");
        assert!(t.contains("seed 1") && t.trim_end().ends_with("PASS"), "{t}");
        let j = json(&args, &r, None);
        assert_eq!(j["ok"], true);
        assert_eq!(j["mismatches"], 0);
        assert_eq!(j["ops_completed"], 300);
        assert_eq!(j["ops"]["SEND"].as_u64().unwrap() + j["ops"]["WRITE"].as_u64().unwrap(), 300);
        assert!(j["fabric"]["dropped_loss"].as_u64().unwrap() > 0);
        assert!(j["counters"]["roce0"]["sent_pkts"].as_u64().unwrap() > 0);
    }

    #[test]
    fn run_writes_a_valid_pcap_and_exits_zero() {
        let path = std::env::temp_dir().join(format!("roce-demo-test-{}.pcap", std::process::id()));
        let p = path.to_str().unwrap().to_string();
        let args = parse(&["--ops", "100", "--quiet", "--pcap", &p, "--seed", "5"]).unwrap();
        assert_eq!(run(&args), ExitCode::SUCCESS);
        let frames = roce_pcap::read_capture_file(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(frames.len() > 100);
        for f in &frames {
            let ds = roce_packet::frame::parse_frame(f.linktype, &f.data, 4791).unwrap().unwrap();
            assert!(ds.iter().all(|d| d.icrc_ok()), "frame {}", f.number);
        }
    }

    #[test]
    fn qp_type_default_mix_refusal_and_delivery_lines() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.qp_type, QpTypes::Rc);
        let a = parse(&["--qp-type", "uc"]).unwrap();
        assert_eq!(a.mix(), vec![OpKind::Send, OpKind::Write]);
        assert_eq!(parse(&["--qp-type", "ud"]).unwrap().mix(), vec![OpKind::Send]);
        let e = parse(&["--qp-type", "xrc"]).unwrap_err().to_string();
        assert!(e.contains("rc, uc, ud or mixed"), "{e}");
        let bad = parse(&["--qp-type", "uc", "--mix", "send,read"]).unwrap();
        assert_eq!(run(&DemoArgs { quiet: true, ..bad }), ExitCode::from(2));
        let args = parse(&["--qp-type", "mixed", "--ops", "600", "--loss", "0.05"]).unwrap();
        let r = workload::run(WorkloadConfig {
            ops: 600,
            mix: args.mix(),
            qp_type: args.qp_type,
            faults: FaultConfig::lossy(0.05),
            ..WorkloadConfig::default()
        })
        .unwrap();
        assert!(r.ok(), "{:?}", r.problems);
        let t = text(&args, &r);
        assert!(t.contains("3 (1 RC + 1 UC + 1 UD) QP pair(s)"), "{t}");
        assert_eq!(r.delivery.len(), 2);
        for (tr, d) in &r.delivery {
            assert!(d.accounted() && d.sent > 0, "{tr}: {d:?}");
            let l = t.lines().find(|l| l.starts_with(&format!("  delivery     {tr}: "))).unwrap();
            assert!(l.contains(" messages sent, ") && l.contains(" lost, "), "{l}");
        }
        let j = json(&args, &r, None);
        assert_eq!(j["qp_type"], "mixed");
        assert_eq!(j["delivery"]["UC"]["accounted"], true);
        assert_eq!(
            j["delivery"]["UD"]["sent"].as_u64().unwrap(),
            j["delivery"]["UD"]["received"].as_u64().unwrap()
                + j["delivery"]["UD"]["lost"].as_u64().unwrap()
        );
    }
}
