//! `validate_modify`: the QP state transition table (IBA §11.2.5, kernel
//! `qp_state_table`) and the value checks.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use roce_emulator::qp_attr::{
    describe_table, required_and_optional, validate_modify, AccessFlags, AhAttr, AttrMask,
    ModifyLimits, PathMtu, QpAttr, QpAttrError, QpState, QpType, ValueProblem, TRANSITIONS,
};

use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};

/// `QpState::Err` (the bare name would shadow `Result::Err`).
const ERR: QpState = QpState::Err;

/// rxe-like limits (one port, 1500-byte netdev => 1024 active MTU).
const LIMITS: ModifyLimits = ModifyLimits {
    max_qp_rd_atom: 128,
    max_qp_init_rd_atom: 128,
    active_mtu: PathMtu::Mtu1024,
    pkey_table_len: 64,
    phys_port_cnt: 1,
};

/// Every named attribute bit, one at a time.
const ALL_BITS: [AttrMask; 22] = [
    AttrMask::STATE,
    AttrMask::CUR_STATE,
    AttrMask::EN_SQD_ASYNC_NOTIFY,
    AttrMask::ACCESS_FLAGS,
    AttrMask::PKEY_INDEX,
    AttrMask::PORT,
    AttrMask::QKEY,
    AttrMask::AV,
    AttrMask::PATH_MTU,
    AttrMask::TIMEOUT,
    AttrMask::RETRY_CNT,
    AttrMask::RNR_RETRY,
    AttrMask::RQ_PSN,
    AttrMask::MAX_QP_RD_ATOMIC,
    AttrMask::ALT_PATH,
    AttrMask::MIN_RNR_TIMER,
    AttrMask::SQ_PSN,
    AttrMask::MAX_DEST_RD_ATOMIC,
    AttrMask::PATH_MIG_STATE,
    AttrMask::CAP,
    AttrMask::DEST_QPN,
    AttrMask::RATE_LIMIT,
];

fn peer() -> AhAttr {
    AhAttr::new(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2)))
}

fn mask(bits: &[AttrMask]) -> AttrMask {
    bits.iter().fold(AttrMask::EMPTY, |a, b| a | *b)
}

/// ibv_rc_pingpong's RESET->INIT.
fn rc_init() -> QpAttr {
    QpAttr::new().state(Init).pkey_index(0).port(1).access_flags(AccessFlags::EMPTY)
}

/// ibv_rc_pingpong's INIT->RTR.
fn rc_rtr() -> QpAttr {
    QpAttr::new()
        .state(Rtr)
        .ah(peer())
        .mtu(PathMtu::Mtu1024)
        .dest_qpn(0x11)
        .rq_psn(0x12_3456)
        .max_dest_rd_atomic(1)
        .min_rnr_timer(12)
}

/// ibv_rc_pingpong's RTR->RTS.
fn rc_rts() -> QpAttr {
    QpAttr::new()
        .state(Rts)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .sq_psn(0x65_4321)
        .max_rd_atomic(1)
}

fn ud_init() -> QpAttr {
    QpAttr::new().state(Init).pkey_index(0).port(1).qkey(0x1111_1111)
}

fn uc_rtr() -> QpAttr {
    QpAttr::new().state(Rtr).ah(peer()).mtu(PathMtu::Mtu1024).dest_qpn(0x11).rq_psn(0)
}

fn send_rts() -> QpAttr {
    QpAttr::new().state(Rts).sq_psn(0)
}

/// Every field holds a value that passes the value checks; the mask is
/// set by the caller.
fn all_valid(to: QpState, m: AttrMask) -> QpAttr {
    let mut a = rc_rtr()
        .pkey_index(0)
        .port(1)
        .qkey(7)
        .access_flags(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .sq_psn(1)
        .max_rd_atomic(1)
        .en_sqd_async_notify(true)
        .state(to);
    a.mask = m;
    a
}

/// The happy paths, as (type, from, attr, expected mask) steps.
fn happy_steps() -> Vec<(QpType, QpState, QpAttr)> {
    vec![
        (QpType::Rc, Reset, rc_init()),
        (QpType::Rc, Init, rc_rtr()),
        (QpType::Rc, Rtr, rc_rts()),
        (QpType::Uc, Reset, rc_init()),
        (QpType::Uc, Init, uc_rtr()),
        (QpType::Uc, Rtr, send_rts()),
        (QpType::Ud, Reset, ud_init()),
        (QpType::Ud, Init, QpAttr::new().state(Rtr)),
        (QpType::Ud, Rtr, send_rts()),
    ]
}

#[test]
fn rc_pingpong_path() {
    let init = rc_init();
    assert_eq!(
        init.mask,
        mask(&[AttrMask::STATE, AttrMask::PKEY_INDEX, AttrMask::PORT, AttrMask::ACCESS_FLAGS])
    );
    assert_eq!(validate_modify(QpType::Rc, Reset, &init, &LIMITS), Ok(Init));

    let rtr = rc_rtr();
    assert_eq!(
        rtr.mask,
        mask(&[
            AttrMask::STATE,
            AttrMask::AV,
            AttrMask::PATH_MTU,
            AttrMask::DEST_QPN,
            AttrMask::RQ_PSN,
            AttrMask::MAX_DEST_RD_ATOMIC,
            AttrMask::MIN_RNR_TIMER,
        ])
    );
    assert_eq!(validate_modify(QpType::Rc, Init, &rtr, &LIMITS), Ok(Rtr));

    let rts = rc_rts();
    assert_eq!(
        rts.mask,
        mask(&[
            AttrMask::STATE,
            AttrMask::TIMEOUT,
            AttrMask::RETRY_CNT,
            AttrMask::RNR_RETRY,
            AttrMask::SQ_PSN,
            AttrMask::MAX_QP_RD_ATOMIC,
        ])
    );
    assert_eq!(validate_modify(QpType::Rc, Rtr, &rts, &LIMITS), Ok(Rts));
    assert_eq!(rts.mask.0, 0x1_0000 | 0x2000 | 0x800 | 0x400 | 0x200 | 1);
}

#[test]
fn ud_path() {
    assert_eq!(validate_modify(QpType::Ud, Reset, &ud_init(), &LIMITS), Ok(Init));
    assert_eq!(validate_modify(QpType::Ud, Init, &QpAttr::new().state(Rtr), &LIMITS), Ok(Rtr));
    assert_eq!(validate_modify(QpType::Ud, Rtr, &send_rts(), &LIMITS), Ok(Rts));
    // UD INIT takes QKEY, not ACCESS_FLAGS.
    assert_eq!(
        validate_modify(QpType::Ud, Reset, &rc_init(), &LIMITS),
        Err(QpAttrError::InvalidAttrMask {
            from: Reset,
            to: Init,
            missing: AttrMask::QKEY,
            invalid: AttrMask::ACCESS_FLAGS,
        })
    );
    // RC INIT refuses QKEY.
    assert_eq!(
        validate_modify(QpType::Rc, Reset, &ud_init(), &LIMITS).unwrap_err().to_string(),
        "invalid attribute mask for RESET -> INIT: missing [ACCESS_FLAGS]; not allowed [QKEY]"
    );
}

#[test]
fn uc_path() {
    assert_eq!(validate_modify(QpType::Uc, Reset, &rc_init(), &LIMITS), Ok(Init));
    assert_eq!(validate_modify(QpType::Uc, Init, &uc_rtr(), &LIMITS), Ok(Rtr));
    assert_eq!(validate_modify(QpType::Uc, Rtr, &send_rts(), &LIMITS), Ok(Rts));
    // RC-only responder attributes are refused on UC.
    assert_eq!(
        validate_modify(QpType::Uc, Init, &rc_rtr(), &LIMITS),
        Err(QpAttrError::InvalidAttrMask {
            from: Init,
            to: Rtr,
            missing: AttrMask::EMPTY,
            invalid: AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER,
        })
    );
    assert_eq!(
        validate_modify(QpType::Uc, Rtr, &rc_rts(), &LIMITS).unwrap_err().to_string(),
        "invalid attribute mask for RTR -> RTS: not allowed [TIMEOUT, RETRY_CNT, RNR_RETRY, \
         MAX_QP_RD_ATOMIC]"
    );
}

#[test]
fn each_required_attribute_removed_is_named() {
    let mut checked = 0;
    for (ty, from, attr) in happy_steps() {
        let to = attr.qp_state.unwrap();
        let (required, _) = required_and_optional(ty, from, to).unwrap();
        for bit in ALL_BITS.iter().copied().filter(|b| required.contains(*b)) {
            let mut a = attr;
            a.mask = a.mask.difference(bit);
            let err = validate_modify(ty, from, &a, &LIMITS).unwrap_err();
            assert_eq!(
                err,
                QpAttrError::InvalidAttrMask { from, to, missing: bit, invalid: AttrMask::EMPTY },
                "{ty} {from}->{to} without {bit}"
            );
            assert_eq!(
                err.to_string(),
                format!("invalid attribute mask for {from} -> {to}: missing [{}]", bit.names()[0])
            );
            checked += 1;
        }
    }
    // RC 3+6+5, UC 3+4+1, UD 3+0+1.
    assert_eq!(checked, 26);
}

#[test]
fn each_forbidden_attribute_added_is_named() {
    let mut checked = 0;
    for (ty, from, attr) in happy_steps() {
        let to = attr.qp_state.unwrap();
        let (required, optional) = required_and_optional(ty, from, to).unwrap();
        let allowed = required | optional | AttrMask::STATE | AttrMask::CUR_STATE;
        for bit in ALL_BITS.iter().copied().filter(|b| !allowed.contains(*b)) {
            let mut a = all_valid(to, attr.mask | bit);
            a.cur_qp_state = Some(from);
            assert_eq!(
                validate_modify(ty, from, &a, &LIMITS),
                Err(QpAttrError::InvalidAttrMask {
                    from,
                    to,
                    missing: AttrMask::EMPTY,
                    invalid: bit
                }),
                "{ty} {from}->{to} with {bit}"
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked}");
}

#[test]
fn forbidden_attribute_display() {
    let err = validate_modify(QpType::Rc, Reset, &rc_init().qkey(1), &LIMITS).unwrap_err();
    assert_eq!(err.to_string(), "invalid attribute mask for RESET -> INIT: not allowed [QKEY]");
    let err = validate_modify(QpType::Rc, Init, &rc_rtr().timeout(14), &LIMITS).unwrap_err();
    assert_eq!(err.to_string(), "invalid attribute mask for INIT -> RTR: not allowed [TIMEOUT]");
    let mut rtr = rc_rtr();
    rtr.mask = rtr.mask.difference(AttrMask::PATH_MTU | AttrMask::DEST_QPN);
    let err = validate_modify(QpType::Rc, Init, &rtr, &LIMITS).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid attribute mask for INIT -> RTR: missing [PATH_MTU, DEST_QPN]"
    );
}

#[test]
fn illegal_transitions() {
    let cases = [
        (Reset, Rtr),
        (Reset, Rts),
        (Reset, Sqd),
        // The kernel's table has no RESET -> ERR.
        (Reset, ERR),
        (Init, Rts),
        (Init, Sqd),
        (Rtr, Rtr),
        (Rtr, Init),
        (Rtr, Sqd),
        (Rts, Init),
        (Rts, Rtr),
        (Sqd, Init),
        (Sqd, Rtr),
        (ERR, Init),
        (ERR, Rts),
        (Sqe, Sqe),
        (Sqe, Init),
    ];
    for ty in QpType::ALL {
        for (from, to) in cases {
            let a = QpAttr::new().state(to);
            assert_eq!(
                validate_modify(ty, from, &a, &LIMITS),
                Err(QpAttrError::InvalidTransition { from, to }),
                "{ty} {from}->{to}"
            );
        }
        // Nothing can be moved into SQE by modify_qp.
        for from in QpState::ALL {
            assert_eq!(
                validate_modify(ty, from, &QpAttr::new().state(Sqe), &LIMITS),
                Err(QpAttrError::InvalidTransition { from, to: Sqe })
            );
        }
    }
    // SQE is a UC/UD state: RC has no SQE -> RTS.
    let a = QpAttr::new().state(Rts);
    assert_eq!(
        validate_modify(QpType::Rc, Sqe, &a, &LIMITS),
        Err(QpAttrError::InvalidTransition { from: Sqe, to: Rts })
    );
    assert_eq!(validate_modify(QpType::Uc, Sqe, &a, &LIMITS), Ok(Rts));
    assert_eq!(validate_modify(QpType::Ud, Sqe, &a.qkey(3), &LIMITS), Ok(Rts));
    assert_eq!(
        validate_modify(QpType::Uc, Sqe, &a.access_flags(AccessFlags::EMPTY), &LIMITS),
        Ok(Rts)
    );
    assert_eq!(
        validate_modify(QpType::Rc, Sqd, &a.timeout(14), &LIMITS).unwrap_err().to_string(),
        "invalid attribute mask for SQD -> RTS: not allowed [TIMEOUT]"
    );
}

#[test]
fn reset_and_err_from_every_state() {
    for ty in QpType::ALL {
        for from in QpState::ALL {
            assert_eq!(
                validate_modify(ty, from, &QpAttr::new().state(Reset), &LIMITS),
                Ok(Reset),
                "{ty} {from}->RESET"
            );
            // These transitions take no attributes at all.
            assert_eq!(
                validate_modify(ty, from, &QpAttr::new().state(Reset).port(1), &LIMITS),
                Err(QpAttrError::InvalidAttrMask {
                    from,
                    to: Reset,
                    missing: AttrMask::EMPTY,
                    invalid: AttrMask::PORT
                })
            );
            let to_err = validate_modify(ty, from, &QpAttr::new().state(ERR), &LIMITS);
            if from == Reset {
                assert_eq!(to_err, Err(QpAttrError::InvalidTransition { from, to: ERR }));
            } else {
                assert_eq!(to_err, Ok(ERR), "{ty} {from}->ERR");
                assert_eq!(
                    validate_modify(ty, from, &QpAttr::new().state(ERR).sq_psn(0), &LIMITS),
                    Err(QpAttrError::InvalidAttrMask {
                        from,
                        to: ERR,
                        missing: AttrMask::EMPTY,
                        invalid: AttrMask::SQ_PSN
                    })
                );
            }
        }
    }
}

#[test]
fn modify_without_state_uses_the_self_transition() {
    // RTS -> RTS: RC may change MIN_RNR_TIMER, UD may not.
    let a = QpAttr::new().min_rnr_timer(5);
    assert_eq!(validate_modify(QpType::Rc, Rts, &a, &LIMITS), Ok(Rts));
    assert_eq!(
        validate_modify(QpType::Ud, Rts, &a, &LIMITS).unwrap_err().to_string(),
        "invalid attribute mask for RTS -> RTS: not allowed [MIN_RNR_TIMER]"
    );
    assert_eq!(validate_modify(QpType::Ud, Rts, &QpAttr::new().qkey(9), &LIMITS), Ok(Rts));
    // INIT -> INIT.
    assert_eq!(validate_modify(QpType::Rc, Init, &QpAttr::new().port(1), &LIMITS), Ok(Init));
    assert_eq!(validate_modify(QpType::Ud, Init, &QpAttr::new().qkey(1), &LIMITS), Ok(Init));
    // SQD -> SQD may change the path on RC.
    assert_eq!(validate_modify(QpType::Rc, Sqd, &QpAttr::new().timeout(3), &LIMITS), Ok(Sqd));
    // No RTR -> RTR: an RTR QP cannot be modified without a state change.
    assert_eq!(
        validate_modify(QpType::Rc, Rtr, &QpAttr::new().min_rnr_timer(5), &LIMITS),
        Err(QpAttrError::InvalidTransition { from: Rtr, to: Rtr })
    );
    // RESET -> RESET and ERR -> ERR accept nothing (an empty mask is fine).
    assert_eq!(validate_modify(QpType::Rc, Reset, &QpAttr::new(), &LIMITS), Ok(Reset));
    assert_eq!(validate_modify(QpType::Ud, ERR, &QpAttr::new(), &LIMITS), Ok(ERR));
    assert_eq!(
        validate_modify(QpType::Rc, ERR, &QpAttr::new().qkey(1), &LIMITS),
        Err(QpAttrError::InvalidAttrMask {
            from: ERR,
            to: ERR,
            missing: AttrMask::EMPTY,
            invalid: AttrMask::QKEY
        })
    );
}

#[test]
fn cur_state_is_a_check() {
    let ok = rc_rtr().cur_state(Init);
    assert_eq!(validate_modify(QpType::Rc, Init, &ok, &LIMITS), Ok(Rtr));
    let wrong = rc_rts().cur_state(Rts);
    let err = validate_modify(QpType::Rc, Rtr, &wrong, &LIMITS).unwrap_err();
    assert_eq!(err, QpAttrError::CurStateMismatch { given: Rts, actual: Rtr });
    assert_eq!(err.to_string(), "cur_qp_state RTS does not match the QP's state RTR");
}

#[test]
fn mask_bits_without_values_are_refused() {
    let mut a = QpAttr::new();
    a.mask = AttrMask::STATE;
    let err = validate_modify(QpType::Rc, Reset, &a, &LIMITS);
    assert_eq!(
        err,
        Err(QpAttrError::InvalidValue {
            attr: "qp_state",
            reason: ValueProblem::NotGiven { mask: "STATE", what: "state" }
        })
    );
    assert_eq!(
        err.unwrap_err().to_string(),
        "invalid value for qp_state: STATE is in the mask but no state given"
    );
    let mut a = rc_rtr();
    a.ah_attr = None;
    assert!(matches!(
        validate_modify(QpType::Rc, Init, &a, &LIMITS),
        Err(QpAttrError::InvalidValue { attr: "ah_attr", .. })
    ));
    let mut a = rc_rtr();
    a.path_mtu = None;
    assert!(matches!(
        validate_modify(QpType::Rc, Init, &a, &LIMITS),
        Err(QpAttrError::InvalidValue { attr: "path_mtu", .. })
    ));
    // A state value without the STATE bit is ignored: same-state modify.
    let mut a = QpAttr::new();
    a.qp_state = Some(Rts);
    assert_eq!(validate_modify(QpType::Rc, Init, &a, &LIMITS), Ok(Init));
}

/// `(from, attr)` must fail with InvalidValue naming `name`; `fixed` (same
/// step with the boundary value) must pass.
fn assert_bad_value(ty: QpType, from: QpState, bad: QpAttr, fixed: QpAttr, name: &str) {
    match validate_modify(ty, from, &bad, &LIMITS) {
        Err(QpAttrError::InvalidValue { attr, .. }) => assert_eq!(attr, name),
        other => panic!("{name}: expected InvalidValue, got {other:?}"),
    }
    let to = fixed.qp_state.unwrap_or(from);
    assert_eq!(validate_modify(ty, from, &fixed, &LIMITS), Ok(to), "{name} boundary");
}

#[test]
fn value_checks() {
    use QpType::Rc;
    assert_bad_value(Rc, Rtr, rc_rts().timeout(32), rc_rts().timeout(31), "timeout");
    assert_bad_value(Rc, Rtr, rc_rts().retry_cnt(8), rc_rts().retry_cnt(7), "retry_cnt");
    assert_bad_value(Rc, Rtr, rc_rts().rnr_retry(8), rc_rts().rnr_retry(7), "rnr_retry");
    assert_bad_value(
        Rc,
        Init,
        rc_rtr().min_rnr_timer(32),
        rc_rtr().min_rnr_timer(31),
        "min_rnr_timer",
    );
    assert_bad_value(
        Rc,
        Init,
        rc_rtr().mtu(PathMtu::Mtu2048),
        rc_rtr().mtu(PathMtu::Mtu1024),
        "path_mtu",
    );
    assert_bad_value(
        Rc,
        Rtr,
        rc_rts().max_rd_atomic(129),
        rc_rts().max_rd_atomic(128),
        "max_rd_atomic",
    );
    assert_bad_value(
        Rc,
        Init,
        rc_rtr().max_dest_rd_atomic(129),
        rc_rtr().max_dest_rd_atomic(128),
        "max_dest_rd_atomic",
    );
    assert_bad_value(Rc, Reset, rc_init().pkey_index(64), rc_init().pkey_index(63), "pkey_index");
    assert_bad_value(Rc, Reset, rc_init().port(0), rc_init().port(1), "port_num");
    assert_bad_value(Rc, Reset, rc_init().port(2), rc_init().port(1), "port_num");
    assert_bad_value(Rc, Rtr, rc_rts().sq_psn(0x100_0000), rc_rts().sq_psn(0xFF_FFFF), "sq_psn");
    assert_bad_value(Rc, Init, rc_rtr().rq_psn(0x100_0000), rc_rtr().rq_psn(0xFF_FFFF), "rq_psn");
    assert_bad_value(
        Rc,
        Init,
        rc_rtr().dest_qpn(0x100_0000),
        rc_rtr().dest_qpn(0xFF_FFFF),
        "dest_qp_num",
    );
    assert_bad_value(
        Rc,
        Reset,
        rc_init().access_flags(AccessFlags(1 << 20)),
        rc_init().access_flags(AccessFlags::REMOTE_ATOMIC),
        "qp_access_flags",
    );

    // Address vectors: unspecified addresses are refused, hop_limit 0 is fine.
    let mut hop0 = peer();
    hop0.hop_limit = 0;
    assert_bad_value(
        Rc,
        Init,
        rc_rtr().ah(AhAttr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED))),
        rc_rtr().ah(hop0),
        "ah_attr.dgid",
    );
    assert_bad_value(
        Rc,
        Init,
        rc_rtr().ah(AhAttr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED))),
        rc_rtr().ah(AhAttr::new("fe80::1".parse().unwrap())),
        "ah_attr.dgid",
    );
    let mut bad_port = peer();
    bad_port.port_num = 0;
    assert_bad_value(Rc, Init, rc_rtr().ah(bad_port), rc_rtr(), "ah_attr.port_num");
    let mut bad_flow = peer();
    bad_flow.flow_label = 0x10_0000;
    let mut max_flow = peer();
    max_flow.flow_label = 0xF_FFFF;
    assert_bad_value(Rc, Init, rc_rtr().ah(bad_flow), rc_rtr().ah(max_flow), "ah_attr.flow_label");

    // Values whose mask bit is clear are not looked at.
    let mut a = rc_rts();
    a.timeout = 200;
    a.dest_qp_num = u32::MAX;
    a.path_mtu = Some(PathMtu::Mtu4096);
    a.pkey_index = u16::MAX;
    a.mask = a.mask.difference(AttrMask::TIMEOUT);
    assert_eq!(
        validate_modify(Rc, Rtr, &a, &LIMITS),
        Err(QpAttrError::InvalidAttrMask {
            from: Rtr,
            to: Rts,
            missing: AttrMask::TIMEOUT,
            invalid: AttrMask::EMPTY
        })
    );
    let mut b = QpAttr::new().state(Rts).sq_psn(0);
    b.timeout = 200;
    b.dest_qp_num = u32::MAX;
    b.pkey_index = u16::MAX;
    assert_eq!(validate_modify(QpType::Ud, Rtr, &b, &LIMITS), Ok(Rts));
}

#[test]
fn value_error_display() {
    let err = validate_modify(QpType::Rc, Rtr, &rc_rts().timeout(32), &LIMITS).unwrap_err();
    assert_eq!(err.to_string(), "invalid value for timeout: 32 exceeds the maximum 31");
    let err =
        validate_modify(QpType::Rc, Init, &rc_rtr().mtu(PathMtu::Mtu4096), &LIMITS).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid value for path_mtu: 4096 exceeds the port's active MTU 1024"
    );
    let err = validate_modify(QpType::Rc, Reset, &rc_init().port(0), &LIMITS).unwrap_err();
    assert_eq!(err.to_string(), "invalid value for port_num: 0 is not a port (1..=1)");
    let err = validate_modify(QpType::Rc, Init, &QpAttr::new().state(Rts), &LIMITS).unwrap_err();
    assert_eq!(err.to_string(), "invalid QP state transition INIT -> RTS");
}

/// Every (type, from, to): the validator agrees with `required_and_optional`.
#[test]
fn all_pairs_agree_with_the_table() {
    let mut legal = [0usize; 3];
    for (i, ty) in QpType::ALL.into_iter().enumerate() {
        for from in QpState::ALL {
            for to in QpState::ALL {
                let with_state = |m: AttrMask| all_valid(to, m | AttrMask::STATE);
                match required_and_optional(ty, from, to) {
                    None => {
                        let r = validate_modify(ty, from, &with_state(AttrMask::EMPTY), &LIMITS);
                        assert_eq!(r, Err(QpAttrError::InvalidTransition { from, to }));
                    }
                    Some((req, opt)) => {
                        legal[i] += 1;
                        assert!(!req.intersects(opt), "{ty} {from}->{to}: req/opt overlap");
                        assert!(!(req | opt).intersects(AttrMask::STATE | AttrMask::CUR_STATE));
                        for m in [req, req | opt] {
                            let r = validate_modify(ty, from, &with_state(m), &LIMITS);
                            assert_eq!(r, Ok(to), "{ty} {from}->{to} mask {m:?}");
                        }
                        // Anything outside req|opt is named as not allowed.
                        let outside = mask(&ALL_BITS)
                            .difference(req | opt | AttrMask::STATE | AttrMask::CUR_STATE);
                        let r = validate_modify(ty, from, &with_state(req | outside), &LIMITS);
                        assert_eq!(
                            r,
                            Err(QpAttrError::InvalidAttrMask {
                                from,
                                to,
                                missing: AttrMask::EMPTY,
                                invalid: outside
                            })
                        );
                        if !req.is_empty() {
                            let r = validate_modify(ty, from, &with_state(opt), &LIMITS);
                            assert_eq!(
                                r,
                                Err(QpAttrError::InvalidAttrMask {
                                    from,
                                    to,
                                    missing: req,
                                    invalid: AttrMask::EMPTY
                                })
                            );
                        }
                    }
                }
            }
        }
    }
    // 22 rows; RC lacks SQE -> RTS.
    assert_eq!(legal, [21, 22, 22]);
    assert_eq!(TRANSITIONS.len(), 22);
}

#[test]
fn table_facts() {
    let ro = |ty, f, t| required_and_optional(ty, f, t).unwrap();
    assert_eq!(
        ro(QpType::Ud, Reset, Init).0,
        AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY
    );
    assert_eq!(ro(QpType::Ud, Init, Rtr), (AttrMask::EMPTY, AttrMask::PKEY_INDEX | AttrMask::QKEY));
    assert_eq!(ro(QpType::Uc, Sqe, Rts), (AttrMask::EMPTY, AttrMask::ACCESS_FLAGS));
    assert_eq!(ro(QpType::Rc, Rts, Sqd), (AttrMask::EMPTY, AttrMask::EN_SQD_ASYNC_NOTIFY));
    // RoCE: connected QPs need the AV to reach RTR.
    assert!(ro(QpType::Rc, Init, Rtr).0.contains(AttrMask::AV));
    assert!(ro(QpType::Uc, Init, Rtr).0.contains(AttrMask::AV));
    // Never for RC/UC/UD: CAP and RATE_LIMIT.
    for t in TRANSITIONS.iter() {
        for ty in QpType::ALL {
            if let Some(m) = t.for_type(ty) {
                assert!(!(m.required | m.optional).intersects(AttrMask::CAP | AttrMask::RATE_LIMIT));
            }
        }
    }
}

#[test]
fn markdown_table() {
    let md = describe_table();
    let lines: Vec<&str> = md.lines().collect();
    assert_eq!(lines.len(), 2 + TRANSITIONS.len());
    assert_eq!(
        lines[0],
        "| From | To | RC required | RC optional | UC required | UC optional | UD required | UD \
         optional |"
    );
    assert_eq!(lines[1], "|---|---|---|---|---|---|---|---|");
    assert_eq!(lines[2], "| RESET | RESET | — | — | — | — | — | — |");
    assert!(lines.contains(
        &"| RESET | INIT | ACCESS_FLAGS, PKEY_INDEX, PORT | — | ACCESS_FLAGS, PKEY_INDEX, PORT \
          | — | PKEY_INDEX, PORT, QKEY | — |"
    ));
    assert!(lines.contains(&"| SQE | RTS | n/a | n/a | — | ACCESS_FLAGS | — | QKEY |"));
    for l in &lines {
        assert_eq!(l.matches('|').count(), 9, "{l}");
    }
}
