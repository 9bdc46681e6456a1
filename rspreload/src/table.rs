//! The program's fds that stand for rsockets: fd -> [`Entry`].
//!
//! Every `read`, `write`, `close`, `poll`... of the program looks its fd
//! up here, so a lookup is two atomic loads and no lock: a directory of
//! chunks of 1024 entries, each chunk allocated the first time one of its
//! fds is mapped and never freed (a few KiB per thousand fds). An entry
//! is one `u64`, written and read whole. Only mapping and unmapping an
//! rsocket's fd (socket, accept, dup, close) touch the reference counts,
//! under a mutex: several fds (`dup`) may stand for one rsocket, which is
//! closed with the last of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;
const CHUNKS: usize = 4096;
/// fds at or above this are never mapped (socket/accept fail with EMFILE).
pub const MAX_FD: usize = CHUNK * CHUNKS;

type Chunk = [AtomicU64; CHUNK];

static DIR: [AtomicPtr<Chunk>; CHUNKS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];
/// How many fds are mapped (poll and select skip the lookups at 0).
static MAPPED: AtomicUsize = AtomicUsize::new(0);
/// rsocket -> how many fds stand for it.
static REFS: Mutex<Option<HashMap<i32, u32>>> = Mutex::new(None);

/// What an fd stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The rsocket's number (in the rsocket library).
    pub rs: i32,
    /// `AF_INET` or `AF_INET6` (`SO_DOMAIN`).
    pub domain: u8,
    /// `listen` succeeded (`SO_ACCEPTCONN`).
    pub listening: bool,
    /// Inherited over `fork`: the rsocket is the parent's; the child may
    /// only close the fd.
    pub stale: bool,
}

const PRESENT: u64 = 1 << 32;
const LISTENING: u64 = 1 << 48;
const STALE: u64 = 1 << 49;

impl Entry {
    pub fn new(rs: i32, domain: i32) -> Entry {
        Entry { rs, domain: domain as u8, listening: false, stale: false }
    }

    pub fn pack(self) -> u64 {
        u64::from(self.rs as u32)
            | PRESENT
            | (u64::from(self.domain) << 40)
            | if self.listening { LISTENING } else { 0 }
            | if self.stale { STALE } else { 0 }
    }

    pub fn unpack(v: u64) -> Option<Entry> {
        (v & PRESENT != 0).then_some(Entry {
            rs: v as u32 as i32,
            domain: (v >> 40) as u8,
            listening: v & LISTENING != 0,
            stale: v & STALE != 0,
        })
    }
}

/// The slot of `fd`, if its chunk exists.
fn slot(fd: i32) -> Option<&'static AtomicU64> {
    let i = usize::try_from(fd).ok().filter(|&i| i < MAX_FD)?;
    let chunk = DIR.get(i >> CHUNK_BITS)?.load(Ordering::Acquire);
    // SAFETY: a non-null directory pointer is a leaked `Box<Chunk>`, never
    // freed nor moved: a shared reference to it is valid for the process.
    let chunk: &'static Chunk = unsafe { chunk.as_ref() }?;
    chunk.get(i & (CHUNK - 1))
}

/// The slot of `fd`, its chunk allocated if need be (None: out of range).
fn slot_or_new(fd: i32) -> Option<&'static AtomicU64> {
    if let Some(s) = slot(fd) {
        return Some(s);
    }
    let i = usize::try_from(fd).ok().filter(|&i| i < MAX_FD)?;
    let dir = DIR.get(i >> CHUNK_BITS)?;
    let new: Box<Chunk> = Box::new([const { AtomicU64::new(0) }; CHUNK]);
    let new = Box::into_raw(new);
    if let Err(_other) =
        dir.compare_exchange(std::ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire)
    {
        // another thread made it first
        // SAFETY: `new` came from Box::into_raw above and was never shared.
        drop(unsafe { Box::from_raw(new) });
    }
    slot(fd)
}

/// What `fd` stands for (None: an ordinary fd).
#[inline]
pub fn get(fd: i32) -> Option<Entry> {
    if MAPPED.load(Ordering::Relaxed) == 0 {
        return None;
    }
    Entry::unpack(slot(fd)?.load(Ordering::Acquire))
}

/// Whether any fd is mapped.
#[inline]
pub fn any() -> bool {
    MAPPED.load(Ordering::Relaxed) != 0
}

/// Map `fd` to `e` and count a reference to its rsocket (none for a
/// stale entry): what `fd` stood for before, if anything (the caller lets
/// it go with [`release`]). Err if `fd` is out of range.
#[allow(clippy::result_unit_err)]
pub fn map(fd: i32, e: Entry) -> Result<Option<Entry>, ()> {
    let s = slot_or_new(fd).ok_or(())?;
    if !e.stale {
        hold(e.rs);
    }
    let prev = Entry::unpack(s.swap(e.pack(), Ordering::AcqRel));
    if prev.is_none() {
        MAPPED.fetch_add(1, Ordering::Relaxed);
    }
    Ok(prev)
}

/// Rewrite `fd`'s entry (same rsocket, other bits), if it is mapped.
pub fn update(fd: i32, e: Entry) {
    if let Some(s) = slot(fd) {
        let _ = s.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            (v & PRESENT != 0).then_some(e.pack())
        });
    }
}

/// Unmap `fd`: its entry, if it had one (the caller drops the reference
/// with [`release`]).
pub fn take(fd: i32) -> Option<Entry> {
    let old = Entry::unpack(slot(fd)?.swap(0, Ordering::AcqRel))?;
    MAPPED.fetch_sub(1, Ordering::Relaxed);
    Some(old)
}

fn with_refs<T>(f: impl FnOnce(&mut HashMap<i32, u32>) -> T) -> T {
    let mut g = REFS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// One more fd stands for `rs`.
pub fn hold(rs: i32) {
    with_refs(|m| *m.entry(rs).or_insert(0) += 1);
}

/// One fd fewer stands for `rs`: true if it was the last (close it).
pub fn release(rs: i32) -> bool {
    with_refs(|m| match m.get_mut(&rs) {
        Some(n) if *n > 1 => {
            *n -= 1;
            false
        }
        Some(_) => {
            m.remove(&rs);
            true
        }
        None => true,
    })
}

/// In a child after `fork`: every mapped fd becomes stale (the rsockets
/// are the parent's), and no rsocket is counted any more. Runs with one
/// thread; takes no lock but the reference counts' (`try_lock`: another
/// thread of the parent may have held it at the fork).
pub fn forget_all_after_fork() {
    for dir in &DIR {
        // SAFETY: as in `slot`.
        let Some(chunk) = (unsafe { dir.load(Ordering::Acquire).as_ref() }) else { continue };
        for s in chunk {
            let v = s.load(Ordering::Acquire);
            if v & PRESENT != 0 {
                s.store(v | STALE, Ordering::Release);
            }
        }
    }
    if let Ok(mut g) = REFS.try_lock() {
        *g = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_pack_and_unpack() {
        for e in [
            Entry::new(0, libc::AF_INET),
            Entry { rs: 123_456, domain: libc::AF_INET6 as u8, listening: true, stale: false },
            Entry { rs: i32::MAX, domain: 2, listening: false, stale: true },
        ] {
            assert_eq!(Entry::unpack(e.pack()), Some(e));
        }
        assert_eq!(Entry::unpack(0), None);
    }

    // one test for the process-wide table: the tests of this file run at once
    #[test]
    fn map_lookup_dup_release_and_fork() {
        assert_eq!(get(-1), None);
        assert_eq!(get(MAX_FD as i32), None);
        assert_eq!(map(-5, Entry::new(1, 2)), Err(()));
        assert_eq!(map(MAX_FD as i32, Entry::new(1, 2)), Err(()));
        let (a, b, far) = (7, 8, 3 * CHUNK as i32 + 5);
        assert_eq!(map(a, Entry::new(40, libc::AF_INET)), Ok(None));
        assert_eq!(get(a), Some(Entry::new(40, libc::AF_INET)));
        assert_eq!(get(b), None);
        assert_eq!(get(far), None, "a chunk never allocated");
        // a dup: two fds, one rsocket, closed with the last
        assert_eq!(map(b, Entry::new(40, libc::AF_INET)), Ok(None));
        assert_eq!(map(far, Entry::new(41, libc::AF_INET6)), Ok(None));
        assert!(any());
        let mut e = get(far).unwrap();
        e.listening = true;
        update(far, e);
        assert!(get(far).unwrap().listening);
        update(far + 1, e);
        assert_eq!(get(far + 1), None, "update maps nothing new");
        assert_eq!(take(a).map(|e| e.rs), Some(40));
        assert!(!release(40));
        assert_eq!(take(a), None);
        assert_eq!(take(b).map(|e| e.rs), Some(40));
        assert!(release(40));
        forget_all_after_fork();
        let e = get(far).unwrap();
        assert!(e.stale && e.listening && e.rs == 41);
        assert_eq!(take(far).map(|e| e.rs), Some(41));
        assert!(!any());
    }
}
