//! Each case can fail: for every mutation switch of roce-emu's core
//! (`roce_emulator::mutant`), a device with that one rule broken fails
//! every case listed for it here, while `emu.rs` shows an unbroken device
//! passes them all; and every case of the catalogue is listed under at
//! least one switch. Devices on 127.0.110.10 + lane, the tester on
//! 127.0.110.60 + lane, one lane per thread (`LANES`).

use roce_conform::catalogue;
use roce_conform::local::LocalAgent;
use roce_conform::run::Runner;
use roce_conform::wire::Wire;
use roce_emulator::Mutant::{self, *};
use std::collections::{BTreeSet, HashSet};

/// The cases each switch must make fail.
const CAUGHT: &[(Mutant, &[&str])] = &[
    // ---- responder: PSNs and duplicates ----
    (NakEveryGapPacket, &["resp.psn.nak-once-per-gap"]),
    (
        SequenceNakAtReceivedPsn,
        &["resp.psn.ahead-naks", "resp.psn.far-ahead-naks", "resp.psn.read-gap-naks"],
    ),
    (AcceptPsnGap, &["resp.psn.ahead-naks", "resp.psn.resume-after-nak"]),
    (NarrowPsnWindow, &["resp.psn.far-ahead-naks"]),
    (PsnSaturates, &["resp.psn.wraps"]),
    (
        ReexecuteDuplicates,
        &[
            "resp.psn.dup-send-reacked",
            "resp.psn.dup-write-not-reexecuted",
            "resp.psn.dup-multi-packet-write",
            "resp.psn.dup-older-reacked",
        ],
    ),
    (ReexecuteDuplicateAtomics, &["resp.psn.dup-atomic-saved-result", "resp.psn.dup-atomic-older"]),
    (
        NoDuplicateRead,
        &[
            "resp.psn.dup-read-reexecuted",
            "resp.psn.dup-read-after-send",
            "resp.psn.dup-read-remainder",
        ],
    ),
    (ReadSourceStuck, &["resp.access.read", "resp.psn.dup-read-reexecuted"]),
    (ReadUsesOnePsn, &["resp.psn.read-consumes-psns", "resp.psn.read-gap-naks"]),
    (AtomicKeepsPsn, &["resp.psn.atomic-then-send"]),
    (
        AckPsnOffByOne,
        &["resp.psn.expected", "resp.psn.multi-packet-write", "resp.xrc.send", "resp.xrc.write"],
    ),
    (AckReqClearDropped, &["resp.header.ack-req-clear"]),
    // ---- responder: opcodes and lengths ----
    (
        NoOpcodeSequence,
        &[
            "resp.opseq.middle-without-first",
            "resp.opseq.last-without-first",
            "resp.opseq.write-middle-without-first",
            "resp.opseq.only-inside-message",
            "resp.opseq.write-inside-send",
            "resp.opseq.send-first-twice",
            "resp.opseq.read-inside-write",
        ],
    ),
    (
        NoPacketLength,
        &[
            "resp.len.first-shorter-than-mtu",
            "resp.len.middle-shorter-than-mtu",
            "resp.len.only-over-mtu",
            "resp.ud.over-mtu-dropped",
        ],
    ),
    (NoReceiveLength, &["resp.len.send-longer-than-receive"]),
    (
        NoDmaLength,
        &[
            "resp.len.write-more-than-dma-length",
            "resp.len.write-last-short-of-dma-length",
            "resp.len.pad-says-shorter",
            "resp.len.write-first-dma-shorter-than-packet",
        ],
    ),
    (
        ByteLenLastPacket,
        &[
            "resp.send.multi-packet",
            "resp.send.last-with-immediate",
            "resp.write.last-with-immediate",
            "resp.uc.multi-packet-send",
        ],
    ),
    (
        ImmediateLost,
        &[
            "resp.send.with-immediate",
            "resp.ud.with-immediate",
            "resp.uc.write-with-immediate",
            "resp.write.last-with-immediate",
        ],
    ),
    (WriteOffsetStuck, &["resp.write.mtu-256", "resp.psn.multi-packet-write"]),
    (ZeroLengthSendDropped, &["resp.send.zero-length"]),
    // ---- responder: receives and RNR ----
    (WriteImmNeedsNoReceive, &["resp.write.with-immediate-consumes-receive"]),
    (WriteNeedsReceive, &["resp.rnr.write-needs-no-receive"]),
    (RnrTimerZero, &["resp.rnr.timer-field", "resp.rnr.no-receive"]),
    (RnrConsumesPsn, &["resp.rnr.retry-succeeds"]),
    // ---- responder: keys, access, bounds, atomics ----
    (
        AccessErrorsSilent,
        &[
            "resp.access.write-wrong-key",
            "resp.access.write-unknown-key",
            "resp.access.write-past-end",
            "resp.access.write-before-start",
            "resp.access.write-va-wraps",
            "resp.access.write-without-right",
            "resp.access.read-wrong-key",
            "resp.access.read-past-end",
            "resp.access.read-without-right",
            "resp.access.read-2gib",
            "resp.access.read-unknown-key",
            "resp.access.read-before-start",
            "resp.access.read-va-wraps",
            "resp.access.write-middle-past-end",
            "resp.atomic.without-right",
            "resp.atomic.wrong-key",
            "resp.atomic.past-end",
            "resp.state.err-drops-requests",
        ],
    ),
    (
        NoRegionRights,
        &[
            "resp.access.write-without-right",
            "resp.access.read-without-right",
            "resp.atomic.without-right",
            "resp.flush.without-right",
        ],
    ),
    (
        BoundsEndExclusive,
        &[
            "resp.access.read-whole-region",
            "resp.access.write-to-last-byte",
            "resp.atomic.last-word",
        ],
    ),
    (
        ZeroLengthChecksKey,
        &["resp.access.zero-length-write-no-key", "resp.access.zero-length-read"],
    ),
    (
        AtomicReturnsNew,
        &[
            "resp.atomic.fetch-add",
            "resp.atomic.cmp-swap-equal",
            "resp.atomic.fetch-add-wraps",
            "resp.atomic.last-word",
        ],
    ),
    (CmpSwapAlwaysSwaps, &["resp.atomic.cmp-swap-differs"]),
    (
        NoAtomicAlignment,
        &[
            "resp.atomic.misaligned",
            "resp.atomic.cmp-swap-misaligned",
            "resp.atomic-write.misaligned",
        ],
    ),
    // ---- header checks, states ----
    (NoIcrcCheck, &["resp.header.bad-icrc-dropped"]),
    (NoTverCheck, &["resp.header.tver-dropped"]),
    (
        NoTransportCheck,
        &[
            "resp.header.uc-opcode-to-rc-dropped",
            "resp.header.rc-opcode-to-uc-dropped",
            "resp.ud.rc-opcode-dropped",
            "resp.xrc.rc-opcode-dropped",
        ],
    ),
    (NoPkeyCheck, &["resp.header.pkey-mismatch-dropped", "resp.ud.pkey-mismatch-dropped"]),
    (FullMemberPkeyOnly, &["resp.header.limited-pkey-accepted"]),
    (EcnDrops, &["resp.header.ecn-bits-ignored"]),
    (MisroutesUnknownQp, &["resp.header.unknown-qp-dropped"]),
    (ErrStateExecutes, &["resp.state.err-drops-requests"]),
    (RtrDropsRequests, &["resp.state.rtr-executes"]),
    (RtrAcceptsPosts, &["req.state.rtr-refuses-sends"]),
    (SqdStartsNew, &["req.state.sqd-starts-nothing"]),
    (SqdStopsResponder, &["resp.state.sqd-still-receives"]),
    (SrqIgnored, &["resp.srq.send-consumes", "resp.srq.multi-packet"]),
    (SrqEmptyDrops, &["resp.srq.empty-rnr"]),
    (FlushNotAnswered, &["resp.flush.answered"]),
    (
        BindNoOp,
        &[
            "resp.mw.write-through-window",
            "resp.mw.read-through-window",
            "resp.mw.type1-write-through-window",
        ],
    ),
    (KeyChecksStartOnly, &["resp.mw.outside-window", "resp.mw.type1-outside-window"]),
    (IgnoreInvalidate, &["resp.mw.send-with-invalidate"]),
    (AtomicWriteNotStored, &["resp.atomic-write.stores"]),
    (ErrKeepsReceives, &["resp.state.err-flushes-receives"]),
    // ---- UC, UD ----
    (
        UcAsRc,
        &[
            "resp.uc.no-receive-dropped",
            "resp.uc.gap-drops-message",
            "resp.uc.send-unacknowledged",
            "resp.uc.write",
            "resp.uc.write-wrong-key-dropped",
            "resp.uc.middle-without-first-dropped",
            "resp.uc.gap-then-new-first",
        ],
    ),
    (NoQkeyCheck, &["resp.ud.qkey-mismatch-dropped", "resp.ud.mcast-qkey-mismatch-dropped"]),
    (UdNoGrhArea, &["resp.ud.send", "resp.ud.grh-area", "resp.ud.mcast-delivered"]),
    // ---- multicast and XRC ----
    (McastAnyGroup, &["resp.ud.mcast-qpn-unicast-dropped"]),
    (XrcIgnoresXrceth, &["resp.xrc.unknown-srq-naks"]),
    (UdNoReceiveErr, &["resp.ud.no-receive-dropped"]),
    (UdChecksPsn, &["resp.ud.psn-not-checked"]),
    // ---- congestion management (Annex A17.9) ----
    (NoCnp, &["resp.cc.cnp-for-ce-mark", "resp.cc.cnp-rate-limited"]),
    (CnpEveryMark, &["resp.cc.cnp-rate-limited"]),
    (CnpWithoutBecn, &["resp.cc.cnp-for-ce-mark", "resp.cc.cnp-rate-limited"]),
    (CnpAcked, &["resp.cc.cnp-not-acknowledged"]),
    (SendsCe, &["resp.cc.sends-ect", "req.cc.sends-ect"]),
    // ---- requester ----
    (EarlyRetransmit, &["req.retransmit.after-timeout", "req.retransmit.go-back-n"]),
    (IgnoreRetryCount, &["req.retry.exhausted", "req.rnr.exhausted"]),
    (
        WrongNakStatus,
        &[
            "req.nak.remote-access",
            "req.nak.invalid-request",
            "req.nak.remote-operational",
            "req.nak.flushes-the-rest",
        ],
    ),
    (SqPsnPlusOne, &["req.send.acked"]),
    (SegmentShort, &["req.send.segmented", "req.write.segmented"]),
    (AckCompletesOne, &["req.ack.coalesced"]),
    (StaleAckCompletes, &["req.ack.stale-ignored"]),
    (RnrRetryAtOnce, &["req.rnr.timer-respected"]),
    (RnrSkipsRequest, &["req.rnr.retried"]),
    (IgnoreSequenceNak, &["req.nak.sequence-go-back", "req.nak.sequence-at-first"]),
    (ReadResponseOffsetStuck, &["req.read.completes"]),
    (IgnoreReadGap, &["req.read.first-response-lost"]),
    (ReissueWholeRead, &["req.read.reissued-for-remainder"]),
    (AtomicResultLost, &["req.atomic.result", "req.atomic.cmp-swap"]),
    (NoImpliedNak, &["req.atomic.implied-nak"]),
    (RequesterImmediateZero, &["req.send.with-immediate", "req.write.with-immediate"]),
    (ZeroLengthCompletesLocally, &["req.send.zero-length", "req.read.zero-length"]),
    (IgnoreMaxRdAtomic, &["req.max-rd-atomic"]),
    (IgnoreFence, &["req.fence-waits-for-read"]),
    (FenceAlways, &["req.unfenced-send-pipelined"]),
    (ReadResponseNoImplicitAck, &["req.ack.implied-by-read-response"]),
];

/// Switches run on this many threads, each with its own device and
/// tester addresses (lane i: device 127.0.110.10+i, tester .60+i).
const LANES: usize = 16;

#[test]
fn every_case_is_caught_by_a_switch() {
    let listed: BTreeSet<&str> = CAUGHT.iter().flat_map(|(_, ids)| ids.iter().copied()).collect();
    let missing: Vec<&str> =
        catalogue::all().iter().map(|c| c.id).filter(|id| !listed.contains(id)).collect();
    assert!(missing.is_empty(), "cases no switch is shown to break: {missing:?}");
    let switches: HashSet<Mutant> = CAUGHT.iter().map(|(m, _)| *m).collect();
    let unused: Vec<_> = Mutant::ALL.iter().filter(|m| !switches.contains(m)).collect();
    assert!(unused.is_empty(), "switches without cases: {unused:?}");
    assert_eq!(switches.len(), CAUGHT.len(), "a switch listed twice");
}

#[test]
fn every_switch_is_caught_by_its_cases() {
    let lanes: Vec<Vec<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..LANES)
            .map(|lane| {
                s.spawn(move || {
                    let all = catalogue::all();
                    let dev = format!("127.0.110.{}", 10 + lane).parse().unwrap();
                    let me = format!("127.0.110.{}", 60 + lane).parse().unwrap();
                    let mut out = Vec::new();
                    // (switch, case) pairs dealt out one by one: a switch with
                    // many slow cases (each waiting out an answer that does not
                    // come) is spread over the lanes; each pair gets a device
                    // of its own
                    let pairs =
                        CAUGHT.iter().flat_map(|(m, ids)| ids.iter().map(move |id| (*m, *id)));
                    for (i, (m, id)) in pairs.enumerate().filter(|(i, _)| i % LANES == lane) {
                        let Some(case) = all.iter().find(|c| c.id == id) else {
                            out.push(format!("MISSED {m}: no case {id}"));
                            continue;
                        };
                        // a case shows it can fail by failing once: a timing
                        // case whose broken device passed because this host
                        // was too loaded to show the difference gets two more
                        // tries
                        let mut line = String::new();
                        for attempt in 1..=3 {
                            let mut agent =
                                LocalAgent::open_mutant(&format!("mut{i}"), dev, Some(m))
                                    .expect("device");
                            let wire = Wire::bind(me, dev).expect("tester socket");
                            let o = Runner::new(&mut agent, wire).run(case);
                            let word = o.verdict.word();
                            let tag = if word == "fail" { "caught" } else { "MISSED" };
                            line = format!(
                                "{tag} {m}: {id}: {word} (try {attempt}) {}",
                                o.verdict.why()
                            );
                            if word == "fail" {
                                break;
                            }
                        }
                        out.push(line);
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("lane")).collect()
    });
    let report: Vec<String> = lanes.into_iter().flatten().collect();
    println!("{}", report.join("\n"));
    let missed: Vec<&String> = report.iter().filter(|l| l.starts_with("MISSED")).collect();
    assert!(
        missed.is_empty(),
        "switches not caught:\n{}",
        missed.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    );
}
