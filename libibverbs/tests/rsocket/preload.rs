//! Unmodified Debian TCP programs on both ends through our
//! `librspreload.so` (crate `roce-rspreload`) on the drop-in: Python's
//! `http.server` serving a file to `curl` (Python's urllib without curl),
//! then `nc.openbsd` to `nc.openbsd`; the bytes checked. That it went over
//! RDMA: while each server runs, a kernel TCP connect to its address and
//! port is refused (the listener is an rsocket), and both ends' traces
//! (`ROCE_EMU_DEBUG`) show the rsockets made, accepted and closed, and no
//! fallback to TCP.

use crate::common;
use common::text;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const NET: u8 = 158;
const ADDR: &str = "127.0.158.2";

/// target/<profile>/deps/librspreload.so, built with the tests (roce-tests
/// dev-depends on roce-rspreload).
fn preload() -> PathBuf {
    let p = common::target_dir().join("deps").join("librspreload.so");
    assert!(p.exists(), "{} missing: cargo builds it with the tests", p.display());
    p
}

/// `prog args` on the drop-in under our preload, traced.
fn cmd(prog: &Path, args: &[&str]) -> Command {
    let lib = common::drop_in_dir("rsocket-test-lib", &["libibverbs.so.1", "librdmacm.so.1"]);
    let mut c = common::drop_in_cmd(prog, &lib, &common::two_devices(NET), args);
    c.env("LD_PRELOAD", preload()).env("ROCE_EMU_DEBUG", "1");
    c
}

/// A kernel TCP connect to the server's address and port is refused.
fn kernel_tcp_refused(port: u16) {
    let a = format!("{ADDR}:{port}").parse().expect("address");
    match std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
        other => panic!("a kernel TCP connect to {a} was not refused: {other:?}"),
    }
}

/// The test's bytes (pseudo-random, `n` of them).
fn data(n: usize) -> Vec<u8> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The lines our preload wrote: rsockets made and accepted, none fallen
/// back to TCP.
fn traced(out: &str, how: &str) -> bool {
    out.lines().any(|l| l.starts_with("rspreload[") && l.ends_with(&format!("({how})")))
        && !out.contains("over kernel TCP")
}

#[test]
fn http_server_to_curl_and_nc_to_nc_over_our_librspreload() {
    let Some(python) = common::need("python3", "python3") else { return };
    let dir = std::env::temp_dir().join(format!("roce-rspreload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bytes = data((3 << 20) + 4321);
    std::fs::write(dir.join("f.bin"), &bytes).expect("write the file");

    // (a) python3 -m http.server (socket with SOCK_CLOEXEC, accept4, poll)
    // and curl (non-blocking connect, poll) or Python's urllib
    let port = 7720;
    let d = dir.display().to_string();
    let ps = port.to_string();
    let mut server = cmd(&python, &["-m", "http.server", "--bind", ADDR, &ps, "--directory", &d]);
    assert!(!common::device_bound([127, 0, NET, 2]), "{ADDR}:4791 is taken before the test");
    let server = server.spawn().expect("spawn the http server");
    common::wait_device([127, 0, NET, 2]);
    let url = format!("http://{ADDR}:{port}/f.bin");
    let got = dir.join("got.bin");
    let g = got.display().to_string();
    let client = match common::which("curl") {
        Some(curl) => cmd(&curl, &["-sS", "--fail", "-o", &g, &url]),
        None => {
            common::skipped("curl not installed (apt-get install curl): Python's urllib instead");
            let get = "import sys, urllib.request\n\
                open(sys.argv[2], 'wb').write(urllib.request.urlopen(sys.argv[1]).read())\n";
            cmd(&python, &["-c", get, &url, &g])
        }
    };
    let mut client = client;
    let (c, killed) =
        common::finish(client.spawn().expect("spawn the client"), Duration::from_secs(20));
    // still serving: no kernel listener behind it
    kernel_tcp_refused(port);
    let (s, _) = common::finish(server, Duration::from_millis(10));
    let (c, s) = (text(&c.stdout) + &text(&c.stderr), text(&s.stdout) + &text(&s.stderr));
    let what = format!("http.server -> client\n--- client\n{c}\n--- server\n{s}");
    assert!(!killed, "the client did not finish: {what}");
    let copy = std::fs::read(&got).unwrap_or_default();
    assert!(
        copy == bytes,
        "the download differs ({} of {} bytes)\n{what}",
        copy.len(),
        bytes.len()
    );
    assert!(s.contains("\"GET /f.bin HTTP/1.1\" 200"), "{what}");
    assert!(traced(&s, "accept") && traced(&c, "socket"), "{what}");

    // (b) nc.openbsd both ends: the listener (SO_REUSEPORT, accept4, poll
    // of the rsocket and stdin) writes what it gets; the client sends a
    // file and shuts its side down at the end (-N)
    let Some(nc) = common::need("nc.openbsd", "netcat-openbsd") else { return };
    let port = 7721;
    let ps = port.to_string();
    let mut server = cmd(&nc, &["-l", ADDR, &ps]);
    // into a file: a pipe nobody reads before the end would fill and stop it
    let out = dir.join("nc.out");
    server.stdout(std::fs::File::create(&out).expect("nc's output file"));
    let mut client = cmd(&nc, &["-N", ADDR, &ps]);
    client.stdin(std::fs::File::open(dir.join("f.bin")).expect("the file"));
    assert!(!common::device_bound([127, 0, NET, 2]), "{ADDR}:4791 is taken before nc");
    let server = server.spawn().expect("spawn nc -l");
    common::wait_device([127, 0, NET, 2]);
    kernel_tcp_refused(port);
    let c = common::finish(client.spawn().expect("spawn nc"), Duration::from_secs(20));
    let s = common::finish(server, Duration::from_secs(10));
    let what = common::report("nc -> nc -l", &c, &s);
    assert!(!c.1 && !s.1 && c.0.status.success() && s.0.status.success(), "{what}");
    let copy = std::fs::read(&out).unwrap_or_default();
    assert!(copy == bytes, "nc -l got {} of {} bytes\n{what}", copy.len(), bytes.len());
    let (ce, se) = (text(&c.0.stderr), text(&s.0.stderr));
    assert!(traced(&se, "accept") && traced(&ce, "socket"), "{what}");
    let _ = std::fs::remove_dir_all(&dir);
}
