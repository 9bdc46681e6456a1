//! Mutation switches: each breaks one IBA rule in this core on purpose, so
//! that `roce conform` can show that the cases describing the rule catch
//! the bug (`conform/tests/mutants.rs`). Each switch is one comparison,
//! `mutant::is(self.mutant, Mutant::X)`, at the rule's own place in the
//! code (a rule applied in two places, such as a READ's access checked on
//! arrival and again per response, is broken in both).
//!
//! The switches exist only with this crate's cargo feature `mutants`
//! (passed on by `roce-host/mutants` and `roce-conform/mutants`; a test
//! build that includes `roce-conform`'s tests turns it on, nothing that
//! ships does). Only then is there a `HcaConfig::mutant` to set a switch with,
//! and a device made without one (`None`, the default) follows every rule.
//! Without the feature `is` is the constant `false`: every comparison and
//! the broken branch behind it compile away, so a shipped build has no
//! switch on its packet path. The [`Mutant`] names stay in every build
//! (they are only names).

use core::fmt;

macro_rules! mutants {
    ($( $(#[$doc:meta])* $v:ident => $name:literal, )*) => {
        /// One broken rule.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Mutant {
            $( $(#[$doc])* $v, )*
        }

        impl Mutant {
            /// Every switch.
            pub const ALL: &'static [Mutant] = &[ $( Mutant::$v, )* ];

            /// The switch's name, kebab-case (`nak-every-gap-packet`).
            pub fn name(self) -> &'static str {
                match self {
                    $( Mutant::$v => $name, )*
                }
            }
        }
    };
}

mutants! {
    // ---- responder: PSNs and duplicates (§9.7.5.1.1) ----
    /// Responder: NAK every request ahead of the expected PSN, not only
    /// the first of a gap (breaks C9-113).
    NakEveryGapPacket => "nak-every-gap-packet",
    /// Responder: a sequence NAK carries the PSN that arrived, not the
    /// expected one (breaks C9-113).
    SequenceNakAtReceivedPsn => "sequence-nak-at-received-psn",
    /// Responder: a request ahead of the expected PSN is executed and the
    /// gap skipped (breaks §9.7.5.1.1).
    AcceptPsnGap => "accept-psn-gap",
    /// Responder: a PSN more than 2^16 ahead counts as a duplicate
    /// (breaks §9.7.5.1.1: the valid range is half the PSN space).
    NarrowPsnWindow => "narrow-psn-window",
    /// Responder: the expected PSN does not wrap from 0xFFFFFF to 0
    /// (breaks §9.7.1).
    PsnSaturates => "psn-saturates",
    /// Responder: execute a duplicate SEND or WRITE again instead of only
    /// acknowledging it (breaks C9-108).
    ReexecuteDuplicates => "reexecute-duplicates",
    /// Responder: execute a duplicate atomic again instead of answering
    /// with its saved result (breaks C9-128).
    ReexecuteDuplicateAtomics => "reexecute-duplicate-atomics",
    /// Responder: a duplicate READ is dropped instead of executed again
    /// (breaks §9.7.5.1.1).
    NoDuplicateRead => "no-duplicate-read",
    /// Responder: every READ response packet carries the bytes at the
    /// RETH's address (breaks §9.7.5.1: a READ returns the range).
    ReadSourceStuck => "read-source-stuck",
    /// Responder: a READ uses one PSN whatever its length (breaks §9.7.1).
    ReadUsesOnePsn => "read-uses-one-psn",
    /// Responder: an atomic does not move the expected PSN on (breaks
    /// §9.7.1).
    AtomicKeepsPsn => "atomic-keeps-psn",
    /// Responder: an ACK carries the PSN before the one it acknowledges
    /// (breaks §9.7.5.1.3).
    AckPsnOffByOne => "ack-psn-off-by-one",
    /// Responder: a request without AckReq is dropped (breaks §9.7.5.1.3:
    /// AckReq asks for an ACK, its absence does not forbid execution).
    AckReqClearDropped => "ack-req-clear-dropped",
    // ---- responder: opcodes and lengths (C9-40, C9-22) ----
    /// Responder: no opcode-sequence check (breaks C9-40).
    NoOpcodeSequence => "no-opcode-sequence",
    /// Responder: no packet-length check against the path MTU, RC, UC or
    /// UD (breaks C9-22).
    NoPacketLength => "no-packet-length",
    /// Responder: a SEND is not checked against the receive buffer's
    /// length (breaks §9.9.3.1.3; the scatter then fails on the SGEs).
    NoReceiveLength => "no-receive-length",
    /// Responder: a WRITE's packets are not checked against its RETH DMA
    /// length (breaks C9-22).
    NoDmaLength => "no-dma-length",
    /// Responder: a receive completion counts the last packet's bytes only
    /// (breaks §9.7.5.1).
    ByteLenLastPacket => "byte-len-last-packet",
    /// Responder: a receive completion leaves out the immediate data
    /// (breaks §9.7.5.1 / §11.4.2.1).
    ImmediateLost => "immediate-lost",
    /// Responder: every packet of a multi-packet WRITE lands at the RETH's
    /// address (breaks §9.7.5.1).
    WriteOffsetStuck => "write-offset-stuck",
    /// Responder: a zero-length SEND is dropped (breaks §9.7.5.1).
    ZeroLengthSendDropped => "zero-length-send-dropped",
    // ---- responder: receive resources, RNR (§9.7.5.1.6) ----
    /// Responder: a WRITE with immediate needs no receive (breaks
    /// §9.7.5.1.6).
    WriteImmNeedsNoReceive => "write-imm-needs-no-receive",
    /// Responder: every WRITE needs a receive (breaks §9.7.5.1.6).
    WriteNeedsReceive => "write-needs-receive",
    /// Responder: RNR NAKs carry timer code 0 instead of the QP's
    /// `min_rnr_timer` (breaks §9.7.5.1.6).
    RnrTimerZero => "rnr-timer-zero",
    /// Responder: the PSN of an RNR-NAKed request counts as used, so its
    /// retry is taken for a duplicate (breaks §9.7.5.1.6).
    RnrConsumesPsn => "rnr-consumes-psn",
    // ---- responder: keys, access, bounds, atomics (§10.6.6, §9.4.4) ----
    /// Responder: a remote access error is dropped silently; no NAK, the
    /// QP stays in RTS (breaks §10.6.6 / C10-31).
    AccessErrorsSilent => "access-errors-silent",
    /// Responder: the region's remote access rights are not checked
    /// (breaks §10.6.6).
    NoRegionRights => "no-region-rights",
    /// Responder: a range ending exactly at the region's end is refused
    /// (breaks §10.6.6, an off-by-one).
    BoundsEndExclusive => "bounds-end-exclusive",
    /// Responder: a zero-length READ or WRITE has its R_Key checked
    /// (breaks §9.7.5.1: no memory is accessed).
    ZeroLengthChecksKey => "zero-length-checks-key",
    /// Responder: an atomic returns the value it left in memory, not the
    /// original (breaks §9.4.4).
    AtomicReturnsNew => "atomic-returns-new",
    /// Responder: COMPARE SWAP swaps whatever the compare value (breaks
    /// §9.4.4).
    CmpSwapAlwaysSwaps => "cmp-swap-always-swaps",
    /// Responder: an atomic's or ATOMIC WRITE's address need not be
    /// 8-byte aligned (breaks §9.4.4, IBA 1.5 §9.4).
    NoAtomicAlignment => "no-atomic-alignment",
    // ---- header checks (§9.6), states (§10.3.1) ----
    /// No ICRC check on receive (breaks §9.6 / Annex A17).
    NoIcrcCheck => "no-icrc-check",
    /// No BTH TVer check (breaks §9.6).
    NoTverCheck => "no-tver-check",
    /// No check of the opcode's transport against the QP type (breaks
    /// §9.6).
    NoTransportCheck => "no-transport-check",
    /// No P_Key check, RC, UC or UD (breaks §9.6 / §10.9).
    NoPkeyCheck => "no-pkey-check",
    /// Only the full-member default P_Key 0xFFFF matches (breaks §10.9).
    FullMemberPkeyOnly => "full-member-pkey-only",
    /// A request with FECN or BECN set is dropped (breaks §9.2).
    EcnDrops => "ecn-drops",
    /// A request to a QP number that does not exist goes to the device's
    /// first QP of the same type (breaks §9.6).
    MisroutesUnknownQp => "misroutes-unknown-qp",
    /// A QP in RTR drops the requests that arrive (breaks §10.3.1: RTR
    /// receives).
    RtrDropsRequests => "rtr-drops-requests",
    /// A QP in RTR takes send work requests (breaks §10.3.1 / §11.4.1.1).
    RtrAcceptsPosts => "rtr-accepts-posts",
    /// A QP in SQD starts new send work requests (breaks §10.3.1).
    SqdStartsNew => "sqd-starts-new",
    /// A QP in SQD drops the requests that arrive (breaks §10.3.1: only
    /// the send queue drains).
    SqdStopsResponder => "sqd-stops-responder",
    /// A QP on an SRQ takes receives from its own (empty) queue (breaks
    /// §10.2.9).
    SrqIgnored => "srq-ignored",
    /// Responder: a SEND that finds the QP's SRQ empty is dropped, not
    /// RNR-NAKed (breaks §9.7.5.1.6).
    SrqEmptyDrops => "srq-empty-drops",
    /// Responder: a FLUSH is executed but not answered (breaks IBA 1.5
    /// §9.4: a READ RESPONSE ONLY answers it).
    FlushNotAnswered => "flush-not-answered",
    /// Responder: an ATOMIC WRITE is acknowledged but not stored (breaks
    /// IBA 1.5 §9.4).
    AtomicWriteNotStored => "atomic-write-not-stored",
    /// A BIND_MW work request completes without binding the window (breaks
    /// §10.6.7).
    BindNoOp => "bind-no-op",
    /// Responder: an rkey's range is checked at its first byte only (breaks
    /// §10.6.6 for windows narrower than their region).
    KeyChecksStartOnly => "key-checks-start-only",
    /// Responder: a SEND with invalidate completes without invalidating
    /// (breaks §10.6.7.2).
    IgnoreInvalidate => "ignore-invalidate",
    /// A QP in ERR still executes requests (breaks §10.3.1).
    ErrStateExecutes => "err-state-executes",
    /// A QP entering ERR keeps its posted receives (breaks C10-31).
    ErrKeepsReceives => "err-keeps-receives",
    // ---- UC (§9.7.7), UD (§9.8, §10.2.4) ----
    /// Responder: a UC QP answers as an RC one (ACKs, NAKs, RNR, ERR;
    /// breaks §9.7.7).
    UcAsRc => "uc-as-rc",
    /// Responder, UD: no Q_Key check (breaks §10.2.4).
    NoQkeyCheck => "no-qkey-check",
    /// Responder, UD: the payload lands at the buffer's start, with no
    /// 40-byte GRH area (breaks §11.4.2.1).
    UdNoGrhArea => "ud-no-grh-area",
    /// Responder, UD: a datagram that finds no receive puts the QP in ERR
    /// (breaks §9.8: it is dropped).
    UdNoReceiveErr => "ud-no-receive-err",
    /// Responder, UD: datagrams out of PSN order are dropped (breaks §9.8).
    UdChecksPsn => "ud-checks-psn",
    // ---- requester (§9.7.5.2, §9.7.6, §10.8.3.3) ----
    /// Requester: the retransmit timer runs at a quarter of the local ACK
    /// timeout (breaks §9.7.6.1.3).
    EarlyRetransmit => "early-retransmit",
    /// Requester: retry forever whatever `retry_cnt` and `rnr_retry` say
    /// (breaks C9-141, §9.7.5.2.8).
    IgnoreRetryCount => "ignore-retry-count",
    /// Requester: each NAK error code completes with another code's
    /// status (breaks §9.9.2, Table 44).
    WrongNakStatus => "wrong-nak-status",
    /// Requester: the first request leaves at `sq_psn` + 1 (breaks
    /// §9.7.1).
    SqPsnPlusOne => "sq-psn-plus-one",
    /// Requester: segments carry one byte less than the path MTU (breaks
    /// C9-22).
    SegmentShort => "segment-short",
    /// Requester: an ACK completes only the oldest request it covers
    /// (breaks §9.7.5.2.1: ACKs are cumulative).
    AckCompletesOne => "ack-completes-one",
    /// Requester: a stale ACK completes the oldest request (breaks C9-118).
    StaleAckCompletes => "stale-ack-completes",
    /// Requester: an RNR NAK's timer is not waited for (breaks
    /// §9.7.5.2.8).
    RnrRetryAtOnce => "rnr-retry-at-once",
    /// Requester: after an RNR NAK the requester goes on from the next
    /// PSN, so the NAKed request is never sent again (breaks §9.7.5.2.8).
    RnrSkipsRequest => "rnr-skips-request",
    /// Requester: a NAK PSN sequence error is ignored until the timer
    /// fires (breaks §9.7.5.2.2).
    IgnoreSequenceNak => "ignore-sequence-nak",
    /// Requester: every READ response lands at the start of the local
    /// buffer (breaks §9.7.5.2).
    ReadResponseOffsetStuck => "read-response-offset-stuck",
    /// Requester: a READ response after a gap is dropped without
    /// re-issuing the READ (breaks C9-127).
    IgnoreReadGap => "ignore-read-gap",
    /// Requester: a READ is always re-issued whole, from its first byte
    /// (breaks C9-106).
    ReissueWholeRead => "reissue-whole-read",
    /// Requester: an atomic's original value is not stored locally
    /// (breaks §9.4.4).
    AtomicResultLost => "atomic-result-lost",
    /// Requester: an ACK past an outstanding READ or atomic completes it
    /// (breaks C9-127: it is an implied NAK).
    NoImpliedNak => "no-implied-nak",
    /// Requester: immediate data leaves as 0 (breaks §9.7.5.2).
    RequesterImmediateZero => "requester-immediate-zero",
    /// Requester: a zero-length SEND or READ completes without being
    /// sent (breaks §9.7.5.2).
    ZeroLengthCompletesLocally => "zero-length-completes-locally",
    /// Requester: `max_rd_atomic` is not enforced (breaks §9.4.4 / C9-72).
    IgnoreMaxRdAtomic => "ignore-max-rd-atomic",
    /// Requester: the fence is not waited for (breaks §10.8.3.3).
    IgnoreFence => "ignore-fence",
    /// Requester: every request waits for earlier READs and atomics, fence
    /// or not (breaks §9.5: only a fence orders them).
    FenceAlways => "fence-always",
    /// Requester: a READ response does not acknowledge the requests before
    /// its READ (breaks §9.7.5.2.1).
    ReadResponseNoImplicitAck => "read-response-no-implicit-ack",
    // ---- multicast and XRC ----
    /// A multicast datagram reaches the device's attached QPs whatever
    /// group its destination address names (breaks IBA's UD multicast:
    /// only the QPs attached to that group).
    McastAnyGroup => "mcast-any-group",
    /// An XRC target ignores the XRCETH and takes its receives from the
    /// first XRC SRQ of its domain (breaks Annex A14: the XRCETH names the
    /// SRQ, and an SRQ outside the domain is an invalid request).
    XrcIgnoresXrceth => "xrc-ignores-xrceth",
    // ---- congestion management (Annex A17.9) ----
    /// The notification point sends no CNP for a packet marked CE (breaks
    /// Annex A17.9).
    NoCnp => "no-cnp",
    /// Every CE mark gets a CNP, however close together (breaks the
    /// notification point's one CNP per QP per `min_time_between_cnps`).
    CnpEveryMark => "cnp-every-mark",
    /// A CNP leaves with BECN clear (breaks Annex A17.9.3).
    CnpWithoutBecn => "cnp-without-becn",
    /// A CNP is answered with an ACK, as a request would be (breaks
    /// Annex A17.9.3: a CNP is never acknowledged).
    CnpAcked => "cnp-acked",
    /// Packets leave marked CE instead of ECT(0) (breaks Annex A17.9 and
    /// RFC 3168: a sender marks ECT, only a congested switch marks CE).
    SendsCe => "sends-ce",
}

impl Mutant {
    /// The switch named `s`.
    pub fn from_name(s: &str) -> Option<Mutant> {
        Mutant::ALL.iter().copied().find(|m| m.name() == s)
    }
}

impl fmt::Display for Mutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether `m` is the switch `on` (`None`: no switch).
#[cfg(feature = "mutants")]
#[inline]
pub(crate) fn is(on: Option<Mutant>, m: Mutant) -> bool {
    on == Some(m)
}

/// Never: a build without the `mutants` feature has no switches (the
/// comparisons at the rules' places fold away).
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub(crate) const fn is(_on: Option<Mutant>, _m: Mutant) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &m in Mutant::ALL {
            assert_eq!(Mutant::from_name(m.name()), Some(m));
        }
        assert_eq!(Mutant::from_name("none"), None);
        let mut names: Vec<_> = Mutant::ALL.iter().map(|m| m.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Mutant::ALL.len(), "two switches share a name");
    }

    /// With the feature a switch is on where it is set, and only there.
    #[cfg(feature = "mutants")]
    #[test]
    fn a_switch_is_on_where_set() {
        for &m in Mutant::ALL {
            assert!(is(Some(m), m));
            assert!(!is(None, m));
        }
        assert!(!is(Some(Mutant::NoIcrcCheck), Mutant::NoTverCheck));
    }

    /// Without it no switch is ever on, whatever a QP holds.
    #[cfg(not(feature = "mutants"))]
    #[test]
    fn no_switch_without_the_feature() {
        const { assert!(!is(Some(Mutant::NoIcrcCheck), Mutant::NoIcrcCheck)) };
        for &m in Mutant::ALL {
            assert!(!is(Some(m), m));
        }
    }
}
