//! Words shared by the processes of one host: a file mapped `MAP_SHARED`
//! and seen only as an array of `AtomicU64` (the host's credit table,
//! `roce_transport::credits`). Like region memory it is reached through
//! atomics on raw pointers, never through references to the bytes; unlike
//! it, every word is our own format, so plain atomics are enough (no gate,
//! no fault-tolerant copies).

use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// `len` u64 words of a file, mapped shared. See the
/// [module documentation](self).
pub struct SharedWords {
    ptr: NonNull<u64>,
    len: usize,
}

// SAFETY: the mapping is valid for reads and writes from any thread until
// drop unmaps it, and it is only ever accessed through `AtomicU64`s.
unsafe impl Send for SharedWords {}
// SAFETY: as above: `&SharedWords` gives atomic operations only.
unsafe impl Sync for SharedWords {}

impl std::fmt::Debug for SharedWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWords").field("len", &self.len).finish()
    }
}

impl SharedWords {
    /// Map the first `len` words of `file`, growing the file to that size
    /// first when it is shorter (new words read 0). The file is never
    /// shrunk here; every process that maps it must use the same `len`.
    pub fn map(file: &std::fs::File, len: usize) -> io::Result<SharedWords> {
        let bytes = len.checked_mul(8).filter(|&b| b > 0).ok_or(io::ErrorKind::InvalidInput)?;
        if file.metadata()?.len() < bytes as u64 {
            file.set_len(bytes as u64)?;
        }
        // SAFETY: a new shared mapping of a file descriptor we hold, of a
        // length the file now has; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u64>()).ok_or(io::ErrorKind::Other)?;
        Ok(SharedWords { ptr, len })
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No words (never: [`SharedWords::map`] refuses 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Word `i` as an atomic (`None` past the end).
    fn word(&self, i: usize) -> Option<&AtomicU64> {
        if i >= self.len {
            return None;
        }
        // SAFETY: `i` is inside the mapping, which is page-aligned (so
        // every word is 8-aligned) and valid until drop; it is only ever
        // accessed atomically, by us and by the other processes.
        Some(unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(i)) })
    }

    /// Load word `i` (0 past the end).
    pub fn load(&self, i: usize) -> u64 {
        self.word(i).map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// Store `v` in word `i` (nothing past the end).
    pub fn store(&self, i: usize, v: u64) {
        if let Some(w) = self.word(i) {
            w.store(v, Ordering::Release);
        }
    }

    /// Add `v` to word `i` (wrapping); the old value (0 past the end).
    pub fn fetch_add(&self, i: usize, v: u64) -> u64 {
        self.word(i).map_or(0, |w| w.fetch_add(v, Ordering::AcqRel))
    }

    /// Raise word `i` to at least `v`; the old value (0 past the end).
    pub fn fetch_max(&self, i: usize, v: u64) -> u64 {
        self.word(i).map_or(0, |w| w.fetch_max(v, Ordering::AcqRel))
    }

    /// Compare-and-exchange word `i`: `Ok(old)` when it held `old` and now
    /// holds `new`, else `Err(actual)` (past the end: `Err(0)`).
    pub fn compare_exchange(&self, i: usize, old: u64, new: u64) -> Result<u64, u64> {
        match self.word(i) {
            Some(w) => w.compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire),
            None => Err(0),
        }
    }
}

impl Drop for SharedWords {
    fn drop(&mut self) {
        // SAFETY: the mapping `map` made, unmapped once (drop has `&mut
        // self`: no atomic view of it outlives this).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len * 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_of_one_file_see_each_others_atomics() {
        let path = std::env::temp_dir().join(format!("roce-words-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let a = SharedWords::map(&f, 64).unwrap();
        let b = SharedWords::map(&f, 64).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 512, "grown to 64 words");
        assert_eq!(a.fetch_add(3, 5), 0);
        assert_eq!(b.fetch_add(3, 2), 5);
        assert_eq!(a.load(3), 7);
        assert_eq!(b.compare_exchange(4, 0, 9), Ok(0));
        assert_eq!(a.compare_exchange(4, 0, 1), Err(9));
        assert_eq!(a.fetch_max(4, 3), 9);
        assert_eq!(b.load(4), 9);
        // past the end: nothing, never a fault
        assert_eq!((a.load(64), a.fetch_add(99, 1)), (0, 0));
        a.store(64, 1);
        assert!(SharedWords::map(&f, 0).is_err());
        drop((a, b));
        let _ = std::fs::remove_file(&path);
    }
}
