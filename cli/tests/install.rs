//! `roce install`: the libraries land in `<dir of roce>/../lib/roce-emu`
//! (or `--prefix`/lib/roce-emu), and `roce run` finds them there with no
//! `--lib-dir` and no ROCE_EMU_LIB_DIR; without them, its error names
//! `roce install`.
//!
//! No build and no network: `--from` copies the drop-in and the shim this
//! `cargo test` built (cli dev-depends on both; they are in
//! `target/<profile>/deps`). The full recipe (`cargo install`, then `roce
//! install` building the libraries) is scripts/install-check.sh.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const DEVICES: &str = "roce0=udp:127.0.121.2,roce1=udp:127.0.121.3";

/// The built `roce`'s directory.
fn target() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_roce")).parent().unwrap().to_path_buf()
}

/// Where this test build left libibverbs.so, libroce_preload.so and
/// librspreload.so, or
/// `None` (SKIPPED).
fn built_libs() -> Option<PathBuf> {
    let deps = target().join("deps");
    for f in ["libibverbs.so", "libroce_preload.so", "librspreload.so"] {
        if !deps.join(f).exists() {
            eprintln!("SKIPPED: {} not built", deps.join(f).display());
            return None;
        }
    }
    Some(deps)
}

/// A fresh scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("roce-install-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    /// A copy of the built `roce` at `<scratch>/bin/roce` (a copy, not a
    /// link: roce finds its directory through /proc/self/exe).
    fn roce(&self) -> PathBuf {
        let bin = self.0.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let roce = bin.join("roce");
        std::fs::copy(env!("CARGO_BIN_EXE_roce"), &roce).unwrap();
        roce
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn roce(exe: &Path) -> Command {
    let mut c = Command::new(exe);
    c.env("ROCE_EMU_DEVICES", DEVICES)
        .env("ROCE_EMU_STATS", "0")
        .env_remove("ROCE_EMU_LIB_DIR")
        .env_remove("LD_PRELOAD")
        .env_remove("LD_LIBRARY_PATH");
    c
}

/// `c.output()`, again while the copied executable is busy: another test
/// of this process that forked while the copy's file was open for writing
/// holds it (between its fork and exec) for a moment (ETXTBSY).
fn output(c: &mut Command) -> Output {
    for _ in 0..100 {
        match c.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => return r.unwrap(),
        }
    }
    c.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn show(o: &Output) -> String {
    format!("status {}\n--- stdout\n{}--- stderr\n{}", o.status, text(&o.stdout), text(&o.stderr))
}

/// The value of `export NAME='VALUE'` in `roce run --print-env`'s output.
fn exported<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    let prefix = format!("export {name}='");
    out.lines().find_map(|l| l.strip_prefix(&prefix)?.strip_suffix('\''))
}

#[test]
fn installed_into_a_prefix_roce_run_finds_them_there() {
    let Some(libs) = built_libs() else { return };
    let s = Scratch::new("prefix");
    let lib = s.0.join("lib").join("roce-emu");
    // the test's own roce, into an explicit prefix
    let o = output(
        roce(Path::new(env!("CARGO_BIN_EXE_roce")))
            .arg("install")
            .arg("--from")
            .arg(&libs)
            .arg("--prefix")
            .arg(&s.0),
    );
    assert!(o.status.success(), "{}", show(&o));
    let out = text(&o.stdout);
    assert!(out.contains(&format!("installed into {}", lib.display())), "{}", show(&o));
    // (that roce is not in the prefix: it says how to point roce run there)
    assert!(out.contains("ROCE_EMU_LIB_DIR="), "{}", show(&o));
    for f in ["libibverbs.so.1", "librdmacm.so.1", "libroce_preload.so", "librspreload.so"] {
        assert!(lib.join(f).is_file(), "no {f} in {}", lib.display());
    }
    // librdmacm.so.1 is libibverbs.so.1 (one file: the dynamic linker maps it once)
    assert_eq!(
        std::fs::read_link(lib.join("librdmacm.so.1")).unwrap(),
        Path::new("libibverbs.so.1")
    );
    assert_eq!(
        std::fs::read(lib.join("libibverbs.so.1")).unwrap(),
        std::fs::read(libs.join("libibverbs.so")).unwrap()
    );

    // a roce in <prefix>/bin finds <prefix>/lib/roce-emu by itself
    let exe = s.roce();
    let o = output(roce(&exe).args(["run", "--print-env"]));
    assert!(o.status.success(), "{}", show(&o));
    let out = text(&o.stdout);
    assert_eq!(exported(&out, "LD_LIBRARY_PATH"), Some(lib.to_str().unwrap()), "{out}");
    let preload = lib.join("libroce_preload.so");
    assert_eq!(exported(&out, "LD_PRELOAD"), Some(preload.to_str().unwrap()), "{out}");

    // and a program under it sees the devices through the installed shim
    let o = output(roce(&exe).args([
        "run",
        "--",
        "sh",
        "-c",
        "cat /sys/class/infiniband/roce1/node_type",
    ]));
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(text(&o.stdout).trim(), "1: CA", "{}", show(&o));
}

#[test]
fn installed_by_default_beside_roce_and_run_by_the_next_command() {
    let Some(libs) = built_libs() else { return };
    let s = Scratch::new("default");
    let exe = s.roce();
    let lib = s.0.join("lib").join("roce-emu");
    let o = output(roce(&exe).arg("install").arg("--from").arg(&libs));
    assert!(o.status.success(), "{}", show(&o));
    let out = text(&o.stdout);
    let next = format!("Next: {} run -- ibv_devinfo -d roce0", exe.display());
    assert!(out.contains(&next), "{}", show(&o));
    assert!(lib.join("libibverbs.so.1").is_file(), "{}", show(&o));
    // installing again replaces them
    let o = output(roce(&exe).arg("install").arg("--from").arg(&libs));
    assert!(o.status.success(), "{}", show(&o));

    // the command it suggests, where rdma-core's tools are installed
    let found = ["/usr/bin/ibv_devinfo", "/usr/local/bin/ibv_devinfo"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let Some(devinfo) = found else {
        eprintln!("SKIPPED: ibv_devinfo not installed (apt-get install ibverbs-utils)");
        return;
    };
    let o = output(roce(&exe).args(["run", "--", devinfo, "-d", "roce0"]));
    assert!(o.status.success(), "{}", show(&o));
    let out = text(&o.stdout);
    assert!(out.contains("hca_id:\troce0") && out.contains("PORT_ACTIVE"), "{}", show(&o));
}

#[test]
fn without_the_libraries_the_errors_name_roce_install() {
    let s = Scratch::new("none");
    let exe = s.roce();
    let o = output(roce(&exe).args(["run", "--", "true"]));
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let e = text(&o.stderr);
    let bin = s.0.join("bin");
    let lib = s.0.join("lib").join("roce-emu");
    assert!(
        e.contains("roce install")
            && e.contains(&format!("beside {} nor in {}", bin.display(), lib.display())),
        "{e}"
    );
    // a named directory without them: the same advice
    let o = output(roce(&exe).env("ROCE_EMU_LIB_DIR", &s.0).args(["run", "--", "true"]));
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let e = text(&o.stderr);
    assert!(e.contains("ROCE_EMU_LIB_DIR") && e.contains("roce install"), "{e}");
    // --from a directory without them
    let o = output(roce(&exe).args(["install", "--from"]).arg(&s.0));
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(text(&o.stderr).contains("has no libibverbs.so.1"), "{}", show(&o));
    // --from a directory with the drop-in but not the preload shim
    let half = s.0.join("half");
    std::fs::create_dir_all(&half).unwrap();
    std::fs::write(half.join("libibverbs.so.1"), b"not installed").unwrap();
    let o = output(roce(&exe).args(["install", "--from"]).arg(&half));
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(text(&o.stderr).contains("has no libroce_preload.so"), "{}", show(&o));
    // ... and the shim but not the rsocket preload
    std::fs::write(half.join("libroce_preload.so"), b"not installed").unwrap();
    let o = output(roce(&exe).args(["install", "--from"]).arg(&half));
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(text(&o.stderr).contains("has no librspreload.so"), "{}", show(&o));
    assert!(!lib.exists(), "nothing installed");
}

#[test]
fn without_cargo_roce_install_says_so() {
    let s = Scratch::new("nocargo");
    let exe = s.roce();
    let o = output(
        roce(&exe)
            .arg("install")
            .env("PATH", &s.0)
            .env_remove("CARGO")
            .env("XDG_CACHE_HOME", s.0.join("cache")),
    );
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let e = text(&o.stderr);
    assert!(e.contains("cargo is not on PATH") && e.contains("--from DIR"), "{e}");
}

/// The workspace's linker wrapper (scripts/roce-abi-gcc, every link of a
/// build) takes its compiler driver from ROCE_EMU_LINK_CC, never from
/// ROCE_EMU_CC, the devices' congestion settings: a user who sets
/// `ROCE_EMU_CC=off` for `cargo run` still links.
#[test]
fn the_linker_wrapper_ignores_the_devices_congestion_variable() {
    let wrapper = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/roce-abi-gcc");
    if Command::new("cc").arg("--version").output().map(|o| !o.status.success()).unwrap_or(true) {
        eprintln!("SKIPPED: no cc");
        return;
    }
    let run = |vars: &[(&str, &str)]| {
        let mut c = Command::new("sh");
        c.arg(&wrapper).arg("--version").env_remove("ROCE_EMU_LINK_CC");
        for (k, v) in vars {
            c.env(k, v);
        }
        c.output().expect("run the wrapper")
    };
    let plain = run(&[]);
    assert!(plain.status.success(), "{plain:?}");
    let with_cc = run(&[("ROCE_EMU_CC", "off")]);
    assert!(with_cc.status.success(), "ROCE_EMU_CC=off broke the link: {with_cc:?}");
    assert_eq!(with_cc.stdout, plain.stdout);
    let overridden = run(&[("ROCE_EMU_LINK_CC", "false")]);
    assert!(!overridden.status.success(), "ROCE_EMU_LINK_CC is the driver: {overridden:?}");
}
