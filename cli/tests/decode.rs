//! End-to-end tests of `roce decode`, run on the built binary.
//!
//! `--json` output is compared key by key with the oracle's output, which
//! was generated once with `python3 oracle.py --no-tshark F.pcap` and is
//! committed as `cli/tests/data/F.oracle.jsonl` (no Python needed here).

use crate::support;

use serde_json::{Map, Value};
use std::path::PathBuf;
use std::process::{Command, Output};

fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

/// A capture committed by the packet crate's tests.
fn capture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packet/tests/data").join(name)
}

/// A file committed with these tests.
fn cli_data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn decode(args: &[&str], file: &PathBuf) -> Output {
    roce().arg("decode").arg(file).args(args).output().expect("run roce")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

fn jsonl(text: &str) -> Vec<Map<String, Value>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(m)) => m,
            other => panic!("not a JSON object: {l}: {other:?}"),
        })
        .collect()
}

/// Keys every record of a packet with a BTH must have (the brief's list).
const REQUIRED: &[&str] = &[
    "frame",
    "src",
    "dst",
    "udp_sport",
    "udp_dport",
    "opcode",
    "opcode_name",
    "se",
    "migreq",
    "padcnt",
    "tver",
    "pkey",
    "fecn",
    "becn",
    "destqp",
    "ackreq",
    "psn",
    "icrc_ok",
    "ip_version",
    "udp_len",
    "resv6",
    "resv7",
    "icrc_wire",
    "icrc_expected",
];

/// Compare our records with the oracle's: same number, and for each the
/// same set of keys (the oracle's "source" aside) with equal values.
/// `skip_frames` lists frames where only "frame" and a non-empty "errors"
/// are required (documented differences).
fn compare_with_oracle(capture_path: &PathBuf, oracle_name: &str, skip_frames: &[u64]) -> usize {
    let out = decode(&["--json"], capture_path);
    let ours = jsonl(&stdout(&out));
    let oracle_text = std::fs::read_to_string(cli_data(oracle_name)).expect("oracle file");
    let theirs = jsonl(&oracle_text);
    assert_eq!(ours.len(), theirs.len(), "{oracle_name}: number of records");
    assert!(!ours.is_empty(), "{oracle_name}: no records");
    let mut any_bad = false;
    for (i, (a, b)) in ours.iter().zip(theirs.iter()).enumerate() {
        assert_eq!(a.get("frame"), b.get("frame"), "{oracle_name} record {i}: frame");
        let frame = b["frame"].as_u64().unwrap_or(0);
        let bad = b.get("icrc_ok") != Some(&Value::Bool(true))
            || b.get("errors").is_some_and(|e| e.as_array().is_some_and(|v| !v.is_empty()));
        any_bad |= bad;
        if skip_frames.contains(&frame) {
            let errs = a.get("errors").and_then(|e| e.as_array()).map(|v| v.len()).unwrap_or(0);
            assert!(errs > 0, "{oracle_name} frame {frame}: errors expected in {a:?}");
            continue;
        }
        if b.contains_key("opcode") {
            for k in REQUIRED {
                assert!(a.contains_key(*k), "{oracle_name} frame {frame}: key {k} missing");
            }
        }
        for (k, v) in b {
            if k == "source" {
                continue;
            }
            assert_eq!(a.get(k), Some(v), "{oracle_name} frame {frame}: key {k}");
        }
        for k in a.keys() {
            // the oracle does not decode CM MADs; we add them as "cm"
            assert!(
                b.contains_key(k) || k == "cm" || k == "ecn",
                "{oracle_name} frame {frame}: extra key {k}"
            );
        }
        // nor name the ECN field: ours is the oracle's TOS / traffic class's
        // low two bits, and absent for Not-ECT
        let tos = b.get("ip_tos").or(b.get("ipv6_tc")).and_then(Value::as_u64);
        if let Some(tos) = tos {
            let want = ["Not-ECT", "ECT(1)", "ECT(0)", "CE"][(tos & 3) as usize];
            let got = a.get("ecn").and_then(Value::as_str).unwrap_or("Not-ECT");
            assert_eq!(got, want, "{oracle_name} frame {frame}: ecn");
            assert!(tos & 3 != 0 || !a.contains_key("ecn"), "{oracle_name} frame {frame}");
        }
    }
    let code = out.status.code();
    assert_eq!(code, Some(if any_bad { 1 } else { 0 }), "{oracle_name}: exit status");
    ours.len()
}

#[test]
fn json_matches_oracle_samples() {
    assert_eq!(compare_with_oracle(&capture("samples.pcap"), "samples.oracle.jsonl", &[]), 29);
}

#[test]
fn json_matches_oracle_read_lat() {
    assert_eq!(compare_with_oracle(&capture("read_lat.pcap"), "read_lat.oracle.jsonl", &[]), 200);
}

#[test]
fn json_matches_oracle_rnr() {
    assert_eq!(compare_with_oracle(&capture("rnr.pcap"), "rnr.oracle.jsonl", &[]), 44);
}

#[test]
fn json_matches_oracle_retry_exceeded() {
    let n =
        compare_with_oracle(&capture("retry_exceeded.pcap"), "retry_exceeded.oracle.jsonl", &[]);
    assert_eq!(n, 4);
}

#[test]
fn json_matches_oracle_ud_pingpong() {
    let n = compare_with_oracle(&capture("ud_pingpong.pcap"), "ud_pingpong.oracle.jsonl", &[]);
    assert_eq!(n, 40);
}

#[test]
fn json_matches_oracle_host_udp() {
    // Frame 15 is a plain UDP datagram to port 4791: unknown opcode, TVer 8.
    let n = compare_with_oracle(&capture("host_udp.pcap"), "host_udp.oracle.jsonl", &[]);
    assert_eq!(n, 217);
}

#[test]
fn json_matches_oracle_rping() {
    assert_eq!(compare_with_oracle(&capture("rping.pcap"), "rping.oracle.jsonl", &[]), 65);
}

#[test]
fn json_matches_oracle_rc_pingpong_small() {
    let n = compare_with_oracle(
        &capture("rc_pingpong_small.pcap"),
        "rc_pingpong_small.oracle.jsonl",
        &[],
    );
    assert_eq!(n, 40);
}

#[test]
fn json_matches_oracle_edge_cases() {
    // edge.pcap (made by tests/data/make_edge.py): a GSO super-packet, every
    // structural error the oracle knows, warnings, a truncated capture.
    // Frame 26 has a UDP length that disagrees with the IP length: the
    // framing layer refuses it, so only its errors are compared.
    let n = compare_with_oracle(&cli_data("edge.pcap"), "edge.oracle.jsonl", &[26]);
    assert_eq!(n, 28);
    let out = decode(&["--json"], &cli_data("edge.pcap"));
    let recs = jsonl(&stdout(&out));
    let gso: Vec<_> = recs.iter().filter(|r| r.contains_key("gso_segment")).collect();
    assert_eq!(gso.len(), 3);
    assert_eq!(gso[2]["gso_segments"], 3);
    assert_eq!(gso[2]["gso_size"], 272);
    assert_eq!(gso[2]["opcode_name"], "RC_SEND_LAST");
    let f26 = recs.iter().find(|r| r["frame"] == 26).expect("frame 26");
    assert_eq!(f26["errors"][0], "invalid field value: UDP length disagrees with the IP length");
}

#[test]
fn good_capture_exits_0_with_summary() {
    let out = decode(&[], &capture("retry_exceeded.pcap"));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stderr(&out), "4 frames, 4 RoCEv2 packets, 0 bad\n");
    assert_eq!(stdout(&out).lines().count(), 4);
}

#[test]
fn non_roce_frames_are_skipped_and_counted() {
    // rping.pcap: 67 frames, 2 of them are not RoCE.
    let out = decode(&[], &capture("rping.pcap"));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stderr(&out), "67 frames, 65 RoCEv2 packets, 0 bad\n");
    assert_eq!(stdout(&out).lines().count(), 65);
}

#[test]
fn samples_exit_1_and_bad_only_prints_frames_28_29() {
    let out = decode(&[], &capture("samples.pcap"));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out), "29 frames, 29 RoCEv2 packets, 2 bad\n");

    let out = decode(&["--bad-only"], &capture("samples.pcap"));
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(
        lines[0],
        "   28  0.043420  192.0.2.1:49153 -> 192.0.2.2:4791  RC_SEND_ONLY  QP=0x000012 \
         PSN=0x000064 A=1 SE=1 pad=3 len=13  ICRC BAD (wire c95063c5, expected 26eece1b)"
    );
    assert!(lines[1].starts_with("   29  "), "{}", lines[1]);
    assert!(lines[1].contains("RC_RDMA_WRITE_ONLY"), "{}", lines[1]);
    assert!(lines[1].ends_with("ICRC BAD (wire b7e1ba4d, expected 1232e686)"), "{}", lines[1]);

    let out = decode(&["--bad-only", "--json"], &capture("samples.pcap"));
    let recs = jsonl(&stdout(&out));
    let frames: Vec<u64> = recs.iter().map(|r| r["frame"].as_u64().unwrap_or(0)).collect();
    assert_eq!(frames, vec![28, 29]);
    assert!(recs.iter().all(|r| r["icrc_ok"] == false));

    // The explanation of a bad packet says what a receiver does with it.
    let out = decode(&["--bad-only", "--explain"], &capture("samples.pcap"));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(text.contains("        ICRC bad: a receiver drops this packet silently"), "{text}");
}

#[test]
fn port_option_selects_the_udp_port() {
    let out = decode(&["--port", "4792"], &capture("samples.pcap"));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "");
    assert_eq!(stderr(&out), "29 frames, 0 RoCEv2 packets, 0 bad\n");
}

fn tmp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roce-decode-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write temp file");
    p
}

/// Exit 2, nothing on stdout, one line on stderr naming the problem, no panic.
fn assert_usage_error(out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stdout(out), "");
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("roce decode: "), "{err}");
    assert!(err.contains(needle), "{err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
}

#[test]
fn missing_file_exits_2() {
    let out = decode(&[], &PathBuf::from("/nonexistent/dir/no.pcap"));
    assert_usage_error(&out, "/nonexistent/dir/no.pcap");
}

#[test]
fn empty_file_exits_2() {
    let out = decode(&[], &tmp_file("empty.pcap", b""));
    assert_usage_error(&out, "empty.pcap");
}

#[test]
fn text_file_exits_2() {
    let out = decode(&[], &tmp_file("notes.txt", b"this is not a capture\n"));
    assert_usage_error(&out, "not a pcap or pcapng file");
}

#[test]
fn truncated_pcap_exits_2() {
    let full = std::fs::read(capture("samples.pcap")).expect("samples");
    // 24-byte file header, 16-byte record header, then 10 of the frame's bytes.
    let cut = tmp_file("cut_record.pcap", &full[..24 + 16 + 10]);
    assert_usage_error(&decode(&[], &cut), "truncated");
    // Cut inside a record header.
    let cut = tmp_file("cut_header.pcap", &full[..24 + 8]);
    assert_usage_error(&decode(&["--json"], &cut), "truncated");
    // Cut inside the file header.
    let cut = tmp_file("cut_file_header.pcap", &full[..10]);
    assert_eq!(decode(&[], &cut).status.code(), Some(2));
}

/// A recording cut short (Ctrl-C, `head -c`): every complete record is
/// decoded first, then the truncation is reported and the exit status is 2,
/// as tcpdump and tshark do.
#[test]
fn cut_capture_decodes_what_is_there_then_exits_2() {
    let full = std::fs::read(capture("rnr.pcap")).expect("rnr.pcap");
    let whole = decode(&[], &capture("rnr.pcap"));
    let all: Vec<String> = stdout(&whole).lines().map(str::to_string).collect();
    assert!(all.len() > 27, "{} lines", all.len());
    let cut = tmp_file("cut_after_27.pcap", &full[..3000]);
    for args in [&[][..], &["--json"][..]] {
        let out = decode(args, &cut);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let text = stdout(&out);
        assert_eq!(text.lines().count(), 27, "{args:?}: {text}");
        if args.is_empty() {
            assert_eq!(text.lines().collect::<Vec<_>>(), all[..27].to_vec());
        }
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("roce decode: "), "{err}");
        assert!(err.contains("truncated capture file: record 28"), "{err}");
        assert!(err.contains("the 27 complete records before it were decoded"), "{err}");
    }
}

#[test]
fn rnr_nak_line_and_explanation() {
    let out = decode(&["--explain"], &capture("rnr.pcap"));
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let i = lines.iter().position(|l| l.starts_with("    2  ")).expect("frame 2 line");
    assert_eq!(
        lines[i],
        "    2  0.002989  192.168.77.2:50958 -> 192.168.77.3:4791  RC_ACKNOWLEDGE  QP=0x00002b \
         PSN=0x002000 A=0 RNR_NAK timer=24 (40.96 ms) msn=0  ICRC ok"
    );
    assert_eq!(
        lines[i + 1],
        "        RNR NAK: the responder had no receive WQE posted for the request at PSN 0x2000; \
         the requester waits 40.96 ms (timer code 24) and retries PSN 0x2000"
    );
    // Frame 3 is the requester's retry.
    assert_eq!(
        lines[i + 3],
        "        retry of PSN 0x2000 after the RNR NAK in frame 2 (copy 2, first sent in frame 1): \
         it came 49.1 ms after the NAK, which asked for 40.96 ms"
    );
    // The last frame finally acknowledges the SEND.
    assert_eq!(
        lines[lines.len() - 1],
        "        ACK covers everything up to PSN 0x2000 (MSN 1): the requester can complete those \
         WQEs (completes the request that started in frame 1); credit 31 = no credit information"
    );
}

#[test]
fn read_response_line_and_explanation() {
    let out = decode(&["--explain"], &capture("read_lat.pcap"));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "    1  0.000000  192.168.77.3:50176 -> 192.168.77.2:4791  RC_RDMA_READ_REQUEST  \
         QP=0x000020 PSN=0x035514 A=1 RETH va=0x564ff309d000 rkey=0x00000f74 dmalen=8  ICRC ok"
    );
    assert_eq!(
        lines[1],
        "        RDMA READ request: asks the responder for 8 bytes from va 0x564ff309d000 (rkey \
         0xf74); one READ RESPONSE ONLY with PSN 0x35514 will carry them (AckReq: an ACK is \
         requested)"
    );
    assert_eq!(
        lines[2],
        "    2  0.001162  192.168.77.2:50176 -> 192.168.77.3:4791  RC_RDMA_READ_RESPONSE_ONLY  \
         QP=0x000020 PSN=0x035514 A=0 len=8 ACK msn=1 credit=31  ICRC ok"
    );
    assert_eq!(
        lines[3],
        "        READ RESPONSE ONLY 1 of 1 for the READ at PSN 0x35514 (8 bytes requested, frame \
         1): the data is complete and the requester's READ WQE finishes"
    );
}

#[test]
fn multi_packet_read_response_is_counted() {
    let out = decode(&["--explain"], &capture("samples.pcap"));
    let text = stdout(&out);
    assert!(
        text.contains(
            "        READ RESPONSE FIRST 1 of 2 for the READ at PSN 0x69 (300 bytes requested, \
             frame 6)\n"
        ),
        "{text}"
    );
    assert!(text.contains(
        "        READ RESPONSE LAST 2 of 2 for the READ at PSN 0x69 (300 bytes requested, frame \
         6): the data is complete and the requester's READ WQE finishes\n"
    ));
    assert!(text.contains(
        "        last packet of a SEND: the message is 610 bytes in 3 packets; the responder \
         completes the receive WQE (AckReq: an ACK is requested)\n"
    ));
    assert!(text.contains(
        "        NAK PSN_SEQUENCE_ERROR: the responder expected PSN 0x68 but got a later one; \
         everything before 0x68 is acknowledged (MSN 3) and the requester resends from PSN 0x68\n"
    ));
}

#[test]
fn retransmission_timeouts_are_explained() {
    let out = decode(&["--explain"], &capture("retry_exceeded.pcap"));
    let text = stdout(&out);
    let retr: Vec<&str> =
        text.lines().filter(|l| l.contains("retransmission of PSN 0x2000")).collect();
    assert_eq!(retr.len(), 3, "{text}");
    assert!(retr[0].starts_with(
        "        retransmission of PSN 0x2000 (copy 2, first sent in frame 1): no ACK or NAK for \
         it appears before this point"
    ));
    assert!(retr[2].contains("(copy 4, first sent in frame 1)"));
}

#[test]
fn help_teaches_the_command() {
    let out = roce().arg("--help").output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    let top = stdout(&out);
    assert!(top.contains("RoCEv2"), "{top}");
    assert!(top.contains("UDP"), "{top}");
    assert!(top.contains("decode"), "{top}");

    let out = roce().args(["decode", "--help"]).output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    let h = stdout(&out);
    for needle in
        ["--json", "--explain", "--bad-only", "--port", "Examples:", "4791", "ICRC", "Exit status"]
    {
        assert!(h.contains(needle), "decode --help lacks {needle}: {h}");
    }
}

#[test]
fn bad_arguments_exit_2() {
    let out = roce().args(["decode"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let out = roce()
        .arg("decode")
        .arg(capture("rnr.pcap"))
        .args(["--json", "--explain"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let out =
        roce().arg("decode").arg(capture("rnr.pcap")).args(["--port", "x"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
}

/// Every `$ roce ...` example of docs/decode.md is re-run from the
/// repository root; each line shown (except `...`) must appear in the real
/// output (stdout then stderr), in the same order.
#[test]
fn docs_examples_are_real_output() {
    let n = support::check_doc(
        "docs/decode.md",
        &["console"],
        &support::root(),
        support::Mode::Subsequence,
    );
    assert!(n >= 8, "only {n} console examples found");
}

#[test]
fn cnp_and_ud_lines_and_explanations() {
    let out = decode(&["--explain"], &capture("samples.pcap"));
    let text = stdout(&out);
    assert!(text.contains(
        "   27  0.043117  192.0.2.2:49153 -> 192.0.2.1:4791  CNP  QP=0x000011 PSN=0x000000 A=0 \
         BECN  congestion notification to qp=0x11  ICRC ok\n        Congestion Notification \
         Packet (Annex A17.9.3): tells QP 0x11 to slow down; its reaction point (DCQCN) cuts \
         the QP's rate; never acknowledged; BECN set; PSN and the 16 reserved bytes are zero\n\
         \x20       it answers the CE mark on frame 25, a packet QP 0x11 sent\n"
    ));
    // frame 25 is CE-marked (and has the BTH's FECN and BECN set too)
    assert!(text.contains(
        "   25  0.041211  192.0.2.1:49153 -> 192.0.2.2:4791  RC_SEND_ONLY  QP=0x000012 \
         PSN=0x0001f4 A=0 FECN BECN ECN=CE len=20  ICRC ok\n"
    ));
    assert!(text.contains(
        "        IP ECN CE: a switch on the path found its queue above its ECN threshold and \
         marked this packet Congestion Experienced instead of dropping it; the receiving device \
         answers with a CNP to the sending QP (0x11), at most one per QP per interval\n"
    ));
    // edge.pcap frame 15: a CNP without BECN and with reserved bytes set
    let edge =
        stdout(&decode(&["--explain", "--from", "15", "--to", "15"], &cli_data("edge.pcap")));
    assert!(edge.contains(
        "CNP  QP=0x000012 PSN=0x000000 A=0  congestion notification to qp=0x12 (malformed CNP: \
         BECN not set, reserved bytes not 0)  ICRC ok\n        malformed CNP (BECN not set, \
         reserved bytes not 0): Annex A17.9.3's CNP has BECN set"
    ));
    assert!(text.contains(
        "   16  0.026519  192.0.2.1:49155 -> 192.0.2.2:4791  UD_SEND_ONLY  QP=0x000021 \
         PSN=0x000007 A=0 pad=2 len=30 DETH qkey=0x11111111 srcqp=0x000022  ICRC ok\n"
    ));
    let out = decode(&["--explain"], &capture("rping.pcap"));
    let text = stdout(&out);
    assert!(text.contains("QP1 is the GSI: this is a management datagram (e.g. a CM MAD)"));
}

#[test]
fn cm_mads_are_decoded_in_every_mode() {
    // rping through kernel rxe: REQ, REP, RTU on QP1, then DREQ/DREP.
    let text = stdout(&decode(&[], &capture("rping.pcap")));
    assert!(text.contains(
        "CM REQ comm=0x6ccad5f5 svc=TCP:7174 qpn=0x000023 psn=0x31e278 rd_atom=1/1 mtu=1024 \
         timeout=20/20 retry=7 rnr=7 max_cm_retries=15 192.168.77.3:50463 -> 192.168.77.2  ICRC ok"
    ));
    assert!(text.contains("CM REP comm=0xa64449c3 remote=0x6ccad5f5 qpn=0x000022 psn=0xb3de0c"));
    assert!(text.contains("CM RTU comm=0x6ccad5f5 remote=0xa64449c3"));
    assert!(text.contains("CM DREQ comm=0x6ccad5f5 remote=0xa64449c3 qpn=0x000022"));
    assert!(text.contains("CM DREP comm=0xa64449c3 remote=0x6ccad5f5"));

    let explain = stdout(&decode(&["--explain"], &capture("rping.pcap")));
    assert!(explain.contains("CM REQ (connection request, IBA 12.6.5)"));
    assert!(explain.contains("the active side confirms with an RTU"));

    let ladder = stdout(&decode(&["--ladder"], &capture("rping.pcap")));
    assert!(ladder.contains("CM REQ qpn=0x23 svc=TCP:7174"));
    assert!(ladder.contains("CM REP qpn=0x22"));

    let records = jsonl(&stdout(&decode(&["--json"], &capture("rping.pcap"))));
    let cms: Vec<&Value> = records.iter().filter_map(|r| r.get("cm")).collect();
    let attrs: Vec<&str> = cms.iter().map(|c| c["attr"].as_str().unwrap()).collect();
    assert_eq!(attrs, ["REQ", "REP", "RTU", "DREQ", "DREP"]);
    assert_eq!(cms[2]["local_comm_id"], 0x6ccad5f5u32);
    assert_eq!(cms[2]["remote_comm_id"], 0xa64449c3u32);
    // only UD SENDs to QP1 carry one
    assert!(records.iter().filter(|r| r.contains_key("cm")).all(|r| r["destqp"] == 1));
}

/// rdma-core's rsockets on kernel rxe (the first 16 frames of
/// `rstream -S 1000 -C 20` between two lab guests): the REQ and REP carry
/// rsocket connection data, so the connection's RDMA WRITEs are explained
/// as rsocket messages; a capture without rsockets gets no such line.
#[test]
fn explain_names_rsocket_messages() {
    let out = stdout(&decode(&["--explain"], &cli_data("rstream_rxe_head.pcap")));
    for must in [
        "rsocket connection data: version 1, credits 384, receive buffer 1 MiB at 0x7f6dac8a3000, rkey 0x406",
        "rsocket connection data: version 1, credits 384, receive buffer 1 MiB at 0x7fe4363e2000, rkey 0x4fe",
        "rsocket SGL update: the receiver frees a receive buffer (one 16-byte target SGL entry) and grants messages up to #384",
        "rsocket data, 16 bytes",
        "rsocket data, 1000 bytes",
    ] {
        assert!(out.contains(must), "{must}\n{out}");
    }
    // the two connection data and every RDMA WRITE of the connection
    // (frames 6, 7, 10, 12 and the data writes 14..16)
    assert_eq!(out.matches("\n        rsocket ").count(), 2 + 7, "{out}");
    let rping = stdout(&decode(&["--explain"], &capture("rping.pcap")));
    assert!(!rping.contains("rsocket"), "{rping}");
}
