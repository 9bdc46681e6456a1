//! Seeded fault injection on the real transports: [`FaultyTransport`]
//! wraps any [`Link`] (UDP or raw) and loses, duplicates, reorders or
//! corrupts datagrams, like the simulated fabric's `FaultConfig`
//! (`roce_faults`), so that retransmission can be exercised against
//! a real peer (the kernel's rxe, perftest) on a real wire.
//!
//! Configured by a spec string, usually from the environment variable
//! `ROCE_EMU_FAULTS` (read when a device is opened; `roce perf --faults`
//! sets it):
//!
//! ```text
//! ROCE_EMU_FAULTS=loss=0.05,seed=7
//! ROCE_EMU_FAULTS=loss=0.02,dup=0.01,reorder=0.01,corrupt=0.01,dir=both,seed=42
//! ```
//!
//! * `loss=P` — drop the datagram;
//! * `dup=P` — deliver it twice;
//! * `reorder=P` — hold it back until after the datagrams of the next
//!   receive (or send) batch;
//! * `corrupt=P` — flip one bit of the UDP payload (never in BTH byte 4,
//!   which the ICRC does not cover), so the core's ICRC check must drop it;
//! * `dir=rx|tx|both` — which direction `loss`, `dup` and `reorder` act on
//!   (default `rx`: what we receive). Corruption always acts on receive,
//!   after the transport's own ICRC check: on send, the transport may
//!   recompute the ICRC over the corrupted bytes and hide the fault.
//! * `seed=N` — the generator's seed (default 1): the same seed on the
//!   same sequence of datagrams gives the same faults.
//!
//! Each datagram's fate is decided by the simulated fabric's decision
//! function, [`FaultDice::decide`] (`roce_faults`), from the same
//! seeded generator and in the same order (loss, corruption, duplication,
//! reordering): this module keeps only the mechanics (holding datagrams
//! behind the next batch, sending the copy). As on the fabric, a reordered
//! datagram may also be corrupted or duplicated.
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
    /// Direction of loss, duplication and reordering.
    pub dir: Direction,
    /// Generator seed.
    pub seed: u64,
}

impl Default for FaultSpec {
    fn default() -> Self {
        FaultSpec { loss: 0.0, dup: 0.0, reorder: 0.0, corrupt: 0.0, dir: Direction::Rx, seed: 1 }
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
                        "unknown fault {k:?} (loss, dup, reorder, corrupt, dir, seed)"
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
    /// loss, duplication and reordering only where [`FaultSpec::dir`] says,
    /// corruption on receive only.
    pub fn rates(&self, rx: bool) -> FaultRates {
        let on = if rx { self.dir.rx() } else { self.dir.tx() };
        let p = |v: f64| if on { v } else { 0.0 };
        FaultRates {
            drop: p(self.loss),
            corrupt: if rx { self.corrupt } else { 0.0 },
            duplicate: p(self.dup),
            reorder: p(self.reorder),
        }
    }

    /// Whether anything can happen at all.
    pub fn is_active(&self) -> bool {
        self.loss > 0.0 || self.dup > 0.0 || self.reorder > 0.0 || self.corrupt > 0.0
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
            let to = if fate.reorder { &mut self.held_tx } else { &mut self.pending_tx };
            to.extend(std::iter::repeat_n(d, n).cloned());
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
}
