//! Packet buffers used again (issue 41: no allocation per packet in
//! steady state). The core builds each packet in a vector of exactly the
//! packet's length ([`take`]); whoever is done with a datagram's bytes (the
//! receiving core, a transport once it has sent them) hands them back
//! ([`give`]), and the next packet of that length is built in them.
//!
//! One small pool per thread, no lock: a driver builds, sends and receives
//! in the threads it has (the simulator in one), so buffers come back
//! where they are taken. Only vectors of exactly a packet's length are
//! kept (a `Bytes` made from one is then free of any allocation of its
//! own); anything else handed back is simply dropped.

use bytes::Bytes;
use std::cell::RefCell;

/// Buffers kept per thread at most.
const MAX_KEPT: usize = 64;
/// The largest buffer kept (a 9000-byte jumbo frame's packet fits).
const MAX_LEN: usize = 16 << 10;

thread_local! {
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty vector whose capacity is exactly `len` (from the pool when it
/// holds one).
pub fn take(len: usize) -> Vec<u8> {
    let got = POOL
        .try_with(|p| {
            let mut p = p.borrow_mut();
            let i = p.iter().rposition(|v| v.capacity() == len)?;
            Some(p.swap_remove(i))
        })
        .ok()
        .flatten();
    got.unwrap_or_else(|| Vec::with_capacity(len))
}

/// Hand back a datagram's bytes: kept if nothing else holds them and
/// they are a whole vector of at most [`MAX_LEN`] bytes.
pub fn give(b: Bytes) {
    if b.is_empty() || b.len() > MAX_LEN {
        return;
    }
    let Ok(m) = b.try_into_mut() else { return };
    let v: Vec<u8> = m.into();
    if v.capacity() != v.len() {
        return; // a slice of a bigger buffer: not one of ours
    }
    let _ = POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < MAX_KEPT {
            p.push(v);
        }
    });
}

/// Buffers this thread's pool holds.
pub fn kept() -> usize {
    POOL.try_with(|p| p.borrow().len()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_is_taken_again_for_a_packet_of_its_length() {
        let n0 = kept();
        let mut v = take(100);
        assert_eq!((v.len(), v.capacity()), (0, 100));
        v.resize(100, 7);
        let p = v.as_ptr();
        give(Bytes::from(v));
        assert_eq!(kept(), n0 + 1);
        let w = take(100);
        assert_eq!((w.as_ptr(), w.capacity()), (p, 100), "the same memory");
        assert_eq!(kept(), n0);
        // shared, a slice of a bigger buffer, or too big: not kept
        let b = Bytes::from(vec![1u8; 64]);
        let c = b.clone();
        give(b);
        assert_eq!(kept(), n0);
        drop(c);
        give(Bytes::from(vec![1u8; 64]).slice(8..));
        give(Bytes::from(vec![0u8; MAX_LEN + 1]));
        assert_eq!(kept(), n0);
    }
}
