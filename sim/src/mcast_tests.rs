//! UD multicast on the simulated fabric: devices join a group when their
//! first QP attaches (the sim driver's `join_group`), the fabric hands each
//! member one copy, the faults apply per copy, and each device's core
//! checks the Q_Key of each attached QP.

use crate::{Fabric, FaultConfig, NodeId, NullNode, SimNet};
use roce_emulator::io::Datagram;
use roce_packet::{IpMeta, UdpEndpoints};
use roce_verbs_api::{
    create_ah, AccessFlags, Context, Cq, Mr, Qp, QpType, RecvWr, SendWr, WcFlags, WcOpcode,
    WcStatus, WrOpcode, DEFAULT_QKEY, MCAST_QPN,
};
use std::net::{IpAddr, Ipv4Addr};

const GROUP: &str = "239.1.1.1";
/// The receive buffers: 40 bytes of GRH area + up to 1024 of payload.
const SLOT: u64 = 1064;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// One device with one UD QP (Q_Key `qkey`), a CQ and a region of 32 slots.
struct Member {
    ctx: Context,
    qp: Qp,
    cq: Cq,
    mr: Mr,
}

impl Member {
    fn new(net: &SimNet, name: &str, addr: &str, qkey: u32) -> Member {
        let ctx = net.add_device(name, ip(addr)).open();
        let pd = ctx.alloc_pd().expect("pd");
        let cq = ctx.create_cq(256).expect("cq");
        let mr = pd.reg_mr(32 * SLOT as usize, AccessFlags::LOCAL_WRITE).expect("mr");
        let qp = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).max_recv_wr(64).build().expect("qp");
        qp.activate_ud(qkey, 0).expect("UD to RTS");
        Member { ctx, qp, cq, mr }
    }

    fn post_recvs(&self, n: u64) {
        for i in 0..n {
            let wr = RecvWr::new(100 + i, self.mr.addr() + i * SLOT, SLOT as u32, self.mr.lkey());
            self.qp.post_recv(wr).expect("post_recv");
        }
    }

    fn counter(&self, name: &str) -> u64 {
        self.ctx.counters().get(name).unwrap_or(0)
    }

    fn slot(&self, i: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mr.read(i * SLOT, &mut v).expect("read");
        v
    }

    fn completions(&self) -> Vec<roce_verbs_api::WorkCompletion> {
        let mut all = Vec::new();
        loop {
            let w = self.cq.poll(64).expect("poll");
            if w.is_empty() {
                return all;
            }
            all.extend(w);
        }
    }
}

fn payload(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| tag.wrapping_mul(31).wrapping_add(i as u8)).collect()
}

/// `sender` sends `bytes` (from its slot `id % 32`: the bytes leave when the
/// fabric runs) to the group (wr_id `id`).
fn send_to_group(sender: &Member, id: u64, bytes: &[u8], group: IpAddr) {
    let at = (id % 32) * SLOT;
    sender.mr.write(at, bytes).expect("write");
    let wr = SendWr::new(id, WrOpcode::Send)
        .sge(sender.mr.addr() + at, bytes.len() as u32, sender.mr.lkey())
        .ud(create_ah(group), MCAST_QPN, DEFAULT_QKEY);
    sender.qp.post_send(wr).expect("post_send");
}

#[test]
fn a_group_datagram_reaches_every_attached_device_once_and_a_wrong_qkey_counts_a_drop() {
    let net = SimNet::from_env_seed(31);
    let group = ip(GROUP);
    let sender = Member::new(&net, "tx", "10.0.0.1", DEFAULT_QKEY);
    let rx: Vec<Member> = (2..=4)
        .map(|i| Member::new(&net, &format!("rx{i}"), &format!("10.0.0.{i}"), DEFAULT_QKEY))
        .collect();
    let wrong = Member::new(&net, "wrongkey", "10.0.0.5", 0x2222_2222);
    let bystander = Member::new(&net, "bystander", "10.0.0.6", DEFAULT_QKEY);
    for (i, m) in rx.iter().chain([&wrong]).enumerate() {
        // one of them in the IPv4-mapped form: the same group
        let g = if i == 1 { ip("::ffff:239.1.1.1") } else { group };
        m.qp.attach_mcast(g).expect("attach");
        m.post_recvs(4);
    }
    bystander.post_recvs(4);
    assert_eq!(net.group_members(group), ["rx2", "rx3", "rx4", "wrongkey"]);
    let (d1, d2) = (payload(1, 300), payload(2, 1024));
    send_to_group(&sender, 1, &d1, group);
    send_to_group(&sender, 2, &d2, group);
    assert!(net.run_until_idle(100_000));

    let s = sender.completions();
    let st: Vec<_> = s.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(st, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    for m in &rx {
        let w = m.completions();
        let got: Vec<_> = w.iter().map(|w| (w.wr_id, w.opcode, w.status, w.byte_len)).collect();
        assert_eq!(
            got,
            [
                (100, WcOpcode::Recv, WcStatus::Success, 340),
                (101, WcOpcode::Recv, WcStatus::Success, 1064)
            ],
            "{}",
            m.ctx.name()
        );
        for c in &w {
            assert!(c.wc_flags.contains(WcFlags::GRH));
            assert_eq!(c.src_qp, sender.qp.qpn().value());
            assert_eq!(c.qp_num, m.qp.qpn().value());
        }
        // the GRH area holds the IPv4 header: its destination is the group
        assert_eq!(m.slot(0, 40)[36..40], Ipv4Addr::new(239, 1, 1, 1).octets());
        assert_eq!(m.slot(0, 340)[40..], d1[..]);
        assert_eq!(m.slot(1, 1064)[40..], d2[..]);
        assert_eq!(m.counter("mcast_rcvd"), 2, "{}", m.ctx.name());
        assert_eq!(m.counter("rdma_recvs"), 2);
        assert_eq!(m.counter("ud_dropped"), 0);
        assert_eq!(m.counter("mcast_dropped"), 0);
    }
    // the wrong Q_Key: both datagrams reached the device and its QP, which
    // dropped them (no completion, its buffers untouched)
    assert!(wrong.completions().is_empty());
    assert_eq!(wrong.slot(0, 1064), vec![0u8; 1064]);
    assert_eq!(wrong.counter("mcast_rcvd"), 2);
    assert_eq!(wrong.counter("ud_dropped"), 2);
    assert_eq!(wrong.counter("rdma_recvs"), 0);
    // a device that did not join sees nothing, nor does the sender
    assert!(bystander.completions().is_empty());
    assert_eq!(bystander.counter("rcvd_pkts"), 0);
    assert_eq!(sender.counter("rcvd_pkts"), 0);
    assert_eq!(sender.counter("mcast_sent"), 2);
    let f = net.stats();
    assert_eq!((f.transmitted, f.mcast_copies, f.delivered, f.dropped()), (2, 8, 8, 0));

    // rx3 detaches (its device's last QP in the group: it leaves it); the
    // next datagram reaches the two others
    rx[1].qp.detach_mcast(group).expect("detach");
    assert_eq!(net.group_members(group), ["rx2", "rx4", "wrongkey"]);
    let d3 = payload(3, 64);
    send_to_group(&sender, 3, &d3, group);
    assert!(net.run_until_idle(100_000));
    assert_eq!(rx[0].completions().iter().map(|w| w.byte_len).collect::<Vec<_>>(), [104]);
    assert_eq!(rx[2].completions().iter().map(|w| w.byte_len).collect::<Vec<_>>(), [104]);
    assert_eq!(rx[0].slot(2, 104)[40..], d3[..]);
    assert!(rx[1].completions().is_empty());
    assert_eq!(rx[1].counter("mcast_rcvd"), 2);
    assert_eq!(rx[1].counter("mcast_dropped"), 0, "the fabric no longer sends it the group");
    assert_eq!(rx[1].slot(2, 104), vec![0u8; 104]);
    assert_eq!(wrong.counter("ud_dropped"), 3);
    let f = net.stats();
    assert_eq!((f.transmitted, f.mcast_copies, f.delivered), (3, 11, 11));
}

#[test]
fn the_sender_gets_its_own_copy_only_when_its_device_is_attached() {
    let net = SimNet::from_env_seed(32);
    let group = ip("239.9.9.9");
    let a = Member::new(&net, "a", "10.0.0.1", DEFAULT_QKEY);
    let b = Member::new(&net, "b", "10.0.0.2", DEFAULT_QKEY);
    b.qp.attach_mcast(group).expect("attach");
    b.post_recvs(2);
    a.post_recvs(2);
    send_to_group(&a, 1, &payload(4, 10), group);
    assert!(net.run_until_idle(10_000));
    assert_eq!(a.completions().len(), 1, "only the send completion");
    assert_eq!(b.completions().len(), 1);
    // a's own QP joins: its next datagram loops back to it (IP_MULTICAST_LOOP)
    a.qp.attach_mcast(group).expect("attach");
    send_to_group(&a, 2, &payload(5, 20), group);
    assert!(net.run_until_idle(10_000));
    let mine: Vec<_> = a.completions().iter().map(|w| (w.opcode, w.byte_len)).collect();
    assert_eq!(mine.len(), 2, "{mine:?}");
    assert!(mine.contains(&(WcOpcode::Recv, 60)) && mine.contains(&(WcOpcode::Send, 20)));
    assert_eq!(a.slot(0, 60)[40..], payload(5, 20)[..]);
    assert_eq!(b.completions().iter().map(|w| w.byte_len).collect::<Vec<_>>(), [60]);
    assert_eq!(net.stats().mcast_copies, 3);
}

/// Loss is decided per copy: the members lose different datagrams, the
/// counts add up, and the same seed loses the same ones again.
#[test]
fn loss_applies_to_each_copy_on_its_own_and_replays_from_the_seed() {
    fn run(seed: u64) -> (Vec<Vec<u64>>, crate::FabricStats) {
        let net = SimNet::new(seed);
        let group = ip(GROUP);
        let sender = Member::new(&net, "tx", "10.0.0.1", DEFAULT_QKEY);
        let rx: Vec<Member> = (2..=4)
            .map(|i| Member::new(&net, &format!("rx{i}"), &format!("10.0.0.{i}"), DEFAULT_QKEY))
            .collect();
        for m in &rx {
            m.qp.attach_mcast(group).expect("attach");
        }
        net.set_faults(FaultConfig::lossy(0.3));
        let mut got = vec![Vec::new(); rx.len()];
        for round in 0..5u64 {
            for m in &rx {
                m.post_recvs(8);
            }
            for i in 0..8u64 {
                let id = round * 8 + i;
                // the payload's first byte says which datagram it is
                send_to_group(&sender, id, &[id as u8; 16], group);
            }
            assert!(net.run_until_idle(100_000));
            for (k, m) in rx.iter().enumerate() {
                for w in m.completions() {
                    assert_eq!((w.status, w.byte_len), (WcStatus::Success, 56));
                    let bytes = m.slot(w.wr_id - 100, 56);
                    assert!(bytes[40..].iter().all(|b| *b == bytes[40]), "a whole datagram");
                    got[k].push(u64::from(bytes[40]));
                }
            }
        }
        (got, net.stats())
    }
    let seed = crate::seed_from_env(33);
    let _guard = crate::SeedGuard::new(seed);
    let (got, f) = run(seed);
    assert_eq!(f.transmitted, 40);
    assert_eq!(f.mcast_copies, 120);
    assert_eq!(f.delivered + f.dropped_loss, 120);
    let received: u64 = got.iter().map(|g| g.len() as u64).sum();
    assert_eq!(received, f.delivered);
    assert!(f.dropped_loss > 10 && f.delivered > 60, "{f:?}");
    assert!(got[0] != got[1] || got[1] != got[2], "the copies met the same fate: {got:?}");
    let (again, f2) = run(seed);
    assert_eq!((again, f2), (got, f), "a run replays from its seed");
}

#[test]
fn fabric_groups_join_leave_and_unroutable_groups() {
    let mut f = Fabric::new(1);
    let a = f.add_node(ip("10.0.0.1"), NullNode);
    let b = f.add_node(ip("10.0.0.2"), NullNode);
    assert!(!f.join_group(a, ip("10.0.0.9")), "not a multicast address");
    assert!(!f.join_group(NodeId(7), ip(GROUP)), "no such node");
    assert!(f.join_group(b, ip("::ffff:239.1.1.1")));
    assert!(f.join_group(b, ip(GROUP)), "joining twice is a no-op");
    assert!(f.join_group(a, ip("ff0e::1")));
    assert_eq!(f.group_members(ip(GROUP)), [b]);
    assert_eq!(f.group_members(ip("ff0e::1")), [a]);
    let dgram = |dst: &str| {
        let ep =
            UdpEndpoints { src: ip("10.0.0.1"), src_port: 49152, dst: ip(dst), dst_port: 4791 };
        Datagram::new(ep, IpMeta::default(), bytes::Bytes::from_static(&[0u8; 40]))
    };
    f.inject(a, dgram(GROUP));
    f.inject(a, dgram("239.2.2.2"));
    assert!(f.run_until_idle(100));
    let s = f.stats();
    assert_eq!((s.transmitted, s.mcast_copies, s.delivered, s.dropped_unroutable), (2, 1, 1, 1));
    assert_eq!(f.node_stats(b).map(|n| n.delivered), Some(1));
    assert!(f.leave_group(b, ip(GROUP)));
    assert!(!f.leave_group(b, ip(GROUP)));
    assert!(f.group_members(ip(GROUP)).is_empty());
    f.inject(a, dgram(GROUP));
    assert!(f.run_until_idle(100));
    assert_eq!(f.stats().dropped_unroutable, 2);
}
