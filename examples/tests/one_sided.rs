//! The RDMA WRITE, READ and atomics examples as two processes over UDP on
//! loopback (127.0.0.8 and 127.0.0.9): both exit 0 and print the values
//! the operations must produce.

use crate::common;
use common::{command, finish, free_port};

use std::time::{Duration, Instant};

fn run_pair(bin: &str) -> (String, String) {
    run_pair_with(bin, &[])
}

fn run_pair_with(bin: &str, client_extra: &[&str]) -> (String, String) {
    let port = free_port().to_string();
    let spawn = |args: &[&str]| command(bin, args).spawn().expect("spawn");
    let s = spawn(&["--addr", "127.0.0.8", "-p", &port]);
    let mut cargs = vec!["--addr", "127.0.0.9", "-p", &port];
    cargs.extend_from_slice(client_extra);
    cargs.push("127.0.0.8");
    let c = spawn(&cargs);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (c, s) = (finish(c, deadline), finish(s, deadline));
    assert_eq!(c.code, Some(0), "client: {}", c.all());
    assert_eq!(s.code, Some(0), "server: {}", s.all());
    (s.out, c.out)
}

#[test]
fn write_read_atomics_between_processes() {
    // one after the other: the three share the address pair
    let pcap =
        std::env::temp_dir().join(format!("roce-examples-write-{}.pcap", std::process::id()));
    let (s, c) =
        run_pair_with(env!("CARGO_BIN_EXE_rdma_write"), &["--pcap", pcap.to_str().unwrap()]);
    assert_eq!(s.trim(), "server: my buffer now holds \"hello from 127.0.0.9 by RDMA WRITE\"");
    assert!(c.starts_with("client: wrote 34 bytes to 0x"), "{c}");
    // --pcap: a nanosecond pcap (Ethernet link type) with the WRITE and its ACK
    let bytes = std::fs::read(&pcap).expect("pcap written");
    let _ = std::fs::remove_file(&pcap);
    assert_eq!(&bytes[..4], &[0x4d, 0x3c, 0xb2, 0xa1], "nanosecond pcap magic");
    assert_eq!(bytes[20], 1, "link type Ethernet");
    // records: 16-byte header, then Ethernet (14) + IPv4 (20) + UDP (8) + BTH
    let (mut off, mut writes, mut acks) = (24usize, 0, 0);
    while off + 16 <= bytes.len() {
        let caplen = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
        let frame = &bytes[off + 16..off + 16 + caplen];
        match (frame[42], frame.len()) {
            // RC RDMA WRITE ONLY: BTH 12 + RETH 16 + 34 bytes + 2 pad + ICRC 4
            (0x0a, len) => {
                assert_eq!(len, 42 + 12 + 16 + 36 + 4);
                writes += 1;
            }
            // RC ACKNOWLEDGE: BTH 12 + AETH 4 + ICRC 4
            (0x11, len) => {
                assert_eq!(len, 42 + 20);
                acks += 1;
            }
            (op, _) => panic!("unexpected opcode {op:#x}"),
        };
        off += 16 + caplen;
    }
    assert_eq!(off, bytes.len());
    // one WRITE and its ACK (more only if a retransmission happened under load)
    assert!(writes >= 1 && acks >= 1, "{writes} writes, {acks} acks");

    let (s, c) = run_pair(env!("CARGO_BIN_EXE_rdma_read"));
    assert_eq!(
        c.trim(),
        "client: read \"the server at 127.0.0.8 wrote this before the client read it\""
    );
    assert_eq!(s.trim(), "server: the client has read my buffer");

    let (s, c) = run_pair(env!("CARGO_BIN_EXE_atomics"));
    assert_eq!(
        c,
        "client: fetch_and_add(5) found 100\nclient: fetch_and_add(5) found 105\n\
         client: fetch_and_add(5) found 110\nclient: compare_and_swap(115 -> 1000) found 115\n"
    );
    assert_eq!(s, "server: counter is now 1000\n");
}
