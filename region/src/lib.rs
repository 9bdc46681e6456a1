//! The one module that touches memory-region bytes.
//!
//! A region is either **owned** (a zeroed buffer: the safe Rust API and the
//! simulator) or **external** (the application's own pages, registered
//! through the libibverbs C ABI, where the peer's RDMA WRITEs land exactly
//! as a NIC's DMA would). The HCA core reaches region bytes only through
//! [`RegionMem`]: copy out, copy in, 64-bit atomics. It never holds a
//! `&[u8]` over region memory, so the core stays free of `unsafe` and of
//! aliasing questions.
//!
//! This crate and the C ABI crate (`libibverbs/`) are the only places in
//! the workspace where `unsafe` is allowed. External memory is reached with
//! raw-pointer copies (`ptr::copy_nonoverlapping`) and `AtomicU64` views,
//! never through Rust references: the application may read or write the
//! same bytes from its own threads at any time, as it may while a NIC
//! writes them (the kernel's `copy_to_user`/`copy_from_user` model). What
//! such a concurrent access observes is the application's business; our
//! side never creates a reference whose aliasing rules it could break.
//!
//! Owned memory is only ever accessed through `&self`/`&mut self` of the
//! [`RegionMem`], which the HCA keeps behind its device lock: safe code, no
//! shared mutable bytes.

#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

enum Backing {
    Owned(Box<[u8]>),
    External { ptr: NonNull<u8>, len: usize },
}

/// Memory of one registered region. See the [crate documentation](crate).
pub struct RegionMem {
    backing: Backing,
}

// SAFETY: an owned backing is a Box<[u8]>, which is Send. An external
// backing is a pointer to memory the registrant promised (RegionMem::external)
// stays valid for reads and writes from any thread until the RegionMem is
// dropped; we only access it through raw-pointer copies and atomics.
unsafe impl Send for RegionMem {}
// SAFETY: `&RegionMem` only allows reads (copies out of the memory), which
// are sound from several threads at once for both backings.
unsafe impl Sync for RegionMem {}

impl std::fmt::Debug for RegionMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.backing {
            Backing::Owned(b) => write!(f, "RegionMem::Owned({} bytes)", b.len()),
            Backing::External { ptr, len } => {
                write!(f, "RegionMem::External({:p}, {len} bytes)", ptr.as_ptr())
            }
        }
    }
}

/// `off..off+len` inside `size`, without overflow.
fn span(off: usize, len: usize, size: usize) -> Option<()> {
    (off.checked_add(len)? <= size).then_some(())
}

impl RegionMem {
    /// A zeroed buffer of `len` bytes owned by the region.
    pub fn owned(len: usize) -> RegionMem {
        RegionMem { backing: Backing::Owned(vec![0u8; len].into_boxed_slice()) }
    }

    /// The application's memory `[ptr, ptr+len)`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid for reads and writes until this value
    /// is dropped (the C ABI drops it in `ibv_dereg_mr`, after which the
    /// core never touches the range). Other threads (the application) may
    /// access the bytes concurrently, as with DMA.
    pub unsafe fn external(ptr: *mut u8, len: usize) -> RegionMem {
        let ptr = NonNull::new(ptr).unwrap_or(NonNull::dangling());
        RegionMem { backing: Backing::External { ptr, len } }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        match &self.backing {
            Backing::Owned(b) => b.len(),
            Backing::External { len, .. } => *len,
        }
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the bytes are the application's (registered through the C ABI).
    pub fn is_external(&self) -> bool {
        matches!(self.backing, Backing::External { .. })
    }

    /// Copy `out.len()` bytes at `off` out. `None` if out of bounds.
    pub fn read(&self, off: usize, out: &mut [u8]) -> Option<()> {
        span(off, out.len(), self.len())?;
        match &self.backing {
            Backing::Owned(b) => out.copy_from_slice(&b[off..off + out.len()]),
            Backing::External { ptr, .. } => {
                if !out.is_empty() {
                    // SAFETY: off+len is inside the registered range (checked
                    // above), which the registrant keeps valid (external()).
                    // `out` is our own buffer, disjoint from foreign memory.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            ptr.as_ptr().add(off),
                            out.as_mut_ptr(),
                            out.len(),
                        )
                    }
                }
            }
        }
        Some(())
    }

    /// Append `len` bytes at `off` to `out` (packet payloads).
    pub fn read_into_vec(&self, off: usize, len: usize, out: &mut Vec<u8>) -> Option<()> {
        span(off, len, self.len())?;
        let start = out.len();
        out.resize(start + len, 0);
        self.read(off, &mut out[start..])
    }

    /// Copy `data` in at `off`. `None` if out of bounds.
    pub fn write(&mut self, off: usize, data: &[u8]) -> Option<()> {
        span(off, data.len(), self.len())?;
        match &mut self.backing {
            Backing::Owned(b) => b[off..off + data.len()].copy_from_slice(data),
            Backing::External { ptr, .. } => {
                if !data.is_empty() {
                    // SAFETY: as in read(); `data` is our own buffer.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            data.as_ptr(),
                            ptr.as_ptr().add(off),
                            data.len(),
                        )
                    }
                }
            }
        }
        Some(())
    }

    /// Read-modify-write of the little-endian u64 at `off`; returns the
    /// original value. External memory at an 8-aligned address uses a real
    /// atomic, so the application's own atomics on the word see it whole.
    fn rmw(&mut self, off: usize, f: impl Fn(u64) -> u64) -> Option<u64> {
        span(off, 8, self.len())?;
        match &mut self.backing {
            Backing::Owned(b) => {
                let mut w = [0u8; 8];
                w.copy_from_slice(&b[off..off + 8]);
                let old = u64::from_le_bytes(w);
                b[off..off + 8].copy_from_slice(&f(old).to_le_bytes());
                Some(old)
            }
            Backing::External { ptr, .. } => {
                // SAFETY: inside the registered range (checked above).
                let p = unsafe { ptr.as_ptr().add(off) };
                if (p as usize).is_multiple_of(8) {
                    // SAFETY: p is 8-aligned and valid for reads and writes
                    // of 8 bytes for as long as this call (external()); an
                    // AtomicU64 view of it is what other atomic users see.
                    let a = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
                    let r = a.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                        Some(f(u64::from_le(v)).to_le())
                    });
                    Some(u64::from_le(r.unwrap_or_else(|v| v)))
                } else {
                    let mut w = [0u8; 8];
                    self.read(off, &mut w)?;
                    let old = u64::from_le_bytes(w);
                    self.write(off, &f(old).to_le_bytes())?;
                    Some(old)
                }
            }
        }
    }

    /// IBA compare-and-swap on the u64 at `off`: the original value.
    pub fn compare_swap(&mut self, off: usize, compare: u64, swap: u64) -> Option<u64> {
        self.rmw(off, |v| if v == compare { swap } else { v })
    }

    /// IBA fetch-and-add (wrapping) on the u64 at `off`: the original value.
    pub fn fetch_add(&mut self, off: usize, add: u64) -> Option<u64> {
        self.rmw(off, |v| v.wrapping_add(add))
    }

    /// IBA 1.5 ATOMIC_WRITE: store 8 bytes at `off` as one unit.
    pub fn atomic_write(&mut self, off: usize, value: [u8; 8]) -> Option<()> {
        let v = u64::from_le_bytes(value);
        self.rmw(off, |_| v).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(len: usize, f: impl Fn(&mut RegionMem)) -> Vec<u8> {
        let mut o = RegionMem::owned(len);
        f(&mut o);
        let mut a = vec![0u8; len];
        o.read(0, &mut a).unwrap();
        let mut backing = vec![0u8; len + 16];
        // SAFETY: `backing` outlives `e` (dropped at the end of this scope).
        let mut e = unsafe { RegionMem::external(backing.as_mut_ptr().add(8), len) };
        assert!(e.is_external() && !o.is_external());
        f(&mut e);
        drop(e);
        assert_eq!(&backing[8..8 + len], &a[..], "owned and external agree");
        assert_eq!(&backing[..8], &[0u8; 8], "guard before untouched");
        assert_eq!(&backing[8 + len..], &[0u8; 8], "guard after untouched");
        a
    }

    #[test]
    fn bounds_are_checked_without_overflow() {
        both(32, |m| {
            assert_eq!(m.len(), 32);
            assert!(m.write(30, &[1, 2, 3]).is_none());
            assert!(m.write(usize::MAX, &[1]).is_none());
            assert!(m.read(usize::MAX - 1, &mut [0; 4]).is_none());
            assert!(m.read(33, &mut []).is_none());
            assert!(m.read(32, &mut []).is_some());
            assert!(m.fetch_add(25, 1).is_none());
            assert!(m.compare_swap(usize::MAX - 3, 0, 1).is_none());
            assert!(m.read_into_vec(31, 2, &mut Vec::new()).is_none());
        });
    }

    #[test]
    fn reads_and_writes() {
        let got = both(16, |m| {
            m.write(3, b"hello").unwrap();
            let mut v = vec![9u8];
            m.read_into_vec(3, 5, &mut v).unwrap();
            assert_eq!(v, b"\x09hello");
        });
        assert_eq!(&got[3..8], b"hello");
    }

    /// Appends land after what the vector held, byte for byte, whether or
    /// not it already had room.
    #[test]
    fn read_into_vec_appends_exact_bytes_into_spare_capacity() {
        let pat: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        both(6000, |m| {
            m.write(900, &pat).unwrap();
            // no room yet
            let mut v = vec![0xEE; 3];
            m.read_into_vec(900, 5000, &mut v).unwrap();
            assert_eq!(&v[..3], &[0xEE; 3]);
            assert_eq!(&v[3..], &pat[..]);
            // room left by an earlier, longer vector
            let mut w = vec![0x55u8; 8000];
            w.truncate(10);
            m.read_into_vec(901, 4999, &mut w).unwrap();
            assert_eq!(w.len(), 10 + 4999);
            assert_eq!(&w[..10], &[0x55; 10]);
            assert_eq!(&w[10..], &pat[1..]);
            // zero bytes change nothing
            m.read_into_vec(6000, 0, &mut w).unwrap();
            assert_eq!(w.len(), 5009);
        });
    }

    #[test]
    fn atomics_return_the_original_value() {
        let got = both(24, |m| {
            m.write(0, &41u64.to_le_bytes()).unwrap();
            assert_eq!(m.fetch_add(0, 1), Some(41));
            assert_eq!(m.compare_swap(0, 7, 99), Some(42)); // miss
            assert_eq!(m.compare_swap(0, 42, 99), Some(42)); // hit
            m.write(8, &u64::MAX.to_le_bytes()).unwrap();
            assert_eq!(m.fetch_add(8, 2), Some(u64::MAX)); // wraps to 1
            m.atomic_write(16, 5u64.to_le_bytes()).unwrap();
        });
        assert_eq!(u64::from_le_bytes(got[0..8].try_into().unwrap()), 99);
        assert_eq!(u64::from_le_bytes(got[8..16].try_into().unwrap()), 1);
        assert_eq!(u64::from_le_bytes(got[16..24].try_into().unwrap()), 5);
    }

    #[test]
    fn unaligned_atomics_fall_back_to_plain_copies() {
        let got = both(16, |m| {
            m.write(3, &10u64.to_le_bytes()).unwrap();
            assert_eq!(m.fetch_add(3, 5), Some(10));
            assert_eq!(m.compare_swap(3, 15, 1), Some(15));
        });
        assert_eq!(u64::from_le_bytes(got[3..11].try_into().unwrap()), 1);
    }

    #[test]
    fn zero_length_external_region() {
        // SAFETY: a zero-length region is never dereferenced.
        let m = unsafe { RegionMem::external(std::ptr::null_mut(), 0) };
        assert!(m.is_empty());
        assert!(m.read(0, &mut []).is_some());
        assert!(m.read(0, &mut [0]).is_none());
    }
}
