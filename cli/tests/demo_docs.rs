//! docs/demo.md shows real output of `roce demo`: re-run each `$ roce demo ...`
//! example and compare every line, except the wall-clock part of the `time`
//! line (the run is deterministic for a seed; only wall time differs).

use crate::support;

#[test]
fn demo_doc_output_is_real() {
    let n = support::check_doc("docs/demo.md", &["text"], &support::root(), support::Mode::Exact);
    assert!(n >= 2, "expected the demo examples in docs/demo.md");
    // each QP type has its own example (all of them were re-run above)
    let doc = std::fs::read_to_string(support::root().join("docs/demo.md")).expect("docs/demo.md");
    for t in ["uc", "ud", "mixed"] {
        let flag = format!("--qp-type {t} ");
        assert!(
            doc.lines().any(|l| l.contains("roce demo") && format!("{l} ").contains(&flag)),
            "docs/demo.md has no `roce demo {flag}...` example"
        );
    }
}
