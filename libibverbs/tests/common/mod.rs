//! What the drop-in's test executables share: where the drop-in is, the
//! tools they run, SKIPPED messages.
#![allow(dead_code)] // (each test executable uses its own part)

use std::path::{Path, PathBuf};

/// target/<profile>, where the drop-in (`libibverbs.so.1`) and the
/// workspace's binaries are.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// A directory `target/<profile>/<subdir>` holding links named `names`
/// (`libibverbs.so.1`, `librdmacm.so.1`) to the drop-in this `cargo test`
/// built (target/<profile>/deps/libibverbs.so; `cargo test` does not copy
/// it up as `cargo build` does). Each test file uses a directory of its
/// own, made once per run of the executable.
pub fn drop_in_dir(subdir: &str, names: &[&str]) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    // one directory per test file (`subdir`): the files are modules of one
    // executable, and each makes its links once, the first time it asks
    static DIRS: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut dirs = DIRS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    dirs.entry(subdir.to_string())
        .or_insert_with(|| {
            let t = target_dir();
            let built = t.join("deps").join("libibverbs.so");
            assert!(
                built.exists(),
                "{} missing: cargo builds the drop-in with the tests",
                built.display()
            );
            let d = t.join(subdir);
            std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("create {subdir}: {e}"));
            for name in names {
                let link = d.join(name);
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(&built, &link).expect("link the drop-in");
            }
            d
        })
        .clone()
}

/// Say that (part of) a test was skipped, past libtest's output capture
/// (`println!` of a passing test is swallowed; a direct write to stderr is
/// not), so a run without the tools says so.
pub fn skipped(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {msg}");
}

/// `tool`'s path on `PATH`.
pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

/// The tool's path, or print SKIPPED and return None.
pub fn need(tool: &str, package: &str) -> Option<PathBuf> {
    let p = which(tool);
    if p.is_none() {
        skipped(&format!("{tool} not installed (apt-get install {package})"));
    }
    p
}

/// Bytes a tool printed, as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Wait for `child` at most `limit`; kill it (by its PID) after that.
/// Returns its output and whether it had to be killed.
pub fn finish(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> (std::process::Output, bool) {
    use std::io::Read;
    let end = std::time::Instant::now() + limit;
    let timed_out = loop {
        match child.try_wait() {
            Ok(Some(_)) => break false,
            Ok(None) if std::time::Instant::now() < end => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                break true;
            }
        }
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_end(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_end(&mut err);
    }
    let status = child.wait().expect("wait");
    (std::process::Output { status, stdout: out, stderr: err }, timed_out)
}

/// `tests/c/<name>.c` with `tests/c/common.c` (the setup the C programs
/// share) compiled against the drop-in in `lib_dir` with `libs` into a
/// temporary directory of this process, or None (SKIPPED) without cc or
/// `header`.
pub fn compile_c(name: &str, header: &str, lib_dir: &Path, libs: &[&str]) -> Option<PathBuf> {
    if which("cc").is_none() || !Path::new(header).exists() {
        skipped(&format!(
            "{name}: needs cc and {header} (apt-get install gcc libibverbs-dev librdmacm-dev)"
        ));
        return None;
    }
    let dir = std::env::temp_dir().join(format!("roce-c-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let exe = dir.join(name);
    let c = Path::new(crate::CRATE_DIR).join("tests/c");
    let o = std::process::Command::new("cc")
        .args(["-O1", "-g", "-Wall", "-pthread", "-o"])
        .arg(&exe)
        .arg(c.join(format!("{name}.c")))
        .arg(c.join("common.c"))
        .arg(format!("-L{}", lib_dir.display()))
        .args(libs)
        .output()
        .expect("run cc");
    assert!(o.status.success(), "cc {name}.c:\n{}", text(&o.stderr));
    Some(exe)
}

pub const VERBS_H: &str = "/usr/include/infiniband/verbs.h";
pub const RDMA_CMA_H: &str = "/usr/include/rdma/rdma_cma.h";

/// [`compile_c`] of a program on libibverbs alone.
pub fn compile_verbs_c(name: &str, lib_dir: &Path) -> Option<PathBuf> {
    compile_c(name, VERBS_H, lib_dir, &["-l:libibverbs.so.1"])
}

/// [`compile_c`] of a program on librdmacm and libibverbs.
pub fn compile_rdmacm_c(name: &str, lib_dir: &Path) -> Option<PathBuf> {
    compile_c(name, RDMA_CMA_H, lib_dir, &["-l:librdmacm.so.1", "-l:libibverbs.so.1"])
}

/// [`compile_c`] once per test executable and program (the tests of one
/// executable run at once: several compiling one program to one path at
/// once would run a half-written file, ETXTBSY).
pub fn compile_c_once(name: &str, header: &str, lib_dir: &Path, libs: &[&str]) -> Option<PathBuf> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static DONE: OnceLock<Mutex<HashMap<String, Option<PathBuf>>>> = OnceLock::new();
    let mut done = DONE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    done.entry(name.to_string()).or_insert_with(|| compile_c(name, header, lib_dir, libs)).clone()
}

/// [`compile_verbs_c`] once per test executable and program: the tests of
/// one executable run at once, and one compile serves them all.
pub fn compile_verbs_c_once(name: &str, lib_dir: &Path) -> Option<PathBuf> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static DONE: OnceLock<Mutex<HashMap<String, Option<PathBuf>>>> = OnceLock::new();
    let mut done = DONE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    done.entry(name.to_string()).or_insert_with(|| compile_verbs_c(name, lib_dir)).clone()
}

/// `ROCE_EMU_DEVICES` for two devices, roce0 on 127.0.`net`.2 and roce1 on
/// 127.0.`net`.3.
pub fn two_devices(net: u8) -> String {
    format!("roce0=udp:127.0.{net}.2,roce1=udp:127.0.{net}.3")
}

/// `prog args` on the drop-in in `lib_dir` with the devices `devices`:
/// statistics, pcap and the verbose trace off, stdin empty, stdout and
/// stderr piped.
pub fn drop_in_cmd(
    prog: &Path,
    lib_dir: &Path,
    devices: &str,
    args: &[&str],
) -> std::process::Command {
    use std::process::Stdio;
    let mut c = std::process::Command::new(prog);
    c.args(args)
        .env("LD_LIBRARY_PATH", lib_dir)
        .env("ROCE_EMU_DEVICES", devices)
        .env("ROCE_EMU_STATS", "0")
        .env_remove("ROCE_EMU_PCAP")
        .env_remove("ROCE_EMU_VERBOSE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Run `c` to its end within `limit` (killed after it: the test fails with
/// what it printed) and return its output.
pub fn run_within(
    mut c: std::process::Command,
    limit: std::time::Duration,
) -> std::process::Output {
    let child = c.spawn().unwrap_or_else(|e| panic!("spawn {:?}: {e}", c.get_program()));
    let (out, killed) = finish(child, limit);
    assert!(
        !killed,
        "{:?} {:?} did not finish in {limit:?}:\n{}{}",
        c.get_program(),
        c.get_args().collect::<Vec<_>>(),
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// A C test program's output (stdout then stderr), after asserting it
/// exited 0 with a line "0 failures" and no FAIL line.
pub fn passed_all(out: &std::process::Output, what: &str) -> String {
    let s = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{what}: {:?}\n{s}", out.status);
    let counted = s.lines().any(|l| l.trim_end() == "0 failures");
    assert!(counted && !s.contains("FAIL "), "{what}\n{s}");
    s
}

/// Whether `out` has the check `case` passed (a line "ok   ...case...").
pub fn has_ok(out: &str, case: &str) -> bool {
    out.lines().any(|l| l.starts_with("ok   ") && l.contains(case))
}

/// `name@VERSION` / `name@@VERSION` lines of a library's dynamic symbols,
/// sorted (None without nm).
pub fn dynamic_symbols(lib: &Path) -> Option<Vec<String>> {
    let nm = which("nm")?;
    let o = std::process::Command::new(nm)
        .args(["-D", "--defined-only", "--with-symbol-versions"])
        .arg(lib)
        .output()
        .ok()?;
    let mut v: Vec<String> = text(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .filter(|s| s.contains('@'))
        .collect();
    v.sort();
    Some(v)
}

/// Whether a UDP socket is bound to `ip:4791` (a device is open), from
/// /proc/net/udp.
pub fn device_bound(ip: [u8; 4]) -> bool {
    let want = format!("{:08X}:12B7", u32::from_le_bytes(ip));
    std::fs::read_to_string("/proc/net/udp").is_ok_and(|t| {
        t.lines().skip(1).any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
    })
}

/// Wait (at most 20 s) until a device is open on `dev`, then 300 ms more
/// for what its process does next (a listen).
pub fn wait_device(dev: [u8; 4]) {
    use std::time::{Duration, Instant};
    let end = Instant::now() + Duration::from_secs(20);
    while !device_bound(dev) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
}

/// A process's output and whether it had to be killed.
pub type Finished = (std::process::Output, bool);

/// Run `server`, wait until it opened its device on `dev` (then a little
/// more for its listen), run `client`; wait for the client at most
/// `client_limit`, then for the server at most `server_limit`.
pub fn server_then_client(
    mut server: std::process::Command,
    mut client: std::process::Command,
    dev: [u8; 4],
    client_limit: std::time::Duration,
    server_limit: std::time::Duration,
) -> (Finished, Finished) {
    assert!(!device_bound(dev), "{dev:?}:4791 is taken before the test");
    let s = server.spawn().expect("spawn server");
    wait_device(dev);
    let c = client.spawn().expect("spawn client");
    let co = finish(c, client_limit);
    let so = finish(s, server_limit);
    (co, so)
}

/// Both ends' status and output, for an assertion's message.
pub fn report(what: &str, (c, ct): &Finished, (s, st): &Finished) -> String {
    format!(
        "{what}\n--- client (killed: {ct}) {}\n{}{}\n--- server (killed: {st}) {}\n{}{}",
        c.status,
        text(&c.stdout),
        text(&c.stderr),
        s.status,
        text(&s.stdout),
        text(&s.stderr)
    )
}

/// Both ends must have exited 0 in time; returns the client's and the
/// server's output (stdout then stderr).
pub fn both_succeeded(what: &str, client: &Finished, server: &Finished) -> (String, String) {
    let ((c, ct), (s, st)) = (client, server);
    assert!(
        !ct && !st && c.status.success() && s.status.success(),
        "{}",
        report(what, client, server)
    );
    (text(&c.stdout) + &text(&c.stderr), text(&s.stdout) + &text(&s.stderr))
}

/// valgrind (SKIPPED without it) and the arguments every drop-in test runs
/// it with: error exit code 9, leaks not counted as errors, the project's
/// suppressions (`tests/data/valgrind.supp`, each with its reason).
pub fn valgrind() -> Option<(PathBuf, Vec<String>)> {
    let vg = need("valgrind", "valgrind")?;
    let supp = Path::new(crate::CRATE_DIR).join("tests/data/valgrind.supp");
    let args = vec![
        "--error-exitcode=9".to_string(),
        "--errors-for-leak-kinds=none".to_string(),
        format!("--suppressions={}", supp.display()),
    ];
    Some((vg, args))
}

/// A test program run under [`valgrind`]: `exe` (None: SKIPPED) started by
/// the test's own `run` as valgrind's argument, its output checked by the
/// test's `check` (as `what`), and valgrind must have found no error.
pub fn check_under_valgrind(
    exe: impl FnOnce() -> Option<PathBuf>,
    run: impl FnOnce(&Path, &[&str]) -> std::process::Output,
    check: impl FnOnce(&std::process::Output, &str) -> String,
    what: &str,
) {
    let Some((vg, mut args)) = valgrind() else { return };
    let Some(exe) = exe() else { return };
    args.push(exe.display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&vg, &args);
    let s = check(&out, what);
    assert!(s.contains("ERROR SUMMARY: 0 errors"), "{s}");
}

/// The rdma-core pingpongs' result line ("... iters in ... usec/iter").
pub fn iters_line(out: &str) -> bool {
    out.lines().any(|l| l.contains(" iters in ") && l.contains("usec/iter"))
}

/// Assert that perftest's output `out` holds its result table: a
/// "#bytes" header and a numeric row under it (`what` names the run).
pub fn assert_perftest_result(out: &str, what: &str) {
    let mut lines = out.lines().skip_while(|l| !l.trim_start().starts_with("#bytes"));
    assert!(lines.next().is_some(), "{what}: no result header\n{out}");
    let row = lines.next().unwrap_or_default();
    let first: Vec<&str> = row.split_whitespace().collect();
    assert!(
        first.len() >= 3 && first.iter().take(3).all(|w| w.parse::<f64>().is_ok()),
        "{what}: no result row\n{out}"
    );
}
