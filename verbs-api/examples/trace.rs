//! Debug: one QP pair, K READs/atomics, drop the Nth packet; print the trace.
use roce_emulator::sim::{Filter, Match, TapPoint};
use roce_packet::pcap::LinkType;
use roce_verbs_api::*;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let nth: u64 = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let k: u64 = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    let op = a.get(3).cloned().unwrap_or("read".into());
    let net = SimNet::new(1);
    let (x, y) = (
        net.add_device("a", "10.0.0.1".parse().unwrap()).open(),
        net.add_device("b", "10.0.0.2".parse().unwrap()).open(),
    );
    let (px, py) = (x.alloc_pd().unwrap(), y.alloc_pd().unwrap());
    let (cx, cy) = (x.create_cq(64).unwrap(), y.create_cq(64).unwrap());
    let qx = px.qp_builder(&cx, &cx).build().unwrap();
    let qy = py.qp_builder(&cy, &cy).build().unwrap();
    let o = ConnectOptions { timeout: 10, ..Default::default() };
    let (ex, ey) = (qx.endpoint(100), qy.endpoint(500));
    qx.connect(&ex, &ey, &o).unwrap();
    qy.connect(&ey, &ex, &o).unwrap();
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mx = px.reg_mr(65536, all).unwrap();
    let my = py.reg_mr(65536, all).unwrap();
    net.with_fabric(|f| {
        f.add_filter(Filter::matching(Match::Any).nth(nth).drop());
        f.record_frames(TapPoint::Egress, |ts, fr| {
            if let Ok(Some(ds)) = roce_packet::frame::parse_frame(LinkType::Ethernet, fr, 4791) {
                for d in ds {
                    let p = d.packet().unwrap();
                    let r = RoceReprX::parse(&p);
                    println!(
                        "{:>10} {} -> {} {:?} psn={} {:?}",
                        ts.as_nanos(),
                        d.endpoints.src,
                        d.endpoints.dst,
                        r.bth.opcode,
                        r.bth.psn.value(),
                        r.aeth.map(|a| a.syndrome)
                    );
                }
            }
        });
    });
    for i in 0..k {
        let wr = match op.as_str() {
            "read" => SendWr::new(i, WrOpcode::RdmaRead)
                .sge(mx.addr() + i * 2048, 2048, mx.lkey())
                .remote(my.addr() + i * 2048, my.rkey()),
            "write" => SendWr::new(i, WrOpcode::RdmaWrite)
                .sge(mx.addr() + i * 2048, 2048, mx.lkey())
                .remote(my.addr() + i * 2048, my.rkey()),
            _ => SendWr::new(i, WrOpcode::AtomicFetchAndAdd)
                .sge(mx.addr() + i * 8, 8, mx.lkey())
                .remote(my.addr(), my.rkey()),
        };
        qx.post_send(wr).unwrap();
    }
    let wcs = net.poll_cq_blocking(&cx, k as usize, 100_000).unwrap();
    for w in &wcs {
        println!("wc {} {:?}", w.wr_id, w.status);
    }
    println!("{:?}", x.counters().iter().filter(|(_, v)| *v != 0).collect::<Vec<_>>());
    println!("{:?}", y.counters().iter().filter(|(_, v)| *v != 0).collect::<Vec<_>>());
}
use roce_packet::RoceRepr as RoceReprX;
