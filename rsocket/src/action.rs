//! What a stream asks the C layer to do.

/// A span of a local buffer: `len` bytes at `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    pub offset: u32,
    pub len: u32,
}

/// The bytes to copy into the send buffer before posting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The application's buffer (the one given to [`crate::Stream::send`])
    /// from this offset on.
    App { offset: usize },
    /// Bytes the stream made (an SGL or iomap entry).
    Bytes(Vec<u8>),
}

/// The local side of a work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// No data: a 0-byte write (credits only, control, keepalive).
    Empty,
    /// `IBV_SEND_INLINE` straight from the application's buffer.
    InlineApp { offset: usize, len: u32 },
    /// `IBV_SEND_INLINE` of bytes the stream made.
    InlineBytes(Vec<u8>),
    /// Copy `source` into the registered send buffer at `segs` (one, or two
    /// when the ring wraps; for an SGL update, its control slot), then post
    /// `segs` as the SGEs.
    Sbuf { segs: Vec<Seg>, source: Source },
}

impl Payload {
    pub fn len(&self) -> u32 {
        match self {
            Payload::Empty => 0,
            Payload::InlineApp { len, .. } => *len,
            Payload::InlineBytes(b) => b.len() as u32,
            Payload::Sbuf { segs, .. } => segs.iter().map(|s| s.len).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Posted with `IBV_SEND_INLINE`.
    pub fn inline(&self) -> bool {
        matches!(self, Payload::InlineApp { .. } | Payload::InlineBytes(_))
    }
}

/// An RDMA WRITE to post (rsockets post nothing else on a stream:
/// `sq_sig_all`, every one completes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wr {
    /// Hand it back in [`crate::Stream::handle_send_completion`]: it is the
    /// message (rdma-core's `rs_send_wr_id`).
    pub wr_id: u64,
    /// `Some`: `IBV_WR_RDMA_WRITE_WITH_IMM` with `imm_data = htobe32(imm)`;
    /// `None`: `IBV_WR_RDMA_WRITE` (direct iomap writes, keepalive).
    pub imm: Option<u32>,
    /// 0 for a 0-byte write (rdma-core leaves it unset).
    pub remote_addr: u64,
    pub rkey: u32,
    pub payload: Payload,
}

/// One thing for the C layer to do or know, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Post this RDMA WRITE.
    Post(Wr),
    /// Post one receive: no SGE, `wr_id` [`crate::consts::RECV_WR_ID`]
    /// (the completion that used the previous one was handled).
    PostRecv,
    /// `len` bytes arrived at this offset of the receive buffer; they are
    /// readable in order ([`crate::Stream::read_spans`]).
    Arrived { offset: u32, len: u32 },
    /// The peer shut down its sending side: end of file after the data
    /// queued (`rrecv` returns 0).
    PeerShutdown,
    /// The stream is disconnected (both ways): the C layer disconnects the
    /// CM id (`rdma_disconnect`) and wakes its pollers (`POLLHUP`).
    Disconnected,
}
