//! Newtypes for the identifiers that travel in RoCEv2 headers.
//!
//! Bare integers let `psn < other` compile across the 24-bit wrap and let a
//! QPN be passed where an rkey is expected; these types make both mistakes
//! compile errors. None of the constructors panic: out-of-range bits are
//! masked off.

use core::fmt;

/// Mask of the 24-bit fields (PSN, QPN, MSN).
pub const MASK24: u32 = 0x00FF_FFFF;

/// A 24-bit packet sequence number (IBA 9.7.1).
///
/// PSNs wrap at 2^24 and only compare inside a window of ±2^23, so `Psn`
/// deliberately has no `Ord`; use [`Psn::distance`] and the named predicates.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    pub const MAX: Psn = Psn(MASK24);
    /// Half the PSN space: the comparison window.
    pub const HALF: u32 = 1 << 23;

    pub const fn new(v: u32) -> Psn {
        Psn(v & MASK24)
    }
    pub const fn value(self) -> u32 {
        self.0
    }
    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & MASK24)
    }
    /// `self - n` modulo 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & MASK24)
    }
    pub const fn next(self) -> Psn {
        self.add(1)
    }
    /// Signed distance from `other` to `self` in the ±2^23 window:
    /// positive when `self` is after `other`. Always in `-2^23 ..= 2^23 - 1`.
    pub const fn distance(self, other: Psn) -> i32 {
        let d = self.0.wrapping_sub(other.0) & MASK24;
        // sign-extend the 24-bit difference
        ((d << 8) as i32) >> 8
    }
    /// `self` comes strictly before `other` (in the window).
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance(other) < 0
    }
    /// `self` comes strictly after `other` (in the window).
    pub const fn is_after(self, other: Psn) -> bool {
        self.distance(other) > 0
    }
    /// `self` is `other` or after it.
    pub const fn is_at_or_after(self, other: Psn) -> bool {
        self.distance(other) >= 0
    }
    /// `self` lies in the half-open range `[start, start + len)` modulo 2^24.
    pub const fn in_range(self, start: Psn, len: u32) -> bool {
        (self.0.wrapping_sub(start.0) & MASK24) < len
    }
}

macro_rules! id_newtype {
    ($(#[$m:meta])* $name:ident, $inner:ty, $mask:expr, $fmt:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        pub struct $name($inner);
        impl $name {
            pub const fn new(v: $inner) -> Self { $name(v & $mask) }
            pub const fn value(self) -> $inner { self.0 }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "(", $fmt, ")"), self.0)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, $fmt, self.0)
            }
        }
        impl From<$name> for $inner {
            fn from(v: $name) -> $inner { v.0 }
        }
    };
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}
impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}
impl From<Psn> for u32 {
    fn from(v: Psn) -> u32 {
        v.0
    }
}

id_newtype!(
    /// A 24-bit queue pair number. QP1 is the GSI QP (CM MADs).
    Qpn, u32, MASK24, "{:#08x}"
);
id_newtype!(
    /// A 24-bit message sequence number carried in the AETH.
    Msn, u32, MASK24, "{}"
);
id_newtype!(
    /// A 16-bit partition key (0xFFFF is the default full-member key).
    PKey, u16, 0xFFFF, "{:#06x}"
);
id_newtype!(
    /// A 32-bit queue key (UD, DETH). Keys with the high bit set are privileged.
    QKey, u32, 0xFFFF_FFFF, "{:#010x}"
);
id_newtype!(
    /// A local memory key (work request SGEs).
    LKey, u32, 0xFFFF_FFFF, "{:#010x}"
);
id_newtype!(
    /// A remote memory key (RETH, AtomicETH, IETH).
    RKey, u32, 0xFFFF_FFFF, "{:#010x}"
);

impl Qpn {
    /// QP1, the general services interface QP (CM MADs travel to it).
    pub const GSI: Qpn = Qpn(1);
}
impl Msn {
    pub const fn next(self) -> Msn {
        Msn(self.0.wrapping_add(1) & MASK24)
    }
}
impl PKey {
    /// The default partition key, full membership.
    pub const DEFAULT: PKey = PKey(0xFFFF);
}
impl QKey {
    /// True for a privileged Q_Key (high-order bit set, IBA 10.2.4).
    pub const fn is_privileged(self) -> bool {
        self.0 & 0x8000_0000 != 0
    }
}
