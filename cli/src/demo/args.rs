//! The options of `roce demo` (the workload and `--scenario`) and their help.

use roce_sim::FaultConfig;
use roce_verbs_api::PathMtu;
use roce_workloads::demo::{OpKind, QpTypes, SCENARIOS};
use std::path::PathBuf;

/// Long help of `roce demo`.
pub const DEMO_LONG: &str = "\
Run two emulated RoCEv2 HCAs, 10.0.0.1 (roce0) and 10.0.0.2 (roce1), inside an in-memory \
simulated network (no real network is touched) and make them do a mix of RDMA operations: SEND, \
RDMA WRITE, RDMA READ, ATOMIC CMP_AND_SWP and FETCH_AND_ADD, with sizes from 0 bytes to --size, \
in both directions over --qps reliable-connected queue pairs, many operations in flight at once.

Every byte is verified: each operation carries its own pseudo-random pattern, which is compared \
with what arrived (WRITE target, READ result, received SEND). Atomics are checked against a model \
of the remote 8-byte word. Every completion must have status SUCCESS and arrive in posting order \
per queue pair.

The simulated fabric can lose, duplicate, reorder and corrupt packets (one flipped bit, which the \
receiver's ICRC check must catch). RC recovers from all of it with acknowledgements, PSN sequence \
NAKs, go-back-N retransmission and timeouts, so the data must still be exact. Everything random \
comes from --seed: the same seed replays the same run, packet for packet.

--qp-type picks the transport: rc (default), uc (SEND and RDMA WRITE only), ud (SEND only, at most \
one MTU per message) or mixed (RC, UC and UD queue pairs at once, sharing each HCA's completion \
queue; RC and UD receive from one shared receive queue per HCA). UC and UD do not retransmit: \
under loss messages vanish. The demo then counts, per transport, the messages sent, received \
(each checked byte for byte) and lost, and the duplicates a duplicating network delivered.

Exit status: 0 if there were zero mismatches, every completion succeeded and (UC/UD) every \
message sent was either received intact or counted lost, 1 otherwise, 2 on a usage or setup error \
(e.g. --qp-type uc with --mix read).";

/// Examples and the meaning of the summary.
pub const DEMO_AFTER: &str = "\
Examples:
  roce demo                                   1000 mixed operations, no faults
  roce demo --ops 100000 --loss 0.1 --dup 0.05 --reorder 0.1 --corrupt 0.001
                                              the same under a hostile network
  roce demo --mix read --size 65536 --mtu 4096 large RDMA READs only
  roce demo --qp-type mixed --qps 6 --loss 0.02 RC, UC and UD at once; UC/UD losses reported
  roce demo --ops 50 --loss 0.2 --pcap run.pcap && roce decode run.pcap --explain
                                              record what the receivers saw, then read it
  roce demo --json | jq .counters             machine-readable summary
  roce demo --scenario rnr --pcap rnr.pcap    one lesson: a SEND meets no receive buffer (RNR)
                                              (--help lists every scenario with a one-line description)

The summary:
  operations   how many of each kind were posted, and the payload bytes they moved
  verified     data/atomic mismatches and out-of-order completions (both must be 0)
  completions  send and receive completions by status (all must be success)
  fabric       what the simulated network did: frames sent and delivered, lost, duplicated,
               held back for reordering, corrupted
  counters     each HCA's non-zero counters, with the Linux rxe driver's names:
               sent_pkts/rcvd_pkts, duplicate_request (a retransmitted or duplicated request
               the responder had already executed), out_of_seq_request (a gap: answered with a
               PSN sequence error NAK), rcvd_seq_err (such NAKs received), completer_retry_err
               (retransmissions started), icrc_err (corrupted frames caught and dropped), ...
  delivery     (UC/UD) messages sent, received and lost, duplicates received
  time         virtual time inside the simulation, wall-clock time, and simulated operations per
               wall-clock second
The --pcap file has one frame per delivered datagram (corrupted ones included, lost ones not),
timestamped with the virtual clock.";

fn probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a probability between 0 and 1"))
    }
}

fn mtu(s: &str) -> Result<PathMtu, String> {
    s.parse::<usize>()
        .ok()
        .and_then(PathMtu::from_bytes)
        .ok_or_else(|| format!("{s:?}: the path MTU is one of 256, 512, 1024, 2048, 4096"))
}

/// clap value parser of `--scenario`: the known names, each with its
/// one-line description (listed by `roce demo --help`).
fn scenario_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        SCENARIOS.iter().map(|s| clap::builder::PossibleValue::new(s.name).help(s.about)).chain(
            roce_workloads::demo::FABRIC_SCENARIOS
                .iter()
                .map(|(n, a)| clap::builder::PossibleValue::new(*n).help(*a)),
        ),
    )
}

/// A parsed `--mix`.
#[derive(Clone, Debug)]
pub struct Mix(pub Vec<OpKind>);

fn mix(s: &str) -> Result<Mix, String> {
    OpKind::parse_mix(s).map(Mix)
}

/// Options of `roce demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Operations to run (all queue pairs and both directions together).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub ops: u64,
    /// Largest message in bytes; SEND/WRITE/READ sizes vary from 0 to this (atomics are 8).
    #[arg(long, value_name = "BYTES", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(8..=(1 << 24)))]
    pub size: u32,
    /// Operation kinds to draw from: send, write, read, atomic (both atomics), cas, faa, all
    /// [default: send,write,read,atomic; with --qp-type uc: send,write; ud: send].
    #[arg(long, value_name = "LIST", value_parser = mix)]
    pub mix: Option<Mix>,
    /// Transport of the queue pairs: rc, uc, ud, or mixed (all three at once).
    #[arg(long, value_name = "TYPE", default_value = "rc", value_parser = QpTypes::parse)]
    pub qp_type: QpTypes,
    /// Probability that a packet is lost.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = probability)]
    pub loss: f64,
    /// Probability that a packet is delivered twice.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = probability)]
    pub dup: f64,
    /// Probability that a packet is held back 20 µs so later ones overtake it.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = probability)]
    pub reorder: f64,
    /// Probability that one bit of a packet is flipped (the ICRC must catch it).
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = probability)]
    pub corrupt: f64,
    /// Seed of everything random (faults, sizes, data, keys, PSNs): same seed, same run.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Write every delivered frame to this pcap file (virtual-clock timestamps).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Path MTU of the queue pairs: 256, 512, 1024, 2048 or 4096.
    #[arg(long, value_name = "BYTES", default_value = "1024", value_parser = mtu)]
    pub mtu: PathMtu,
    /// Queue pairs between the two HCAs (each carries traffic both ways).
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub qps: u16,
    /// Operations in flight per queue pair and direction.
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub window: u16,
    /// Print nothing unless the run fails.
    #[arg(long, conflicts_with = "json")]
    pub quiet: bool,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Print every counter of both HCAs at the end (rxe's names first, zeros included;
    /// with --json: a "hw_counters" object).
    #[arg(long)]
    pub stats: bool,
    /// Instead of the mixed workload, run one small named lesson (docs/course/): every verb,
    /// completion and status printed with its virtual time. --seed, --pcap, --loss, --dup,
    /// --reorder, --corrupt, --stats and --quiet apply (a congestion lesson, on a switched
    /// fabric, takes --seed, --pcap, --svg and --quiet); exit 0 when it behaved as described.
    #[arg(long, value_name = "NAME", value_parser = scenario_names(),
          conflicts_with_all = ["ops", "size", "mix", "qp_type", "mtu", "qps", "window", "json"])]
    pub scenario: Option<String>,
    /// With a congestion scenario (incast, dcqcn-converge, pfc-storm, hol-blocking): write
    /// a plot of each flow's rate and the switch queue over time to this SVG file.
    #[arg(long, value_name = "FILE", requires = "scenario")]
    pub svg: Option<PathBuf>,
}

impl DemoArgs {
    /// The operation mix: `--mix`, or the default for `--qp-type`.
    pub fn mix(&self) -> Vec<OpKind> {
        match (&self.mix, self.qp_type) {
            (Some(m), _) => m.0.clone(),
            (None, QpTypes::Uc) => vec![OpKind::Send, OpKind::Write],
            (None, QpTypes::Ud) => vec![OpKind::Send],
            (None, _) => {
                vec![OpKind::Send, OpKind::Write, OpKind::Read, OpKind::CmpSwap, OpKind::FetchAdd]
            }
        }
    }
}

/// `roce demo ARGS` parsed as the command line would be (for unit tests).
#[cfg(test)]
pub(crate) fn parse_args(args: &[&str]) -> Result<DemoArgs, clap::Error> {
    use clap::Parser;
    #[derive(Parser, Debug)]
    struct T {
        #[command(flatten)]
        demo: DemoArgs,
    }
    T::try_parse_from(std::iter::once("demo").chain(args.iter().copied())).map(|t| t.demo)
}

impl DemoArgs {
    /// The fabric's faults (`--loss`, `--dup`, `--reorder`, `--corrupt`).
    pub fn faults(&self) -> FaultConfig {
        FaultConfig {
            drop: self.loss,
            duplicate: self.dup,
            reorder: self.reorder,
            corrupt: self.corrupt,
            ..FaultConfig::default()
        }
    }
}
