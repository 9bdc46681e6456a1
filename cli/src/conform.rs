//! `roce conform`: run the IBA conformance catalogue against a device
//! (roce-emu in this process by default, or any device with an agent) and
//! print the verdicts.

use roce_conform::agent::Agent;
use roce_conform::case::Case;
use roce_conform::catalogue;
use roce_conform::local::LocalAgent;
use roce_conform::remote::RemoteAgent;
use roce_conform::report::{json, markdown, table, tally};
use roce_conform::run::{Outcome, Runner};
use roce_conform::wire::Wire;
use std::io::IsTerminal;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

pub const CONFORM_LONG: &str = "Test a RoCE device against the InfiniBand Architecture's rules, \
packet by packet. The tester sends crafted RoCEv2 packets from UDP port 4791 of its own address \
(--tester-addr) to the device under test and checks what comes back: the NAK code, the PSN, the \
READ data, silence; and, through an agent that does only what an application would (create a QP, \
post work, poll completions), the completion statuses, QP states and memory bytes. Each case cites \
its IBA section or compliance statement (C9-xx). Without --target the device is a roce-emu UDP \
device this command opens itself (no root needed).";

pub const CONFORM_AFTER: &str = "Examples:
  roce conform                          every case against a roce-emu device of this process
  roce conform --list                   the catalogue: id, direction, IBA rule
  roce conform --case 'resp.psn.*'      only the cases whose id matches (* and ? wildcards)
  roce conform --ladder resp.psn.ahead-naks   one case as a ladder diagram
  roce conform --json > verdicts.json   one JSON object for CI
  roce conform --markdown               the verdicts as a Markdown table
  roce conform --pcap out/              a pcap per case (out/CASE.pcap)

Another device (kernel rxe, a NIC, roce-emu in another process) runs the agent
conform/agent/roce-conform-agent.py (pyverbs) beside it:
  agent host:   roce-conform-agent.py --dev rxe0 --addr 192.168.77.2
  tester host:  roce conform --target 192.168.77.2:18700 --tester-addr 192.168.77.1
(docs/conformance.md: the lab's rxe in one command, scripts/conform-rxe.sh).

Exit status: 0 every case passed or is n/a, 1 a case failed, 2 the run could not start.";

/// Options of `roce conform`.
#[derive(clap::Args, Debug, Clone)]
pub struct ConformArgs {
    /// The device's agent (HOST:PORT of roce-conform-agent.py). Default: a roce-emu UDP
    /// device opened by this command on --addr.
    #[arg(long, value_name = "HOST:PORT")]
    pub target: Option<SocketAddr>,
    /// Address of the roce-emu device opened without --target.
    #[arg(long, value_name = "IP", default_value = "127.0.47.1")]
    pub addr: IpAddr,
    /// The tester's own address (UDP port 4791 on it must be free); with --target, an
    /// address the device can reach.
    #[arg(long, value_name = "IP", default_value = "127.0.47.2")]
    pub tester_addr: IpAddr,
    /// Run only the cases whose id matches PATTERN (* and ? wildcards; repeatable).
    #[arg(long = "case", value_name = "PATTERN")]
    pub cases: Vec<String>,
    /// List the cases and exit.
    #[arg(long)]
    pub list: bool,
    /// One JSON object with every verdict instead of the table.
    #[arg(long, conflicts_with = "ladder")]
    pub json: bool,
    /// The verdicts as a Markdown table (for docs/conformance.md).
    #[arg(long, conflicts_with_all = ["json", "ladder"])]
    pub markdown: bool,
    /// Write each case's packets to DIR/CASE.pcap.
    #[arg(long, value_name = "DIR")]
    pub pcap: Option<PathBuf>,
    /// Run one case and draw its exchange as a ladder diagram.
    #[arg(long, value_name = "CASE")]
    pub ladder: Option<String>,
}

/// `*` any run, `?` one character.
fn matches(pat: &str, s: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pat.chars().collect(), s.chars().collect());
    let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

fn selected(args: &ConformArgs) -> Vec<&'static Case> {
    let all = catalogue::all();
    if let Some(l) = &args.ladder {
        return all.into_iter().filter(|c| c.id == l).collect();
    }
    if args.cases.is_empty() {
        return all;
    }
    all.into_iter().filter(|c| args.cases.iter().any(|p| matches(p, c.id))).collect()
}

fn ladder(o: &Outcome) -> Result<(), String> {
    let frames = roce_pcap::read_capture(&o.pcap).map_err(|e| e.to_string())?;
    let style = roce_decode::Style {
        json: false,
        explain: false,
        filter: roce_decode::Filter::default(),
        ladder: true,
        svg: None,
        stats: false,
        color: std::io::stdout().is_terminal(),
        gap_ms: 50.0,
        name: o.case.id.to_string(),
    };
    let mut out = std::io::stdout().lock();
    roce_decode::decode_frames(&frames, roce_packet::ROCE_V2_PORT, &style, &mut out)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Run `roce conform`; returns the exit status.
pub fn run(args: &ConformArgs) -> ExitCode {
    let cases = selected(args);
    if args.list {
        for c in catalogue::all() {
            println!("{:<44} {:<9} {:<24} {}", c.id, c.direction.name(), c.iba, c.rule);
        }
        return ExitCode::SUCCESS;
    }
    if cases.is_empty() {
        eprintln!("roce conform: no case matches (roce conform --list shows them)");
        return ExitCode::from(2);
    }
    let mut agent: Box<dyn Agent> = match args.target {
        Some(at) => match RemoteAgent::connect(at) {
            Ok(a) => Box::new(a),
            Err(e) => {
                eprintln!("roce conform: {e}");
                return ExitCode::from(2);
            }
        },
        None => match LocalAgent::open("conform0", args.addr) {
            Ok(a) => Box::new(a),
            Err(e) => {
                eprintln!("roce conform: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let target = agent.describe();
    let wire = match Wire::bind(args.tester_addr, agent.addr()) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("roce conform: tester socket {}:4791: {e}", args.tester_addr);
            return ExitCode::from(2);
        }
    };
    if let Some(dir) = &args.pcap {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("roce conform: {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    }
    let mut r = Runner::new(agent.as_mut(), wire);
    let quiet =
        args.json || args.markdown || args.ladder.is_some() || !std::io::stderr().is_terminal();
    let mut out = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        if !quiet {
            eprint!("\r[{}/{}] {:<50}", i + 1, cases.len(), c.id);
        }
        let o = r.run(c);
        if let Some(dir) = &args.pcap {
            let p = dir.join(format!("{}.pcap", c.id));
            if let Err(e) = std::fs::write(&p, &o.pcap) {
                eprintln!("roce conform: {}: {e}", p.display());
            }
        }
        out.push(o);
    }
    if !quiet {
        eprint!("\r{:<60}\r", "");
    }
    if args.ladder.is_some() {
        let o = &out[0];
        println!("{}  {}  {}\n  {}", o.case.id, o.case.iba, o.verdict.word(), o.case.rule);
        if !o.verdict.why().is_empty() {
            println!("  why: {}", o.verdict.why());
        }
        if let Err(e) = ladder(o) {
            eprintln!("roce conform: ladder: {e}");
            return ExitCode::from(2);
        }
    } else if args.markdown {
        print!("{}", markdown(&target, &out));
    } else if args.json {
        println!("{}", json(&target, &out));
    } else {
        print!("{}", table(&target, &out));
    }
    if tally(&out).fail > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn wildcards() {
        assert!(matches("resp.psn.*", "resp.psn.wraps"));
        assert!(matches("*", "anything"));
        assert!(matches("req.?ak.*", "req.nak.remote-access"));
        assert!(!matches("resp.psn.*", "req.send.acked"));
        assert!(matches("resp.psn.wraps", "resp.psn.wraps"));
        assert!(!matches("resp.psn.wrap", "resp.psn.wraps"));
        assert!(matches("*access*", "resp.access.read"));
    }
}
