//! Reading a capture file and printing its RoCEv2 packets.

use crate::analysis::{Analysis, Filter, Item};
use crate::record::{udp_checksum_ok, Gso, Input, Record};
use crate::{human, ladder, stats, svg};
use core::fmt;
use roce_packet::frame::{parse_frame, LinkType, RoceDatagram};
use roce_pcap::{read_capture_file_partial, CapturedFrame};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Counts printed in the final summary line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Frames in the capture.
    pub frames: usize,
    /// RoCEv2 packets found (a GSO super-packet counts once per segment).
    pub packets: usize,
    /// Packets with a bad ICRC or a structural error.
    pub bad: usize,
    /// Ethernet PAUSE / PFC frames.
    pub pauses: usize,
}

/// Why `roce decode` could not finish.
#[derive(Debug)]
pub enum DecodeError {
    /// The capture file is missing, unreadable, not a capture, or truncated.
    Capture(String),
    /// Writing the output failed.
    Output(io::Error),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Capture(s) => f.write_str(s),
            DecodeError::Output(e) => write!(f, "writing output: {e}"),
        }
    }
}

impl From<io::Error> for DecodeError {
    fn from(e: io::Error) -> Self {
        DecodeError::Output(e)
    }
}

/// Turn the datagrams of one frame into records.
pub fn frame_records(number: u64, time: f64, dgs: &[RoceDatagram]) -> Vec<Record> {
    // For GSO segments the oracle reports the super-packet's UDP length and
    // checksum verdict: rebuild them from the segments.
    let total: usize = dgs.iter().map(|d| d.udp_payload.len()).sum();
    dgs.iter()
        .map(|d| {
            let (udp_len, udp_csum_ok) = if d.gso.is_some() {
                let len = (8 + total) as u16;
                let mut h = d.udp_header;
                h[4..6].copy_from_slice(&len.to_be_bytes());
                let chunks: Vec<&[u8]> = dgs.iter().map(|x| &x.udp_payload[..]).collect();
                let ok =
                    if d.truncated { None } else { udp_checksum_ok(&d.ip_header, &h, &chunks) };
                (len, ok)
            } else {
                let len = u16::from_be_bytes([d.udp_header[4], d.udp_header[5]]);
                let ok = if d.truncated {
                    None
                } else {
                    udp_checksum_ok(&d.ip_header, &d.udp_header, &[&d.udp_payload])
                };
                (len, ok)
            };
            let inp = Input {
                frame: number,
                time,
                ip_header: &d.ip_header,
                udp_header: d.udp_header,
                udp_payload: &d.udp_payload,
                udp_len,
                udp_csum_ok,
                ipv4_csum_ok: d.ipv4_checksum_ok,
                gso: d.gso.map(|g| Gso { segment: g.segment, segments: g.segments, size: g.size }),
                l2_trailer_len: d.l2_trailer_len,
                frame_errors: if d.truncated { vec!["truncated_capture".into()] } else { vec![] },
            };
            Record::decode(&inp)
        })
        .collect()
}

/// How the output looks.
#[derive(Clone, Debug, Default)]
pub struct Style {
    /// JSON lines instead of text.
    pub json: bool,
    /// Plain-English explanation after each text line.
    pub explain: bool,
    /// Which packets are shown.
    pub filter: Filter,
    /// Text ladder diagram instead of packet lines.
    pub ladder: bool,
    /// Write an SVG ladder diagram here.
    pub svg: Option<PathBuf>,
    /// Per-connection summary instead of packets.
    pub stats: bool,
    /// ANSI colors in the ladder.
    pub color: bool,
    /// Ladder: mark pauses longer than this many milliseconds.
    pub gap_ms: f64,
    /// The capture's file name (SVG title).
    pub name: String,
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Decode and analyse every frame.
pub fn analyse_frames(frames: &[CapturedFrame], port: u16) -> Analysis {
    let mut a = Analysis::new();
    let t0 = frames.first().map(|f| f.timestamp).unwrap_or_default();
    for f in frames {
        let number = f.number as u64;
        let time = seconds(f.timestamp.saturating_sub(t0));
        match parse_frame(f.linktype, &f.data, port) {
            Ok(None) => {
                if f.linktype == LinkType::Ethernet {
                    a.pauses.extend(crate::pause::parse(&f.data, number, time));
                }
            }
            Ok(Some(dgs)) => {
                for r in frame_records(number, time, &dgs) {
                    a.packet(r);
                }
            }
            Err(e) => a.broken(number, time, e.to_string()),
        }
    }
    a.finish();
    a
}

/// Print one packet line (or JSON object) and, with `explain`, its explanation.
fn print_item(it: &Item, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    match it {
        Item::Packet { rec, lines, .. } => {
            if style.json {
                writeln!(out, "{}", rec.to_json())?;
            } else {
                writeln!(out, "{}", human::line(rec))?;
                if style.explain {
                    for l in lines {
                        writeln!(out, "        {l}")?;
                    }
                }
            }
        }
        Item::Broken { frame, time, why } => {
            if style.json {
                let v = serde_json::json!({"frame": frame, "errors": [why]});
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{frame:>5}  {time:.6}  UDP to the RoCEv2 port  MALFORMED: {why}")?;
                if style.explain {
                    writeln!(
                        out,
                        "        a receiver drops a datagram whose lengths do not add up"
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// The SVG title: capture name and what is shown.
fn title(style: &Style, shown: &[&Item]) -> String {
    let mut t = style.name.clone();
    if let (Some(a), Some(b)) = (shown.first(), shown.last()) {
        t.push_str(&format!("  frames {}-{}", a.frame(), b.frame()));
    }
    if let Some(q) = style.filter.follow {
        t.push_str(&format!("  (conversation of QP {q:#x})"));
    }
    t
}

/// Decode all frames, print them as `style` says; returns the counts
/// (always of the whole capture, whatever is shown).
pub fn decode_frames(
    frames: &[CapturedFrame],
    port: u16,
    style: &Style,
    out: &mut dyn Write,
) -> Result<Summary, DecodeError> {
    let a = analyse_frames(frames, port);
    let summary = Summary {
        frames: frames.len(),
        packets: a.items.len(),
        bad: a.items.iter().filter(|i| i.is_bad()).count(),
        pauses: a.pauses.len(),
    };
    let shown = style.filter.select(&a);
    if style.stats {
        let s = stats::compute(&a, &shown);
        if style.json {
            stats::write_json(&s, out)?;
        } else {
            stats::write_text(&s, out)?;
            pause_stats(&a.pauses, out)?;
        }
        return Ok(summary);
    }
    if style.ladder || style.svg.is_some() {
        let mut d = ladder::Diagram::build(&a, &shown, style.gap_ms);
        d.title = title(style, &shown);
        if let Some(path) = &style.svg {
            let text = svg::render(&d);
            std::fs::write(path, text).map_err(|e| {
                DecodeError::Capture(format!("{}: cannot write: {e}", path.display()))
            })?;
        }
        if style.ladder {
            ladder::write_text(&d, style.color, style.explain, out)?;
        }
        return Ok(summary);
    }
    // PAUSE frames go between the items, by frame number, when the view
    // is a frame range (not --follow, --bad-only)
    let f = &style.filter;
    let mut pauses = a
        .pauses
        .iter()
        .filter(|_| f.follow.is_none() && !f.bad_only)
        .filter(|p| f.from.is_none_or(|x| p.frame >= x) && f.to.is_none_or(|x| p.frame <= x))
        .peekable();
    for it in shown {
        while let Some(p) = pauses.next_if(|p| p.frame < it.frame()) {
            print_pause(p, style, out)?;
        }
        print_item(it, style, out)?;
    }
    for p in pauses {
        print_pause(p, style, out)?;
    }
    Ok(summary)
}

fn print_pause(p: &crate::pause::Pause, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    if style.json {
        return writeln!(out, "{}", p.to_json());
    }
    writeln!(out, "{}", p.line())?;
    if style.explain {
        writeln!(out, "        {}", p.explain())?;
    }
    Ok(())
}

/// `--stats`: the PAUSE frames, by sender.
fn pause_stats(pauses: &[crate::pause::Pause], out: &mut dyn Write) -> io::Result<()> {
    if pauses.is_empty() {
        return Ok(());
    }
    let mut by: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for p in pauses {
        let e = by.entry(p.line().split_whitespace().nth(2).unwrap_or("").to_string()).or_default();
        e.0 += 1;
        e.1 += usize::from(p.is_resume());
    }
    let resumes: usize = by.values().map(|v| v.1).sum();
    writeln!(out, "\nPAUSE frames (flow control, not RoCE): {} ({resumes} resumes)", pauses.len())?;
    for (mac, (n, r)) in by {
        writeln!(out, "  from {mac}: {n} ({r} resumes)")?;
    }
    Ok(())
}

/// The name a capture is shown under (the SVG title): its file name.
pub fn capture_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// `roce decode`: read the capture at `path` (RoCEv2 on UDP port `port`)
/// and write what `style` asks for to `out`.
pub fn decode_file(
    path: &Path,
    port: u16,
    style: &Style,
    out: &mut dyn Write,
) -> Result<Summary, DecodeError> {
    if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0) {
        return Err(DecodeError::Capture(format!(
            "{}: empty file (not a pcap or pcapng capture)",
            path.display()
        )));
    }
    // A capture cut short (Ctrl-C, `head -c`) is decoded up to its last
    // complete record, then reported (non-zero exit), as tcpdump does.
    let (frames, cut) = read_capture_file_partial(path);
    if let Some(e) = &cut {
        if frames.is_empty() {
            return Err(DecodeError::Capture(format!("{}: {e}", path.display())));
        }
    }
    let summary = decode_frames(&frames, port, style, out)?;
    match cut {
        Some(e) => Err(DecodeError::Capture(format!(
            "{}: {e}; the {} complete records before it were decoded",
            path.display(),
            frames.len()
        ))),
        None => Ok(summary),
    }
}
