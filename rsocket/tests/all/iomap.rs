//! Iomapped buffers: one side publishes a buffer into the peer's target
//! iomap, the peer writes straight into it (`riomap`, `riowrite`).

use crate::common::*;
use roce_rsocket::*;

#[test]
fn publish_then_write_directly() {
    let cb = StreamConfig { target_iomap_size: 4, ..StreamConfig::default() };
    let mut p = Pair::connected(StreamConfig::default(), cb);
    p.drain();
    // A offers its io buffer as stream offsets 0x10000.. in entry 1 of B's iomap
    let sge = Sge { addr: p.a.io_addr, key: p.a.io_rkey, length: 65536 };
    let sseq = p.a.s.sender_view().sseq_no;
    let wr = p.a.s.send_iomap(1, 0x10000, sge).unwrap();
    assert_eq!(wr.imm, Some(0xC000_0001));
    assert_eq!(wr.remote_addr, p.b.mem.target_addr + 32 + 24);
    assert_eq!(wr.payload.len(), 24);
    p.apply(Side::A, vec![Action::Post(wr)], &[]);
    p.drain();
    assert_eq!(p.a.s.sender_view().sseq_no, sseq.wrapping_add(1), "it took a credit");
    assert!(p.b.events.is_empty() && p.b.s.readable_bytes() == 0, "no data for the application");

    // B writes 40000 bytes at stream offset 0x10100: plain RDMA WRITEs
    let data = pattern(40000, 11);
    let (mut done, mut ramp) = (0usize, SendRamp::new());
    while done < data.len() {
        let target = p.b.target.clone();
        match p.b.s.iowrite(0x10100 + done as u64, data.len() - done, &mut ramp, &target) {
            Ok((n, acts)) => {
                assert!(acts.iter().all(|a| matches!(a, Action::Post(w) if w.imm.is_none())));
                let app = data[done..].to_vec();
                p.apply(Side::B, acts, &app);
                done += n;
            }
            Err(Error::WouldBlock) => {}
            Err(e) => panic!("{e}"),
        }
        p.drain();
    }
    assert!(p.a.io[0x100..0x100 + 40000] == data[..]);
    assert_eq!(p.a.s.readable_bytes(), 0, "direct writes bypass the stream");
    assert!(p.b.s.all_sends_done());

    // outside the published range, or an entry the peer does not have
    let target = p.b.target.clone();
    let e = p.b.s.iowrite(0x20000, 1, &mut SendRamp::new(), &target).unwrap_err();
    assert_eq!((e, e.errno()), (Error::NoIomapAt { offset: 0x20000 }, errno::EINVAL));
    assert_eq!(p.a.s.send_iomap(4, 0, sge).unwrap_err(), Error::NoSuchIomap { index: 4 });
    assert_eq!(
        p.b.s.send_iomap(0, 0, sge).unwrap_err(),
        Error::NoSuchIomap { index: 0 },
        "A has no iomap"
    );
}
