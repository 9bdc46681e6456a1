//! Payloads sent from region memory (`LinkProfile::region_bodies`): the
//! datagrams a core with region bodies emits, made whole, are byte for byte
//! (ICRC included) those of a core without; and a deregistration while a
//! datagram still points into the region leaves it with no bytes to send.

use bytes::Bytes;
use roce_emulator::*;
use roce_sim::testkit::*;

/// Move datagrams both ways until both sides are quiet; every datagram is
/// logged whole (direction, UDP payload). Returns how many carried a
/// region body.
fn pump(p: &mut Pair, log: &mut Vec<(bool, Bytes)>) -> usize {
    let mut bodies = 0;
    for _ in 0..10_000 {
        let mut moved = false;
        for a_to_b in [true, false] {
            let now = p.now;
            let (from, to) = if a_to_b { (&mut p.a, &mut p.b) } else { (&mut p.b, &mut p.a) };
            while let Some(d) = from.hca.poll_transmit(now) {
                bodies += usize::from(d.body.is_some());
                let d = d.flatten().expect("region still registered");
                assert!(d.body.is_none());
                log.push((a_to_b, d.payload.clone()));
                to.hca.handle_datagram(now, d);
                moved = true;
            }
        }
        if !moved {
            return bodies;
        }
    }
    panic!("did not settle");
}

/// A WRITE, a SEND and a READ of several MTUs from one SGE, and a WRITE
/// from three SGEs (packets inside one SGE and packets across SGEs).
fn traffic(bodies: bool) -> (Vec<(bool, Bytes)>, usize, Vec<u8>) {
    let link = LinkProfile { region_bodies: bodies, ..LinkProfile::default() };
    let mut p = Pair::with(Opts { link_a: link, link_b: link, ..Opts::default() }); // MTU 1024
    let src = pattern(40_000, 3);
    p.a.write_mem(0, &src);
    p.b.write_mem(500_000, &pattern(30_001, 5));
    let (ak, bk) = (p.a.mr.lkey, p.b.mr.rkey);
    let write = SendWr::new(1, WrOpcode::RdmaWrite)
        .sge(p.a.addr(0), 20_001, ak)
        .remote(p.b.addr(100_000), bk);
    p.a.post(write);
    p.b.post_recv(7, 200_000, 20_000);
    p.a.send(2, 1, 12_345);
    let read = SendWr::new(3, WrOpcode::RdmaRead)
        .sge(p.a.addr(300_000), 30_001, ak)
        .remote(p.b.addr(500_000), bk);
    p.a.post(read);
    // 3 SGEs: 5000 + 3000 + 9000 bytes: of the 17 packets, 14 lie in one SGE
    let multi = SendWr::new(4, WrOpcode::RdmaWrite)
        .sge(p.a.addr(10), 5000, ak)
        .sge(p.a.addr(20_000), 3000, ak)
        .sge(p.a.addr(30_000), 9000, ak)
        .remote(p.b.addr(400_000), bk);
    p.a.post(multi);
    let mut log = Vec::new();
    let n = pump(&mut p, &mut log);
    let wa = p.a.poll();
    assert_eq!(wa.len(), 4, "{wa:?}");
    assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}");
    let wb = p.b.poll();
    assert_eq!((wb.len(), wb[0].status, wb[0].byte_len), (1, WcStatus::Success, 12_345));
    assert_eq!(p.b.read_mem(100_000, 20_001), &src[..20_001]);
    assert_eq!(p.b.read_mem(200_000, 12_345), &src[1..12_346]);
    assert_eq!(p.a.read_mem(300_000, 30_001), pattern(30_001, 5));
    let mut multi_src = src[10..5010].to_vec();
    multi_src.extend_from_slice(&src[20_000..23_000]);
    multi_src.extend_from_slice(&src[30_000..39_000]);
    assert_eq!(p.b.read_mem(400_000, 17_000), multi_src);
    (log, n, p.b.read_mem(0, 600_000))
}

#[test]
fn region_bodies_put_the_same_bytes_on_the_wire() {
    let (flat, none, mem_flat) = traffic(false);
    let (direct, bodies, mem_direct) = traffic(true);
    assert_eq!(none, 0, "off by default");
    // MTU 1024. WRITE 20001: 19 full packets from the region, the last 545
    // bytes copied; SEND 12345: 12 (+ 57 copied); READ 30001: 29 responses
    // (+ 305 copied); multi-SGE WRITE 17000: packets 0-3 in SGE 1, 5-6 in
    // SGE 2, 8-15 in SGE 3 (4, 7 cross SGEs; 16 is 616 bytes, copied)
    assert_eq!(bodies, 19 + 12 + 29 + 14, "datagrams that carried region bodies");
    assert_eq!(flat.len(), direct.len());
    for (k, (f, d)) in flat.iter().zip(&direct).enumerate() {
        assert_eq!(f.0, d.0, "datagram {k}: direction");
        assert_eq!(f.1, d.1, "datagram {k}: bytes (ICRC included)");
    }
    assert_eq!(mem_flat, mem_direct);
}

/// A datagram built to send from a region that is then deregistered has
/// no bytes left to send (the transport counts it lost), and the region
/// refuses every access from then on (as a NIC's DMA to pages that went
/// away under a posted WR: IBA leaves that WR's outcome to the device).
#[test]
fn dereg_after_build_leaves_the_datagram_without_bytes() {
    let link_a = LinkProfile { region_bodies: true, ..LinkProfile::default() };
    let mut p = Pair::with(Opts { link_a, ..Opts::default() });
    let mr = p.a.hca.reg_mr(p.a.pd, 8192, ALL_ACCESS).unwrap();
    p.a.hca.mr_write(mr.handle, 0, &pattern(8192, 1)).unwrap();
    let wr = SendWr::new(1, WrOpcode::RdmaWrite)
        .sge(mr.addr, 2048, mr.lkey)
        .remote(p.b.addr(0), p.b.mr.rkey);
    p.a.post(wr);
    let d = p.a.hca.poll_transmit(p.now).expect("the WRITE's first packet");
    let body = d.body.clone().expect("sent from the region");
    assert_eq!((body.off, body.len), (0, 1024));
    let whole = d.clone().flatten().expect("still registered");
    assert_eq!(&whole.payload[body.at..body.at + 1024], &pattern(8192, 1)[..1024]);
    p.a.hca.dereg_mr(mr.handle).unwrap();
    assert!(body.mem.is_revoked());
    assert!(d.flatten().is_none(), "no bytes after dereg");
    assert!(body.mem.read(0, &mut [0u8; 4]).is_none());
}
