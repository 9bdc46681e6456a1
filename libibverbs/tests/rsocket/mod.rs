//! rsockets on the drop-in (issue 38, the `roce-rdmacm` crate): rdma-core's
//! `rstream` in both roles (two processes on one pair of devices, its
//! blocking, non-blocking and poll-driven modes, 64 B to 1 MiB, data
//! verified, keepalive on), `riostream` (iomap writes), `rcopy` of a
//! 100 MiB file, a C program of misuse and checked exchanges
//! (`tests/c/rsocket_check.c`), and two rsockets of this executable
//! exchanging checked bytes through the Rust crate's C functions; datagram
//! rsockets (`dgram`: `udpong` both roles, checked datagrams); unmodified
//! TCP programs on both ends through our `librspreload.so` (`preload`:
//! Python's http.server to curl, nc.openbsd to nc.openbsd).
//!
//! A directory module (`rsocket/mod.rs`), so that the crate's tests/ gets
//! no new top-level file. Each test has its own loopback addresses
//! (127.0.15N.2/3); tests that need a tool print SKIPPED without it.

use crate::common;
use common::{need, text};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn lib_dir() -> std::path::PathBuf {
    common::drop_in_dir("rsocket-test-lib", &["libibverbs.so.1", "librdmacm.so.1"])
}

fn cmd(prog: &Path, net: u8, args: &[&str]) -> Command {
    common::drop_in_cmd(prog, &lib_dir(), &common::two_devices(net), args)
}

/// Server then client, both must exit 0 within `limit`: their outputs.
fn pair(net: u8, server: Command, client: Command, what: &str, limit: u64) -> (String, String) {
    let (c, s) = common::server_then_client(
        server,
        client,
        [127, 0, net, 2],
        Duration::from_secs(limit),
        Duration::from_secs(15),
    );
    common::both_succeeded(what, &c, &s)
}

/// `rstream` with `args` as server (`-b`) and client (`-s`) on port
/// `port`; the client's result line is returned.
fn rstream(net: u8, port: u16, args: &[&str], limit: u64) -> Option<String> {
    let exe = need("rstream", "rdmacm-utils")?;
    let addr = format!("127.0.{net}.2");
    let port = port.to_string();
    let mut sa = vec!["-b", addr.as_str(), "-p", port.as_str()];
    let mut ca = vec!["-s", addr.as_str(), "-p", port.as_str()];
    sa.extend_from_slice(args);
    ca.extend_from_slice(args);
    let what = format!("rstream {}", args.join(" "));
    let (c, s) = pair(net, cmd(&exe, net, &sa), cmd(&exe, net, &ca), &what, limit);
    assert!(c.contains("Gb/sec") && s.contains("Gb/sec"), "{what}\n{c}\n{s}");
    Some(c)
}

/// rstream's default mode (MSG_DONTWAIT calls it retries itself) at 64 B,
/// and its blocking mode (-T b: blocking calls, MSG_WAITALL) at 1 MiB.
#[test]
fn rstream_64_bytes_and_1_mib_blocking_verified() {
    let net = 151;
    let Some(c) = rstream(net, 7551, &["-S", "64", "-C", "1000", "-T", "v"], 60) else { return };
    assert!(c.contains("64 "), "{c}");
    let Some(c) = rstream(net, 7552, &["-S", "1048576", "-C", "20", "-T", "b", "-T", "v"], 60)
    else {
        return;
    };
    assert!(c.contains("1m "), "{c}");
}

#[test]
fn rstream_poll_driven_and_nonblocking_verified() {
    let net = 152;
    let Some(_) = rstream(net, 7553, &["-S", "65536", "-C", "100", "-T", "a", "-T", "v"], 60)
    else {
        return;
    };
    rstream(net, 7554, &["-S", "4096", "-C", "200", "-T", "n", "-T", "v"], 60);
    rstream(net, 7555, &["-S", "1048576", "-C", "10", "-T", "a", "-T", "n", "-T", "v"], 60);
}

#[test]
fn rstream_latency_with_iterations_and_small_buffers() {
    let net = 153;
    // ping-pong (one transfer each way, 300 times, keepalive every second),
    // then 2 KiB socket
    // buffers (-B: SO_SNDBUF/SO_RCVBUF) and 32 B inline (-i)
    let Some(_) =
        rstream(net, 7556, &["-S", "100", "-C", "1", "-I", "300", "-k", "1", "-T", "v"], 60)
    else {
        return;
    };
    rstream(net, 7557, &["-S", "100000", "-C", "20", "-B", "2048", "-i", "32", "-T", "v"], 60);
}

/// `riostream` with `args` as server and client on port `port`.
fn riostream(net: u8, port: u16, args: &[&str]) -> Option<String> {
    let exe = need("riostream", "rdmacm-utils")?;
    let addr = format!("127.0.{net}.2");
    let port = port.to_string();
    let mut sa = vec!["-b", addr.as_str(), "-p", port.as_str()];
    let mut ca = vec!["-s", addr.as_str(), "-p", port.as_str()];
    sa.extend_from_slice(args);
    ca.extend_from_slice(args);
    let what = format!("riostream {}", args.join(" "));
    let (c, s) = pair(net, cmd(&exe, net, &sa), cmd(&exe, net, &ca), &what, 60);
    assert!(c.contains("Gb/sec") && s.contains("Gb/sec"), "{what}\n{c}\n{s}");
    Some(c)
}

/// riostream: `riomap` of each side's buffer (PROT_WRITE, published in
/// the peer's target iomap), `riowrite` straight into it, the receiver
/// spinning on the buffer's last byte; data verified.
#[test]
fn riostream_iomap_writes_verified() {
    let net = 159;
    let Some(_) = riostream(net, 7600, &["-S", "4096", "-C", "100", "-T", "v"]) else { return };
    riostream(net, 7601, &["-S", "1048576", "-C", "10", "-T", "v"]);
    riostream(net, 7602, &["-S", "64", "-C", "1", "-I", "300", "-T", "v"]);
    riostream(net, 7603, &["-S", "65536", "-C", "50", "-T", "a", "-T", "v"]);
}

/// rstream's own default test: latency then bandwidth at 64 B, 4 KiB,
/// 64 KiB and 1 MiB (100 000 ping-pongs of 64 B first). About 30 s on a
/// release build, three minutes on the test profile's on a loaded
/// two-core machine: run it with `--ignored`.
#[test]
#[ignore = "minutes on the test profile: cargo test ... rsocket:: -- --ignored"]
fn rstream_default_test() {
    let Some(c) = rstream(156, 7570, &[], 600) else { return };
    for name in ["64_lat", "4k_lat", "64k_lat", "1m_lat", "64_bw", "4k_bw", "64k_bw", "1m_bw"] {
        assert!(c.contains(name), "{name}\n{c}");
    }
}

/// rdma-core's `rcopy` of a 100 MiB file, server on the wildcard address
/// (it serves until killed), the copy compared byte for byte.
#[test]
fn rcopy_100_mib_file_checked() {
    let Some(exe) = need("rcopy", "rdmacm-utils") else { return };
    let net = 157;
    let dir = std::env::temp_dir().join(format!("roce-rcopy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (src, dst) = (dir.join("src.bin"), dir.join("dst.bin"));
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let data: Vec<u8> = (0..100 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&src, &data).expect("write the source file");
    let server = cmd(&exe, net, &["-p", "7580"]).spawn().expect("spawn the rcopy server");
    common::wait_device([127, 0, net, 2]);
    let target = format!("127.0.{net}.2:{}", dst.display());
    let src_s = src.display().to_string();
    let mut client = cmd(&exe, net, &[src_s.as_str(), target.as_str(), "-p", "7580"]);
    let (c, killed) = common::finish(client.spawn().expect("spawn"), Duration::from_secs(120));
    let (s, _) = common::finish(server, Duration::from_millis(500));
    let out = format!("{}{}\n--- server\n{}", text(&c.stdout), text(&c.stderr), text(&s.stdout));
    assert!(!killed && c.status.success(), "rcopy:\n{out}");
    let copy = std::fs::read(&dst).expect("the copy");
    assert!(copy.len() == data.len() && copy == data, "the copy differs\n{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn c_program_misuse_and_checked_exchanges() {
    let Some(exe) = common::compile_c_once(
        "rsocket_check",
        "/usr/include/rdma/rsocket.h",
        &lib_dir(),
        &["-l:librdmacm.so.1", "-l:libibverbs.so.1"],
    ) else {
        return;
    };
    let net = 154;
    let (c, s) = pair(
        net,
        cmd(&exe, net, &["server", "127.0.154.2", "7560"]),
        cmd(&exe, net, &["client", "127.0.154.2", "7560"]),
        "rsocket_check",
        60,
    );
    assert!(c.contains("client done, 0 failures") && !c.contains("FAIL"), "{c}");
    assert!(s.contains("server done, 0 failures") && !s.contains("FAIL"), "{s}");
    for must in [
        "ok   rconnect to a port nobody listens on: ECONNREFUSED",
        "ok   rsend of a NULL buffer: EFAULT",
        "ok   rsend on a closed rsocket: EBADF",
        "ok   the echo is intact",
        "ok   rselect: the server's message is readable",
        "ok   a CM connect with 10 bytes of garbage: rejected by the listener",
        "ok   a CM connect with connection data of version 2: rejected by the listener",
    ] {
        assert!(c.contains(must), "{must}\n{c}");
    }
    for must in [
        "ok   the client's 100000 bytes arrived intact",
        "ok   rpoll of a pipe and an rsocket together: the pipe is readable",
        "ok   rrecv on an empty non-blocking rsocket: EAGAIN",
        "ok   the accepted rsocket's peer is the client, not itself",
    ] {
        assert!(s.contains(must), "{must}\n{s}");
    }
}

/// The C program's both ends under valgrind's memcheck: every rsocket
/// path it takes (blocking and non-blocking, rpoll with a pipe, rselect,
/// iovecs, shutdown, the refused CM connects) without a memory error.
#[test]
fn c_program_under_valgrind_reports_no_error() {
    let Some((vg, vg_args)) = common::valgrind() else { return };
    let Some(exe) = common::compile_c_once(
        "rsocket_check",
        "/usr/include/rdma/rsocket.h",
        &lib_dir(),
        &["-l:librdmacm.so.1", "-l:libibverbs.so.1"],
    ) else {
        return;
    };
    let net = 161;
    let vg_cmd = |role: &str| {
        let mut a: Vec<&str> = vec!["--fair-sched=yes"];
        a.extend(vg_args.iter().map(String::as_str));
        a.extend([exe.to_str().expect("utf-8 path"), role, "127.0.161.2", "7680"]);
        cmd(&vg, net, &a)
    };
    let (c, s) = pair(net, vg_cmd("server"), vg_cmd("client"), "rsocket_check under valgrind", 240);
    for (out, end) in [(&c, "client done, 0 failures"), (&s, "server done, 0 failures")] {
        assert!(out.contains("ERROR SUMMARY: 0 errors") && out.contains(end), "{out}");
    }
}

/// An unmodified TCP program through Debian's `librspreload.so` (which
/// turns its socket calls into rsocket calls of our library): Python's
/// socket client sends 5 MB to an rsocket sink (`rsocket_check sink`),
/// which checks every byte. The client is the one side that works:
/// Debian's librspreload (rdma-core 44) has no `accept4` (Python's and
/// Perl's `accept` use it) and its `select` returns the rsocket's number
/// instead of the program's fd (socat), both fixed in rdma-core 63.
#[test]
fn python_tcp_client_through_librspreload() {
    let preload = Path::new("/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so");
    let python = Path::new("/usr/bin/python3");
    if !preload.exists() || !python.exists() {
        common::skipped("librspreload.so or /usr/bin/python3 not installed (apt-get install librdmacm1 python3)");
        return;
    }
    let Some(exe) = common::compile_c_once(
        "rsocket_check",
        "/usr/include/rdma/rsocket.h",
        &lib_dir(),
        &["-l:librdmacm.so.1", "-l:libibverbs.so.1"],
    ) else {
        return;
    };
    let net = 160;
    let script = "import socket, sys\n\
        n = 5000000\n\
        data = bytes((i * 7 + 3) & 0xff for i in range(n))\n\
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n\
        c.connect(('127.0.160.2', 7640))\n\
        c.sendall(data)\n\
        c.close()\n\
        print('sent', n)\n";
    let mut client = cmd(python, net, &["-c", script]);
    client.env("LD_PRELOAD", preload);
    let (c, s) = pair(
        net,
        cmd(&exe, net, &["sink", "127.0.160.2", "7640"]),
        client,
        "python3 under librspreload -> rsocket sink",
        60,
    );
    assert!(c.contains("sent 5000000"), "{c}");
    assert!(s.contains("sink got 5000000") && !s.contains("FAIL"), "{s}");
}

/// The C structs `roce_rdmacm::ffi` declares (only the fields the rsocket
/// layer reads or fills) against `<infiniband/verbs.h>` and
/// `<rdma/rdma_cma.h>`: the same sizes and offsets.
#[test]
fn ffi_layouts_match_the_c_headers() {
    use ibverbs::roce_rdmacm::ffi::*;
    use std::mem::{offset_of, size_of};
    let table: Vec<(&str, &str, usize)> = vec![
        ("ibv_send_wr", "sizeof", size_of::<ibv_send_wr>()),
        ("ibv_send_wr", "sg_list", offset_of!(ibv_send_wr, sg_list)),
        ("ibv_send_wr", "num_sge", offset_of!(ibv_send_wr, num_sge)),
        ("ibv_send_wr", "opcode", offset_of!(ibv_send_wr, opcode)),
        ("ibv_send_wr", "send_flags", offset_of!(ibv_send_wr, send_flags)),
        ("ibv_send_wr", "imm_data", offset_of!(ibv_send_wr, imm_data)),
        ("ibv_send_wr", "wr.rdma.remote_addr", offset_of!(ibv_send_wr, remote_addr)),
        ("ibv_send_wr", "wr.rdma.rkey", offset_of!(ibv_send_wr, rkey)),
        ("ibv_recv_wr", "sizeof", size_of::<ibv_recv_wr>()),
        ("ibv_recv_wr", "num_sge", offset_of!(ibv_recv_wr, num_sge)),
        ("ibv_sge", "sizeof", size_of::<ibv_sge>()),
        ("ibv_wc", "sizeof", size_of::<ibv_wc>()),
        ("ibv_wc", "status", offset_of!(ibv_wc, status)),
        ("ibv_wc", "byte_len", offset_of!(ibv_wc, byte_len)),
        ("ibv_wc", "imm_data", offset_of!(ibv_wc, imm_data)),
        ("ibv_mr", "lkey", offset_of!(ibv_mr, lkey)),
        ("ibv_mr", "rkey", offset_of!(ibv_mr, rkey)),
        ("ibv_qp_init_attr", "sizeof", size_of::<ibv_qp_init_attr>()),
        ("ibv_qp_init_attr", "cap", offset_of!(ibv_qp_init_attr, cap)),
        ("ibv_qp_init_attr", "qp_type", offset_of!(ibv_qp_init_attr, qp_type)),
        ("ibv_qp_init_attr", "sq_sig_all", offset_of!(ibv_qp_init_attr, sq_sig_all)),
        ("ibv_context", "ops.poll_cq", offset_of!(ibv_context, ops.poll_cq)),
        ("ibv_context", "ops.req_notify_cq", offset_of!(ibv_context, ops.req_notify_cq)),
        ("ibv_context", "ops.post_send", offset_of!(ibv_context, ops.post_send)),
        ("ibv_context", "ops.post_recv", offset_of!(ibv_context, ops.post_recv)),
        ("ibv_comp_channel", "fd", offset_of!(ibv_comp_channel, fd)),
        ("rdma_cm_id", "qp", offset_of!(rdma_cm_id, qp)),
        ("rdma_cm_id", "route.addr.src_addr", offset_of!(rdma_cm_id, src_addr)),
        ("rdma_cm_id", "route.addr.dst_addr", offset_of!(rdma_cm_id, dst_addr)),
        ("rdma_cm_id", "route.addr.addr.ibaddr", offset_of!(rdma_cm_id, ibaddr)),
        ("rdma_cm_id", "route.path_rec", offset_of!(rdma_cm_id, path_rec)),
        ("rdma_cm_id", "ps", offset_of!(rdma_cm_id, ps)),
        ("rdma_cm_id", "port_num", offset_of!(rdma_cm_id, port_num)),
        ("rdma_ib_addr", "dgid", offset_of!(rdma_ib_addr, dgid)),
        ("ibv_qp", "qp_num", offset_of!(ibv_qp, qp_num)),
        ("ibv_ah_attr", "sizeof", size_of::<ibv_ah_attr>()),
        ("ibv_ah_attr", "grh.flow_label", offset_of!(ibv_ah_attr, flow_label)),
        ("ibv_ah_attr", "grh.sgid_index", offset_of!(ibv_ah_attr, sgid_index)),
        ("ibv_ah_attr", "grh.hop_limit", offset_of!(ibv_ah_attr, hop_limit)),
        ("ibv_ah_attr", "dlid", offset_of!(ibv_ah_attr, dlid)),
        ("ibv_ah_attr", "is_global", offset_of!(ibv_ah_attr, is_global)),
        ("ibv_ah_attr", "port_num", offset_of!(ibv_ah_attr, port_num)),
        ("rdma_cm_event", "event", offset_of!(rdma_cm_event, event)),
        ("rdma_cm_event", "status", offset_of!(rdma_cm_event, status)),
        ("rdma_cm_event", "param.conn", offset_of!(rdma_cm_event, conn)),
        ("rdma_conn_param", "sizeof", size_of::<rdma_conn_param>()),
        ("rdma_conn_param", "private_data_len", offset_of!(rdma_conn_param, private_data_len)),
        ("rdma_conn_param", "qp_num", offset_of!(rdma_conn_param, qp_num)),
    ];
    if common::which("cc").is_none() || !Path::new(common::RDMA_CMA_H).exists() {
        common::skipped("needs cc and <rdma/rdma_cma.h> (apt-get install gcc librdmacm-dev)");
        return;
    }
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/rdma_cma.h>\nint main(void) {\n",
    );
    for (st, f, _) in &table {
        if *f == "sizeof" {
            src += &format!("  printf(\"{st} {f} %zu\\n\", sizeof(struct {st}));\n");
        } else {
            src += &format!("  printf(\"{st} {f} %zu\\n\", offsetof(struct {st}, {f}));\n");
        }
    }
    src += "  return 0;\n}\n";
    let dir = std::env::temp_dir().join(format!("roce-rsocket-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (c, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&c, src).expect("write layout.c");
    let o = Command::new("cc").arg("-o").arg(&exe).arg(&c).output().expect("run cc");
    assert!(o.status.success(), "cc:\n{}", text(&o.stderr));
    let got = text(&Command::new(&exe).output().expect("run layout").stdout);
    let want: String = table.iter().map(|(st, f, n)| format!("{st} {f} {n}\n")).collect();
    assert_eq!(got, want);
    let _ = std::fs::remove_dir_all(&dir);
}

mod dgram;
mod in_process;
mod preload;

/// Run this executable's test `name` alone in a child with the devices of
/// `net` (the child sees `ROCE_RS_CHILD`): its output, after it exited 0.
fn child(name: &str, net: u8) -> String {
    let exe = std::env::current_exe().expect("the test executable");
    let mut c = Command::new(exe);
    c.args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env("ROCE_RS_CHILD", "1")
        .env("ROCE_EMU_DEVICES", common::two_devices(net))
        .env("ROCE_EMU_STATS", "0")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let (o, killed) = common::finish(c.spawn().expect("spawn"), Duration::from_secs(60));
    let out = text(&o.stdout) + &text(&o.stderr);
    assert!(!killed && o.status.success(), "child {name}:\n{out}");
    out
}
