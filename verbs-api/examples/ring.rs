//! Debug: run a workload, keep the last frames of QP pair 0 (both taps), print them.
use roce_emulator::sim::TapPoint;
use roce_packet::pcap::LinkType;
use roce_verbs_api::workload::{OpKind, Workload, WorkloadConfig};
use roce_verbs_api::FaultConfig;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let ops: u64 = a[1].parse().unwrap();
    let seed: u64 = a[2].parse().unwrap();
    let keep: usize = a[3].parse().unwrap();
    let faults = FaultConfig {
        drop: 0.1,
        duplicate: 0.05,
        reorder: 0.1,
        corrupt: 0.001,
        ..FaultConfig::default()
    };
    let w = Workload::new(WorkloadConfig {
        ops,
        seed,
        faults,
        mix: vec![OpKind::Send, OpKind::Write],
        ..WorkloadConfig::default()
    })
    .unwrap();
    let ring: Arc<Mutex<VecDeque<String>>> = Arc::default();
    for (pt, name) in [(TapPoint::Egress, "TX"), (TapPoint::Ingress, "RX")] {
        let r = ring.clone();
        w.net().with_fabric(|f| {
            f.record_frames(pt, move |ts, fr| {
                if let Ok(Some(ds)) = roce_packet::frame::parse_frame(LinkType::Ethernet, fr, 4791)
                {
                    for d in ds {
                        let Ok(p) = d.packet() else { continue };
                        let x = roce_packet::RoceRepr::parse(&p);
                        if x.bth.dest_qp.value() != 17 {
                            continue;
                        }
                        let mut g = r.lock().unwrap();
                        g.push_back(format!(
                            "{:>14} {name} {} -> {} {:?} psn={:#x} a={} {:?} icrc={}",
                            ts.as_nanos(),
                            d.endpoints.src,
                            d.endpoints.dst,
                            x.bth.opcode,
                            x.bth.psn.value(),
                            x.bth.ack_req as u8,
                            x.aeth.map(|a| a.syndrome),
                            d.icrc_ok()
                        ));
                        if g.len() > keep {
                            g.pop_front();
                        }
                    }
                }
            })
        });
    }
    let net = w.net().clone();
    let r = w.run(|_| {});
    println!("ok={} {:?} {:?}", r.ok(), r.completions.values().collect::<Vec<_>>(), r.problems);
    let _ = net;
    for l in ring.lock().unwrap().iter() {
        println!("{l}");
    }
}
