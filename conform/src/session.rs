//! What `roce conform` does once its arguments are parsed: pick the cases,
//! open the target, run them (a progress line, a pcap per case), and draw
//! one case's exchange as a ladder. The `roce` binary only parses and
//! prints.

use crate::agent::Agent;
use crate::case::Case;
use crate::catalogue;
use crate::local::LocalAgent;
use crate::remote::RemoteAgent;
use crate::run::{Outcome, Runner};
use crate::wire::Wire;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// A run's settings.
#[derive(Clone, Debug)]
pub struct Session {
    /// A remote agent, or `None` for a roce-emu device of this process.
    pub target: Option<SocketAddr>,
    /// The address of that roce-emu device.
    pub addr: IpAddr,
    /// The tester's address.
    pub tester_addr: IpAddr,
    /// Case id patterns (`*`, `?`); empty: every case.
    pub patterns: Vec<String>,
    /// Write DIR/CASE.pcap for every case.
    pub pcap: Option<PathBuf>,
    /// Print `[k/n] case` progress on stderr.
    pub progress: bool,
}

/// `*` any run, `?` one character.
pub fn matches(pat: &str, s: &str) -> bool {
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

/// The cases whose id matches one of `patterns` (all with none).
pub fn select(patterns: &[String]) -> Vec<&'static Case> {
    let all = catalogue::all();
    if patterns.is_empty() {
        return all;
    }
    all.into_iter().filter(|c| patterns.iter().any(|p| matches(p, c.id))).collect()
}

/// What a run gives: the target's description and every outcome.
pub struct Results {
    /// The agent's one-line description.
    pub target: String,
    /// One per case, in order.
    pub outcomes: Vec<Outcome>,
}

impl Session {
    /// Open the target and run `cases`; `Err` says why the run could not
    /// start.
    pub fn run(&self, cases: &[&'static Case]) -> Result<Results, String> {
        let mut agent: Box<dyn Agent> = match self.target {
            Some(at) => Box::new(RemoteAgent::connect(at).map_err(|e| e.to_string())?),
            None => Box::new(LocalAgent::open("conform0", self.addr).map_err(|e| e.to_string())?),
        };
        let target = agent.describe();
        let wire = Wire::bind(self.tester_addr, agent.addr())
            .map_err(|e| format!("tester socket {}:4791: {e}", self.tester_addr))?;
        if let Some(dir) = &self.pcap {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let mut r = Runner::new(agent.as_mut(), wire);
        let mut outcomes = Vec::with_capacity(cases.len());
        let mut err = std::io::stderr();
        for (i, c) in cases.iter().enumerate() {
            if self.progress {
                let _ = write!(err, "\r[{}/{}] {:<50}", i + 1, cases.len(), c.id);
            }
            let o = r.run(c);
            if let Some(dir) = &self.pcap {
                let p = dir.join(format!("{}.pcap", c.id));
                if let Err(e) = std::fs::write(&p, &o.pcap) {
                    let _ = writeln!(err, "roce conform: {}: {e}", p.display());
                }
            }
            outcomes.push(o);
        }
        if self.progress {
            let _ = write!(err, "\r{:<60}\r", "");
        }
        Ok(Results { target, outcomes })
    }
}

/// `o`'s verdict, then its exchange as a ladder diagram (the decoder's,
/// `roce decode --ladder`), to `out`.
pub fn ladder(o: &Outcome, color: bool, out: &mut dyn Write) -> Result<(), String> {
    let c = o.case;
    let head = format!("{}  {}  {}\n  {}\n", c.id, c.iba, o.verdict.word(), c.rule);
    let why = match o.verdict.why() {
        "" => String::new(),
        w => format!("  why: {w}\n"),
    };
    out.write_all(format!("{head}{why}").as_bytes()).map_err(|e| e.to_string())?;
    let frames = roce_pcap::read_capture(&o.pcap).map_err(|e| e.to_string())?;
    let style = roce_decode::Style {
        json: false,
        explain: false,
        filter: roce_decode::Filter::default(),
        ladder: true,
        svg: None,
        stats: false,
        color,
        gap_ms: 50.0,
        name: o.case.id.to_string(),
    };
    roce_decode::decode_frames(&frames, roce_packet::ROCE_V2_PORT, &style, out)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(matches("resp.psn.*", "resp.psn.wraps"));
        assert!(matches("*", "anything"));
        assert!(matches("req.?ak.*", "req.nak.remote-access"));
        assert!(!matches("resp.psn.*", "req.send.acked"));
        assert!(matches("resp.psn.wraps", "resp.psn.wraps"));
        assert!(!matches("resp.psn.wrap", "resp.psn.wraps"));
        assert!(matches("*access*", "resp.access.read"));
        assert_eq!(select(&["resp.ud.*".to_string()]).len(), 12);
    }
}
