//! A whole RoCEv2 UDP payload: BTH, extension headers, payload, pad, ICRC.
//!
//! [`RocePacket::new_checked`] validates the structure from the opcode
//! table (every header present, pad and payload consistent); after it, no
//! accessor panics. [`RoceRepr`] holds every header as a value and can
//! re-emit the exact bytes (reserved bits included).

use crate::bth::{self, Bth, BthRepr};
use crate::error::{need, Error, Result};
use crate::ext::*;
use crate::icrc;
use crate::opcode::{ExtHeader, OpInfo, Opcode};
use crate::types::RKey;

/// Pad bytes needed after a payload of `len` bytes.
pub const fn pad_for(len: usize) -> u8 {
    ((4 - (len % 4)) % 4) as u8
}

/// A validated view of a RoCEv2 UDP payload.
#[derive(Clone, Copy, Debug)]
pub struct RocePacket<T> {
    buffer: T,
    info: &'static OpInfo,
}

impl<T: AsRef<[u8]>> RocePacket<T> {
    /// Validate the structure: BTH, a known opcode, every header the opcode
    /// needs, payload+pad a multiple of 4, pad not larger than the bytes
    /// after the headers, no payload where the opcode has none, ICRC room.
    /// The ICRC value itself is not checked here (it needs the IP header).
    pub fn new_checked(buffer: T) -> Result<RocePacket<T>> {
        let b = buffer.as_ref();
        need("BTH+ICRC", bth::LEN + icrc::LEN, b.len())?;
        let v = Bth::new_unchecked(b);
        let op = v.opcode();
        let info = op.info().ok_or(Error::UnknownOpcode(op.0))?;
        let hl = info.header_len();
        need(
            info.headers.iter().last().map(|h| h.name()).unwrap_or("BTH"),
            hl + icrc::LEN,
            b.len(),
        )?;
        let rest = b.len() - hl - icrc::LEN;
        if !rest.is_multiple_of(4) {
            return Err(Error::Misaligned(rest));
        }
        let pad = v.pad_count();
        if pad as usize > rest {
            return Err(Error::PadExceedsPayload { pad, avail: rest });
        }
        if !info.has_payload && rest != 0 {
            return Err(Error::UnexpectedPayload { opcode: info.name, len: rest });
        }
        Ok(RocePacket { buffer, info })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn info(&self) -> &'static OpInfo {
        self.info
    }
    pub fn bth(&self) -> Bth<&[u8]> {
        Bth::new_unchecked(&self.as_bytes()[..bth::LEN])
    }
    pub fn opcode(&self) -> Opcode {
        self.bth().opcode()
    }
    fn ext(&self, h: ExtHeader) -> Option<&[u8]> {
        let off = self.info.headers.offset_of(h)?;
        Some(&self.as_bytes()[off..off + h.len()])
    }
    pub fn reth(&self) -> Option<Reth<&[u8]>> {
        self.ext(ExtHeader::Reth).map(Reth::new_unchecked)
    }
    pub fn aeth(&self) -> Option<Aeth<&[u8]>> {
        self.ext(ExtHeader::Aeth).map(Aeth::new_unchecked)
    }
    pub fn atomic_eth(&self) -> Option<AtomicEth<&[u8]>> {
        self.ext(ExtHeader::AtomicEth).map(AtomicEth::new_unchecked)
    }
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEth<&[u8]>> {
        self.ext(ExtHeader::AtomicAckEth).map(AtomicAckEth::new_unchecked)
    }
    pub fn immdt(&self) -> Option<u32> {
        self.ext(ExtHeader::ImmDt).map(|b| ImmDt::new_unchecked(b).imm())
    }
    pub fn ieth(&self) -> Option<RKey> {
        self.ext(ExtHeader::Ieth).map(|b| Ieth::new_unchecked(b).rkey())
    }
    pub fn deth(&self) -> Option<Deth<&[u8]>> {
        self.ext(ExtHeader::Deth).map(Deth::new_unchecked)
    }
    pub fn rdeth(&self) -> Option<Rdeth<&[u8]>> {
        self.ext(ExtHeader::Rdeth).map(Rdeth::new_unchecked)
    }
    /// The XRCETH as a big-endian word: the reserved byte, then the XRC
    /// SRQ number (its low 24 bits).
    pub fn xrceth(&self) -> Option<u32> {
        self.ext(ExtHeader::Xrceth).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn feth(&self) -> Option<Feth<&[u8]>> {
        self.ext(ExtHeader::Feth).map(Feth::new_unchecked)
    }
    /// The 16 reserved bytes of a CNP.
    pub fn cnp_reserved(&self) -> Option<&[u8]> {
        self.ext(ExtHeader::CnpPad)
    }
    /// Offset of the payload from the start of the BTH.
    pub fn payload_offset(&self) -> usize {
        self.info.header_len()
    }
    /// The payload without pad bytes.
    pub fn payload(&self) -> &[u8] {
        let b = self.as_bytes();
        let end = b.len() - icrc::LEN - self.bth().pad_count() as usize;
        &b[self.payload_offset()..end]
    }
    /// The pad bytes (0..=3).
    pub fn pad(&self) -> &[u8] {
        let b = self.as_bytes();
        let end = b.len() - icrc::LEN;
        &b[end - self.bth().pad_count() as usize..end]
    }
    /// The four ICRC bytes as on the wire.
    pub fn icrc(&self) -> [u8; 4] {
        let b = self.as_bytes();
        let n = b.len();
        [b[n - 4], b[n - 3], b[n - 2], b[n - 1]]
    }
    /// Everything the ICRC covers after the BTH (headers, payload, pad).
    pub fn without_icrc(&self) -> &[u8] {
        let b = self.as_bytes();
        &b[..b.len() - icrc::LEN]
    }
}

/// Every header of a RoCEv2 packet as values, plus the payload length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RoceRepr {
    pub bth: BthRepr,
    pub rdeth: Option<u32>,
    pub deth: Option<DethRepr>,
    /// XRC requests: the XRCETH word (reserved byte, then the XRC SRQ
    /// number at the target in the low 24 bits; kept whole for exact
    /// re-emission).
    pub xrceth: Option<u32>,
    pub feth: Option<u32>,
    pub reth: Option<RethRepr>,
    pub atomic_eth: Option<AtomicEthRepr>,
    pub aeth: Option<AethRepr>,
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    pub immdt: Option<u32>,
    pub ieth: Option<RKey>,
    pub cnp: Option<[u8; 16]>,
    /// Payload bytes, pad excluded.
    pub payload_len: usize,
}

impl RoceRepr {
    /// Parse a validated packet.
    pub fn parse<T: AsRef<[u8]>>(p: &RocePacket<T>) -> RoceRepr {
        RoceRepr {
            bth: BthRepr::parse(&p.bth()),
            rdeth: p.rdeth().map(|v| v.raw()),
            deth: p.deth().map(|v| DethRepr {
                qkey: v.qkey(),
                src_qp: v.src_qp(),
                resv8: v.resv8(),
            }),
            xrceth: p.xrceth(),
            feth: p.feth().map(|v| v.raw()),
            reth: p.reth().map(|v| RethRepr { va: v.va(), rkey: v.rkey(), dma_len: v.dma_len() }),
            atomic_eth: p.atomic_eth().map(|v| AtomicEthRepr {
                va: v.va(),
                rkey: v.rkey(),
                swap_add: v.swap_add(),
                compare: v.compare(),
            }),
            aeth: p.aeth().map(|v| AethRepr { syndrome: v.syndrome(), msn: v.msn() }),
            atomic_ack_eth: p
                .atomic_ack_eth()
                .map(|v| AtomicAckEthRepr { orig_rem_data: v.orig_rem_data() }),
            immdt: p.immdt(),
            ieth: p.ieth(),
            cnp: p.cnp_reserved().map(|b| {
                let mut a = [0u8; 16];
                a.copy_from_slice(b);
                a
            }),
            payload_len: p.payload().len(),
        }
    }

    /// Validate and parse a UDP payload; returns the repr and the payload.
    pub fn parse_bytes(b: &[u8]) -> Result<(RoceRepr, &[u8])> {
        let p = RocePacket::new_checked(b)?;
        let r = RoceRepr::parse(&p);
        let start = p.payload_offset();
        Ok((r, &b[start..start + r.payload_len]))
    }

    /// Table entry for this packet's opcode.
    pub fn info(&self) -> Result<&'static OpInfo> {
        self.bth.opcode.info().ok_or(Error::UnknownOpcode(self.bth.opcode.0))
    }

    /// Bytes needed to emit the packet, ICRC included.
    pub fn buffer_len(&self) -> Result<usize> {
        let info = self.info()?;
        Ok(info.header_len() + self.payload_len + self.bth.pad_count as usize + icrc::LEN)
    }

    /// Write BTH, headers, `payload`, zero pad bytes and a zero ICRC
    /// placeholder into `buf` (which must be exactly `buffer_len` or
    /// longer; returns the number of bytes written). Every header the opcode
    /// needs must be `Some`; `payload.len()` must equal `payload_len`, and
    /// `payload_len + bth.pad_count` must be a multiple of 4. The
    /// ICRC is filled by the framing layer ([`crate::icrc::fill`]) because it
    /// covers the IP and UDP headers.
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize> {
        if payload.len() != self.payload_len {
            return Err(Error::InvalidField("payload length differs from payload_len"));
        }
        let total = self.buffer_len()?;
        if buf.len() < total {
            return Err(Error::BufferTooSmall { need: total, have: buf.len() });
        }
        let p0 = self.emit_headers(buf)?;
        buf[p0..p0 + payload.len()].copy_from_slice(payload);
        buf[p0 + payload.len()..total].fill(0);
        Ok(total)
    }

    /// Check the repr (as [`RoceRepr::emit`] does) and write BTH and the
    /// extension headers at the start of `buf`; returns their length (where
    /// the payload starts).
    pub fn emit_headers(&self, buf: &mut [u8]) -> Result<usize> {
        let info = self.info()?;
        if self.bth.pad_count > 3 {
            return Err(Error::InvalidField("pad_count > 3"));
        }
        if !info.has_payload && self.payload_len + self.bth.pad_count as usize != 0 {
            return Err(Error::UnexpectedPayload { opcode: info.name, len: self.payload_len });
        }
        // Payload plus pad must end on a 4-byte boundary, or the packet we
        // write is one that `RocePacket::new_checked` (ours or the peer's)
        // rejects.
        let padded = self.payload_len + self.bth.pad_count as usize;
        if !padded.is_multiple_of(4) {
            return Err(Error::Misaligned(padded));
        }
        let hlen = info.header_len();
        if buf.len() < hlen {
            return Err(Error::BufferTooSmall { need: hlen, have: buf.len() });
        }
        let buf = &mut buf[..hlen];
        self.bth.emit_bytes(buf)?;
        let hs = info.headers;
        let missing = |h: ExtHeader| Error::InvalidField(h.name());
        for h in hs.iter() {
            let off = hs.offset_of(h).unwrap_or(bth::LEN);
            let dst = &mut buf[off..off + h.len()];
            match h {
                ExtHeader::Rdeth => {
                    dst.copy_from_slice(&self.rdeth.ok_or(missing(h))?.to_be_bytes())
                }
                ExtHeader::Deth => self.deth.ok_or(missing(h))?.emit(dst)?,
                ExtHeader::Xrceth => {
                    dst.copy_from_slice(&self.xrceth.ok_or(missing(h))?.to_be_bytes())
                }
                ExtHeader::Feth => dst.copy_from_slice(&self.feth.ok_or(missing(h))?.to_be_bytes()),
                ExtHeader::Reth => self.reth.ok_or(missing(h))?.emit(dst)?,
                ExtHeader::AtomicEth => self.atomic_eth.ok_or(missing(h))?.emit(dst)?,
                ExtHeader::Aeth => self.aeth.ok_or(missing(h))?.emit(dst)?,
                ExtHeader::AtomicAckEth => self.atomic_ack_eth.ok_or(missing(h))?.emit(dst)?,
                ExtHeader::ImmDt => {
                    dst.copy_from_slice(&self.immdt.ok_or(missing(h))?.to_be_bytes())
                }
                ExtHeader::Ieth => {
                    dst.copy_from_slice(&self.ieth.ok_or(missing(h))?.value().to_be_bytes())
                }
                ExtHeader::CnpPad => dst.copy_from_slice(&self.cnp.unwrap_or([0; 16])),
            }
        }
        Ok(hlen)
    }

    /// Start a packet in a new vector with room for all of it: the headers
    /// are written and the payload goes next (append exactly `payload_len`
    /// bytes, e.g. straight from registered memory, then call
    /// [`RoceRepr::finish_vec`]). Saves the copy of an intermediate payload
    /// buffer.
    pub fn start_vec(&self) -> Result<Vec<u8>> {
        self.start_in(Vec::with_capacity)
    }

    /// [`RoceRepr::start_vec`] in a vector `get(total)` gives (emptied
    /// first; a pool's buffer of exactly the packet's length avoids the
    /// allocation).
    pub fn start_in(&self, get: impl FnOnce(usize) -> Vec<u8>) -> Result<Vec<u8>> {
        let total = self.buffer_len()?;
        let mut h = [0u8; 64];
        let n = self.emit_headers(&mut h)?;
        let mut v = get(total);
        v.clear();
        v.extend_from_slice(&h[..n]);
        Ok(v)
    }

    /// Complete a vector from [`RoceRepr::start_vec`]: check that exactly
    /// `payload_len` bytes were appended, then append the zero pad bytes and
    /// the zero ICRC placeholder.
    pub fn finish_vec(&self, v: &mut Vec<u8>) -> Result<()> {
        let hlen = self.info()?.header_len();
        if v.len() != hlen + self.payload_len {
            return Err(Error::InvalidField("payload length differs from payload_len"));
        }
        v.resize(hlen + self.payload_len + self.bth.pad_count as usize + icrc::LEN, 0);
        Ok(())
    }

    /// Emit into a new vector (pad and ICRC placeholder zeroed).
    pub fn to_vec(&self, payload: &[u8]) -> Result<Vec<u8>> {
        self.to_vec_in(payload, Vec::with_capacity)
    }

    /// [`RoceRepr::to_vec`] in a vector `get(total)` gives (see
    /// [`RoceRepr::start_in`]).
    pub fn to_vec_in(&self, payload: &[u8], get: impl FnOnce(usize) -> Vec<u8>) -> Result<Vec<u8>> {
        // Checked before allocating, so a bogus `payload_len` cannot ask
        // for a huge buffer.
        if payload.len() != self.payload_len {
            return Err(Error::InvalidField("payload length differs from payload_len"));
        }
        let total = self.buffer_len()?;
        let mut v = get(total);
        v.clear();
        v.resize(total, 0);
        self.emit(payload, &mut v)?;
        Ok(v)
    }
}
