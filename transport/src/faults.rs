//! Seeded fault injection on the real transports: [`FaultyTransport`]
//! wraps any [`Link`] (UDP or raw) and loses, duplicates, reorders,
//! corrupts or marks (ECN CE) datagrams, like the simulated fabric's
//! `FaultConfig` (`roce_faults`), so that retransmission and congestion
//! control can be exercised against a real peer (the kernel's rxe,
//! perftest) on a real wire.
//!
//! Configured by a spec string, usually from the environment variable
//! `ROCE_EMU_FAULTS` (read when a device is opened; `roce perf --faults`
//! sets it):
//!
//! ```text
//! ROCE_EMU_FAULTS=loss=0.05,seed=7
//! ROCE_EMU_FAULTS=loss=0.02,dup=0.01,reorder=0.01,corrupt=0.01,dir=both,seed=42
//! ROCE_EMU_FAULTS=ce=0.1,dir=rx
//! ```
//!
//! * `loss=P` — drop the datagram;
//! * `dup=P` — deliver it twice;
//! * `reorder=P` — hold it back until after the datagrams of the next
//!   receive (or send) batch;
//! * `corrupt=P` — flip one bit of the UDP payload (never in BTH byte 4,
//!   which the ICRC does not cover), so the core's ICRC check must drop it;
//! * `ce=P` — mark ECN-capable datagrams Congestion Experienced, as a
//!   switch's RED/ECN queue does: the ECN field (the low two bits of the
//!   IP TOS byte / IPv6 traffic class, `meta.tos`) becomes CE (`0b11`)
//!   when it was ECT(0), ECT(1) or CE; a non-ECT datagram (`0b00`) is
//!   never marked. The receiving device answers with CNPs. On receive the
//!   core sees the mark; on send the datagram leaves with CE in its TOS
//!   byte, for the peer to see. The byte is masked out of the ICRC, so a
//!   mark never invalidates a packet;
//! * `dir=rx|tx|both` — which direction `loss`, `dup`, `reorder` and `ce`
//!   act on (default `rx`: what we receive). Corruption always acts on
//!   receive, after the transport's own ICRC check: on send, the transport
//!   may recompute the ICRC over the corrupted bytes and hide the fault.
//! * `seed=N` — the generator's seed (default 1): the same seed on the
//!   same sequence of datagrams gives the same faults.
//!
//! Each datagram's fate is decided by the simulated fabric's decision
//! function, [`FaultDice::decide`] (`roce_faults`), from the same
//! seeded generator and in the same order (loss, corruption, duplication,
//! reordering, CE mark; a probability of 0 draws nothing, so a spec
//! without `ce` replays the faults it gave before `ce` existed): this
//! module keeps only the mechanics (holding datagrams behind the next
//! batch, sending the copy, setting the ECN field). As on the fabric, a
//! reordered datagram may also be corrupted, duplicated or marked.
//!
//! Counters ([`FaultCounters`]) say what was done; the transport prints
//! them to stderr when its driver stops.

use crate::counters::TransportCounters;
use crate::socket::Link;
use crate::udp::SendOutcome;
use roce_emulator::Datagram;
use roce_faults::{FaultDice, FaultRates};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The environment variable read by [`FaultSpec::from_env`].
pub const FAULTS_ENV: &str = "ROCE_EMU_FAULTS";

/// Which direction a fault acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Datagrams we receive.
    Rx,
    /// Datagrams we send.
    Tx,
    /// Both.
    Both,
}

impl Direction {
    fn rx(self) -> bool {
        self != Direction::Tx
    }
    fn tx(self) -> bool {
        self != Direction::Rx
    }
}

/// What to inject (probabilities in `[0, 1]`).
#[derive(Clone, Debug, PartialEq)]
pub struct FaultSpec {
    /// Probability of losing a datagram.
    pub loss: f64,
    /// Probability of delivering it twice.
    pub dup: f64,
    /// Probability of holding it back behind the next batch.
    pub reorder: f64,
    /// Probability of flipping one payload bit (receive side).
    pub corrupt: f64,
    /// Probability of marking an ECN-capable datagram Congestion
    /// Experienced (`ce=P`; non-ECT datagrams are never marked).
    pub ce: f64,
    /// Direction of loss, duplication, reordering and CE marks.
    pub dir: Direction,
    /// Generator seed.
    pub seed: u64,
}

impl Default for FaultSpec {
    fn default() -> Self {
        FaultSpec {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            ce: 0.0,
            dir: Direction::Rx,
            seed: 1,
        }
    }
}

impl FaultSpec {
    /// Parse `key=value,...` (see the module documentation).
    pub fn parse(s: &str) -> Result<FaultSpec, String> {
        let mut f = FaultSpec::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) =
                part.split_once('=').ok_or_else(|| format!("{part:?}: expected key=value"))?;
            let prob = || -> Result<f64, String> {
                let p: f64 = v.parse().map_err(|_| format!("{k}={v}: not a number"))?;
                if (0.0..=1.0).contains(&p) {
                    Ok(p)
                } else {
                    Err(format!("{k}={v}: a probability is in [0, 1]"))
                }
            };
            match k {
                "loss" | "drop" => f.loss = prob()?,
                "dup" | "duplicate" => f.dup = prob()?,
                "reorder" => f.reorder = prob()?,
                "corrupt" => f.corrupt = prob()?,
                "ce" | "ce_mark" => f.ce = prob()?,
                "seed" => f.seed = v.parse().map_err(|_| format!("seed={v}: not a number"))?,
                "dir" => {
                    f.dir = match v {
                        "rx" => Direction::Rx,
                        "tx" => Direction::Tx,
                        "both" => Direction::Both,
                        _ => return Err(format!("dir={v}: rx, tx or both")),
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown fault {k:?} (loss, dup, reorder, corrupt, ce, dir, seed)"
                    ))
                }
            }
        }
        Ok(f)
    }

    /// The spec in [`FAULTS_ENV`], if set and not empty.
    pub fn from_env() -> Result<Option<FaultSpec>, String> {
        match std::env::var(FAULTS_ENV) {
            Ok(v) if !v.trim().is_empty() => {
                FaultSpec::parse(&v).map(Some).map_err(|e| format!("{FAULTS_ENV}: {e}"))
            }
            _ => Ok(None),
        }
    }

    /// The probabilities [`FaultDice::decide`] takes for one direction:
    /// loss, duplication, reordering and CE marks only where
    /// [`FaultSpec::dir`] says, corruption on receive only.
    pub fn rates(&self, rx: bool) -> FaultRates {
        let on = if rx { self.dir.rx() } else { self.dir.tx() };
        let p = |v: f64| if on { v } else { 0.0 };
        FaultRates {
            drop: p(self.loss),
            corrupt: if rx { self.corrupt } else { 0.0 },
            duplicate: p(self.dup),
            reorder: p(self.reorder),
            ce_mark: p(self.ce),
        }
    }

    /// Whether anything can happen at all.
    pub fn is_active(&self) -> bool {
        [self.loss, self.dup, self.reorder, self.corrupt, self.ce].iter().any(|&p| p > 0.0)
    }
}

/// What the injector did (shared, readable while the driver runs).
#[derive(Debug, Default)]
pub struct FaultCounters {
    /// Datagrams received from the inner transport.
    pub rx_seen: AtomicU64,
    /// Datagrams handed to the inner transport's send (before faults).
    pub tx_seen: AtomicU64,
    /// Received datagrams dropped.
    pub rx_dropped: AtomicU64,
    /// Datagrams not sent.
    pub tx_dropped: AtomicU64,
    /// Datagrams delivered or sent twice.
    pub duplicated: AtomicU64,
    /// Datagrams held back behind the next batch.
    pub reordered: AtomicU64,
    /// Received datagrams with one bit flipped.
    pub corrupted: AtomicU64,
    /// ECN-capable datagrams marked Congestion Experienced (received or
    /// sent, as `dir` says; a duplicate's copy is not counted again).
    pub ce_marked: AtomicU64,
}

impl FaultCounters {
    /// `name value` pairs.
    pub fn pairs(&self) -> Vec<(&'static str, u64)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("rx_seen", g(&self.rx_seen)),
            ("tx_seen", g(&self.tx_seen)),
            ("rx_dropped", g(&self.rx_dropped)),
            ("tx_dropped", g(&self.tx_dropped)),
            ("duplicated", g(&self.duplicated)),
            ("reordered", g(&self.reordered)),
            ("corrupted", g(&self.corrupted)),
            ("ce_marked", g(&self.ce_marked)),
        ]
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A transport that injects [`FaultSpec`]'s faults around another one.
pub struct FaultyTransport<T: Link> {
    inner: T,
    spec: FaultSpec,
    dice: FaultDice,
    held_rx: Vec<Datagram>,
    held_tx: Vec<Datagram>,
    pending_tx: Vec<Datagram>,
    /// The inner link's last send waited for a receiver's credits.
    credit_wait: bool,
    counters: Arc<FaultCounters>,
    name: String,
}

impl<T: Link> FaultyTransport<T> {
    /// Wrap `inner`; `name` labels the summary printed at the end.
    pub fn new(inner: T, spec: FaultSpec, name: impl Into<String>) -> FaultyTransport<T> {
        let dice = FaultDice::new(spec.seed);
        FaultyTransport {
            inner,
            spec,
            dice,
            held_rx: Vec::new(),
            held_tx: Vec::new(),
            pending_tx: Vec::new(),
            credit_wait: false,
            counters: Arc::new(FaultCounters::default()),
            name: name.into(),
        }
    }

    /// The injector's counters (keep a clone before the driver takes the
    /// transport).
    pub fn fault_counters(&self) -> Arc<FaultCounters> {
        self.counters.clone()
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Send what is pending; true when nothing is left.
    fn flush_pending(&mut self) -> bool {
        if self.pending_tx.is_empty() {
            return true;
        }
        let o = self.inner.send(&self.pending_tx);
        self.pending_tx.drain(..o.consumed.min(self.pending_tx.len()));
        self.credit_wait = o.credit_wait;
        self.pending_tx.is_empty()
    }
}

impl<T: Link> AsFd for FaultyTransport<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl<T: Link> Link for FaultyTransport<T> {
    /// The inner link's, but the core checks every ICRC: an injected fault
    /// may corrupt a datagram after the inner link's check.
    fn profile(&self) -> roce_emulator::LinkProfile {
        roce_emulator::LinkProfile { rx_icrc: roce_emulator::RxIcrc::Core, ..self.inner.profile() }
    }
    fn send(&mut self, dgrams: &[Datagram]) -> SendOutcome {
        if !self.spec.dir.tx() {
            let o = self.inner.send(dgrams);
            self.counters.tx_seen.fetch_add(o.consumed as u64, Ordering::Relaxed);
            return o;
        }
        // what an earlier call could not send goes first; new datagrams are
        // only taken when it is gone
        if !self.flush_pending() {
            return SendOutcome {
                consumed: 0,
                would_block: !self.credit_wait,
                credit_wait: self.credit_wait,
            };
        }
        let held = std::mem::take(&mut self.held_tx);
        let rates = self.spec.rates(false);
        for d in dgrams {
            bump(&self.counters.tx_seen);
            let fate = self.dice.decide(&rates, d.wire_len(), false);
            if fate.drop {
                bump(&self.counters.tx_dropped);
                continue;
            }
            let n = if fate.duplicate { 2 } else { 1 };
            if fate.duplicate {
                bump(&self.counters.duplicated);
            }
            if fate.reorder {
                bump(&self.counters.reordered);
            }
            let mut d = d.clone();
            if fate.mark_ce(&mut d.meta.tos) {
                bump(&self.counters.ce_marked);
            }
            let to = if fate.reorder { &mut self.held_tx } else { &mut self.pending_tx };
            to.extend(std::iter::repeat_n(d, n));
        }
        // what an earlier batch held back goes out after this batch
        self.pending_tx.extend(held);
        let done = self.flush_pending();
        SendOutcome {
            consumed: dgrams.len(),
            would_block: !done && !self.credit_wait,
            credit_wait: !done && self.credit_wait,
        }
    }

    fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<usize> {
        self.flush_pending();
        let start = out.len();
        let r = self.inner.recv(out);
        let got: Vec<Datagram> = out.drain(start..).collect();
        let held = std::mem::take(&mut self.held_rx);
        let rates = self.spec.rates(true);
        for mut d in got {
            bump(&self.counters.rx_seen);
            let fate = self.dice.decide(&rates, d.payload.len(), false);
            if fate.drop {
                bump(&self.counters.rx_dropped);
                continue;
            }
            if fate.corrupt_bit.is_some() {
                let mut v = d.payload.to_vec();
                if fate.corrupt(&mut v) {
                    bump(&self.counters.corrupted);
                    d.payload = v.into();
                }
            }
            let n = if fate.duplicate { 2 } else { 1 };
            if fate.duplicate {
                bump(&self.counters.duplicated);
            }
            if fate.reorder {
                bump(&self.counters.reordered);
            }
            if fate.mark_ce(&mut d.meta.tos) {
                bump(&self.counters.ce_marked);
            }
            let to = if fate.reorder { &mut self.held_rx } else { &mut *out };
            to.extend(std::iter::repeat_n(d, n));
        }
        // held datagrams arrive after this batch (or alone, one call later)
        out.extend(held);
        // a tx-held datagram must not wait for the next send forever
        if out.len() == start {
            let h = std::mem::take(&mut self.held_tx);
            self.pending_tx.extend(h);
            self.flush_pending();
        }
        r.map(|n| n.max(out.len() - start))
    }

    fn batch(&self) -> usize {
        self.inner.batch()
    }

    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn counters(&self) -> Arc<TransportCounters> {
        self.inner.counters()
    }

    fn finish(&mut self) {
        let h = std::mem::take(&mut self.held_tx);
        self.pending_tx.extend(h);
        self.flush_pending();
        self.inner.finish();
        let p: Vec<String> =
            self.counters.pairs().iter().map(|(k, v)| format!("{k}={v}")).collect();
        eprintln!("roce faults ({}; {:?}): {}", self.name, self.spec, p.join(" "));
    }

    fn join_group(&mut self, group: std::net::IpAddr) -> io::Result<()> {
        self.inner.join_group(group)
    }

    fn leave_group(&mut self, group: std::net::IpAddr) -> io::Result<()> {
        self.inner.leave_group(group)
    }

    fn group_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.group_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_specs() {
        let f = FaultSpec::parse("loss=0.05,seed=7").unwrap();
        assert_eq!(f.loss, 0.05);
        assert_eq!(f.seed, 7);
        assert_eq!(f.dir, Direction::Rx);
        assert!(f.is_active());
        let f = FaultSpec::parse(" dup=0.1, reorder=0.2 ,corrupt=1,dir=both").unwrap();
        assert_eq!((f.dup, f.reorder, f.corrupt, f.dir), (0.1, 0.2, 1.0, Direction::Both));
        assert!(!FaultSpec::parse("").unwrap().is_active());
        for bad in ["loss", "loss=2", "loss=x", "dir=up", "seed=-1", "jam=0.1"] {
            assert!(FaultSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn chance_is_seeded_and_close_to_p() {
        let mut a = FaultDice::new(7);
        let mut b = FaultDice::new(7);
        let va: Vec<bool> = (0..1000).map(|_| a.chance(0.1)).collect();
        let vb: Vec<bool> = (0..1000).map(|_| b.chance(0.1)).collect();
        assert_eq!(va, vb);
        let n = va.iter().filter(|x| **x).count();
        assert!((60..=140).contains(&n), "{n}");
        let mut c = FaultDice::new(7);
        assert!(!(0..1000).any(|_| c.chance(0.0)));
        // p = 0 draws nothing
        assert_eq!(c.chance(0.5), FaultDice::new(7).chance(0.5));
    }

    #[test]
    fn parse_ce_specs() {
        let f = FaultSpec::parse("ce=0.25,dir=tx").unwrap();
        assert_eq!((f.ce, f.dir, f.loss), (0.25, Direction::Tx, 0.0));
        assert!(f.is_active(), "a CE mark alone is a fault to inject");
        assert_eq!(FaultSpec::parse("ce_mark=1").unwrap().ce, 1.0);
        assert_eq!(FaultSpec::default().ce, 0.0);
        for (bad, says) in [
            ("ce=1.5", "ce=1.5: a probability is in [0, 1]"),
            ("ce=-0.1", "ce=-0.1: a probability is in [0, 1]"),
            ("ce=lots", "ce=lots: not a number"),
            ("ce", "\"ce\": expected key=value"),
        ] {
            assert_eq!(FaultSpec::parse(bad).unwrap_err(), says);
        }
        let e = FaultSpec::parse("ecn=0.1").unwrap_err();
        assert!(e.contains("unknown fault \"ecn\"") && e.contains(" ce,"), "{e}");
    }

    #[test]
    fn ce_follows_the_direction() {
        let rates = |s: &str| {
            let f = FaultSpec::parse(s).unwrap();
            (f.rates(true).ce_mark, f.rates(false).ce_mark)
        };
        assert_eq!(rates("ce=0.5"), (0.5, 0.0));
        assert_eq!(rates("ce=0.5,dir=rx"), (0.5, 0.0));
        assert_eq!(rates("ce=0.5,dir=tx"), (0.0, 0.5));
        assert_eq!(rates("ce=0.5,dir=both"), (0.5, 0.5));
        assert_eq!(rates("loss=0.5,dir=both"), (0.0, 0.0));
    }

    /// An in-memory link: `inbox` is what the next receive returns, `sent`
    /// what it was given (the socket only lends a descriptor).
    struct Fake {
        sock: std::net::UdpSocket,
        inbox: Vec<Datagram>,
        sent: Vec<Datagram>,
    }

    impl Fake {
        fn new(inbox: Vec<Datagram>) -> Fake {
            let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            Fake { sock, inbox, sent: Vec::new() }
        }
    }

    impl AsFd for Fake {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.sock.as_fd()
        }
    }

    impl Link for Fake {
        fn profile(&self) -> roce_emulator::LinkProfile {
            roce_emulator::LinkProfile::default()
        }
        fn send(&mut self, dgrams: &[Datagram]) -> SendOutcome {
            self.sent.extend_from_slice(dgrams);
            SendOutcome { consumed: dgrams.len(), ..SendOutcome::default() }
        }
        fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<usize> {
            let n = self.inbox.len();
            out.append(&mut self.inbox);
            Ok(n)
        }
        fn batch(&self) -> usize {
            64
        }
        fn local_addr(&self) -> SocketAddr {
            self.sock.local_addr().unwrap()
        }
        fn counters(&self) -> Arc<TransportCounters> {
            Arc::default()
        }
    }

    /// The four ECN codepoints under DSCP 26, then a plain 0: datagrams
    /// with these TOS bytes, PSN = index.
    const TOSES: [u8; 5] = [0x68, 0x69, 0x6a, 0x6b, 0];

    fn with_tos(toses: &[u8]) -> Vec<Datagram> {
        let ep = roce_packet::UdpEndpoints {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            src_port: 49152,
            dst_port: 4791,
        };
        let meta = |tos| roce_packet::IpMeta { tos, ..roce_packet::IpMeta::default() };
        toses.iter().map(|&t| Datagram::new(ep, meta(t), vec![t; 40].into())).collect()
    }

    /// What a certain mark makes of [`TOSES`]: every ECN-capable one CE.
    const MARKED: [u8; 5] = [0x68, 0x6b, 0x6b, 0x6b, 0];

    fn ce_marked(f: &FaultyTransport<Fake>) -> u64 {
        f.fault_counters().pairs().iter().find(|(k, _)| *k == "ce_marked").map_or(0, |p| p.1)
    }

    #[test]
    fn received_ect_datagrams_come_out_ce_and_others_do_not() {
        let spec = FaultSpec::parse("ce=1").unwrap();
        let mut f = FaultyTransport::new(Fake::new(with_tos(&TOSES)), spec, "t");
        let mut out = Vec::new();
        assert_eq!(f.recv(&mut out).unwrap(), TOSES.len());
        let toses: Vec<u8> = out.iter().map(|d| d.meta.tos).collect();
        assert_eq!(toses, MARKED);
        // only the TOS byte changed
        assert!(out.iter().zip(&TOSES).all(|(d, &t)| d.payload[..] == [t; 40]));
        assert_eq!(ce_marked(&f), 3);
        // sends pass untouched (dir=rx)
        assert_eq!(f.send(&with_tos(&TOSES)).consumed, TOSES.len());
        let sent: Vec<u8> = f.inner().sent.iter().map(|d| d.meta.tos).collect();
        assert_eq!(sent, TOSES);
        assert_eq!(ce_marked(&f), 3);
    }

    #[test]
    fn sent_ect_datagrams_leave_ce_with_dir_tx() {
        let spec = FaultSpec::parse("ce=1,dir=tx,dup=1").unwrap();
        let mut f = FaultyTransport::new(Fake::new(with_tos(&TOSES)), spec, "t");
        let o = f.send(&with_tos(&TOSES));
        assert_eq!((o.consumed, o.would_block), (TOSES.len(), false));
        // each one twice (dup=1), the copy marked as well, counted once
        let sent: Vec<u8> = f.inner().sent.iter().map(|d| d.meta.tos).collect();
        let want: Vec<u8> = MARKED.iter().flat_map(|&t| [t, t]).collect();
        assert_eq!(sent, want);
        assert_eq!(ce_marked(&f), 3);
        // receives pass untouched
        let mut out = Vec::new();
        f.recv(&mut out).unwrap();
        assert_eq!(out.iter().map(|d| d.meta.tos).collect::<Vec<_>>(), TOSES);
    }

    #[test]
    fn a_spec_without_ce_draws_the_faults_it_drew_before() {
        // which of 500 numbered datagrams arrive, in which order, with which TOS
        let run = |s: &str| {
            let spec = FaultSpec::parse(s).unwrap();
            let mut inbox = with_tos(&[0x6a; 500]);
            for (i, d) in inbox.iter_mut().enumerate() {
                d.payload = (i as u32).to_be_bytes().to_vec().into();
            }
            let mut f = FaultyTransport::new(Fake::new(inbox), spec, "t");
            let mut out = Vec::new();
            f.recv(&mut out).unwrap();
            f.recv(&mut out).unwrap(); // the held ones
            out.iter().map(|d| (d.payload.to_vec(), d.meta.tos)).collect::<Vec<_>>()
        };
        let before = run("loss=0.2,dup=0.1,reorder=0.1,seed=5");
        assert!(before.len() > 350 && before.len() < 500, "{}", before.len());
        // ce=0 draws nothing: the same faults with or without the key
        assert_eq!(run("loss=0.2,dup=0.1,reorder=0.1,seed=5,ce=0"), before);
        // a certain mark draws nothing either: the same faults, all CE
        let all: Vec<_> = before.iter().map(|(p, _)| (p.clone(), 0x6b)).collect();
        assert_eq!(run("loss=0.2,dup=0.1,reorder=0.1,seed=5,ce=1"), all);
    }
}
