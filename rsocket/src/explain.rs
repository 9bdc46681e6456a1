//! One-line English for what an rsocket puts on the wire, for
//! `roce decode --explain`: the message of an RDMA WRITE WITH IMMEDIATE,
//! a plain RDMA WRITE, and the connection data of a CM REQ or REP.

use crate::consts::{
    CMA_HDR_LEN, CONN_DATA_LEN, CONN_DATA_VERSION, CONN_FLAG_IOMAP, CONN_FLAG_NET,
};
use crate::wire::{ctrl, ByteOrder, ConnData, Msg, Sge, MSG_DATA_MASK, SGE_LEN};

/// `n` bytes as a person says it: "128 KiB", "1 MiB", "1500 bytes".
pub fn size(n: u64) -> String {
    if n >= 1 << 20 && n.trailing_zeros() >= 20 {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.trailing_zeros() >= 10 {
        format!("{} KiB", n >> 10)
    } else if n == 1 {
        "1 byte".to_string()
    } else {
        format!("{n} bytes")
    }
}

/// An RDMA WRITE WITH IMMEDIATE of `byte_len` bytes whose immediate (the
/// ImmDt field, read big-endian) is `imm`.
pub fn explain_imm(imm: u32, byte_len: u32) -> String {
    match Msg::decode(imm) {
        Ok(Msg::Data { len }) if len == byte_len => format!("rsocket data, {}", size(u64::from(len))),
        Ok(Msg::Data { len }) => format!(
            "rsocket data, {} announced in a {}-byte write (malformed)",
            size(u64::from(len)),
            byte_len
        ),
        Ok(Msg::Sgl { limit, .. }) => match byte_len {
            0 => format!("rsocket credit update: the receiver grants messages up to #{limit}"),
            16 => format!(
                "rsocket SGL update: the receiver frees a receive buffer (one 16-byte target SGL entry) and grants messages up to #{limit}"
            ),
            n => format!("rsocket SGL update with a {n}-byte write (malformed; 0 or 16 expected), messages up to #{limit}"),
        },
        Ok(Msg::IomapSgl { index }) => {
            format!("rsocket iomap update: entry {index} of the target iomap written ({byte_len} bytes)")
        }
        Ok(Msg::Ctrl { value }) => format!("rsocket control: {}", ctrl_name(value)),
        Err(_) => format!(
            "rsocket reserved op {} (never sent by rdma-core), data {:#x}, {byte_len}-byte write",
            imm >> 29,
            imm & MSG_DATA_MASK
        ),
    }
}

fn ctrl_name(value: u32) -> String {
    match value {
        ctrl::DISCONNECT => "disconnect (the sender neither sends nor receives any more)".into(),
        ctrl::SHUTDOWN => "shutdown (the sender sends no more data)".into(),
        ctrl::KEEPALIVE => "keepalive".into(),
        v => format!("unknown value {v}"),
    }
}

/// A plain RDMA WRITE (no immediate) on an rsocket connection: a keepalive
/// when empty, else a direct write into an iomapped buffer (`riowrite`) or
/// the first part of an iWARP-style message.
pub fn explain_write(byte_len: u32) -> String {
    if byte_len == 0 {
        "rsocket keepalive (0-byte RDMA WRITE without immediate)".to_string()
    } else {
        format!("rsocket direct write into an iomapped buffer, {}", size(u64::from(byte_len)))
    }
}

/// A target SGL entry as written by an SGL update.
pub fn explain_sgl_entry(bytes: &[u8], order: ByteOrder) -> String {
    match Sge::parse(bytes, order) {
        Some(s) => format!(
            "rsocket SGL entry: receive buffer {} at {:#x}, rkey {:#x}",
            size(u64::from(s.length)),
            s.addr,
            s.key
        ),
        None => format!("rsocket SGL entry truncated ({} of {SGE_LEN} bytes)", bytes.len()),
    }
}

/// `struct rs_conn_data` at the start of `pd`.
pub fn explain_conn_data(pd: &[u8]) -> String {
    let c = match ConnData::parse_any(pd) {
        Ok(c) => c,
        Err(_) => {
            return format!(
                "not rsocket connection data ({} bytes, {CONN_DATA_LEN} needed)",
                pd.len()
            )
        }
    };
    if c.version != CONN_DATA_VERSION {
        return format!(
            "rsocket connection data: version {} (unknown; rdma-core refuses it)",
            c.version
        );
    }
    let order = if c.flags & CONN_FLAG_NET != 0 { "big" } else { "little" };
    let iomap = if c.flags & CONN_FLAG_IOMAP != 0 {
        format!(", iomap {} entries", c.iomap_entries())
    } else {
        String::new()
    };
    format!(
        "rsocket connection data: version 1, credits {}, receive buffer {} at {:#x}, rkey {:#x} (first {} offered), target SGL {} entries at {:#x}, rkey {:#x}{iomap}, {order}-endian entries",
        c.credits,
        size(2 * u64::from(c.data_buf.length)),
        c.data_buf.addr,
        c.data_buf.key,
        size(u64::from(c.data_buf.length)),
        c.target_sgl.length,
        c.target_sgl.addr,
        c.target_sgl.key,
    )
}

/// A CM REQ's private data on an IP port space: librdmacm's 36-byte header,
/// then the connection data.
pub fn explain_req_private_data(pd: &[u8]) -> String {
    match pd.get(CMA_HDR_LEN..) {
        Some(rest) => explain_conn_data(rest),
        None => format!("not rsocket connection data ({} bytes of private data)", pd.len()),
    }
}

/// A CM REP's private data: the connection data at offset 0.
pub fn explain_rep_private_data(pd: &[u8]) -> String {
    explain_conn_data(pd)
}
