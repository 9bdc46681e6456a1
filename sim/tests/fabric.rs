//! The simulated fabric with small fake nodes: determinism, each fault
//! kind, targeted filters, link timing, MTU, timers, bounded runs and the
//! pcap tap.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::time::Duration;
use roce_emulator::{Datagram, Instant, SansIo};
use roce_packet::frame::LinkType;
use roce_packet::frame::{ethernet_frame, parse_frame};
use roce_packet::{
    AethRepr, BthRepr, Msn, Opcode, Psn, Qpn, RoceRepr, Syndrome, UdpEndpoints, ROCE_V2_PORT,
};
use roce_pcap::read_capture;
use roce_sim::packet::PacketBuilder;
use roce_sim::{
    ip_len, mac_for, seed_from_env, wire_len, Action, Fabric, FaultConfig, Filter, LinkConfig,
    Match, NodeId, NullNode, SeedGuard, TapPoint, SEED_ENV,
};
use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

mod switched;

// ------------------------------------------------------------ helpers

fn v4(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn endpoints(src: IpAddr, dst: IpAddr) -> UdpEndpoints {
    UdpEndpoints { src, dst, src_port: 49152, dst_port: ROCE_V2_PORT }
}

/// A valid RoCEv2 datagram (correct ICRC) with `payload` after the headers.
fn roce(src: IpAddr, dst: IpAddr, op: Opcode, psn: u32, payload: &[u8]) -> Datagram {
    let info = op.info().expect("known opcode");
    let mut repr = RoceRepr {
        bth: BthRepr {
            opcode: op,
            dest_qp: Qpn::new(0x11),
            psn: Psn::new(psn),
            pad_count: roce_packet::pad_for(payload.len()),
            ..BthRepr::default()
        },
        payload_len: payload.len(),
        ..RoceRepr::default()
    };
    if info.headers.contains(roce_packet::ExtHeader::Aeth) {
        repr.aeth = Some(AethRepr {
            syndrome: Syndrome::Ack { credit: Syndrome::NO_CREDIT },
            msn: Msn::new(psn),
        });
    }
    if info.headers.contains(roce_packet::ExtHeader::Reth) {
        repr.reth = Some(roce_packet::RethRepr {
            va: 0x1000,
            rkey: roce_packet::RKey::new(7),
            dma_len: payload.len() as u32,
        });
    }
    PacketBuilder::endpoints(endpoints(src, dst)).datagram(&repr, payload)
}

/// A SEND ONLY carrying a 4-byte big-endian counter, PSN = counter.
fn counted(src: IpAddr, dst: IpAddr, n: u32) -> Datagram {
    roce(src, dst, Opcode::RC_SEND_ONLY, n, &n.to_be_bytes())
}

/// The counter of a datagram built by [`counted`] (the PSN; survives
/// payload corruption only if the BTH was not hit, so tests that corrupt
/// don't use it).
fn psn_of(d: &Datagram) -> u32 {
    u32::from_be_bytes([0, d.payload[9], d.payload[10], d.payload[11]])
}

fn icrc_ok(d: &Datagram) -> bool {
    PacketBuilder::of(d).icrc_ok(&d.payload)
}

/// Sends scheduled datagrams: each is handed over when its time comes,
/// using the node's timer.
#[derive(Default)]
struct Sender {
    schedule: VecDeque<(Instant, Datagram)>,
    outbox: VecDeque<Datagram>,
    fired_at: Vec<Instant>,
}

impl Sender {
    fn new(items: impl IntoIterator<Item = (Instant, Datagram)>) -> Sender {
        let mut v: Vec<_> = items.into_iter().collect();
        v.sort_by_key(|(t, _)| *t);
        Sender { schedule: v.into(), ..Sender::default() }
    }
    /// `n` counted datagrams from `src` to `dst`, one every `gap`.
    fn counting(src: IpAddr, dst: IpAddr, n: u32, gap: Duration) -> Sender {
        Sender::new((0..n).map(|i| (Instant::ZERO + gap * i, counted(src, dst, i))))
    }
}

impl SansIo for Sender {
    fn handle_datagram(&mut self, _now: Instant, _d: Datagram) {}
    fn poll_transmit(&mut self, _now: Instant) -> Option<Datagram> {
        self.outbox.pop_front()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.schedule.front().map(|(t, _)| *t)
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.fired_at.push(now);
        while self.schedule.front().is_some_and(|(t, _)| *t <= now) {
            if let Some((_, d)) = self.schedule.pop_front() {
                self.outbox.push_back(d);
            }
        }
    }
}

/// Records everything it receives, with the arrival time.
#[derive(Default)]
struct Sink {
    got: Vec<(Instant, Datagram)>,
}

impl SansIo for Sink {
    fn handle_datagram(&mut self, now: Instant, d: Datagram) {
        self.got.push((now, d));
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Datagram> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

type Shared<T> = Arc<Mutex<T>>;

fn shared<T>(t: T) -> Shared<T> {
    Arc::new(Mutex::new(t))
}

/// A fabric with a sender at 10.0.0.1 and a sink at 10.0.0.2.
fn pair(seed: u64, sender: Sender) -> (Fabric, Shared<Sender>, Shared<Sink>) {
    let mut f = Fabric::new(seed);
    let s = shared(sender);
    let k = shared(Sink::default());
    f.add_node(v4(1), s.clone());
    f.add_node(v4(2), k.clone());
    (f, s, k)
}

/// (arrival ns, payload bytes) of everything the sink got.
fn trace(k: &Shared<Sink>) -> Vec<(u64, Vec<u8>)> {
    k.lock().unwrap().got.iter().map(|(t, d)| (t.as_nanos(), d.payload.to_vec())).collect()
}

// ------------------------------------------------------------ determinism

fn chaotic_run(seed: u64) -> (Vec<(u64, Vec<u8>)>, roce_sim::FabricStats) {
    let (mut f, _s, k) = pair(seed, Sender::counting(v4(1), v4(2), 500, Duration::from_nanos(300)));
    f.set_faults(FaultConfig {
        drop: 0.1,
        duplicate: 0.1,
        reorder: 0.1,
        corrupt: 0.05,
        jitter: Duration::from_nanos(700),
        ..FaultConfig::default()
    });
    assert!(f.run_until_idle(10_000));
    (trace(&k), f.stats().clone())
}

#[test]
fn same_seed_same_trace_different_seed_different_trace() {
    let (a, sa) = chaotic_run(7);
    let (b, sb) = chaotic_run(7);
    assert_eq!(a, b, "same seed must give identical deliveries and timestamps");
    assert_eq!(sa, sb);
    assert!(sa.dropped_loss > 0 && sa.duplicated > 0 && sa.reorder_held > 0 && sa.corrupted > 0);
    assert_eq!(sa.transmitted, 500);
    assert_eq!(sa.delivered, 500 - sa.dropped() + sa.duplicated);
    assert_eq!(a.len() as u64, sa.delivered);

    let (c, sc) = chaotic_run(8);
    assert_ne!(a, c, "a different seed must give a different run");
    assert_ne!(sa, sc);
}

#[test]
fn seed_from_env_and_guard() {
    // The only test that touches the variable.
    std::env::set_var(SEED_ENV, "0x2a");
    assert_eq!(seed_from_env(5), 42);
    assert_eq!(Fabric::from_env_seed(5).seed(), 42);
    std::env::set_var(SEED_ENV, "1234");
    assert_eq!(seed_from_env(5), 1234);
    std::env::set_var(SEED_ENV, "not a number");
    assert_eq!(seed_from_env(5), 5);
    std::env::remove_var(SEED_ENV);
    assert_eq!(seed_from_env(5), 5);
    assert_eq!(Fabric::new(99).seed(), 99);
    assert_eq!(SeedGuard::new(3).seed(), 3);
    // A panicking thread prints the replay line from the guard's Drop.
    let r = std::thread::spawn(|| {
        let _g = SeedGuard::new(77);
        panic!("deliberate");
    })
    .join();
    assert!(r.is_err());
}

// ------------------------------------------------------------ random faults

#[test]
fn loss_rate_matches_probability() {
    const N: u32 = 10_000;
    let (mut f, _s, k) = pair(2024, Sender::counting(v4(1), v4(2), N, Duration::from_nanos(100)));
    f.set_faults(FaultConfig::lossy(0.1));
    assert!(f.run_until_idle(100_000));
    let st = f.stats();
    // Binomial(10000, 0.1): sd = 30; allow 5 sd.
    assert!((850..=1150).contains(&st.dropped_loss), "dropped {}", st.dropped_loss);
    assert_eq!(st.dropped(), st.dropped_loss);
    assert_eq!(st.delivered + st.dropped_loss, N as u64);
    assert_eq!(k.lock().unwrap().got.len() as u64, st.delivered);
    assert_eq!((st.duplicated, st.corrupted, st.reorder_held), (0, 0, 0));
}

#[test]
fn duplicates_are_counted_and_seen_twice() {
    const N: u32 = 2_000;
    let (mut f, _s, k) = pair(5, Sender::counting(v4(1), v4(2), N, Duration::from_nanos(500)));
    f.set_faults(FaultConfig { duplicate: 0.2, ..FaultConfig::default() });
    assert!(f.run_until_idle(100_000));
    let st = f.stats().clone();
    assert!((300..=500).contains(&st.duplicated), "duplicated {}", st.duplicated);
    let got = trace(&k);
    assert_eq!(got.len() as u64, N as u64 + st.duplicated);
    let mut seen = BTreeSet::new();
    let mut twice = 0;
    for (_, p) in &got {
        if !seen.insert(p.clone()) {
            twice += 1;
        }
    }
    assert_eq!(twice, st.duplicated);
    assert_eq!(seen.len(), N as usize);
    // Copies carry the same, valid bytes.
    assert!(k.lock().unwrap().got.iter().all(|(_, d)| icrc_ok(d)));
}

#[test]
fn reordering_is_counted_and_visible_at_sink() {
    const N: u32 = 1_000;
    let (mut f, _s, k) = pair(11, Sender::counting(v4(1), v4(2), N, Duration::from_micros(1)));
    f.set_faults(FaultConfig {
        reorder: 0.1,
        reorder_delay: Duration::from_micros(5),
        ..FaultConfig::default()
    });
    assert!(f.run_until_idle(100_000));
    let st = f.stats().clone();
    assert!((60..=140).contains(&st.reorder_held), "held {}", st.reorder_held);
    let k = k.lock().unwrap();
    let order: Vec<u32> = k.got.iter().map(|(_, d)| psn_of(d)).collect();
    assert_eq!(order.len(), N as usize);
    // Count inversions as the fabric defines them: arrival of a datagram
    // sent before the latest one delivered.
    let mut max = None;
    let mut late = 0;
    for &p in &order {
        match max {
            Some(m) if p < m => late += 1,
            _ => max = Some(p),
        }
    }
    assert!(late > 0);
    assert_eq!(late, st.reordered);
    // A held datagram arrives exactly latency + hold after it was sent.
    for (t, d) in &k.got {
        let sent = Duration::from_micros(psn_of(d) as u64);
        let flight = t.as_nanos() - sent.as_nanos() as u64;
        assert!(flight == 2_000 || flight == 7_000, "flight {flight} ns");
    }
    let held = k.got.iter().filter(|(t, d)| t.as_nanos() - psn_of(d) as u64 * 1000 == 7_000);
    assert_eq!(held.count() as u64, st.reorder_held);
}

#[test]
fn corrupted_datagrams_fail_the_icrc() {
    for seed in 0..20 {
        let (mut f, s, k) =
            pair(seed, Sender::counting(v4(1), v4(2), 100, Duration::from_micros(1)));
        let originals: Vec<Datagram> =
            s.lock().unwrap().schedule.iter().map(|(_, d)| d.clone()).collect();
        f.set_faults(FaultConfig { corrupt: 1.0, ..FaultConfig::default() });
        assert!(f.run_until_idle(10_000));
        assert_eq!(f.stats().corrupted, 100);
        let k = k.lock().unwrap();
        assert_eq!(k.got.len(), 100);
        for ((_, got), orig) in k.got.iter().zip(&originals) {
            assert!(!icrc_ok(got), "seed {seed}: a corrupted datagram passed the ICRC");
            assert!(icrc_ok(orig));
            let flipped: u32 = got
                .payload
                .iter()
                .zip(orig.payload.iter())
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(flipped, 1, "exactly one bit differs");
            assert_eq!(got.payload[4], orig.payload[4], "BTH byte 4 is not ICRC-covered");
        }
    }
}

#[test]
fn no_faults_means_no_changes() {
    let (mut f, s, k) = pair(1, Sender::counting(v4(1), v4(2), 50, Duration::from_micros(1)));
    let originals: Vec<Datagram> =
        s.lock().unwrap().schedule.iter().map(|(_, d)| d.clone()).collect();
    assert!(f.run_until_idle(1_000));
    let got: Vec<Datagram> = k.lock().unwrap().got.iter().map(|(_, d)| d.clone()).collect();
    assert_eq!(got, originals);
    assert_eq!(f.stats().dropped() + f.stats().duplicated + f.stats().corrupted, 0);
    assert_eq!(f.stats().reordered, 0);
}

/// `n` counted datagrams from 10.0.0.1 to 10.0.0.2 with this IP TOS byte
/// (the ICRC masks it: the one computed for 0 holds).
fn with_tos(n: u32, tos: u8) -> Sender {
    Sender::new((0..n).map(|i| {
        let mut d = counted(v4(1), v4(2), i);
        d.meta.tos = tos;
        (Instant::ZERO + Duration::from_micros(1) * i, d)
    }))
}

#[test]
fn ce_marks_every_ecn_capable_datagram_and_no_other() {
    const N: u32 = 50;
    let dscp = 26 << 2;
    // ECT(0), ECT(1), already CE: all come out CE, DSCP kept, ICRC valid
    for ecn in [0b10u8, 0b01, 0b11] {
        let (mut f, _s, k) = pair(3, with_tos(N, dscp | ecn));
        f.set_faults(FaultConfig { ce_mark: 1.0, ..FaultConfig::default() });
        assert!(f.run_until_idle(10_000));
        let st = f.stats().clone();
        assert_eq!((st.delivered, st.ce_marked), (N as u64, N as u64), "ecn {ecn:#04b}: {st:?}");
        assert_eq!(st.dropped() + st.corrupted + st.duplicated, 0);
        let k = k.lock().unwrap();
        let psns: Vec<u32> = k.got.iter().map(|(_, d)| psn_of(d)).collect();
        assert_eq!(psns, (0..N).collect::<Vec<_>>(), "a mark neither drops nor reorders");
        for (_, d) in k.got.iter() {
            assert_eq!(d.meta.tos, dscp | 0b11, "ecn {ecn:#04b}");
            assert!(icrc_ok(d), "the ICRC masks the TOS byte");
        }
    }
    // Not-ECT: never marked, nothing counted
    let (mut f, _s, k) = pair(3, with_tos(N, 0));
    f.set_faults(FaultConfig { ce_mark: 1.0, ..FaultConfig::default() });
    assert!(f.run_until_idle(10_000));
    assert_eq!((f.stats().delivered, f.stats().ce_marked), (N as u64, 0));
    assert!(k.lock().unwrap().got.iter().all(|(_, d)| d.meta.tos == 0));
}

#[test]
fn ce_mark_rate_matches_probability_and_leaves_other_faults_alone() {
    const N: u32 = 4_000;
    let faults = FaultConfig { drop: 0.1, duplicate: 0.1, ..FaultConfig::default() };
    let run = |ce_mark: f64| {
        let (mut f, _s, k) = pair(21, with_tos(N, 0b10));
        f.set_faults(FaultConfig { ce_mark, ..faults.clone() });
        assert!(f.run_until_idle(100_000));
        let got: Vec<(u32, u8)> =
            k.lock().unwrap().got.iter().map(|(_, d)| (psn_of(d), d.meta.tos)).collect();
        (f.stats().clone(), got)
    };
    let (plain, plain_got) = run(0.0);
    assert_eq!(plain.ce_marked, 0);
    assert!(plain_got.iter().all(|&(_, tos)| tos == 0b10));
    // certain: draws nothing, so the same datagrams are lost and copied
    let (all, all_got) = run(1.0);
    assert_eq!(all.ce_marked, N as u64 - all.dropped_loss);
    assert_eq!((all.dropped_loss, all.duplicated), (plain.dropped_loss, plain.duplicated));
    let all_psns: Vec<u32> = all_got.iter().map(|&(p, _)| p).collect();
    assert_eq!(all_psns, plain_got.iter().map(|&(p, _)| p).collect::<Vec<_>>());
    assert!(all_got.iter().all(|&(_, tos)| tos == 0b11), "a duplicate carries the mark");
    // a quarter: Binomial(~3600, 0.25), sd ~26; allow 5 sd
    let (some, some_got) = run(0.25);
    let kept = N as u64 - some.dropped_loss;
    assert!(some.ce_marked.abs_diff(kept / 4) < 130, "{} of {kept}", some.ce_marked);
    let ce = some_got.iter().filter(|&&(_, tos)| tos == 0b11).count() as u64;
    assert!(ce >= some.ce_marked && ce <= 2 * some.ce_marked, "{ce} {some:?}");
}

#[test]
fn a_filter_marks_ce_on_ecn_capable_datagrams_only() {
    let mut f = Fabric::new(8);
    let (a, b, c) = (v4(1), v4(2), v4(3));
    let ect = |src: IpAddr, tos: u8| {
        Sender::new((0..10u32).map(move |i| {
            let mut d = counted(src, c, i);
            d.meta.tos = tos;
            (Instant::ZERO + Duration::from_micros(1) * i, d)
        }))
    };
    let k = shared(Sink::default());
    f.add_node(a, shared(ect(a, 0b10)));
    f.add_node(b, shared(ect(b, 0b00)));
    f.add_node(c, k.clone());
    // every datagram from b (not ECT), a's PSNs 0..4 (ECT(0))
    let fb = f.add_filter(Filter::matching(Match::From(b)).mark_ce());
    let fa = f.add_filter(
        Filter::matching(Match::From(a).and(Match::PsnRange { start: Psn::new(0), len: 4 }))
            .mark_ce(),
    );
    assert!(f.run_until_idle(1_000));
    assert_eq!(f.filter(fb).unwrap().fired(), 10);
    assert_eq!(f.filter(fa).unwrap().fired(), 4);
    let k = k.lock().unwrap();
    let marked = |src: IpAddr| -> Vec<u32> {
        k.got
            .iter()
            .filter(|(_, d)| d.endpoints.src == src && d.meta.tos & 3 == 3)
            .map(|(_, d)| psn_of(d))
            .collect()
    };
    assert_eq!(marked(b), Vec::<u32>::new(), "a non-ECT datagram is never marked");
    assert_eq!(marked(a), vec![0, 1, 2, 3]);
    assert_eq!(k.got.len(), 20);
    assert_eq!(f.stats().ce_marked, 4);
    assert_eq!(f.stats().dropped() + f.stats().corrupted, 0);
}

// ------------------------------------------------------------ filters

#[test]
fn filter_drops_exactly_the_third_matching_opcode() {
    use Opcode as O;
    let (a, b) = (v4(1), v4(2));
    let ops = [
        O::RC_RDMA_READ_RESPONSE_FIRST,
        O::RC_RDMA_READ_RESPONSE_MIDDLE,
        O::RC_RDMA_READ_RESPONSE_MIDDLE,
        O::RC_ACKNOWLEDGE,
        O::RC_RDMA_READ_RESPONSE_MIDDLE, // 3rd MIDDLE, PSN 4
        O::RC_RDMA_READ_RESPONSE_MIDDLE,
        O::RC_RDMA_READ_RESPONSE_LAST,
    ];
    let items = ops.iter().enumerate().map(|(i, &op)| {
        let payload: &[u8] = if op == O::RC_ACKNOWLEDGE { &[] } else { &[0xAB; 64] };
        (Instant::from_micros(i as u64), roce(a, b, op, i as u32, payload))
    });
    let (mut f, _s, k) = pair(3, Sender::new(items));
    let id = f
        .add_filter(Filter::matching(Match::Opcode(O::RC_RDMA_READ_RESPONSE_MIDDLE)).nth(3).drop());
    assert!(f.run_until_idle(1_000));
    let psns: Vec<u32> = k.lock().unwrap().got.iter().map(|(_, d)| psn_of(d)).collect();
    assert_eq!(psns, vec![0, 1, 2, 3, 5, 6]);
    assert_eq!(f.stats().dropped_filter, 1);
    assert_eq!(f.stats().dropped(), 1);
    let flt = f.filter(id).unwrap();
    assert_eq!((flt.matched(), flt.fired()), (4, 1));
}

/// Sends requests with PSN 0..n and retransmits every unacknowledged one
/// when its timer expires (at most `max_rounds` rounds).
struct Requester {
    me: IpAddr,
    peer: IpAddr,
    unacked: BTreeSet<u32>,
    outbox: VecDeque<Datagram>,
    deadline: Option<Instant>,
    timeout: Duration,
    rounds_left: u32,
    sent: Vec<u32>,
    acks: Vec<u32>,
}

impl Requester {
    fn new(me: IpAddr, peer: IpAddr, n: u32) -> Requester {
        let mut r = Requester {
            me,
            peer,
            unacked: (0..n).collect(),
            outbox: VecDeque::new(),
            deadline: Some(Instant::ZERO),
            timeout: Duration::from_micros(50),
            rounds_left: 4,
            sent: Vec::new(),
            acks: Vec::new(),
        };
        r.deadline = Some(Instant::ZERO);
        r
    }
}

impl SansIo for Requester {
    fn handle_datagram(&mut self, _now: Instant, d: Datagram) {
        if icrc_ok(&d) {
            let psn = psn_of(&d);
            self.acks.push(psn);
            self.unacked.remove(&psn);
        }
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Datagram> {
        self.outbox.pop_front()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }
    fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_none_or(|d| d > now) {
            return;
        }
        self.deadline = None;
        if self.unacked.is_empty() || self.rounds_left == 0 {
            return;
        }
        self.rounds_left -= 1;
        for &p in &self.unacked {
            self.sent.push(p);
            self.outbox.push_back(roce(self.me, self.peer, Opcode::RC_SEND_ONLY, p, &[1, 2, 3, 4]));
        }
        self.deadline = Some(now + self.timeout);
    }
}

/// Acknowledges every request it receives with an ACK of the same PSN.
#[derive(Default)]
struct Responder {
    me: Option<IpAddr>,
    outbox: VecDeque<Datagram>,
    requests: Vec<u32>,
}

impl SansIo for Responder {
    fn handle_datagram(&mut self, _now: Instant, d: Datagram) {
        let psn = psn_of(&d);
        self.requests.push(psn);
        let me = self.me.unwrap_or(d.endpoints.dst);
        self.outbox.push_back(roce(me, d.endpoints.src, Opcode::RC_ACKNOWLEDGE, psn, &[]));
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Datagram> {
        self.outbox.pop_front()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

#[test]
fn every_ack_once_drops_first_transmissions_only() {
    let (a, b) = (v4(1), v4(2));
    let mut f = Fabric::new(9);
    let req = shared(Requester::new(a, b, 10));
    let resp = shared(Responder::default());
    f.add_node(a, req.clone());
    f.add_node(b, resp.clone());
    let id = f.add_filter(
        Filter::matching(Match::Opcode(Opcode::RC_ACKNOWLEDGE)).once_per_packet().drop(),
    );
    assert!(f.run_until_idle(10_000));
    let r = req.lock().unwrap();
    assert!(r.unacked.is_empty(), "every request acknowledged in the end");
    // Each request went out twice: the first ACK of each was dropped.
    assert_eq!(r.sent.len(), 20);
    assert_eq!(r.acks, (0..10).collect::<Vec<_>>());
    assert_eq!(resp.lock().unwrap().requests.len(), 20);
    assert_eq!(f.stats().dropped_filter, 10);
    let flt = f.filter(id).unwrap();
    assert_eq!((flt.matched(), flt.fired()), (20, 10));
    // Retransmissions happened on the requester's timer, 50 µs after start.
    assert!(f.now() >= Instant::from_micros(50));
}

#[test]
fn filters_by_direction_psn_and_closure() {
    let (a, b, c) = (v4(1), v4(2), v4(3));
    let mut f = Fabric::new(4);
    let s1 = shared(Sender::counting(a, c, 10, Duration::from_micros(1)));
    let s2 = shared(Sender::counting(b, c, 10, Duration::from_micros(1)));
    let k = shared(Sink::default());
    f.add_node(a, s1);
    f.add_node(b, s2);
    f.add_node(c, k.clone());
    // Drop PSN 3 only on a → c; duplicate PSN 5 from b; the closure delays
    // every even PSN from b by 100 µs and corrupts bit 100 of a's PSN 7.
    let d1 = f.add_filter(
        Filter::matching(Match::Direction { src: a, dst: c }.and(Match::Psn(Psn::new(3)))).drop(),
    );
    let d2 =
        f.add_filter(Filter::matching(Match::From(b).and(Match::Psn(Psn::new(5)))).duplicate());
    let d3 = f.add_filter(Filter::custom(move |_d, info| {
        match (info.endpoints.src == b, info.psn().map(|p| p.value())) {
            (true, Some(p)) if p % 2 == 0 => Action::Delay(Duration::from_micros(100)),
            (false, Some(7)) => Action::FlipBit(100),
            _ => Action::Pass,
        }
    }));
    assert!(f.run_until_idle(1_000));
    let st = f.stats().clone();
    assert_eq!(st.dropped_filter, 1);
    assert_eq!(st.duplicated, 1);
    assert_eq!(st.delayed, 5);
    assert_eq!(st.corrupted, 1);
    assert_eq!(f.filter(d1).unwrap().fired(), 1);
    assert_eq!(f.filter(d2).unwrap().fired(), 1);
    assert_eq!(f.filter(d3).unwrap().matched(), 20);
    assert_eq!(f.filter(d3).unwrap().fired(), 6);
    let k = k.lock().unwrap();
    let from = |src: IpAddr| -> Vec<u32> {
        k.got.iter().filter(|(_, d)| d.endpoints.src == src).map(|(_, d)| psn_of(d)).collect()
    };
    assert_eq!(from(a), vec![0, 1, 2, 4, 5, 6, 7, 8, 9]);
    assert_eq!(from(b), vec![1, 3, 5, 5, 7, 9, 0, 2, 4, 6, 8]);
    for (_, d) in k.got.iter() {
        let bad = d.endpoints.src == a && psn_of(d) == 7;
        assert_eq!(icrc_ok(d), !bad);
    }
}

// ------------------------------------------------------------ link timing

#[test]
fn default_latency_is_two_microseconds() {
    let (mut f, _s, k) = pair(0, Sender::counting(v4(1), v4(2), 3, Duration::from_micros(10)));
    assert_eq!(f.link(NodeId(0), NodeId(1)), LinkConfig::default());
    assert!(f.run_until_idle(100));
    let times: Vec<u64> = trace(&k).iter().map(|(t, _)| *t).collect();
    assert_eq!(times, vec![2_000, 12_000, 22_000]);
}

#[test]
fn latency_and_rate_give_expected_arrival_times() {
    let (a, b) = (v4(1), v4(2));
    let sizes = [1000usize, 200, 4000];
    let items: Vec<(Instant, Datagram)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            (Instant::ZERO, roce(a, b, Opcode::RC_SEND_ONLY, i as u32, &vec![i as u8; n]))
        })
        .collect();
    let wl: Vec<u64> = items.iter().map(|(_, d)| wire_len(d) as u64).collect();
    // 1 Gbyte/s = 1 byte per ns; 5 µs latency.
    let (mut f, _s, k) = pair(0, Sender::new(items));
    f.set_link(
        NodeId(0),
        NodeId(1),
        LinkConfig { latency: Duration::from_micros(5), rate: Some(1_000_000_000), mtu: 9000 },
    );
    assert!(f.run_until_idle(100));
    let times: Vec<u64> = trace(&k).iter().map(|(t, _)| *t).collect();
    assert_eq!(times, vec![wl[0] + 5_000, wl[0] + wl[1] + 5_000, wl[0] + wl[1] + wl[2] + 5_000]);
    assert_eq!(wl[0], 14 + 20 + 8 + 12 + 1000 + 4);

    // A slower rate with rounding up: 3 bytes per µs.
    let d = counted(a, b, 0);
    let (mut f, _s, k) = pair(0, Sender::new([(Instant::ZERO, d.clone())]));
    f.set_default_link(LinkConfig { latency: Duration::ZERO, rate: Some(3_000_000), mtu: 9000 });
    assert!(f.run_until_idle(100));
    let expect = (wire_len(&d) as u64 * 1_000_000_000).div_ceil(3_000_000);
    assert_eq!(trace(&k)[0].0, expect);
}

#[test]
fn run_for_advances_the_clock_exactly() {
    let (mut f, _s, k) = pair(0, Sender::counting(v4(1), v4(2), 5, Duration::from_micros(10)));
    assert!(f.run_for(Duration::from_micros(15)));
    assert_eq!(f.now(), Instant::from_micros(15));
    assert_eq!(k.lock().unwrap().got.len(), 2); // arrivals at 2 and 12 µs
    assert!(f.run_for(Duration::from_micros(27))); // to 42 µs: arrivals at 22, 32, 42
    assert_eq!(f.now(), Instant::from_micros(42));
    assert_eq!(k.lock().unwrap().got.len(), 5);
    assert!(f.run_for(Duration::from_millis(1)));
    assert_eq!(f.now(), Instant::from_micros(1042));
}

#[test]
fn run_until_stops_on_condition() {
    let (mut f, _s, k) = pair(0, Sender::counting(v4(1), v4(2), 100, Duration::from_micros(1)));
    let k2 = k.clone();
    assert!(f.run_until(move |_| k2.lock().unwrap().got.len() == 10, 10_000));
    assert_eq!(k.lock().unwrap().got.len(), 10);
    assert_eq!(f.now(), Instant::from_micros(11)); // 10th sent at 9 µs + 2 µs
                                                   // A condition that never holds stops at the bound or at idle.
    assert!(!f.run_until(|_| false, 5));
    assert!(!f.run_until(|_| false, 1_000_000));
    assert_eq!(k.lock().unwrap().got.len(), 100);
}

// ------------------------------------------------------------ MTU, routing

#[test]
fn mtu_drops_are_counted() {
    let (a, b) = (v4(1), v4(2));
    let small = roce(a, b, Opcode::RC_SEND_ONLY, 0, &[0; 900]);
    let big = roce(a, b, Opcode::RC_SEND_ONLY, 1, &[0; 1000]);
    assert_eq!(ip_len(&small), 20 + 8 + 12 + 900 + 4);
    let items = (0..10u64)
        .map(|i| (Instant::from_micros(i), if i % 3 == 0 { big.clone() } else { small.clone() }));
    let (mut f, _s, k) = pair(0, Sender::new(items));
    f.set_default_link(LinkConfig { mtu: 1000, ..LinkConfig::default() });
    assert!(f.run_until_idle(100));
    assert_eq!(f.stats().dropped_mtu, 4);
    assert_eq!(f.stats().dropped(), 4);
    assert_eq!(f.stats().delivered, 6);
    assert!(k.lock().unwrap().got.iter().all(|(_, d)| d.payload.len() == small.payload.len()));
    // Exactly at the MTU passes.
    let exact = roce(a, b, Opcode::RC_SEND_ONLY, 2, &[0; 956]);
    assert_eq!(ip_len(&exact), 1000);
    f.inject(NodeId(0), exact);
    assert!(f.run_until_idle(100));
    assert_eq!(f.stats().delivered, 7);
}

#[test]
fn unroutable_and_ipv6_and_extra_addresses() {
    let a6 = IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1));
    let b6 = IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2));
    let mut f = Fabric::new(0);
    let k = shared(Sink::default());
    let s = f.add_node(v4(1), Sink::default());
    let kid = f.add_node(v4(2), k.clone());
    assert!(f.add_address(kid, b6));
    assert!(f.add_address(s, a6));
    assert!(!f.add_address(NodeId(9), v4(9)));
    assert_eq!(f.route(b6), Some(kid));
    assert_eq!(f.addresses(kid), &[v4(2), b6]);
    f.inject(s, counted(v4(1), v4(3), 0)); // nobody at 10.0.0.3
    f.inject(s, counted(a6, b6, 1));
    f.inject(s, counted(v4(1), v4(2), 2));
    assert!(f.run_until_idle(100));
    assert_eq!(f.stats().dropped_unroutable, 1);
    let got = trace(&k);
    assert_eq!(got.len(), 2);
    assert_eq!(f.node_stats(kid).unwrap().delivered, 2);
    assert_eq!(f.node_stats(s).unwrap().transmitted, 3);
    assert!(k.lock().unwrap().got.iter().all(|(_, d)| icrc_ok(d)));
}

// ------------------------------------------------------------ timers, bounds

/// Arms timers at fixed times and records when they fire.
struct Alarm {
    deadlines: Vec<Instant>,
    fired: Vec<Instant>,
}

impl SansIo for Alarm {
    fn handle_datagram(&mut self, _now: Instant, _d: Datagram) {}
    fn poll_transmit(&mut self, _now: Instant) -> Option<Datagram> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.iter().min().copied()
    }
    fn handle_timeout(&mut self, now: Instant) {
        let before = self.deadlines.len();
        self.deadlines.retain(|&d| d > now);
        if self.deadlines.len() != before {
            self.fired.push(now);
        }
    }
}

#[test]
fn timers_fire_at_their_virtual_times() {
    let us = Instant::from_micros;
    let mut f = Fabric::new(0);
    let a = shared(Alarm { deadlines: vec![us(100), us(10), us(25), us(25)], fired: vec![] });
    let b = shared(Alarm { deadlines: vec![us(25), us(30)], fired: vec![] });
    f.add_node(v4(1), a.clone());
    f.add_node(v4(2), b.clone());
    assert!(f.run_until_idle(100));
    assert_eq!(a.lock().unwrap().fired, vec![us(10), us(25), us(100)]);
    assert_eq!(b.lock().unwrap().fired, vec![us(25), us(30)]);
    assert_eq!(f.stats().timers_fired, 5);
    assert_eq!(f.now(), us(100));
    // A deadline in the past fires now; the clock never goes backwards.
    a.lock().unwrap().deadlines.push(us(3));
    assert!(f.step());
    assert_eq!(a.lock().unwrap().fired.last(), Some(&us(100)));
    assert_eq!(f.now(), us(100));
    assert!(!f.step());
}

#[derive(Default)]
struct Bouncer {
    out: VecDeque<Datagram>,
    seen: u64,
}

impl SansIo for Bouncer {
    fn handle_datagram(&mut self, _now: Instant, d: Datagram) {
        self.seen += 1;
        let ep = d.endpoints;
        self.out.push_back(Datagram {
            endpoints: UdpEndpoints { src: ep.dst, dst: ep.src, ..ep },
            ..d
        });
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Datagram> {
        self.out.pop_front()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

/// Never stops transmitting.
struct Chatterbox(IpAddr, IpAddr);

impl SansIo for Chatterbox {
    fn handle_datagram(&mut self, _now: Instant, _d: Datagram) {}
    fn poll_transmit(&mut self, _now: Instant) -> Option<Datagram> {
        Some(counted(self.0, self.1, 0))
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

#[test]
fn run_until_idle_is_bounded() {
    // Nothing to do: idle at once, clock unchanged.
    let mut f = Fabric::new(0);
    f.add_node(v4(1), NullNode);
    assert!(f.run_until_idle(10));
    assert!(!f.step());
    assert_eq!(f.now(), Instant::ZERO);

    // Ping-pong forever: the bound stops it.
    let mut f = Fabric::new(0);
    let x = shared(Bouncer::default());
    let y = shared(Bouncer::default());
    let xi = f.add_node(v4(1), x.clone());
    f.add_node(v4(2), y.clone());
    f.inject(xi, counted(v4(1), v4(2), 0));
    assert!(!f.run_until_idle(1_000));
    assert_eq!(f.stats().delivered, 1_000);
    assert_eq!(x.lock().unwrap().seen + y.lock().unwrap().seen, 1_000);
    assert_eq!(f.now(), Instant::from_micros(2_000));
    f.set_max_events_per_run(100);
    assert!(!f.run_for(Duration::from_secs(1)));
    assert_eq!(f.stats().delivered, 1_100);

    // A node that never stops transmitting: each poll round is capped.
    let mut f = Fabric::new(0);
    f.set_max_transmits_per_poll(50);
    f.add_node(v4(1), Chatterbox(v4(1), v4(2)));
    f.add_node(v4(2), Sink::default());
    assert!(!f.run_until_idle(10));
    assert!(f.stats().transmitted >= 50 && f.stats().transmitted <= 50 * 21);
    assert_eq!(f.stats().delivered, 10);
}

// ------------------------------------------------------------ pcap

#[test]
fn pcap_records_what_receivers_saw() {
    let (mut f, _s, k) = pair(21, Sender::counting(v4(1), v4(2), 40, Duration::from_nanos(1500)));
    f.set_faults(FaultConfig {
        drop: 0.1,
        duplicate: 0.1,
        corrupt: 0.1,
        jitter: Duration::from_nanos(900),
        ..FaultConfig::default()
    });
    let ing = f.record_pcap(Vec::new()).unwrap();
    let eg = f.record_pcap_at(Vec::new(), TapPoint::Egress).unwrap();
    let frames = shared(0usize);
    let fc = frames.clone();
    let cb = f.record_frames(TapPoint::Ingress, move |_, _| *fc.lock().unwrap() += 1);
    assert!(f.run_until_idle(10_000));
    let st = f.stats().clone();
    assert!(st.dropped_loss > 0 && st.duplicated > 0 && st.corrupted > 0, "{st:?}");
    assert_eq!(st.tap_errors, 0);

    let bytes: Vec<u8> = f.finish_pcap(ing).unwrap();
    // Classic pcap, little-endian, nanosecond magic, Ethernet link type.
    assert_eq!(&bytes[..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
    assert_eq!(&bytes[20..24], &1u32.to_le_bytes());
    let cap = read_capture(&bytes).unwrap();
    let k = k.lock().unwrap();
    assert_eq!(cap.len(), k.got.len());
    assert_eq!(cap.len() as u64, st.delivered);
    assert_eq!(*frames.lock().unwrap(), cap.len());
    let mut bad = 0;
    for (fr, (t, d)) in cap.iter().zip(k.got.iter()) {
        assert_eq!(fr.timestamp, Duration::from_nanos(t.as_nanos()));
        let ep = &d.endpoints;
        let want =
            ethernet_frame(mac_for(ep.src), mac_for(ep.dst), ep, &d.meta, &d.payload).unwrap();
        assert_eq!(fr.data, want);
        assert_eq!(&fr.data[..6], &[2, 0, 10, 0, 0, 2]);
        let parsed = parse_frame(LinkType::Ethernet, &fr.data, ROCE_V2_PORT).unwrap().unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].udp_payload, d.payload.to_vec());
        assert_eq!(parsed[0].icrc_ok(), icrc_ok(d));
        bad += usize::from(!parsed[0].icrc_ok());
    }
    assert_eq!(bad as u64, st.corrupted + corrupted_copies(&k.got));

    // The egress tap saw every transmission, before faults, in send order.
    let eg_bytes: Vec<u8> = f.finish_pcap(eg).unwrap();
    let eg_cap = read_capture(&eg_bytes).unwrap();
    assert_eq!(eg_cap.len() as u64, st.transmitted);
    for (i, fr) in eg_cap.iter().enumerate() {
        assert_eq!(fr.timestamp, Duration::from_nanos(1500 * i as u64));
        let p = &parse_frame(LinkType::Ethernet, &fr.data, ROCE_V2_PORT).unwrap().unwrap()[0];
        assert!(p.icrc_ok());
    }
    assert!(f.finish_pcap::<Vec<u8>>(ing).is_err(), "already finished");
    assert!(f.stop_tap(cb));
    assert!(!f.stop_tap(cb));
}

/// Corrupted datagrams that were also duplicated arrive corrupted twice.
fn corrupted_copies(got: &[(Instant, Datagram)]) -> u64 {
    let mut seen = BTreeSet::new();
    got.iter().filter(|(_, d)| !icrc_ok(d) && !seen.insert(d.payload.to_vec())).count() as u64
}

#[test]
fn shared_node_can_be_driven_from_outside() {
    // The fabric and the test hold the same sender; work posted between
    // steps goes out at the current virtual time.
    let (mut f, s, k) = pair(0, Sender::default());
    assert!(f.run_until_idle(10));
    f.run_for(Duration::from_micros(7));
    s.lock().unwrap().outbox.push_back(counted(v4(1), v4(2), 42));
    assert!(f.run_until_idle(10));
    let got = trace(&k);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, 9_000);
    assert_eq!(f.node_stats(NodeId(0)).unwrap().transmitted, 1);
    assert!(f.node(NodeId(1)).is_some() && f.node_mut(NodeId(2)).is_none());
}

#[test]
fn per_link_faults_override_the_default() {
    let (a, b, c) = (v4(1), v4(2), v4(3));
    let mut f = Fabric::new(12);
    f.add_node(a, Sender::counting(a, c, 20, Duration::from_micros(1)));
    f.add_node(b, Sender::counting(b, c, 20, Duration::from_micros(1)));
    let k = shared(Sink::default());
    let kid = f.add_node(c, k.clone());
    f.set_faults(FaultConfig { duplicate: 1.0, ..FaultConfig::default() });
    f.set_link_faults(NodeId(0), kid, FaultConfig::lossy(1.0));
    assert!(f.run_until_idle(1_000));
    assert_eq!(f.stats().dropped_loss, 20);
    assert_eq!(f.stats().duplicated, 20);
    let k = k.lock().unwrap();
    assert_eq!(k.got.len(), 40);
    assert!(k.got.iter().all(|(_, d)| d.endpoints.src == b));
}

#[test]
fn counters_stay_consistent_under_any_seed() {
    for seed in 0..40u64 {
        let (mut f, _s, k) =
            pair(seed, Sender::counting(v4(1), v4(2), 200, Duration::from_nanos(250)));
        let p = (seed % 5) as f64 * 0.1;
        f.set_faults(FaultConfig {
            drop: p,
            duplicate: 0.5 - p,
            reorder: p / 2.0,
            corrupt: p,
            jitter: Duration::from_nanos(seed * 37),
            ..FaultConfig::default()
        });
        f.add_filter(Filter::matching(Match::Random(0.05)).delay(Duration::from_micros(3)));
        f.add_filter(Filter::matching(Match::Psn(Psn::new(7))).every_nth(1).drop());
        assert!(f.run_until_idle(10_000), "seed {seed}");
        let st = f.stats();
        assert_eq!(st.transmitted, 200);
        assert_eq!(st.delivered, st.transmitted - st.dropped() + st.duplicated, "seed {seed}");
        assert_eq!(st.dropped_filter, 1);
        assert_eq!(k.lock().unwrap().got.len() as u64, st.delivered);
        assert_eq!(f.in_flight(), 0);
        // Arrival times never decrease.
        let t = trace(&k);
        assert!(t.windows(2).all(|w| w[0].0 <= w[1].0), "seed {seed}");
    }
}

#[test]
fn jitter_delays_but_never_reorders_a_link() {
    const N: u32 = 1_000;
    // Back-to-back datagrams (all sent at time 0) with up to 5 µs jitter.
    let items = (0..N).map(|i| (Instant::ZERO, counted(v4(1), v4(2), i)));
    let (mut f, _s, k) = pair(77, Sender::new(items));
    f.set_faults(FaultConfig {
        jitter: Duration::from_micros(5),
        duplicate: 0.1,
        ..FaultConfig::default()
    });
    assert!(f.run_until_idle(10_000));
    assert_eq!(f.stats().reordered, 0);
    let k = k.lock().unwrap();
    let order: Vec<u32> = k.got.iter().map(|(_, d)| psn_of(d)).collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "FIFO order kept, copies right after");
    assert_eq!(order.len() as u64, N as u64 + f.stats().duplicated);
    let times: Vec<u64> = k.got.iter().map(|(t, _)| t.as_nanos()).collect();
    assert!(times.iter().all(|&t| (2_000..=7_000).contains(&t)));
    assert!(times.iter().any(|&t| t > 2_000), "jitter applied");
}

// The tracing test lives in trace.rs (its own binary; see there why).

/// The wire trace of an event-driven run: every RoCE datagram with what
/// happened to it, counted per direction; a lockstep run of the same
/// datagrams through a hook traces the same way.
#[test]
fn the_wire_trace_records_each_datagram_and_its_fate() {
    use roce_sim::{Pace, Verdict};
    let mut f = Fabric::new(3);
    let a = f.add_node(v4(1), NullNode);
    let b = f.add_node(v4(2), NullNode);
    f.record_trace(true);
    f.add_filter(Filter::matching(Match::Psn(Psn::new(1))).drop());
    f.add_filter(Filter::matching(Match::Psn(Psn::new(2))).duplicate());
    for n in 0..4 {
        f.inject(a, counted(v4(1), v4(2), n));
    }
    assert!(f.run_until_idle(100));
    let actions: Vec<Verdict> = f.trace().iter().map(|t| t.action.clone()).collect();
    assert_eq!(
        actions,
        vec![Verdict::Deliver, Verdict::Drop, Verdict::Duplicate, Verdict::Deliver],
        "{}",
        f.dump()
    );
    assert_eq!(f.count(a, b, Opcode::RC_SEND_ONLY), 4);
    assert_eq!(f.count(b, a, Opcode::RC_SEND_ONLY), 0);
    assert_eq!(f.stats().delivered, 4);

    // Lockstep: a node that sends four datagrams; the hook drops PSN 1.
    let mut g = Fabric::new(3);
    let sender = g.add_node(v4(1), Sender::counting(v4(1), v4(2), 4, Duration::ZERO));
    let sink = shared(Sink::default());
    g.add_node(v4(2), sink.clone());
    assert!(g.run_lockstep(Pace::Burst, Instant::ZERO, 100, |t| {
        if t.psn == Psn::new(1) {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    }));
    assert_eq!(g.trace().len(), 4);
    assert_eq!(g.count(sender, NodeId(1), Opcode::RC_SEND_ONLY), 4);
    assert_eq!(g.stats().dropped_filter, 1);
    assert_eq!(trace(&sink).len(), 3);
}
