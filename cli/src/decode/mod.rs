//! `roce decode FILE`: every RoCEv2 packet of a capture in InfiniBand terms
//! (`capture.rs` reads and decodes; `record.rs` is one decoded packet;
//! `explain.rs`, `ladder.rs`/`svg.rs` and `stats.rs` are the `--explain`,
//! `--ladder`/`--svg` and `--stats` views over `analysis.rs`).

pub mod analysis;
pub mod capture;
pub mod cm_fmt;
pub mod explain;
pub mod human;
pub mod ladder;
pub mod ladder_args;
pub mod record;
pub mod stats;
pub mod svg;
#[cfg(test)]
mod tests;
