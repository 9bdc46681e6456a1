//! `--ladder`: a ladder (sequence) diagram of a capture, one lane per QP
//! endpoint and one arrow per packet, as fixed-width text. The same
//! [`Diagram`] is drawn as SVG by [`crate::svg`].

use crate::analysis::{Analysis, Endpoint, Item};
use crate::explain::Retx;
use crate::human::ms_text;
use crate::record::{nak_name, rnr_timer_ms, AethKind, Ecn, Record};
use roce_packet::opcode::OpKind;
use std::io::{self, Write};

/// How an arrow is highlighted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A request (SEND, WRITE, READ request, atomic) sent for the first time.
    Request,
    /// A positive response: ACK, READ response, atomic ACK.
    Response,
    /// A request PSN sent again.
    Retx,
    /// A NAK (sequence error, invalid request, access or operational error).
    Nak,
    /// An RNR NAK.
    Rnr,
    /// UD, CNP and other unconnected packets.
    Other,
    /// A bad ICRC or a malformed packet.
    Bad,
}

impl Class {
    /// The CSS class name used in the SVG.
    pub fn css(self) -> &'static str {
        match self {
            Class::Request => "req",
            Class::Response => "resp",
            Class::Retx => "retx",
            Class::Nak => "nak",
            Class::Rnr => "rnr",
            Class::Other => "other",
            Class::Bad => "bad",
        }
    }

    fn ansi(self) -> Option<&'static str> {
        match self {
            Class::Retx => Some("\x1b[33m"),
            Class::Nak => Some("\x1b[1;31m"),
            Class::Rnr => Some("\x1b[35m"),
            Class::Bad => Some("\x1b[1;31m"),
            Class::Response => Some("\x1b[32m"),
            Class::Request | Class::Other => None,
        }
    }
}

/// One packet drawn as an arrow between two lanes.
#[derive(Clone, Debug)]
pub struct Arrow {
    /// Frame number.
    pub frame: u64,
    /// Seconds since the first frame of the capture.
    pub time: f64,
    /// Lane the packet leaves.
    pub from: usize,
    /// Lane the packet reaches.
    pub to: usize,
    /// `SEND_ONLY psn=0x2000 len=64`, `RNR_NAK 40.96ms psn=0x2000`, ...
    pub label: String,
    /// Highlight.
    pub class: Class,
    /// Bracketed marks: `[RETX ...]`, `[NAK ...]`, `[RNR NAK ...]`, ...
    pub marks: Vec<String>,
    /// The `--explain` lines.
    pub explain: Vec<String>,
}

/// One row of the diagram, top to bottom.
#[derive(Clone, Debug)]
pub enum Row {
    /// A packet.
    Arrow(Arrow),
    /// A pause longer than the threshold between two shown packets.
    Gap {
        /// Its length in milliseconds.
        ms: f64,
        /// `RNR wait` or `timeout?` when the next packet says why.
        why: Option<&'static str>,
    },
    /// Something that is not a packet between two endpoints (no BTH,
    /// broken lengths).
    Note {
        /// Frame number.
        frame: u64,
        /// Seconds since the first frame.
        time: f64,
        /// What it is.
        text: String,
    },
}

/// A requester lane waiting after an RNR NAK: from the NAK's row to the
/// retry's row (or the end of the diagram).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Wait {
    /// The requester's lane.
    pub lane: usize,
    /// Row of the RNR NAK.
    pub from_row: usize,
    /// Row of the retry; `None` when the diagram ends first.
    pub to_row: Option<usize>,
    /// The wait the NAK asked for, in milliseconds.
    pub asked_ms: f64,
}

/// A ladder diagram: lanes, rows and RNR waits.
#[derive(Clone, Debug, Default)]
pub struct Diagram {
    /// Lanes left to right, in order of first appearance.
    pub lanes: Vec<Endpoint>,
    /// Rows top to bottom.
    pub rows: Vec<Row>,
    /// RNR waits.
    pub waits: Vec<Wait>,
    /// A title (the SVG shows it above the lanes).
    pub title: String,
}

fn short_opcode(name: &str) -> &str {
    let s = ["RC_", "UC_", "RD_", "UD_"].iter().find_map(|p| name.strip_prefix(p)).unwrap_or(name);
    s.strip_prefix("RDMA_").unwrap_or(s)
}

/// The arrow label of a packet: opcode, PSN, length and what the AETH says.
pub fn label(r: &Record) -> String {
    let Some(b) = r.bth else { return "(no BTH)".into() };
    if let Some(c) = &r.cm {
        return crate::cm_fmt::label(c);
    }
    let name = r.opcode_name.clone().unwrap_or_default();
    let kind = r.info.map(|i| i.kind);
    let mut s = match (kind, r.aeth.map(|a| a.kind())) {
        (Some(OpKind::Ack), Some(AethKind::Ack { .. })) => "ACK".to_string(),
        (Some(OpKind::Ack), Some(AethKind::RnrNak { timer })) => {
            format!("RNR_NAK {}ms", ms_text(rnr_timer_ms(timer)))
        }
        (Some(OpKind::Ack), Some(AethKind::Nak { code })) => format!("NAK {}", nak_name(code)),
        (Some(OpKind::AtomicAck), _) => "ATOMIC_ACK".to_string(),
        _ => short_opcode(&name).to_string(),
    };
    if r.info.is_some_and(|i| i.transport == roce_packet::opcode::Transport::Cnp) {
        return format!("CNP qp={:#x}", b.destqp);
    }
    s.push_str(&format!(" psn={:#x}", b.psn));
    if let Some(x) = r.reth.filter(|_| kind == Some(OpKind::ReadRequest)) {
        s.push_str(&format!(" dmalen={}", x.dmalen));
    } else if let Some(n) = r.payload_len {
        if r.info.is_some_and(|i| i.has_payload) {
            s.push_str(&format!(" len={n}"));
        }
    }
    if let Some(a) = r.aeth {
        if kind == Some(OpKind::Ack) && matches!(a.kind(), AethKind::Ack { .. }) {
            s.push_str(&format!(" msn={}", a.msn));
        }
    }
    s
}

fn class_and_marks(r: &Record, facts: &crate::explain::Facts) -> (Class, Vec<String>) {
    let mut marks = Vec::new();
    let mut class = if facts.request {
        Class::Request
    } else if facts.response
        || r.info
            .is_some_and(|i| i.is_response() && i.transport != roce_packet::opcode::Transport::Ud)
    {
        Class::Response
    } else {
        Class::Other
    };
    if let Some(a) = r.aeth {
        match a.kind() {
            AethKind::RnrNak { timer } => {
                class = Class::Rnr;
                marks.push(format!("[RNR NAK: wait {} ms]", ms_text(rnr_timer_ms(timer))));
            }
            AethKind::Nak { code } => {
                class = Class::Nak;
                marks.push(format!("[NAK {}]", nak_name(code)));
            }
            _ => {}
        }
    }
    if let Some(x) = facts.retx {
        class = Class::Retx;
        let since = facts.since_prev_ms.map(|m| format!(" +{} ms", ms_text(m))).unwrap_or_default();
        marks.push(match x {
            Retx::RnrRetry { nak_frame } => format!("[RETX after RNR wait, NAK #{nak_frame}]"),
            Retx::AfterNak { nak_frame } => format!("[RETX go-back-N, NAK #{nak_frame}]"),
            Retx::Duplicate => "[RETX duplicate, already ACKed]".into(),
            Retx::Timeout => format!("[RETX timeout?{since}]"),
        });
    }
    if let Some(n) = facts.gap {
        marks.push(format!("[PSN gap: {n} missing]"));
    }
    if r.ecn == Ecn::Ce {
        marks.push("[ECN CE]".into());
    }
    let cnp = r.cnp_problems();
    if !cnp.is_empty() {
        marks.push(format!("[malformed CNP: {}]", cnp.join(", ")));
    }
    if !r.errors.is_empty() {
        class = Class::Bad;
        marks.push(format!("[MALFORMED: {}]", r.errors.join(", ")));
    } else if !r.icrc_ok {
        class = Class::Bad;
        marks.push("[BAD ICRC: dropped]".into());
    }
    (class, marks)
}

impl Diagram {
    /// Lay out the `shown` items of an analysed capture; pauses longer than
    /// `gap_ms` between shown packets get a row of their own.
    pub fn build(a: &Analysis, shown: &[&Item], gap_ms: f64) -> Diagram {
        let mut d = Diagram::default();
        let mut prev_time: Option<f64> = None;
        // Lane waiting after an RNR NAK → index into d.waits.
        let mut open: Vec<(usize, usize)> = Vec::new();
        for it in shown {
            let t = it.time();
            let row = match it {
                Item::Packet { rec, facts, lines } => match a.endpoints(rec) {
                    Some((s, dst)) => {
                        let from = d.lane(s);
                        let to = d.lane(dst);
                        let (class, marks) = class_and_marks(rec, facts);
                        Row::Arrow(Arrow {
                            frame: rec.frame,
                            time: rec.time,
                            from,
                            to,
                            label: label(rec),
                            class,
                            marks,
                            explain: lines.clone(),
                        })
                    }
                    None => Row::Note {
                        frame: rec.frame,
                        time: rec.time,
                        text: format!(
                            "{} -> {}: too short for a BTH and an ICRC (dropped)",
                            rec.src, rec.dst
                        ),
                    },
                },
                Item::Broken { frame, time, why } => Row::Note {
                    frame: *frame,
                    time: *time,
                    text: format!("UDP to the RoCEv2 port, MALFORMED: {why}"),
                },
            };
            if let Some(p) = prev_time {
                let ms = (t - p) * 1000.0;
                if ms > gap_ms {
                    let why = match &row {
                        Row::Arrow(x)
                            if x.marks.iter().any(|m| m.starts_with("[RETX after RNR")) =>
                        {
                            Some("RNR wait")
                        }
                        Row::Arrow(x) if x.marks.iter().any(|m| m.starts_with("[RETX timeout")) => {
                            Some("timeout?")
                        }
                        _ => None,
                    };
                    d.rows.push(Row::Gap { ms, why });
                }
            }
            prev_time = Some(t);
            let idx = d.rows.len();
            if let Row::Arrow(x) = &row {
                // A packet leaving a waiting lane ends its wait.
                if let Some(pos) = open.iter().position(|(l, _)| *l == x.from) {
                    let (_, w) = open.remove(pos);
                    d.waits[w].to_row = Some(idx);
                }
                if x.class == Class::Rnr {
                    if let Some(AethKind::RnrNak { timer }) = match it {
                        Item::Packet { rec, .. } => rec.aeth.map(|a| a.kind()),
                        _ => None,
                    } {
                        if !open.iter().any(|(l, _)| *l == x.to) {
                            open.push((x.to, d.waits.len()));
                            d.waits.push(Wait {
                                lane: x.to,
                                from_row: idx,
                                to_row: None,
                                asked_ms: rnr_timer_ms(timer),
                            });
                        }
                    }
                }
            }
            d.rows.push(row);
        }
        d
    }

    fn lane(&mut self, e: Endpoint) -> usize {
        match self.lanes.iter().position(|l| *l == e) {
            Some(i) => i,
            None => {
                self.lanes.push(e);
                self.lanes.len() - 1
            }
        }
    }

    /// Whether `lane` is waiting after an RNR NAK at row `row` (strictly
    /// between the NAK and the retry).
    pub fn waiting(&self, lane: usize, row: usize) -> bool {
        self.waits
            .iter()
            .any(|w| w.lane == lane && w.from_row < row && w.to_row.is_none_or(|t| row < t))
    }

    /// Number of arrows.
    #[cfg(test)]
    pub fn arrows(&self) -> usize {
        self.rows.iter().filter(|r| matches!(r, Row::Arrow(_))).count()
    }
}

/// Row index standing for the header (no RNR wait marks).
const HEADER: usize = usize::MAX;

/// Width of the time and frame columns.
const PREFIX: usize = 19;

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else if n == 0 {
        String::new()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

fn put(line: &mut [char], at: usize, s: &str) {
    for (i, c) in s.chars().enumerate() {
        if let Some(x) = line.get_mut(at + i) {
            *x = c;
        }
    }
}

fn centered(line: &mut [char], center: usize, s: &str) {
    let n = s.chars().count();
    put(line, center.saturating_sub(n / 2), s);
}

/// Write the text ladder. Colors (ANSI) only when `color`; with `explain`
/// each arrow is followed by its explanation.
pub fn write_text(d: &Diagram, color: bool, explain: bool, out: &mut dyn Write) -> io::Result<()> {
    let n = d.lanes.len();
    if n == 0 {
        writeln!(out, "(no RoCEv2 packets to draw)")?;
        return Ok(());
    }
    let longest = d
        .rows
        .iter()
        .filter_map(|r| match r {
            Row::Arrow(a) => Some(a.label.chars().count()),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let g = (longest + 8).clamp(22, 56);
    let x = |i: usize| PREFIX + g / 2 + i * g;
    let width = PREFIX + n * g;
    let (bold, dim, reset) = if color { ("\x1b[1m", "\x1b[2m", "\x1b[0m") } else { ("", "", "") };

    // Header: address, QP, then the lane heads.
    let mut l1 = vec![' '; width];
    let mut l2 = vec![' '; width];
    put(&mut l1, 0, &format!("{:>10}  {:>5}", "ms", "frame"));
    for (i, e) in d.lanes.iter().enumerate() {
        centered(&mut l1, x(i), &truncate(&e.ip.to_string(), g - 2));
        let q = match e.qpn {
            Some(q) => format!("QP {q:#x}"),
            None => "QP ?".into(),
        };
        centered(&mut l2, x(i), &q);
    }
    let lanes_row = |row: usize, c: char| {
        let mut l = vec![' '; width];
        for i in 0..n {
            l[x(i)] = if row != HEADER && d.waiting(i, row) { '┃' } else { c };
        }
        l
    };
    let trim = |l: Vec<char>| l.into_iter().collect::<String>().trim_end().to_string();
    writeln!(out, "{bold}{}{reset}", trim(l1))?;
    writeln!(out, "{bold}{}{reset}", trim(l2))?;
    writeln!(out, "{}", trim(lanes_row(HEADER, '│')))?;

    for (ri, row) in d.rows.iter().enumerate() {
        match row {
            Row::Arrow(a) => {
                let mut l = lanes_row(ri, '│');
                put(&mut l, 0, &format!("{:>10.3}  {:>5}", a.time * 1000.0, a.frame));
                let (lo, hi) = (a.from.min(a.to), a.from.max(a.to));
                if lo == hi {
                    put(&mut l, x(lo) + 1, &format!("◄─ {}", a.label));
                } else {
                    for c in l.iter_mut().take(x(hi)).skip(x(lo) + 1) {
                        *c = '─';
                    }
                    let room = x(hi) - x(lo) - 6;
                    let text = format!(" {} ", truncate(&a.label, room.saturating_sub(2)));
                    if a.to > a.from {
                        l[x(hi) - 1] = '►';
                        put(&mut l, x(lo) + 3, &text);
                    } else {
                        l[x(lo) + 1] = '◄';
                        put(&mut l, x(lo) + 3, &text);
                    }
                }
                let mut s: String = l.into_iter().collect();
                let s_trim = s.trim_end().len();
                s.truncate(s_trim);
                let marks = a.marks.join(" ");
                let code = if color { a.class.ansi() } else { None };
                let (pre, body) =
                    s.split_at(s.char_indices().nth(PREFIX).map_or(s.len(), |(i, _)| i));
                match code {
                    Some(c) if !marks.is_empty() => {
                        writeln!(out, "{pre}{c}{body}{reset}  {c}{marks}{reset}")?
                    }
                    Some(c) => writeln!(out, "{pre}{c}{body}{reset}")?,
                    None if !marks.is_empty() => writeln!(out, "{pre}{body}  {marks}")?,
                    None => writeln!(out, "{pre}{body}")?,
                }
                if explain {
                    for e in &a.explain {
                        writeln!(out, "{:PREFIX$}{dim}↳ {e}{reset}", "")?;
                    }
                }
            }
            Row::Gap { ms, why } => {
                let l = lanes_row(ri, '┊');
                let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
                writeln!(out, "{}  {dim}… {} ms{why} …{reset}", trim(l), ms_text(*ms))?;
            }
            Row::Note { frame, time, text } => {
                let mut l = lanes_row(ri, '│');
                put(&mut l, 0, &format!("{:>10.3}  {:>5}", time * 1000.0, frame));
                let red = if color { "\x1b[1;31m" } else { "" };
                writeln!(out, "{}  {red}[{text}]{reset}", trim(l))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "ladder_tests.rs"]
mod tests;
