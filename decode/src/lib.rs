//! The decoder behind `roce decode`: every RoCEv2 packet of a pcap/pcapng
//! capture in InfiniBand terms, and the views over a whole capture.
//!
//! This crate owns turning captured frames into decoded packets and
//! rendering them; it does no argument parsing and picks no exit status
//! (that is `roce-cli`'s `decode` module). Its parts:
//!
//! - [`capture`] reads a capture file, decodes every frame
//!   ([`capture::analyse_frames`]) and writes the view a [`Style`] asks for
//!   ([`decode_file`], [`decode_frames`]), returning the [`Summary`] counts;
//! - [`record`] is one packet decoded leniently into the oracle's record
//!   (ICRC and checksum verdicts, `--json` objects), [`cm_fmt`] the CM MADs
//!   it may carry, [`human`] the one-line text form;
//! - [`analysis`] follows the whole capture (conversations, per-QP state,
//!   the `--from`/`--to`/`--follow`/`--max` [`Filter`]), using
//!   [`explain`] for the plain-English `--explain` lines;
//! - [`ladder`] lays out the ladder diagram and writes it as text,
//!   [`svg`] draws the same diagram as SVG;
//! - [`stats`] is the per-connection `--stats` summary (text or JSON).
//!
//! Output is byte-for-byte what `roce decode` prints (docs/decode.md,
//! docs/ladder.md); the CLI tests in `cli/tests/` compare it.

pub mod analysis;
pub mod capture;
pub mod cm_fmt;
pub mod explain;
pub mod human;
pub mod ladder;
pub mod pause;
pub mod record;
pub mod stats;
pub mod svg;
#[cfg(test)]
mod tests;

pub use analysis::{parse_qpn, Analysis, Filter};
pub use capture::{capture_name, decode_file, decode_frames, DecodeError, Style, Summary};
