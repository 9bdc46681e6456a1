//! Unit tests of the ladder layout, the SVG writer and the statistics on
//! packets built with the packet crate: a go-back-N recovery after a
//! PSN sequence error NAK, which none of the real captures shows.

use super::{write_text, Class, Diagram, Row};
use crate::analysis::{parse_qpn, Analysis, Conversation, Endpoint, Filter};
use crate::record::Record;
use crate::stats::{self, Rtt};
use crate::svg;
use crate::tests::{ack, record, repr, A, B};
use roce_packet::ext::{NakCode, Syndrome};
use roce_packet::{Opcode, RoceRepr};

/// A SEND to QP 0x22 at B from A (whose QP 0x11 only the responses show).
fn send(frame: u64, t: f64, psn: u32, ackreq: bool) -> Record {
    let mut r: RoceRepr = repr(Opcode::RC_SEND_ONLY, 0x22, psn, 8);
    r.bth.ack_req = ackreq;
    record(frame, t, A, B, &r)
}

/// PSN 1 arrives, PSN 2 is lost, PSN 3 triggers a sequence NAK for 2,
/// the requester resends 2 and 3, and 3 is ACKed.
fn go_back_n() -> Analysis {
    let mut a = Analysis::new();
    a.packet(send(1, 0.000, 1, false));
    a.packet(send(2, 0.001, 3, true));
    a.packet(record(3, 0.002, B, A, &ack(2, Syndrome::Nak(NakCode::PsnSequenceError), 1)));
    a.packet(send(4, 0.003, 2, false));
    a.packet(send(5, 0.004, 3, true));
    a.packet(record(6, 0.0055, B, A, &ack(3, Syndrome::Ack { credit: 31 }, 3)));
    a.finish();
    a
}

#[test]
fn go_back_n_is_laid_out_with_classes_and_marks() {
    let a = go_back_n();
    let shown = Filter::default().select(&a);
    assert_eq!(shown.len(), 6);
    let d = Diagram::build(&a, &shown, 10.0);
    // The requester's QP came from the responses' destination QP.
    assert_eq!(
        d.lanes,
        vec![Endpoint { ip: A, qpn: Some(0x11) }, Endpoint { ip: B, qpn: Some(0x22) }]
    );
    let arrows: Vec<_> = d
        .rows
        .iter()
        .filter_map(|r| match r {
            Row::Arrow(x) => Some(x),
            _ => None,
        })
        .collect();
    let classes: Vec<Class> = arrows.iter().map(|x| x.class).collect();
    assert_eq!(
        classes,
        [Class::Request, Class::Request, Class::Nak, Class::Retx, Class::Retx, Class::Response]
    );
    assert_eq!(arrows[1].marks, ["[PSN gap: 1 missing]"]);
    assert_eq!(arrows[2].label, "NAK PSN_SEQUENCE_ERROR psn=0x2");
    assert_eq!(arrows[2].marks, ["[NAK PSN_SEQUENCE_ERROR]"]);
    assert_eq!(arrows[3].marks, ["[RETX go-back-N, NAK #3]"]);
    assert_eq!(arrows[4].marks, ["[RETX go-back-N, NAK #3]"]);
    assert_eq!(arrows[5].label, "ACK psn=0x3 msn=3");
    assert_eq!((arrows[2].from, arrows[2].to), (1, 0));
    assert!(d.waits.is_empty());
    assert_eq!(d.arrows(), 6);

    let mut out = Vec::new();
    write_text(&d, false, false, &mut out).expect("write");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(!text.contains('\x1b'));
    assert!(text.contains("│◄─ NAK PSN_SEQUENCE_ERROR psn=0x2 ─"), "{text}");
    let mut out = Vec::new();
    write_text(&d, true, false, &mut out).expect("write");
    let colored = String::from_utf8(out).expect("utf-8");
    assert!(colored.contains("\x1b[1;31m"), "NAK in red: {colored}");
    assert!(colored.contains("\x1b[33m"), "retransmissions in yellow");

    let doc = svg::render(&d);
    assert_eq!(doc.matches("<g class=\"arrow nak\">").count(), 1);
    assert_eq!(doc.matches("<g class=\"arrow retx\">").count(), 2);
    assert_eq!(doc.matches("<g class=\"arrow req\">").count(), 2);
    assert_eq!(doc.matches("<g class=\"arrow resp\">").count(), 1);
}

#[test]
fn go_back_n_statistics() {
    let a = go_back_n();
    let shown = Filter::default().select(&a);
    let s = stats::compute(&a, &shown);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].packets, 6);
    let st = &s[0].streams[0].1;
    assert_eq!(st.request_packets, 4);
    assert_eq!(st.response_packets, 2);
    assert_eq!(st.messages.get("SEND"), Some(&2));
    assert_eq!(st.payload_bytes, 16);
    assert_eq!(st.retx_packets, 2);
    assert_eq!(st.retx_psns.iter().copied().collect::<Vec<_>>(), [2, 3]);
    assert_eq!(st.naks.get("PSN_SEQUENCE_ERROR"), Some(&1));
    assert_eq!(st.psn_gaps, 1);
    assert_eq!(st.timeouts, 0);
    // PSN 3 was sent twice before its ACK: no round-trip sample (Karn).
    assert!(st.rtt_samples.is_empty());
    let mut out = Vec::new();
    stats::write_json(&s, &mut out).expect("write");
    let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(v["streams"][0]["naks"]["PSN_SEQUENCE_ERROR"], 1);
    assert_eq!(v["streams"][0]["requester"]["qpn"], 0x11);
    // no congestion: no congestion keys, no congestion line
    assert_eq!((s[0].ce_marked, s[0].cnps.len()), (0, 0));
    assert!(v.get("ce_marked").is_none() && v.get("cnps").is_none(), "{v}");
    let mut out = Vec::new();
    stats::write_text(&s, &mut out).expect("write");
    assert!(!String::from_utf8_lossy(&out).contains("congestion"));
}

#[test]
fn congestion_line_of_the_statistics() {
    let a = go_back_n();
    let shown = Filter::default().select(&a);
    let mut s = stats::compute(&a, &shown);
    let text = |s: &[stats::ConvStats]| {
        let mut out = Vec::new();
        stats::write_text(s, &mut out).expect("write");
        String::from_utf8(out).expect("utf-8")
    };
    s[0].ce_marked = 3;
    s[0].cnps.insert(0x14, 1);
    s[0].cnps.insert(0x11, 2);
    let t = text(&s);
    assert!(t.contains(
        "\n  congestion: 3 packets marked CE (ECN), 3 CNPs: 2 to QP 0x11, 1 to QP 0x14\n"
    ));
    s[0].ce_marked = 0;
    s[0].cnps.remove(&0x14);
    assert!(text(&s).contains("\n  congestion: no packet marked CE (ECN), 2 CNPs to QP 0x11\n"));
    s[0].ce_marked = 1;
    s[0].cnps.clear();
    assert!(text(&s).contains("\n  congestion: 1 packet marked CE (ECN), no CNPs\n"));
}

#[test]
fn follow_and_frame_ranges() {
    let a = go_back_n();
    let f = |follow, from, to, max| Filter { follow, from, to, max, bad_only: false };
    let frames = |flt: Filter| flt.select(&a).iter().map(|i| i.frame()).collect::<Vec<_>>();
    assert_eq!(frames(f(Some(0x11), None, None, None)), [1, 2, 3, 4, 5, 6]);
    assert_eq!(frames(f(Some(0x22), None, None, None)), [1, 2, 3, 4, 5, 6]);
    assert!(frames(f(Some(0x33), None, None, None)).is_empty());
    assert_eq!(frames(f(None, Some(2), Some(4), None)), [2, 3, 4]);
    assert_eq!(frames(f(None, Some(2), None, Some(2))), [2, 3]);
}

#[test]
fn qpn_parsing_and_conversations() {
    assert_eq!(parse_qpn("0x2a"), Ok(0x2a));
    assert_eq!(parse_qpn("0X2A"), Ok(0x2a));
    assert_eq!(parse_qpn("42"), Ok(42));
    assert_eq!(parse_qpn("0xffffff"), Ok(0xff_ffff));
    assert!(parse_qpn("0x1000000").is_err());
    assert!(parse_qpn("qp").is_err());
    assert!(parse_qpn("").is_err());
    let x = Endpoint { ip: A, qpn: Some(1) };
    let y = Endpoint { ip: B, qpn: None };
    assert_eq!(Conversation::of(x, y), Conversation::of(y, x));
    assert!(Conversation::of(x, y).has_qpn(1));
    assert!(!Conversation::of(x, y).has_qpn(0));
    assert_eq!(x.to_string(), "10.0.0.1 QP 0x1");
    assert_eq!(y.to_string(), "10.0.0.2 QP ?");
}

#[test]
fn rtt_summary() {
    assert_eq!(Rtt::of(&[]), None);
    assert_eq!(Rtt::of(&[5.0]), Some(Rtt { samples: 1, min: 5.0, median: 5.0, max: 5.0 }));
    assert_eq!(
        Rtt::of(&[9.0, 1.0, 4.0, 2.0]),
        Some(Rtt { samples: 4, min: 1.0, median: 3.0, max: 9.0 })
    );
}

#[test]
fn svg_text_is_escaped() {
    assert_eq!(svg::escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
    assert_eq!(svg::escape("x\u{1}y"), "x y");
    let mut d = Diagram::default();
    d.lanes.push(Endpoint { ip: A, qpn: None });
    d.title = "<script>&".into();
    d.rows.push(Row::Note { frame: 1, time: 0.0, text: "bad <x> & y".into() });
    let doc = svg::render(&d);
    assert!(doc.contains("&lt;script&gt;&amp;"));
    assert!(doc.contains("bad &lt;x&gt; &amp; y"));
    assert!(!doc.contains("<script>"));
}
