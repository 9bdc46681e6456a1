//! The `roce decode` options of the ladder diagram, `--follow` and
//! `--stats` (kept apart from main.rs so that file stays small).

use std::path::PathBuf;

/// Views of a capture beyond the packet list.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ViewArgs {
    /// Draw a ladder (sequence) diagram: one lane per QP endpoint (IP address + QP number),
    /// one arrow per packet, time going down; retransmissions, NAKs, RNR waits and long
    /// pauses are marked (docs/ladder.md).
    #[arg(long, conflicts_with_all = ["json", "stats"])]
    pub ladder: bool,
    /// Write the ladder diagram as an SVG file for a browser (alone: only the SVG; with
    /// --ladder: the text diagram too).
    #[arg(long, value_name = "OUT.svg", conflicts_with_all = ["json", "stats"])]
    pub svg: Option<PathBuf>,
    /// Show only the conversation QP number QPN is part of (as destination QP or as the
    /// peer learned from responses); hex 0x2a or decimal 42.
    #[arg(long, value_name = "QPN", value_parser = roce_decode::parse_qpn)]
    pub follow: Option<u32>,
    /// Print a per-connection summary instead of the packets: messages, bytes,
    /// retransmitted PSNs, NAKs by code, RNR waits, inferred timeouts, round-trip times
    /// (with --json: one JSON object per connection).
    #[arg(long, conflicts_with = "explain")]
    pub stats: bool,
    /// Never use colors (they are used only when standard output is a terminal).
    #[arg(long)]
    pub no_color: bool,
    /// Show at most N packets (after --from/--to/--follow).
    #[arg(long, value_name = "N")]
    pub max: Option<usize>,
    /// Show packets from frame number N on.
    #[arg(long, value_name = "N")]
    pub from: Option<u64>,
    /// Show packets up to frame number N.
    #[arg(long, value_name = "N")]
    pub to: Option<u64>,
    /// In a ladder, mark pauses longer than MS milliseconds between shown packets.
    #[arg(long, value_name = "MS", default_value_t = 10.0)]
    pub gap: f64,
}
