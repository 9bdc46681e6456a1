//! `roce demo --scenario NAME`: run one lesson (`roce_workloads::demo::Lesson`)
//! and print its transcript.

use super::args::DemoArgs;
use roce_workloads::demo::Lesson;
use std::io::Write;
use std::process::ExitCode;

/// Run `roce demo --scenario NAME` (name already validated).
pub fn run(name: &str, args: &DemoArgs) -> ExitCode {
    if roce_workloads::demo::FABRIC_SCENARIOS.iter().any(|(n, _)| *n == name) {
        return run_fabric(name, args);
    }
    if args.svg.is_some() {
        eprintln!("roce demo: --svg goes with a congestion scenario (incast, dcqcn-converge, pfc-storm, hol-blocking)");
        return ExitCode::from(2);
    }
    let faults = args.faults();
    let Some(mut lesson) = Lesson::new(name, args.seed, faults) else {
        eprintln!("roce demo: unknown scenario {name:?}");
        return ExitCode::from(2);
    };
    let tap = match &args.pcap {
        None => None,
        Some(path) => match super::start_capture(lesson.net(), path) {
            Ok(t) => Some(t),
            Err(code) => return code,
        },
    };
    if let Err(e) = lesson.run() {
        eprintln!("roce demo --scenario {name}: {e}");
        return ExitCode::from(2);
    }
    if let (Some(tap), Some(path)) = (tap, &args.pcap) {
        if let Err(e) = tap.finish(lesson.net()) {
            eprintln!("roce demo: writing {}: {e}", path.display());
            return ExitCode::from(1);
        }
        lesson.note_capture(&path.display().to_string());
    }
    let ok = lesson.finish();
    if let Err(e) = print(&lesson, args, ok) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("roce demo: writing output: {e}");
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// A congestion lesson (a switched fabric: `roce_workloads::demo::fabric`):
/// its transcript, `--pcap` and `--svg`.
fn run_fabric(name: &str, args: &DemoArgs) -> ExitCode {
    // (its faults are the switch's queues; its counters are in the transcript)
    if args.faults() != roce_sim::FaultConfig::none() || args.stats {
        eprintln!(
            "roce demo --scenario {name}: --loss, --dup, --reorder, --corrupt and --stats go \
             with the two-HCA lessons, not with a switched fabric's"
        );
        return ExitCode::from(2);
    }
    let Some(l) = roce_workloads::demo::run_fabric_lesson(name, args.seed, args.pcap.is_some())
    else {
        eprintln!("roce demo: unknown scenario {name:?}");
        return ExitCode::from(2);
    };
    for (path, bytes, what) in
        [(&args.pcap, l.pcap.as_slice(), "capture"), (&args.svg, l.svg.as_bytes(), "plot")]
    {
        let Some(path) = path else { continue };
        if let Err(e) = std::fs::write(path, bytes) {
            eprintln!("roce demo: writing the {what} {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if !args.quiet || !l.ok {
        let mut out = std::io::stdout().lock();
        let mut text = l.transcript.clone();
        for (path, what) in [(&args.pcap, "capture"), (&args.svg, "plot")] {
            if let Some(p) = path {
                text.push_str(&format!("{what}: {}\n", p.display()));
            }
        }
        if let Err(e) = out.write_all(text.as_bytes()) {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                eprintln!("roce demo: writing output: {e}");
            }
        }
    }
    match l.ok {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    }
}

/// The transcript (unless `--quiet` and it passed), then `--stats`.
fn print(lesson: &Lesson, args: &DemoArgs, ok: bool) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if !args.quiet || !ok {
        out.write_all(lesson.transcript().as_bytes())?;
    }
    if args.stats {
        for (name, c) in lesson.counters() {
            writeln!(out)?;
            crate::counters_fmt::print_counters(&name, &c, &mut out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod scenario_tests {
    use super::super::args::parse_args as parse;
    use super::*;
    use roce_verbs_api::{WcOpcode, WcStatus};
    use roce_workloads::demo::{status_name, wc_opcode_name, SCENARIOS};

    #[test]
    fn every_scenario_behaves_as_described() {
        for sc in SCENARIOS {
            let args = parse(&["--scenario", sc.name, "--quiet"]).expect("parse");
            assert_eq!(run(sc.name, &args), ExitCode::SUCCESS, "scenario {}", sc.name);
        }
    }

    #[test]
    fn scenario_flags() {
        assert!(parse(&["--scenario", "teleport"]).is_err());
        assert!(parse(&["--scenario", "rnr", "--ops", "5"]).is_err());
        assert!(parse(&["--scenario", "rnr", "--json"]).is_err());
        let a = parse(&["--scenario", "rnr", "--loss", "0.1", "--seed", "3"]).expect("parse");
        assert_eq!((a.scenario.as_deref(), a.loss, a.seed), (Some("rnr"), 0.1, 3));
        assert_eq!(status_name(WcStatus::RnrRetryExcErr), "RNR_RETRY_EXC_ERR");
        assert_eq!(wc_opcode_name(WcOpcode::RecvRdmaWithImm), "RECV_RDMA_WITH_IMM");
    }

    #[test]
    fn flags_of_the_other_kind_of_lesson_are_refused() {
        // a switched fabric's lesson takes no injected faults, no --stats
        for extra in [&["--loss", "0.1"][..], &["--stats"]] {
            let mut v = vec!["--scenario", "incast"];
            v.extend_from_slice(extra);
            let a = parse(&v).expect("parse");
            assert_eq!(run("incast", &a), ExitCode::from(2), "{v:?}");
        }
        // and a two-HCA lesson no --svg
        let a = parse(&["--scenario", "rnr", "--svg", "x.svg"]).expect("parse");
        assert_eq!(run("rnr", &a), ExitCode::from(2));
    }
}
