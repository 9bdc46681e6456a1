//! `roce stats [DEVICE...]`: the counters other processes' devices publish
//! (roce_host::publish), printed in rxe's hw_counters layout.

use crate::counters_fmt;
use roce_host::publish::{self, Snapshot};
use roce_host::DeviceConfig;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Long help of `roce stats`.
pub const STATS_LONG: &str = "\
Print the counters of emulated devices with the Linux rxe driver's names, one `name: value` per \
line like `grep . /sys/class/infiniband/rxe0/ports/1/hw_counters/*`: rxe's 15 counters first, \
then the emulator's own after a `# not in rxe` line.

A device's HCA core lives inside each process that opened it (an example, `roce perf`, your \
program); a device is shared by every process of the user that opens it. While it is open, each \
process writes its counters every 200 ms (ROCE_EMU_STATS_INTERVAL_MS) to \
$XDG_RUNTIME_DIR/roce-emu/NAME/members/PID/ and their sum to $XDG_RUNTIME_DIR/roce-emu/NAME/ \
(ROCE_EMU_RUNTIME_DIR overrides the base): hw_counters/<counter>, one file per counter as in \
sysfs, and counters.json; this command reads them and prints the sum, then one line per member \
process with its non-zero counters. The last values \
stay after the process ends (marked `closed`). ROCE_EMU_STATS=0 turns publishing off.

Without DEVICE: every configured device (ROCE_EMU_DEVICES, devices.conf) and every device that \
published counters.

Exit status: 0 if every device's counters were found, 1 if some were not, 2 on a usage or \
configuration error.";

/// Examples.
pub const STATS_AFTER: &str = "\
Examples:
  roce stats roce0                   the counters of roce0
  roce stats --json | jq .           one JSON object per device
  roce stats roce0 --watch 1         every second, with (+delta) after changed values
  roce stats roce0 --watch 1 --count 5
  grep . $XDG_RUNTIME_DIR/roce-emu/roce0/hw_counters/*   the raw files";

/// Options of `roce stats`.
#[derive(clap::Args, Debug, Clone)]
pub struct StatsArgs {
    /// Devices to show (default: every configured or published device).
    pub devices: Vec<String>,
    /// One JSON object per device and round:
    /// {"device","addr","pid","running","updated_ms","counters":{...},"members":[...]}.
    #[arg(long)]
    pub json: bool,
    /// Print again every SECS seconds (until --count rounds or Ctrl-C).
    #[arg(long, value_name = "SECS")]
    pub watch: Option<f64>,
    /// Rounds to print with --watch.
    #[arg(long, value_name = "N", requires = "watch")]
    pub count: Option<u64>,
}

fn device_names(args: &StatsArgs) -> Result<Vec<String>, String> {
    if !args.devices.is_empty() {
        return Ok(args.devices.clone());
    }
    let mut names: Vec<String> = DeviceConfig::load_configured()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|d| d.name)
        .collect();
    let mut published: Vec<String> = std::fs::read_dir(publish::runtime_dir())
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.path().join("counters.json").is_file())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    published.sort();
    for p in published {
        if !names.contains(&p) {
            names.push(p);
        }
    }
    Ok(names)
}

use publish::alive;

/// A device's state: from its members when several processes share it.
fn device_state(s: &Snapshot, members: &[Snapshot]) -> &'static str {
    if members.is_empty() {
        return state(s);
    }
    match members.iter().filter(|m| m.pid != 0).map(state).find(|st| *st == "running") {
        Some(r) => r,
        None => "closed",
    }
}

/// One line per member of a shared device: pid, state and its non-zero
/// counters.
/// The QPs whose rate DCQCN limits (a CNP cut it), if any.
fn rate_line(s: &Snapshot, out: &mut impl Write) -> std::io::Result<()> {
    if s.qp_rates.is_empty() {
        return Ok(());
    }
    let v: Vec<String> = s.qp_rates.iter().map(|(q, r)| format!("{q:#x} {r} Mb/s")).collect();
    writeln!(out, "# rate-limited QPs (DCQCN, after CNPs): {}", v.join(", "))
}

fn member_lines(members: &[Snapshot], out: &mut impl Write) -> std::io::Result<()> {
    if members.is_empty() {
        return Ok(());
    }
    let n = members.iter().filter(|m| m.pid != 0).count();
    let what = if n == 1 { "process" } else { "processes" };
    writeln!(out, "# the sum over {n} member {what} (and those that ended before):")?;
    for m in members {
        if m.pid == 0 {
            continue;
        }
        let nz: Vec<String> =
            m.counters.iter().filter(|(_, v)| *v != 0).map(|(n, v)| format!("{n} {v}")).collect();
        let nz = if nz.is_empty() { "all zero".to_string() } else { nz.join(", ") };
        writeln!(out, "#   pid {} ({}): {nz}", m.pid, state(m))?;
    }
    Ok(())
}

fn state(s: &Snapshot) -> &'static str {
    if !s.running {
        "closed"
    } else if alive(s.pid) {
        "running"
    } else {
        "stale"
    }
}

fn json_line(s: &Snapshot) -> serde_json::Value {
    serde_json::json!({
        "device": s.name,
        "addr": s.addr,
        "pid": s.pid,
        "running": s.running && alive(s.pid),
        "state": state(s),
        "updated_ms": s.updated_ms,
        "counters": s.counters.iter().map(|(n, v)| (n.clone(), (*v).into()))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
        "qp_rates": s.qp_rates.iter()
            .map(|(q, r)| serde_json::json!({"qpn": q, "rate_mbps": r}))
            .collect::<Vec<_>>(),
    })
}

/// Run `roce stats`; returns the process exit status.
pub fn run(args: &StatsArgs) -> ExitCode {
    if let Some(w) = args.watch {
        if !(w.is_finite() && w > 0.0) {
            eprintln!("roce stats: --watch needs a positive number of seconds");
            return ExitCode::from(2);
        }
    }
    let names = match device_names(args) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("roce stats: {e}");
            return ExitCode::from(2);
        }
    };
    if names.is_empty() {
        eprintln!(
            "roce stats: no devices: none configured (ROCE_EMU_DEVICES, devices.conf) and none \
             published under {}",
            publish::runtime_dir().display()
        );
        return ExitCode::from(1);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut prev: Vec<Option<Snapshot>> = vec![None; names.len()];
    let mut missing;
    let mut round = 0u64;
    loop {
        round += 1;
        missing = false;
        for (i, name) in names.iter().enumerate() {
            let snap = match publish::read(name) {
                Ok(s) => s,
                Err(e) => {
                    missing = true;
                    let why = if e.kind() == std::io::ErrorKind::NotFound {
                        format!(
                            "no counters published under {} (the device is not open in any \
                             process, or ROCE_EMU_STATS=0)",
                            publish::device_dir(name).display()
                        )
                    } else {
                        e.to_string()
                    };
                    eprintln!("roce stats: {name}: {why}");
                    continue;
                }
            };
            let members = publish::read_members(name);
            let res = if args.json {
                let mut j = json_line(&snap);
                j["state"] = device_state(&snap, &members).into();
                j["running"] = (device_state(&snap, &members) == "running").into();
                j["members"] = members.iter().map(json_line).collect();
                writeln!(out, "{j}")
            } else {
                let st = device_state(&snap, &members);
                let title = format!("{} ({}, {st})", snap.name, snap.addr);
                let old = prev[i].as_ref().map(|p| p.counters.as_slice());
                counters_fmt::print_pairs(&title, &snap.counters, old, &mut out)
                    .and_then(|()| rate_line(&snap, &mut out))
                    .and_then(|()| member_lines(&members, &mut out))
            };
            if let Err(e) = res.and_then(|()| out.flush()) {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return ExitCode::SUCCESS;
                }
                eprintln!("roce stats: writing output: {e}");
                return ExitCode::from(2);
            }
            prev[i] = Some(snap);
        }
        let Some(w) = args.watch else { break };
        if args.count.is_some_and(|n| round >= n) {
            break;
        }
        if !args.json {
            let _ = writeln!(out);
        }
        std::thread::sleep(Duration::from_secs_f64(w));
    }
    if missing {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
