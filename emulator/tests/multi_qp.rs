//! Several QPs on the same pair of devices make progress independently.

use roce_emulator::*;
use roce_packet::Qpn;
use roce_sim::testkit::*;

fn extra_qp(s: &mut Side) -> Qpn {
    s.rc_qp(64, 0, true, None)
}

fn up(h: &mut Hca, q: Qpn, peer: [u8; 4], dest: Qpn, sq: u32, rq: u32) {
    rc_up(h, q, peer, dest, (sq, rq), 4)
}

#[test]
fn eight_qp_pairs_in_parallel() {
    let mut p = Pair::new();
    let mut pairs = Vec::new();
    for i in 0..8u32 {
        let qa = extra_qp(&mut p.a);
        let qb = extra_qp(&mut p.b);
        up(&mut p.a.hca, qa, [10, 0, 0, 2], qb, 1000 * i, 5000 * i);
        up(&mut p.b.hca, qb, [10, 0, 0, 1], qa, 5000 * i, 1000 * i);
        pairs.push((qa, qb));
    }
    for (i, (qa, qb)) in pairs.iter().enumerate() {
        let off = 8192 * i as u64;
        p.a.write_mem(off, &pattern(3000, i as u8));
        let (addr, lkey) = (p.a.addr(off), p.a.mr.lkey);
        let raddr = p.b.addr(off);
        p.b.hca.post_recv(*qb, RecvWr::new(i as u64, raddr, 4096, p.b.mr.lkey)).unwrap();
        p.a.hca
            .post_send(*qa, SendWr::new(100 + i as u64, WrOpcode::Send).sge(addr, 3000, lkey))
            .unwrap();
    }
    p.run();
    let mut wa: Vec<u64> =
        p.a.poll()
            .iter()
            .map(|w| {
                assert_eq!(w.status, WcStatus::Success);
                w.wr_id
            })
            .collect();
    wa.sort();
    assert_eq!(wa, (100..108).collect::<Vec<_>>());
    let wb = p.b.poll();
    assert_eq!(wb.len(), 8);
    for w in &wb {
        let i = w.wr_id;
        assert_eq!(w.qp_num, pairs[i as usize].1.value());
        assert_eq!(w.src_qp, pairs[i as usize].0.value());
        assert_eq!(p.b.read_mem(8192 * i, 3000), pattern(3000, i as u8));
    }
    // the requester interleaves QPs round-robin rather than draining one
    let firsts: Vec<_> = p.trace.iter().take(8).map(|s| s.repr.bth.dest_qp).collect();
    let mut uniq = firsts.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), 8, "{firsts:?}");
    // distinct UDP source ports are not required, but all are in rxe's range
}
