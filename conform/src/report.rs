//! Verdicts as a table for people and as one JSON object for CI.

use crate::run::Outcome;
use serde_json::json;
use std::fmt::Write;

/// Counts of each verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Passed.
    pub pass: usize,
    /// Failed.
    pub fail: usize,
    /// Not applicable.
    pub na: usize,
}

/// Count the verdicts.
pub fn tally(out: &[Outcome]) -> Tally {
    let mut t = Tally::default();
    for o in out {
        match o.verdict.word() {
            "pass" => t.pass += 1,
            "fail" => t.fail += 1,
            _ => t.na += 1,
        }
    }
    t
}

/// The verdict table: one line per case, failures followed by what was
/// expected and the packets seen.
pub fn table(target: &str, out: &[Outcome]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "target: {target}");
    let w = out.iter().map(|o| o.case.id.len()).max().unwrap_or(10);
    let _ = writeln!(s, "{:<w$}  {:<9}  {:<6}  IBA", "case", "direction", "result");
    for o in out {
        let _ = writeln!(
            s,
            "{:<w$}  {:<9}  {:<6}  {}",
            o.case.id,
            o.case.direction.name(),
            o.verdict.word(),
            o.case.iba
        );
        if !o.verdict.why().is_empty() {
            let _ = writeln!(s, "    rule: {}", o.case.rule);
            let _ = writeln!(s, "    why:  {}", o.verdict.why());
            if o.verdict.word() == "fail" {
                for p in &o.packets {
                    let _ = writeln!(s, "      {p}");
                }
            }
        }
    }
    let t = tally(out);
    let _ = writeln!(s, "{} cases: {} pass, {} fail, {} n/a", out.len(), t.pass, t.fail, t.na);
    s
}

/// `{"target": ..., "cases": [{"id", "iba", "direction", "result", "why"}]}`.
pub fn json(target: &str, out: &[Outcome]) -> serde_json::Value {
    json!({
        "target": target,
        "cases": out.iter().map(|o| json!({
            "id": o.case.id,
            "iba": o.case.iba,
            "direction": o.case.direction.name(),
            "result": o.verdict.word(),
            "why": o.verdict.why(),
        })).collect::<Vec<_>>(),
    })
}

/// The verdicts as a Markdown table (docs/conformance.md's tables are
/// written by this).
pub fn markdown(target: &str, out: &[Outcome]) -> String {
    let mut s = String::new();
    let t = tally(out);
    let _ = writeln!(
        s,
        "Target: {target}. {} cases: {} pass, {} fail, {} n/a.\n",
        out.len(),
        t.pass,
        t.fail,
        t.na
    );
    let _ = writeln!(s, "| case | direction | IBA | result | why |");
    let _ = writeln!(s, "|---|---|---|---|---|");
    for o in out {
        let why = o.verdict.why().replace('|', "\\|");
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {} |",
            o.case.id,
            o.case.direction.name(),
            o.case.iba,
            o.verdict.word(),
            why
        );
    }
    for o in out.iter().filter(|o| o.verdict.word() == "fail") {
        let _ = writeln!(s, "\n`{}` ({}): {}\n\n```", o.case.id, o.case.iba, o.case.rule);
        for p in &o.packets {
            let _ = writeln!(s, "{p}");
        }
        let _ = writeln!(s, "```");
    }
    s
}
