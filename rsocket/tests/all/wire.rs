//! The stream wire formats, byte for byte.

use roce_rsocket::consts::*;
use roce_rsocket::wire::*;
use roce_rsocket::*;

fn sample() -> ConnData {
    ConnData {
        version: 1,
        flags: CONN_FLAG_IOMAP,
        credits: 384,
        reserved: [0; 3],
        target_iomap_size: 0,
        target_sgl: Sge { addr: 0x0000_5555_1234_5000, key: 0x0102_0304, length: 2 },
        data_buf: Sge { addr: 0x0000_7f00_aabb_0000, key: 0x1122_3344, length: 65536 },
    }
}

#[test]
fn conn_data_bytes() {
    let b = sample().emit();
    #[rustfmt::skip]
    let want: [u8; 40] = [
        1, 0x02, 0x01, 0x80, 0, 0, 0, 0,
        0, 0, 0x55, 0x55, 0x12, 0x34, 0x50, 0x00, 1, 2, 3, 4, 0, 0, 0, 2,
        0, 0, 0x7f, 0x00, 0xaa, 0xbb, 0, 0, 0x11, 0x22, 0x33, 0x44, 0, 1, 0, 0,
    ];
    assert_eq!(b, want);
    assert_eq!(ConnData::parse(&b), Ok(sample()));
    assert_eq!(ConnData::parse_any(&b), Ok(sample()));
    assert_eq!(sample().entry_order(), ByteOrder::Little);
    assert_eq!(sample().iomap_addr(), 0x0000_5555_1234_5020);
}

#[test]
fn conn_data_flags_and_iomap_size() {
    let mut c = sample();
    c.flags |= CONN_FLAG_NET;
    c.target_iomap_size = iomap_size_to_scale(512);
    let b = c.emit();
    assert_eq!((b[1], b[7]), (0x03, 0x82));
    let back = ConnData::parse(&b).unwrap();
    assert_eq!((back.entry_order(), back.iomap_entries()), (ByteOrder::Big, 512));
    // without the iomap flag the size means nothing
    c.flags = 0;
    assert_eq!(ConnData::parse(&c.emit()).unwrap().iomap_entries(), 0);
}

#[test]
fn iomap_size_scale() {
    for (v, s, back) in [
        (0u16, 0u8, 0u16),
        (1, 1, 1),
        (128, 0x80, 128),
        (129, 0x80, 128),
        (255, 0x80, 128),
        (256, 0x81, 256),
        (1000, 0x83, 768),
        (0x7F00, 0xFF, 0x7F00),
    ] {
        assert_eq!(iomap_size_to_scale(v), s, "{v}");
        assert_eq!(iomap_scale_to_size(s), back, "{s:#x}");
    }
}

#[test]
fn our_conn_data() {
    let cfg = StreamConfig { rq_size: 100, target_iomap_size: 4, ..StreamConfig::default() };
    let mem = LocalMemory { rbuf_addr: 0x1000, rbuf_rkey: 5, target_addr: 0x2000, target_rkey: 6 };
    let c = Stream::new(cfg, mem).conn_data();
    assert_eq!(c.version, 1);
    assert_eq!(c.flags & CONN_FLAG_IOMAP, CONN_FLAG_IOMAP);
    assert_eq!(c.entry_order(), ByteOrder::native());
    assert_eq!((c.credits, c.iomap_entries()), (100, 4));
    assert_eq!(c.target_sgl, Sge { addr: 0x2000, key: 6, length: 2 });
    assert_eq!(c.data_buf, Sge { addr: 0x1000, key: 5, length: 65536 });
}

#[test]
fn sge_and_iomap_bytes() {
    let s = Sge { addr: 0x0102_0304_0506_0708, key: 0x0a0b_0c0d, length: 0x0001_0000 };
    let le = s.emit(ByteOrder::Little);
    assert_eq!(le, [8, 7, 6, 5, 4, 3, 2, 1, 0x0d, 0x0c, 0x0b, 0x0a, 0, 0, 1, 0]);
    let be = s.emit(ByteOrder::Big);
    assert_eq!(be, [1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0, 1, 0, 0]);
    assert_eq!(Sge::parse(&le, ByteOrder::Little), Some(s));
    assert_eq!(Sge::parse(&be, ByteOrder::Big), Some(s));
    assert_eq!(Sge::parse(&be[..15], ByteOrder::Big), None);

    let m = Iomap { offset: 0x1000, sge: s };
    let b = m.emit(ByteOrder::Little);
    assert_eq!(&b[..8], &[0, 0x10, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&b[8..], &le);
    assert_eq!(Iomap::parse(&b, ByteOrder::Little), Some(m));
    assert_eq!(Iomap::parse(&b[..23], ByteOrder::Little), None);
}

#[test]
fn messages() {
    assert_eq!(Msg::Data { len: 100 }.encode(), 0x0000_0064);
    assert_eq!(Msg::Data { len: 65536 }.encode().to_be_bytes(), [0, 1, 0, 0], "ImmDt on the wire");
    assert_eq!(Msg::Sgl { limit: 0x0010, raw: 0x1_0010 }.encode(), 0x8001_0010);
    assert_eq!(Msg::IomapSgl { index: 3 }.encode(), 0xC000_0003);
    assert_eq!(Msg::Ctrl { value: ctrl::DISCONNECT }.encode(), 0xE000_0000);
    assert_eq!(Msg::Ctrl { value: ctrl::KEEPALIVE }.encode(), 0xE000_0001);
    assert_eq!(Msg::Ctrl { value: ctrl::SHUTDOWN }.encode().to_be_bytes(), [0xE0, 0, 0, 2]);
    assert_eq!(Msg::decode(0x0000_0064), Ok(Msg::Data { len: 100 }));
    assert_eq!(Msg::decode(0x1FFF_FFFF), Ok(Msg::Data { len: 0x1FFF_FFFF }));
    assert_eq!(Msg::decode(0x8001_0010), Ok(Msg::Sgl { limit: 0x10, raw: 0x1_0010 }));
    assert_eq!(Msg::decode(0xC001_0003), Ok(Msg::IomapSgl { index: 3 }), "bits 28..16 reserved");
    assert_eq!(Msg::decode(0xE000_0002), Ok(Msg::Ctrl { value: 2 }));
    for (imm, op) in [(0x2000_0000u32, 1u8), (0x4000_0005, 2), (0x6000_0000, 3), (0xA000_0001, 5)] {
        assert_eq!(Msg::decode(imm), Err(Error::ReservedOp { op }));
    }
    assert_eq!(msg(Op::Data, 0xFFFF_FFFF), 0x1FFF_FFFF, "data is 29 bits");
}

#[test]
fn sizes_and_constants() {
    assert_eq!((CONN_DATA_LEN, SGE_LEN, IOMAP_LEN, CMA_HDR_LEN), (40, 16, 24, 36));
    let d = StreamConfig::default();
    assert_eq!(
        (d.sbuf_size, d.rbuf_size, d.sq_size, d.rq_size, d.sq_inline),
        (131072, 131072, 384, 384, 64)
    );
    assert_eq!((d.target_list_len(), d.sbuf_total_len()), (32, 131072));
    let s = StreamConfig { sq_inline: 0, target_iomap_size: 3, ..d };
    assert_eq!((s.target_list_len(), s.sbuf_total_len()), (32 + 72, 131072 + 64));
    let mut c = StreamConfig { sq_size: 5, rq_size: 60000, rbuf_size: 4097, ..d }.normalized(16384);
    assert_eq!((c.sq_size, c.rq_size, c.rbuf_size), (16, 16384, 4096));
    c.set_rcvbuf(1000);
    c.set_sndbuf(100);
    assert_eq!((c.rbuf_size, c.sbuf_size), (2000, 4096));
}
