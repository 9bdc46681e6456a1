//! Verbs and RDMA CM semantics that middleware (UCX, libfabric, qperf) and
//! rdma-core's own tools rely on, as rdma-core 44 on kernel rxe (or a RoCE
//! NIC) gives them, checked through the drop-in:
//!
//! - `ah_attr.grh.flow_label = 0xFFFFFFFF` is taken (the low 20 bits kept);
//! - every failing verb that returns an error number leaves it in `errno`;
//! - UD receive completions as a RoCE v2 NIC reports them (`sl` = the
//!   network header type, `IBV_WC_GRH`, `src_qp`, the GRH area's IP header);
//! - `max_inline_data` rounded up as rxe sizes a send WQE;
//! - `rdma_bind_addr` to port 0 assigns an ephemeral port;
//!   `rdma_getaddrinfo(NULL, NULL, &hints)` answers from the hints;
//! - rdma-core's `rdma_xserver`/`rdma_xclient` and `cmtime`.
//!
//! The C programs `tests/c/semantics_check.c` and `tests/c/cm_ports_check.c`
//! print one `ok`/`FAIL` line per check. Tests that need something not
//! installed (cc and the rdma-core headers, rdmacm-utils) print
//! `SKIPPED: ...` and return. Every process runs under a deadline and is
//! killed by its PID after it. Each test has its own loopback addresses
//! (127.0.91.x to 127.0.95.x) and ports (18800 to 18850).

use crate::common;
use common::{finish, need, report, skipped, text, Finished};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// This executable's directory of drop-in links (see [`common::drop_in_dir`]).
fn lib_dir() -> PathBuf {
    common::drop_in_dir("semantics-test-lib", &["libibverbs.so.1", "librdmacm.so.1"])
}

/// A command on the drop-in with the devices `devs`.
fn cmd(prog: &Path, devs: &str, args: &[&str]) -> Command {
    common::drop_in_cmd(prog, &lib_dir(), devs, args)
}

/// semantics_check, compiled once for the tests of this executable (they
/// run at once: one compile, not several writing the same file).
fn semantics_check() -> Option<PathBuf> {
    common::compile_verbs_c_once("semantics_check", &lib_dir())
}

/// Run one part of semantics_check; it must exit 0 with every `must`
/// line and no FAIL. Returns its output.
fn run_part(part: &str, devs: &str, must: &[&str]) -> Option<String> {
    let exe = semantics_check()?;
    let child = cmd(&exe, devs, &[part]).spawn().expect("spawn semantics_check");
    let (o, timed_out) = finish(child, Duration::from_secs(60));
    let out = text(&o.stdout);
    if o.status.code() == Some(77) {
        skipped(&format!("semantics_check {part}: {}", out.trim()));
        return None;
    }
    assert!(!timed_out && o.status.success(), "{part}:\n{out}{}", text(&o.stderr));
    assert!(!out.contains("FAIL"), "{part}:\n{out}");
    for m in must {
        assert!(out.contains(m), "{part}: missing {m:?} in\n{out}");
    }
    assert!(out.contains("0 failures"), "{part}:\n{out}");
    Some(out)
}

// ---------------------------------------------------------------- verbs

#[test]
fn flow_label_all_ones_is_taken_and_its_low_20_bits_kept() {
    run_part(
        "flow",
        &common::two_devices(91),
        &[
            "ok   ibv_modify_qp to RTR with flow_label 0xFFFFFFFF: 0",
            "ok   ibv_query_qp: flow_label 0xfffff (the low 20 bits)",
            "ok   ibv_query_qp: flow_label 0x45678",
            "ok   the peer received \"flow label ~0 works\"",
            "ok   ibv_create_ah with flow_label 0xFFFFFFFF",
        ],
    );
}

#[test]
fn every_failing_verb_sets_errno() {
    run_part(
        "errno",
        &common::two_devices(92),
        &[
            "ok   ibv_modify_qp RESET->RTR: returns 22, errno 22 (EINVAL)",
            "ok   ibv_modify_qp RTR without GRH: returns 22, errno 22 (EINVAL)",
            "ok   ibv_post_send in INIT: returns 22, errno 22 (EINVAL), bad_wr set",
            "ok   ibv_post_send with 600 inline bytes: returns 22, errno 22 (EINVAL)",
            "ok   ibv_post_recv with 4 SGEs (max 1): returns 22, errno 22 (EINVAL)",
            "ok   ibv_post_recv on a full queue: returns 12, errno 12 (ENOMEM)",
            "ok   ibv_query_port port 2: returns 22, errno 22 (EINVAL)",
            "ok   ibv_query_gid_ex of an empty entry: returns 61, errno 61 (ENODATA)",
            "ok   ibv_query_gid_table into 1 entry: returns -22, errno 22 (EINVAL)",
            "ok   ibv_destroy_cq with a QP on it: returns 16, errno 16 (EBUSY)",
            "ok   ibv_dealloc_pd with a QP on it: returns 16, errno 16 (EBUSY)",
            "ibv_import_device of it: NULL, errno 95 (EOPNOTSUPP)",
            "ok   ibv_resize_cq to 0: returns 22, errno 22 (EINVAL)",
            "ok   ibv_destroy_comp_channel with a CQ on it: returns 16, errno 16 (EBUSY)",
            "ok   ibv_post_srq_recv with 4 SGEs: returns 22, errno 22 (EINVAL)",
            "ok   ibv_modify_srq IBV_SRQ_MAX_WR 4 -> 8: returns 0, max_wr 8",
            "ok   ibv_modify_srq IBV_SRQ_MAX_WR below the 6 WRs queued: returns 22, errno 22 (EINVAL)",
            "ok   ibv_modify_srq IBV_SRQ_MAX_WR 0: returns 22, errno 22 (EINVAL)",
            "ok   ibv_modify_srq to 16 with limit 16: returns 22, errno 22 (EINVAL), max_wr stays 8",
            "ok   ibv_modify_srq to 16 with limit 3: returns 0, max_wr 16, limit 3",
            "ok   ibv_destroy_srq with a QP on it: returns 16, errno 16 (EBUSY)",
            "ok   ibv_attach_mcast of an RC QP to a unicast GID: returns 22, errno 22 (EINVAL)",
            "ok   ibv_wr_complete in RESET: returns 22, errno 22 (EINVAL)",
            "ok   ibv_create_cq with 0 entries: NULL, errno 22 (EINVAL)",
            "ok   ibv_create_qp with max_inline_data 100000: NULL, errno 22 (EINVAL)",
            "ok   ibv_reg_mr of unmapped memory: NULL, errno 14 (EFAULT)",
            "ok   ibv_create_ah without GRH: NULL, errno 22 (EINVAL)",
            "ok   ibv_destroy_qp: 0, errno untouched",
        ],
    );
}

/// The lines of a UD exchange's checks common to IPv4 and IPv6.
const UD_COMMON: [&str; 7] = [
    "ok   receive completion: success",
    "ok   byte_len 72 (40 GRH + 32)",
    "ok   wc_flags 0x1 has IBV_WC_GRH",
    "ok   slid 0, dlid_path_bits 0, pkey_index 0 (RoCE: 0)",
    "ok   the 32 payload bytes follow the 40-byte GRH area",
    "ok   ibv_init_ah_from_wc: back to the sender's GID (0)",
    "is the sender's QPN",
];

#[test]
fn ud_receive_completion_over_ipv4_is_a_roce_v2_nics() {
    let mut must = UD_COMMON.to_vec();
    must.extend([
        "ok   sl 2: the network header type (mlx5's IPv4 packet type 2)",
        "ok   GRH area bytes 0..20 are zero (rxe)",
        "ok   byte 20: 0x45, an IPv4 header (version 4, IHL 5)",
        "ok   IPv4 total length 84 (IP 20 + UDP 8 + BTH 12 + DETH 8 + 32 + ICRC 4)",
        "ok   TTL 64, protocol 17 (UDP)",
        "ok   IPv4 header checksum is valid",
        "ok   source 127.0.93.2 and destination 127.0.93.3 are the devices'",
        "ok   ibv_start_poll: the receive (0)",
        "ok   ibv_wc_read_*: sl 2, src_qp",
    ]);
    run_part("ud", &common::two_devices(93), &must);
}

#[test]
fn ud_receive_completion_over_ipv6_is_a_roce_v2_nics() {
    // one device on ::1 (the only IPv6 loopback address), two QPs on it
    let taken = std::fs::read_to_string("/proc/net/udp6").is_ok_and(|t| {
        t.lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some("00000000000000000000000001000000:12B7"))
    });
    if taken {
        skipped("[::1]:4791 is in use (another device on ::1)");
        return;
    }
    let mut must = UD_COMMON.to_vec();
    must.extend([
        "ok   GID index 1 is ::1, the device's IPv6 address",
        "ok   sl 1: the network header type (mlx5's IPv6 packet type 1)",
        "ok   byte 0: 0x60, an IPv6 header",
        "ok   IPv6 payload length 64 (UDP 8 + BTH 12 + DETH 8 + 32 + ICRC 4)",
        "ok   next header 17 (UDP), hop limit 64",
        "ok   source and destination GIDs are the devices'",
    ]);
    run_part("ud6", "roce0=udp:[::1]:4791", &must);
}

#[test]
fn max_inline_data_is_rounded_up_as_rxe_does() {
    run_part(
        "inline",
        &common::two_devices(94),
        &[
            "ok   max_send_sge 1, max_inline_data 0: created with 1, 16; queried 1, 16",
            "ok   max_send_sge 1, max_inline_data 100: created with 6, 100; queried 6, 100",
            "ok   max_send_sge 4, max_inline_data 0: created with 4, 64; queried 4, 64",
            "ok   max_send_sge 2, max_inline_data 512: created with 32, 512; queried 32, 512",
            "ok   16-byte inline SEND on a QP made with max_inline_data 0: 0, success",
            "ok   the peer received \"sixteen bytes!!!\"",
            "ok   17 inline bytes on it: returns 22, errno 22 (EINVAL)",
        ],
    );
}

// ---------------------------------------------------------------- RDMA CM

#[test]
fn rdma_bind_addr_port_zero_and_getaddrinfo_from_hints() {
    let Some(exe) = common::compile_rdmacm_c("cm_ports_check", &lib_dir()) else { return };
    let child =
        cmd(&exe, &common::two_devices(95), &["127.0.95.2", "127.0.95.3"]).spawn().expect("spawn");
    let (o, timed_out) = finish(child, Duration::from_secs(90));
    let out = text(&o.stdout);
    assert!(!timed_out && o.status.success(), "{out}{}", text(&o.stderr));
    assert!(!out.contains("FAIL"), "{out}");
    for m in [
        "ok   rdma_bind_addr(127.0.95.2:0): rdma_get_src_port ",
        "ok   rdma_listen: still port ",
        "ok   50 ids bound to 127.0.95.2:0 and 10 to 0.0.0.0:0: 60 distinct ports in the range",
        "ok   an RDMA_PS_UDP id bound to port 0: port ",
        "ok   rdma_listen without a bind: listening on port ",
        "ok   the client's rdma_resolve_addr without a port: source port ",
        "ok   a client connected to the published port ",
        "ok   rdma_getaddrinfo(NULL, NULL, NULL): -1, errno 22 (EINVAL)",
        "ok   rdma_getaddrinfo(NULL, NULL, &hints): 0",
        "ok   ai_dst_addr: a copy of the hints' destination",
        "ok   ai_src_addr: a copy of the hints' source",
        "ok   family 2, qp_type 2, port_space 0x106, flags 0 from the hints",
        "ok   rdma_create_ep on the answer: 0",
        "ok   rdma_connect of the endpoint: 0",
        "ok   the listener accepted 2 requests, 2 ESTABLISHED",
        "ok   rdma_getaddrinfo(NULL, NULL, passive hints): the source, no destination",
        "ok   rdma_bind_addr(127.0.0.1:0): on the first device (roce0)",
        "ok   rdma_resolve_addr(127.0.0.1): the first device's address, 127.0.95.2",
        "0 failures",
    ] {
        assert!(out.contains(m), "missing {m:?} in\n{out}");
    }
}

// ---------------------------------------------------------------- rdma-core's tools

/// [`common::server_then_client`] with a minute for the client.
fn server_then_client(
    server: Command,
    client: Command,
    dev: [u8; 4],
    server_limit: Duration,
) -> (Finished, Finished) {
    common::server_then_client(server, client, dev, Duration::from_secs(60), server_limit)
}

/// rdma-core's XRC examples in their RC mode: `rdma_xclient` posts a
/// 16-byte inline SEND on a QP it made with `max_inline_data` 0 (it failed
/// with `post_send: Invalid argument` before the rounding), `rdma_xserver`
/// binds the wildcard address through `rdma_getaddrinfo(NULL, port)`. Both
/// ends on roce0: the only device configured.
#[test]
fn rdma_xserver_and_rdma_xclient_both_on_roce0() {
    let Some(srv) = need("rdma_xserver", "rdmacm-utils") else { return };
    let Some(cli) = need("rdma_xclient", "rdmacm-utils") else { return };
    let devs = "roce0=udp:127.0.91.12";
    let r = server_then_client(
        cmd(&srv, devs, &["-p", "18811"]),
        cmd(&cli, devs, &["-s", "127.0.91.12", "-p", "18811"]),
        [127, 0, 91, 12],
        Duration::from_secs(15),
    );
    let rep = report("rdma_xserver/rdma_xclient", &r.0, &r.1);
    let ((c, ct), (s, st)) = (&r.0, &r.1);
    assert!(!ct && !st && c.status.success() && s.status.success(), "{rep}");
    assert!(text(&c.stdout).contains("rdma_xclient: end 0"), "{rep}");
    assert!(text(&s.stdout).contains("rdma_xserver: end 0"), "{rep}");
}

/// rdma-core 44's `cmtime`: the client (`-s ADDR -c N`) creates N ids,
/// resolves, creates QPs, connects and disconnects them all, prints the
/// time of each step and exits 0. The server (`-b ADDR`) accepts them and
/// never exits: cmtime 44's server loops on `rdma_get_cm_event` until it
/// fails (on kernel rxe too; later rdma-core versions added an exit), so
/// the test checks it is still running and then ends it by its PID.
#[test]
fn cmtime_connects_and_disconnects_every_id() {
    let Some(tool) = need("cmtime", "rdmacm-utils") else { return };
    let devs = "roce0=udp:127.0.92.12,roce1=udp:127.0.92.13";
    for (n, port) in [("10", "18812"), ("100", "18813")] {
        let mut server = cmd(&tool, devs, &["-b", "127.0.92.12", "-p", port]);
        server.env("ROCE_EMU_VERBOSE", "1");
        let mut client = cmd(&tool, devs, &["-s", "127.0.92.12", "-p", port, "-c", n]);
        client.env("ROCE_EMU_VERBOSE", "1");
        // the server is ended 1 s after the client (it would run forever)
        let r = server_then_client(server, client, [127, 0, 92, 12], Duration::from_secs(1));
        let rep = report(&format!("cmtime -c {n}"), &r.0, &r.1);
        let ((c, ct), (s, st)) = (&r.0, &r.1);
        assert!(!ct && c.status.success(), "{rep}");
        assert!(*st, "the server should still be running: {rep}");
        let out = text(&c.stdout);
        for step in [
            "create id",
            "resolve addr",
            "resolve route",
            "create qp",
            "connect",
            "disconnect",
            "destroy",
        ] {
            assert!(
                out.lines().any(|l| l.starts_with(&format!("{step:<13}:"))),
                "no {step:?} line: {rep}"
            );
        }
        assert!(!out.contains("error") && !out.contains("failure"), "{rep}");
        let n: usize = n.parse().expect("n");
        let cerr = text(&c.stderr);
        let serr = text(&s.stderr);
        let count = |t: &str, ev: &str| t.matches(&format!("rdma_cm: {ev} status 0")).count();
        assert_eq!(count(&cerr, "RDMA_CM_EVENT_ESTABLISHED"), n, "{rep}");
        assert_eq!(count(&cerr, "RDMA_CM_EVENT_DISCONNECTED"), n, "{rep}");
        assert_eq!(count(&serr, "RDMA_CM_EVENT_CONNECT_REQUEST"), n, "{rep}");
        assert_eq!(count(&serr, "RDMA_CM_EVENT_ESTABLISHED"), n, "{rep}");
        assert_eq!(count(&serr, "RDMA_CM_EVENT_DISCONNECTED"), n, "{rep}");
    }
}

// ---------------------------------------------------------------- multicast

/// mcast_check (tests/c/mcast_check.c), compiled once.
fn mcast_check() -> Option<PathBuf> {
    common::compile_verbs_c_once("mcast_check", &lib_dir())
}

#[test]
fn multicast_verbs_deliver_to_attached_qps_with_rxes_errnos() {
    let Some(exe) = mcast_check() else { return };
    let out = common::run_within(
        cmd(&exe, "roce0=udp:127.0.124.2", &["verbs", "239.124.0.1"]),
        Duration::from_secs(60),
    );
    let s = common::passed_all(&out, "mcast_check verbs");
    for must in [
        "ok   ibv_query_device: max_mcast_grp 8192, max_mcast_qp_attach 56",
        "ok   both attached QPs got the datagram",
        "ok   no completion for the QP with another Q_Key",
        "ok   attach to a unicast GID: EINVAL",
        "ok   attach of an RC QP: EINVAL",
        "ok   ibv_destroy_qp of an attached QP: EBUSY",
        "ok   after the detaches nothing is received",
    ] {
        assert!(s.contains(must), "{must}\n{s}");
    }
}

/// Three receiver processes on one shared device and one on a second
/// device each get every datagram a fifth process sends to the group,
/// byte for byte.
#[test]
fn multicast_reaches_every_process_of_a_shared_device_and_another_device() {
    let Some(exe) = mcast_check() else { return };
    let devs = "roce0=udp:127.0.125.2";
    let other = "roce0=udp:127.0.125.3";
    let group = "239.125.0.1";
    let dir = std::env::temp_dir().join(format!("roce-mcast-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let n = "25";
    let mut rx = Vec::new();
    for i in 0..4 {
        let ready = dir.join(format!("ready{i}"));
        let d = if i < 3 { devs } else { other };
        let mut c = cmd(&exe, d, &["recv", group, n, ready.to_str().unwrap()]);
        rx.push((c.spawn().expect("spawn mcast_check recv"), ready));
    }
    let end = std::time::Instant::now() + Duration::from_secs(20);
    while rx.iter().any(|(_, r)| !r.exists()) && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let sender = common::run_within(cmd(&exe, devs, &["send", group, n]), Duration::from_secs(30));
    let s = common::passed_all(&sender, "mcast_check send");
    assert!(s.contains("ok   sent 25 datagrams"), "{s}");
    for (i, (child, _)) in rx.into_iter().enumerate() {
        let (o, killed) = finish(child, Duration::from_secs(30));
        assert!(!killed, "receiver {i} hung:\n{}", text(&o.stdout));
        let r = common::passed_all(&o, &format!("receiver {i}"));
        assert!(r.contains("ok   received 25 of 25 datagrams"), "receiver {i}:\n{r}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------- on-demand paging

#[test]
fn on_demand_regions_explicit_implicit_advise_and_faults() {
    let Some(exe) = common::compile_verbs_c_once("odp_check", &lib_dir()) else { return };
    let out =
        common::run_within(cmd(&exe, &common::two_devices(128), &[]), Duration::from_secs(60));
    let s = common::passed_all(&out, "odp_check");
    for must in [
        "ok   odp_caps.general_caps: ODP_SUPPORT and IMPLICIT",
        "ok   rc_odp_caps 0xff, ud_odp_caps 0x23, uc 0",
        "ok   with IBV_ACCESS_ON_DEMAND it registers",
        "ok   a peer's WRITE into a mapped page of the ODP region lands",
        "ok   ibv_advise_mr(PREFETCH, FLUSH) of the unmapped page: EFAULT",
        "ok   a WRITE into the page mapped after registration lands",
        "ok   a WRITE through the implicit rkey into memory allocated after it lands",
        "ok   a WRITE through the implicit rkey to address 0x10 (not mapped): REM_ACCESS_ERR",
        "ok   a READ of the explicit region's page unmapped again: REM_ACCESS_ERR",
    ] {
        assert!(s.contains(must), "{must}\n{s}");
    }
}

// ---------------------------------------------------------------- XRC

#[test]
fn xrc_domains_srqs_initiator_and_target_bytes_and_errnos() {
    let Some(exe) = common::compile_verbs_c_once("xrc_check", &lib_dir()) else { return };
    let out =
        common::run_within(cmd(&exe, &common::two_devices(130), &[]), Duration::from_secs(60));
    let s = common::passed_all(&out, "xrc_check");
    for must in [
        "ok   ibv_open_xrcd of a file with no domain, without O_CREAT: EAGAIN",
        "ok   the second SRQ's receive: its CQ, 300 bytes, the target's QPN, the bytes",
        "ok   an RDMA WRITE through the target lands",
        "ok   closing the last handle while SRQs and the QP use it: EBUSY",
        "ok   a SEND naming another domain's SRQ: REM_INV_REQ_ERR",
    ] {
        assert!(s.contains(must), "{must}\n{s}");
    }
}

/// A program of `tests/c/` talked to line by line (stdin and stdout
/// piped; stderr kept); killed (by its PID) when dropped unfinished.
struct Talk {
    child: Option<std::process::Child>,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
    what: &'static str,
}

impl Talk {
    fn spawn(mut c: Command, what: &'static str) -> Talk {
        use std::io::BufRead;
        c.stdin(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let out = child.stdout.take().expect("stdout piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Talk { stdin: child.stdin.take(), child: Some(child), lines, seen: Vec::new(), what }
    }

    /// The next line starting with `prefix` (30 s at most), split in words.
    fn expect(&mut self, prefix: &str) -> Vec<String> {
        let end = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with(prefix) {
                        return l.split_whitespace().map(str::to_string).collect();
                    }
                }
                Err(_) => {
                    let (out, _) = finish(self.child.take().expect("running"), Duration::ZERO);
                    panic!(
                        "{}: no line {prefix:?}\n{}\nstderr:\n{}",
                        self.what,
                        self.seen.join("\n"),
                        text(&out.stderr)
                    );
                }
            }
        }
    }

    fn say(&mut self, line: &str) {
        use std::io::Write;
        let w = self.stdin.as_mut().expect("stdin piped");
        writeln!(w, "{line}").unwrap_or_else(|e| panic!("{}: write: {e}", self.what));
    }

    /// Its end (30 s at most): every line it printed; it must exit 0.
    fn finish(mut self) -> String {
        drop(self.stdin.take());
        let (out, killed) = finish(self.child.take().expect("running"), Duration::from_secs(30));
        // every line it printed: the reader thread ends at the pipe's end
        // (its sender goes with it); 5 s at most for the last of them
        let end = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => break,
            }
        }
        let all = self.seen.join("\n");
        assert!(
            !killed && out.status.success(),
            "{} ({:?}, killed {killed}):\n{all}\nstderr:\n{}",
            self.what,
            out.status,
            text(&out.stderr)
        );
        all
    }
}

impl Drop for Talk {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One XRC domain shared by two processes of one device
/// (`tests/c/xrc_share_check.c`): the owner's target QP takes SENDs for
/// its own SRQ and for the other process's, and WRITE, WRITE with
/// immediate, READ and FETCH_ADD on the other process's memory, from an
/// initiator on a second device; the other process opens the domain
/// without O_CREAT and the target with `ibv_open_qp`.
#[test]
fn xrc_domain_shared_by_two_processes_of_one_device() {
    let Some(exe) = common::compile_verbs_c_once("xrc_share_check", &lib_dir()) else { return };
    let devs = common::two_devices(133);
    let dir = std::env::temp_dir().join(format!("roce-xrc-share-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("domain");
    let f = file.to_str().expect("utf-8 path");
    // recorded (the programs exit without ibv_close_device: the drop-in
    // flushes the recordings at exit)
    let pcaps = dir.join("pcap");
    std::fs::create_dir_all(&pcaps).expect("pcap dir");
    let cmd = |exe: &Path, devs: &str, args: &[&str]| {
        let mut c = cmd(exe, devs, args);
        c.env("ROCE_EMU_PCAP", &pcaps);
        c
    };
    let mut owner = Talk::spawn(cmd(&exe, &devs, &["owner", f]), "owner");
    let o = owner.expect("owner tgt");
    let (tgt, srq_o, ogid) = (&o[2], &o[4], &o[6]);
    let mut member = Talk::spawn(cmd(&exe, &devs, &["member", f]), "member");
    member.say(&format!("tgt {tgt}"));
    let m = member.expect("member srq");
    let (srq_m, rkey, addr) = (&m[2], &m[4], &m[6]);
    let mut ini = Talk::spawn(cmd(&exe, &devs, &["ini"]), "initiator");
    let i = ini.expect("ini qpn");
    owner.say(&format!("peer {} {}", i[2], i[4]));
    owner.expect("owner ready");
    ini.say(&format!("go {tgt} {srq_o} {srq_m} {rkey} {addr} {ogid}"));
    let ini_out = ini.finish();
    member.expect("member done");
    member.say("bye");
    owner.say("bye");
    let (m_out, o_out) = (member.finish(), owner.finish());
    // the owner's recording, whole: the initiator's 12 request packets,
    // an EXEC to the member for each of the 11 that name its SRQ, their
    // verdicts, and ACKs back
    let read = |name: &str| {
        let frames = roce_pcap::read_capture_file(&pcaps.join(name)).expect("a recording");
        frames.into_iter().filter_map(|fr| fr.data.get(14 + 20 + 8..).map(<[u8]>::to_vec))
    };
    let (owner_bths, member_bths): (Vec<_>, Vec<_>) =
        (read("roce0-127.0.133.2.pcap").collect(), read("roce0-127.0.133.2.s1.pcap").collect());
    let _ = std::fs::remove_dir_all(&dir);
    let count = |bths: &[Vec<u8>], f: &dyn Fn(&[u8]) -> bool| bths.iter().filter(|b| f(b)).count();
    // XRC requests: SEND, WRITE and READ 0xA0..=0xAC, atomics 0xB3/0xB4;
    // READ responses 0xAD..=0xB0, the atomic ACK 0xB2
    let request = |b: &[u8]| (0xA0..=0xAC).contains(&b[0]) || (0xB3..=0xB4).contains(&b[0]);
    let answer = |b: &[u8]| (0xAD..=0xB0).contains(&b[0]) || b[0] == 0xB2;
    let execs = count(&owner_bths, &|b| b[0] == 0xFC && b[1] == 1);
    let verdicts = count(&owner_bths, &|b| b[0] == 0xFC && b[1] == 2);
    assert_eq!(
        (count(&owner_bths, &request), execs, verdicts),
        (12, 11, 11),
        "the owner's recording: the 12 request packets, 11 relayed and answered"
    );
    assert!(count(&owner_bths, &|b| b[0] == 0xB1) >= 1, "the owner's XRC ACKs");
    assert_eq!(
        count(&owner_bths, &answer),
        0,
        "READ responses and atomic ACKs leave from the member"
    );
    assert_eq!(count(&member_bths, &answer), 4, "the member: 3 READ responses, 1 atomic ACK");
    let all = format!("{o_out}\n{m_out}\n{ini_out}");
    assert!(!all.contains("FAIL"), "{all}");
    for must in [
        "ok   member: ibv_open_xrcd without O_CREAT: the other process's domain",
        "ok   member: O_CREAT | O_EXCL while another process has the domain: EINVAL",
        "ok   member: ibv_open_qp of the owner's target QP",
        "ok   member: a 5000-byte SEND (5 packets), the bytes",
        "ok   member: a WRITE with immediate: 32 bytes in place, the immediate",
        "ok   member: FETCH_ADD of 5 on its memory: 12",
        "ok   owner: the SEND to its own SRQ: 300 bytes, the target's QPN, the bytes",
        "ok   ini: the READ brought the member's bytes",
        "ok   ini: FETCH_ADD returned the member's value: 7",
    ] {
        assert!(all.contains(must), "{must}\n{all}");
    }
    assert_eq!(all.matches("0 failures").count(), 3, "{all}");
}

/// rdma-core's `ibv_xsrq_pingpong`: a server with two clients, each in
/// its own process, every message through the server's one XRC SRQ.
#[test]
fn xsrq_pingpong_two_clients_events_and_multi_packet_messages() {
    let Some(tool) = common::need("ibv_xsrq_pingpong", "ibverbs-utils") else { return };
    let net = 131;
    let port = "18631";
    let args = ["-g", "1", "-m", "1024", "-p", port, "-n", "20", "-s", "5000", "-e"];
    let mut sa = vec!["-d", "roce0", "-c", "2"];
    sa.extend(args);
    let mut server = cmd(&tool, &common::two_devices(net), &sa);
    let s = server.spawn().expect("spawn server");
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while !common::device_bound([127, 0, net, 2]) && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let mut ca = vec!["-d", "roce1"];
            ca.extend(args);
            ca.push("127.0.0.1");
            cmd(&tool, &common::two_devices(net), &ca).spawn().expect("spawn client")
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let (o, killed) = finish(c, Duration::from_secs(60));
        let t = text(&o.stdout) + &text(&o.stderr);
        assert!(!killed && o.status.success() && t.contains("success"), "client {i}:\n{t}");
        assert!(t.contains(&format!("GID ::ffff:127.0.{net}.2")), "client {i}:\n{t}");
    }
    let (o, killed) = finish(s, Duration::from_secs(30));
    let t = text(&o.stdout) + &text(&o.stderr);
    assert!(!killed && o.status.success() && t.contains("success"), "server:\n{t}");
    assert_eq!(t.matches("remote: LID").count(), 2, "{t}");
}
