//! The codec's error type. Every malformed input maps to one of these;
//! nothing in this crate panics on received bytes.

/// Why a buffer is not a well-formed header or packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer ends before the named header or field does.
    #[error("truncated: {what} needs {need} bytes, {have} available")]
    Truncated { what: &'static str, need: usize, have: usize },
    /// The BTH opcode is reserved or not defined for its transport.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// Payload plus pad is not a multiple of 4 bytes.
    #[error("payload plus pad ({0} bytes) is not a multiple of 4")]
    Misaligned(usize),
    /// PadCnt is larger than the bytes after the headers.
    #[error("pad count {pad} exceeds the {avail} bytes after the headers")]
    PadExceedsPayload { pad: u8, avail: usize },
    /// An opcode that carries no payload has bytes after its headers.
    #[error("{opcode} carries no payload but {len} bytes follow its headers")]
    UnexpectedPayload { opcode: &'static str, len: usize },
    /// A buffer given to `emit` is too small.
    #[error("emit buffer too small: need {need}, have {have}")]
    BufferTooSmall { need: usize, have: usize },
    /// A field value cannot be represented (e.g. PadCnt > 3).
    #[error("invalid field value: {0}")]
    InvalidField(&'static str),
    /// Not an IPv4/IPv6 UDP datagram to the RoCEv2 port.
    #[error("not RoCEv2: {0}")]
    NotRoce(&'static str),
}

pub type Result<T> = core::result::Result<T, Error>;

pub(crate) fn need(what: &'static str, need: usize, have: usize) -> Result<()> {
    if have < need {
        Err(Error::Truncated { what, need, have })
    } else {
        Ok(())
    }
}
