//! One device (UDP, and raw in a namespace of the test's own when root)
//! shared by many processes, through the drop-in: Debian's
//! rdma-core tools and perftest with BOTH ends on `roce0` (two members of
//! one SO_REUSEPORT group, steered by the QPN's top byte, the member's
//! slot), `ibv_devinfo` joining and leaving while traffic flows, 16 pairs
//! (32 members) at once, and members killed with SIGKILL while the others
//! keep going and new ones take the dead members' slots.
//!
//! Tests that need something not installed (ibverbs-utils, perftest)
//! print `SKIPPED: ...` and return. Every process runs under a deadline
//! and is killed by its PID after it (a process that missed its deadline
//! is described in the failure: threads, group lock holder, stacks). The
//! tests use their own loopback addresses (127.0.80.2 .. 127.0.88.2) and
//! TCP ports 18680..18699 (the tests that use 18684..18699 take turns).
//!
//! `sixteen_short_pairs_end_together` guards against a hang found with
//! these tests: a member that ended could hold the device's group lock for
//! 20 s (its steward re-mapped after its engine had stopped and waited for
//! its own probe answer), stalling members that joined or left meanwhile.

// An executable of its own (roce-tests' `libibverbs_shared_device`), as
// before the tests were folded: up to 32 processes at a time want no other
// test of the drop-in (valgrind, perftest) running beside them.
#[path = "common/mod.rs"]
mod common;
const CRATE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../libibverbs");
use common::{assert_perftest_result, need, text, which};

use std::collections::BTreeSet;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// This executable's directory of drop-in links (see [`common::drop_in_dir`]).
fn lib_dir() -> std::path::PathBuf {
    common::drop_in_dir("shared-test-lib", &["libibverbs.so.1"])
}

/// A command on the drop-in with the test's own devices
/// (roce0 = 127.0.`net`.2, roce1 = 127.0.`net`.3).
fn cmd(prog: &Path, net: u8, args: &[&str]) -> Command {
    let mut c = common::drop_in_cmd(prog, &lib_dir(), &common::two_devices(net), args);
    c.env_remove("ROCE_EMU_SHARED");
    // stdout line-buffered (coreutils' stdbuf, by hand): a tool killed
    // after its deadline still shows what it printed before it hung
    if Path::new(STDBUF).exists() {
        c.env("LD_PRELOAD", STDBUF).env("_STDBUF_O", "L");
    }
    c
}

const STDBUF: &str = "/usr/libexec/coreutils/libstdbuf.so";

/// Where a test's processes run and which device roce0 is.
enum Site {
    /// roce0 = udp:127.0.`net`.2 (see [`cmd`]).
    Udp(u8),
    /// roce0 = raw:vsa:10.`net`.0.1 in a network namespace of the test's
    /// own ([`RawNs`]).
    Raw(RawNs),
}

/// A network namespace made by a test, with a veth pair (`vsa`, `vsb`)
/// inside it and 10.`net`.0.1/24 on `vsa`; a process sleeping in it shows
/// its TCP listeners (`/proc/PID/net/tcp`). Deleted on drop.
struct RawNs {
    name: String,
    net: u8,
    sleeper: Proc,
}

impl RawNs {
    /// `None` (after printing SKIPPED) where namespaces cannot be made
    /// (not root, no `ip`).
    fn new(net: u8) -> Option<RawNs> {
        let name = format!("roceshr-{}-{net}", std::process::id());
        let ip = |args: &[&str]| -> Result<(), String> {
            let o = Command::new("ip").args(args).stdin(Stdio::null()).output();
            match o {
                Ok(o) if o.status.success() => Ok(()),
                Ok(o) => Err(format!("ip {args:?}: {}", text(&o.stderr).trim())),
                Err(e) => Err(format!("ip: {e}")),
            }
        };
        if let Err(e) = ip(&["netns", "add", &name]) {
            eprintln!("SKIPPED: cannot create a network namespace (needs root and iproute2): {e}");
            return None;
        }
        let addr = format!("10.{net}.0.1/24");
        let setup = [
            vec!["-n", &name, "link", "add", "vsa", "type", "veth", "peer", "name", "vsb"],
            vec!["-n", &name, "addr", "add", &addr, "dev", "vsa"],
            vec!["-n", &name, "link", "set", "vsa", "up"],
            vec!["-n", &name, "link", "set", "vsb", "up"],
            vec!["-n", &name, "link", "set", "lo", "up"],
        ];
        for a in &setup {
            if let Err(e) = ip(a) {
                let _ = ip(&["netns", "del", &name]);
                eprintln!("SKIPPED: cannot set up namespace {name} (veth?): {e}");
                return None;
            }
        }
        let sleeper = Proc::spawn(
            Command::new("ip").args(["netns", "exec", &name, "sleep", "300"]).stdin(Stdio::null()),
        );
        Some(RawNs { name, net, sleeper })
    }
}

impl Drop for RawNs {
    fn drop(&mut self) {
        if let Some(mut c) = self.sleeper.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

impl Site {
    /// A command on the drop-in at this site (see [`cmd`]).
    fn cmd<S: AsRef<std::ffi::OsStr>>(&self, prog: &Path, args: &[S]) -> Command {
        match self {
            Site::Udp(net) => {
                let mut c = cmd(prog, *net, &[]);
                c.args(args);
                c
            }
            Site::Raw(ns) => {
                let mut c = cmd(Path::new("ip"), ns.net, &["netns", "exec", &ns.name]);
                c.arg(prog)
                    .args(args)
                    .env("ROCE_EMU_DEVICES", format!("roce0=raw:vsa:10.{}.0.1", ns.net));
                c
            }
        }
    }

    /// Whether something listens on TCP `port` here.
    fn listening(&self, port: u16) -> bool {
        match self {
            Site::Udp(_) => listening("/proc/net", port),
            Site::Raw(ns) => {
                let pid = ns.sleeper.0.as_ref().map(|c| c.id()).unwrap_or(0);
                listening(&format!("/proc/{pid}/net"), port)
            }
        }
    }
}

/// What a process that missed its deadline is doing, for the failure
/// message: its threads' states, which process holds the group lock of
/// this test's devices (the device's membership is file locks), and, for
/// the first few hung processes when gdb is installed, the stacks of the
/// process and of the group lock's holder.
fn hang_evidence(pid: u32) -> String {
    let mut s = format!("\n[test] pid {pid} missed its deadline; its threads (state, wchan):\n");
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let p = t.path();
            let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default();
            let stat = read("stat");
            let state = stat.rsplit(')').next().and_then(|r| r.split_whitespace().next());
            s += &format!(
                "  {} {} {} {}\n",
                t.file_name().to_string_lossy(),
                read("comm").trim(),
                state.unwrap_or("?"),
                read("wchan")
            );
        }
    }
    let files = registry_files();
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let mut holders = Vec::new();
    for l in locks.lines() {
        // "1: FLOCK  ADVISORY  WRITE 16152 fe:00:10011871 0 EOF"
        let w: Vec<&str> = l.split_whitespace().collect();
        let inode = w.get(5).and_then(|d| d.rsplit(':').next()?.parse::<u64>().ok());
        let Some(path) = inode.and_then(|i| files.iter().find(|f| f.0 == i)) else { continue };
        if path.1.file_name().is_some_and(|n| n == "group") {
            let holder: u32 = w[4].parse().unwrap_or(0);
            let cmdline = std::fs::read(format!("/proc/{holder}/cmdline")).unwrap_or_default();
            let cmdline = text(&cmdline).replace('\0', " ");
            s += &format!("[test] {} held by pid {holder}: {cmdline}\n", path.1.display());
            holders.push(holder);
        }
    }
    for p in std::iter::once(pid).chain(holders.into_iter().filter(|h| *h != pid)) {
        s += &stacks(p);
    }
    s
}

/// gdb's `thread apply all bt` of `pid`, for at most 4 processes per test
/// run (each takes seconds).
fn stacks(pid: u32) -> String {
    static BUDGET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(4);
    let Some(gdb) = which("gdb") else { return String::new() };
    let dec = |b: usize| b.checked_sub(1);
    if BUDGET.fetch_update(Ordering::SeqCst, Ordering::SeqCst, dec).is_err() {
        return String::new();
    }
    // to a file: a pipe could fill up before gdb ends
    let file = std::env::temp_dir().join(format!("roce-shared-gdb-{pid}.txt"));
    let args = ["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt 12"];
    let mut s = format!("[test] gdb -p {pid}: thread apply all bt 12\n");
    if let Ok(child) = std::fs::File::create(&file).and_then(|f| {
        Command::new(gdb).args(args).stdin(Stdio::null()).stdout(f).stderr(Stdio::null()).spawn()
    }) {
        let _ = wait_output(Proc(Some(child)), Instant::now() + Duration::from_secs(30), false);
        s += &std::fs::read_to_string(&file).unwrap_or_default();
    }
    let _ = std::fs::remove_file(&file);
    s
}

/// (inode, path) of the membership files (group, slot-NN) of this test's
/// devices (127.0.8x.*) in the registry's default places.
fn registry_files() -> Vec<(u64, PathBuf)> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
    let mut roots = vec![PathBuf::from(format!("/tmp/roce-emu-{uid}"))];
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        roots.push(Path::new(&x).join("roce-emu"));
    }
    let mut v = Vec::new();
    for dev in roots.iter().filter_map(|r| std::fs::read_dir(r).ok()).flatten().flatten() {
        if !dev.file_name().to_string_lossy().starts_with("udp-127.0.8") {
            continue;
        }
        for f in std::fs::read_dir(dev.path()).into_iter().flatten().flatten() {
            if let Ok(m) = f.metadata() {
                v.push((m.ino(), f.path()));
            }
        }
    }
    v
}

/// A started process. If the test fails before [`finish`] took it, it is
/// killed (by its PID) and reaped: no tool outlives a failed test.
struct Proc(Option<Child>);

impl Proc {
    fn spawn(c: &mut Command) -> Proc {
        Proc(Some(c.spawn().unwrap_or_else(|e| panic!("spawn {:?}: {e}", c.get_program()))))
    }

    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, |c| c.id())
    }

    fn running(&mut self) -> bool {
        self.0.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILL now (`Child::kill`), and reap it.
    fn kill(mut self) -> ExitStatus {
        let mut c = self.0.take().expect("a child");
        c.kill().expect("SIGKILL");
        c.wait().expect("wait")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Wait for `child` at most `limit`; kill it (by its PID) after that.
fn finish(child: Proc, limit: Duration) -> (Output, bool) {
    finish_by(child, Instant::now() + limit)
}

/// Wait for `child` until `end`; kill it (by its PID) after that.
///
/// Its pipes are read only after it exits: the tools here print a few
/// lines, far below a pipe's capacity.
fn finish_by(child: Proc, end: Instant) -> (Output, bool) {
    wait_output(child, end, true)
}

/// [`finish_by`], with the evidence of a hang in its stderr if `evidence`.
fn wait_output(mut child: Proc, end: Instant, evidence: bool) -> (Output, bool) {
    let mut child = child.0.take().expect("a child");
    let timed_out = loop {
        match child.try_wait() {
            Ok(Some(_)) => break false,
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(10)),
            _ => break true,
        }
    };
    let mut err = Vec::new();
    if timed_out && evidence {
        err.extend_from_slice(hang_evidence(child.id()).as_bytes());
    }
    if timed_out {
        let _ = child.kill();
    }
    let mut out = Vec::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_end(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let mut e = Vec::new();
        let _ = s.read_to_end(&mut e);
        err.splice(0..0, e);
    }
    let status = child.wait().expect("wait");
    (Output { status, stdout: out, stderr: err }, timed_out)
}

/// Whether something listens on TCP `port` (IPv4 or IPv6), from `net`
/// (`/proc/net`, or `/proc/PID/net` for another namespace).
fn listening(net: &str, port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("{net}/{f}")).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                // local_address is column 1, st (0A = LISTEN) column 3
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// Wait (bounded) until servers listen on all `ports` at `site`, then a
/// little more.
fn wait_listening(site: &Site, ports: &[u16], limit: Duration) {
    let end = Instant::now() + limit;
    while !ports.iter().all(|p| site.listening(*p)) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(50));
}

/// A process's stdout and stderr, and how it ended, for a failure message.
fn report(who: &str, o: &Output, timed_out: bool) -> String {
    format!(
        "--- {who} (timed out: {timed_out}) {}\n{}{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    )
}

/// Run `server` on TCP `port` then (after it listens) `client`; both must
/// exit 0. Returns the client's and the server's output.
fn pair(mut server: Command, mut client: Command, port: u16, what: &str) -> (String, String) {
    let s = Proc::spawn(&mut server);
    wait_listening(&Site::Udp(0), &[port], Duration::from_secs(30));
    let c = Proc::spawn(&mut client);
    let (co, ct) = finish(c, Duration::from_secs(40));
    let (so, st) = finish(s, Duration::from_secs(10));
    let all = format!("{what}\n{}\n{}", report("client", &co, ct), report("server", &so, st));
    assert!(!ct && !st && co.status.success() && so.status.success(), "{all}");
    (text(&co.stdout) + &text(&co.stderr), text(&so.stdout) + &text(&so.stderr))
}

// ---------------------------------------------------------------- checks

/// What the pingpongs print (server side, with -c) when a received buffer
/// is wrong: they still exit 0.
fn data_error(out: &str) -> bool {
    out.contains("invalid data")
}

/// The QPNs of the "local address" (or "remote address") lines: the
/// pingpongs' `QPN 0x011011,` and perftest's `QPN 0x14011 `.
fn qpns(out: &str, which: &str) -> Vec<u32> {
    out.lines()
        .filter(|l| l.trim_start().starts_with(which))
        .filter_map(|l| {
            let hex = l.split("QPN 0x").nth(1)?;
            let end = hex.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(hex.len());
            u32::from_str_radix(&hex[..end], 16).ok()
        })
        .collect()
}

/// A member's slot: the top byte of its (24-bit) QPNs.
fn slot(qpn: u32) -> u32 {
    qpn >> 16
}

/// The one slot of all the local QPNs in `out` (a process is one member).
fn member_slot(out: &str, what: &str) -> u32 {
    let local = qpns(out, "local address:");
    assert!(!local.is_empty(), "{what}: no local QPN\n{out}");
    let slots: BTreeSet<u32> = local.iter().map(|q| slot(*q)).collect();
    assert_eq!(slots.len(), 1, "{what}: one process, QPNs of several slots {local:x?}\n{out}");
    slots.into_iter().next().expect("one slot")
}

/// Both sides of a pair on one device: the same GID everywhere, one slot
/// per side and not the same one, and each side's remote QPNs are the
/// other side's local QPNs.
fn check_two_members(c: &str, s: &str, gid_line: &str, what: &str) {
    for (who, out) in [("client", c), ("server", s)] {
        let addr: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("local address:") || l.contains("remote address:"))
            .collect();
        assert!(addr.len() >= 2, "{what}: {who}: no address lines\n{out}");
        // the pingpongs print the GID on the address line, perftest on a
        // "GID:" line after it
        let gids: Vec<&str> = out
            .lines()
            .filter(|l| l.trim_start().starts_with("GID:") || addr.contains(l))
            .filter(|l| l.contains("GID"))
            .collect();
        assert!(gids.len() >= 2, "{what}: {who}: no local and remote GID\n{out}");
        for l in gids {
            assert!(l.trim_end().ends_with(gid_line), "{what}: {who}: not {gid_line:?}: {l}");
        }
    }
    let (cs, ss) = (member_slot(c, &format!("{what} client")), member_slot(s, what));
    assert_ne!(cs, ss, "{what}: both ends in slot {cs}: not two members\n{c}\n{s}");
    assert_eq!(qpns(c, "remote address:"), qpns(s, "local address:"), "{what}\n{c}\n{s}");
    assert_eq!(qpns(s, "remote address:"), qpns(c, "local address:"), "{what}\n{c}\n{s}");
}

// ---------------------------------------------------------------- pingpongs

const PINGPONG_NET: u8 = 80;
const PINGPONG_PORT: u16 = 18680;

fn pingpong_one_device(tool: &str, extra: &[&str]) {
    let Some(p) = need(tool, "ibverbs-utils") else { return };
    let net = PINGPONG_NET;
    let port = PINGPONG_PORT.to_string();
    let mut sa = vec!["-d", "roce0", "-g", "1", "-p", &port];
    sa.extend_from_slice(extra);
    let mut ca = sa.clone();
    ca.push("127.0.0.1");
    let what = format!("{tool} {} (both ends on roce0)", extra.join(" "));
    let (c, s) = pair(cmd(&p, net, &sa), cmd(&p, net, &ca), PINGPONG_PORT, &what);
    assert!(common::iters_line(&c) && common::iters_line(&s), "{what}:\n{c}\n{s}");
    assert!(!data_error(&c) && !data_error(&s), "{what}: data error\n{c}\n{s}");
    check_two_members(&c, &s, &format!("GID ::ffff:127.0.{net}.2"), &what);
}

/// rc, uc, ud and srq pingpong with both ends on roce0, every byte checked
/// (-c), polling and sleeping on events. One test: one TCP port.
#[test]
fn pingpongs_with_both_ends_on_one_device() {
    for tool in ["ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_srq_pingpong"] {
        pingpong_one_device(tool, &["-n", "300", "-c"]);
        pingpong_one_device(tool, &["-n", "200", "-e", "-c", "-s", "3079"]);
    }
    pingpong_one_device("ibv_ud_pingpong", &["-n", "300", "-c"]);
    pingpong_one_device("ibv_ud_pingpong", &["-n", "200", "-e", "-c", "-s", "984"]);
}

// ---------------------------------------------------------------- perftest

fn perftest_one_device(tool: &str, n: &str) {
    let Some(p) = need(tool, "perftest") else { return };
    let net = 81;
    let port = 18681;
    let ps = port.to_string();
    let sa = ["-d", "roce0", "-x", "1", "-p", &ps, "-n", n];
    let mut ca = sa.to_vec();
    ca.push("127.0.0.1");
    let what = format!("{tool} -n {n} (both ends on roce0)");
    let (c, s) = pair(cmd(&p, net, &sa), cmd(&p, net, &ca), port, &what);
    assert_perftest_result(&c, &what);
    // perftest prints a GID on the line after each address line
    let gid = format!("GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:{net:02}:02");
    check_two_members(&c, &s, &gid, &what);
}

#[test]
fn perftest_with_both_ends_on_one_device() {
    perftest_one_device("ib_write_bw", "300");
    perftest_one_device("ib_read_lat", "200");
    perftest_one_device("ib_send_bw", "300");
}

// ---------------------------------------------------------------- devinfo

/// `ibv_devinfo -d roce0` joins and leaves the device three times while an
/// rc pingpong pair runs on it (sleeping on CQ events: a polling pair is
/// slow on a loaded host): devinfo sees the device, and the pair (every
/// byte checked) does not notice.
#[test]
fn devinfo_while_a_pair_runs_on_the_device() {
    let Some(pp) = need("ibv_rc_pingpong", "ibverbs-utils") else { return };
    let Some(di) = need("ibv_devinfo", "ibverbs-utils") else { return };
    let (net, port) = (82, 18682);
    let ps = port.to_string();
    let sa = ["-d", "roce0", "-g", "1", "-p", &ps, "-n", "20000", "-e", "-c"];
    let mut ca = sa.to_vec();
    ca.push("127.0.0.1");
    let server = Proc::spawn(&mut cmd(&pp, net, &sa));
    wait_listening(&Site::Udp(0), &[port], Duration::from_secs(30));
    let mut client = Proc::spawn(&mut cmd(&pp, net, &ca));
    std::thread::sleep(Duration::from_millis(300));
    let mut infos = Vec::new();
    for _ in 0..3 {
        let d = Proc::spawn(&mut cmd(&di, net, &["-d", "roce0"]));
        infos.push(finish(d, Duration::from_secs(20)));
        std::thread::sleep(Duration::from_millis(100));
    }
    let overlapped = client.running();
    let (co, ct) = finish(client, Duration::from_secs(60));
    let (so, st) = finish(server, Duration::from_secs(10));
    let (c, s) = (text(&co.stdout), text(&so.stdout));
    let all = format!("{}\n{}", report("client", &co, ct), report("server", &so, st));
    for (o, t) in &infos {
        let out = text(&o.stdout);
        let d = report("ibv_devinfo -d roce0", o, *t);
        assert!(!t && o.status.success(), "{d}\n{all}");
        assert!(out.starts_with("hca_id:\troce0\n"), "{d}");
        assert!(out.contains("PORT_ACTIVE"), "{d}");
    }
    assert!(!ct && !st && co.status.success() && so.status.success(), "{all}");
    assert!(common::iters_line(&c) && common::iters_line(&s), "{all}");
    assert!(!data_error(&c) && !data_error(&s), "data error\n{all}");
    check_two_members(&c, &s, &format!("GID ::ffff:127.0.{net}.2"), "rc pingpong");
    assert!(overlapped, "the pair ended before the last ibv_devinfo: raise -n\n{all}");
}

// ---------------------------------------------------------------- many

/// The many-process tests share TCP ports 18684..18699: one at a time.
static MANY_PORTS: Mutex<()> = Mutex::new(());

fn many_ports() -> std::sync::MutexGuard<'static, ()> {
    MANY_PORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running rc pingpong pair.
struct Pair {
    port: u16,
    server: Proc,
    client: Proc,
}

/// The ended pair: client's and server's output, each with whether it
/// timed out.
struct Ended {
    port: u16,
    client: (Output, bool),
    server: (Output, bool),
}

impl Ended {
    fn report(&self) -> String {
        format!(
            "pair on port {}\n{}\n{}",
            self.port,
            report("client", &self.client.0, self.client.1),
            report("server", &self.server.0, self.server.1)
        )
    }

    /// Both exited 0 with their result line and no data error; returns
    /// the client's and the server's slot.
    fn check(&self) -> (u32, u32) {
        let r = self.report();
        let (co, ct) = &self.client;
        let (so, st) = &self.server;
        assert!(!ct && !st && co.status.success() && so.status.success(), "{r}");
        let (c, s) = (text(&co.stdout), text(&so.stdout));
        assert!(common::iters_line(&c) && common::iters_line(&s), "no result line\n{r}");
        assert!(!data_error(&c) && !data_error(&s), "data error\n{r}");
        assert_eq!(qpns(&c, "remote address:"), qpns(&s, "local address:"), "{r}");
        (member_slot(&c, &r), member_slot(&s, &r))
    }
}

/// Start rc pingpong pairs (`-c`, every byte checked) on TCP `ports`, all
/// ends on roce0 of `net`: the servers first, the clients once every
/// server listens. Pair `i` sleeps on CQ events when `events(i)`, else
/// polls.
fn start_pairs(
    pp: &Path,
    site: &Site,
    ports: &[u16],
    iters: &str,
    events: impl Fn(usize) -> bool,
) -> Vec<Pair> {
    let args = |i: usize, port: &str| {
        let mut a = vec!["-d", "roce0", "-g", "1", "-p", port, "-n", iters, "-s", "1024", "-c"];
        if events(i) {
            a.push("-e");
        }
        a.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };
    let servers: Vec<Proc> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| Proc::spawn(&mut site.cmd(pp, &args(i, &p.to_string()))))
        .collect();
    wait_listening(site, ports, Duration::from_secs(30));
    servers
        .into_iter()
        .zip(ports)
        .enumerate()
        .map(|(i, (server, port))| {
            let mut a = args(i, &port.to_string());
            a.push("127.0.0.1".to_string());
            let client = Proc::spawn(&mut site.cmd(pp, &a));
            Pair { port: *port, server, client }
        })
        .collect()
}

/// Wait for every pair until `end` (each process killed by its PID after).
fn end_pairs(pairs: Vec<Pair>, end: Instant) -> Vec<Ended> {
    pairs
        .into_iter()
        .map(|p| Ended {
            port: p.port,
            client: finish_by(p.client, end),
            server: finish_by(p.server, end + Duration::from_secs(5)),
        })
        .collect()
}

/// 16 rc pingpong pairs (32 processes, 32 members) at once on one device,
/// 2 of them polling and 14 sleeping on CQ events (busy-polling
/// processes starve the others on a small host): all of them finish, every
/// byte checked, the two ends of each pair in two slots.
#[test]
fn sixteen_pairs_on_one_device() {
    let Some(pp) = need("ibv_rc_pingpong", "ibverbs-utils") else { return };
    let _turn = many_ports();
    sixteen_pairs(&pp, &Site::Udp(86));
}

/// The same on a raw device (AF_PACKET on a veth in a namespace of the
/// test's own; needs root): 32 members of one raw device, each taking
/// only its own frames by its socket filter, the two ends of each pair
/// reaching each other through the copy of each outgoing frame the
/// kernel gives the other packet sockets.
#[test]
fn sixteen_pairs_on_one_raw_device() {
    let Some(pp) = need("ibv_rc_pingpong", "ibverbs-utils") else { return };
    let _turn = many_ports(); // (not for the ports: 32 processes at a time)
    let Some(ns) = RawNs::new(89) else { return };
    sixteen_pairs(&pp, &Site::Raw(ns));
}

fn sixteen_pairs(pp: &Path, site: &Site) {
    let ports: Vec<u16> = (18684..18700).collect();
    let pairs = start_pairs(pp, site, &ports, "800", |i| i % 8 != 0);
    let ended = end_pairs(pairs, Instant::now() + Duration::from_secs(60));
    let mut slots = BTreeSet::new();
    for e in &ended {
        let (c, s) = e.check();
        assert_ne!(c, s, "the two ends of a pair are two members\n{}", e.report());
        slots.insert(c);
        slots.insert(s);
    }
    // (a pair that ends before the last ones start frees its slots for
    // them: slots may repeat across pairs, but never exceed the 32 members
    // that can exist at once, the lowest free slot being taken)
    assert!(slots.len() >= 16, "slots {slots:?}");
    assert!(slots.iter().all(|s| *s < 32), "at most 32 members, slots {slots:?}");
}

/// The hang that a member's steward could cause when it ended (see the
/// module docs), made likely: 16 short pairs (-n 200) that end nearly together, 6 rounds;
/// every process must end within 15 s (they need about 5). A hung process
/// is shown with its threads, the holder of the device's group lock and
/// (gdb installed) their stacks.
#[test]
fn sixteen_short_pairs_end_together() {
    let Some(pp) = need("ibv_rc_pingpong", "ibverbs-utils") else { return };
    let _turn = many_ports();
    let ports: Vec<u16> = (18684..18700).collect();
    for round in 1..=6 {
        let pairs = start_pairs(&pp, &Site::Udp(88), &ports, "200", |i| i % 8 != 0);
        let ended = end_pairs(pairs, Instant::now() + Duration::from_secs(15));
        if let Some(e) = ended.iter().find(|e| e.client.1 || e.server.1) {
            panic!("round {round}: a process did not end in 15 s\n{}", e.report());
        }
        for e in &ended {
            e.check();
        }
    }
}

/// 8 pairs on one device (pairs 0 and 4 polling, the others sleeping on
/// CQ events); SIGKILL to both ends of pairs 0 and 1 (4 members die
/// without leaving): the other 6 pairs finish, every byte checked.
/// While those 6 still run, 2 new pairs join (and then finish): the 4 new members
/// hold exactly the 4 dead members' slots (the lowest free ones).
#[test]
fn members_killed_with_sigkill_leave_the_others_running_and_their_slots_free() {
    let Some(pp) = need("ibv_rc_pingpong", "ibverbs-utils") else { return };
    let _turn = many_ports();
    members_killed(&pp, &Site::Udp(87));
}

/// The same on a raw device (in a namespace of the test's own; root).
#[test]
fn raw_members_killed_with_sigkill_leave_the_others_running_and_their_slots_free() {
    let Some(pp) = need("ibv_rc_pingpong", "ibverbs-utils") else { return };
    let _turn = many_ports();
    let Some(ns) = RawNs::new(90) else { return };
    members_killed(&pp, &Site::Raw(ns));
}

fn members_killed(pp: &Path, site: &Site) {
    // Every pair but the newcomers runs until killed (-n 100000000): the
    // survivors must outlive the newcomers' start whatever the machine's
    // load, and are checked while they run (still running, still using
    // CPU: a pingpong that met a data error would have exited) and by the
    // slots their lock files hold.
    let until_killed = "100000000";
    let mut pairs = start_pairs(pp, site, &[18684, 18685], until_killed, |i| i % 4 != 0);
    // (three surviving pairs: ten members in all)
    let ports: Vec<u16> = (18686..18689).collect();
    pairs.extend(start_pairs(pp, site, &ports, until_killed, |i| (i + 2) % 4 != 0));
    std::thread::sleep(Duration::from_secs(1));
    for p in &mut pairs {
        assert!(p.server.running() && p.client.running(), "pair on port {} ended", p.port);
    }
    let mut survivors = pairs.split_off(2);
    for p in pairs {
        for c in [p.server, p.client] {
            let st = c.kill();
            assert_eq!(st.signal(), Some(9), "port {}: {st}", p.port);
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let newcomers = start_pairs(pp, site, &[18692, 18693], "300", |_| true);
    let new_ended = end_pairs(newcomers, Instant::now() + Duration::from_secs(30));
    let mut new = BTreeSet::new();
    for e in &new_ended {
        let (c, s) = e.check();
        assert!(new.insert(c) && new.insert(s), "slot taken twice\n{}", e.report());
    }
    // the survivors ran throughout and still make progress
    for p in &mut survivors {
        assert!(
            p.server.running() && p.client.running(),
            "a survivor on port {} ended before the newcomers did",
            p.port
        );
    }
    let pids: Vec<u32> = survivors.iter().flat_map(|p| [p.server.pid(), p.client.pid()]).collect();
    let before: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    std::thread::sleep(Duration::from_secs(1));
    for (pid, t0) in pids.iter().zip(before) {
        assert!(cpu_ticks(*pid) > t0, "survivor {pid} made no progress in 1 s");
    }
    // 10 members took slots 0..10; 6 of them live on, and the newcomers
    // took the dead members' 4
    let old = slots_held_by(site, &pids);
    assert_eq!(old.len(), 6, "the survivors' slots: {old:?}");
    let dead: BTreeSet<u32> = (0..10).filter(|s| !old.contains(s)).collect();
    let reports = new_ended.iter().map(Ended::report).collect::<Vec<_>>().join("\n");
    assert_eq!(
        new, dead,
        "the newcomers' slots are the dead members' ones (survivors {old:?})\n{reports}"
    );
}

/// Clock ticks `pid` has run (user and system, `/proc/PID/stat`).
fn cpu_ticks(pid: u32) -> u64 {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = st.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    // after the command: state is field 3, utime 14 and stime 15
    let n = |i: usize| f.get(i - 3).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    n(14) + n(15)
}

/// The member slots of `site`'s device whose lock files (`slot-NN` in its
/// registry directory) the processes `pids` hold.
fn slots_held_by(site: &Site, pids: &[u32]) -> BTreeSet<u32> {
    use std::os::unix::fs::MetadataExt;
    let prefix = match site {
        Site::Udp(net) => format!("udp-127.0.{net}.2-"),
        Site::Raw(ns) => format!("raw-vsa-10.{}.0.1-", ns.net),
    };
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
    let mut roots = vec![PathBuf::from(format!("/tmp/roce-emu-{uid}"))];
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        roots.push(Path::new(&x).join("roce-emu"));
    }
    let mut slot_of = std::collections::HashMap::new();
    for dev in roots.iter().filter_map(|r| std::fs::read_dir(r).ok()).flatten().flatten() {
        if !dev.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        for f in std::fs::read_dir(dev.path()).into_iter().flatten().flatten() {
            let name = f.file_name().to_string_lossy().to_string();
            let slot = name.strip_prefix("slot-").and_then(|n| n.parse::<u32>().ok());
            if let (Some(slot), Ok(m)) = (slot, f.metadata()) {
                slot_of.insert(m.ino(), slot);
            }
        }
    }
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let mut held = BTreeSet::new();
    for l in locks.lines() {
        // "1: FLOCK  ADVISORY  WRITE 16152 fe:00:10011871 0 EOF"
        let w: Vec<&str> = l.split_whitespace().collect();
        let pid = w.get(4).and_then(|p| p.parse::<u32>().ok());
        let ino = w.get(5).and_then(|d| d.rsplit(':').next()?.parse::<u64>().ok());
        if let (Some(pid), Some(ino)) = (pid, ino) {
            if pids.contains(&pid) {
                held.extend(slot_of.get(&ino));
            }
        }
    }
    held
}
