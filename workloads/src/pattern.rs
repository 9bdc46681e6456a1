//! The byte pattern of every data check in `roce perf` (one process or
//! two) and in the `roce demo --scenario` lessons: byte `off` of a buffer
//! is a hash of a 32-bit seed and the offset, so any byte can be computed
//! on its own (a slot in the middle of a region, a fetched range) and two
//! seeds give unrelated bytes.
//!
//! Across processes the seed is derived from the QP number and first PSN
//! that the owner of the buffer sends in perftest's exchange
//! ([`Pattern::of_qp`]), so the other side can check every byte without
//! more messages. `scripts/interop/pyverbs_peer.py` (the rxe-side peer of
//! the interop matrix) computes the same bytes in Python: its
//! `--self-test` and the test below share a table of vectors.

/// A pattern: the seed of a buffer's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pattern(u32);

impl Pattern {
    /// The pattern of `seed`.
    pub const fn new(seed: u32) -> Pattern {
        Pattern(seed)
    }

    /// The pattern of the buffer of the QP `qpn` whose first PSN is `psn`
    /// (what `roce perf` fills its memory with, and checks the peer's by).
    pub const fn of_qp(qpn: u32, psn: u32) -> Pattern {
        Pattern(psn.wrapping_mul(0x9e37_79b1) ^ qpn.rotate_left(13))
    }

    /// Byte `off` of the pattern.
    #[inline]
    pub fn byte(self, off: u64) -> u8 {
        let x = (off as u32).wrapping_mul(0x85eb_ca6b) ^ self.0;
        let x = x ^ (x >> 15);
        (x ^ (x >> 7) ^ (x >> 23)) as u8
    }

    /// Bytes `off..off + len`.
    pub fn bytes(self, off: u64, len: usize) -> Vec<u8> {
        (0..len as u64).map(|i| self.byte(off + i)).collect()
    }

    /// Fill `buf` with bytes `off..off + buf.len()`.
    pub fn fill(self, off: u64, buf: &mut [u8]) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = self.byte(off + i as u64);
        }
    }

    /// Check that `buf` holds bytes `off..off + buf.len()`; `Err` names
    /// the index into `buf` of the first byte that differs.
    pub fn verify(self, off: u64, buf: &[u8]) -> Result<(), usize> {
        match buf.iter().enumerate().position(|(i, &b)| b != self.byte(off + i as u64)) {
            None => Ok(()),
            Some(i) => Err(i),
        }
    }

    /// Whether `buf` holds bytes `off..off + buf.len()`.
    pub fn matches(self, off: u64, buf: &[u8]) -> bool {
        self.verify(off, buf).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scripts/interop/pyverbs_peer.py` reimplements the pattern in
    /// Python; its `--self-test` checks the same vectors, so the two sides
    /// fill and check the same bytes.
    #[test]
    fn pattern_matches_the_python_peer() {
        let vectors: [(u32, u32, u64, u8); 6] = [
            (0, 0, 0, 0x00),
            (0x12_3456, 0x11, 0, 0x15),
            (0x12_3456, 0x11, 1, 0x21),
            (0x12_3456, 0x11, 4095, 0x89),
            (0xAB_CDEF, 0x2A, 65535, 0x15),
            (0xFF_FFFF, 0xFF_FFFF, 7, 0x72),
        ];
        for (psn, qpn, off, want) in vectors {
            let p = Pattern::of_qp(qpn, psn);
            assert_eq!(p.byte(off), want, "psn {psn:#x} qpn {qpn:#x} off {off}");
        }
        // and the script carries the same table
        let py = include_str!("../../scripts/interop/pyverbs_peer.py");
        for (psn, qpn, off, want) in vectors {
            let row = format!("({psn:#X}, {qpn:#X}, {off}, {want:#04x})").replace("0X", "0x");
            let alt = format!("({psn}, {qpn}, {off}, {want:#04x})");
            assert!(py.contains(&row) || py.contains(&alt), "{row} missing from the script");
        }
    }

    /// The script's own self-test (pattern, QP message, geometry) when a
    /// Python is at hand.
    #[test]
    fn python_peer_self_test() {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/interop/pyverbs_peer.py");
        match std::process::Command::new("python3").arg(script).arg("--self-test").output() {
            Ok(o) => {
                let out = String::from_utf8_lossy(&o.stdout);
                assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
                assert_eq!(out.trim(), "self-test: pattern ok, QP message ok, geometry ok");
            }
            Err(e) => eprintln!("SKIPPED: no python3 ({e})"),
        }
    }

    #[test]
    fn fill_bytes_and_verify_agree() {
        let p = Pattern::new(7);
        let mut buf = vec![0u8; 300];
        p.fill(1000, &mut buf);
        assert_eq!(buf, p.bytes(1000, 300));
        assert_eq!(p.verify(1000, &buf), Ok(()));
        assert!(p.matches(1000, &buf));
        buf[17] ^= 1;
        assert_eq!(p.verify(1000, &buf), Err(17));
        assert!(!p.matches(1001, &p.bytes(1000, 8)));
        assert_ne!(Pattern::new(1).bytes(0, 64), Pattern::new(2).bytes(0, 64));
    }
}
