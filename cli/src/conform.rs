//! `roce conform`: run the IBA conformance catalogue against a device
//! (roce-emu in this process by default, or any device with an agent) and
//! print the verdicts.

use roce_conform::catalogue;
use roce_conform::report::{json, markdown, table, tally};
use roce_conform::session::{ladder, select, Results, Session};
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

/// Run `roce conform`; returns the exit status.
pub fn run(args: &ConformArgs) -> ExitCode {
    if args.list {
        for c in catalogue::all() {
            println!("{:<44} {:<9} {:<24} {}", c.id, c.direction.name(), c.iba, c.rule);
        }
        return ExitCode::SUCCESS;
    }
    let patterns = match &args.ladder {
        Some(id) => vec![id.clone()],
        None => args.cases.clone(),
    };
    let cases = select(&patterns);
    if cases.is_empty() || (args.ladder.is_some() && cases.len() != 1) {
        eprintln!("roce conform: no case matches (roce conform --list shows them)");
        return ExitCode::from(2);
    }
    let quiet = args.json || args.markdown || args.ladder.is_some();
    let session = Session {
        target: args.target,
        addr: args.addr,
        tester_addr: args.tester_addr,
        patterns,
        pcap: args.pcap.clone(),
        progress: !quiet && std::io::stderr().is_terminal(),
    };
    let Results { target, outcomes: out } = match session.run(&cases) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("roce conform: {e}");
            return ExitCode::from(2);
        }
    };
    if args.ladder.is_some() {
        let o = &out[0];
        println!("{}  {}  {}\n  {}", o.case.id, o.case.iba, o.verdict.word(), o.case.rule);
        if !o.verdict.why().is_empty() {
            println!("  why: {}", o.verdict.why());
        }
        let color = std::io::stdout().is_terminal();
        if let Err(e) = ladder(o, color, &mut std::io::stdout().lock()) {
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
