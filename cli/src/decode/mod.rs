//! `roce decode FILE`: the options and help of the command, and its glue
//! around the `roce-decode` library, which does all the decoding and
//! rendering: the options become a [`Style`], and here the summary line is
//! printed and the exit status chosen. `ladder_args.rs` holds the options
//! of the views (ladder, `--follow`, `--stats`).

pub mod ladder_args;

use roce_decode::{capture_name, decode_file, DecodeError, Filter, Style};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// Long help of `roce decode`.
pub const DECODE_LONG: &str = "\
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

pub const DECODE_AFTER: &str = "\
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
    pub view: ladder_args::ViewArgs,
}

/// What the options ask to be shown, and how.
fn style(args: &DecodeArgs) -> Style {
    let v = &args.view;
    Style {
        json: args.json,
        explain: args.explain,
        filter: Filter {
            from: v.from,
            to: v.to,
            follow: v.follow,
            bad_only: args.bad_only,
            max: v.max,
        },
        ladder: v.ladder,
        svg: v.svg.clone(),
        stats: v.stats,
        color: !v.no_color && std::io::stdout().is_terminal(),
        gap_ms: v.gap,
        name: capture_name(&args.file),
    }
}

/// Run `roce decode`; returns the process exit status.
pub fn run(args: &DecodeArgs) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match decode_file(&args.file, args.port, &style(args), &mut out) {
        Ok(summary) => {
            if let Err(e) = out.flush() {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    eprintln!("roce decode: writing output: {e}");
                    return ExitCode::from(2);
                }
            }
            let pauses = match summary.pauses {
                0 => String::new(),
                n => format!(", {n} PAUSE frames"),
            };
            eprintln!(
                "{} frames, {} RoCEv2 packets, {} bad{pauses}",
                summary.frames, summary.packets, summary.bad
            );
            if summary.bad == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(DecodeError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("roce decode: {e}");
            ExitCode::from(2)
        }
    }
}
