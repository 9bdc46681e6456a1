//! PSN arithmetic across the 24-bit wrap: fixed cases and proptest laws.

use proptest::prelude::*;
use roce_packet::types::MASK24;
use roce_packet::{Msn, Psn, Qpn};

const HALF: i32 = 1 << 23;

/// PSNs biased towards the wrap and the half-window edges.
fn psn() -> impl Strategy<Value = Psn> {
    prop_oneof![
        any::<u32>().prop_map(Psn::new),
        (0u32..16).prop_map(|d| Psn::MAX.sub(d)),
        (0u32..16).prop_map(Psn::new),
        (0u32..32).prop_map(|d| Psn::new(Psn::HALF).sub(16).add(d)),
    ]
}

#[test]
fn fixed_wrap_cases() {
    assert_eq!(Psn::MAX.value(), 0xFF_FFFF);
    assert_eq!(Psn::MAX.next(), Psn::new(0));
    assert_eq!(Psn::new(0).sub(1), Psn::MAX);
    assert_eq!(Psn::new(0xFF_FFFE).add(5), Psn::new(3));
    assert_eq!(Psn::new(0x100_0005), Psn::new(5)); // masked, never panics
    assert_eq!(Psn::new(u32::MAX), Psn::MAX);
    assert_eq!(Psn::new(0).add(u32::MAX), Psn::MAX);
    // distance across the wrap
    assert_eq!(Psn::new(2).distance(Psn::MAX), 3);
    assert_eq!(Psn::MAX.distance(Psn::new(2)), -3);
    assert!(Psn::new(2).is_after(Psn::MAX));
    assert!(Psn::MAX.is_before(Psn::new(2)));
    assert!(Psn::new(0).is_after(Psn::MAX));
    // the window edges
    assert_eq!(Psn::new(0x7F_FFFF).distance(Psn::new(0)), HALF - 1);
    assert_eq!(Psn::new(0x80_0000).distance(Psn::new(0)), -HALF);
    assert_eq!(Psn::new(0).distance(Psn::new(0x80_0000)), -HALF);
    assert_eq!(Psn::new(0x80_0001).distance(Psn::new(0)), -(HALF - 1));
    // in_range across the wrap
    assert!(Psn::new(0xFF_FFFE).in_range(Psn::new(0xFF_FFFE), 4));
    assert!(Psn::new(1).in_range(Psn::new(0xFF_FFFE), 4));
    assert!(!Psn::new(2).in_range(Psn::new(0xFF_FFFE), 4));
    assert!(!Psn::new(0xFF_FFFD).in_range(Psn::new(0xFF_FFFE), 4));
    assert!(!Psn::new(7).in_range(Psn::new(7), 0));
    // formatting
    assert_eq!(format!("{:?}", Psn::new(0x1234)), "Psn(0x001234)");
    assert_eq!(format!("{}", Psn::MAX), "0xffffff");
    assert_eq!(u32::from(Psn::new(9)), 9);
    // the other 24-bit types wrap the same way
    assert_eq!(Msn::new(MASK24).next(), Msn::new(0));
    assert_eq!(Msn::new(0x100_0001).value(), 1);
    assert_eq!(Qpn::new(0xFFFF_FFFF).value(), MASK24);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn new_masks_to_24_bits(v in any::<u32>()) {
        prop_assert_eq!(Psn::new(v).value(), v & MASK24);
        prop_assert!(Psn::new(v).value() <= MASK24);
    }

    #[test]
    fn add_sub_inverse(p in psn(), n in any::<u32>()) {
        prop_assert_eq!(p.add(n).sub(n), p);
        prop_assert_eq!(p.sub(n).add(n), p);
        prop_assert_eq!(p.add(n).value(), ((p.value() as u64 + n as u64) % (1 << 24)) as u32);
        prop_assert_eq!(p.add(n), p.add(n & MASK24));
    }

    #[test]
    fn add_is_associative(p in psn(), a in any::<u32>(), b in any::<u32>()) {
        prop_assert_eq!(p.add(a).add(b), p.add(b).add(a));
        prop_assert_eq!(p.add(a).add(b), p.add(a.wrapping_add(b)));
    }

    #[test]
    fn next_is_add_one(p in psn()) {
        prop_assert_eq!(p.next(), p.add(1));
        prop_assert_eq!(p.next().distance(p), 1);
        prop_assert!(p.next().is_after(p));
        prop_assert!(p.is_before(p.next()));
    }

    #[test]
    fn distance_in_window(a in psn(), b in psn()) {
        let d = a.distance(b);
        prop_assert!((-HALF..HALF).contains(&d));
        // b + d == a
        prop_assert_eq!(b.add(d as u32), a);
        prop_assert_eq!(a.sub(d as u32), b);
    }

    #[test]
    fn distance_antisymmetric(a in psn(), b in psn()) {
        let d = a.distance(b);
        if d == -HALF {
            // exactly half the space apart: both directions say "before"
            prop_assert_eq!(b.distance(a), -HALF);
        } else {
            prop_assert_eq!(b.distance(a), -d);
        }
        prop_assert_eq!(a.distance(a), 0);
    }

    #[test]
    fn distance_recovers_offset(a in psn(), d in -HALF..HALF) {
        prop_assert_eq!(a.add(d as u32).distance(a), d);
        prop_assert_eq!(a.distance(a.add(d as u32)), if d == -HALF { -HALF } else { -d });
    }

    #[test]
    fn predicates_follow_distance(a in psn(), b in psn()) {
        let d = a.distance(b);
        prop_assert_eq!(a.is_before(b), d < 0);
        prop_assert_eq!(a.is_after(b), d > 0);
        prop_assert_eq!(a.is_at_or_after(b), d >= 0);
        // exactly one of before / equal / after
        let n = [a.is_before(b), a == b, a.is_after(b)].iter().filter(|x| **x).count();
        prop_assert_eq!(n, 1);
        if d != -HALF {
            prop_assert_eq!(a.is_before(b), b.is_after(a));
            prop_assert_eq!(a.is_after(b), b.is_before(a));
        }
    }

    #[test]
    fn in_range_laws(start in psn(), len in 0u32..=(1 << 24), k in any::<u32>()) {
        let k = k % (1 << 24);
        let x = start.add(k);
        prop_assert_eq!(x.in_range(start, len), k < len);
        if len > 0 {
            prop_assert!(start.in_range(start, len));
            prop_assert!(start.add(len - 1).in_range(start, len));
        }
        if len < (1 << 24) {
            prop_assert!(!start.add(len).in_range(start, len));
            prop_assert!(!start.sub(1).in_range(start, len));
        } else {
            prop_assert!(x.in_range(start, len));
        }
    }

    #[test]
    fn in_range_agrees_with_distance(start in psn(), len in 0u32..(1 << 23), x in psn()) {
        // inside the forward half-window, range membership is an interval test
        let d = x.distance(start);
        prop_assert_eq!(x.in_range(start, len), d >= 0 && (d as u32) < len);
    }
}
