//! End-to-end tests of `roce decode --ladder`, `--svg`, `--follow` and
//! `--stats`, run on the built binary with the real rxe captures.

use crate::support;

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn capture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packet/tests/data").join(name)
}

fn cli_data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn decode(file: &PathBuf, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .arg("decode")
        .arg(file)
        .args(args)
        .output()
        .expect("run roce")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

/// A scratch file path unique to this test process.
fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("roce-ladder-test-{}-{name}", std::process::id()))
}

const RNR_HEAD: &str = "        ms  frame             192.168.77.3                       192.168.77.2
                                 QP 0x2b                            QP 0x2a
                                    │                                  │
     0.000      1                   │── SEND_ONLY psn=0x2000 len=64 ──►│
     2.989      2                   │◄─ RNR_NAK 40.96ms psn=0x2000 ────│  [RNR NAK: wait 40.96 ms]
                                    ┃                                  ┊  … 49.1 ms (RNR wait) …
    52.086      3                   │── SEND_ONLY psn=0x2000 len=64 ──►│  [RETX after RNR wait, NAK #2]
    52.724      4                   │◄─ RNR_NAK 40.96ms psn=0x2000 ────│  [RNR NAK: wait 40.96 ms]
                                    ┃                                  ┊  … 51 ms (RNR wait) …
   103.721      5                   │── SEND_ONLY psn=0x2000 len=64 ──►│  [RETX after RNR wait, NAK #4]
   104.312      6                   │◄─ RNR_NAK 40.96ms psn=0x2000 ────│  [RNR NAK: wait 40.96 ms]
";

const RNR_TAIL: &str = "        ms  frame             192.168.77.3                       192.168.77.2
                                 QP 0x2b                            QP 0x2a
                                    │                                  │
   846.278     35                   │── SEND_ONLY psn=0x2000 len=64 ──►│  [RETX after RNR wait, NAK #34]
   847.935     36                   │── SEND_ONLY psn=0x2000 len=64 ──►│  [RETX timeout? +1.66 ms]
   849.848     37                   │◄─ RNR_NAK 40.96ms psn=0x2000 ────│  [RNR NAK: wait 40.96 ms]
   849.863     38                   ┃◄─ RNR_NAK 40.96ms psn=0x2000 ────│  [RNR NAK: wait 40.96 ms]
                                    ┃                                  ┊  … 58.13 ms (RNR wait) …
   907.991     39                   │── SEND_ONLY psn=0x2000 len=64 ──►│  [RETX after RNR wait, NAK #38]
   908.600     40                   │◄─ RNR_NAK 40.96ms psn=0x2000 ────│  [RNR NAK: wait 40.96 ms]
                                    ┃                                  ┊  … 47.07 ms (RNR wait) …
   955.673     41                   │── SEND_ONLY psn=0x2000 len=64 ──►│  [RETX after RNR wait, NAK #40]
   956.235     42                   │◄─ RNR_NAK 40.96ms psn=0x2000 ────│  [RNR NAK: wait 40.96 ms]
                                    ┃                                  ┊  … 48.04 ms (RNR wait) …
  1004.275     43                   │── SEND_ONLY psn=0x2000 len=64 ──►│  [RETX after RNR wait, NAK #42]
  1009.148     44                   │◄─ ACK psn=0x2000 msn=1 ──────────│
";

#[test]
fn rnr_text_ladder_is_exact() {
    let o = decode(&capture("rnr.pcap"), &["--ladder", "--to", "6"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), RNR_HEAD);
    let o = decode(&capture("rnr.pcap"), &["--ladder", "--from", "35"]);
    assert_eq!(stdout(&o), RNR_TAIL);
    // The summary still counts the whole capture.
    assert_eq!(String::from_utf8_lossy(&o.stderr), "44 frames, 44 RoCEv2 packets, 0 bad\n");
}

#[test]
fn ladder_has_no_colors_in_a_pipe_and_max_limits_rows() {
    let o = decode(&capture("rnr.pcap"), &["--ladder"]);
    let text = stdout(&o);
    assert!(!text.contains('\x1b'), "escape codes in a pipe");
    // 3 header lines, 44 packets, 20 pauses longer than 10 ms.
    assert_eq!(text.lines().count(), 3 + 44 + 20);
    assert_eq!(text.matches("[RETX").count(), 21);
    assert_eq!(text.matches("[RNR NAK: wait 40.96 ms]").count(), 21);
    let o = decode(&capture("rnr.pcap"), &["--ladder", "--max", "3", "--no-color"]);
    let text = stdout(&o);
    assert_eq!(text.lines().filter(|l| l.contains('►') || l.contains('◄')).count(), 3);
    // A higher pause threshold hides the pause rows.
    let o = decode(&capture("rnr.pcap"), &["--ladder", "--gap", "100"]);
    assert_eq!(stdout(&o).lines().count(), 3 + 44);
}

#[test]
fn ladder_explain_adds_the_explanations() {
    let o = decode(&capture("read_lat.pcap"), &["--ladder", "--explain", "--max", "2"]);
    let text = stdout(&o);
    assert!(text.contains("READ_REQUEST psn=0x35514 dmalen=8"), "{text}");
    assert!(text.contains("↳ RDMA READ request: asks the responder for 8 bytes"), "{text}");
    assert!(text.contains("◄─ READ_RESPONSE_ONLY psn=0x35514 len=8"), "{text}");
}

fn attr_class<'a>(n: &roxmltree::Node<'a, 'a>) -> &'a str {
    n.attribute("class").unwrap_or("")
}

#[test]
fn svg_is_well_formed_with_the_expected_arrows() {
    let path = scratch("rnr.svg");
    let o = decode(&capture("rnr.pcap"), &["--svg", path.to_str().expect("path")]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty(), "--svg alone prints no text ladder");
    let text = std::fs::read_to_string(&path).expect("svg written");
    let _ = std::fs::remove_file(&path);
    let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let arrows: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("g") && attr_class(n).starts_with("arrow "))
        .collect();
    assert_eq!(arrows.len(), 44);
    let count = |c: &str| arrows.iter().filter(|n| attr_class(n) == format!("arrow {c}")).count();
    assert_eq!(count("req"), 1);
    assert_eq!(count("retx"), 21);
    assert_eq!(count("rnr"), 21);
    assert_eq!(count("resp"), 1);
    assert_eq!(count("nak"), 0);
    // Every arrow has a line with an arrowhead and a label.
    for a in &arrows {
        let line = a.children().find(|c| c.has_tag_name("line")).expect("line");
        assert!(line.attribute("marker-end").is_some_and(|m| m.starts_with("url(#head-")));
        assert!(a.children().any(|c| c.has_tag_name("text") && attr_class(&c) == "lbl"));
    }
    // 20 RNR waits (frames 37 and 38 share one) plus the legend's sample.
    let waits =
        doc.descendants().filter(|n| n.has_tag_name("rect") && attr_class(n) == "wait").count();
    assert_eq!(waits, 21);
    // Two lanes with their headers.
    let lanes =
        doc.descendants().filter(|n| n.has_tag_name("line") && attr_class(n) == "lane").count();
    assert_eq!(lanes, 2);
    assert!(text.contains(">192.168.77.3<") && text.contains(">QP 0x2a<"));
}

#[test]
fn ladder_and_svg_together() {
    let path = scratch("both.svg");
    let o = decode(
        &capture("retry_exceeded.pcap"),
        &["--ladder", "--svg", path.to_str().expect("path")],
    );
    let text = std::fs::read_to_string(&path).expect("svg written");
    let _ = std::fs::remove_file(&path);
    roxmltree::Document::parse(&text).expect("well-formed XML");
    let lad = stdout(&o);
    assert_eq!(lad.matches("[RETX timeout?").count(), 3);
    assert_eq!(lad.matches("(timeout?) …").count(), 3);
    assert!(lad.contains("QP ?"), "the requester's QP is never shown: {lad}");
    assert_eq!(text.matches("<g class=\"arrow retx\">").count(), 3);
}

/// Frames of the conversation of QP 0x16 in srq_pingpong.pcap (four QP
/// pairs, 0x15..0x18 at both hosts): every packet with destination QP 0x16,
/// either way.
const SRQ_QP16: &[u64] = &[
    5, 6, 7, 8, 18, 25, 26, 27, 28, 38, 45, 46, 48, 49, 50, 55, 56, 58, 59, 61, 85, 87, 88, 89, 90,
    96, 97, 98, 99, 101, 125, 126, 129, 133, 135, 136, 137, 138, 140, 142, 165, 171, 173, 174, 187,
    191, 192, 193, 194, 207,
];

#[test]
fn follow_selects_one_conversation() {
    let cap = capture("srq_pingpong.pcap");
    // Independent expectation: every packet whose destination QP is 0x16
    // (in this capture both hosts use the same QP numbers for a pair).
    let all = stdout(&decode(&cap, &[]));
    let expected: Vec<u64> = all
        .lines()
        .filter(|l| l.contains("QP=0x000016"))
        .map(|l| l.split_whitespace().next().expect("frame").parse().expect("number"))
        .collect();
    assert_eq!(expected, SRQ_QP16);
    for q in ["0x16", "22", "0X16"] {
        let o = decode(&cap, &["--follow", q, "--json"]);
        let frames: Vec<u64> = stdout(&o)
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("json");
                v["frame"].as_u64().expect("frame")
            })
            .collect();
        assert_eq!(frames, SRQ_QP16, "--follow {q}");
    }
    let text = stdout(&decode(&cap, &["--follow", "0x16"]));
    assert_eq!(text.lines().count(), SRQ_QP16.len());
    let expl = stdout(&decode(&cap, &["--follow", "0x16", "--explain"]));
    assert_eq!(expl.lines().filter(|l| !l.starts_with("        ")).count(), SRQ_QP16.len());
    let lad = stdout(&decode(&cap, &["--follow", "0x16", "--ladder"]));
    assert_eq!(lad.lines().nth(1).map(|l| l.matches("QP 0x16").count()), Some(2));
    assert_eq!(lad.lines().filter(|l| l.contains('►') || l.contains('◄')).count(), 50);
    // A QP that is not in the capture selects nothing; a bad number is a usage error.
    assert!(decode(&cap, &["--follow", "0x99"]).stdout.is_empty());
    assert_eq!(decode(&cap, &["--follow", "zz"]).status.code(), Some(2));
    assert_eq!(decode(&cap, &["--follow", "0x1000000"]).status.code(), Some(2));
}

fn stats_json(file: &PathBuf, args: &[&str]) -> Vec<Value> {
    let mut a = vec!["--stats", "--json"];
    a.extend_from_slice(args);
    stdout(&decode(file, &a)).lines().map(|l| serde_json::from_str(l).expect("json")).collect()
}

#[test]
fn stats_of_rnr() {
    let v = stats_json(&capture("rnr.pcap"), &[]);
    assert_eq!(v.len(), 1);
    let c = &v[0];
    assert_eq!(c["packets"], 44);
    assert_eq!(c["endpoints"][0]["qpn"], 0x2b);
    assert_eq!(c["endpoints"][1]["qpn"], 0x2a);
    let s = &c["streams"][0];
    assert_eq!(s["requester"]["ip"], "192.168.77.3");
    assert_eq!(s["requester"]["qpn"], 0x2b);
    assert_eq!(s["responder"]["qpn"], 0x2a);
    assert_eq!(s["request_packets"], 22);
    assert_eq!(s["response_packets"], 22);
    assert_eq!(s["messages"]["SEND"], 1);
    assert_eq!(s["payload_bytes"], 64);
    assert_eq!(s["retransmitted_packets"], 21);
    assert_eq!(s["retransmitted_psns"], serde_json::json!([0x2000]));
    assert_eq!(s["rnr_naks"], 21);
    assert_eq!(s["rnr_wait_asked_ms"], 860.16);
    assert_eq!(s["naks"], serde_json::json!({}));
    // Frame 36 repeats PSN 0x2000 1.66 ms after frame 35 with no NAK between.
    assert_eq!(s["timeouts"], 1);
    // 22 requests; frames 35 and 36 are two copies before any answer (no
    // sample), every other request has its own answer: 20 samples; the
    // fastest is frame 27 -> 28 (538 us), the slowest 43 -> 44 (4873 us).
    assert_eq!(s["rtt_us"]["samples"], 20);
    assert_eq!(s["rtt_us"]["min"], 538.0);
    assert_eq!(s["rtt_us"]["max"], 4873.0);

    let text = stdout(&decode(&capture("rnr.pcap"), &["--stats"]));
    assert!(text.contains("    retransmitted  21 packets, 1 PSN (0x2000)\n"), "{text}");
    assert!(text.contains("    RNR NAKs       21, asked to wait 860.16 ms in total"), "{text}");
    assert!(text.contains("    round trip     20 samples: min 538 / median 809 / max 4873 µs\n"));
}

#[test]
fn stats_rtt_of_read_lat_match_the_frame_times() {
    let cap = capture("read_lat.pcap");
    // Independent: each READ request (odd frame) is answered by the next
    // frame; take the times from the default text output.
    let times: Vec<f64> = stdout(&decode(&cap, &[]))
        .lines()
        .map(|l| l.split_whitespace().nth(1).expect("time").parse().expect("seconds"))
        .collect();
    assert_eq!(times.len(), 200);
    let mut rtt: Vec<f64> =
        times.chunks(2).map(|p| ((p[1] - p[0]) * 1e6).round()).collect::<Vec<_>>();
    rtt.sort_by(|a, b| a.total_cmp(b));
    let median = (rtt[49] + rtt[50]) / 2.0;
    let v = stats_json(&cap, &[]);
    let s = &v[0]["streams"][0];
    assert_eq!(s["messages"]["READ"], 100);
    assert_eq!(s["read_bytes"], 800);
    assert_eq!(s["rtt_us"]["samples"], 100);
    assert_eq!(s["rtt_us"]["min"].as_f64(), Some(rtt[0]));
    assert_eq!(s["rtt_us"]["median"].as_f64(), Some(median));
    assert_eq!(s["rtt_us"]["max"].as_f64(), Some(rtt[99]));
    assert_eq!((rtt[0], median, rtt[99]), (114.0, 205.5, 3976.0));
    // --from/--to narrow the statistics too: frames 1 and 2 only.
    let v = stats_json(&cap, &["--to", "2"]);
    assert_eq!(v[0]["streams"][0]["rtt_us"]["samples"], 1);
    assert_eq!(v[0]["streams"][0]["rtt_us"]["min"], 1162.0);
}

#[test]
fn stats_of_pingpong_have_two_directions() {
    let v = stats_json(&capture("rc_pingpong_small.pcap"), &[]);
    assert_eq!(v.len(), 1);
    let streams = v[0]["streams"].as_array().expect("streams");
    assert_eq!(streams.len(), 2);
    for s in streams {
        assert_eq!(s["messages"]["SEND"], 10);
        assert_eq!(s["payload_bytes"], 640);
        assert_eq!(s["rtt_us"]["samples"], 10);
    }
    assert_eq!(streams[0]["requester"]["ip"], "192.168.77.3");
    assert_eq!(streams[1]["requester"]["ip"], "192.168.77.2");
}

#[test]
fn no_panics_on_crafted_captures() {
    for file in [capture("samples.pcap"), cli_data("edge.pcap")] {
        let svg = scratch("crafted.svg");
        let svg_s = svg.to_str().expect("path").to_string();
        let modes: Vec<Vec<&str>> = vec![
            vec!["--ladder"],
            vec!["--ladder", "--explain"],
            vec!["--svg", &svg_s],
            vec!["--stats"],
            vec!["--stats", "--json"],
            vec!["--follow", "0x12"],
            vec!["--follow", "0x12", "--ladder"],
            vec!["--ladder", "--bad-only"],
        ];
        for m in modes {
            let o = decode(&file, &m);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{file:?} {m:?}: {err}");
            assert!(!err.contains("panicked"), "{file:?} {m:?}: {err}");
            assert!(!o.stdout.is_empty() || m[0] == "--svg", "{file:?} {m:?}");
        }
        let text = std::fs::read_to_string(&svg).expect("svg written");
        let _ = std::fs::remove_file(&svg);
        roxmltree::Document::parse(&text).expect("well-formed XML");
    }
    // samples.pcap: the two bad-ICRC packets and the NAKs are marked.
    let lad = stdout(&decode(&capture("samples.pcap"), &["--ladder"]));
    assert_eq!(lad.matches("[BAD ICRC: dropped]").count(), 2);
    assert_eq!(lad.matches("[NAK PSN_SEQUENCE_ERROR]").count(), 1);
    assert_eq!(lad.matches("[RNR NAK: wait 1.28 ms]").count(), 1);
    // edge.pcap: the datagram too short for a BTH and the one with broken
    // lengths become notes.
    let lad = stdout(&decode(&cli_data("edge.pcap"), &["--ladder"]));
    assert!(lad.contains("[10.0.0.1 -> 10.0.0.2: too short for a BTH and an ICRC (dropped)]"));
    assert!(lad.contains("[UDP to the RoCEv2 port, MALFORMED:"));
}

#[test]
fn ladder_conflicts_with_json() {
    let o = decode(&capture("rnr.pcap"), &["--ladder", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let o = decode(&capture("rnr.pcap"), &["--stats", "--ladder"]);
    assert_eq!(o.status.code(), Some(2));
    // An SVG that cannot be written is an error, not a panic.
    let o = decode(&capture("rnr.pcap"), &["--svg", "/nonexistent-dir/x.svg"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent-dir/x.svg: cannot write"));
}

/// Every `$ roce ...` example of docs/ladder.md is re-run from the
/// repository root; each line shown (except `...`) must appear in the real
/// output, in the same order.
#[test]
fn docs_examples_are_real_output() {
    let n = support::check_doc(
        "docs/ladder.md",
        &["console"],
        &support::root(),
        support::Mode::Subsequence,
    );
    assert!(n >= 9, "only {n} console examples found");
}
