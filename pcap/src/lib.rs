//! Reading and writing capture files (pcap and pcapng), built on the
//! `pcap-file` crate. This is the file I/O around the codec: `roce-packet`
//! itself reads and writes no files (it only knows a capture's
//! [`LinkType`], which `parse_frame` needs), and does not depend on this crate.
//!
//! [`read_capture`] accepts classic pcap (either byte order, microsecond or
//! nanosecond timestamps) and pcapng (several sections and interfaces,
//! Enhanced, Simple and obsolete Packet Blocks, `if_tsresol` and
//! `if_tsoffset`). It returns every frame with its link type; what is inside
//! a frame is [`roce_packet::frame::parse_frame`]'s business.
//!
//! [`PcapWriter`] writes classic little-endian pcap with nanosecond
//! timestamps (magic `a1b23c4d`), which Wireshark, tcpdump and scapy read.

use core::time::Duration;
use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapParser};
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgParser, RawBlock};
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};

pub use roce_packet::frame::LinkType;

/// One frame of a capture file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedFrame {
    /// Frame number, 1-based, counted over the whole file (as Wireshark does).
    pub number: usize,
    /// Time since the Unix epoch.
    pub timestamp: Duration,
    /// Link type of the interface the frame was captured on.
    pub linktype: LinkType,
    /// The captured bytes (possibly fewer than `orig_len`).
    pub data: Vec<u8>,
    /// Length of the frame on the wire.
    pub orig_len: u32,
}

/// Why a capture file could not be read or written.
#[derive(thiserror::Error, Debug)]
pub enum CaptureError {
    /// The first bytes are neither a pcap nor a pcapng magic number.
    #[error("not a pcap or pcapng file (first bytes {0:02x?})")]
    NotACapture(Vec<u8>),
    /// The file ends in the middle of a header or record.
    #[error("truncated capture file: {what} {record} (at byte offset {offset}) is incomplete")]
    Truncated {
        /// "file header", "record" (pcap) or "block" (pcapng).
        what: &'static str,
        /// 1-based number of the incomplete record or block.
        record: usize,
        /// Byte offset where it starts.
        offset: usize,
    },
    /// A header or record is structurally invalid.
    #[error("malformed capture file: {what} {record} (at byte offset {offset}): {reason}")]
    Malformed {
        /// "file header", "record" (pcap) or "block" (pcapng).
        what: &'static str,
        /// 1-based number of the record or block.
        record: usize,
        /// Byte offset where it starts.
        offset: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A frame cannot be written (e.g. longer than the snapshot length).
    #[error("cannot write frame: {0}")]
    Unwritable(String),
    /// Reading or writing the underlying file failed.
    #[error("capture I/O error: {0}")]
    Io(#[from] std::io::Error),
}

const PCAP_MAGICS: [[u8; 4]; 4] = [
    [0xd4, 0xc3, 0xb2, 0xa1],
    [0x4d, 0x3c, 0xb2, 0xa1],
    [0xa1, 0xb2, 0xc3, 0xd4],
    [0xa1, 0xb2, 0x3c, 0x4d],
];
const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// Parse a whole pcap or pcapng file held in memory.
pub fn read_capture(bytes: &[u8]) -> Result<Vec<CapturedFrame>, CaptureError> {
    match read_capture_partial(bytes) {
        (frames, None) => Ok(frames),
        (_, Some(e)) => Err(e),
    }
}

/// Parse as much of a capture as is there: the frames of every complete
/// record before the first truncated or malformed one, and that error (a
/// recording cut short by Ctrl-C or `head -c` still shows what it holds,
/// as tcpdump and tshark do).
pub fn read_capture_partial(bytes: &[u8]) -> (Vec<CapturedFrame>, Option<CaptureError>) {
    let mut frames = Vec::new();
    let r = if bytes.len() >= 4 && PCAP_MAGICS.iter().any(|m| bytes[..4] == m[..]) {
        read_pcap(bytes, &mut frames)
    } else if bytes.len() >= 4 && bytes[..4] == PCAPNG_MAGIC {
        read_pcapng(bytes, &mut frames)
    } else {
        Err(CaptureError::NotACapture(bytes[..bytes.len().min(4)].to_vec()))
    };
    (frames, r.err())
}

/// Read and parse a pcap or pcapng file.
pub fn read_capture_file(path: &Path) -> Result<Vec<CapturedFrame>, CaptureError> {
    read_capture(&std::fs::read(path)?)
}

/// [`read_capture_partial`] of a file (an I/O error reads no frame).
pub fn read_capture_file_partial(path: &Path) -> (Vec<CapturedFrame>, Option<CaptureError>) {
    match std::fs::read(path) {
        Ok(b) => read_capture_partial(&b),
        Err(e) => (Vec::new(), Some(CaptureError::Io(e))),
    }
}

fn map_err(e: PcapError, what: &'static str, record: usize, offset: usize) -> CaptureError {
    match e {
        PcapError::IncompleteBuffer => CaptureError::Truncated { what, record, offset },
        PcapError::IoError(io) => CaptureError::Io(io),
        other => CaptureError::Malformed { what, record, offset, reason: other.to_string() },
    }
}

fn read_pcap(bytes: &[u8], frames: &mut Vec<CapturedFrame>) -> Result<(), CaptureError> {
    let (mut rem, parser) = PcapParser::new(bytes).map_err(|e| map_err(e, "file header", 0, 0))?;
    let header = parser.header();
    // The top 4 bits may carry FCS information (pcap "LINKTYPE_" field, upper bits).
    let linktype = LinkType::from_u32(u32::from(header.datalink) & 0x0FFF_FFFF);
    let frac_ns: u64 = match header.ts_resolution {
        TsResolution::MicroSecond => 1000,
        TsResolution::NanoSecond => 1,
    };
    while !rem.is_empty() {
        let number = frames.len() + 1;
        let offset = bytes.len() - rem.len();
        let (next, raw) =
            parser.next_raw_packet(rem).map_err(|e| map_err(e, "record", number, offset))?;
        let timestamp = Duration::from_secs(u64::from(raw.ts_sec))
            + Duration::from_nanos(u64::from(raw.ts_frac) * frac_ns);
        frames.push(CapturedFrame {
            number,
            timestamp,
            linktype,
            data: raw.data.into_owned(),
            orig_len: raw.orig_len,
        });
        rem = next;
    }
    Ok(())
}

/// Per-interface state of a pcapng section.
struct Iface {
    linktype: LinkType,
    snaplen: u32,
    /// Timestamp units per second (10^r or 2^r), 0 if unrepresentable.
    units_per_sec: u128,
    offset_secs: i64,
}

fn iface_of(
    idb: &pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock,
) -> Iface {
    let mut units_per_sec: u128 = 1_000_000;
    let mut offset_secs = 0i64;
    for o in &idb.options {
        match o {
            InterfaceDescriptionOption::IfTsResol(r) => {
                let (base2, exp) = (r & 0x80 != 0, u32::from(r & 0x7f));
                units_per_sec = if base2 {
                    1u128.checked_shl(exp).unwrap_or(0)
                } else {
                    10u128.checked_pow(exp).unwrap_or(0)
                };
            }
            InterfaceDescriptionOption::IfTsOffset(s) => offset_secs = *s as i64,
            _ => {}
        }
    }
    Iface {
        linktype: LinkType::from_u32(u32::from(idb.linktype)),
        snaplen: idb.snaplen,
        units_per_sec,
        offset_secs,
    }
}

fn pcapng_ts(units: u64, iface: &Iface) -> Duration {
    let ups = iface.units_per_sec;
    let u = u128::from(units);
    let (secs, nanos) = match (u.checked_div(ups), u.checked_rem(ups)) {
        (Some(s), Some(r)) => (s, r * 1_000_000_000 / ups),
        _ => (0, 0),
    };
    let secs = u64::try_from(secs).unwrap_or(u64::MAX);
    let secs = if iface.offset_secs >= 0 {
        secs.saturating_add(iface.offset_secs as u64)
    } else {
        secs.saturating_sub(iface.offset_secs.unsigned_abs())
    };
    // nanos < 10^9 by construction.
    Duration::new(secs, nanos as u32)
}

fn read_pcapng(bytes: &[u8], frames: &mut Vec<CapturedFrame>) -> Result<(), CaptureError> {
    let (mut rem, mut parser) = PcapNgParser::new(bytes).map_err(|e| map_err(e, "block", 1, 0))?;
    let mut ifaces: Vec<Iface> = Vec::new();
    let mut block_no = 1usize;
    while !rem.is_empty() {
        block_no += 1;
        let offset = bytes.len() - rem.len();
        let err = |e| map_err(e, "block", block_no, offset);
        let (next, raw): (&[u8], RawBlock) = parser.next_raw_block(rem).map_err(err)?;
        rem = next;
        // Only section, interface and packet blocks matter; others are skipped
        // without being parsed (so an odd option in them cannot fail the read).
        let wanted = matches!(raw.type_, 0x0A0D_0D0A | 1 | 2 | 3 | 6);
        if !wanted {
            continue;
        }
        let block = match parser.section().endianness {
            Endianness::Big => Block::try_from_raw_block::<byteorder_slice::BigEndian>(raw),
            Endianness::Little => Block::try_from_raw_block::<byteorder_slice::LittleEndian>(raw),
        }
        .map_err(err)?;
        let mut push = |iface_id: u32, units: Option<u64>, orig_len: u32, data: &[u8]| {
            let Some(iface) = ifaces.get(iface_id as usize) else {
                return Err(CaptureError::Malformed {
                    what: "block",
                    record: block_no,
                    offset,
                    reason: format!("packet refers to undeclared interface {iface_id}"),
                });
            };
            frames.push(CapturedFrame {
                number: frames.len() + 1,
                timestamp: units.map(|u| pcapng_ts(u, iface)).unwrap_or_default(),
                linktype: iface.linktype,
                data: data.to_vec(),
                orig_len,
            });
            Ok(())
        };
        match block {
            Block::SectionHeader(_) => ifaces.clear(),
            Block::InterfaceDescription(idb) => ifaces.push(iface_of(&idb)),
            Block::EnhancedPacket(epb) => {
                let units = u64::try_from(epb.timestamp.as_nanos()).unwrap_or(u64::MAX);
                push(epb.interface_id, Some(units), epb.original_len, &epb.data)?
            }
            Block::Packet(pb) => push(
                u32::from(pb.interface_id),
                Some(pb.timestamp),
                pb.original_len,
                &pb.data[..pb.data.len().min(pb.captured_len as usize)],
            )?,
            Block::SimplePacket(spb) => {
                // Captured length = min(original length, snaplen); the rest is padding.
                let snap = ifaces.first().map(|i| i.snaplen).unwrap_or(0);
                let mut n = spb.original_len as usize;
                if snap != 0 {
                    n = n.min(snap as usize);
                }
                let data: Cow<[u8]> = spb.data;
                let n = n.min(data.len());
                push(0, None, spb.original_len, &data[..n])?
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes a classic pcap file (little-endian, nanosecond timestamps,
/// snapshot length 262144).
pub struct PcapWriter<W: Write> {
    inner: pcap_file::pcap::PcapWriter<W>,
}

/// Snapshot length written by [`PcapWriter`].
pub const WRITER_SNAPLEN: u32 = 262_144;

impl<W: Write> PcapWriter<W> {
    /// Write the file header for frames of `linktype`.
    pub fn new(w: W, linktype: LinkType) -> Result<Self, CaptureError> {
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: WRITER_SNAPLEN,
            datalink: DataLink::from(linktype.to_u32()),
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::Little,
        };
        let inner = pcap_file::pcap::PcapWriter::with_header(w, header).map_err(map_write_err)?;
        Ok(PcapWriter { inner })
    }

    /// Append one frame captured at `ts` (time since the Unix epoch; at most
    /// `u32::MAX` seconds).
    pub fn write_frame(&mut self, ts: Duration, data: &[u8]) -> Result<(), CaptureError> {
        let orig_len = u32::try_from(data.len())
            .map_err(|_| CaptureError::Unwritable(format!("frame of {} bytes", data.len())))?;
        self.inner.write_packet(&PcapPacket::new(ts, orig_len, data)).map_err(map_write_err)?;
        Ok(())
    }

    /// Flush and return the underlying writer.
    pub fn into_inner(self) -> Result<W, CaptureError> {
        let mut w = self.inner.into_writer();
        w.flush()?;
        Ok(w)
    }
}

fn map_write_err(e: PcapError) -> CaptureError {
    match e {
        PcapError::IoError(io) => CaptureError::Io(io),
        other => CaptureError::Unwritable(other.to_string()),
    }
}
