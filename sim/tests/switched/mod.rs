//! The switched fabric (`roce_sim::switched`) and the traffic on it
//! (`roce_sim::incast`), in virtual time with real `Hca`s: DCQCN shares an
//! incast fairly with a short queue and no loss; without it PFC pauses
//! the senders most of the time, or (without PFC) the switch drops and
//! the flows are unfair; a PAUSE blocks an innocent flow on the same link
//! (head-of-line blocking); a receiver that stops draining pauses the
//! fabric behind it (a pause storm). The numbers are the model's.

use core::time::Duration;
use roce_emulator::CongestionConfig;
use roce_sim::incast::{self, Flow, FlowsConfig, FlowsReport, Topology};
use roce_sim::switched::{jain, pfc_frame, LinkSpec, SwitchConfig, SwitchedNet};
use roce_sim::NullNode;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// DCQCN's claims on an incast (40 Gb/s, the paper's parameters, 40 ms,
/// measured over the second half).
fn check_dcqcn(n: usize, r: &FlowsReport) {
    let fair = 40.0 / n as f64;
    assert!(r.jain >= 0.98, "{n}:1 Jain {}: {:?}", r.jain, r.rates);
    for x in &r.rates {
        assert!(
            (x - fair).abs() <= 0.1 * fair,
            "{n}:1 a flow at {x} Gb/s, fair {fair}: {:?}",
            r.rates
        );
    }
    assert!(r.utilisation >= 0.9, "{n}:1 utilisation {}", r.utilisation);
    assert!(r.below_kmax >= 0.8, "{n}:1 queue below Kmax {} of the time", r.below_kmax);
    assert_eq!((r.bottleneck.dropped, r.failed, r.timeouts), (0, 0, 0), "{n}:1 lossless");
    assert!(r.cnps > 0 && r.cnps == r.cnps_sent, "{n}:1 CNPs {}/{}", r.cnps_sent, r.cnps);
    // PFC fired at most in the first burst, before DCQCN had cut anything
    let pauses: u64 = r.nics.iter().map(|x| x.pauses_received).sum();
    assert!(pauses <= 8 * n as u64, "{n}:1 {pauses} PAUSEs");
}

#[test]
fn dcqcn_shares_a_2_to_1_incast_fairly_with_a_short_queue() {
    let cfg = FlowsConfig { duration: ms(40), ..FlowsConfig::incast(2) };
    let r = incast::run(&cfg);
    check_dcqcn(2, &r);
    // and without DCQCN, PFC keeps it lossless by pausing the senders
    // half the time, the queue above Kmax throughout
    let off = incast::run(&FlowsConfig { congestion: CongestionConfig::off(), ..cfg });
    assert_eq!((off.bottleneck.dropped, off.cnps_sent), (0, 0));
    assert!(off.below_kmax < 0.05, "{}", off.below_kmax);
    for nic in &off.nics[1..] {
        assert!(nic.paused >= ms(15) && nic.pauses_received > 1000, "{nic:?}");
    }
}

#[test]
fn dcqcn_shares_an_8_to_1_incast_fairly_and_pfc_alone_pauses_it() {
    let cfg = FlowsConfig { duration: ms(40), ..FlowsConfig::incast(8) };
    let r = incast::run(&cfg);
    check_dcqcn(8, &r);
    let off = incast::run(&FlowsConfig { congestion: CongestionConfig::off(), ..cfg.clone() });
    assert_eq!(off.bottleneck.dropped, 0, "PFC: lossless");
    assert!(off.below_kmax < 0.05);
    let paused: Duration = off.nics[1..].iter().map(|x| x.paused).sum();
    assert!(paused >= 8 * ms(30), "the senders spent {paused:?} paused");
    // tail drop instead of PFC: without DCQCN the incast is unfair and
    // retransmits; with it, fair again
    let mut drop = cfg.clone();
    drop.switch.pfc = None;
    let d_on = incast::run(&drop);
    let d_off = incast::run(&FlowsConfig { congestion: CongestionConfig::off(), ..drop });
    assert!(d_off.jain < 0.8 && d_off.bottleneck.dropped > 100 && d_off.retries > 0, "{d_off:?}");
    assert!(d_on.jain >= 0.98, "{:?}", d_on.rates);
    assert!(d_on.bottleneck.dropped * 4 < d_off.bottleneck.dropped);
}

#[test]
fn a_pause_blocks_an_innocent_flow_on_the_same_link() {
    // hosts 2..=5 into host 0; host 2 also sends to host 1 (the victim flow)
    let mut cfg = FlowsConfig::incast(5);
    cfg.flows = (2..=5).map(|from| Flow { from, to: 0 }).collect();
    cfg.flows.push(Flow { from: 2, to: 1 });
    cfg.duration = ms(20);
    let off = incast::run(&FlowsConfig { congestion: CongestionConfig::off(), ..cfg.clone() });
    let on = incast::run(&cfg);
    let (victim_off, victim_on) = (off.rates[4], on.rates[4]);
    // with PFC alone host 2's link is paused for the incast, and the flow
    // to the idle host 1 with it; with DCQCN it takes what the incast leaves
    assert!(victim_off < 15.0, "victim at {victim_off} Gb/s with PFC alone");
    assert!(victim_on > 25.0, "victim at {victim_on} Gb/s with DCQCN");
    assert!(off.nics[2].pauses_received > 100 && on.nics[2].pauses_received < 20);
}

#[test]
fn a_receiver_that_stops_draining_pauses_the_fabric_behind_it() {
    // leaf 0: hosts 0, 1; leaf 1: hosts 2, 3; one spine. 2 -> 0 and 3 -> 1
    // both cross the spine; host 0 stops draining from 4 to 12 ms
    let mut cfg = FlowsConfig::incast(1);
    cfg.topology = Topology::LeafSpine { leaves: 2, spines: 1, hosts_per_leaf: 2 };
    cfg.flows = vec![Flow { from: 2, to: 0 }, Flow { from: 3, to: 1 }];
    cfg.congestion = CongestionConfig::off();
    cfg.duration = ms(16);
    cfg.stalls = vec![(0, ms(4), ms(12))];
    // enough in flight (2 MiB per flow) to fill every buffer on the way
    cfg.outstanding = 32;
    let r = incast::run_with_pcap(&cfg);
    let before = r.rate_between(1, ms(1), ms(4));
    let during = r.rate_between(1, ms(6), ms(12));
    let after = r.rate_between(1, ms(13), ms(16));
    assert!(before > 15.0, "the innocent flow 3 -> 1 before: {before} Gb/s");
    assert!(during < 0.1 * before, "during the storm: {during} Gb/s");
    assert!(after > 15.0, "after: {after} Gb/s");
    // the pauses went hop by hop: host 0 -> leaf 0 -> spine -> leaf 1 -> hosts 2, 3
    let sent = |sw: usize| {
        r.ports.iter().filter(|(at, _)| at.0 == sw).map(|(_, s)| s.pauses_sent).sum::<u64>()
    };
    assert!(r.nics[0].pauses_sent > 0);
    assert!(sent(0) > 0 && sent(2) > 0 && sent(1) > 0, "leaf 0, spine, leaf 1");
    assert!(r.nics[3].pauses_received > 0, "the innocent sender was paused");
    assert_eq!(r.ports.iter().map(|(_, s)| s.dropped).sum::<u64>(), 0, "lossless");
    assert_eq!(r.failed, 0);
    // the PAUSE frames are in the capture: MAC control 0x8808, PFC opcode
    let frames = roce_pcap::read_capture(&r.pcap).expect("a pcap");
    let pauses =
        frames.iter().filter(|f| f.data.get(12..16) == Some(&[0x88, 0x08, 0x01, 0x01])).count();
    assert!(pauses > 10, "{pauses} PAUSE frames in the capture");
    // without PFC the stalled host holds up only its own traffic
    let mut drop = cfg.clone();
    drop.switch.pfc = None;
    let d = incast::run(&drop);
    assert!(d.rate_between(1, ms(6), ms(12)) > 15.0, "no storm without PFC");
    assert_eq!(d.ports.iter().map(|(_, s)| s.pauses_sent).sum::<u64>(), 0);
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let cfg = FlowsConfig { duration: ms(4), ..FlowsConfig::incast(3) };
    let (a, b) = (incast::run(&cfg), incast::run(&cfg));
    assert_eq!(a.samples, b.samples);
    assert_eq!((a.cnps, a.bottleneck, a.completed), (b.cnps, b.bottleneck, b.completed));
    // pinned: what this model does with seed 1 (a change to DCQCN, the
    // switch or the core shows here first; re-pin with the numbers printed)
    let got = (a.completed, a.cnps, a.bottleneck.marked, a.bottleneck.max_queue);
    eprintln!("pinned run: {got:?}");
    assert_eq!(got, PINNED, "the seeded 3:1 incast changed");
}

const PINNED: (u64, u64, u64, usize) = (145, 12, 200, 382632);

#[test]
fn switch_mechanics() {
    // a PFC frame: 01:80:c2:00:00:01, 0x8808, opcode 0x0101, class 3
    let f = pfc_frame([2, 0, 0, 0, 0, 1], 0xffff);
    assert_eq!(f.len(), 60);
    assert_eq!(&f[..6], &[0x01, 0x80, 0xc2, 0, 0, 1]);
    assert_eq!(&f[12..18], &[0x88, 0x08, 0x01, 0x01, 0x00, 0x08]);
    assert_eq!(&f[18 + 6..18 + 8], &[0xff, 0xff], "priority 3's quanta");
    assert!(f[18..24].iter().chain(&f[26..34]).all(|&b| b == 0));
    // Jain's index
    assert!((jain(&[5.0, 5.0, 5.0]) - 1.0).abs() < 1e-12);
    assert!((jain(&[10.0, 0.0]) - 0.5).abs() < 1e-12);
    // a host to no switch, a frame to no host: counted, no panic
    let mut net: SwitchedNet<NullNode> = SwitchedNet::new(1);
    let sw = net.add_switch(SwitchConfig { buffer: 1000, red: None, pfc: None });
    let h = net.add_host("10.0.0.1".parse().unwrap(), NullNode);
    net.connect_host(h, sw, LinkSpec::gbps(10, Duration::from_micros(1)));
    assert!(net.run_until(roce_emulator::Instant::from_millis(1), 1000));
    assert_eq!(net.port_to_host(sw, h), Some(0));
}

#[test]
fn absurd_pfc_settings_are_survived() {
    use roce_sim::switched::Pfc;
    // no room at all and PAUSEs of 0 quanta: every frame is dropped and
    // counted, nothing panics, nothing completes (yet: RC keeps retrying)
    let mut cfg = FlowsConfig { duration: ms(2), ..FlowsConfig::incast(2) };
    cfg.switch.pfc = Some(Pfc { xoff: 0, xon: 0, headroom: 0, quanta: 0 });
    let r = incast::run(&cfg);
    assert!(r.bottleneck.dropped > 0, "dropped at the egress they were for");
    assert_eq!((r.completed, r.failed), (0, 0));
    // XON above XOFF and the longest PAUSE: the senders are paused and
    // resumed, nothing is lost, the WRITEs complete
    cfg.switch.pfc = Some(Pfc { xoff: 1000, xon: 50_000, headroom: 100_000, quanta: u16::MAX });
    cfg.duration = ms(5);
    let r = incast::run(&cfg);
    assert_eq!(r.ports.iter().map(|p| p.1.dropped).sum::<u64>(), 0);
    assert!(r.completed > 0 && r.failed == 0, "{} {}", r.completed, r.failed);
    assert!(r.nics[1].pauses_received > 0);
}
