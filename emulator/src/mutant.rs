//! Mutation switches: each breaks one IBA rule in this core on purpose, so
//! that `roce conform` can show that the cases describing the rule catch
//! the bug (`conform/tests/mutants.rs`). A device made without one
//! ([`crate::HcaConfig::mutant`] `None`, the default and the only value
//! any real device configuration sets) follows every rule; each switch is
//! one comparison at the rule's own place in the code.

use core::fmt;

/// One broken rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// Responder: NAK every request ahead of the expected PSN, not only
    /// the first of a gap (breaks C9-113).
    NakEveryGapPacket,
    /// Responder: execute a duplicate SEND or WRITE again instead of only
    /// acknowledging it (breaks C9-108).
    ReexecuteDuplicates,
    /// Responder: no opcode-sequence check (breaks C9-40).
    NoOpcodeSequence,
    /// Responder: no packet-length check against the path MTU (breaks
    /// C9-22).
    NoPacketLength,
    /// Responder: RNR NAKs carry timer code 0 instead of the QP's
    /// `min_rnr_timer` (breaks §9.7.5.1.6).
    RnrTimerZero,
    /// Responder, UD: no Q_Key check (breaks §10.2.4).
    NoQkeyCheck,
    /// Requester: the retransmit timer runs at a quarter of the local ACK
    /// timeout (breaks §9.7.6.1.3).
    EarlyRetransmit,
    /// Requester: retry forever whatever `retry_cnt` says (breaks C9-141).
    IgnoreRetryCount,
    /// Requester: a NAK remote access error completes with
    /// REM_OP_ERR (breaks §9.9.2, Table 44).
    WrongNakStatus,
}

impl Mutant {
    /// Every switch.
    pub const ALL: [Mutant; 9] = [
        Mutant::NakEveryGapPacket,
        Mutant::ReexecuteDuplicates,
        Mutant::NoOpcodeSequence,
        Mutant::NoPacketLength,
        Mutant::RnrTimerZero,
        Mutant::NoQkeyCheck,
        Mutant::EarlyRetransmit,
        Mutant::IgnoreRetryCount,
        Mutant::WrongNakStatus,
    ];

    /// The switch's name, kebab-case (`nak-every-gap-packet`).
    pub fn name(self) -> &'static str {
        match self {
            Mutant::NakEveryGapPacket => "nak-every-gap-packet",
            Mutant::ReexecuteDuplicates => "reexecute-duplicates",
            Mutant::NoOpcodeSequence => "no-opcode-sequence",
            Mutant::NoPacketLength => "no-packet-length",
            Mutant::RnrTimerZero => "rnr-timer-zero",
            Mutant::NoQkeyCheck => "no-qkey-check",
            Mutant::EarlyRetransmit => "early-retransmit",
            Mutant::IgnoreRetryCount => "ignore-retry-count",
            Mutant::WrongNakStatus => "wrong-nak-status",
        }
    }

    /// The switch named `s`.
    pub fn from_name(s: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == s)
    }
}

impl fmt::Display for Mutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether `m` is the switch `on` (`None`: no switch).
#[inline]
pub(crate) fn is(on: Option<Mutant>, m: Mutant) -> bool {
    on == Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Mutant::ALL {
            assert_eq!(Mutant::from_name(m.name()), Some(m));
        }
        assert_eq!(Mutant::from_name("none"), None);
    }
}
