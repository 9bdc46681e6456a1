//! The numbers rsockets runs on: limits, defaults and the layout of the
//! connection data. Every value is rdma-core's (`librdmacm/rsocket.c`; the
//! names are given in parentheses) — a peer running rdma-core relies on
//! the ones that reach the wire.

/// The first transfer of one `rsend` call; each following one doubles, up
/// to [`MAX_TRANSFER`] (`RS_OLAP_START_SIZE`: `rsend` overlaps its writes).
pub const OLAP_START_SIZE: u32 = 2048;
/// The largest data message one `rsend` call writes (`RS_MAX_TRANSFER`).
pub const MAX_TRANSFER: u32 = 65536;
/// A sender needs this much free send buffer before it writes, and a
/// datagram (its header included) is at most this long (`RS_SNDLOWAT`).
pub const SNDLOWAT: u32 = 2048;
/// Queue sizes are clamped to `QP_MIN_SIZE..=QP_MAX_SIZE`
/// (`RS_QP_MIN_SIZE`, `RS_QP_MAX_SIZE`).
pub const QP_MIN_SIZE: u16 = 16;
pub const QP_MAX_SIZE: u16 = 0xFFFE;
/// Send queue entries kept for control messages (credit and SGL updates,
/// shutdown, keepalive): at most this many are in flight (`RS_QP_CTRL_SIZE`).
pub const QP_CTRL_SIZE: u32 = 4;
/// Address and route resolution are retried this many times (`RS_CONN_RETRIES`).
pub const CONN_RETRIES: u32 = 6;
/// Entries in a target SGL: the receive buffer is offered in two halves
/// (`RS_SGL_SIZE`).
pub const SGL_SIZE: u32 = 2;
/// The largest control payload: one [`crate::Sge`] (16 bytes); the send
/// buffer carries [`QP_CTRL_SIZE`] slots of this size after its data part
/// when the inline limit is smaller (`RS_MAX_CTRL_MSG`).
pub const MAX_CTRL_MSG: u32 = 16;
/// The size of a message sent as a SEND instead of an immediate (iWARP
/// only, not modelled here) (`RS_MSG_SIZE`).
pub const MSG_SIZE: u32 = 4;

/// Defaults (`rs_configure`, overridable in rdma-core through files in
/// `/etc/rdma/rsocket/`: `inline_default`, `sqsize_default`, ...).
pub const DEF_INLINE: u16 = 64;
pub const DEF_SQSIZE: u16 = 384;
pub const DEF_RQSIZE: u16 = 384;
/// Receive buffer (`mem_default`): 128 KiB, offered in two 64 KiB halves.
pub const DEF_MEM: u32 = 1 << 17;
/// Send buffer (`wmem_default`): 128 KiB.
pub const DEF_WMEM: u32 = 1 << 17;
/// Entries of the target iomap (`iomap_size`): none.
pub const DEF_IOMAP_SIZE: u16 = 0;
/// Microseconds `rsend`/`rrecv` poll the CQ before they sleep on it.
pub const DEF_POLLING_TIME_US: u32 = 10;
/// Keepalive interval when `/proc/sys/net/ipv4/tcp_keepalive_time` cannot
/// be read (`rs_set_keepalive`), in seconds.
pub const DEF_KEEPALIVE_TIME_S: u32 = 7200;

/// The only version of the connection data (`rs_format_conn_data` writes
/// it, `rs_accept` and `rs_do_connect` refuse any other).
pub const CONN_DATA_VERSION: u8 = 1;
/// Length of `struct rs_conn_data` on the wire.
pub const CONN_DATA_LEN: usize = 40;
/// Connection-data flag: the sender's host is big-endian, so the target
/// SGL and iomap entries the peer writes into it must be big-endian
/// (`RS_CONN_FLAG_NET`).
pub const CONN_FLAG_NET: u8 = 1 << 0;
/// Connection-data flag: `target_iomap_size` is meaningful and the iomap
/// follows the target SGL (`RS_CONN_FLAG_IOMAP`); rdma-core always sets it.
pub const CONN_FLAG_IOMAP: u8 = 1 << 1;
/// What librdmacm puts before the application's private data in a CM REQ
/// for the IP port spaces (`struct cma_hdr`: version, IP version, port,
/// source and destination addresses); the REP carries none. For `AF_IB`
/// the application itself leaves room for its `ib_connect_hdr`, also 36
/// bytes (`rs_conn_data_offset`).
pub const CMA_HDR_LEN: usize = 36;

/// The `wr_id` of rsockets' receive work requests (`rs_recv_wr_id(0)`): bit
/// 63 marks a receive; the send work requests carry their message as
/// `wr_id` ([`crate::Wr::wr_id`]).
pub const RECV_WR_ID: u64 = 1 << 63;
