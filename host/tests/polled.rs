//! The engine driver in busy-poll mode (`EngineDriver` without a thread) with two UDP devices on loopback:
//! a kick moves only the posting device's packets (and those of a device
//! that received since its last pull), data arrives intact, and held ACKs
//! leave when the driver idles.

use crate::common;
use common::{connect_qps, rc_qp};
use roce_emulator::{Hca, HcaConfig, LinkProfile, PathMtu};
use roce_host::{EngineConfig, EngineDriver};
use roce_transport::{UdpConfig, UdpTransport};
use roce_verbs_api::{
    AccessFlags, Budget, ConnectOptions, Device, SendWr, WcOpcode, WcStatus, WrOpcode,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A core for the socket `t` (its port on every datagram), holding its
/// positive ACKs an hour: only the driver going idle lets them leave.
fn core(name: &str, t: &UdpTransport) -> Arc<Mutex<Hca>> {
    let mut hc = HcaConfig::new(name, t.local_addr().ip(), 7);
    hc.active_mtu = PathMtu::Mtu1024;
    hc.link = LinkProfile {
        src_port: Some(t.local_addr().port()),
        ack_delay: Some(Duration::from_secs(3600)),
        ..LinkProfile::default()
    };
    Arc::new(Mutex::new(Hca::new(hc)))
}

#[test]
fn kick_moves_the_posting_device_only_and_held_acks_leave_when_idle() {
    let ta = UdpTransport::bind(UdpConfig::on("127.0.9.2".parse().unwrap())).unwrap();
    let tb = UdpTransport::bind(UdpConfig::on("127.0.9.3".parse().unwrap())).unwrap();
    let (ca, cb) = (ta.counters(), tb.counters());
    let (ha, hb) = (core("pa", &ta), core("pb", &tb));
    let ec = EngineConfig { caller_spin: Duration::MAX, thread: false, ..Default::default() };
    let drv = Arc::new(
        EngineDriver::new(vec![(ha.clone(), ta), (hb.clone(), tb)], ec, "poll-test").unwrap(),
    );
    let (a, b) = (Device::new(ha, drv.clone()).open(), Device::new(hb, drv).open());
    let ((pa, qca, qa), (pb, qcb, qb)) = (rc_qp(&a, 64), rc_qp(&b, 64));
    connect_qps(&qa, &qb, 0x100, 0x200, &ConnectOptions::default());
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let (ma, mb) = (pa.reg_mr(4096, acc).unwrap(), pb.reg_mr(4096, acc).unwrap());
    ma.write(0, b"from a").unwrap();
    mb.write(0, b"from b").unwrap();
    let write = |src: &roce_verbs_api::Mr, dst: &roce_verbs_api::Mr, id| {
        SendWr::new(id, WrOpcode::RdmaWrite)
            .sge(src.addr(), 6, src.lkey())
            .remote(dst.remote_addr(100), dst.rkey())
            .with_flags(roce_verbs_api::SendFlags::SIGNALED)
    };
    // B queues a WRITE without a kick; A's post kicks A only: B's stays queued
    qb.post_send_list_deferred([write(&mb, &ma, 1)]).unwrap();
    qa.post_send(write(&ma, &mb, 2)).unwrap();
    assert_eq!(ca.snapshot().dgrams_out, 1);
    assert_eq!(cb.snapshot().dgrams_out, 0, "B was not kicked and received nothing yet");
    // waiting moves everything: B receives A's WRITE, then B's own WRITE leaves
    let budget = Budget { events: 0, wall: Duration::from_secs(10) };
    let wa = qca.poll_blocking(1, budget).unwrap();
    assert_eq!(
        (wa[0].wr_id, wa[0].status, wa[0].opcode),
        (2, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    let wb = qcb.poll_blocking(1, budget).unwrap();
    assert_eq!((wb[0].wr_id, wb[0].status), (1, WcStatus::Success));
    let (mut x, mut y) = ([0u8; 6], [0u8; 6]);
    mb.read(100, &mut x).unwrap();
    ma.read(100, &mut y).unwrap();
    assert_eq!((&x, &y), (b"from a", b"from b"));
    // The first ACK of each QP left at once; with a one-hour delay, the second
    // WRITE's ACK is held until the driver idles.
    qa.post_send(write(&ma, &mb, 3)).unwrap();
    let wa = qca.poll_blocking(1, budget).unwrap();
    assert_eq!((wa[0].wr_id, wa[0].status), (3, WcStatus::Success));
    let (sa, sb) = (ca.snapshot(), cb.snapshot());
    assert_eq!(sa.dgrams_out, 2 + 1, "two WRITEs and the ACK of B's");
    assert_eq!(sb.dgrams_out, 1 + 2, "one WRITE, two ACKs (the second forced out when idle)");
    assert_eq!((sa.icrc_recomputed, sb.icrc_recomputed), (0, 0), "ICRCs computed for the socket");
}
