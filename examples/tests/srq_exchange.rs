//! `srq_pingpong`'s out-of-band exchange against the bytes rdma-core's
//! `ibv_srq_pingpong -q 4` (rxe, rxelab guest 192.168.77.3) really sent:
//! 256 (MAX_QP) 52-byte addresses whatever `-q` is, then `"done\0"`
//! (examples/tests/data/ibv_srq_pingpong_client_exchange.bin, from the
//! interop run's br0.pcap). Our server used to read and write only `-q`
//! of them, and the exchange hung.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn srq_pingpong_server_speaks_rdma_cores_256_address_exchange() {
    let captured = include_bytes!("data/ibv_srq_pingpong_client_exchange.bin");
    assert_eq!(captured.len(), 256 * 52 + 5);
    assert_eq!(&captured[256 * 52..], b"done\0");
    let third = (std::process::id() % 200) as u8 + 20;
    let addr = format!("127.66.{third}.3");
    let port = 21000 + (std::process::id() % 3000) as u16;
    let mut srv = Command::new(env!("CARGO_BIN_EXE_srq_pingpong"))
        .args([
            "--addr",
            &addr,
            "-g",
            "1",
            "-p",
            &port.to_string(),
            "-q",
            "4",
            "-n",
            "1",
            "-s",
            "64",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start srq_pingpong");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut s = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                let _ = srv.kill();
                panic!("server not listening: {e}");
            }
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&captured[..256 * 52]).unwrap();
    let mut back = vec![0u8; 256 * 52];
    let got = s.read_exact(&mut back);
    let _ = s.write_all(b"done\0");
    let _ = srv.kill();
    let _ = srv.wait();
    got.expect("256 addresses back");
    let gid = format!("00000000000000000000ffff7f42{third:02x}03");
    for (i, m) in back.chunks(52).enumerate() {
        let text = std::str::from_utf8(&m[..51]).unwrap();
        assert_eq!(m[51], 0, "message {i} ends with NUL");
        if i < 4 {
            assert!(text.starts_with("0000:"), "{text}");
            assert!(text.ends_with(&gid), "message {i}: {text}");
            assert_ne!(&text[5..11], "000000", "a real QPN in message {i}");
        } else {
            assert_eq!(text, "0000:000000:000000:00000000000000000000000000000000", "message {i}");
        }
    }
}
