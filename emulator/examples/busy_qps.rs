//! Cost of moving messages over many busy RC QPs: two devices joined back
//! to back in this process (no fabric, no loss), N connected QP pairs, each
//! A-side QP posting M RDMA WRITEs of S bytes at once; the loop hands every
//! datagram one device transmits to the other until every WRITE completed.
//! Prints ns per message and per packet (min / median / max of repeats).
//! The busy-path companion of `idle_qps_round`: what the core's per-call
//! bookkeeping (round-robin, timer and transmit indexes) costs under load.
//!
//! Run: `cargo run --release -p roce-emulator --example busy_qps -- 1024`
//! (arguments: QP pairs, default 1024; WRITEs per QP, default 16; bytes per
//! WRITE, default 4096; repeats, default 5).

mod common;

use roce_emulator::qp_attr::{AccessFlags, QpCap};
use roce_emulator::{Hca, HcaConfig, Instant, SansIo, SendWr, WcStatus, WrOpcode};
use std::net::IpAddr;
use std::time::Instant as WallClock;

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let n = args.first().copied().unwrap_or(1024) as u32;
    let m = args.get(1).copied().unwrap_or(16) as u32;
    let size = args.get(2).copied().unwrap_or(4096) as u32;
    let repeats = args.get(3).copied().unwrap_or(5) as usize;
    let (addr_a, addr_b): (IpAddr, IpAddr) =
        ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let mut a = Hca::new(HcaConfig::new("roce0", addr_a, 1));
    let mut b = Hca::new(HcaConfig::new("roce1", addr_b, 2));
    let cap = QpCap {
        max_send_wr: m.max(1),
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(32767).unwrap(), b.create_cq(16).unwrap());
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let ma = a.reg_mr(pa, size as usize, access).unwrap();
    let mb = b.reg_mr(pb, size as usize, access).unwrap();
    let mut qps = Vec::new();
    for i in 0..n {
        // both devices number their QPs alike (17, 18, ...)
        let qa = common::rc_qp_to(&mut a, pa, ca, cap, addr_b, 17 + i);
        let qb = common::rc_qp_to(&mut b, pb, cb, cap, addr_a, 17 + i);
        assert_eq!((qa.value(), qb.value()), (17 + i, 17 + i));
        qps.push(qa);
    }
    let mut now = Instant::from_millis(1);
    let mut per_msg = Vec::new();
    let mut pkts_per_msg = 0.0;
    for _ in 0..repeats {
        let sent_before = a.counters().sent_pkts;
        #[allow(clippy::disallowed_methods)] // a benchmark driver reads the wall clock
        let start = WallClock::now();
        for &q in &qps {
            for i in 0..m {
                let wr = SendWr::new(u64::from(i), WrOpcode::RdmaWrite)
                    .sge(ma.addr, size, ma.lkey)
                    .remote(mb.addr, mb.rkey);
                a.post_send(q, wr).unwrap();
            }
        }
        let want = u64::from(n) * u64::from(m);
        let mut done = 0u64;
        while done < want {
            let mut moved = false;
            while let Some(d) = a.poll_transmit(now) {
                b.handle_datagram(now, d);
                moved = true;
            }
            while let Some(d) = b.poll_transmit(now) {
                a.handle_datagram(now, d);
                moved = true;
            }
            for wc in a.poll_cq(ca, 4096).unwrap() {
                assert_eq!(wc.status, WcStatus::Success);
                done += 1;
            }
            if !moved {
                now = a.poll_timeout().unwrap_or(now).max(now);
                a.handle_timeout(now);
            }
            now += core::time::Duration::from_micros(1);
        }
        per_msg.push(start.elapsed().as_nanos() as f64 / want as f64);
        pkts_per_msg = (a.counters().sent_pkts - sent_before) as f64 / want as f64;
    }
    per_msg.sort_by(|x, y| x.total_cmp(y));
    println!(
        "{n} busy RC QP pairs, {m} WRITEs of {size} B each ({pkts_per_msg:.1} request packets \
         per WRITE), {repeats} repeats: ns per WRITE (both devices' work)"
    );
    println!(
        "min {:.0}  median {:.0}  max {:.0}",
        per_msg[0],
        per_msg[repeats / 2],
        per_msg[repeats - 1]
    );
}
