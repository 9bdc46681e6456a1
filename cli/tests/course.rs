//! docs/course/ is a RoCE course built on this project's commands: every
//! `$ roce ...` example in a ```console block of every chapter is run here
//! (each chapter in its own scratch directory, in order, so a chapter can
//! write a capture and decode it) and its output must be exactly what the
//! chapter shows (`...` stands for omitted lines; wall-clock figures are
//! ignored). `ROCE_DOCS_BLESS=1 cargo test -p roce-cli --test all course::`
//! rewrites the chapters with the real output.

use crate::support;

use support::{check_doc, Mode, Scratch};

fn chapters() -> Vec<String> {
    let dir = support::root().join("docs/course");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .expect("docs/course")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n.as_bytes().first().is_some_and(u8::is_ascii_digit))
        .collect();
    v.sort();
    v
}

#[test]
fn every_chapter_runs_its_commands() {
    let chapters = chapters();
    assert!(chapters.len() >= 13, "chapters: {chapters:?}");
    let mut total = 0;
    for ch in &chapters {
        let scratch = Scratch::new(ch.trim_end_matches(".md"));
        let n = check_doc(&format!("docs/course/{ch}"), &["console"], &scratch.0, Mode::Exact);
        assert!(n >= 1, "{ch} runs no command");
        total += n;
    }
    assert!(total >= 30, "only {total} examples in the course");
}

#[test]
fn the_index_links_every_chapter_in_order() {
    let index = std::fs::read_to_string(support::root().join("docs/course/README.md"))
        .expect("docs/course/README.md");
    let mut at = 0;
    for ch in chapters() {
        let link = format!("]({ch})");
        let i = index[at..].find(&link).unwrap_or_else(|| panic!("index lacks {link} (in order)"));
        at += i + link.len();
    }
}

/// Relative links of the course, docs/README.md and README.md point to files
/// that exist (a renamed chapter or page must not leave a dead link).
#[test]
fn relative_links_resolve() {
    let root = support::root();
    let mut files: Vec<std::path::PathBuf> =
        chapters().iter().map(|c| root.join("docs/course").join(c)).collect();
    files.push(root.join("docs/course/README.md"));
    files.push(root.join("docs/README.md"));
    files.push(root.join("README.md"));
    let mut dead = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        let dir = f.parent().expect("dir");
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let path = target.split('#').next().unwrap_or_default();
            if !path.is_empty() && !dir.join(path).exists() {
                dead.push(format!("{}: {target}", f.display()));
            }
        }
    }
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
    assert!(files.len() >= 16);
}

/// Every `roce demo --scenario` lesson is run, with its real output, by a
/// chapter (so a new scenario comes with its place in the course, and the
/// test above keeps its transcript true).
#[cfg(feature = "demo")]
#[test]
fn every_scenario_is_shown_in_a_chapter() {
    let dir = support::root().join("docs/course");
    let text: String =
        chapters().iter().map(|c| std::fs::read_to_string(dir.join(c)).expect("chapter")).collect();
    let shown = |name: &str| {
        let cmd = format!("$ roce demo --scenario {name}");
        text.lines().any(|l| l == cmd || l.starts_with(&format!("{cmd} ")))
    };
    let missing: Vec<&str> =
        roce_workloads::demo::SCENARIOS.iter().map(|s| s.name).filter(|n| !shown(n)).collect();
    assert!(missing.is_empty(), "scenarios no chapter runs: {missing:?}");
    assert!(roce_workloads::demo::SCENARIOS.len() >= 21);
}
