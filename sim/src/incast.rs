//! Traffic on a switched fabric ([`crate::switched`]): hosts (each an
//! `Hca`) on a star or a two-level leaf/spine topology, RC flows that each
//! stream RDMA WRITEs from one host to another, optionally a host that
//! stops draining for a while; a report of each flow's rate, the queues,
//! the pauses and the devices' counters.
//!
//! The incast ([`FlowsConfig::incast`]): `senders` hosts into one through
//! one switch, all links at the same rate, so the switch port to the
//! receiver is the bottleneck. With DCQCN the senders' rates converge to a
//! fair share and the queue stays short; without it the queue fills, and
//! either PFC pauses the senders or the switch drops and RC retransmits.
//!
//! Deterministic: a seed, virtual time, and every device an `Hca`.

use crate::switched::{jain, LinkSpec, Pfc, PortStats, Red, Sample, SwitchConfig, SwitchedNet};
use core::net::{IpAddr, Ipv4Addr};
use core::time::Duration;
use roce_emulator::qp_attr::{AccessFlags, AhAttr, PathMtu, QpAttr, QpCap, QpState, QpType};
use roce_emulator::wr::{SendFlags, SendWr, WcStatus, WrOpcode};
use roce_emulator::{CongestionConfig, CqHandle, Hca, HcaConfig, Instant, MrInfo, QpInitAttr};
use roce_packet::Qpn;

/// How the hosts are wired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// `hosts` hosts on one switch.
    Star { hosts: usize },
    /// `leaves` switches with `hosts_per_leaf` hosts each, every leaf wired
    /// to each of `spines` switches (hosts numbered leaf by leaf).
    LeafSpine { leaves: usize, spines: usize, hosts_per_leaf: usize },
}

impl Topology {
    /// Hosts in it.
    pub fn hosts(&self) -> usize {
        match *self {
            Topology::Star { hosts } => hosts,
            Topology::LeafSpine { leaves, hosts_per_leaf, .. } => leaves * hosts_per_leaf,
        }
    }
}

/// An RC flow: host `from` streams WRITEs to host `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    pub from: usize,
    pub to: usize,
}

/// Traffic on a topology: who sends to whom, over what, for how long.
#[derive(Clone, Debug)]
pub struct FlowsConfig {
    pub topology: Topology,
    pub flows: Vec<Flow>,
    /// Every link's rate, Gb/s.
    pub gbps: u64,
    /// Every link's delay.
    pub delay: Duration,
    pub switch: SwitchConfig,
    /// The devices' congestion management (its line rate is set to the
    /// links').
    pub congestion: CongestionConfig,
    /// Virtual time to run.
    pub duration: Duration,
    /// Bytes per WRITE, and WRITEs each flow keeps in flight.
    pub msg: u32,
    pub outstanding: u32,
    pub mtu: PathMtu,
    pub seed: u64,
    /// Samples of rates and queues.
    pub sample_every: Duration,
    /// Hosts that stop draining: `(host, from, until)`.
    pub stalls: Vec<(usize, Duration, Duration)>,
    /// Flows that start late: `(flow, at)` (the others start at 0).
    pub starts: Vec<(usize, Duration)>,
}

impl FlowsConfig {
    /// `senders` hosts (1..=senders) into host 0 on one switch at 40 Gb/s,
    /// 1 µs links, DCQCN's RED profile (Kmin 5 KB, Kmax 200 KB, Pmax 1 %)
    /// and PFC (XOFF 120 KB per ingress port, XON 100 KB, 40 KB headroom),
    /// 64 KiB WRITEs, 4 in flight per flow, MTU 4096, 20 ms, DCQCN on with
    /// the paper's parameters.
    pub fn incast(senders: usize) -> FlowsConfig {
        FlowsConfig {
            topology: Topology::Star { hosts: senders + 1 },
            flows: (1..=senders).map(|from| Flow { from, to: 0 }).collect(),
            gbps: 40,
            delay: Duration::from_micros(1),
            switch: SwitchConfig {
                buffer: 1 << 20,
                red: Some(Red { kmin: 5_000, kmax: 200_000, pmax: 0.01 }),
                pfc: Some(Pfc { xoff: 120_000, xon: 100_000, headroom: 40_000, quanta: 65535 }),
            },
            congestion: CongestionConfig::paper(),
            duration: Duration::from_millis(20),
            msg: 64 * 1024,
            outstanding: 4,
            mtu: PathMtu::Mtu4096,
            seed: 1,
            sample_every: Duration::from_micros(50),
            stalls: Vec::new(),
            starts: Vec::new(),
        }
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct FlowsReport {
    /// Each flow's mean delivered rate over the second half, Gb/s (frame
    /// bits, as the links count them).
    pub rates: Vec<f64>,
    /// Jain's index of `rates`.
    pub jain: f64,
    /// The port towards flow 0's receiver on its switch (the incast's
    /// bottleneck): its statistics, its use over the second half
    /// (transmitted / line rate), and the share of the second half's
    /// samples with its queue below RED's Kmax (1 without RED).
    pub bottleneck: PortStats,
    pub utilisation: f64,
    pub below_kmax: f64,
    /// Every switch port: `((switch, port), stats)`.
    pub ports: Vec<((usize, usize), PortStats)>,
    /// Each host's NIC (PAUSEs received, time paused).
    pub nics: Vec<PortStats>,
    /// Each flow's sender QP's DCQCN rate at the end, Mb/s (`None`: line
    /// rate).
    pub end_rates: Vec<Option<u64>>,
    /// WRITEs completed, and completed with an error, over all flows.
    pub completed: u64,
    pub failed: u64,
    /// Over all hosts: CNPs sent and handled, retransmissions started,
    /// retransmit timeouts.
    pub cnps_sent: u64,
    pub cnps: u64,
    pub retries: u64,
    pub timeouts: u64,
    /// The samples (rates per flow, queues).
    pub samples: Vec<Sample>,
    /// Each flow's (sender address, receiver address, receiver QPN): the
    /// keys of `samples`' flows.
    pub keys: Vec<crate::switched::FlowKey>,
    /// The recorded capture (with [`run_with_pcap`]).
    pub pcap: Vec<u8>,
}

struct Sender {
    host: usize,
    start: Instant,
    cq: CqHandle,
    qpn: Qpn,
    mr: MrInfo,
    remote: (u64, roce_packet::RKey),
    in_flight: u32,
}

/// Host `i`'s address: 10.9.x.y.
pub fn addr(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 9, (i / 250) as u8, (i % 250 + 1) as u8))
}

fn device(i: usize, cfg: &FlowsConfig) -> Hca {
    let mut cc = cfg.congestion;
    cc.line_rate_mbps = cfg.gbps * 1000;
    Hca::new(HcaConfig {
        congestion: cc,
        active_mtu: cfg.mtu,
        ..HcaConfig::new(format!("h{i}"), addr(i), cfg.seed.wrapping_add(i as u64))
    })
}

fn qp(h: &mut Hca, pd: roce_emulator::PdHandle, cq: CqHandle) -> Qpn {
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        qp_type: QpType::Rc,
        cap,
        sq_sig_all: false,
        srq: None,
    };
    h.create_qp(init).expect("create_qp")
}

fn connect(h: &mut Hca, q: Qpn, peer: IpAddr, dest: Qpn, mtu: PathMtu) {
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let steps = [
        QpAttr::new().state(QpState::Init).pkey_index(0).port(1).access_flags(acc),
        QpAttr::new()
            .state(QpState::Rtr)
            .ah(AhAttr::new(peer))
            .mtu(mtu)
            .dest_qpn(dest.value())
            .rq_psn(0)
            .max_dest_rd_atomic(1)
            .min_rnr_timer(1),
        // timeout 14 (67 ms): a retransmission here is a loss, not a slow ACK
        QpAttr::new()
            .state(QpState::Rts)
            .sq_psn(0)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .max_rd_atomic(1),
    ];
    for a in steps {
        h.modify_qp(q, &a).expect("modify_qp");
    }
}

/// The hosts with their QPs, and each flow's sender side.
fn build(cfg: &FlowsConfig) -> (Vec<Hca>, Vec<Sender>) {
    let n = cfg.topology.hosts();
    let mut hosts: Vec<Hca> = (0..n).map(|i| device(i, cfg)).collect();
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let objs: Vec<_> = hosts
        .iter_mut()
        .map(|h| {
            let pd = h.alloc_pd().expect("pd");
            let cq = h.create_cq(4096).expect("cq");
            let mr = h.reg_mr(pd, cfg.msg as usize, acc).expect("mr");
            (pd, cq, mr)
        })
        .collect();
    let mut senders = Vec::new();
    for f in &cfg.flows {
        let (from, to) = (f.from % n, f.to % n);
        // a CQ of its own: the flow's completions, whatever else the host sends
        let cq = hosts[from].create_cq(256).expect("cq");
        let q = qp(&mut hosts[from], objs[from].0, cq);
        let rq = qp(&mut hosts[to], objs[to].0, objs[to].1);
        connect(&mut hosts[from], q, addr(to), rq, cfg.mtu);
        connect(&mut hosts[to], rq, addr(from), q, cfg.mtu);
        let rmr = &objs[to].2;
        let i = senders.len();
        let start = cfg.starts.iter().find(|(f, _)| *f == i).map_or(Duration::ZERO, |x| x.1);
        senders.push(Sender {
            host: from,
            start: Instant::ZERO + start,
            cq,
            qpn: q,
            mr: objs[from].2,
            remote: (rmr.addr, rmr.rkey),
            in_flight: 0,
        });
    }
    (hosts, senders)
}

/// Wire the hosts as the topology says; returns each host's switch.
fn wire(net: &mut SwitchedNet<Hca>, hosts: Vec<Hca>, cfg: &FlowsConfig) -> Vec<usize> {
    let link = LinkSpec::gbps(cfg.gbps, cfg.delay);
    let ids: Vec<usize> =
        hosts.into_iter().enumerate().map(|(i, h)| net.add_host(addr(i), h)).collect();
    match cfg.topology {
        Topology::Star { .. } => {
            let sw = net.add_switch(cfg.switch);
            ids.iter()
                .map(|&h| {
                    net.connect_host(h, sw, link);
                    sw
                })
                .collect()
        }
        Topology::LeafSpine { leaves, spines, hosts_per_leaf } => {
            let leaf: Vec<usize> = (0..leaves).map(|_| net.add_switch(cfg.switch)).collect();
            let spine: Vec<usize> = (0..spines).map(|_| net.add_switch(cfg.switch)).collect();
            for &l in &leaf {
                for &s in &spine {
                    net.connect_switches(l, s, link);
                }
            }
            ids.iter()
                .map(|&h| {
                    let l = leaf[h / hosts_per_leaf.max(1)];
                    net.connect_host(h, l, link);
                    l
                })
                .collect()
        }
    }
}

/// Run the flows.
pub fn run(cfg: &FlowsConfig) -> FlowsReport {
    run_inner(cfg, false)
}

/// Run the flows and record what the hosts received (PAUSE frames
/// included) in [`FlowsReport::pcap`].
pub fn run_with_pcap(cfg: &FlowsConfig) -> FlowsReport {
    run_inner(cfg, true)
}

fn run_inner(cfg: &FlowsConfig, pcap: bool) -> FlowsReport {
    let (hosts, mut senders) = build(cfg);
    let mut net: SwitchedNet<Hca> = SwitchedNet::new(cfg.seed);
    let home = wire(&mut net, hosts, cfg);
    if pcap {
        net.record_pcap();
    }
    net.sample_every(cfg.sample_every);
    for &(h, from, until) in &cfg.stalls {
        net.stall_host_between(h, Instant::ZERO + from, Instant::ZERO + until);
    }
    let to0 = cfg.flows.first().map_or(0, |f| f.to % cfg.topology.hosts());
    let port = net.port_to_host(home[to0], to0).unwrap_or(0);
    let step = Duration::from_micros(20);
    let (half, end) = (Instant::ZERO + cfg.duration / 2, Instant::ZERO + cfg.duration);
    let (mut completed, mut failed) = (0u64, 0u64);
    let mut at_half = None;
    let mut t = Instant::ZERO;
    while t < end {
        for s in senders.iter_mut() {
            let h = net.host_mut(s.host);
            for wc in h.poll_cq(s.cq, 256).unwrap_or_default() {
                s.in_flight = s.in_flight.saturating_sub(1);
                match wc.status {
                    WcStatus::Success => completed += 1,
                    _ => failed += 1,
                }
            }
            if t >= s.start {
                post(h, s, cfg);
            }
        }
        t = (t + step).min(end);
        net.run_until(t, 10_000_000);
        if at_half.is_none() && t >= half {
            at_half = Some((t, net.port_stats(home[to0], port)));
        }
    }
    let mut r = report(&net, cfg, (home[to0], port), at_half, &senders);
    (r.completed, r.failed) = (completed, failed);
    if pcap {
        r.pcap = net.pcap_bytes();
    }
    r
}

/// Keep `cfg.outstanding` WRITEs of flow `s` in flight.
fn post(h: &mut Hca, s: &mut Sender, cfg: &FlowsConfig) {
    while s.in_flight < cfg.outstanding {
        let wr = SendWr::new(0, WrOpcode::RdmaWrite)
            .sge(s.mr.addr, cfg.msg, s.mr.lkey)
            .remote(s.remote.0, s.remote.1)
            .with_flags(SendFlags::SIGNALED);
        if h.post_send(s.qpn, wr).is_err() {
            break;
        }
        s.in_flight += 1;
    }
}

fn report(
    net: &SwitchedNet<Hca>,
    cfg: &FlowsConfig,
    (sw, port): (usize, usize),
    at_half: Option<(Instant, PortStats)>,
    senders: &[Sender],
) -> FlowsReport {
    let (t_half, half_stats) = at_half.unwrap_or((Instant::ZERO, PortStats::default()));
    let secs = (net.now() - t_half).as_secs_f64().max(1e-9);
    let second: Vec<&Sample> = net.samples().iter().filter(|s| s.at > t_half).collect();
    let n = cfg.topology.hosts();
    let keys: Vec<crate::switched::FlowKey> = cfg
        .flows
        .iter()
        .zip(senders)
        .map(|(f, s)| (addr(f.from % n), addr(f.to % n), remote_qpn(net, s)))
        .collect();
    let every = cfg.sample_every.as_secs_f64();
    let rates: Vec<f64> = keys
        .iter()
        .map(|k| {
            let bits: f64 = second
                .iter()
                .flat_map(|s| s.flows.iter())
                .filter(|(x, _)| x == k)
                .map(|(_, bps)| bps * every)
                .sum();
            bits / secs / 1e9
        })
        .collect();
    let bottleneck = net.port_stats(sw, port);
    let line = cfg.gbps as f64 * 1e9;
    let kmax = cfg.switch.red.map_or(usize::MAX, |r| r.kmax);
    let below = second
        .iter()
        .filter(|s| s.queues.iter().any(|&(at, q)| at == (sw, port) && q < kmax))
        .count();
    let (mut cnps_sent, mut cnps, mut retries, mut timeouts) = (0, 0, 0, 0);
    for h in 0..n {
        let c = net.host(h).counters();
        cnps_sent += c.np_cnp_sent;
        cnps += c.rp_cnp_handled;
        retries += c.completer_retry_err;
        timeouts += c.retransmit_timeouts;
    }
    FlowsReport {
        jain: jain(&rates),
        rates,
        bottleneck,
        utilisation: (bottleneck.tx_bytes - half_stats.tx_bytes) as f64 * 8.0 / secs / line,
        below_kmax: below as f64 / second.len().max(1) as f64,
        ports: net.all_port_stats(),
        nics: (0..n).map(|h| net.nic_stats(h)).collect(),
        end_rates: senders
            .iter()
            .map(|s| net.host(s.host).qp_congestion(s.qpn).and_then(|c| c.1))
            .collect(),
        completed: 0,
        failed: 0,
        cnps_sent,
        cnps,
        retries,
        timeouts,
        samples: net.samples().to_vec(),
        keys,
        pcap: Vec::new(),
    }
}

/// The receiver QPN of flow `s` (its sender QP's destination).
fn remote_qpn(net: &SwitchedNet<Hca>, s: &Sender) -> u32 {
    net.host(s.host).query_qp(s.qpn).map(|(a, _)| a.dest_qp_num).unwrap_or(0)
}

impl FlowsReport {
    /// Flow `i`'s mean delivered rate between `from` and `until`, Gb/s
    /// (from the samples).
    pub fn rate_between(&self, i: usize, from: Duration, until: Duration) -> f64 {
        let Some(k) = self.keys.get(i) else { return 0.0 };
        let (a, b) = (Instant::ZERO + from, Instant::ZERO + until);
        let bits: f64 = self
            .samples
            .iter()
            .filter(|s| s.at > a && s.at <= b)
            .flat_map(|s| s.flows.iter())
            .filter(|(x, _)| x == k)
            .map(|(_, bps)| *bps)
            .sum();
        let n = self.samples.iter().filter(|s| s.at > a && s.at <= b).count();
        bits / n.max(1) as f64 / 1e9
    }
}
