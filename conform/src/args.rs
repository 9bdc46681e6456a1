//! `roce conform`'s options and help text (with the `clap` feature, for
//! the `roce` binary), beside the code they drive ([`crate::session`]).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

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

impl ConformArgs {
    /// The case patterns: the one `--ladder` case, or `--case`'s.
    pub fn patterns(&self) -> Vec<String> {
        self.ladder.clone().map_or_else(|| self.cases.clone(), |id| vec![id])
    }

    /// The run these options ask for (a `[k/n] case` line on a terminal's
    /// stderr, unless the output is JSON, Markdown or a ladder).
    pub fn session(&self) -> crate::session::Session {
        use std::io::IsTerminal;
        let quiet = self.json || self.markdown || self.ladder.is_some();
        let progress = !quiet && std::io::stderr().is_terminal();
        crate::session::Session {
            target: self.target,
            addr: self.addr,
            tester_addr: self.tester_addr,
            patterns: self.patterns(),
            pcap: self.pcap.clone(),
            progress,
        }
    }
}
