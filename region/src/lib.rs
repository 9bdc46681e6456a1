//! The one module that touches memory-region bytes.
//!
//! A region is either **owned** (a zeroed buffer: the safe Rust API and the
//! simulator) or **external** (the application's own pages, registered
//! through the libibverbs C ABI, where the peer's RDMA WRITEs land exactly
//! as a NIC's DMA would). The HCA core reaches region bytes only through
//! [`RegionMem`]: copy out, copy in, 64-bit atomics, and a chunked read for
//! the ICRC pass. The UDP transport sends packet payloads straight from
//! region memory with [`send_parts`]: headers from its own buffers and the
//! payload as an iovec over the region, so the kernel makes the only copy
//! (as a NIC's DMA read would). Nobody ever holds a `&[u8]` over region
//! memory, so the core stays free of `unsafe` and of aliasing questions.
//!
//! This crate and the C ABI crate (`libibverbs/`) are the only places in
//! the workspace where `unsafe` is allowed. Both backings are reached with
//! raw-pointer copies (`ptr::copy_nonoverlapping`), `AtomicU64` views and
//! the kernel (`sendmsg` iovecs), never through Rust references: the
//! application may read or write the same bytes from its own threads at any
//! time, as it may while a NIC writes them (the kernel's
//! `copy_to_user`/`copy_from_user` model). What such a concurrent access
//! observes is the application's business; our side never creates a
//! reference whose aliasing rules it could break.
//!
//! **Lifetime.** A `RegionMem` is shared (`Arc`) between the device's
//! tables and datagrams waiting to be sent. Deregistration calls
//! [`RegionMem::revoke`]: every access runs inside a gate that `revoke`
//! closes and then waits out, so once `revoke` returns no thread touches
//! the bytes again (later accesses fail), and the application may free an
//! external region's pages even while a datagram that points into them is
//! still queued. An owned buffer is freed when the last `Arc` goes.

#![allow(unsafe_code)]

pub mod guard;
pub mod words;

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Bytes of the stack buffer [`RegionMem::read_chunks`] copies through.
const CHUNK: usize = 2048;

/// Memory of one registered region. See the [crate documentation](crate).
pub struct RegionMem {
    ptr: NonNull<u8>,
    len: usize,
    /// `ptr` came from `Box<[u8]>::into_raw` (freed in `Drop`).
    owned: bool,
    /// The whole address space (an implicit on-demand region: offset =
    /// address; `ptr` unused).
    implicit: bool,
    gate: Gate,
}

/// Admits accesses until revoked; [`Gate::revoke`] waits for the admitted.
struct Gate {
    inside: AtomicUsize,
    revoked: AtomicBool,
}

/// One admitted access (leaves the gate when dropped).
struct Admitted<'a>(&'a Gate);

impl Gate {
    fn new() -> Gate {
        Gate { inside: AtomicUsize::new(0), revoked: AtomicBool::new(false) }
    }

    /// Enter, unless revoked. Sequentially consistent on both sides (a
    /// Dekker handshake): either `revoke`'s store comes first in the total
    /// order and this load sees it, or this increment comes first and
    /// `revoke`'s wait sees it.
    fn enter(&self) -> Option<Admitted<'_>> {
        self.inside.fetch_add(1, Ordering::SeqCst);
        if self.revoked.load(Ordering::SeqCst) {
            self.inside.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Admitted(self))
    }

    fn revoke(&self) {
        self.revoked.store(true, Ordering::SeqCst);
        // Bounded: an admitted access is one copy, one atomic or one
        // non-blocking sendmsg.
        while self.inside.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

// SAFETY: an owned backing is a heap buffer only this value frees. An
// external backing is memory the registrant promised (RegionMem::external)
// stays valid for reads and writes from any thread until the RegionMem is
// revoked or dropped. Every access is a raw-pointer copy, an atomic or a
// kernel iovec inside the gate; none creates a reference to the bytes.
unsafe impl Send for RegionMem {}
// SAFETY: as above: `&RegionMem` gives raw copies and atomics only, which
// are defined from several threads at once (concurrent plain copies of the
// same bytes race like DMA does, and only ever into or out of buffers that
// are not Rust references to the region).
unsafe impl Sync for RegionMem {}

impl Drop for RegionMem {
    fn drop(&mut self) {
        if self.owned {
            let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
            // SAFETY: `ptr`/`len` came from Box::<[u8]>::into_raw in
            // owned() and are freed only here, once (we are the last user:
            // drop has `&mut self`).
            drop(unsafe { Box::from_raw(raw) });
        }
    }
}

impl std::fmt::Debug for RegionMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.owned {
            write!(f, "RegionMem::Owned({} bytes)", self.len)
        } else {
            write!(f, "RegionMem::External({:p}, {} bytes)", self.ptr.as_ptr(), self.len)
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
        let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let raw = Box::into_raw(b);
        // Box::into_raw never returns null (a dangling, aligned pointer for
        // an empty slice).
        let ptr = NonNull::new(raw.cast::<u8>()).unwrap_or(NonNull::dangling());
        RegionMem { ptr, len, owned: true, implicit: false, gate: Gate::new() }
    }

    /// The application's memory `[ptr, ptr+len)`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be the registrant's memory, not this process's
    /// Rust objects, until this value is [revoked](Self::revoke) or dropped
    /// (the core revokes it in `ibv_dereg_mr`, before it returns to the
    /// application). Other threads (the application) may access the bytes
    /// concurrently, as with DMA. Pages of it that are unmapped or
    /// write-protected meanwhile make the accesses fail, not fault
    /// ([`guard`], x86-64 Linux; elsewhere they must stay valid).
    pub unsafe fn external(ptr: *mut u8, len: usize) -> RegionMem {
        guard::install();
        let ptr = NonNull::new(ptr).unwrap_or(NonNull::dangling());
        RegionMem { ptr, len, owned: false, implicit: false, gate: Gate::new() }
    }

    /// The process's whole address space (`ibv_reg_mr(pd, NULL, SIZE_MAX,
    /// IBV_ACCESS_ON_DEMAND | ...)`, an implicit on-demand region): offset
    /// `a` is address `a`. Every access goes through the fault-tolerant
    /// copy ([`guard`]): an address that is not mapped (or not writable,
    /// for a write) fails the access, as an ODP page fault the kernel
    /// cannot resolve does.
    ///
    /// # Safety
    /// The registrant gives the device its whole address space: a peer
    /// holding the rkey may read and write any mapped byte of the process,
    /// its Rust objects included. Only the C ABI, on the application's
    /// explicit request, may make one.
    pub unsafe fn implicit() -> RegionMem {
        guard::install();
        RegionMem {
            ptr: NonNull::dangling(),
            len: usize::MAX,
            owned: false,
            implicit: true,
            gate: Gate::new(),
        }
    }

    /// Whether this is the whole address space ([`Self::implicit`]).
    pub fn is_implicit(&self) -> bool {
        self.implicit
    }

    /// The address of offset `off` (inside the region: callers check).
    fn at(&self, off: usize) -> *mut u8 {
        match self.implicit {
            // any address of the process: exposed provenance, as for an
            // address the application handed over as an integer
            true => std::ptr::with_exposed_provenance_mut(off),
            false => self.ptr.as_ptr().wrapping_add(off),
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the bytes are the application's (registered through the C ABI).
    pub fn is_external(&self) -> bool {
        !self.owned
    }

    /// End all access: every later read, write, atomic or send from this
    /// region fails, and accesses already under way have finished when
    /// this returns. Deregistration calls it; idempotent.
    pub fn revoke(&self) {
        self.gate.revoke()
    }

    /// Whether [`Self::revoke`] was called.
    pub fn is_revoked(&self) -> bool {
        self.gate.revoked.load(Ordering::SeqCst)
    }

    /// Admit an access to `off..off+len`: `None` if out of bounds or revoked.
    fn admit(&self, off: usize, len: usize) -> Option<Admitted<'_>> {
        span(off, len, self.len)?;
        self.gate.enter()
    }

    /// Copy `out.len()` bytes at `off` out. `None` if out of bounds,
    /// revoked, or (an external region) a page is gone (see [`guard`]).
    pub fn read(&self, off: usize, out: &mut [u8]) -> Option<()> {
        let _in = self.admit(off, out.len())?;
        if out.is_empty() {
            return Some(());
        }
        // SAFETY: off+len is inside the region (admit checked it). An owned
        // region's memory stays valid until Drop; an external region's is
        // the registrant's pages until revoke (which waits for us), where a
        // page the application has since unmapped or protected faults
        // inside guard::copy, which survives it. `out` is our own buffer,
        // disjoint from region memory (a `&mut [u8]` cannot alias bytes
        // nobody references).
        let src = self.at(off);
        if self.owned {
            // SAFETY: as above; owned memory never faults.
            unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
            Some(())
        } else {
            // SAFETY: as above.
            unsafe { guard::copy(out.as_mut_ptr(), src, out.len()) }.then_some(())
        }
    }

    /// Append `len` bytes at `off` to `out` (packet payloads).
    pub fn read_into_vec(&self, off: usize, len: usize, out: &mut Vec<u8>) -> Option<()> {
        span(off, len, self.len)?;
        let start = out.len();
        out.resize(start + len, 0);
        let r = self.read(off, &mut out[start..]);
        if r.is_none() {
            out.truncate(start);
        }
        r
    }

    /// Feed `len` bytes at `off` to `f` in pieces of at most 2 KiB, each
    /// copied through a buffer on the stack (the ICRC pass over a payload
    /// that is then sent from the region). `None` if out of bounds or
    /// revoked (then `f` may have seen a prefix).
    pub fn read_chunks(&self, off: usize, len: usize, mut f: impl FnMut(&[u8])) -> Option<()> {
        span(off, len, self.len)?;
        if len == 0 {
            return Some(());
        }
        // One admission for the whole span (revoke waits for it), and a
        // chunk buffer that is not zeroed first: every byte handed to `f`
        // was copied in just before. (This runs once per packet sent from
        // a region — each READ response and large request — where a 2 KiB
        // memset per packet showed in profiles.)
        let _in = self.admit(off, len)?;
        let mut buf = core::mem::MaybeUninit::<[u8; CHUNK]>::uninit();
        let dst = buf.as_mut_ptr().cast::<u8>();
        let mut at = 0;
        while at < len {
            let n = (len - at).min(CHUNK);
            // SAFETY: off+at+n is inside the region (admit checked the
            // whole span) and the region stays valid while admitted, as in
            // read(); `dst` is our own stack buffer of CHUNK >= n bytes,
            // disjoint from region memory.
            let src = self.at(off + at);
            let copied = if self.owned {
                // SAFETY: as above; owned memory never faults.
                unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
                true
            } else {
                // SAFETY: as above (a fault is survived and reported).
                unsafe { guard::copy(dst, src, n) }
            };
            if !copied {
                return None;
            }
            // SAFETY: the first n bytes of `buf` were just written.
            let chunk = unsafe { std::slice::from_raw_parts(dst, n) };
            f(chunk);
            at += n;
        }
        Some(())
    }

    /// Copy `data` in at `off`. `None` if out of bounds, revoked, or (an
    /// external region) a page is gone or read-only (see [`guard`]).
    pub fn write(&self, off: usize, data: &[u8]) -> Option<()> {
        let _in = self.admit(off, data.len())?;
        if data.is_empty() {
            return Some(());
        }
        // SAFETY: as in read(); `data` is our own buffer.
        let dst = self.at(off);
        if self.owned {
            // SAFETY: as in read().
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
            Some(())
        } else {
            // SAFETY: as in read().
            unsafe { guard::copy(dst, data.as_ptr(), data.len()) }.then_some(())
        }
    }

    /// Read-modify-write of the little-endian u64 at `off`; returns the
    /// original value. At an 8-aligned address it is a real atomic, so the
    /// application's own atomics on the word see it whole.
    fn rmw(&self, off: usize, f: impl Fn(u64) -> u64) -> Option<u64> {
        let _in = self.admit(off, 8)?;
        // SAFETY: inside the region (admit checked it).
        let p = self.at(off);
        if !(p as usize).is_multiple_of(8) {
            let mut w = [0u8; 8];
            self.read(off, &mut w)?;
            let old = u64::from_le_bytes(w);
            self.write(off, &f(old).to_le_bytes())?;
            return Some(old);
        }
        if self.owned {
            // SAFETY: p is 8-aligned and valid for reads and writes of 8
            // bytes while we are admitted (see read()); an AtomicU64 view
            // of it is what other atomic users see.
            let a = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
            let r = a.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Some(f(u64::from_le(v)).to_le())
            });
            return Some(u64::from_le(r.unwrap_or_else(|v| v)));
        }
        // An external word: compare-and-swap until it holds, each access
        // fault-tolerant (guard::cas is a `lock cmpxchg`, which the
        // application's own atomics on the word see whole).
        let mut w = [0u8; 8];
        self.read(off, &mut w)?;
        let mut cur = u64::from_ne_bytes(w);
        loop {
            let new = f(u64::from_le(cur)).to_le();
            // SAFETY: p is 8-aligned, inside an external region we are
            // admitted to (see read()).
            let seen = unsafe { guard::cas(p.cast::<u64>(), cur, new) }?;
            if seen == cur {
                return Some(u64::from_le(cur));
            }
            cur = seen;
        }
    }

    /// IBA compare-and-swap on the u64 at `off`: the original value.
    pub fn compare_swap(&self, off: usize, compare: u64, swap: u64) -> Option<u64> {
        self.rmw(off, |v| if v == compare { swap } else { v })
    }

    /// IBA fetch-and-add (wrapping) on the u64 at `off`: the original value.
    pub fn fetch_add(&self, off: usize, add: u64) -> Option<u64> {
        self.rmw(off, |v| v.wrapping_add(add))
    }

    /// IBA 1.5 ATOMIC_WRITE: store 8 bytes at `off` as one unit.
    pub fn atomic_write(&self, off: usize, value: [u8; 8]) -> Option<()> {
        let v = u64::from_le_bytes(value);
        self.rmw(off, |_| v).map(|_| ())
    }
}

/// One piece of a datagram for [`send_parts`].
#[derive(Clone, Copy, Debug)]
pub enum TxPart<'a> {
    /// Bytes of our own (headers, pad, ICRC).
    Bytes(&'a [u8]),
    /// `len` bytes at `off` of a region.
    Region { mem: &'a RegionMem, off: usize, len: usize },
}

impl TxPart<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            TxPart::Bytes(b) => b.len(),
            TxPart::Region { len, .. } => *len,
        }
    }

    /// Whether the part has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Most iovecs of one [`send_parts`] (Linux's UIO_MAXIOV).
pub const MAX_PARTS: usize = 1024;

/// `sendmsg` of `parts`, in order, as one UDP message to `dst` on the
/// datagram socket `fd`; with `udp_segment`, as a UDP GSO send
/// (`UDP_SEGMENT`) the kernel cuts into datagrams of that many bytes.
/// Region parts are iovecs over the region: the kernel copies them as a
/// NIC's DMA read would, and nothing in user space does.
///
/// Errors: `EFAULT` if a region part is out of bounds or its region was
/// revoked (nothing sent); `EINVAL` for more than [`MAX_PARTS`] parts;
/// otherwise what `sendmsg` returned (`EAGAIN` on a full socket buffer).
pub fn send_parts(
    fd: BorrowedFd<'_>,
    dst: SocketAddr,
    parts: &[TxPart<'_>],
    udp_segment: Option<u16>,
) -> io::Result<usize> {
    if parts.len() > MAX_PARTS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // Admission for every region part, held until sendmsg returns; both
    // arrays on the stack for the usual few parts (no allocation per send).
    let mut admitted: smallvec::SmallVec<[Admitted<'_>; 8]> = smallvec::SmallVec::new();
    let mut iov: smallvec::SmallVec<[libc::iovec; 32]> = smallvec::SmallVec::new();
    for p in parts {
        match *p {
            TxPart::Bytes(b) => iov
                .push(libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() }),
            TxPart::Region { mem, off, len } => {
                let a = mem
                    .admit(off, len)
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
                admitted.push(a);
                // The address is computed with wrapping_add (no `add` UB
                // question for a zero-length part at the end); it is inside
                // the region (admit checked off+len).
                let base = mem.at(off);
                iov.push(libc::iovec { iov_base: base.cast(), iov_len: len });
            }
        }
    }
    let (sa, sa_len) = sockaddr_of(dst);
    // Room for one cmsg carrying a u16, 8-aligned.
    let mut cbuf = [0u64; 4];
    // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&sa as *const libc::sockaddr_storage).cast_mut().cast();
    msg.msg_namelen = sa_len;
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    if let Some(seg) = udp_segment {
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
        debug_assert!(space <= std::mem::size_of_val(&cbuf));
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `cbuf`, 8-aligned and at least
        // CMSG_SPACE(2) bytes long (32 >= 16 + 8), so CMSG_FIRSTHDR is
        // non-null and its header and 2-byte data lie inside `cbuf`.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
        }
    }
    // SAFETY: `msg` points at live buffers for the duration of the call:
    // the address (`sa`), the iovec array (`iov`: not pushed to or moved
    // since `msg_iov` was taken from it, so its storage, inline or on the
    // heap, has not moved), the control buffer
    // (`cbuf`); every iovec points at our own bytes (borrowed for this
    // call) or at region memory that stays valid while `admitted` holds
    // the regions' gates open. The kernel only reads them.
    let r = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_DONTWAIT) };
    drop(admitted);
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// A socket address in C form, and its length.
fn sockaddr_of(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for every
            // sockaddr type; we write one whole sockaddr_in at its start.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr { s6_addr: v6.ip().octets() },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for a sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
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

    /// Two pages of fresh anonymous memory.
    fn two_pages() -> (*mut u8, usize) {
        let pg = 4096usize;
        // SAFETY: a fresh private anonymous mapping, ours alone.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * pg,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        (p.cast(), pg)
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn pages_unmapped_or_protected_under_a_region_fail_the_access_not_the_process() {
        let (p, pg) = two_pages();
        // SAFETY: the two pages are ours; the test unmaps and protects them
        // on purpose, which is what the region must survive.
        let m = unsafe { RegionMem::external(p, 2 * pg) };
        m.write(pg - 4, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        assert_eq!(m.fetch_add(pg, 5), Some(u64::from_le_bytes([5, 6, 7, 8, 0, 0, 0, 0])));
        let before = guard::faults();
        // the second page goes read-only: reads work, writes and atomics fail
        // SAFETY: our own mapping.
        assert_eq!(unsafe { libc::mprotect(p.add(pg).cast(), pg, libc::PROT_READ) }, 0);
        let mut out = [0u8; 8];
        m.read(pg - 4, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4, 10, 6, 7, 8]);
        assert_eq!(m.write(pg - 4, &[9; 8]), None, "a write crossing into a read-only page");
        assert_eq!(m.compare_swap(pg, 0, 1), None);
        assert_eq!(m.fetch_add(pg, 1), None);
        m.read(pg - 4, &mut out).unwrap();
        assert_eq!(out[4..], [10, 6, 7, 8], "the read-only page is unchanged");
        assert_eq!(out[..4], [9; 4], "the bytes before the fault were written, as DMA would");
        // the second page is unmapped: every access to it fails
        // SAFETY: our own mapping.
        assert_eq!(unsafe { libc::munmap(p.add(pg).cast(), pg) }, 0);
        assert_eq!(m.read(pg, &mut out), None);
        assert_eq!(m.read_into_vec(pg - 4, 8, &mut Vec::new()), None);
        assert_eq!(m.read_chunks(0, 2 * pg, |_| {}), None);
        assert_eq!(m.write(2 * pg - 8, &[1; 8]), None);
        assert_eq!(m.compare_swap(pg + 8, 0, 1), None);
        assert_eq!(m.atomic_write(pg, [1; 8]), None);
        // the first page still works
        m.write(0, b"alive").unwrap();
        m.read(0, &mut out[..5]).unwrap();
        assert_eq!(&out[..5], b"alive");
        assert_eq!(m.compare_swap(8, 0, 7), Some(0));
        assert!(guard::faults() >= before + 9, "faults counted: {}", guard::faults() - before);
        m.revoke();
        // SAFETY: our own mapping (the first page; the second is gone).
        unsafe { libc::munmap(p.cast(), pg) };
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn other_faults_still_kill_the_process() {
        guard::install();
        // SAFETY: the child only writes to address 8 (which faults) or
        // calls _exit: nothing that needs the parent's locks.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: deliberately faulting in the child (not in a guarded
            // routine: the handler must hand it on to the default action).
            unsafe {
                std::ptr::write_volatile(std::ptr::dangling_mut::<u64>(), 1);
                libc::_exit(0);
            }
        }
        let mut st = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
        assert!(libc::WIFSIGNALED(st), "status {st:#x}");
        assert_eq!(libc::WTERMSIG(st), libc::SIGSEGV);
    }

    #[test]
    fn revoked_regions_refuse_every_access() {
        let mut backing = vec![7u8; 64];
        // SAFETY: `backing` outlives `e`.
        let e = unsafe { RegionMem::external(backing.as_mut_ptr(), 64) };
        let o = RegionMem::owned(64);
        for m in [&e, &o] {
            assert!(m.write(0, &[1, 2]).is_some());
            assert!(!m.is_revoked());
            m.revoke();
            m.revoke(); // idempotent
            assert!(m.is_revoked());
            assert!(m.write(0, &[9]).is_none());
            assert!(m.read(0, &mut [0]).is_none());
            assert!(m.fetch_add(8, 1).is_none());
            assert!(m.read_chunks(0, 4, |_| panic!("no bytes after revoke")).is_none());
            let mut v = vec![5u8];
            assert!(m.read_into_vec(0, 4, &mut v).is_none());
            assert_eq!(v, [5], "a failed append leaves the vector as it was");
        }
        drop(e);
        assert_eq!(&backing[..3], &[1, 2, 7]);
    }

    #[test]
    fn read_chunks_feeds_every_byte_in_order() {
        let pat: Vec<u8> = (0..9000u32).map(|i| (i * 13 + 1) as u8).collect();
        both(9100, |m| {
            m.write(50, &pat).unwrap();
            let mut got = Vec::new();
            let mut pieces = 0;
            m.read_chunks(50, 9000, |c| {
                assert!(c.len() <= CHUNK);
                got.extend_from_slice(c);
                pieces += 1;
            })
            .unwrap();
            assert_eq!(got, pat);
            assert_eq!(pieces, 9000usize.div_ceil(CHUNK));
            assert!(m.read_chunks(9099, 2, |_| ()).is_none());
            assert!(m.read_chunks(9100, 0, |_| panic!("nothing to feed")).is_some());
        });
    }

    /// A revoke waits for an access under way: a thread holding the gate
    /// (as a sendmsg does) delays it, and accesses after it fail.
    #[test]
    fn revoke_waits_for_admitted_accesses() {
        use std::sync::Arc;
        let m = Arc::new(RegionMem::owned(16));
        let held = m.gate.enter().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let m2 = Arc::clone(&m);
        let t = std::thread::spawn(move || {
            m2.revoke();
            tx.send(()).unwrap();
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(rx.try_recv().is_err(), "revoke returned while an access was admitted");
        assert!(m.read(0, &mut [0]).is_none(), "new accesses are refused at once");
        drop(held);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        t.join().unwrap();
    }

    fn loopback_pair() -> (std::net::UdpSocket, std::net::UdpSocket) {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        (a, b)
    }

    /// Headers from our buffers and the payload straight from the region
    /// (both backings) arrive as one datagram, byte for byte.
    #[test]
    fn send_parts_gathers_headers_and_region_bytes() {
        use std::os::fd::AsFd;
        let (a, b) = loopback_pair();
        let dst = b.local_addr().unwrap();
        let pat: Vec<u8> = (0..3000u32).map(|i| (i * 31 + 7) as u8).collect();
        let mut backing = vec![0u8; 4096];
        // SAFETY: `backing` outlives `e`.
        let e = unsafe { RegionMem::external(backing.as_mut_ptr(), 4096) };
        let o = RegionMem::owned(4096);
        for m in [&e, &o] {
            m.write(100, &pat).unwrap();
            let parts = [
                TxPart::Bytes(b"HEAD"),
                TxPart::Region { mem: m, off: 100, len: 3000 },
                TxPart::Bytes(b"TAIL"),
            ];
            assert_eq!(parts.iter().map(TxPart::len).sum::<usize>(), 3008);
            let n = send_parts(a.as_fd(), dst, &parts, None).unwrap();
            assert_eq!(n, 3008);
            let mut got = [0u8; 4000];
            let (n, _) = b.recv_from(&mut got).unwrap();
            assert_eq!(n, 3008);
            assert_eq!(&got[..4], b"HEAD");
            assert_eq!(&got[4..3004], &pat[..]);
            assert_eq!(&got[3004..3008], b"TAIL");
        }
        drop(e);
    }

    /// With `udp_segment`, the kernel cuts the gathered bytes into datagrams
    /// of that size (UDP GSO); skipped where the kernel refuses GSO.
    #[test]
    fn send_parts_with_gso_cuts_segments() {
        use std::os::fd::AsFd;
        let (a, b) = loopback_pair();
        let dst = b.local_addr().unwrap();
        let m = RegionMem::owned(8192);
        let pat: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
        m.write(0, &pat).unwrap();
        let parts: Vec<TxPart<'_>> = (0..4)
            .flat_map(|k| {
                [TxPart::Bytes(b"hdr:"), TxPart::Region { mem: &m, off: k * 1000, len: 996 }]
            })
            .collect();
        match send_parts(a.as_fd(), dst, &parts, Some(1000)) {
            Ok(n) => assert_eq!(n, 4000),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
                ) =>
            {
                eprintln!("SKIPPED: the kernel refuses UDP GSO ({e})");
                return;
            }
            Err(e) => panic!("send_parts: {e}"),
        }
        for k in 0..4 {
            let mut got = [0u8; 2000];
            let (n, _) = b.recv_from(&mut got).unwrap();
            assert_eq!(n, 1000, "segment {k}");
            assert_eq!(&got[..4], b"hdr:");
            assert_eq!(&got[4..1000], &pat[k * 1000..k * 1000 + 996]);
        }
    }

    #[test]
    fn send_parts_refuses_bad_spans_and_revoked_regions() {
        use std::os::fd::AsFd;
        let (a, b) = loopback_pair();
        let dst = b.local_addr().unwrap();
        let m = RegionMem::owned(64);
        let err = |parts: &[TxPart<'_>]| send_parts(a.as_fd(), dst, parts, None).unwrap_err();
        assert_eq!(
            err(&[TxPart::Region { mem: &m, off: 60, len: 8 }]).raw_os_error(),
            Some(libc::EFAULT)
        );
        assert_eq!(
            err(&[TxPart::Region { mem: &m, off: usize::MAX, len: 2 }]).raw_os_error(),
            Some(libc::EFAULT)
        );
        let many = vec![TxPart::Bytes(b"x"); MAX_PARTS + 1];
        assert_eq!(err(&many).raw_os_error(), Some(libc::EINVAL));
        m.revoke();
        assert_eq!(
            err(&[TxPart::Bytes(b"h"), TxPart::Region { mem: &m, off: 0, len: 8 }]).raw_os_error(),
            Some(libc::EFAULT)
        );
        // nothing was sent by any of them
        b.set_nonblocking(true).unwrap();
        assert!(b.recv_from(&mut [0u8; 16]).is_err());
        assert_eq!(m.gate.inside.load(Ordering::SeqCst), 0, "no admission leaked");
    }
}
