//! UC on the simulated fabric (verbs API): the fabric drops exactly one
//! packet (a MIDDLE) of a three-packet SEND; exactly that message is lost
//! and `uc_msg_dropped` is exactly 1.

use roce_packet::{Opcode, Psn};
use roce_sim::SimNet;
use roce_sim::{Filter, Match};
use roce_verbs_api::*;

use crate::common;
use common::{uc_pair, ACCESS};

#[test]
fn one_dropped_packet_loses_exactly_its_uc_message() {
    let net = SimNet::new(31);
    let (ia, ib) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let a = net.add_device("roce0", ia).open();
    let b = net.add_device("roce1", ib).open();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (ma, mb) = (pa.reg_mr(1 << 14, ACCESS).unwrap(), pb.reg_mr(1 << 14, ACCESS).unwrap());
    let (qa, qb) = uc_pair(&pa, &ca, &pb, &cb, 0x40, 0x80);
    // three messages of 3000 bytes: 3 packets each at MTU 1024 (PSNs 0x40..0x48)
    let msgs: Vec<Vec<u8>> =
        (0..3u32).map(|m| (0..3000u32).map(|i| (i * 13 + m * 101) as u8).collect()).collect();
    for (i, m) in msgs.iter().enumerate() {
        let off = (i * 4096) as u64;
        ma.write(off, m).unwrap();
        qb.post_recv(RecvWr::new(i as u64, mb.addr() + off, 4096, mb.lkey())).unwrap();
    }
    // the second message's MIDDLE packet (PSN 0x44) is dropped, once
    let f = net.with_fabric(|f| {
        let m = Match::From(ia)
            .and(Match::Psn(Psn::new(0x44)))
            .and(Match::Opcode(Opcode::UC_SEND_MIDDLE));
        f.add_filter(Filter::matching(m).first(1).drop())
    });
    for i in 0..3u64 {
        qa.post_send(SendWr::new(10 + i, WrOpcode::Send).sge(
            ma.addr() + i * 4096,
            3000,
            ma.lkey(),
        ))
        .unwrap();
    }
    assert!(net.run_until_idle(100_000));
    assert_eq!(net.with_fabric(|fab| fab.filter(f).map(|x| x.fired())), Some(1));
    // the sender completed all three (UC completes on transmission)
    let wa: Vec<_> = ca.poll(8).unwrap().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wa, vec![(10, WcStatus::Success), (11, WcStatus::Success), (12, WcStatus::Success)]);
    // messages 1 and 3 arrived, in receives 0 and 1; receive 2 is still posted
    let wb: Vec<_> = cb.poll(8).unwrap().iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect();
    assert_eq!(wb, vec![(0, WcStatus::Success, 3000), (1, WcStatus::Success, 3000)]);
    let mut got = vec![0u8; 3000];
    mb.read(0, &mut got).unwrap();
    assert_eq!(got, msgs[0]);
    mb.read(4096, &mut got).unwrap();
    assert_eq!(got, msgs[2]);
    let c = b.counters();
    assert_eq!(c.uc_msg_dropped, 1, "{c}");
    assert_eq!(c.rdma_recvs, 2);
    assert_eq!(net.stats().dropped(), 1);
}
