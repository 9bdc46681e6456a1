//! No datagram lost between the devices of one host (issue 41): credits
//! in memory shared by the host's processes, doing what PFC does on a
//! RoCE fabric.
//!
//! RoCE assumes a lossless fabric. Between two processes of one host the
//! "fabric" is the receiver's socket buffer, and a receiver that is not
//! scheduled lets it overflow (the kernel drops the datagram, counted in
//! `rx_socket_drops`); RC then recovers only when its retransmit timer
//! fires, which for UCX is a whole second. So every UDP device of a host
//! registers its socket in a table (a file in the device registry,
//! `credits-n<netns>`, mapped by every process: [`roce_region::words`]):
//!
//! - **receiver:** its slot holds the bytes sent to it (`sent`, added to by
//!   every sender) and the bytes it has read (`read`), in cost units (UDP
//!   payload + [`OVERHEAD`] per datagram), and its budget: a quarter of its
//!   socket's receive buffer (the kernel charges a datagram more than its
//!   payload). When a read finds the socket empty it raises `read` to
//!   `sent`: whatever was counted and never arrived (lost elsewhere,
//!   steered to another member) stops holding credits.
//! - **sender:** before a run of datagrams to one socket leaves, it adds
//!   their cost to `sent` if `sent - read` stays within the budget;
//!   otherwise the run waits (the engine retries shortly: `credit_waits`),
//!   as a PFC pause holds a priority. A receiver that reads nothing for
//!   [`WATCHDOG`] while credits are out is not waited for any longer (PFC's
//!   watchdog; `credit_watchdog`): a dead or stopped process never stalls
//!   its peers for good, and a sender about to wait for a slot whose owner
//!   process is gone frees the slot.
//!
//! A shared device's members each have a socket of their own (the kernel
//! steers by the top byte of the destination QPN): their slots are keyed by
//! address, port and that byte; an unshared device's by address and port.
//! Datagrams to sockets not in the table (another host, another user's
//! table, rxe) are not regulated.

use roce_region::words::SharedWords;
use rustc_hash::FxHashMap as HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Slots in a table.
pub const SLOTS: usize = 4096;
/// Words per slot: key, owner pid, sent, read, budget.
const WORDS: usize = 8;
const KEY: usize = 0;
const PID: usize = 1;
const SENT: usize = 2;
const READ: usize = 3;
const BUDGET: usize = 4;
/// Slots a key may be in (from its hash on).
const PROBE: usize = 32;
/// A freed slot.
const TOMB: u64 = u64::MAX;
/// Cost units a datagram is charged beyond its UDP payload (the kernel's
/// per-datagram accounting).
pub const OVERHEAD: u64 = 512;
/// How long a sender waits for a receiver that reads nothing.
pub const WATCHDOG: Duration = Duration::from_millis(20);
/// How soon a waiting sender looks again.
pub const RETRY: Duration = Duration::from_micros(200);
/// How many runs to a destination missing from the table go before it is
/// looked up again (a receiver that registers later is found then).
const RELOOK_RUNS: u32 = 1024;
/// The member byte of an unshared device's slot.
pub const UNSHARED: u16 = 0x100;

/// The host's credit table (one file, mapped).
#[derive(Debug)]
pub struct CreditTable {
    w: SharedWords,
}

/// A slot's key: FNV-1a of the address, port and member (never 0 or the
/// freed marker).
pub fn key(addr: SocketAddr, member: u16) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    match addr.ip() {
        IpAddr::V4(a) => a.octets().into_iter().for_each(&mut eat),
        IpAddr::V6(a) => a.octets().into_iter().for_each(&mut eat),
    }
    addr.port().to_be_bytes().into_iter().for_each(&mut eat);
    member.to_be_bytes().into_iter().for_each(&mut eat);
    match h {
        0 | TOMB => 1,
        h => h,
    }
}

impl CreditTable {
    /// Open (creating) the table at `path`.
    pub fn open(path: &Path) -> io::Result<Arc<CreditTable>> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        Ok(Arc::new(CreditTable { w: SharedWords::map(&f, SLOTS * WORDS)? }))
    }

    fn at(slot: usize, word: usize) -> usize {
        slot * WORDS + word
    }

    /// The slot holding `key`, if any.
    fn find(&self, key: u64) -> Option<usize> {
        let start = (key as usize) % SLOTS;
        (0..PROBE).map(|i| (start + i) % SLOTS).find(|&s| self.w.load(Self::at(s, KEY)) == key)
    }

    /// A receiver's slot for `key` (its own from an earlier run, or a free
    /// one), with `budget` cost units; `None` when the key's slots are
    /// taken.
    fn claim(&self, key: u64, budget: u64) -> Option<usize> {
        let slot = self.find(key).or_else(|| {
            let start = (key as usize) % SLOTS;
            let window = || (0..PROBE).map(|i| (start + i) % SLOTS);
            // a free slot, else one whose owner process is gone (killed
            // without closing: nobody else frees it)
            window()
                .find(|&s| {
                    let k = Self::at(s, KEY);
                    self.w.compare_exchange(k, 0, key).is_ok()
                        || self.w.compare_exchange(k, TOMB, key).is_ok()
                })
                .or_else(|| {
                    window().find(|&s| {
                        let old = self.w.load(Self::at(s, KEY));
                        !owner_alive(self.w.load(Self::at(s, PID)))
                            && self.w.compare_exchange(Self::at(s, KEY), old, key).is_ok()
                    })
                })
        })?;
        self.w.store(Self::at(slot, PID), u64::from(std::process::id()));
        self.w.store(Self::at(slot, BUDGET), budget);
        // nothing of an earlier owner is in this socket
        self.w.fetch_max(Self::at(slot, READ), self.w.load(Self::at(slot, SENT)));
        Some(slot)
    }

    /// Credits out to a slot: counted and not read yet.
    pub fn outstanding(&self, slot: usize) -> u64 {
        let sent = self.w.load(Self::at(slot, SENT));
        sent.saturating_sub(self.w.load(Self::at(slot, READ)))
    }
}

/// A receiving socket's slot. Freed when dropped.
#[derive(Debug)]
pub struct CreditRx {
    t: Arc<CreditTable>,
    slot: usize,
    key: u64,
}

impl CreditRx {
    /// Register the socket at `addr` (a shared device's member: `member`
    /// is its QPN byte, else [`UNSHARED`]) with a receive buffer of
    /// `rcvbuf` bytes (as `SO_RCVBUF` reports it).
    pub fn register(
        t: &Arc<CreditTable>,
        addr: SocketAddr,
        member: u16,
        rcvbuf: usize,
    ) -> Option<CreditRx> {
        let key = key(addr, member);
        let slot = t.claim(key, (rcvbuf as u64 / 4).max(64 * 1024))?;
        Some(CreditRx { t: t.clone(), slot, key })
    }

    /// `cost` units were read from the socket.
    pub fn consumed(&self, cost: u64) {
        if cost > 0 {
            self.t.w.fetch_add(CreditTable::at(self.slot, READ), cost);
        }
    }

    /// A read found the socket empty: nothing counted is waiting in it.
    /// (Two loads when nothing is out: a program polling an empty socket
    /// writes nothing to the line its senders write.)
    pub fn drained(&self) {
        let sent = self.t.w.load(CreditTable::at(self.slot, SENT));
        if self.t.w.load(CreditTable::at(self.slot, READ)) < sent {
            self.t.w.fetch_max(CreditTable::at(self.slot, READ), sent);
        }
    }

    /// Credits out to this socket now.
    pub fn outstanding(&self) -> u64 {
        self.t.outstanding(self.slot)
    }
}

impl Drop for CreditRx {
    fn drop(&mut self) {
        let _ = self.t.w.compare_exchange(CreditTable::at(self.slot, KEY), self.key, TOMB);
    }
}

/// A destination as a sender knows it.
#[derive(Clone, Copy, Debug)]
struct Dest {
    /// Its slot (`None`: not in the table when last looked up) and the
    /// key it was found under.
    slot: Option<usize>,
    key: u64,
    /// Runs sent since a missing slot was looked up (looked up again every
    /// [`RELOOK_RUNS`]).
    misses: u32,
    /// Waiting for credits: since when, and the slot's `read` then.
    waiting: Option<(Instant, u64)>,
}

/// What a sender may send to a socket now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// This many cost units (at least the first datagram's): count what
    /// is sent with [`CreditTx::take`].
    Units(u64),
    /// The receiver is not in the table: anything, unregulated.
    Unregulated,
    /// The receiver's credits are out: hold everything.
    Wait,
    /// The receiver read nothing for [`WATCHDOG`]: anything (counted with
    /// [`CreditTx::take`]; the receiver may drop it).
    Watchdog,
}

/// A sending socket's view of the table.
#[derive(Debug)]
pub struct CreditTx {
    t: Arc<CreditTable>,
    /// By address and destination QPN byte: one lookup per run.
    dests: HashMap<(SocketAddr, u8), Dest>,
}

impl CreditTx {
    /// A sender using `t`.
    pub fn new(t: &Arc<CreditTable>) -> CreditTx {
        CreditTx { t: t.clone(), dests: HashMap::default() }
    }

    /// The slot of the socket that receives datagrams to `to` whose
    /// destination QPN's top byte is `qpn_byte`: an unshared device's
    /// socket, else that member's.
    fn dest(&mut self, to: SocketAddr, qpn_byte: u8) -> Dest {
        if let Some(d) = self.dests.get_mut(&(to, qpn_byte)) {
            d.misses = d.misses.wrapping_add(u32::from(d.slot.is_none()));
            if d.slot.is_some() || !d.misses.is_multiple_of(RELOOK_RUNS) {
                return *d;
            }
        }
        let found = [UNSHARED, u16::from(qpn_byte)]
            .into_iter()
            .map(|m| key(to, m))
            .find_map(|k| self.t.find(k).map(|slot| (k, slot)));
        let d = Dest {
            slot: found.map(|(_, s)| s),
            key: found.map_or(0, |(k, _)| k),
            misses: 0,
            waiting: None,
        };
        self.dests.insert((to, qpn_byte), d);
        d
    }

    /// What may be sent to `to` (datagrams whose destination QPN's top
    /// byte is `qpn_byte`), the next datagram costing `first` units. A
    /// datagram larger than the whole budget goes when nothing is out.
    pub fn admit(&mut self, to: SocketAddr, qpn_byte: u8, first: u64) -> Admit {
        let mut d = self.dest(to, qpn_byte);
        let Some(slot) = d.slot else { return Admit::Unregulated };
        let w = &self.t.w;
        if w.load(CreditTable::at(slot, KEY)) != d.key {
            // the receiver left (or the slot was reused): look it up again
            self.dests.remove(&(to, qpn_byte));
            return Admit::Unregulated;
        }
        let budget = w.load(CreditTable::at(slot, BUDGET));
        let read = w.load(CreditTable::at(slot, READ));
        let out = w.load(CreditTable::at(slot, SENT)).saturating_sub(read);
        let verdict = if out == 0 || out.saturating_add(first) <= budget {
            d.waiting = None;
            Admit::Units(budget.saturating_sub(out).max(first))
        } else {
            let now = Instant::now();
            match d.waiting {
                Some((since, r)) if r == read && now.duration_since(since) >= WATCHDOG => {
                    d.waiting = None;
                    Admit::Watchdog
                }
                Some((_, r)) if r == read => Admit::Wait,
                _ if !owner_alive(w.load(CreditTable::at(slot, PID))) => {
                    // a receiver killed without closing: its slot goes
                    let _ = w.compare_exchange(CreditTable::at(slot, KEY), d.key, TOMB);
                    self.dests.remove(&(to, qpn_byte));
                    return Admit::Unregulated;
                }
                _ => {
                    d.waiting = Some((now, read));
                    Admit::Wait
                }
            }
        };
        if let Some(e) = self.dests.get_mut(&(to, qpn_byte)) {
            e.waiting = d.waiting;
        }
        verdict
    }

    /// `cost` units of what [`CreditTx::admit`] allowed were sent to `to`.
    pub fn take(&mut self, to: SocketAddr, qpn_byte: u8, cost: u64) {
        let d = self.dest(to, qpn_byte);
        if let Some(slot) = d.slot {
            self.t.w.fetch_add(CreditTable::at(slot, SENT), cost);
        }
    }

    /// `cost` units admitted to `to` were not sent after all (the socket
    /// refused them): give them back.
    pub fn refund(&mut self, to: SocketAddr, qpn_byte: u8, cost: u64) {
        let d = self.dest(to, qpn_byte);
        if let Some(slot) = d.slot {
            self.t.w.fetch_add(CreditTable::at(slot, SENT), cost.wrapping_neg());
        }
    }
}

/// Whether the process `pid` (a slot's owner) exists.
fn owner_alive(pid: u64) -> bool {
    u32::try_from(pid).is_ok_and(process_alive)
}

/// Whether process `pid` exists: `kill(pid, 0)` fails with `ESRCH` only
/// when it does not (a process of another user answers `EPERM`: alive).
/// 0 (no process; `kill(0, 0)` would ask the caller's group) is not.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid @ 1..) = i32::try_from(pid) else { return false };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// What a datagram of `wire_len` UDP payload bytes costs.
pub fn cost(wire_len: usize) -> u64 {
    wire_len as u64 + OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_found_held_to_its_budget_and_freed() {
        let path = std::env::temp_dir().join(format!("roce-credit-table-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let t = CreditTable::open(&path).unwrap();
        let to: SocketAddr = "127.0.9.9:4791".parse().unwrap();
        let mut tx = CreditTx::new(&t);
        assert_eq!(tx.admit(to, 0, 1000), Admit::Unregulated, "nobody registered");
        // (the miss is remembered for a while: a new sender looks now)
        let rx = CreditRx::register(&t, to, UNSHARED, 4 * 64 * 1024).unwrap();
        let mut tx = CreditTx::new(&t);
        assert_eq!(tx.admit(to, 7, 1000), Admit::Units(65_536), "the budget: a quarter");
        tx.take(to, 7, 65_000);
        assert_eq!(tx.admit(to, 7, 500), Admit::Units(536));
        assert_eq!(tx.admit(to, 7, 1_000), Admit::Wait);
        assert_eq!(rx.outstanding(), 65_000);
        rx.consumed(30_000);
        assert_eq!(tx.admit(to, 7, 1_000), Admit::Units(30_536));
        rx.drained();
        assert_eq!(rx.outstanding(), 0);
        // a datagram larger than the budget goes when nothing is out
        assert_eq!(tx.admit(to, 7, 1 << 20), Admit::Units(1 << 20));
        tx.take(to, 7, 1 << 20);
        tx.refund(to, 7, 1 << 20);
        assert_eq!(rx.outstanding(), 0);
        // a shared device's member: keyed by its QPN byte
        let m = CreditRx::register(&t, "127.0.9.8:4791".parse().unwrap(), 3, 0).unwrap();
        let to2: SocketAddr = "127.0.9.8:4791".parse().unwrap();
        assert_eq!(tx.admit(to2, 4, 100), Admit::Unregulated, "another member's byte");
        assert_eq!(tx.admit(to2, 3, 100), Admit::Units(65_536));
        tx.take(to2, 3, 100);
        assert_eq!(m.outstanding(), 100);
        drop(rx);
        assert_eq!(tx.admit(to, 7, 100), Admit::Unregulated, "the receiver left");
        // a receiver killed without closing: its slot is freed by the first
        // sender that would wait for it
        let to3: SocketAddr = "127.0.9.7:4791".parse().unwrap();
        let dead = CreditRx::register(&t, to3, UNSHARED, 0).unwrap();
        t.w.store(CreditTable::at(dead.slot, PID), u64::from(u32::MAX >> 1));
        std::mem::forget(dead);
        let mut tx = CreditTx::new(&t);
        assert!(matches!(tx.admit(to3, 0, 100), Admit::Units(_)));
        tx.take(to3, 0, 1 << 20);
        assert_eq!(tx.admit(to3, 0, 100), Admit::Unregulated, "the owner is gone");
        assert_eq!(t.find(key(to3, UNSHARED)), None, "its slot is free");
        // a key whose every slot is held by processes that are gone takes
        // one of theirs; held by live ones, none
        let to4: SocketAddr = "127.0.9.6:4791".parse().unwrap();
        let k4 = key(to4, UNSHARED);
        let start = (k4 as usize) % SLOTS;
        for i in 0..PROBE {
            let s = (start + i) % SLOTS;
            t.w.store(CreditTable::at(s, KEY), 1000 + i as u64);
            t.w.store(CreditTable::at(s, PID), u64::from(std::process::id()));
        }
        assert!(CreditRx::register(&t, to4, UNSHARED, 0).is_none(), "every slot taken");
        t.w.store(CreditTable::at((start + 5) % SLOTS, PID), u64::from(u32::MAX >> 1));
        let r4 = CreditRx::register(&t, to4, UNSHARED, 0).expect("the dead owner's slot");
        assert_eq!(r4.slot, (start + 5) % SLOTS);
        let _ = std::fs::remove_file(&path);
    }
}
