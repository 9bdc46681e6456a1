//! Run one `roce demo --scenario NAME` lesson in a [`Lab`] and report it.

use super::args::DemoArgs;
use super::lab::*;
use super::scenarios::{fabric_of, SCENARIOS};
use roce_verbs_api::FaultConfig;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

/// Run `roce demo --scenario NAME` (name already validated).
pub fn run(name: &str, args: &DemoArgs) -> ExitCode {
    let Some(sc) = SCENARIOS.iter().find(|s| s.name == name) else {
        eprintln!("roce demo: unknown scenario {name:?}");
        return ExitCode::from(2);
    };
    let (active_mtu, link_mtu) = fabric_of(name);
    let mut lab = Lab::new(args.seed, active_mtu, link_mtu);
    lab.net.set_faults(FaultConfig {
        drop: args.loss,
        duplicate: args.dup,
        reorder: args.reorder,
        corrupt: args.corrupt,
        ..FaultConfig::default()
    });
    let tap = match &args.pcap {
        None => None,
        Some(path) => {
            let file = match File::create(path) {
                Ok(f) => BufWriter::new(f),
                Err(e) => {
                    eprintln!("roce demo: cannot create {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            };
            match lab.net.with_fabric(|f| f.record_pcap(file)) {
                Ok(id) => Some(id),
                Err(e) => {
                    eprintln!("roce demo: cannot write {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            }
        }
    };
    let faults = [
        ("loss", args.loss),
        ("dup", args.dup),
        ("reorder", args.reorder),
        ("corrupt", args.corrupt),
    ]
    .iter()
    .filter(|(_, p)| *p > 0.0)
    .map(|(n, p)| format!(" --{n} {p}"))
    .collect::<String>();
    lab.note(format!("scenario {}: {} (seed {}{faults})", sc.name, sc.about, args.seed));
    lab.note("     time  who            what");
    let res = (sc.run)(&mut lab);
    // leftovers (e.g. completions of a last step the scenario did not wait for)
    lab.run(100_000);
    if let Err(e) = res {
        eprintln!("roce demo --scenario {name}: {e}");
        return ExitCode::from(2);
    }
    lab.summary();
    if let (Some(id), Some(path)) = (tap, &args.pcap) {
        let res = lab
            .net
            .with_fabric(|f| f.finish_pcap::<BufWriter<File>>(id))
            .map_err(|e| e.to_string())
            .and_then(|mut w| w.flush().map_err(|e| e.to_string()));
        if let Err(e) = res {
            eprintln!("roce demo: writing {}: {e}", path.display());
            return ExitCode::from(1);
        }
        let frames = lab.net.stats().delivered;
        lab.note(format!(
            "pcap         {}: {frames} frames (see them: roce decode {} --ladder)",
            path.display(),
            path.display()
        ));
    }
    let ok = lab.unexpected.is_empty();
    lab.note(if ok { "PASS" } else { "FAIL" });
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut res = Ok(());
    if !args.quiet || !ok {
        res = out.write_all(lab.out.as_bytes());
    }
    if res.is_ok() && args.stats {
        for ctx in [lab.a.clone(), lab.b.clone()] {
            res = writeln!(out).and_then(|()| {
                crate::counters_fmt::print_counters(ctx.name(), &ctx.counters(), &mut out)
            });
            if res.is_err() {
                break;
            }
        }
    }
    if let Err(e) = res {
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

#[cfg(test)]
mod scenario_tests {
    use super::super::args::parse_args as parse;
    use super::*;
    use roce_verbs_api::{WcOpcode, WcStatus};

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
}
