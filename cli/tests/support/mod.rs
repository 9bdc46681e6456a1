//! Shared by the tests that keep docs/ honest (`decode.rs`, `ladder.rs`,
//! `demo_docs.rs`, `course.rs`): find the `$ roce ...` examples in a
//! Markdown file, run each with the built binary, and compare what it
//! printed (stdout, then stderr) with the lines the document shows.
//!
//! An example is a line `$ roce ARGS` inside a fenced block of one of the
//! given languages; its expected output is the following lines up to the
//! next `$ ` line or the end of the block. The command may end with
//! `| head -N`, `| tail -N`, `| grep TEXT` or `| grep -v TEXT` (fixed
//! strings, applied by the test to stdout as a shell would, or to stdout
//! and stderr after `2>&1`; no shell is involved)
//! and with a comment `# exits N` (the expected exit status; 0 otherwise in
//! [`Mode::Exact`], unchecked in [`Mode::Subsequence`]).
//! Arguments are split on whitespace.
#![allow(dead_code)] // each test binary uses a part

use std::path::{Path, PathBuf};
use std::process::Command;

/// How the shown lines must match the real output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every shown line appears in the output, in order; others may be
    /// between them (`...` lines are ignored).
    Subsequence,
    /// The shown lines are the output, line for line, except that a `...`
    /// line stands for any number of lines. Wall-clock figures are
    /// normalised (see [`normalise`]).
    Exact,
}

/// One `$ roce ...` example.
#[derive(Clone, Debug)]
pub struct Example {
    /// 1-based line of the `$` line in the document.
    pub line: usize,
    /// The command as written (after `$ `).
    pub command: String,
    /// The lines shown after it.
    pub expected: Vec<String>,
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The examples of `doc` in fenced blocks whose info string is one of `langs`.
pub fn examples(doc: &str, langs: &[&str]) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut in_block = false;
    let mut collecting = false;
    for (i, l) in doc.lines().enumerate() {
        let t = l.trim();
        if !in_block {
            if let Some(lang) = t.strip_prefix("```") {
                in_block = true;
                collecting = langs.contains(&lang.trim());
            }
            continue;
        }
        if t == "```" {
            in_block = false;
            continue;
        }
        if !collecting {
            continue;
        }
        if let Some(cmd) = l.strip_prefix("$ ") {
            out.push(Example {
                line: i + 1,
                command: cmd.trim().to_string(),
                expected: Vec::new(),
            });
        } else if let Some(ex) = out.last_mut().filter(|_| collecting) {
            ex.expected.push(l.to_string());
        }
    }
    out
}

/// Wall-clock figures vary from run to run: in a `roce demo` summary's
/// `time` line everything from `, wall` on is dropped (the virtual time
/// before it is deterministic), and a trace line's leading uptime
/// (`0.000193487s`) is replaced by `<uptime>`.
pub fn normalise(line: &str) -> String {
    let line = line.trim_end();
    // a trace line's uptime: `   0.000193487s  INFO ...`
    let t = line.trim_start();
    if let Some((stamp, rest)) = t.split_once("s ") {
        if !stamp.is_empty()
            && stamp.chars().all(|c| c.is_ascii_digit() || c == '.')
            && stamp.contains('.')
        {
            return format!("<uptime> {}", rest.trim_start());
        }
    }
    if line.trim_start().starts_with("time ") {
        if let Some(i) = line.find(", wall") {
            return line[..i].to_string();
        }
    }
    line.to_string()
}

/// A parsed example command: arguments, pipeline filters, exit status.
struct Parsed {
    args: Vec<String>,
    /// `2>&1` before the first pipe: stderr goes through the filters too.
    merge: bool,
    filters: Vec<(String, String)>,
    status: Option<i32>,
}

fn parse(command: &str) -> Result<Parsed, String> {
    let (cmd, comment) = match command.split_once(" # ") {
        Some((c, k)) => (c, Some(k.trim())),
        None => (command, None),
    };
    let status = match comment.and_then(|k| k.strip_prefix("exits ")) {
        Some(n) => Some(n.trim().parse().map_err(|_| format!("bad exit status in {n:?}"))?),
        None => None,
    };
    let mut parts = cmd.split(" | ");
    let first = parts.next().unwrap_or_default().trim();
    let (first, merge) = match first.strip_suffix("2>&1") {
        Some(f) => (f, true),
        None => (first, false),
    };
    let args: Vec<String> = first.split_whitespace().map(str::to_string).collect();
    if args.first().map(String::as_str) != Some("roce") {
        return Err(format!("not a roce command: {command}"));
    }
    let filters = parts
        .map(|p| {
            let p = p.trim();
            let (f, arg) = p.split_once(' ').unwrap_or((p, ""));
            (f.to_string(), arg.trim().to_string())
        })
        .collect();
    Ok(Parsed { args: args[1..].to_vec(), merge, filters, status })
}

fn apply(filters: &[(String, String)], mut lines: Vec<String>) -> Result<Vec<String>, String> {
    for (f, arg) in filters {
        let n = || arg.trim_start_matches('-').parse::<usize>().map_err(|_| format!("{f} {arg}"));
        lines = match f.as_str() {
            "head" => lines.into_iter().take(n()?).collect(),
            "tail" => {
                let k = n()?;
                let skip = lines.len().saturating_sub(k);
                lines.into_iter().skip(skip).collect()
            }
            "grep" => match arg.strip_prefix("-v ") {
                Some(pat) => lines.into_iter().filter(|l| !l.contains(pat.trim())).collect(),
                None => lines.into_iter().filter(|l| l.contains(arg.as_str())).collect(),
            },
            other => return Err(format!("unsupported filter `{other}`")),
        };
    }
    Ok(lines)
}

/// Run one example in `cwd`: its exit status and output lines (stdout,
/// then stderr, after the example's `| head`/`| tail`/`| grep`).
pub fn run(ex: &Example, cwd: &Path) -> Result<(i32, Vec<String>), String> {
    let p = parse(&ex.command)?;
    let out = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(&p.args)
        .current_dir(cwd)
        .env_remove("ROCE_LOG")
        .env_remove("RUST_LOG")
        .output()
        .map_err(|e| format!("cannot run roce: {e}"))?;
    let code = out.status.code().unwrap_or(-1);
    // as in a shell: a pipe takes stdout (and stderr only after `2>&1`);
    // the rest of stderr reaches the terminal, after stdout here
    let lines = |b: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(b).lines().map(str::to_string).collect()
    };
    let (mut piped, mut rest) = (lines(&out.stdout), lines(&out.stderr));
    if p.merge {
        piped.append(&mut rest);
    }
    let mut shown = apply(&p.filters, piped)?;
    shown.append(&mut rest);
    Ok((code, shown))
}

/// Run one example in `cwd`; `Err` explains the first difference.
pub fn check(ex: &Example, cwd: &Path, mode: Mode) -> Result<(), String> {
    let p = parse(&ex.command)?;
    let (code, actual) = run(ex, cwd)?;
    // the exit status must be 0 unless the example says `# exits N`
    // (Subsequence documents predate that convention: only checked if given)
    let want = p.status.or((mode == Mode::Exact).then_some(0));
    if want.is_some_and(|w| w != code) {
        return Err(format!(
            "exit status {code}, the document says {want:?}:\n{}",
            actual.join("\n")
        ));
    }
    match mode {
        Mode::Subsequence => {
            let mut at = 0;
            for want in ex.expected.iter().filter(|w| w.trim() != "...") {
                match actual[at..].iter().position(|a| a == want) {
                    Some(i) => at += i + 1,
                    None => return Err(format!("line not in the output (in order):\n{want}")),
                }
            }
            Ok(())
        }
        Mode::Exact => exact(&ex.expected, &actual),
    }
}

/// `want` (with `...` = any number of lines) against `got`, normalised.
fn exact(want: &[String], got: &[String]) -> Result<(), String> {
    let want: Vec<String> = want.iter().map(|l| normalise(l)).collect();
    let got: Vec<String> = got.iter().map(|l| normalise(l)).collect();
    // trailing blank lines of a block are not output
    let mut want = want;
    while want.last().is_some_and(|l| l.is_empty()) {
        want.pop();
    }
    fn go(w: &[String], g: &[String]) -> bool {
        match w.split_first() {
            None => g.is_empty(),
            Some((first, rest)) if first.trim() == "..." => {
                (0..=g.len()).any(|k| go(rest, &g[k..]))
            }
            Some((first, rest)) => g.first() == Some(first) && go(rest, &g[1..]),
        }
    }
    if go(&want, &got) {
        return Ok(());
    }
    // explain: the first shown line that does not match in order
    let mut at = 0;
    for w in want.iter().filter(|w| w.trim() != "...") {
        match got[at..].iter().position(|g| g == w) {
            Some(i) => at += i + 1,
            None => {
                return Err(format!(
                    "shown line not in the output (in order):\n{w}\n--- real output:\n{}",
                    got.join("\n")
                ))
            }
        }
    }
    Err(format!(
        "the output has lines the document does not show (add them or a `...` line):\n--- real output:\n{}",
        got.join("\n")
    ))
}

/// Run every example of `doc_path` (relative to the repository root) in
/// `cwd`, in order; panics with every difference found. Returns how many
/// examples ran.
///
/// With `ROCE_DOCS_BLESS=1` in the environment (Exact documents only), the
/// document is rewritten instead: each example's shown output becomes its
/// real output. Review the diff before committing it.
pub fn check_doc(doc_path: &str, langs: &[&str], cwd: &Path, mode: Mode) -> usize {
    let path = root().join(doc_path);
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{doc_path}: {e}"));
    let exs = examples(&doc, langs);
    if mode == Mode::Exact && std::env::var_os("ROCE_DOCS_BLESS").is_some_and(|v| v == "1") {
        bless(&path, &doc, &exs, cwd);
        return exs.len();
    }
    let mut failures = Vec::new();
    for ex in &exs {
        if let Err(e) = check(ex, cwd, mode) {
            failures.push(format!("{doc_path}:{}: `$ {}`: {e}", ex.line, ex.command));
        }
    }
    assert!(
        failures.is_empty(),
        "{} example(s) differ (ROCE_DOCS_BLESS=1 rewrites the document):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    exs.len()
}

fn bless(path: &Path, doc: &str, exs: &[Example], cwd: &Path) {
    let lines: Vec<&str> = doc.lines().collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        out.push(lines[i].to_string());
        if let Some(ex) = exs.iter().find(|e| e.line == i + 1) {
            let (_, actual) = run(ex, cwd).unwrap_or_else(|e| panic!("{e}"));
            out.extend(actual.into_iter().map(|l| l.trim_end().to_string()));
            i += ex.expected.len();
        }
        i += 1;
    }
    let mut text = out.join("\n");
    text.push('\n');
    std::fs::write(path, text).expect("rewrite the document");
}

/// A fresh scratch directory for one document's examples, with `packet`
/// linked to the repository's (so `packet/tests/data/*.pcap` resolve) and
/// removed afterwards by [`Scratch`]'s `Drop`.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// Create it.
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("roce-docs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        #[cfg(unix)]
        std::os::unix::fs::symlink(root().join("packet"), dir.join("packet")).expect("symlink");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod self_tests {
    use super::*;

    #[test]
    fn parsing_and_matching() {
        let doc = "x\n```console\n$ roce decode a.pcap | head -2 # exits 1\nl1\n...\n$ roce demo\nA\n```\n```sh\n$ roce no\n```\n";
        let ex = examples(doc, &["console"]);
        assert_eq!(ex.len(), 2);
        assert_eq!((ex[0].line, ex[0].expected.len()), (3, 2));
        let p = parse(&ex[0].command).unwrap();
        assert_eq!((p.args.len(), p.status, p.filters.len(), p.merge), (2, Some(1), 1, false));
        let p = parse("roce demo --log x 2>&1 | grep -v y").unwrap();
        assert_eq!((p.args.len(), p.merge, p.filters.len()), (3, true, 1));
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(exact(&s(&["a", "...", "d"]), &s(&["a", "b", "c", "d"])).is_ok());
        assert!(exact(&s(&["a", "d"]), &s(&["a", "b", "d"])).is_err());
        assert!(exact(&s(&["a", "c"]), &s(&["a", "b"])).is_err());
        assert_eq!(
            normalise("  time         virtual 4.0 µs, wall 3 ms"),
            "  time         virtual 4.0 µs"
        );
        assert_eq!(normalise("   0.000193487s  INFO x: y"), "<uptime> INFO x: y");
        assert_eq!(apply(&[("tail".into(), "-1".into())], s(&["a", "b"])).unwrap(), s(&["b"]));
        assert_eq!(apply(&[("grep".into(), "-v a".into())], s(&["a", "b"])).unwrap(), s(&["b"]));
    }
}
