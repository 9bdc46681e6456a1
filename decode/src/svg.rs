//! `--svg`: the ladder diagram as a hand-written SVG document for a browser.
//!
//! Rows have a fixed height (time runs down but is not to scale: long
//! pauses get a break row that says how long they were), lanes are
//! vertical lines under a header box, each packet is a slightly slanted
//! arrow with its label above and its marks below, and RNR waits are
//! shaded bars on the waiting requester's lane.

use crate::analysis::Endpoint;
use crate::human::ms_text;
use crate::ladder::{Arrow, Class, Diagram, Row};
use core::fmt::Write;

const LEFT: f64 = 120.0;
const TOP: f64 = 118.0;
const ROW: f64 = 34.0;
const MARK_ROW: f64 = 14.0;
const GAP_ROW: f64 = 30.0;
const SLANT: f64 = 10.0;
const CHAR_W: f64 = 7.3;
/// Right edge of the time column and left edge of the frame column.
const AXIS_T: f64 = 66.0;
const AXIS_F: f64 = 72.0;

/// Escape text for SVG character data and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

fn color(c: Class) -> &'static str {
    match c {
        Class::Request => "#1f3b73",
        Class::Response => "#2e7d32",
        Class::Retx => "#e65100",
        Class::Nak => "#d50000",
        Class::Rnr => "#ad1457",
        Class::Other => "#555555",
        Class::Bad => "#b71c1c",
    }
}

const CLASSES: [Class; 7] = [
    Class::Request,
    Class::Response,
    Class::Retx,
    Class::Nak,
    Class::Rnr,
    Class::Other,
    Class::Bad,
];

fn qp_text(e: &Endpoint) -> String {
    match e.qpn {
        Some(q) => format!("QP {q:#x}"),
        None => "QP ? (not seen)".into(),
    }
}

/// Where things go: lane spacing, every row's y and the document's size.
struct Layout {
    lane_gap: f64,
    width: f64,
    /// The y of each row of the diagram.
    ys: Vec<f64>,
    /// Where the lanes end.
    bottom: f64,
    legend_y: f64,
    height: f64,
}

impl Layout {
    fn new(d: &Diagram) -> Layout {
        let n = d.lanes.len().max(1);
        let longest = d
            .rows
            .iter()
            .map(|r| match r {
                Row::Arrow(a) => a.label.chars().count().max(a.marks.join(" ").chars().count()),
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        let lane_gap = (longest as f64 * CHAR_W + 70.0).max(280.0);
        let width = (LEFT + n as f64 * lane_gap + 20.0).max(760.0);

        // Row positions.
        let mut ys = Vec::with_capacity(d.rows.len());
        let mut y = TOP + 20.0;
        for r in &d.rows {
            ys.push(y);
            y += match r {
                Row::Arrow(a) if !a.marks.is_empty() => ROW + MARK_ROW,
                Row::Arrow(_) | Row::Note { .. } => ROW,
                Row::Gap { .. } => GAP_ROW,
            };
        }
        let bottom = y + 10.0;
        let legend_y = bottom + 20.0;
        let height = legend_y + 90.0;
        Layout { lane_gap, width, ys, bottom, legend_y, height }
    }

    /// The x of lane `i`.
    fn lane_x(&self, i: usize) -> f64 {
        LEFT + self.lane_gap / 2.0 + i as f64 * self.lane_gap
    }
}

/// Render the diagram as a complete SVG document.
pub fn render(d: &Diagram) -> String {
    let l = Layout::new(d);
    let mut s = String::new();
    write_defs(&mut s, &l);
    write_lanes(&mut s, d, &l);
    write_waits(&mut s, d, &l);
    for (ri, r) in d.rows.iter().enumerate() {
        write_row(&mut s, d, &l, r, l.ys[ri]);
    }
    write_legend(&mut s, l.legend_y);
    s
}

/// The XML header, the `<svg>` element, the style sheet, the arrow heads
/// and the white background.
fn write_defs(s: &mut String, l: &Layout) {
    let (width, height) = (l.width, l.height);
    let _ = writeln!(
        s,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"#
    );
    s.push_str("<title>RoCEv2 ladder diagram (roce decode --svg)</title>\n<defs>\n<style>\n");
    s.push_str(
        "text { fill: #222; }\n.lbl { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 12px; }\n\
         .mark { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 11px; font-weight: bold; }\n\
         .axis { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 11px; fill: #555; }\n\
         .lane { stroke: #9e9e9e; stroke-width: 1.5; }\n\
         .gap text { fill: #666; font-style: italic; font-size: 12px; }\n\
         .wait { fill: #f8bbd0; stroke: #ad1457; stroke-width: 0.8; stroke-dasharray: 3 2; }\n\
         .head rect { fill: #eceff1; stroke: #607d8b; }\n.head text { font-size: 13px; }\n",
    );
    for c in CLASSES {
        let dash = if c == Class::Bad { " stroke-dasharray: 5 3;" } else { "" };
        let _ = writeln!(
            s,
            ".{0} line {{ stroke: {1}; stroke-width: {2};{dash} }}\n.{0} .lbl, .{0} .mark {{ fill: {1}; }}",
            c.css(),
            color(c),
            if matches!(c, Class::Retx | Class::Nak | Class::Rnr | Class::Bad) { 2.2 } else { 1.4 }
        );
    }
    s.push_str("</style>\n");
    for c in CLASSES {
        let _ = writeln!(
            s,
            r#"<marker id="head-{0}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{1}"/></marker>"#,
            c.css(),
            color(c)
        );
    }
    s.push_str("</defs>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
}

/// The axis headings, the capture's title, and each lane: its header box
/// (IP address, QP) and its vertical line.
fn write_lanes(s: &mut String, d: &Diagram, l: &Layout) {
    let bottom = l.bottom;
    let _ = writeln!(
        s,
        r#"<text x="{AXIS_T}" y="{:.0}" class="axis" text-anchor="end">ms</text><text x="{AXIS_F}" y="{:.0}" class="axis">frame</text>"#,
        TOP - 16.0,
        TOP - 16.0
    );
    let _ = writeln!(
        s,
        r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{bottom:.1}" stroke="#cfd8dc"/>"##,
        LEFT - 8.0,
        TOP - 8.0,
        LEFT - 8.0
    );
    if !d.title.is_empty() {
        let _ = writeln!(
            s,
            r#"<text x="12" y="30" font-size="14" font-weight="bold">{}</text>"#,
            escape(&d.title)
        );
    }
    for (i, e) in d.lanes.iter().enumerate() {
        let x = l.lane_x(i);
        let _ = writeln!(
            s,
            r#"<g class="head"><rect x="{:.1}" y="40" width="170" height="46" rx="6"/><text x="{x:.1}" y="59" text-anchor="middle" font-weight="bold">{}</text><text x="{x:.1}" y="77" text-anchor="middle">{}</text></g>"#,
            x - 85.0,
            escape(&e.ip.to_string()),
            escape(&qp_text(e))
        );
        let _ =
            writeln!(s, r#"<line class="lane" x1="{x:.1}" y1="86" x2="{x:.1}" y2="{bottom:.1}"/>"#);
    }
}

/// RNR waits: shaded bars on the waiting lane, drawn under the arrows.
fn write_waits(s: &mut String, d: &Diagram, l: &Layout) {
    for w in &d.waits {
        let x = l.lane_x(w.lane);
        let y0 = l.ys.get(w.from_row).copied().unwrap_or(TOP) + SLANT;
        let y1 = w.to_row.and_then(|r| l.ys.get(r).copied()).unwrap_or(l.bottom);
        let _ = writeln!(
            s,
            r#"<rect class="wait" x="{:.1}" y="{y0:.1}" width="12" height="{:.1}"><title>RNR wait: the NAK asked for {} ms</title></rect>"#,
            x - 6.0,
            (y1 - y0).max(2.0),
            ms_text(w.asked_ms)
        );
    }
}

/// One row at height `y`: an arrow, a gap or a note.
fn write_row(s: &mut String, d: &Diagram, l: &Layout, r: &Row, y: f64) {
    match r {
        Row::Arrow(a) => write_arrow(s, l, a, y),
        Row::Gap { ms, why } => {
            let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
            let text = format!("… {} ms{why} …", ms_text(*ms));
            let cx = (l.lane_x(0) + l.lane_x(d.lanes.len().saturating_sub(1))) / 2.0;
            let _ = writeln!(
                s,
                r#"<g class="gap"><text x="{AXIS_T}" y="{:.1}" class="axis" text-anchor="end">⋮</text><text x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text></g>"#,
                y + 4.0,
                y + 4.0,
                escape(&text)
            );
        }
        Row::Note { frame, time, text } => {
            let _ = writeln!(
                s,
                r#"<g class="note bad"><text x="{AXIS_T}" y="{:.1}" class="axis" text-anchor="end">{:.3}</text><text x="{AXIS_F}" y="{:.1}" class="axis">#{frame}</text><text class="mark" x="{:.1}" y="{:.1}">{}</text></g>"#,
                y + 4.0,
                time * 1000.0,
                y + 4.0,
                LEFT + 10.0,
                y + 4.0,
                escape(text)
            );
        }
    }
}

/// One packet's arrow, with its time and frame number, label, marks and
/// tooltip.
fn write_arrow(s: &mut String, l: &Layout, a: &Arrow, y: f64) {
    let (x1, x2) = (l.lane_x(a.from), l.lane_x(a.to));
    let _ = writeln!(
        s,
        r#"<text x="{AXIS_T}" y="{:.1}" class="axis" text-anchor="end">{:.3}</text><text x="{AXIS_F}" y="{:.1}" class="axis">#{}</text>"#,
        y + 4.0,
        a.time * 1000.0,
        y + 4.0,
        a.frame
    );
    let _ = write!(s, r#"<g class="arrow {}">"#, a.class.css());
    let mut tip = format!("frame {}: {}", a.frame, a.label);
    for m in &a.marks {
        tip.push_str(&format!(" {m}"));
    }
    for line in &a.explain {
        tip.push_str(&format!("\n{line}"));
    }
    let _ = write!(s, "<title>{}</title>", escape(&tip));
    let mid = (x1 + x2) / 2.0;
    if (x1 - x2).abs() < 1.0 {
        let _ = write!(
            s,
            r#"<line x1="{x1:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" marker-start="url(#head-{})"/>"#,
            x1 + 40.0,
            a.class.css()
        );
    } else {
        let dir = if x2 > x1 { 1.0 } else { -1.0 };
        let _ = write!(
            s,
            r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{:.1}" marker-end="url(#head-{})"/>"#,
            x1 + dir * 2.0,
            x2 - dir * 2.0,
            y + SLANT,
            a.class.css()
        );
    }
    let _ = write!(
        s,
        r#"<text class="lbl" x="{mid:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        y - 3.0,
        escape(&a.label)
    );
    if !a.marks.is_empty() {
        let _ = write!(
            s,
            r#"<text class="mark" x="{mid:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            y + SLANT + 15.0,
            escape(&a.marks.join(" "))
        );
    }
    s.push_str("</g>\n");
}

/// The legend under the diagram, and the closing tags.
fn write_legend(s: &mut String, legend_y: f64) {
    let items: [(Class, &str); 6] = [
        (Class::Request, "request"),
        (Class::Response, "ACK / response"),
        (Class::Retx, "retransmission"),
        (Class::Nak, "NAK"),
        (Class::Rnr, "RNR NAK"),
        (Class::Bad, "bad ICRC / malformed"),
    ];
    let _ = writeln!(s, r#"<g class="legend" font-size="12">"#);
    for (k, (c, name)) in items.iter().enumerate() {
        let lx = 12.0 + (k % 3) as f64 * 230.0;
        let ly = legend_y + (k / 3) as f64 * 20.0;
        let _ = writeln!(
            s,
            r#"<g class="{0}"><line x1="{lx:.1}" y1="{1:.1}" x2="{2:.1}" y2="{1:.1}" marker-end="url(#head-{0})"/><text x="{3:.1}" y="{4:.1}">{5}</text></g>"#,
            c.css(),
            ly,
            lx + 34.0,
            lx + 42.0,
            ly + 4.0,
            name
        );
    }
    let _ = writeln!(
        s,
        r#"<rect class="wait" x="12" y="{:.1}" width="12" height="18"/><text x="32" y="{:.1}">RNR wait on the requester's lane (from the RNR NAK to the retry)</text>"#,
        legend_y + 36.0,
        legend_y + 49.0
    );
    let _ = writeln!(
        s,
        r##"<text x="12" y="{:.1}" fill="#666">Time runs down, one row per packet (not to scale); pauses longer than the threshold get a “… ms …” row.</text>"##,
        legend_y + 74.0
    );
    s.push_str("</g>\n</svg>\n");
}
