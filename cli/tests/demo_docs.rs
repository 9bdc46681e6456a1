//! docs/demo.md shows real output of `roce demo`: re-run each `$ roce demo ...`
//! example and compare every line, except the wall-clock part of the `time`
//! line (the run is deterministic for a seed; only wall time differs).

mod support;

#[test]
fn demo_doc_output_is_real() {
    let n = support::check_doc("docs/demo.md", &["text"], &support::root(), support::Mode::Exact);
    assert!(n >= 2, "expected the demo examples in docs/demo.md");
}
