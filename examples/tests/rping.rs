//! The Rust rping (RDMA CM over QP1, then rping's READ/WRITE protocol) as
//! two processes over UDP on loopback (each test its own pair of addresses:
//! the tests run in parallel).

use crate::common;
use common::{finish_within, spawn_on, two_devices};

use std::process::Child;
use std::time::{Duration, Instant};

fn spawn(net: u8, args: &[&str]) -> Child {
    spawn_on(env!("CARGO_BIN_EXE_rping"), &two_devices(net), args)
}

/// Wait at most `limit`, then kill (by PID); exit code and output (stdout
/// then stderr).
fn finish(c: Child, limit: Duration) -> (Option<i32>, String) {
    let r = finish_within(c, limit);
    (r.code, r.all())
}

#[test]
fn rping_server_and_client_ping_and_check_every_byte() {
    let server = spawn(61, &["-s", "-a", "127.0.61.2", "-p", "7174", "-v", "-S", "100"]);
    std::thread::sleep(Duration::from_millis(300));
    let client =
        spawn(61, &["-c", "-a", "127.0.61.2", "-p", "7174", "-C", "5", "-v", "-V", "-S", "100"]);
    let (cc, co) = finish(client, Duration::from_secs(60));
    let (sc, so) = finish(server, Duration::from_secs(20));
    assert_eq!((cc, sc), (Some(0), Some(0)), "client:\n{co}\nserver:\n{so}");
    for i in 0..5 {
        // rping's data: "rdma-ping-N: " then letters from 'A' + N
        let line = format!("ping data: rdma-ping-{i}: {}", (b'A' + i as u8) as char);
        assert!(co.contains(&line), "{line}\n{co}");
        assert!(so.contains(&format!("server {line}")), "{so}");
    }
    assert_eq!(co.matches("ping data: ").count(), 5);
    assert!(so.contains("server DISCONNECT EVENT"), "{so}");
}

#[test]
fn a_client_of_a_port_nobody_listens_on_is_rejected_at_once() {
    // a server on the port next to nobody's: the device answers REJ 8
    let server = spawn(62, &["-s", "-a", "127.0.62.2", "-p", "7175"]);
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let client = spawn(62, &["-c", "-a", "127.0.62.2", "-p", "7176", "-C", "1"]);
    let (cc, co) = finish(client, Duration::from_secs(30));
    let mut server = server;
    let _ = server.kill(); // it waits for a client forever, as rping does
    let _ = server.wait();
    assert_eq!(cc, Some(1), "{co}");
    assert!(co.contains("cma event RDMA_CM_EVENT_REJECTED, error 8"), "{co}");
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn udaddy_finds_the_server_with_sidr_and_datagrams_go_both_ways() {
    let bin = env!("CARGO_BIN_EXE_udaddy");
    let run = |args: &[&str]| spawn_on(bin, &two_devices(63), args);
    let server = run(&["-b", "127.0.63.2", "-C", "20", "-S", "200"]);
    std::thread::sleep(Duration::from_millis(300));
    let client = run(&["-s", "127.0.63.2", "-C", "20", "-S", "200"]);
    let (cc, co) = finish(client, Duration::from_secs(60));
    let (sc, so) = finish(server, Duration::from_secs(20));
    assert_eq!((cc, sc), (Some(0), Some(0)), "client:\n{co}\nserver:\n{so}");
    assert_eq!(
        co,
        "initiating data transfers\nreceiving data transfers\ndata transfers complete\n"
    );
    assert_eq!(so, "receiving data transfers\nsending replies\ndata transfers complete\n");
}
