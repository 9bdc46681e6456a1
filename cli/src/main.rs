//! `roce`: command-line tools for the roce-emu software RoCEv2 HCA.
//!
//! `roce decode FILE` reads a pcap/pcapng capture and prints every RoCEv2
//! packet in InfiniBand terms, checks its ICRC, and can explain what each
//! packet means for the two queue pairs. See docs/decode.md.

use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

mod counters_fmt;
mod decode;
mod demo;
mod devices;
mod logging;
mod perf;

const ABOUT: &str = "Tools for RoCEv2, the InfiniBand transport (RDMA: SEND, WRITE, READ, \
atomics between queue pairs) carried in UDP datagrams to port 4791 over ordinary IP networks.";

const DECODE_LONG: &str = "\
Decode the RoCEv2 packets of a capture file (pcap or pcapng; Ethernet, VLAN, raw IP, Linux \
cooked or loopback link types).

RoCEv2 carries InfiniBand transport packets in UDP datagrams to port 4791: a Base Transport \
Header (opcode, destination QP, PSN), extension headers (RETH for RDMA, AETH for ACKs, DETH for \
UD, ...), the payload, and a 4-byte invariant CRC (ICRC) over the parts of the IP/UDP/IB \
headers that no router changes. This command prints one line per RoCEv2 packet, recomputes \
every ICRC, and skips every other frame. A final summary goes to stderr:
  N frames, M RoCEv2 packets, K bad

Exit status: 0 if every RoCEv2 packet is well-formed with a valid ICRC, 1 if any is bad, \
2 if the file cannot be read (missing, not a capture, truncated).";

const DECODE_AFTER: &str = "\
Examples:
  roce decode capture.pcap                 one line per RoCEv2 packet
  roce decode capture.pcap --explain       ...and what each one means for the two QPs
  roce decode capture.pcap --json | jq .   one JSON object per packet (docs/decode.md)
  roce decode capture.pcap --bad-only      only packets with a bad ICRC or a malformed header
  roce decode capture.pcap --port 4792     RoCEv2 on a non-standard UDP port
  roce decode capture.pcap --ladder        a ladder (sequence) diagram, one lane per QP
  roce decode capture.pcap --svg l.svg     the same diagram as SVG for a browser
  roce decode capture.pcap --follow 0x2a   only the conversation QP 0x2a is part of
  roce decode capture.pcap --stats         per-connection summary (retransmissions, NAKs, RTT)

A line looks like:
    2  0.001162  192.168.77.2:50176 -> 192.168.77.3:4791  RC_RDMA_READ_RESPONSE_ONLY  \
QP=0x000020 PSN=0x035514 A=0 len=8 ACK msn=1 credit=31  ICRC ok
(frame number, seconds since the first frame, UDP endpoints, opcode, destination QP, PSN, \
AckReq bit, payload bytes, extension headers, ICRC verdict)";

#[derive(Parser, Debug)]
#[command(name = "roce", version, about = ABOUT, long_about = None)]
#[command(
    after_help = "Example:\n  roce decode capture.pcap --explain   decode a capture and explain every RoCEv2 packet\n\n\
Run `roce decode --help` for the decoder's options, output and exit status."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: logging::LogArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Decode the RoCEv2 packets of a pcap/pcapng capture and check their ICRCs.
    #[command(long_about = DECODE_LONG, after_help = DECODE_AFTER)]
    Decode(DecodeArgs),
    /// Run two emulated HCAs on a simulated lossy network and verify every byte they move.
    #[command(long_about = demo::DEMO_LONG, after_help = demo::DEMO_AFTER)]
    Demo(demo::DemoArgs),
    /// List the configured devices like ibv_devices (ROCE_EMU_DEVICES, devices.conf).
    Devices,
    /// Print device and port attributes like ibv_devinfo (-v: all of them, and the GID table).
    Devinfo(devices::DevinfoArgs),
    /// Print the counters of running devices with rxe's hw_counters names.
    #[command(long_about = devices::stats::STATS_LONG, after_help = devices::stats::STATS_AFTER)]
    Stats(devices::stats::StatsArgs),
    /// perftest-like bandwidth (write/read/send/atomic) and latency (lat) between two emulated HCAs.
    #[command(long_about = perf::PERF_LONG, after_help = perf::PERF_AFTER)]
    Perf(perf::PerfArgs),
}

/// Options of `roce decode`.
#[derive(clap::Args, Debug, Clone)]
pub struct DecodeArgs {
    /// Capture file to read (pcap or pcapng).
    pub file: PathBuf,
    /// Print one JSON object per RoCEv2 packet instead of a text line (same keys as the
    /// project's oracle.py; schema in docs/decode.md).
    #[arg(long)]
    pub json: bool,
    /// After each line, explain in plain English what the packet means for the two queue
    /// pairs (message progress, what an ACK/NAK completes, retransmissions, RNR waits).
    #[arg(long, conflicts_with = "json")]
    pub explain: bool,
    /// Print only bad packets: a wrong ICRC or a structural error (the exit status still
    /// reflects every packet).
    #[arg(long)]
    pub bad_only: bool,
    /// UDP destination port that carries RoCEv2.
    #[arg(long, value_name = "N", default_value_t = roce_packet::ROCE_V2_PORT)]
    pub port: u16,
    #[command(flatten)]
    pub view: decode::ladder_args::ViewArgs,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Err(e) = logging::init(&cli.log) {
        eprintln!("roce: {e}");
        return ExitCode::from(2);
    }
    match cli.command {
        Command::Decode(args) => run_decode(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Devices => devices::run_devices(),
        Command::Devinfo(args) => devices::run_devinfo(&args),
        Command::Stats(args) => devices::stats::run(&args),
        Command::Perf(args) => perf::run(&args),
    }
}

/// Run `roce decode`; returns the process exit status.
fn run_decode(args: &DecodeArgs) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match decode::capture::decode_file(args, &mut out) {
        Ok(summary) => {
            if let Err(e) = out.flush() {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    eprintln!("roce decode: writing output: {e}");
                    return ExitCode::from(2);
                }
            }
            eprintln!(
                "{} frames, {} RoCEv2 packets, {} bad",
                summary.frames, summary.packets, summary.bad
            );
            if summary.bad == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(decode::capture::DecodeError::Output(e))
            if e.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("roce decode: {e}");
            ExitCode::from(2)
        }
    }
}
