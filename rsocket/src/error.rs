//! What can go wrong, and the errno the C layer answers with.

use core::fmt;

/// Linux errno values the C layer returns (no libc here: the crate is
/// pure Rust; these are the x86-64/aarch64 Linux numbers).
pub mod errno {
    pub const EIO: i32 = 5;
    pub const EAGAIN: i32 = 11;
    pub const EINVAL: i32 = 22;
    pub const ENOTSUP: i32 = 95;
    pub const ECONNRESET: i32 = 104;
    pub const ENOTCONN: i32 = 107;
}

/// An rsocket protocol error or a refused call. Malformed input from the
/// peer never panics: it comes back as one of these, and a stream that
/// met one is in its error state (see [`Error::errno`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The connection private data is shorter than `struct rs_conn_data`.
    ConnDataShort { len: usize },
    /// The connection private data carries a version other than 1.
    ConnDataVersion { version: u8 },
    /// The peer's target SGL has no entries: nowhere to send SGL updates.
    ConnDataNoSgl,
    /// An immediate with an op rsockets never sends (1, 2, 3, 5).
    ReservedOp { op: u8 },
    /// A data (or iomap) message beyond the credits we granted: the peer
    /// sent more messages than our receive queue holds.
    DataBeyondCredits { limit: u16 },
    /// A data message longer than what is left of the receive buffer we
    /// offered (`room` bytes).
    DataBeyondBuffer { len: u32, room: u32 },
    /// A data message whose RDMA WRITE is not as long as the message says.
    DataLengthMismatch { len: u32, byte_len: u32 },
    /// An SGL message whose RDMA WRITE is neither 0 bytes (credits only)
    /// nor one 16-byte SGL entry.
    SglWriteLength { len: u32 },
    /// An SGL update offering memory outside the peer's receive buffer as
    /// its connection data described it.
    SglBeyondBuffer { addr: u64, length: u32 },
    /// An SGL update overwrote an entry we had not used up yet.
    SglInUse { index: u32 },
    /// A credit update granting more messages than the peer's receive
    /// queue (its initial credits) can hold.
    CreditsBeyondQueue { limit: u16, sent: u16 },
    /// The caller passed a target-list image shorter than the list.
    TargetListShort { len: usize },
    /// The peer's target iomap has no entry of this index.
    NoSuchIomap { index: u16 },
    /// No iomap entry the peer published covers this stream offset.
    NoIomapAt { offset: u64 },
    /// One of our work requests completed with an error status.
    CompletionFailed,
    /// Not connected yet.
    NotConnected,
    /// The stream cannot send: shut down for writing, disconnected or in
    /// error.
    ConnReset,
    /// Nothing could be done now; wait for completions and retry.
    WouldBlock,
}

impl Error {
    /// The errno rdma-core's rsockets give in the same situation:
    ///
    /// * bad connection data: `ENOTSUP` (`rs_do_connect` on a REP whose
    ///   version is not 1; on the passive side `rs_accept` rejects the
    ///   REQ and `raccept` never sees it — the C layer should reject too);
    /// * a protocol violation by the peer or a failed completion: `EIO`,
    ///   the value rsocket.c stores in `rs->err` (read back with
    ///   `SO_ERROR`) when it enters its error state. From then on rdma-core
    ///   answers `rsend` with `ECONNRESET` ([`Error::ConnReset`]), `rrecv`
    ///   with the data still queued and then 0 (end of file), and `rpoll`
    ///   with `POLLERR`. rdma-core itself does not check most of these
    ///   (it trusts its peer); we do, and fail the same way a broken
    ///   connection fails there;
    /// * `ENOTCONN`, `ECONNRESET`, `EAGAIN` for the refused calls, `EINVAL`
    ///   for a caller's mistake.
    pub fn errno(self) -> i32 {
        use errno::*;
        match self {
            Error::ConnDataShort { .. } | Error::ConnDataVersion { .. } | Error::ConnDataNoSgl => {
                ENOTSUP
            }
            Error::ReservedOp { .. }
            | Error::DataBeyondCredits { .. }
            | Error::DataBeyondBuffer { .. }
            | Error::DataLengthMismatch { .. }
            | Error::SglWriteLength { .. }
            | Error::SglBeyondBuffer { .. }
            | Error::SglInUse { .. }
            | Error::CreditsBeyondQueue { .. }
            | Error::CompletionFailed => EIO,
            Error::TargetListShort { .. } | Error::NoSuchIomap { .. } | Error::NoIomapAt { .. } => {
                EINVAL
            }
            Error::NotConnected => ENOTCONN,
            Error::ConnReset => ECONNRESET,
            Error::WouldBlock => EAGAIN,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::ConnDataShort { len } => {
                write!(f, "rsocket connection data too short: {len} bytes, need 40")
            }
            Error::ConnDataVersion { version } => {
                write!(f, "rsocket connection data version {version}, only 1 is known")
            }
            Error::ConnDataNoSgl => write!(f, "rsocket connection data: target SGL of 0 entries"),
            Error::ReservedOp { op } => write!(f, "rsocket message with reserved op {op}"),
            Error::DataBeyondCredits { limit } => {
                write!(f, "rsocket data beyond the credits granted (up to message {limit})")
            }
            Error::DataBeyondBuffer { len, room } => {
                write!(f, "rsocket data message of {len} bytes, only {room} offered")
            }
            Error::DataLengthMismatch { len, byte_len } => {
                write!(f, "rsocket data message of {len} bytes in a {byte_len}-byte write")
            }
            Error::SglWriteLength { len } => {
                write!(f, "rsocket SGL message with a {len}-byte write (0 or 16 expected)")
            }
            Error::SglBeyondBuffer { addr, length } => write!(
                f,
                "rsocket SGL update {length} bytes at {addr:#x} outside the peer's receive buffer"
            ),
            Error::SglInUse { index } => {
                write!(f, "rsocket SGL update overwrote entry {index} still in use")
            }
            Error::CreditsBeyondQueue { limit, sent } => write!(
                f,
                "rsocket credit update to message {limit} with {sent} sent: more than the queue"
            ),
            Error::TargetListShort { len } => write!(f, "target list image of only {len} bytes"),
            Error::NoSuchIomap { index } => write!(f, "the peer has no iomap entry {index}"),
            Error::NoIomapAt { offset } => write!(f, "no iomapped buffer at offset {offset:#x}"),
            Error::CompletionFailed => write!(f, "rsocket work request failed"),
            Error::NotConnected => write!(f, "rsocket not connected"),
            Error::ConnReset => write!(f, "rsocket cannot send: shut down or disconnected"),
            Error::WouldBlock => write!(f, "rsocket would block"),
        }
    }
}

impl std::error::Error for Error {}
