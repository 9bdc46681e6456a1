//! Bytes of real rsockets traffic: rdma-core 44's `rstream -S 1000 -C 20`
//! between two Debian bookworm guests on kernel rxe 6.1 (x86-64, so
//! little-endian hosts), captured on the lab's bridge
//! (`../shared/rxelab`: `lab.sh bg b rstream -b 192.168.77.3 ...`, then
//! `lab.sh shell a rstream -s 192.168.77.3 ...`; 2026-11-29). What the
//! crate was written from (reading rsocket.c) checked against what
//! rdma-core's rsockets put on the wire.

use roce_rsocket::consts::{CONN_FLAG_IOMAP, CONN_FLAG_NET};
use roce_rsocket::*;

/// The server's REP private data (frame 4): its connection data at
/// offset 0.
const REP_PRIVATE_DATA: [u8; 40] = [
    0x01, 0x02, 0x01, 0x80, 0x00, 0x00, 0x00, 0x00, // version 1, IOMAP, credits 384, iomap 0
    0x00, 0x00, 0x7f, 0xe4, 0x30, 0x00, 0x30, 0x00, // target SGL address
    0x00, 0x00, 0x03, 0x13, 0x00, 0x00, 0x00, 0x02, // its rkey, 2 entries
    0x00, 0x00, 0x7f, 0xe4, 0x36, 0x3e, 0x20, 0x00, // receive buffer address
    0x00, 0x00, 0x04, 0xfe, 0x00, 0x08, 0x00, 0x00, // its rkey, the first half's length
];

#[test]
fn rdma_cores_connection_data_is_big_endian_version_1_with_iomap() {
    let c = ConnData::parse(&REP_PRIVATE_DATA).expect("rdma-core's connection data");
    assert_eq!((c.version, c.flags, c.credits), (1, CONN_FLAG_IOMAP, 384));
    assert_eq!(c.flags & CONN_FLAG_NET, 0, "a little-endian host does not set NET");
    assert_eq!(c.target_sgl, Sge { addr: 0x7fe4_3000_3000, key: 0x313, length: 2 });
    assert_eq!(c.data_buf, Sge { addr: 0x7fe4_363e_2000, key: 0x4fe, length: 0x8_0000 });
    assert_eq!(c.entry_order(), ByteOrder::Little, "entries in the reader's (little) order");
    // and ours is byte for byte the same
    assert_eq!(c.emit(), REP_PRIVATE_DATA);
    // the client's, in its REQ after librdmacm's 36-byte IP header (frame 3)
    let req = ConnData::parse(&REQ_CONN_DATA).expect("the client's connection data");
    assert_eq!(req.target_sgl, Sge { addr: 0x7f6d_a800_3000, key: 0x31e, length: 2 });
    assert_eq!(req.data_buf, Sge { addr: 0x7f6d_ac8a_3000, key: 0x406, length: 0x8_0000 });
}

/// The client's connection data (frame 3, the REQ's private data after
/// librdmacm's IP header).
const REQ_CONN_DATA: [u8; 40] = [
    0x01, 0x02, 0x01, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7f, 0x6d, 0xa8, 0x00, 0x30, 0x00,
    0x00, 0x00, 0x03, 0x1e, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x7f, 0x6d, 0xac, 0x8a, 0x30, 0x00,
    0x00, 0x00, 0x04, 0x06, 0x00, 0x08, 0x00, 0x00,
];

/// Frame 6: the client's first write to the server. RDMA WRITE with
/// immediate 0x80000180 to the server's target SGL + 16 (entry 1) with
/// its rkey 0x313, 16 bytes: the client's second receive-buffer half,
/// in the server's (little-endian) order.
#[test]
fn rdma_cores_first_sgl_update_is_entry_1_in_the_readers_order() {
    let imm = 0x8000_0180;
    assert_eq!(Msg::decode(imm), Ok(Msg::Sgl { limit: 384, raw: 384 }));
    let payload = [
        0x00, 0x30, 0x92, 0xac, 0x6d, 0x7f, 0x00, 0x00, 0x06, 0x04, 0x00, 0x00, 0x00, 0x00, 0x08,
        0x00,
    ];
    let e = Sge::parse(&payload, ByteOrder::Little).expect("16 bytes");
    // the client's receive buffer (its REQ, and the server's writes in
    // frames 12 on) starts at 0x7f6dac8a3000 with rkey 0x406: the second
    // half is 512 KiB on
    assert_eq!(e, Sge { addr: 0x7f6d_ac8a_3000 + 0x8_0000, key: 0x406, length: 0x8_0000 });
    assert_eq!(e.emit(ByteOrder::Little), payload);
}

/// Frames 7 on: data writes into the receive buffer, the immediate the
/// data message with the length (rstream's 16-byte start message, then
/// 1000-byte transfers).
#[test]
fn rdma_cores_data_messages_carry_the_length() {
    assert_eq!(Msg::decode(0x0000_0010), Ok(Msg::Data { len: 16 }));
    assert_eq!(Msg::decode(0x0000_03e8), Ok(Msg::Data { len: 1000 }));
    assert_eq!(Msg::Data { len: 1000 }.encode(), 0x3e8);
    assert_eq!(explain_imm(0x3e8, 1000), "rsocket data, 1000 bytes");
}
