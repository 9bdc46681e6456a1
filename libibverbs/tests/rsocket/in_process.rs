//! Two rsockets of one process (a server thread and a client, each on its
//! own device) exchange checked bytes through `roce_rdmacm`'s safe face
//! on its C functions ([`RSocket`]) as this executable links them. The
//! test re-runs itself in a child with its own devices (`super::child`),
//! so no other test shares the process's device list.

use ibverbs::roce_rdmacm::RSocket;
use std::net::SocketAddr;
use std::time::Duration;

const NET: u8 = 155;
const LEN: usize = 3 * 1024 * 1024 + 17;

fn byte(i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 9)) as u8
}

fn send_all(s: &RSocket, b: &[u8]) {
    let mut at = 0;
    while at < b.len() {
        at += s.send(&b[at..]).expect("rsend");
    }
}

/// `rrecv` until `b` is full or end of file: the bytes read.
fn recv_all(s: &RSocket, b: &mut [u8]) -> usize {
    let mut at = 0;
    while at < b.len() {
        match s.recv(&mut b[at..]).expect("rrecv") {
            0 => break,
            n => at += n,
        }
    }
    at
}

/// Accept, read everything and check it, answer, see the end of file.
fn server(l: RSocket) {
    let s = l.accept().expect("raccept");
    let mut got = vec![0u8; LEN];
    assert_eq!(recv_all(&s, &mut got), LEN);
    assert_eq!((0..LEN).find(|&i| got[i] != byte(i)), None, "first wrong byte");
    send_all(&s, b"all good");
    assert_eq!(recv_all(&s, &mut got[..1]), 0, "end of file after the client's close");
}

#[test]
fn two_rsockets_exchange_checked_bytes() {
    if std::env::var_os("ROCE_RS_CHILD").is_none() {
        let out = super::child("rsocket::in_process::two_rsockets_exchange_checked_bytes", NET);
        assert!(out.contains(&format!("rsockets: {LEN} bytes checked")), "{out}");
        return;
    }
    let addr: SocketAddr = format!("127.0.{NET}.2:7565").parse().expect("address");
    let l = RSocket::stream(false).expect("rsocket");
    l.bind(addr).expect("rbind");
    l.listen(2).expect("rlisten");
    let srv = std::thread::spawn(move || server(l));
    std::thread::sleep(Duration::from_millis(100));
    let c = RSocket::stream(false).expect("rsocket");
    c.connect(addr).expect("rconnect");
    let data: Vec<u8> = (0..LEN).map(byte).collect();
    send_all(&c, &data);
    let mut reply = [0u8; 8];
    assert_eq!(recv_all(&c, &mut reply), 8);
    assert_eq!(&reply, b"all good");
    drop(c);
    srv.join().expect("server thread");
    println!("rsockets: {LEN} bytes checked");
}
