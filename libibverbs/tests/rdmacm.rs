//! The `librdmacm.so.1` drop-in (the same library as libibverbs, linked
//! under both names) against real programs: its symbols and versions, its
//! struct layouts against `<rdma/rdma_cma.h>`, Debian's `rping`,
//! `ucmatose` and `udaddy` (rdmacm-utils) and perftest's `-R` mode in two
//! processes, and a connect to a port nobody listens on.
//!
//! Tests that need something not installed print `SKIPPED: ...` and
//! return. Every process runs under a deadline and is killed by its PID
//! after it. Each test has its own loopback addresses (127.0.4N.2/3); both
//! processes get the same two devices, the server uses roce0 and the
//! client roce1 (each process opens only the device it uses).

use crate::common;
use common::{finish, need, skipped, text, which};

use ibverbs::rdmacm::abi as cm;
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// This executable's directory of drop-in links (see [`common::drop_in_dir`]).
fn lib_dir() -> std::path::PathBuf {
    common::drop_in_dir("rdmacm-test-lib", &["libibverbs.so.1", "librdmacm.so.1"])
}

/// A command on the drop-in with the test's two devices.
fn cmd(prog: &Path, net: u8, args: &[&str]) -> Command {
    common::drop_in_cmd(prog, &lib_dir(), &common::two_devices(net), args)
}

/// Run `server`, wait until it opened its device on 127.0.`net`.2 (then a
/// little more for its listen), run `client`; both must exit 0. Returns
/// both outputs.
fn pair(net: u8, server: Command, client: Command, what: &str) -> (String, String) {
    let (c, s) = common::server_then_client(
        server,
        client,
        [127, 0, net, 2],
        Duration::from_secs(40),
        Duration::from_secs(15),
    );
    common::both_succeeded(what, &c, &s)
}

// ---------------------------------------------------------------- symbols

#[test]
fn symbols_and_versions_are_librdmacms() {
    let Some(ours) = common::dynamic_symbols(&lib_dir().join("librdmacm.so.1")) else {
        skipped("nm not installed (apt-get install binutils)");
        return;
    };
    let ours: Vec<String> = ours.into_iter().filter(|s| s.contains("@RDMACM_")).collect();
    assert_eq!(ours.len(), 68, "{ours:#?}");
    for must in
        ["rdma_connect@@RDMACM_1.0", "rdma_establish@@RDMACM_1.2", "rdma_reject_ece@@RDMACM_1.3"]
    {
        assert!(ours.iter().any(|s| s == must), "{must} missing");
    }
    let host = Path::new("/usr/lib/x86_64-linux-gnu/librdmacm.so.1");
    if !host.exists() {
        skipped("(part) no host librdmacm.so.1 to compare with (apt-get install librdmacm1)");
        return;
    }
    let theirs = common::dynamic_symbols(host).expect("nm on the host librdmacm");
    assert_eq!(ours, theirs, "exported symbols differ from the host's librdmacm");
}

// ---------------------------------------------------------------- layouts

/// (C struct, C member, Rust offset or size). Member "sizeof" is the size.
fn layout_table() -> Vec<(&'static str, &'static str, usize)> {
    use cm::*;
    macro_rules! fields {
        ($v:ident, $cs:literal, $rs:ty, $($cf:literal => $rf:ident),* $(,)?) => {
            $v.push(($cs, "sizeof", size_of::<$rs>()));
            $( $v.push(($cs, $cf, offset_of!($rs, $rf))); )*
        };
    }
    let mut v = Vec::new();
    fields!(v, "rdma_ib_addr", rdma_ib_addr, "sgid" => sgid, "dgid" => dgid, "pkey" => pkey);
    fields!(v, "rdma_addr", rdma_addr,
        "src_addr" => src_storage, "src_sin" => src_storage, "src_sin6" => src_storage,
        "src_storage" => src_storage, "dst_addr" => dst_storage, "dst_sin" => dst_storage,
        "dst_sin6" => dst_storage, "dst_storage" => dst_storage, "addr.ibaddr" => ibaddr);
    fields!(v, "rdma_route", rdma_route, "addr" => addr, "path_rec" => path_rec, "num_paths" => num_paths);
    fields!(v, "rdma_event_channel", rdma_event_channel, "fd" => fd);
    fields!(v, "rdma_cm_id", rdma_cm_id,
        "verbs" => verbs, "channel" => channel, "context" => context, "qp" => qp, "route" => route,
        "ps" => ps, "port_num" => port_num, "event" => event, "send_cq_channel" => send_cq_channel,
        "send_cq" => send_cq, "recv_cq_channel" => recv_cq_channel, "recv_cq" => recv_cq,
        "srq" => srq, "pd" => pd, "qp_type" => qp_type);
    fields!(v, "rdma_conn_param", rdma_conn_param,
        "private_data" => private_data, "private_data_len" => private_data_len,
        "responder_resources" => responder_resources, "initiator_depth" => initiator_depth,
        "flow_control" => flow_control, "retry_count" => retry_count,
        "rnr_retry_count" => rnr_retry_count, "srq" => srq, "qp_num" => qp_num);
    fields!(v, "rdma_ud_param", rdma_ud_param,
        "private_data" => private_data, "private_data_len" => private_data_len,
        "ah_attr" => ah_attr, "qp_num" => qp_num, "qkey" => qkey);
    fields!(v, "rdma_cm_event", rdma_cm_event,
        "id" => id, "listen_id" => listen_id, "event" => event, "status" => status,
        "param" => param, "param.conn" => param, "param.ud" => param);
    fields!(v, "rdma_addrinfo", rdma_addrinfo,
        "ai_flags" => ai_flags, "ai_family" => ai_family, "ai_qp_type" => ai_qp_type,
        "ai_port_space" => ai_port_space, "ai_src_len" => ai_src_len, "ai_dst_len" => ai_dst_len,
        "ai_src_addr" => ai_src_addr, "ai_dst_addr" => ai_dst_addr,
        "ai_src_canonname" => ai_src_canonname, "ai_dst_canonname" => ai_dst_canonname,
        "ai_route_len" => ai_route_len, "ai_route" => ai_route,
        "ai_connect_len" => ai_connect_len, "ai_connect" => ai_connect, "ai_next" => ai_next);
    v
}

#[test]
fn struct_layouts_match_rdma_cma_h() {
    let table = layout_table();
    assert!(table.len() > 60);
    if which("cc").is_none() || !Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        skipped("needs cc and <rdma/rdma_cma.h> (apt-get install gcc librdmacm-dev)");
        return;
    }
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/rdma_cma.h>\nint main(void) {\n",
    );
    for (s, f, _) in &table {
        if *f == "sizeof" {
            src += &format!("  printf(\"{s} {f} %zu\\n\", sizeof(struct {s}));\n");
        } else {
            src += &format!("  printf(\"{s} {f} %zu\\n\", offsetof(struct {s}, {f}));\n");
        }
    }
    src += "  printf(\"RDMA_PS_TCP %d RDMA_PS_UDP %d\\n\", RDMA_PS_TCP, RDMA_PS_UDP);\n  return 0;\n}\n";
    let dir = std::env::temp_dir().join(format!("roce-rdmacm-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (c, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&c, src).expect("write layout.c");
    let o = Command::new("cc").arg("-o").arg(&exe).arg(&c).output().expect("run cc");
    assert!(o.status.success(), "cc:\n{}", text(&o.stderr));
    let o = Command::new(&exe).output().expect("run layout");
    let got = text(&o.stdout);
    let mut want: String =
        table.iter().map(|(s, f, n)| format!("{s} {f} {n}\n")).collect::<Vec<_>>().concat();
    want += &format!("RDMA_PS_TCP {} RDMA_PS_UDP {}\n", cm::RDMA_PS_TCP, cm::RDMA_PS_UDP);
    assert_eq!(got, want);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------- tools

#[test]
fn rping_ten_pings_between_two_processes() {
    let Some(rping) = need("rping", "rdmacm-utils") else { return };
    let net = 40;
    let (c, s) = pair(
        net,
        cmd(&rping, net, &["-s", "-a", "127.0.40.2", "-p", "7440", "-C", "10", "-v"]),
        cmd(&rping, net, &["-c", "-a", "127.0.40.2", "-p", "7440", "-C", "10", "-v"]),
        "rping",
    );
    for i in 0..10 {
        assert!(c.contains(&format!("ping data: rdma-ping-{i}: ")), "client line {i}:\n{c}");
        assert!(s.contains(&format!("server ping data: rdma-ping-{i}: ")), "server line {i}:\n{s}");
    }
}

#[test]
fn rping_validated_bigger_pings() {
    let Some(rping) = need("rping", "rdmacm-utils") else { return };
    let net = 45;
    let (c, _) = pair(
        net,
        cmd(&rping, net, &["-s", "-a", "127.0.45.2", "-p", "7445", "-C", "20", "-S", "4000", "-V"]),
        cmd(&rping, net, &["-c", "-a", "127.0.45.2", "-p", "7445", "-C", "20", "-S", "4000", "-V"]),
        "rping -V -S 4000",
    );
    assert!(!c.contains("data mismatch"), "{c}");
}

#[test]
fn ucmatose_connections_transfers_and_migration() {
    let Some(tool) = need("ucmatose", "rdmacm-utils") else { return };
    let net = 41;
    let (c, s) = pair(
        net,
        cmd(&tool, net, &["-b", "127.0.41.2", "-p", "7441"]),
        cmd(&tool, net, &["-s", "127.0.41.2", "-p", "7441"]),
        "ucmatose",
    );
    assert!(c.contains("return status 0") && s.contains("return status 0"), "{c}\n{s}");
    let (c, s) = pair(
        net,
        cmd(&tool, net, &["-b", "127.0.41.2", "-p", "7441", "-c", "3", "-C", "20", "-m"]),
        cmd(&tool, net, &["-s", "127.0.41.2", "-p", "7441", "-c", "3", "-C", "20", "-m"]),
        "ucmatose -c 3 -m",
    );
    assert!(c.contains("migrating to new event channel"), "{c}");
    assert!(s.contains("disconnected") && s.contains("return status 0"), "{s}");
}

#[test]
fn udaddy_sidr_and_datagrams() {
    let Some(tool) = need("udaddy", "rdmacm-utils") else { return };
    let net = 42;
    // udaddy's port is fixed (7174); -p is its port space
    let (c, s) = pair(
        net,
        cmd(&tool, net, &["-b", "127.0.42.2", "-c", "2", "-C", "5"]),
        cmd(&tool, net, &["-s", "127.0.42.2", "-c", "2", "-C", "5"]),
        "udaddy",
    );
    assert!(c.contains("data transfers complete") && c.contains("return status 0"), "{c}");
    assert!(s.contains("return status 0"), "{s}");
}

fn perftest_r(tool: &str, net: u8, port: &str) {
    let Some(p) = need(tool, "perftest") else { return };
    let addr = format!("127.0.{net}.2");
    let (c, s) = pair(
        net,
        cmd(&p, net, &["-R", "-x", "1", "-d", "roce0", "-p", port, "-n", "200"]),
        cmd(&p, net, &["-R", "-x", "1", "-d", "roce1", "-p", port, "-n", "200", &addr]),
        tool,
    );
    for out in [&c, &s] {
        assert!(out.contains("Data ex. method : rdma_cm"), "{tool}:\n{out}");
        assert!(!out.contains("Couldn't") && !out.contains("Failed"), "{tool}:\n{out}");
    }
    assert!(c.lines().any(|l| l.trim_start().starts_with(|ch: char| ch.is_ascii_digit())), "{c}");
}

#[test]
fn perftest_rdma_cm_mode_write_bw_and_send_lat() {
    perftest_r("ib_write_bw", 43, "18743");
    perftest_r("ib_send_lat", 43, "18744");
}

#[test]
fn rping_to_a_port_nobody_listens_on_is_rejected_quickly() {
    let Some(rping) = need("rping", "rdmacm-utils") else { return };
    let net = 44;
    // a server on 7444 so the device answers; the client asks for 7449
    let s = cmd(&rping, net, &["-s", "-a", "127.0.44.2", "-p", "7444", "-C", "1"])
        .spawn()
        .expect("spawn server");
    common::wait_device([127, 0, net, 2]);
    let t0 = Instant::now();
    let c = cmd(&rping, net, &["-c", "-a", "127.0.44.2", "-p", "7449", "-C", "1", "-v"])
        .spawn()
        .expect("spawn client");
    let (co, ct) = finish(c, Duration::from_secs(20));
    let took = t0.elapsed();
    let (_so, _) = finish(s, Duration::from_millis(10)); // killed by PID: it waits for a client
    let out = text(&co.stdout) + &text(&co.stderr);
    assert!(!ct, "rping hung:\n{out}");
    assert!(!co.status.success(), "rping should fail:\n{out}");
    assert!(out.contains("RDMA_CM_EVENT_REJECTED, error 8"), "{out}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

// ---------------------------------------------------------------- C programs

#[test]
fn c_program_private_data_nonblocking_fd_reject_own_qp_and_errnos() {
    let Some(exe) = common::compile_rdmacm_c("rdmacm_check", &lib_dir()) else { return };
    let net = 47;
    let (c, s) = pair(
        net,
        cmd(&exe, net, &["server", "127.0.47.2", "7447"]),
        cmd(&exe, net, &["client", "127.0.47.2", "7447"]),
        "rdmacm_check",
    );
    assert!(c.contains("client done") && !c.contains("FAIL"), "{c}");
    assert!(s.contains("server done") && !s.contains("FAIL"), "{s}");
    for must in [
        "ok   empty non-blocking channel: EAGAIN",
        "ok   CONNECT_REQUEST private data: the client's 10 bytes, length 56",
        "ok   rdma_create_qp(id, NULL pd, NULL CQs)",
        "ok   the client's SEND landed: \"ping\"",
        "ok   a SEND on the own QPs landed: \"pong\"",
        "ok   after the last id and channel: the CM's context, the program's PD and MR live",
    ] {
        assert!(s.contains(must), "{must}\n{s}");
    }
    for must in [
        "ok   REJECTED: status 28 (consumer), the server's private data, length 148",
        "ok   ESTABLISHED: the server's private data, length 196",
        "ok   rdma_join_multicast on a TCP id on no device: EINVAL",
        "ok   rdma_join_multicast of a unicast address: EINVAL",
        "ok   rdma_join_multicast of an IPv6 group: EOPNOTSUPP",
        "ok   rdma_leave_multicast of a group not joined: EADDRNOTAVAIL",
        "ok   rdma_join_multicast_ex without join flags: EINVAL",
        "ok   rdma_set_local_ece without a vendor ID: EINVAL",
        "ok   rdma_set_local_ece before the QP: 0",
        "ok   rdma_get_remote_ece: no offer from the peer (0, 0)",
        "ok   rdma_get_remote_ece of an id with a QP: EINVAL",
        "ok   CONNECT_RESPONSE, own QP to RTR and RTS",
    ] {
        assert!(c.contains(must), "{must}\n{c}");
    }
}

#[test]
fn rdma_server_and_rdma_client_synchronous_endpoints() {
    // rdma_create_ep, rdma_get_request, rdma_reg_msgs on id->pd, the CQs
    // and completion channels librdmacm makes for the QP
    let Some(srv) = need("rdma_server", "rdmacm-utils") else { return };
    let Some(cli) = need("rdma_client", "rdmacm-utils") else { return };
    let net = 48;
    let (c, s) = pair(
        net,
        cmd(&srv, net, &["-s", "127.0.48.2", "-p", "7448"]),
        cmd(&cli, net, &["-s", "127.0.48.2", "-p", "7448"]),
        "rdma_server/rdma_client",
    );
    assert!(c.contains("rdma_client: end 0"), "{c}");
    assert!(s.contains("rdma_server: end 0"), "{s}");
}

#[test]
fn rdma_xserver_and_rdma_xclient_xrc_over_the_cm() {
    // RDMA_PS_IB with XRC_RECV / XRC_SEND endpoints: the listener's request
    // gets an XRC target QP in the device's XRC domain, rdma_create_srq an
    // XRC SRQ whose number the accept's private data carries; the client's
    // XRC SEND names it in its XRCETH. Then an XRC client to an RC
    // listener: refused, as the kernel's CM refuses a request no listener
    // of its QP type takes.
    let Some(srv) = need("rdma_xserver", "rdmacm-utils") else { return };
    let Some(cli) = need("rdma_xclient", "rdmacm-utils") else { return };
    let net = 49;
    let pcaps = std::env::temp_dir().join(format!("roce-xrc-cm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&pcaps);
    std::fs::create_dir_all(&pcaps).expect("pcap dir");
    let with_pcap = |mut c: Command| {
        c.env("ROCE_EMU_PCAP", &pcaps);
        c
    };
    let (c, s) = pair(
        net,
        with_pcap(cmd(&srv, net, &["-c", "x", "-p", "7449"])),
        with_pcap(cmd(&cli, net, &["-c", "x", "-s", "127.0.49.2", "-p", "7449"])),
        "rdma_xserver/rdma_xclient -c x",
    );
    assert!(c.contains("rdma_xclient: end 0"), "{c}");
    assert!(s.contains("rdma_xserver: end 0"), "{s}");
    // on the wire: the REQ says XRC, the REP names the target in its EE
    // context field, the SEND is an XRC SEND with an XRCETH, the ACK an
    // XRC ACK
    let sent = data_tos_from(&pcaps, "roce0-", "127.0.49.2".parse().unwrap());
    let bths: Vec<&[u8]> = sent.iter().map(|(_, udp)| &udp[8..]).collect();
    let send = bths.iter().find(|b| b[0] == 0xA4).expect("an XRC SEND_ONLY (0xA4)");
    let srqn = u32::from_be_bytes([0, send[13], send[14], send[15]]);
    assert_ne!(srqn, 0, "the XRCETH names the server's XRC SRQ");
    let tgt = u32::from_be_bytes([0, send[5], send[6], send[7]]);
    assert!(bths.iter().any(|b| b[0] == 0xB1), "an XRC ACKNOWLEDGE (0xB1)");
    let mads: Vec<roce_packet::mad::CmMad> = std::fs::read_dir(&pcaps)
        .expect("pcap dir")
        .flatten()
        .flat_map(|f| roce_pcap::read_capture_file(&f.path()).expect("read capture"))
        .filter_map(|fr| {
            let d = &fr.data;
            // Ethernet, IPv4, UDP, BTH, DETH: the MAD after them
            let mad = d.get(14 + 20 + 8 + 12 + 8..)?;
            roce_packet::mad::CmMad::parse(mad).ok()
        })
        .collect();
    let req = mads.iter().find_map(|m| match &m.msg {
        roce_packet::mad::CmMsg::Req(q) => Some(q.clone()),
        _ => None,
    });
    let req = req.expect("a CM REQ");
    assert_eq!((req.transport_service_type, req.extended_transport_type), (3, 1));
    let rep = mads.iter().find_map(|m| match &m.msg {
        roce_packet::mad::CmMsg::Rep(p) => Some(p.clone()),
        _ => None,
    });
    let rep = rep.expect("a CM REP");
    assert_eq!((rep.local_qpn, rep.local_eecn, rep.srq), (0, tgt, true));
    let _ = std::fs::remove_dir_all(&pcaps);

    // an XRC client to an RC listener: REJ, rdma_connect fails
    let s = cmd(&srv, net, &["-c", "r", "-p", "7450"]).spawn().expect("spawn server");
    common::wait_device([127, 0, net, 2]);
    let c = cmd(&cli, net, &["-c", "x", "-s", "127.0.49.2", "-p", "7450"])
        .spawn()
        .expect("spawn client");
    let (co, ct) = finish(c, Duration::from_secs(20));
    let (_so, _) = finish(s, Duration::from_millis(10)); // killed by PID: it waits for a client
    let out = text(&co.stdout) + &text(&co.stderr);
    assert!(!ct && !co.status.success(), "{out}");
    assert!(out.contains("rdma_connect: Connection refused"), "{out}");
}

#[test]
fn rdma_xserver_and_rdma_xclient_under_valgrind_report_no_error() {
    // the CM's XRC paths of the drop-in (RDMA_PS_IB ids, the XRC target
    // and SRQ in the device's domain, the REP's EE context) under memcheck
    let Some(vg) = need("valgrind", "valgrind") else { return };
    let Some(srv) = need("rdma_xserver", "rdmacm-utils") else { return };
    let Some(cli) = need("rdma_xclient", "rdmacm-utils") else { return };
    let net = 50;
    let supp = format!(
        "--suppressions={}",
        Path::new(crate::CRATE_DIR).join("tests/data/valgrind.supp").display()
    );
    let vg_cmd = |prog: &Path, args: &[&str]| {
        let mut a = vec!["--fair-sched=yes", "--error-exitcode=9", "--errors-for-leak-kinds=none"];
        a.push(&supp);
        a.push(prog.to_str().expect("utf-8 path"));
        a.extend_from_slice(args);
        cmd(&vg, net, &a)
    };
    let (c, s) = pair(
        net,
        vg_cmd(&srv, &["-c", "x", "-p", "7452"]),
        vg_cmd(&cli, &["-c", "x", "-s", "127.0.50.2", "-p", "7452"]),
        "rdma_xserver/rdma_xclient -c x under valgrind",
    );
    for (out, end) in [(&c, "rdma_xclient: end 0"), (&s, "rdma_xserver: end 0")] {
        assert!(out.contains("ERROR SUMMARY: 0 errors") && out.contains(end), "{out}");
    }
}

// ---------------------------------------------------------------- multicast

/// Wait (at most 60 s: the machine may be busy with other suites) until
/// `n` sockets are bound to `group`:4791 (the receivers joined: each
/// process of a device that joins opens one); how many there are.
fn wait_group_members(group: [u8; 4], n: usize) -> usize {
    let want = format!("{:08X}:12B7", u32::from_le_bytes(group));
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let have = std::fs::read_to_string("/proc/net/udp").map_or(0, |t| {
            t.lines().skip(1).filter(|l| l.split_whitespace().nth(1) == Some(&want)).count()
        });
        if have >= n || Instant::now() > end {
            return have;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a receiver that missed its deadline shows: the group's sockets
/// (`/proc/net/udp`: queued bytes and drops) and, with gdb, its threads.
fn stuck_receiver(pid: u32, group: [u8; 4]) -> String {
    let want = format!("{:08X}:12B7", u32::from_le_bytes(group));
    let mut s = format!("\n[test] receiver {pid} missed its deadline; sockets of the group:\n");
    for net in ["/proc/net/udp".to_string(), format!("/proc/{pid}/net/udp")] {
        let t = std::fs::read_to_string(&net).unwrap_or_default();
        for l in t.lines().filter(|l| l.split_whitespace().nth(1) == Some(&want)) {
            s += &format!("  {net}: {l}\n");
        }
    }
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    s += &format!("  open descriptors: {fds}\n");
    if let Some(gdb) = which("gdb") {
        let o = Command::new(gdb)
            .args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt 10"])
            .output();
        if let Ok(o) = o {
            s += &text(&o.stdout);
        }
    }
    s
}

/// mckey (rdmacm-utils): `receivers` processes on `rx_dev` join `group`,
/// then a sender on `tx_dev` (send-only with `-o`) sends 20 datagrams;
/// every receiver must get all of them.
fn mckey(net: u8, group: [u8; 4], receivers: usize, tx_dev: &str, send_only: bool) {
    let Some(tool) = need("mckey", "rdmacm-utils") else { return };
    let g = format!("{}.{}.{}.{}", group[0], group[1], group[2], group[3]);
    let rx_dev = format!("127.0.{net}.2");
    // (line-buffered where coreutils' stdbuf is: a receiver killed at its
    // deadline still shows how far it got)
    let t = tool.to_string_lossy().to_string();
    let rx: Vec<_> = (0..receivers)
        .map(|_| {
            let args = ["-m", &g, "-b", &rx_dev, "-C", "20"];
            match which("stdbuf") {
                Some(sb) => cmd(&sb, net, &[&["-oL", t.as_str()][..], &args[..]].concat()),
                None => cmd(&tool, net, &args),
            }
            .spawn()
            .expect("spawn mckey receiver")
        })
        .collect();
    let joined = wait_group_members(group, receivers);
    if joined < receivers {
        let outs: Vec<String> = rx
            .into_iter()
            .map(|c| {
                let (o, _) = finish(c, Duration::from_secs(1));
                text(&o.stdout) + &text(&o.stderr)
            })
            .collect();
        panic!("{joined} of {receivers} receivers joined {g} in 60 s:\n{}", outs.join("\n---\n"));
    }
    let mut args = vec!["-m", &g, "-b", tx_dev, "-s", "-C", "20"];
    if send_only {
        args.push("-o");
    }
    let (o, killed) =
        finish(cmd(&tool, net, &args).spawn().expect("spawn mckey"), Duration::from_secs(30));
    let s = text(&o.stdout) + &text(&o.stderr);
    assert!(!killed && o.status.success(), "mckey sender:\n{s}");
    assert!(s.contains("joined dgid: ::ffff:") && s.contains("data transfers complete"), "{s}");
    for (i, c) in rx.into_iter().enumerate() {
        let pid = c.id();
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end && std::fs::metadata(format!("/proc/{pid}/stat")).is_ok() {
            let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if st.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let evidence =
            if Instant::now() >= end { stuck_receiver(pid, group) } else { String::new() };
        let (o, killed) = finish(c, Duration::from_secs(1));
        let r = text(&o.stdout) + &text(&o.stderr);
        assert!(
            !killed && o.status.success(),
            "mckey receiver {i} (killed: {killed}):\n{r}{evidence}"
        );
        assert!(
            r.contains("receiving data transfers") && r.contains("data transfers complete"),
            "{r}"
        );
        assert!(r.contains(&format!("joined dgid: ::ffff:{g} mlid 0x0 sl 0")), "{r}");
    }
}

// mckey's sender posts its datagrams unsignaled and destroys its QP at
// once; until the device sent a UD QP's posted datagrams at its destroy (a
// NIC has them on the wire by then), about one run in ten lost the tail
// of them, or all (emulator/tests/ud.rs has the core's test).
#[test]
fn mckey_three_receiver_processes_on_one_device_and_a_send_only_sender() {
    mckey(126, [239, 126, 0, 1], 3, "127.0.126.2", true);
}

#[test]
fn mckey_between_two_devices() {
    mckey(127, [239, 127, 0, 1], 2, "127.0.127.3", false);
}

// ---------------------------------------------------------------- options

/// Whether a UDP socket holds [::1]:4791 (the one IPv6 loopback device).
fn ipv6_device_port_taken() -> bool {
    std::fs::read_to_string("/proc/net/udp6").is_ok_and(|t| {
        t.lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some("00000000000000000000000001000000:12B7"))
    })
}

/// The IP TOS / traffic class and the UDP payload of the RoCE packets to
/// QPs other than QP1 (the CM's) from address `src`, in the captures in
/// `dir` whose names start with `name` (a device's file, and a shared
/// member's `.sN.pcap`). A device records what it sends with the header it
/// sent and what it receives with TOS 0 (its UDP socket does not report
/// the received byte).
fn data_tos_from(dir: &Path, name: &str, src: std::net::IpAddr) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let files = std::fs::read_dir(dir).expect("pcap dir");
    for f in files.flatten().filter(|f| f.file_name().to_string_lossy().starts_with(name)) {
        let frames = roce_pcap::read_capture_file(&f.path()).expect("read capture");
        for fr in frames {
            let d = &fr.data;
            let (tos, from, l4) = match u16::from_be_bytes([d[12], d[13]]) {
                0x0800 => {
                    let ip: [u8; 4] = d[26..30].try_into().unwrap();
                    (d[15], std::net::IpAddr::from(ip), 14 + 20)
                }
                0x86DD => {
                    let ip: [u8; 16] = d[22..38].try_into().unwrap();
                    ((d[14] << 4) | (d[15] >> 4), std::net::IpAddr::from(ip), 14 + 40)
                }
                _ => continue,
            };
            let bth = &d[l4 + 8..];
            let dest_qp = u32::from_be_bytes([0, bth[5], bth[6], bth[7]]);
            if from == src && dest_qp != 1 {
                out.push((tos, d[l4..].to_vec()));
            }
        }
    }
    out
}

#[test]
fn afonly_reuseaddr_and_tos_options_as_the_kernels_cm() {
    let Some(exe) = common::compile_rdmacm_c("cm_options_check", &lib_dir()) else { return };
    let v6 = !ipv6_device_port_taken();
    let mut devices = "roce0=udp:127.0.57.2,roce1=udp:127.0.57.3".to_string();
    if v6 {
        devices.push_str(",roce2=udp:[::1]:4791");
    } else {
        skipped("(part) [::1]:4791 is in use: no IPv6 device, no IPv6 client");
    }
    let pcaps = std::env::temp_dir().join(format!("roce-cm-options-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&pcaps);
    std::fs::create_dir_all(&pcaps).expect("pcap dir");
    let args = ["127.0.57.2", "127.0.57.3", "7457", if v6 { "v6" } else { "nov6" }];
    let mut c = common::drop_in_cmd(&exe, &lib_dir(), &devices, &args);
    c.env("ROCE_EMU_PCAP", &pcaps);
    let (o, timed_out) = finish(c.spawn().expect("spawn"), Duration::from_secs(60));
    let out = text(&o.stdout);
    assert!(!timed_out && o.status.success(), "{out}{}", text(&o.stderr));
    assert!(!out.contains("FAIL") && out.contains("0 failures"), "{out}");
    let mut must = vec![
        "ok   rdma_bind_addr([::]:7457) with AFONLY: 0",
        "ok   rdma_bind_addr(0.0.0.0:7457) next to it: 0",
        "ok   rdma_listen(0.0.0.0:7457): 0",
        "ok   a third id on 0.0.0.0:7457: errno 99 (EADDRNOTAVAIL)",
        "ok   and on 127.0.57.2:7457 under the wildcard: errno 99 (EADDRNOTAVAIL)",
        "ok   IPv4 client: CONNECT_REQUEST on the expected listener",
        "ok   IPv4 client: the client's QP: traffic class 0x60 (rdma_init_qp_attr 0x60)",
        "ok   IPv4 client: the server's QP takes the REQ's: traffic class 0x60",
        "ok   IPv4 client: the server received \"tos 0x60\"",
        "ok   a second id on 127.0.57.2:7459 without REUSEADDR: errno 98 (EADDRINUSE)",
        "ok   the second binds 127.0.57.2:7459 too: 0",
        "ok   a third without REUSEADDR: errno 98 (EADDRINUSE)",
        "ok   rdma_listen while the other id holds the address: errno 98 (EADDRINUSE)",
        "ok   RDMA_OPTION_ID_REUSEADDR 0 on a bound id: EINVAL",
        "ok   rdma_listen once it is alone: 0",
        "ok   RDMA_OPTION_ID_REUSEADDR 1 on a listening id: EINVAL",
        "ok   it cannot bind the listener's 127.0.57.2:7459: errno 98 (EADDRINUSE)",
        "ok   nor 0.0.0.0:7459: EADDRNOTAVAIL",
        "ok   RDMA_OPTION_ID_TOS with optlen 4: EINVAL",
        "ok   RDMA_OPTION_ID_REUSEADDR with optlen 1: EINVAL",
        "ok   RDMA_OPTION_ID option 99: ENOSYS",
        "ok   level 7: ENOSYS",
        "ok   RDMA_OPTION_ID_AFONLY on a listening id: EINVAL",
        "ok   RDMA_OPTION_ID_AFONLY on a bound id: 0",
    ];
    let v6only =
        std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only").is_ok_and(|t| t.trim() == "1");
    if !v6only {
        must.push("ok   0.0.0.0:7458 next to it: errno 99 (EADDRNOTAVAIL)");
    }
    if v6 {
        must.extend([
            "ok   rdma_listen([::]:7457): 0",
            "ok   IPv6 client: CONNECT_REQUEST on the expected listener",
            "ok   IPv6 client: the request's peer address is of family 10",
            "ok   IPv6 client: the server's QP takes the REQ's: traffic class 0xb8",
            "ok   IPv6 client: the server received \"tos 0xb8\"",
        ]);
    }
    for m in must {
        assert!(out.contains(m), "{m}\n{out}");
    }
    // the captures: every packet of the data QPs the devices sent carries
    // the TOS (the client's SEND, the server's ACK) as its DSCP, with the
    // device's ECN codepoint, ECT(0), in the low two bits
    // (each device's own file: what it sent)
    let tos = |v: Vec<(u8, Vec<u8>)>| v.into_iter().map(|(t, _)| t).collect::<Vec<u8>>();
    let client = tos(data_tos_from(&pcaps, "roce1-", "127.0.57.3".parse().unwrap()));
    let server = tos(data_tos_from(&pcaps, "roce0-", "127.0.57.2".parse().unwrap()));
    assert!(!client.is_empty() && client.iter().all(|&t| t == 0x62), "client: {client:x?}");
    assert!(!server.is_empty() && server.iter().all(|&t| t == 0x62), "server: {server:x?}");
    if v6 {
        // client and server share the device: each packet is in its file
        // twice, as sent (0xb8 with ECT(0): 0xba) and as received (DSCP 0)
        let both = data_tos_from(&pcaps, "roce2-", "::1".parse().unwrap());
        let sent: Vec<&Vec<u8>> = both.iter().filter(|x| x.0 == 0xba).map(|x| &x.1).collect();
        let got: Vec<&Vec<u8>> = both.iter().filter(|x| x.0 >> 2 == 0).map(|x| &x.1).collect();
        assert!(sent.len() >= 2 && sent.len() + got.len() == both.len(), "[::1]: {both:x?}");
        assert!(got.iter().all(|g| sent.contains(g)), "a packet sent without 0xba: {both:x?}");
    }
    let _ = std::fs::remove_dir_all(&pcaps);
}
