//! The whole catalogue against a roce-emu UDP device opened in this
//! process (127.0.109.2), the tester on 127.0.109.3: every case must pass
//! (or be n/a with the agent's reason). Prints the verdict table.

use roce_conform::agent::Agent;
use roce_conform::agent::{wc, QpStateName};
use roce_conform::case::{Bytes, Case, Direction, Key, Req, Setup, Step, Step::*, Va};
use roce_conform::catalogue;
use roce_conform::local::LocalAgent;
use roce_conform::report::{markdown, table, tally};
use roce_conform::run::Runner;
use roce_conform::wire::Wire;
use roce_packet::{NakCode, Opcode as O};

/// Cases whose expectations are wrong on purpose: the runner must fail
/// each, naming what it expected (the tester can fail).
const WRONG: &[Case] = &[
    Case {
        id: "resp.wrong.nak-for-good-send",
        iba: "§9.7.5.1.1",
        rule: "(wrong on purpose)",
        direction: Direction::Responder,
        setup: Setup::DEFAULT,
        steps: &[
            PostRecv { off: 0, len: 256 },
            Send(Req::new(O::RC_SEND_ONLY, 0).len(8)),
            Nak(0, NakCode::InvalidRequest),
        ],
    },
    Case {
        id: "resp.wrong.memory",
        iba: "§9.7.5.1.1",
        rule: "(wrong on purpose)",
        direction: Direction::Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0).len(8).reth(Va::Off(0), Key::Good, 8)),
            Ack(0),
            Mem { off: 0, len: 8, want: Bytes::Untouched },
        ],
    },
    Case {
        id: "resp.wrong.state",
        iba: "§10.6.6",
        rule: "(wrong on purpose)",
        direction: Direction::Responder,
        setup: Setup::DEFAULT,
        steps: &[
            Send(Req::new(O::RC_RDMA_WRITE_ONLY, 0).len(8).reth(Va::Off(0), Key::WrongKey, 8)),
            Nak(0, NakCode::RemoteAccessError),
            State(QpStateName::Rts),
        ],
    },
    Case {
        id: "req.wrong.completion",
        iba: "§9.9.2",
        rule: "(wrong on purpose)",
        direction: Direction::Requester,
        setup: Setup::DEFAULT,
        steps: &[
            Post(roce_conform::case::Post::new(roce_conform::agent::wr::SEND, 0, 8)),
            Request(O::RC_SEND_ONLY, 0),
            Respond(roce_conform::case::Resp::Nak(0, NakCode::RemoteAccessError)),
            Completion(wc::SUCCESS),
        ],
    },
];

#[test]
fn wrong_expectations_fail() {
    let mut agent = LocalAgent::open("conf1", "127.0.109.4".parse().unwrap()).expect("open device");
    let wire = Wire::bind("127.0.109.5".parse().unwrap(), agent.addr()).expect("bind tester");
    let mut r = Runner::new(&mut agent, wire);
    let why: Vec<String> = WRONG
        .iter()
        .map(|c| {
            let o = r.run(c);
            assert_eq!(o.verdict.word(), "fail", "{}: {:?}", c.id, o.verdict);
            o.verdict.why().to_string()
        })
        .collect();
    assert!(
        why[0].contains("expected NAK(InvalidRequest)") && why[0].contains("got ACK"),
        "{}",
        why[0]
    );
    assert!(why[1].contains("region byte 0"), "{}", why[1]);
    assert!(why[2].contains("QP state Err, expected Rts"), "{}", why[2]);
    assert!(why[3].contains("IBV_WC_REM_ACCESS_ERR, expected IBV_WC_SUCCESS"), "{}", why[3]);
}

#[test]
fn roce_emu_passes_the_catalogue() {
    let mut agent = LocalAgent::open("conf0", "127.0.109.2".parse().unwrap()).expect("open device");
    let target = agent.describe();
    let wire = Wire::bind("127.0.109.3".parse().unwrap(), agent.addr()).expect("bind tester");
    let mut r = Runner::new(&mut agent, wire);
    let out: Vec<_> = catalogue::all().into_iter().map(|c| r.run(c)).collect();
    let t = table(&target, &out);
    println!("{t}");
    let n = tally(&out);
    assert!(out.len() >= 50, "{} cases", out.len());
    assert_eq!(n.fail, 0, "{t}");
    for o in &out {
        // every case that sends or expects requests exchanges packets (one
        // that checks for silence may have none), and its pcap holds them
        let talks = o.case.steps.iter().any(|s| {
            matches!(
                s,
                Step::Send(_) | Step::Request(..) | Step::Retransmit { .. } | Step::Respond(_)
            )
        });
        assert!(!talks || !o.packets.is_empty(), "{}: no packets", o.case.id);
        let frames = roce_pcap::read_capture(&o.pcap).expect("a pcap");
        assert_eq!(frames.len(), o.packets.len(), "{}: pcap frames vs packets", o.case.id);
    }
    // docs/conformance/roce-emu.md is this run's table (all but its first
    // line, which names the device); ROCE_CONFORM_UPDATE_DOCS=1 rewrites it
    let md = markdown("roce-emu 0.1.0 (udp device conform0)", &out);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/conformance/roce-emu.md");
    if std::env::var_os("ROCE_CONFORM_UPDATE_DOCS").is_some() {
        std::fs::write(path, &md).unwrap();
    }
    let docs = std::fs::read_to_string(path).expect("docs/conformance/roce-emu.md");
    let body = |s: &str| s.lines().skip(1).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        body(&docs),
        body(&md),
        "docs/conformance/roce-emu.md is stale: ROCE_CONFORM_UPDATE_DOCS=1 cargo test -p roce-conform --test all emu::"
    );
}

/// The retransmit timer is not late when the request was posted from the
/// application's thread while the engine's thread slept (it used to fire
/// on the thread's next 20 ms idle wake-up): with timeout 10 (4.2 ms) the
/// request leaves again within 15 ms. The best of three tries counts, so
/// a loaded machine's scheduling does not decide.
#[test]
fn retransmit_timer_is_not_late() {
    use roce_conform::agent::wr;
    use roce_conform::case::{Post, Resp};
    const TIMELY: &[Case] = &[Case {
        id: "req.retransmit.timely",
        iba: "§9.7.6.1.3",
        rule: "a request left unanswered is sent again soon after the ACK timeout",
        direction: Direction::Requester,
        setup: Setup { timeout: 10, ..Setup::DEFAULT },
        steps: &[
            Post(Post::new(wr::SEND, 0, 64)),
            Request(O::RC_SEND_ONLY, 0),
            Retransmit { op: O::RC_SEND_ONLY, psn: 0, min_ms: 3, max_ms: 15 },
            Respond(Resp::Ack(0)),
            Completion(wc::SUCCESS),
        ],
    }];
    let mut agent = LocalAgent::open("conf2", "127.0.109.8".parse().unwrap()).expect("open device");
    let wire = Wire::bind("127.0.109.9".parse().unwrap(), agent.addr()).expect("bind tester");
    let mut r = Runner::new(&mut agent, wire);
    let tries: Vec<_> = (0..3).map(|_| r.run(&TIMELY[0])).collect();
    assert!(
        tries.iter().any(|o| o.verdict.word() == "pass"),
        "{:?}",
        tries.iter().map(|o| o.verdict.why().to_string()).collect::<Vec<_>>()
    );
}
