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
/// it up as `cargo build` does). Each test executable uses a directory of
/// its own: they may run at once, and each replaces its links once.
pub fn drop_in_dir(subdir: &str, names: &[&str]) -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
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

/// `tests/c/<name>.c` compiled against the drop-in in `lib_dir` (its
/// `libibverbs.so.1`) into a temporary directory of this process, or None
/// (SKIPPED) without cc or libibverbs-dev's headers.
pub fn compile_verbs_c(name: &str, lib_dir: &Path) -> Option<PathBuf> {
    let header = "/usr/include/infiniband/verbs.h";
    if which("cc").is_none() || !Path::new(header).exists() {
        skipped(&format!("{name}: needs cc and libibverbs-dev"));
        return None;
    }
    let dir = std::env::temp_dir().join(format!("roce-c-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let exe = dir.join(name);
    let o = std::process::Command::new("cc")
        .args(["-O1", "-g", "-Wall", "-o"])
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c")))
        .arg(format!("-L{}", lib_dir.display()))
        .arg("-l:libibverbs.so.1")
        .output()
        .expect("run cc");
    assert!(o.status.success(), "cc {name}.c:\n{}", text(&o.stderr));
    Some(exe)
}

/// valgrind (SKIPPED without it) and the arguments every drop-in test runs
/// it with: error exit code 9, leaks not counted as errors, the project's
/// suppressions (`tests/data/valgrind.supp`, each with its reason).
pub fn valgrind() -> Option<(PathBuf, Vec<String>)> {
    let vg = need("valgrind", "valgrind")?;
    let supp = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/valgrind.supp");
    let args = vec![
        "--error-exitcode=9".to_string(),
        "--errors-for-leak-kinds=none".to_string(),
        format!("--suppressions={}", supp.display()),
    ];
    Some((vg, args))
}
