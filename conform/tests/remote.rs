//! The remote agent's protocol against a scripted agent on 127.0.0.1: its
//! hello names the device, a setup it cannot do makes the case n/a with
//! its reason, a verb that fails makes it fail, and a reply that is not
//! JSON is a link error, and a late reply is skipped by its sequence
//! number. Device address 127.0.109.20, tester 127.0.109.21.

use roce_conform::catalogue;
use roce_conform::remote::RemoteAgent;
use roce_conform::run::{Runner, Verdict};
use roce_conform::wire::Wire;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

/// Serve one connection: answer `hello`, then each later request with the
/// next of `replies`; returns the ops it was asked for.
fn scripted(
    replies: &'static [&'static str],
) -> (std::net::SocketAddr, std::thread::JoinHandle<Vec<String>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut out = s.try_clone().unwrap();
        let mut ops = Vec::new();
        let mut next = replies.iter();
        for line in BufReader::new(s).lines() {
            let Ok(line) = line else { break };
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            let op = v["op"].as_str().unwrap().to_string();
            let reply = match op.as_str() {
                "hello" => r#"{"ok":true,"describe":"scripted","addr":"127.0.109.20"}"#,
                _ => next.next().copied().unwrap_or(r#"{"ok":true}"#),
            };
            ops.push(op);
            if out.write_all(format!("{reply}\n").as_bytes()).is_err() {
                break;
            }
        }
        ops
    });
    (at, h)
}

fn first_case() -> &'static roce_conform::case::Case {
    catalogue::all()[0]
}

#[test]
fn unsupported_setup_is_not_applicable_and_a_failed_verb_fails() {
    // the setup cannot be done: n/a with the agent's reason
    let (at, h) = scripted(&[r#"{"ok":false,"unsupported":true,"error":"no RC here"}"#]);
    let mut a = RemoteAgent::connect(at).expect("hello");
    assert_eq!(roce_conform::agent::Agent::describe(&a), "scripted");
    let wire =
        Wire::bind("127.0.109.21".parse().unwrap(), "127.0.109.20".parse().unwrap()).unwrap();
    let mut r = Runner::new(&mut a, wire);
    let o = r.run(first_case());
    assert_eq!(o.verdict, Verdict::NotApplicable("no RC here".into()));
    drop(r);
    drop(a);
    assert_eq!(h.join().unwrap(), ["hello", "setup", "teardown"]);

    // a verb refused: the case fails and says which
    let (at, h) =
        scripted(&[r#"{"ok":false,"unsupported":false,"error":"ibv_create_qp: ENOMEM"}"#]);
    let mut a = RemoteAgent::connect(at).expect("hello");
    let wire =
        Wire::bind("127.0.109.21".parse().unwrap(), "127.0.109.20".parse().unwrap()).unwrap();
    let o = Runner::new(&mut a, wire).run(first_case());
    assert_eq!(o.verdict, Verdict::Fail("verb failed: ibv_create_qp: ENOMEM".into()));
    drop(a);
    h.join().unwrap();
}

#[test]
fn a_reply_that_is_not_json_is_a_link_error() {
    let (at, h) = scripted(&["this is not json"]);
    let mut a = RemoteAgent::connect(at).expect("hello");
    let e = roce_conform::agent::Agent::qp_state(&mut a).unwrap_err();
    assert!(e.to_string().starts_with("agent: bad reply"), "{e}");
    drop(a);
    h.join().unwrap();
}

#[test]
fn a_late_reply_is_skipped_by_its_sequence_number() {
    // the agent answers qp_state (seq 2) first with a reply for seq 1 that
    // came late, then with its own: the stale one must not be taken
    let (at, h) = scripted(&[concat!(
        r#"{"ok":true,"seq":1}"#,
        "\n",
        r#"{"ok":true,"seq":2,"state":"SQD"}"#
    )]);
    let mut a = RemoteAgent::connect(at).expect("hello");
    let s = roce_conform::agent::Agent::qp_state(&mut a).expect("qp_state");
    assert_eq!(s, roce_conform::agent::QpStateName::Sqd);
    drop(a);
    assert_eq!(h.join().unwrap(), ["hello", "qp_state"]);
}
