//! docs/demo.md shows real output of `roce demo`: re-run each `$ roce demo ...`
//! block and compare every line except the wall-clock `time` line (the run
//! is deterministic for a seed; only wall time differs).

use std::process::Command;

fn blocks(doc: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut lines = doc.lines().peekable();
    while let Some(l) = lines.next() {
        if let Some(cmd) = l.strip_prefix("$ roce demo") {
            let mut body = Vec::new();
            while let Some(n) = lines.peek() {
                if n.starts_with("```") {
                    break;
                }
                body.push(n.to_string());
                lines.next();
            }
            out.push((cmd.trim().to_string(), body));
        }
    }
    out
}

fn comparable(lines: &[String]) -> Vec<String> {
    lines.iter().filter(|l| !l.trim_start().starts_with("time ")).cloned().collect()
}

#[test]
fn demo_doc_output_is_real() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/demo.md"))
        .expect("docs/demo.md");
    let bl = blocks(&doc);
    assert!(bl.len() >= 2, "expected the demo examples in docs/demo.md");
    // each QP type has its own example (all of them re-run below)
    for t in ["uc", "ud", "mixed"] {
        let flag = format!("--qp-type {t} ");
        assert!(
            bl.iter().any(|(args, _)| format!("{args} ").contains(&flag)),
            "docs/demo.md has no `roce demo {flag}...` example"
        );
    }
    for (args, expected) in bl {
        let out = Command::new(env!("CARGO_BIN_EXE_roce"))
            .arg("demo")
            .args(args.split_whitespace())
            .output()
            .expect("run roce demo");
        assert!(out.status.success(), "roce demo {args} failed");
        let got: Vec<String> =
            String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
        assert_eq!(comparable(&got), comparable(&expected), "roce demo {args}");
        assert!(got.iter().any(|l| l.trim_start().starts_with("time ")));
    }
}
