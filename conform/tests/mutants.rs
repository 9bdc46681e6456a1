//! Each case can fail: for every mutation switch of roce-emu's core
//! (`roce_emulator::mutant`), a device with that one rule broken fails
//! every case listed for it here, while `emu.rs` shows an unbroken device
//! passes them all. Devices on 127.0.109.10 + i, the tester on
//! 127.0.109.40 + i.

use roce_conform::catalogue;
use roce_conform::local::LocalAgent;
use roce_conform::run::Runner;
use roce_conform::wire::Wire;
use roce_emulator::Mutant;

/// The cases each switch must make fail.
const CAUGHT: &[(Mutant, &[&str])] = &[
    (Mutant::NakEveryGapPacket, &["resp.psn.nak-once-per-gap"]),
    (
        Mutant::ReexecuteDuplicates,
        &[
            "resp.psn.dup-send-reacked",
            "resp.psn.dup-write-not-reexecuted",
            "resp.psn.dup-multi-packet-write",
            "resp.psn.dup-older-reacked",
        ],
    ),
    (
        Mutant::NoOpcodeSequence,
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
        Mutant::NoPacketLength,
        &[
            "resp.len.first-shorter-than-mtu",
            "resp.len.middle-shorter-than-mtu",
            "resp.len.only-over-mtu",
        ],
    ),
    (Mutant::RnrTimerZero, &["resp.rnr.timer-field", "resp.rnr.no-receive"]),
    (Mutant::NoQkeyCheck, &["resp.ud.qkey-mismatch-dropped"]),
    (Mutant::EarlyRetransmit, &["req.retransmit.after-timeout", "req.retransmit.go-back-n"]),
    (Mutant::IgnoreRetryCount, &["req.retry.exhausted"]),
    (Mutant::WrongNakStatus, &["req.nak.remote-access", "req.nak.flushes-the-rest"]),
];

#[test]
fn every_switch_is_caught_by_its_cases() {
    assert_eq!(CAUGHT.len(), Mutant::ALL.len(), "a switch without cases");
    let all = catalogue::all();
    let mut report = Vec::new();
    for (i, (m, ids)) in CAUGHT.iter().enumerate() {
        let dev = format!("127.0.109.{}", 10 + i).parse().unwrap();
        let me = format!("127.0.109.{}", 40 + i).parse().unwrap();
        let mut agent = LocalAgent::open_mutant(&format!("mut{i}"), dev, Some(*m)).expect("device");
        let wire = Wire::bind(me, dev).expect("tester socket");
        let mut r = Runner::new(&mut agent, wire);
        for id in *ids {
            let case = all.iter().find(|c| c.id == *id).unwrap_or_else(|| panic!("no case {id}"));
            let o = r.run(case);
            report.push(format!("{m}: {id}: {} {}", o.verdict.word(), o.verdict.why()));
            assert_eq!(
                o.verdict.word(),
                "fail",
                "{m} was not caught by {id}:\n{}",
                report.join("\n")
            );
        }
    }
    println!("{}", report.join("\n"));
}
