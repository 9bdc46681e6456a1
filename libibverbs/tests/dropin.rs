//! The libibverbs drop-in against real programs: its symbols and versions,
//! its struct layouts against the C header, a C program that checks the
//! memory model and errnos, Debian's rdma-core tools and perftest in two
//! processes, and a Debian tool against the project's own Rust example.
//!
//! Tests that need something not installed (cc and libibverbs-dev,
//! ibverbs-utils, perftest, valgrind) print `SKIPPED: ...` and return.
//! Every process runs under a deadline and is killed by its PID after it.
//! Each test uses its own loopback addresses (127.0.N.2/3) and TCP port.

use crate::common;
use common::{assert_perftest_result, finish, need, skipped, target_dir, text, which};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// This executable's directory of drop-in links (see [`common::drop_in_dir`]).
fn lib_dir() -> std::path::PathBuf {
    common::drop_in_dir("dropin-test-lib", &["libibverbs.so.1"])
}

/// A command on the drop-in with the test's own devices.
fn cmd(prog: &Path, net: u8, args: &[&str]) -> Command {
    common::drop_in_cmd(prog, &lib_dir(), &common::two_devices(net), args)
}

/// The TCP port a server command listens on: its `-p`, else perftest's
/// and the pingpongs' defaults.
fn server_port(c: &Command) -> u16 {
    let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    if let Some(i) = args.iter().position(|a| a == "-p" || a == "--port") {
        if let Some(p) = args.get(i + 1).and_then(|p| p.parse().ok()) {
            return p;
        }
    }
    18515
}

/// Whether something listens on TCP `port` (IPv4 or IPv6), from /proc/net.
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                // local_address is column 1, st (0A = LISTEN) column 3
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// Wait (bounded) until a server listens on `port`, then a little more.
fn wait_listening(port: u16, limit: Duration) {
    let end = Instant::now() + limit;
    while !listening(port) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(50));
}

/// Run `server` then (after it listens) `client`; both must exit 0.
/// Returns the client's and the server's stdout.
fn pair(server: Command, client: Command, what: &str) -> (String, String) {
    let mut server = server;
    let mut client = client;
    let port = server_port(&server);
    let s = server.spawn().expect("spawn server");
    // A fixed pause is not enough under valgrind on a loaded host: wait
    // until the server listens on its TCP port (the tools connect once).
    wait_listening(port, Duration::from_secs(30));
    let c = client.spawn().expect("spawn client");
    let co = finish(c, Duration::from_secs(40));
    let so = finish(s, Duration::from_secs(10));
    common::both_succeeded(what, &co, &so)
}

// ---------------------------------------------------------------- symbols

/// What `libibverbs.map` says should be exported.
fn map_symbols() -> Vec<String> {
    let map = std::fs::read_to_string(Path::new(crate::CRATE_DIR).join("libibverbs.map"))
        .expect("libibverbs.map");
    let mut per: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_comment = false;
    for line in map.lines() {
        let l = line.trim();
        if l.starts_with("/*") {
            in_comment = !l.contains("*/");
            continue;
        }
        if in_comment {
            in_comment = !l.contains("*/");
            continue;
        }
        if let Some(node) = l.strip_suffix('{').map(str::trim) {
            per.push((node.to_string(), Vec::new()));
        } else if let Some(name) = l.strip_suffix(';') {
            if !name.contains(':') && !name.starts_with('}') && name != "*" {
                per.last_mut().expect("symbol inside a node").1.push(name.to_string());
            }
        }
    }
    let in10: Vec<String> = per.iter().find(|p| p.0 == "IBVERBS_1.0").unwrap().1.clone();
    let in11: Vec<String> = per.iter().find(|p| p.0 == "IBVERBS_1.1").unwrap().1.clone();
    let mut out = Vec::new();
    for (node, names) in &per {
        out.push(node.clone()); // the version definition itself: "IBVERBS_1.0" has no '@'
        for n in names {
            let compat = node == "IBVERBS_1.0" && in11.contains(n);
            let single = node == "IBVERBS_1.1" && n == "ibv_register_driver";
            out.push(format!("{n}{}{node}", if compat || single { "@" } else { "@@" }));
        }
    }
    let _ = in10;
    out.retain(|s| s.contains('@'));
    out.sort();
    out
}

#[test]
fn symbols_and_versions_are_rdma_cores() {
    let Some(ours) = common::dynamic_symbols(&lib_dir().join("libibverbs.so.1")) else {
        skipped("nm not installed (apt-get install binutils)");
        return;
    };
    let want = map_symbols();
    assert!(want.len() > 150, "{} symbols in the map", want.len());
    assert_eq!(ours, want, "exported symbols differ from libibverbs.map");
    assert!(ours.contains(&"ibv_open_device@@IBVERBS_1.1".to_string()));
    assert!(ours.contains(&"ibv_open_device@IBVERBS_1.0".to_string()));
    let host = Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    if host.exists() {
        let theirs = common::dynamic_symbols(host).expect("nm on the host library");
        // librdmacm's symbols live in the same library (tests/rdmacm.rs
        // checks them against the host's librdmacm.so.1)
        let ours: Vec<String> = ours.into_iter().filter(|s| !s.contains("@RDMACM_")).collect();
        assert_eq!(ours, theirs, "exported symbols differ from the host's rdma-core");
    } else {
        skipped("(part) no host libibverbs.so.1 to compare with (apt-get install libibverbs1)");
    }
}

// ---------------------------------------------------------------- C programs

fn have_c_toolchain() -> bool {
    if which("cc").is_none() || !Path::new(common::VERBS_H).exists() {
        skipped("needs cc and <infiniband/verbs.h> (apt-get install gcc libibverbs-dev)");
        return false;
    }
    true
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-dropin-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
fn c_program_memory_model_and_errnos() {
    let Some(exe) = common::compile_verbs_c("dropin_check", &lib_dir()) else { return };
    let o = common::run_within(cmd(&exe, 21, &[]), Duration::from_secs(60));
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    for must in [
        "ok   the WRITE landed in the application's own buffer, nothing around it",
        "ok   FETCH_AND_ADD on the application's word: returned 40, now 42",
        "ok   CMP_AND_SWP on the application's word: now 7",
        "ok   WRITE to a deregistered rkey: remote access error",
        "ok   the deregistered buffer is untouched",
        "ok   ibv_query_device_ex: FLUSH and ATOMIC WRITE in device_cap_flags_ex (0x1c0",
        "ok   ibv_dealloc_pd with an MR and a QP on it: EBUSY",
        "ok   RC to RTR without a GRH on RoCE: EINVAL",
        "ok   the thread blocked in ibv_get_cq_event woke with the CQ",
        "ok   the SEND landed in the receiver's buffer",
        "ok   its source deregistered and unmapped right after the post",
        "ok   the WRITE ended: ",
        "ok   no byte that arrived is wrong (0 wrong)",
        "0 failures",
    ] {
        assert!(out.contains(must), "missing {must:?} in\n{out}");
    }
}

/// Every struct the library fills or reads, with the fields it touches.
macro_rules! layouts {
    ($($ty:ident { $($f:ident),* $(,)? })*) => {
        /// (struct, field or "" for the size, value) as Rust computes them.
        fn rust_layout() -> Vec<(String, String, usize)> {
            let mut v = Vec::new();
            $(
                v.push((stringify!($ty).to_string(), String::new(), std::mem::size_of::<abi::$ty>()));
                $( v.push((stringify!($ty).to_string(), stringify!($f).to_string(),
                           std::mem::offset_of!(abi::$ty, $f))); )*
            )*
            v
        }
        /// The C program printing the same numbers.
        fn c_layout_source() -> String {
            let mut s = String::from("#include <infiniband/verbs.h>\n#include <stdio.h>\n#include <stddef.h>\nint main(void) {\n");
            $(
                s += &format!("printf(\"{0} . %zu\\n\", sizeof(struct {0}));\n", c_name(stringify!($ty)));
                $( s += &format!("printf(\"{0} {1} %zu\\n\", offsetof(struct {0}, {1}));\n",
                                 c_name(stringify!($ty)), c_field(stringify!($f))); )*
            )*
            s + "return 0;\n}\n"
        }
    };
}

#[allow(dead_code, non_camel_case_types, non_upper_case_globals, clippy::all)]
use crate::abi;

fn c_name(rust: &str) -> String {
    rust.to_string()
}

/// bindgen renames C fields that are Rust keywords (`type` → `type_`).
fn c_field(rust: &str) -> String {
    rust.strip_suffix('_').unwrap_or(rust).to_string()
}

layouts! {
    ibv_device { node_type, transport_type, name, dev_name, dev_path, ibdev_path }
    ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
    ibv_context_ops { alloc_mw, bind_mw, dealloc_mw, poll_cq, req_notify_cq, post_srq_recv, post_send, post_recv }
    verbs_context { query_port, create_cq_ex, query_device_ex, create_qp_ex, get_srq_num, sz, context }
    ibv_device_attr { fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id, max_qp, max_qp_wr, device_cap_flags, max_sge, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, atomic_cap, max_mw, max_ah, max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt }
    ibv_device_attr_ex { orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock, device_cap_flags_ex, max_dm_size, phys_port_cnt_ex }
    ibv_port_attr { state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, pkey_tbl_len, lid, active_width, active_speed, phys_state, link_layer, flags, port_cap_flags2 }
    ibv_pd { context, handle }
    ibv_mr { context, pd, addr, length, handle, lkey, rkey }
    ibv_mw { context, pd, rkey, handle, type_ }
    ibv_cq { context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed }
    ibv_cq_ex { context, channel, cq_context, handle, cqe, comp_mask, status, wr_id, start_poll, next_poll, end_poll, read_opcode, read_byte_len, read_imm_data, read_qp_num, read_src_qp, read_wc_flags, read_completion_ts, read_completion_wallclock_ns }
    ibv_comp_channel { context, fd, refcnt }
    ibv_qp { context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex, cond, events_completed }
    ibv_qp_ex { qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_rdma_write, wr_send, wr_set_ud_addr, wr_set_inline_data, wr_set_sge, wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write }
    ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
    ibv_ah { context, pd, handle }
    ibv_qp_attr { qp_state, cur_qp_state, path_mtu, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, pkey_index, en_sqd_async_notify, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, rate_limit }
    ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
    ibv_qp_init_attr_ex { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, create_flags, send_ops_flags }
    ibv_send_wr { wr_id, next, sg_list, num_sge, opcode, send_flags, wr, qp_type }
    ibv_recv_wr { wr_id, next, sg_list, num_sge }
    ibv_sge { addr, length, lkey }
    ibv_wc { wr_id, status, opcode, vendor_err, byte_len, qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits }
    ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
    ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
    ibv_async_event { element, event_type }
    ibv_srq_init_attr { srq_context, attr }
    ibv_srq_attr { max_wr, max_sge, srq_limit }
    ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
    ibv_cq_init_attr_ex { cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags }
    ibv_mw_bind { wr_id, send_flags, bind_info }
    ibv_mw_bind_info { mr, addr, length, mw_access_flags }
}

#[test]
fn struct_layouts_match_the_c_header() {
    let rust = rust_layout();
    assert!(rust.len() > 250, "{} entries", rust.len());
    // the committed table (made from the C header with ROCE_EMU_BLESS=1):
    // checked without a C toolchain too
    let table_path = Path::new(crate::CRATE_DIR).join("tests/data/layout.txt");
    if std::env::var_os("ROCE_EMU_BLESS").is_some() && have_c_toolchain() {
        std::fs::create_dir_all(table_path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&table_path, c_layout_output()).expect("write the table");
    }
    let table = std::fs::read_to_string(&table_path).expect("tests/data/layout.txt");
    let parse = |s: &str| -> Vec<(String, String, usize)> {
        s.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let (t, f, v) = (w.next()?, w.next()?, w.next()?.parse().ok()?);
                Some((t.to_string(), if f == "." { String::new() } else { f.to_string() }, v))
            })
            .collect()
    };
    let rust_c: Vec<(String, String, usize)> =
        rust.iter().map(|(t, f, v)| (t.clone(), c_field(f), *v)).collect();
    assert_eq!(parse(&table), rust_c, "abi.rs against {}", table_path.display());
    if !have_c_toolchain() {
        return;
    }
    let c = parse(&c_layout_output());
    assert_eq!(c, rust_c, "abi.rs against <infiniband/verbs.h>");
}

/// Sizes and offsets as the C compiler lays out the header's structs.
fn c_layout_output() -> String {
    let dir = tmpdir("layout");
    let src = dir.join("layout.c");
    std::fs::write(&src, c_layout_source()).expect("write layout.c");
    let exe = dir.join("layout");
    let o = Command::new("cc").arg("-o").arg(&exe).arg(&src).output().expect("cc");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = Command::new(&exe).output().expect("run layout");
    let _ = std::fs::remove_dir_all(&dir);
    text(&o.stdout)
}

// ---------------------------------------------------------------- Debian tools

/// The arguments of an rdma-core tool pair on port `port`: the server on
/// roce0, the client on roce1 connecting to 127.0.0.1, both with GID index
/// 1 (given with `gid_flag`) and `extra`.
fn server_client_args<'a>(
    gid_flag: &'a str,
    port: &'a str,
    extra: &[&'a str],
) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut sa = vec!["-d", "roce0", gid_flag, "1", "-p", port];
    sa.extend_from_slice(extra);
    let mut ca = vec!["-d", "roce1", gid_flag, "1", "-p", port];
    ca.extend_from_slice(extra);
    ca.push("127.0.0.1");
    (sa, ca)
}

fn pingpong(tool: &str, net: u8, port: u16, extra: &[&str]) {
    let Some(p) = need(tool, "ibverbs-utils") else { return };
    let port = port.to_string();
    let (sa, ca) = server_client_args("-g", &port, extra);
    let what = format!("{tool} {}", extra.join(" "));
    let (c, s) = pair(cmd(&p, net, &sa), cmd(&p, net, &ca), &what);
    assert!(common::iters_line(&c) && common::iters_line(&s), "{what}:\n{c}\n{s}");
    assert!(c.contains(&format!("GID ::ffff:127.0.{net}.2")), "{what}: remote GID\n{c}");
}

/// [`pingpong`] once with each argument list of `runs`.
fn pingpongs(tool: &str, net: u8, port: u16, runs: &[&[&str]]) {
    for args in runs {
        pingpong(tool, net, port, args);
    }
}

/// Plain, on CQ events, and checked at the smallest and an odd size.
const PLAIN_EVENTS_CHECK_SIZES: &[&[&str]] = &[
    &["-n", "200"],
    &["-n", "100", "-e"],
    &["-n", "50", "-c", "-s", "1"],
    &["-n", "50", "-c", "-s", "3079"],
];

#[test]
fn rc_pingpong_plain_events_check_and_sizes() {
    pingpongs("ibv_rc_pingpong", 22, 18622, PLAIN_EVENTS_CHECK_SIZES);
}

#[test]
fn uc_pingpong_plain_events_check_and_sizes() {
    pingpongs(
        "ibv_uc_pingpong",
        23,
        18623,
        &[&["-n", "200"], &["-n", "100", "-e"], &["-n", "50", "-c", "-s", "3079"]],
    );
}

#[test]
fn ud_pingpong_plain_events_and_sizes() {
    pingpongs(
        "ibv_ud_pingpong",
        24,
        18624,
        &[&["-n", "200"], &["-n", "100", "-e", "-s", "1"], &["-n", "100", "-s", "984"]],
    );
}

#[test]
fn srq_pingpong_plain_events_check_and_sizes() {
    pingpongs("ibv_srq_pingpong", 25, 18625, PLAIN_EVENTS_CHECK_SIZES);
}

#[test]
fn a_program_without_a_gid_fails_at_rtr_like_on_rxe() {
    let Some(p) = need("ibv_rc_pingpong", "ibverbs-utils") else { return };
    let s = cmd(&p, 26, &["-d", "roce0", "-p", "18626", "-n", "5"]).spawn().expect("spawn");
    std::thread::sleep(Duration::from_millis(300));
    let c = cmd(&p, 26, &["-d", "roce1", "-p", "18626", "-n", "5", "127.0.0.1"])
        .spawn()
        .expect("spawn");
    let (co, ct) = finish(c, Duration::from_secs(20));
    let (so, st) = finish(s, Duration::from_secs(10));
    let all = text(&co.stdout) + &text(&co.stderr) + &text(&so.stdout) + &text(&so.stderr);
    assert!(!ct && !st, "hung instead of failing:\n{all}");
    assert!(!co.status.success() && !so.status.success(), "{all}");
    assert!(all.contains("Failed to modify QP to RTR"), "{all}");
}

fn perftest(tool: &str, net: u8, port: u16, extra: &[&str]) {
    let Some(p) = need(tool, "perftest") else { return };
    let port = port.to_string();
    let (sa, ca) = server_client_args("-x", &port, extra);
    let (c, _) = pair(cmd(&p, net, &sa), cmd(&p, net, &ca), tool);
    assert_perftest_result(&c, tool);
}

#[test]
fn perftest_bandwidth_tools() {
    perftest("ib_write_bw", 27, 18627, &["-n", "300"]);
    perftest("ib_read_bw", 27, 18627, &["-n", "300"]);
    perftest("ib_send_bw", 27, 18627, &["-n", "300"]);
    perftest("ib_atomic_bw", 27, 18627, &["-n", "300"]);
}

#[test]
fn perftest_latency_tools() {
    perftest("ib_write_lat", 28, 18628, &["-n", "300"]);
    perftest("ib_send_lat", 28, 18628, &["-n", "300"]);
    perftest("ib_read_lat", 28, 18628, &["-n", "300"]);
}

#[test]
fn debian_pingpong_against_the_rust_example_both_ways() {
    let Some(debian) = need("ibv_rc_pingpong", "ibverbs-utils") else { return };
    let ours = target_dir().join("rc_pingpong");
    if !ours.exists() {
        skipped(&format!("{} not built (cargo build -p roce-examples)", ours.display()));
        return;
    }
    // Debian server on the drop-in, Rust client
    let (c, s) = pair(
        cmd(&debian, 29, &["-d", "roce0", "-g", "1", "-p", "18629", "-n", "100", "-c"]),
        cmd(&ours, 29, &["-d", "roce1", "-g", "1", "-p", "18629", "-n", "100", "-c", "127.0.0.1"]),
        "debian server / rust client",
    );
    assert!(common::iters_line(&c) && common::iters_line(&s), "{c}\n{s}");
    // Rust server, Debian client on the drop-in
    let (c, s) = pair(
        cmd(&ours, 29, &["-d", "roce0", "-g", "1", "-p", "18630", "-n", "100", "-c"]),
        cmd(
            &debian,
            29,
            &["-d", "roce1", "-g", "1", "-p", "18630", "-n", "100", "-c", "127.0.0.1"],
        ),
        "rust server / debian client",
    );
    assert!(common::iters_line(&c) && common::iters_line(&s), "{c}\n{s}");
}

#[test]
fn rc_pingpong_under_valgrind_reports_no_error() {
    let Some(vg) = need("valgrind", "valgrind") else { return };
    let Some(p) = need("ibv_rc_pingpong", "ibverbs-utils") else { return };
    // (one suppression, with its reason in the file: the padding of the
    // struct sock_fprog that steering a shared device passes to setsockopt)
    let supp = format!(
        "--suppressions={}",
        Path::new(crate::CRATE_DIR).join("tests/data/valgrind.supp").display()
    );
    let vg_cmd = |args: &[&str]| {
        let mut a = vec![
            "--fair-sched=yes",
            "--error-exitcode=9",
            "--errors-for-leak-kinds=none",
            &supp,
            p.to_str().expect("utf-8 path"),
        ];
        a.extend_from_slice(args);
        cmd(&vg, 30, &a)
    };
    let (c, s) = pair(
        vg_cmd(&["-d", "roce0", "-g", "1", "-p", "18631", "-n", "10", "-c"]),
        vg_cmd(&["-d", "roce1", "-g", "1", "-p", "18631", "-n", "10", "-c", "127.0.0.1"]),
        "ibv_rc_pingpong under valgrind",
    );
    for out in [&c, &s] {
        assert!(out.contains("ERROR SUMMARY: 0 errors"), "{out}");
        assert!(common::iters_line(out), "{out}");
    }
}

/// `roce perf` speaks perftest's multi-QP exchange in both roles: Debian's
/// `ib_write_bw -q 8` on the drop-in as the client of `roce perf write
/// --server -q 8`, and as the server of `roce perf write -q 8`.
#[test]
fn roce_perf_against_perftest_with_8_qps_both_roles() {
    let Some(pt) = need("ib_write_bw", "perftest") else { return };
    let roce = target_dir().join("roce");
    if !roce.exists() {
        skipped(&format!("{} not built (cargo build -p roce-cli)", roce.display()));
        return;
    }
    let common = ["-x", "1", "-q", "8", "-s", "4096", "-n", "100"];
    // roce perf serves, perftest connects
    let srv = with(&["perf", "write", "--server", "-d", "roce0", "-p", "18640"], &common);
    let cli = with(&["-d", "roce1", "-p", "18640"], &common);
    let (_, s) = pair(
        cmd(&roce, 31, &srv),
        cmd(&pt, 31, &with(&cli, &["127.0.0.1"])),
        "roce perf --server -q 8 / ib_write_bw -q 8",
    );
    assert!(s.contains("checks_ok=8 checks_failed=0 error=no"), "{s}");
    // perftest serves, roce perf connects
    let srv = with(&["-d", "roce0", "-p", "18641"], &common);
    let cli = with(&["perf", "write", "-d", "roce1", "-p", "18641"], &common);
    let (c, _) = pair(
        cmd(&pt, 31, &srv),
        cmd(&roce, 31, &with(&cli, &["127.0.0.1"])),
        "ib_write_bw -q 8 / roce perf -q 8",
    );
    assert!(c.contains("checks_failed=0 error=no"), "{c}");
    // different -q on the two sides: a message that says so
    let srv = with(
        &["perf", "write", "--server", "-d", "roce0", "-p", "18642"],
        &["-x", "1", "-n", "10"],
    );
    let mut s = cmd(&roce, 31, &srv);
    let mut c = cmd(&pt, 31, &with(&cli_q(&["-d", "roce1", "-p", "18642"]), &["127.0.0.1"]));
    let sp = s.spawn().expect("spawn");
    std::thread::sleep(Duration::from_millis(300));
    let cp = c.spawn().expect("spawn");
    let (co, _) = finish(cp, Duration::from_secs(30));
    let (so, _) = finish(sp, Duration::from_secs(10));
    let err = text(&so.stderr) + &text(&so.stdout);
    assert!(!so.status.success() && !co.status.success(), "{err}");
    assert!(err.contains("start both sides with the same -q"), "{err}");
}

fn with<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<&'a str> {
    a.iter().chain(b).copied().collect()
}

fn cli_q<'a>(a: &[&'a str]) -> Vec<&'a str> {
    let mut v = a.to_vec();
    v.extend(["-x", "1", "-q", "2", "-n", "10"]);
    v
}
