//! Reading a capture file and printing its RoCEv2 packets.

use crate::explain::Explainer;
use crate::record::{udp_checksum_ok, Gso, Input, Record};
use crate::{human, DecodeArgs};
use core::fmt;
use roce_packet::frame::{parse_frame, RoceDatagram};
use roce_packet::pcap::{read_capture_file, CapturedFrame};
use std::io::{self, Write};
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
#[derive(Clone, Copy, Debug, Default)]
pub struct Style {
    /// JSON lines instead of text.
    pub json: bool,
    /// Plain-English explanation after each text line.
    pub explain: bool,
    /// Only bad packets.
    pub bad_only: bool,
}

/// Prints records and keeps the counts and the explainer's state.
pub struct Printer {
    style: Style,
    explainer: Explainer,
    /// Running counts.
    pub summary: Summary,
}

impl Printer {
    /// A printer with empty state.
    pub fn new(style: Style) -> Printer {
        Printer { style, explainer: Explainer::new(), summary: Summary::default() }
    }

    /// Account for and print one record.
    pub fn record(&mut self, r: &Record, out: &mut dyn Write) -> io::Result<()> {
        self.summary.packets += 1;
        let bad = r.is_bad();
        if bad {
            self.summary.bad += 1;
        }
        // The explainer sees every packet so its state stays right even when
        // only the bad ones are printed.
        let lines = if self.style.explain { self.explainer.explain(r) } else { Vec::new() };
        if self.style.bad_only && !bad {
            return Ok(());
        }
        if self.style.json {
            writeln!(out, "{}", r.to_json())?;
        } else {
            writeln!(out, "{}", human::line(r))?;
            for l in lines {
                writeln!(out, "        {l}")?;
            }
        }
        Ok(())
    }

    /// Account for and print a frame sent to the RoCE port whose IP/UDP
    /// lengths are inconsistent (no datagram could be extracted).
    pub fn broken(
        &mut self,
        number: u64,
        time: f64,
        why: &str,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        self.summary.packets += 1;
        self.summary.bad += 1;
        if self.style.json {
            let v = serde_json::json!({"frame": number, "errors": [why]});
            writeln!(out, "{v}")?;
        } else {
            writeln!(out, "{number:>5}  {time:.6}  UDP to the RoCEv2 port  MALFORMED: {why}")?;
            if self.style.explain {
                writeln!(out, "        a receiver drops a datagram whose lengths do not add up")?;
            }
        }
        Ok(())
    }
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Decode all frames; returns the counts.
pub fn decode_frames(
    frames: &[CapturedFrame],
    port: u16,
    style: Style,
    out: &mut dyn Write,
) -> Result<Summary, DecodeError> {
    let mut p = Printer::new(style);
    let t0 = frames.first().map(|f| f.timestamp).unwrap_or_default();
    for f in frames {
        p.summary.frames += 1;
        let number = f.number as u64;
        let time = seconds(f.timestamp.saturating_sub(t0));
        match parse_frame(f.linktype, &f.data, port) {
            Ok(None) => {}
            Ok(Some(dgs)) => {
                for r in frame_records(number, time, &dgs) {
                    p.record(&r, out)?;
                }
            }
            Err(e) => p.broken(number, time, &e.to_string(), out)?,
        }
    }
    Ok(p.summary)
}

/// `roce decode`: read `args.file` and print its RoCEv2 packets to `out`.
pub fn decode_file(args: &DecodeArgs, out: &mut dyn Write) -> Result<Summary, DecodeError> {
    if std::fs::metadata(&args.file).is_ok_and(|m| m.is_file() && m.len() == 0) {
        return Err(DecodeError::Capture(format!(
            "{}: empty file (not a pcap or pcapng capture)",
            args.file.display()
        )));
    }
    let frames = read_capture_file(&args.file)
        .map_err(|e| DecodeError::Capture(format!("{}: {e}", args.file.display())))?;
    let style = Style { json: args.json, explain: args.explain, bad_only: args.bad_only };
    decode_frames(&frames, args.port, style, out)
}
