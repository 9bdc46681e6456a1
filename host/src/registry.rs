//! Membership of a shared device: a directory per device in the user's
//! runtime directory, and file locks.
//!
//! ```text
//! $XDG_RUNTIME_DIR/roce-emu/udp-127.0.0.2-4791-n4026531840/   (else /tmp/roce-emu-<uid>/...)
//!                (raw devices: raw-IFNAME-ADDR-PORT-nNETNS; the suffix is the
//!                network namespace's inode: one address in two namespaces
//!                is two devices)
//!     group      held (flock, exclusive) while a member joins, leaves or
//!                re-maps the group: one change at a time
//!     slot-07    held (flock, exclusive) by member 7 for as long as it lives;
//!                holds "pid P gen G": G counts the slot's holders
//!     map        the last steering map: "slot index pid" lines
//!     xrcd-D-I   held (flock, shared) by every member with an XRC domain
//!                opened by the file whose (st_dev, st_ino) is (D, I), hex
//! $XDG_RUNTIME_DIR/roce-emu/credits-n4026531840
//!                the credits of every UDP socket of the namespace's devices
//!                (mapped by each process: roce_transport::credits)
//! ```
//!
//! A lock dies with its process, so a crashed member's slot is free the
//! moment the kernel has closed its files: nobody polls, and the next
//! process to join takes the lowest free slot.

use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// How long a process waits for another to finish changing the group.
pub const GROUP_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// How many processes can share one device (slots `0..MAX_MEMBERS`; a
/// slot is the top byte of its member's QPNs).
pub const MAX_MEMBERS: u8 = 64;

/// Environment variable naming the registry's root directory (default:
/// `$XDG_RUNTIME_DIR/roce-emu`, else `/tmp/roce-emu-<uid>`).
pub const ENV_RUN_DIR: &str = "ROCE_EMU_RUN_DIR";

/// Why a process could not join a device.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// Every slot is held.
    #[error("all {max} member slots of {addr} are in use (one per process that opens the device); close a program that uses it")]
    Full {
        /// The device address.
        addr: SocketAddr,
        /// The number of slots.
        max: u8,
    },
    /// The registry directory could not be made or read.
    #[error("registry {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Another process has been changing the group for too long.
    #[error("{path} stayed locked for {waited:?}: another process of this device is stuck while joining or leaving (stopped in a debugger?)")]
    Busy {
        /// The group lock file.
        path: PathBuf,
        /// How long we waited.
        waited: std::time::Duration,
    },
    /// The registry directory belongs to another user.
    #[error("registry {path} belongs to uid {owner}, not to this user: set ROCE_EMU_RUN_DIR to a directory of your own")]
    NotOwner {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> JoinError + '_ {
    move |source| JoinError::Io { path: path.to_path_buf(), source }
}

/// The registry's root directory for this user.
///
/// Not `ROCE_EMU_RUNTIME_DIR` (where counters are published, which
/// `cargo test` points into each checkout's `target/`): every process that
/// binds an address must find the same registry, whichever checkout or
/// program it comes from, or two of them would take the same slot.
pub fn run_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(ENV_RUN_DIR).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        if d.is_dir() {
            return d.join("roce-emu");
        }
    }
    PathBuf::from(format!("/tmp/roce-emu-{}", nix::unistd::getuid()))
}

/// The directory of the UDP device bound at `addr` in this process's
/// network namespace.
pub fn device_dir(addr: SocketAddr) -> PathBuf {
    let ip = addr.ip().to_string().replace(':', "_");
    run_dir().join(format!("udp-{ip}-{}{}", addr.port(), netns_tag()))
}

/// The directory of the raw device on interface `ifname` with address
/// `addr` in this process's network namespace.
pub fn raw_device_dir(ifname: &str, addr: SocketAddr) -> PathBuf {
    let ip = addr.ip().to_string().replace(':', "_");
    let ifname: String =
        ifname.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    run_dir().join(format!("raw-{ifname}-{ip}-{}{}", addr.port(), netns_tag()))
}

/// The host's credit table (`roce_transport::credits`) of this process's
/// network namespace: `credits-n<inode>` in the registry's root, which is
/// made (private to this user) if needed.
pub fn credits_path() -> Result<PathBuf, JoinError> {
    let root = run_dir();
    make_private_dir(&root)?;
    Ok(root.join(format!("credits{}", netns_tag())))
}

/// `-n<inode>` of this process's network namespace (empty if unknown): an
/// address in two namespaces is two devices, with two registries.
fn netns_tag() -> String {
    match std::fs::metadata("/proc/self/ns/net") {
        Ok(m) => format!("-n{}", m.ino()),
        Err(_) => String::new(),
    }
}

/// Make `dir` (and its parents) private to this user; refuse a directory
/// of another user.
fn make_private_dir(dir: &Path) -> Result<(), JoinError> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io_err(dir))?;
    let md = std::fs::metadata(dir).map_err(io_err(dir))?;
    let me = nix::unistd::getuid().as_raw();
    if md.uid() != me {
        return Err(JoinError::NotOwner { path: dir.to_path_buf(), owner: md.uid() });
    }
    Ok(())
}

fn open_rw(path: &Path) -> Result<File, JoinError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(io_err(path))
}

fn slot_path(dir: &Path, slot: u8) -> PathBuf {
    dir.join(format!("slot-{slot:02}"))
}

/// The group lock of a device directory: one membership change at a time.
pub struct GroupLock {
    _lock: Flock<File>,
}

impl GroupLock {
    /// Wait for the group lock of `dir`, at most [`GROUP_LOCK_WAIT`] (a
    /// change of the group takes milliseconds; a holder stopped in the
    /// middle of one, e.g. in a debugger, must not hang every other
    /// process for ever).
    pub fn take(dir: &Path) -> Result<GroupLock, JoinError> {
        GroupLock::take_within(dir, GROUP_LOCK_WAIT)
    }

    /// [`GroupLock::take`], waiting at most `wait`.
    pub fn take_within(dir: &Path, wait: std::time::Duration) -> Result<GroupLock, JoinError> {
        make_private_dir(dir)?;
        let path = dir.join("group");
        let mut f = open_rw(&path)?;
        let end = std::time::Instant::now() + wait;
        let mut nap = std::time::Duration::from_micros(200);
        loop {
            match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(GroupLock { _lock: lock }),
                Err((back, nix::errno::Errno::EWOULDBLOCK)) if std::time::Instant::now() < end => {
                    f = back;
                    std::thread::sleep(nap);
                    nap = (nap * 2).min(std::time::Duration::from_millis(10));
                }
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                    return Err(JoinError::Busy { path, waited: wait })
                }
                Err((_, e)) => return Err(JoinError::Io { path, source: e.into() }),
            }
        }
    }
}

/// A held slot: the member's identity on the device, for as long as the
/// value lives.
pub struct Slot {
    /// The slot number (the top byte of this member's QPNs).
    pub slot: u8,
    /// How many times this slot has been taken (this holder included).
    pub generation: u32,
    _lock: Flock<File>,
}

impl Slot {
    /// Say in the slot's file that its member is leaving: its engine is
    /// about to stop and it answers no more probes, so probe rounds do not
    /// wait for it (the slot stays held until the member's socket is
    /// closed).
    pub fn mark_leaving(&mut self) {
        let line = format!("pid {} gen {} leaving 1\n", std::process::id(), self.generation);
        let _ = self
            ._lock
            .set_len(0)
            .and_then(|_| self._lock.rewind())
            .and_then(|_| self._lock.write_all(line.as_bytes()));
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("slot", &self.slot).field("gen", &self.generation).finish()
    }
}

/// Take the lowest free slot of `dir` (call with the group lock held).
pub fn take_slot(dir: &Path, addr: SocketAddr) -> Result<Slot, JoinError> {
    for s in 0..MAX_MEMBERS {
        let path = slot_path(dir, s);
        let f = open_rw(&path)?;
        let mut lock = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => continue,
            Err((_, e)) => return Err(JoinError::Io { path, source: e.into() }),
        };
        let mut text = String::new();
        let _ = lock.read_to_string(&mut text);
        let prev = parse_field(&text, "gen").unwrap_or(0);
        let generation = prev.wrapping_add(1);
        let line = format!("pid {} gen {generation}\n", std::process::id());
        lock.set_len(0)
            .and_then(|_| lock.rewind())
            .and_then(|_| lock.write_all(line.as_bytes()))
            .map_err(io_err(&path))?;
        return Ok(Slot { slot: s, generation, _lock: lock });
    }
    Err(JoinError::Full { addr, max: MAX_MEMBERS })
}

fn parse_field(text: &str, key: &str) -> Option<u32> {
    let mut it = text.split_whitespace();
    while let Some(k) = it.next() {
        if k == key {
            return it.next()?.parse().ok();
        }
    }
    None
}

/// One member as the registry sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its slot.
    pub slot: u8,
    /// Its process id (as it wrote it when it joined).
    pub pid: u32,
    /// It is leaving ([`Slot::mark_leaving`]): it answers no probe.
    pub leaving: bool,
}

/// The live members of `dir`: the slots whose lock is held (by any
/// process, this one included).
pub fn live_members(dir: &Path) -> Vec<Member> {
    let mut out = Vec::new();
    for s in 0..MAX_MEMBERS {
        let path = slot_path(dir, s);
        let Ok(f) = OpenOptions::new().read(true).open(&path) else { continue };
        match Flock::lock(f, FlockArg::LockSharedNonblock) {
            // nobody holds it: a free (or crashed member's) slot
            Ok(_) => {}
            Err((mut f, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut text = String::new();
                let _ = f.read_to_string(&mut text);
                out.push(Member {
                    slot: s,
                    pid: parse_field(&text, "pid").unwrap_or(0),
                    leaving: parse_field(&text, "leaving").is_some(),
                });
            }
            Err(_) => {}
        }
    }
    out
}

/// The steering map: which socket index of the group holds which slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SteerMap {
    /// `(slot, index, pid)`, one per mapped member.
    pub entries: Vec<(u8, u8, u32)>,
}

impl SteerMap {
    /// Read `dir`'s map (empty if there is none).
    pub fn read(dir: &Path) -> SteerMap {
        let text = std::fs::read_to_string(dir.join("map")).unwrap_or_default();
        let mut entries = Vec::new();
        for l in text.lines() {
            let v: Vec<u32> = l.split_whitespace().filter_map(|w| w.parse().ok()).collect();
            if let [s, i, p] = v[..] {
                if let (Ok(s), Ok(i)) = (u8::try_from(s), u8::try_from(i)) {
                    entries.push((s, i, p));
                }
            }
        }
        SteerMap { entries }
    }

    /// Write it to `dir` (call with the group lock held).
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        let mut text = String::new();
        for (s, i, p) in &self.entries {
            text.push_str(&format!("{s} {i} {p}\n"));
        }
        let tmp = dir.join("map.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(tmp, dir.join("map"))
    }

    /// Whether `dir`'s map was written after `t`.
    pub fn written_since(dir: &Path, t: std::time::SystemTime) -> bool {
        std::fs::metadata(dir.join("map")).and_then(|m| m.modified()).is_ok_and(|m| m > t)
    }

    /// The map after the socket holding `slot` leaves the group: the
    /// kernel moves the socket with the highest index into its place.
    pub fn without(&self, slot: u8) -> SteerMap {
        let Some(&(_, hole, _)) = self.entries.iter().find(|e| e.0 == slot) else {
            return self.clone();
        };
        let last = self.entries.iter().map(|e| e.1).max().unwrap_or(0);
        let entries = self
            .entries
            .iter()
            .filter(|e| e.0 != slot)
            .map(|&(s, i, p)| if i == last { (s, hole, p) } else { (s, i, p) })
            .collect();
        SteerMap { entries }
    }
}

/// A CM listener's hold on a service ID device-wide: the file
/// `listen-<service id>` locked by the listening member (its slot
/// inside).
pub struct ListenLock {
    path: PathBuf,
    _lock: Flock<File>,
}

impl ListenLock {
    /// Stop listening: remove the file, then let the lock go (call with
    /// the group lock held, as [`listen`]).
    pub fn release(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn listen_path(dir: &Path, service_id: u64) -> PathBuf {
    dir.join(format!("listen-{service_id:016x}"))
}

/// Hold `service_id` for the member in `slot` (call with the group lock
/// held): `Ok(None)` if another process of the device listens on it
/// (EADDRINUSE, as the kernel's CM says for a port of one device).
pub fn listen(dir: &Path, service_id: u64, slot: u8) -> Result<Option<ListenLock>, JoinError> {
    let path = listen_path(dir, service_id);
    let f = open_rw(&path)?;
    let mut lock = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
        Err((_, e)) => return Err(JoinError::Io { path, source: e.into() }),
    };
    let line = format!("slot {slot} pid {}\n", std::process::id());
    lock.set_len(0)
        .and_then(|_| lock.rewind())
        .and_then(|_| lock.write_all(line.as_bytes()))
        .map_err(io_err(&path))?;
    Ok(Some(ListenLock { path, _lock: lock }))
}

/// The live listeners of `dir`: `(service ID, slot)` of every held
/// `listen-*` file (a crashed listener's file is left behind unlocked, and
/// skipped).
pub fn listeners(dir: &Path) -> Vec<(u64, u8)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return out };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(hex) = name.to_str().and_then(|n| n.strip_prefix("listen-")) else { continue };
        let Ok(sid) = u64::from_str_radix(hex, 16) else { continue };
        let Ok(f) = OpenOptions::new().read(true).open(e.path()) else { continue };
        if let Err((mut f, nix::errno::Errno::EWOULDBLOCK)) =
            Flock::lock(f, FlockArg::LockSharedNonblock)
        {
            let mut text = String::new();
            let _ = f.read_to_string(&mut text);
            if let Some(slot) = parse_field(&text, "slot").and_then(|s| u8::try_from(s).ok()) {
                out.push((sid, slot));
            }
        }
    }
    out.sort();
    out
}

/// The uid owning a UDP socket bound to `addr`, from `/proc/net/udp{,6}`
/// (to name the holder when another user's processes hold the device).
pub fn udp_owner(addr: SocketAddr) -> Option<u32> {
    let (file, want) = match addr {
        SocketAddr::V4(a) => {
            let ip = u32::from_ne_bytes(a.ip().octets());
            ("/proc/net/udp", format!("{ip:08X}:{:04X}", a.port()))
        }
        SocketAddr::V6(a) => {
            let o = a.ip().octets();
            let mut s = String::new();
            for w in o.chunks(4) {
                let v = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
                s.push_str(&format!("{v:08X}"));
            }
            ("/proc/net/udp6", format!("{s}:{:04X}", a.port()))
        }
    };
    let text = std::fs::read_to_string(file).ok()?;
    for l in text.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1) == Some(&want.as_str()) {
            return f.get(7)?.parse().ok();
        }
    }
    None
}

/// A member's hold on an XRC domain of the device (see [`xrcd`]).
pub struct XrcdLock {
    _lock: Flock<File>,
}

/// Hold the XRC domain of the file `(st_dev, st_ino)` = `key` for this
/// process (a shared lock on `xrcd-D-I`, held as long as the returned
/// lock): whether another process of the device held it already, and the
/// hold. The kernel keeps one domain per file and device; on a shared
/// device each member has its own piece of it, and this says whether the
/// domain exists elsewhere (`ibv_open_xrcd` without `O_CREAT` needs it;
/// with `O_EXCL` it must not).
pub fn xrcd(dir: &Path, key: (u64, u64)) -> Result<(bool, XrcdLock), JoinError> {
    let path = dir.join(format!("xrcd-{:x}-{:x}", key.0, key.1));
    let f = open_rw(&path)?;
    // alone if an exclusive lock is granted at once; then shared
    let (elsewhere, f) = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(l) => match l.unlock() {
            Ok(f) => (false, f),
            Err((_, e)) => return Err(JoinError::Io { path, source: e.into() }),
        },
        Err((f, nix::errno::Errno::EWOULDBLOCK)) => (true, f),
        Err((_, e)) => return Err(JoinError::Io { path, source: e.into() }),
    };
    let lock = Flock::lock(f, FlockArg::LockShared)
        .map_err(|(_, e)| JoinError::Io { path: path.clone(), source: e.into() })?;
    Ok((elsewhere, XrcdLock { _lock: lock }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_lock_held_too_long_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("roce-host-busy-{}", std::process::id()));
        let held = GroupLock::take(&dir).unwrap();
        let t0 = std::time::Instant::now();
        let e = GroupLock::take_within(&dir, std::time::Duration::from_millis(50)).err();
        assert!(t0.elapsed() >= std::time::Duration::from_millis(50));
        let e = e.expect("held elsewhere");
        assert!(matches!(e, JoinError::Busy { .. }), "{e}");
        assert!(e.to_string().contains("stayed locked for 50ms"), "{e}");
        drop(held);
        assert!(GroupLock::take_within(&dir, std::time::Duration::ZERO).is_ok(), "free again");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A registry directory of another user is refused (as root, the test
    /// makes one; otherwise it cannot and checks nothing else).
    #[test]
    fn a_registry_of_another_user_is_refused() {
        let dir = std::env::temp_dir().join(format!("roce-host-owner-{}", std::process::id()));
        make_private_dir(&dir).unwrap();
        if nix::unistd::getuid().is_root() {
            nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(4242)), None).unwrap();
            let e = GroupLock::take(&dir).err().expect("not ours");
            assert!(matches!(e, JoinError::NotOwner { owner: 4242, .. }), "{e}");
            assert!(e.to_string().contains("belongs to uid 4242"), "{e}");
        } else {
            assert!(GroupLock::take(&dir).is_ok());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn map_without_moves_the_last_socket_into_the_hole() {
        let m = SteerMap { entries: vec![(0, 0, 10), (3, 1, 13), (5, 2, 15), (9, 3, 19)] };
        assert_eq!(m.without(3).entries, vec![(0, 0, 10), (5, 2, 15), (9, 1, 19)]);
        assert_eq!(m.without(9).entries, vec![(0, 0, 10), (3, 1, 13), (5, 2, 15)]);
        assert_eq!(m.without(42), m);
    }

    #[test]
    fn fields_parse() {
        assert_eq!(parse_field("pid 12 gen 7\n", "gen"), Some(7));
        assert_eq!(parse_field("pid 12 gen 7\n", "pid"), Some(12));
        assert_eq!(parse_field("garbage", "gen"), None);
    }

    #[test]
    fn udp_owner_finds_our_socket() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let me = nix::unistd::getuid().as_raw();
        assert_eq!(udp_owner(s.local_addr().unwrap()), Some(me));
        let s6 = std::net::UdpSocket::bind("[::1]:0");
        if let Ok(s6) = s6 {
            assert_eq!(udp_owner(s6.local_addr().unwrap()), Some(me));
        }
    }

    #[test]
    fn slots_are_taken_lowest_first_and_freed_with_their_holder() {
        let root = std::env::temp_dir().join(format!("roce-host-reg-{}", std::process::id()));
        let dir = root.join("dev");
        let addr: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let g = GroupLock::take(&dir).unwrap();
        let a = take_slot(&dir, addr).unwrap();
        let b = take_slot(&dir, addr).unwrap();
        let c = take_slot(&dir, addr).unwrap();
        assert_eq!((a.slot, b.slot, c.slot), (0, 1, 2));
        assert_eq!(a.generation, 1);
        let live: Vec<u8> = live_members(&dir).iter().map(|m| m.slot).collect();
        assert_eq!(live, vec![0, 1, 2]);
        assert!(live_members(&dir).iter().all(|m| m.pid == std::process::id() && !m.leaving));
        let mut b = b;
        b.mark_leaving();
        let leaving: Vec<u8> =
            live_members(&dir).iter().filter(|m| m.leaving).map(|m| m.slot).collect();
        assert_eq!(leaving, vec![1], "held, and marked leaving");
        drop(b);
        let live: Vec<u8> = live_members(&dir).iter().map(|m| m.slot).collect();
        assert_eq!(live, vec![0, 2]);
        let b2 = take_slot(&dir, addr).unwrap();
        assert_eq!((b2.slot, b2.generation), (1, 2), "slot 1 taken again, second holder");
        drop(g);
        let mut held = vec![a, b2, c];
        let e = loop {
            match take_slot(&dir, addr) {
                Ok(s) => held.push(s),
                Err(e) => break e,
            }
        };
        assert_eq!(held.len(), usize::from(MAX_MEMBERS));
        assert!(matches!(e, JoinError::Full { max: MAX_MEMBERS, .. }), "{e}");
        assert!(e.to_string().contains("all 64 member slots of 127.0.0.1:4791 are in use"));
        drop(held);
        assert!(live_members(&dir).is_empty());
        let g = GroupLock::take(&dir).unwrap();
        let l = listen(&dir, 0x0106_0000_0000_4e20, 5).unwrap().expect("free");
        assert!(listen(&dir, 0x0106_0000_0000_4e20, 6).unwrap().is_none(), "held: EADDRINUSE");
        let l2 = listen(&dir, 0x0106_0000_0000_4e21, 6).unwrap().expect("free");
        assert_eq!(listeners(&dir), vec![(0x0106_0000_0000_4e20, 5), (0x0106_0000_0000_4e21, 6)]);
        l.release();
        drop(l2); // (a crashed listener: its file stays, unlocked)
        assert_eq!(listeners(&dir), vec![]);
        assert!(listen(&dir, 0x0106_0000_0000_4e21, 7).unwrap().is_some(), "taken over");
        drop(g);
        let m = SteerMap { entries: vec![(1, 0, 5), (0, 1, 6)] };
        m.write(&dir).unwrap();
        assert_eq!(SteerMap::read(&dir), m);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_xrc_domain_is_held_by_every_member_that_has_it() {
        let dir = std::env::temp_dir().join(format!("roce-reg-xrcd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (first, a) = xrcd(&dir, (1, 2)).unwrap();
        assert!(!first, "nobody had it");
        let (second, b) = xrcd(&dir, (1, 2)).unwrap();
        assert!(second, "the first holder has it (flock: per open file, as per process)");
        let (other, _c) = xrcd(&dir, (1, 3)).unwrap();
        assert!(!other, "another file's domain is another domain");
        drop(a);
        drop(b);
        let (again, _d) = xrcd(&dir, (1, 2)).unwrap();
        assert!(!again, "released with the holds");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
