//! The RDMA WRITE, READ and atomics examples as two processes over UDP on
//! loopback (127.0.0.8 and 127.0.0.9): both exit 0 and print the values
//! the operations must produce.

use std::io::Read;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn(bin: &str, args: &[&str]) -> Child {
    Command::new(bin)
        .env_remove("ROCE_EMU_PCAP")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

fn finish(mut c: Child, deadline: Instant) -> (Option<i32>, String, String) {
    let code = loop {
        match c.try_wait() {
            Ok(Some(st)) => break st.code(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = c.kill();
                let _ = c.wait();
                break None;
            }
        }
    };
    let (mut o, mut e) = (String::new(), String::new());
    if let Some(mut s) = c.stdout.take() {
        let _ = s.read_to_string(&mut o);
    }
    if let Some(mut s) = c.stderr.take() {
        let _ = s.read_to_string(&mut e);
    }
    (code, o, e)
}

fn run_pair(bin: &str) -> (String, String) {
    run_pair_with(bin, &[])
}

fn run_pair_with(bin: &str, client_extra: &[&str]) -> (String, String) {
    let port = TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port().to_string();
    let s = spawn(bin, &["--addr", "127.0.0.8", "-p", &port]);
    let mut cargs = vec!["--addr", "127.0.0.9", "-p", &port];
    cargs.extend_from_slice(client_extra);
    cargs.push("127.0.0.8");
    let c = spawn(bin, &cargs);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (cc, co, ce) = finish(c, deadline);
    let (sc, so, se) = finish(s, deadline);
    assert_eq!(cc, Some(0), "client: {co}{ce}");
    assert_eq!(sc, Some(0), "server: {so}{se}");
    (so, co)
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
