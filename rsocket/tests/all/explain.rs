//! `roce decode --explain`'s sentences.

use roce_rsocket::explain::*;
use roce_rsocket::wire::ByteOrder;
use roce_rsocket::*;

#[test]
fn messages() {
    assert_eq!(explain_imm(100, 100), "rsocket data, 100 bytes");
    assert_eq!(explain_imm(65536, 65536), "rsocket data, 64 KiB");
    assert_eq!(explain_imm(1, 1), "rsocket data, 1 byte");
    assert_eq!(
        explain_imm(100, 90),
        "rsocket data, 100 bytes announced in a 90-byte write (malformed)"
    );
    assert_eq!(
        explain_imm(0x8000_0180, 0),
        "rsocket credit update: the receiver grants messages up to #384"
    );
    assert_eq!(
        explain_imm(0x8001_0010, 16),
        "rsocket SGL update: the receiver frees a receive buffer (one 16-byte target SGL entry) and grants messages up to #16"
    );
    assert!(explain_imm(0x8000_0001, 8).contains("malformed"));
    assert_eq!(
        explain_imm(0xC000_0002, 24),
        "rsocket iomap update: entry 2 of the target iomap written (24 bytes)"
    );
    assert_eq!(
        explain_imm(0xE000_0002, 0),
        "rsocket control: shutdown (the sender sends no more data)"
    );
    assert_eq!(
        explain_imm(0xE000_0000, 0),
        "rsocket control: disconnect (the sender neither sends nor receives any more)"
    );
    assert_eq!(explain_imm(0xE000_0009, 0), "rsocket control: unknown value 9");
    assert_eq!(
        explain_imm(0x2000_0005, 5),
        "rsocket reserved op 1 (never sent by rdma-core), data 0x5, 5-byte write"
    );
    assert_eq!(explain_write(0), "rsocket keepalive (0-byte RDMA WRITE without immediate)");
    assert_eq!(explain_write(4096), "rsocket direct write into an iomapped buffer, 4 KiB");
}

#[test]
fn sgl_entries() {
    let s = Sge { addr: 0x7f00_0001_0000, key: 0x1234, length: 65536 };
    assert_eq!(
        explain_sgl_entry(&s.emit(ByteOrder::Little), ByteOrder::Little),
        "rsocket SGL entry: receive buffer 64 KiB at 0x7f0000010000, rkey 0x1234"
    );
    assert_eq!(
        explain_sgl_entry(&[0; 4], ByteOrder::Little),
        "rsocket SGL entry truncated (4 of 16 bytes)"
    );
}

fn conn_data() -> ConnData {
    ConnData {
        version: 1,
        flags: 2,
        credits: 64,
        reserved: [0; 3],
        target_iomap_size: 0,
        target_sgl: Sge { addr: 0x5555_0000_1000, key: 0x22, length: 2 },
        data_buf: Sge { addr: 0x7f12_3400_0000, key: 0x11, length: 65536 },
    }
}

#[test]
fn connection_data() {
    let want = "rsocket connection data: version 1, credits 64, receive buffer 128 KiB at 0x7f1234000000, rkey 0x11 (first 64 KiB offered), target SGL 2 entries at 0x555500001000, rkey 0x22, iomap 0 entries, little-endian entries";
    let rep = conn_data().emit();
    assert_eq!(explain_conn_data(&rep), want);
    assert_eq!(explain_rep_private_data(&rep), want);
    // a REQ: librdmacm's 36-byte header first
    let mut req = vec![0u8; 36];
    req.extend_from_slice(&rep);
    req.resize(92, 0);
    assert_eq!(explain_req_private_data(&req), want);
    assert_eq!(
        explain_req_private_data(&req[..20]),
        "not rsocket connection data (20 bytes of private data)"
    );
    let mut big = conn_data();
    big.flags = 3;
    big.target_iomap_size = 0x81;
    assert!(explain_conn_data(&big.emit()).ends_with("iomap 256 entries, big-endian entries"));
    let mut v9 = rep;
    v9[0] = 9;
    assert_eq!(
        explain_conn_data(&v9),
        "rsocket connection data: version 9 (unknown; rdma-core refuses it)"
    );
    assert_eq!(explain_conn_data(&rep[..10]), "not rsocket connection data (10 bytes, 40 needed)");
}

#[test]
fn sizes() {
    assert_eq!(
        (size(0), size(1), size(1500), size(2048), size(1 << 20), size(3 << 20)),
        (
            "0 bytes".into(),
            "1 byte".into(),
            "1500 bytes".into(),
            "2 KiB".into(),
            "1 MiB".into(),
            "3 MiB".into()
        )
    );
}
