//! A progress line for long-running commands: drawn on stderr only when
//! stderr is a terminal (never in pipes, files or CI logs), only after the
//! command has run for a moment, at most ten times a second, and erased at
//! the end so the summary starts on a clean line.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Show nothing for runs shorter than this.
const DELAY: Duration = Duration::from_millis(500);
/// Redraw at most this often.
const PERIOD: Duration = Duration::from_millis(100);

/// A progress line on a terminal, or nothing.
pub struct Progress<W: Write = std::io::Stderr> {
    out: Option<W>,
    start: Instant,
    last: Option<Instant>,
    width: usize,
}

/// Whether progress may be drawn: stderr is a terminal, `TERM` is not
/// `dumb`, and the command was not asked to be quiet.
pub fn wanted(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

impl Progress<std::io::Stderr> {
    /// Progress on stderr if [`wanted`]`(quiet)`, else a no-op.
    pub fn stderr(quiet: bool) -> Progress<std::io::Stderr> {
        Progress::new(wanted(quiet).then(std::io::stderr))
    }
}

impl<W: Write> Progress<W> {
    /// Progress drawn on `out` (`None`: draw nothing).
    pub fn new(out: Option<W>) -> Progress<W> {
        Progress { out, start: Instant::now(), last: None, width: 0 }
    }

    /// Report `done` of `total` units; `what` names them ("operations").
    pub fn update(&mut self, done: u64, total: u64, what: &str) {
        let now = Instant::now();
        self.update_at(now, done, total, what);
    }

    fn update_at(&mut self, now: Instant, done: u64, total: u64, what: &str) {
        let Some(out) = self.out.as_mut() else { return };
        let since = now.saturating_duration_since(self.start);
        if since < DELAY || self.last.is_some_and(|l| now.saturating_duration_since(l) < PERIOD) {
            return;
        }
        self.last = Some(now);
        let line = format!(
            "  {done}/{total} {what} ({:.0}%), {:.1} s",
            100.0 * done as f64 / total.max(1) as f64,
            since.as_secs_f64()
        );
        self.width = self.width.max(line.len());
        let _ = write!(out, "\r{line:<w$}", w = self.width);
        let _ = out.flush();
    }

    /// Erase the line (if one was drawn).
    pub fn finish(&mut self) {
        if let (Some(out), Some(_)) = (self.out.as_mut(), self.last) {
            let _ = write!(out, "\r{:w$}\r", "", w = self.width);
            let _ = out.flush();
        }
        self.last = None;
    }
}

impl<W: Write> Drop for Progress<W> {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_after_the_delay_rate_limited_and_erases() {
        let mut buf: Vec<u8> = Vec::new();
        {
            let mut p = Progress::new(Some(&mut buf));
            let t0 = p.start;
            p.update_at(t0 + Duration::from_millis(10), 1, 10, "ops"); // too early
            p.update_at(t0 + Duration::from_millis(600), 5, 10, "ops");
            p.update_at(t0 + Duration::from_millis(650), 6, 10, "ops"); // too soon
            p.update_at(t0 + Duration::from_millis(800), 10, 10, "ops");
            p.finish();
        }
        let s = String::from_utf8(buf).unwrap();
        assert_eq!(s, format!("\r  5/10 ops (50%), 0.6 s\r  10/10 ops (100%), 0.8 s\r{:25}\r", ""));
        // disabled: nothing at all
        let mut p: Progress<Vec<u8>> = Progress::new(None);
        p.update_at(Instant::now() + Duration::from_secs(5), 1, 2, "ops");
        assert!(p.last.is_none());
    }
}
