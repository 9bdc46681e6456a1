//! `roce install`: put the drop-in libraries (`libibverbs.so.1`,
//! `librdmacm.so.1`), `roce run`'s shim (`libroce_preload.so`) and the
//! rsocket preload of `roce run --rsockets` (`librspreload.so`) where
//! `roce run` finds them, so that `cargo install ... roce-cli` followed by
//! `roce install` is the whole installation.
//!
//! The libraries are built from the source tree this `roce` was built from
//! (`CARGO_MANIFEST_DIR` at compile time: the checkout `cargo install --git`
//! keeps under `~/.cargo/git/checkouts`, or the tree of `cargo install
//! --path`), into a target directory in the user's cache (never inside the
//! checkout), or copied from `--from DIR`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::run::{bin_dir, installed_lib_dir};

pub const INSTALL_LONG: &str = "Install the libraries `roce run` needs: the libibverbs.so.1 and \
librdmacm.so.1 drop-ins (unmodified rdma-core programs on roce-emu devices) and \
libroce_preload.so (the devices shown under /sys/class/infiniband and /dev/infiniband) and \
librspreload.so (TCP programs over rsockets: roce run --rsockets). \
`cargo install` installs only the `roce` binary; this puts the libraries beside it, in \
<dir of roce>/../lib/roce-emu (~/.cargo/lib/roce-emu after `cargo install`), where `roce run` \
looks for them. No root, no kernel module.\n\n\
The libraries are built with `cargo build --release` from the source tree this `roce` was \
built from (the checkout `cargo install --git` keeps under ~/.cargo/git/checkouts, or the tree \
of `cargo install --path`), in a target directory under $XDG_CACHE_HOME/roce-emu (or \
~/.cache/roce-emu); the first build takes a few minutes, later ones reuse it. Cargo's progress \
goes to stderr. With --from DIR, already-built libraries are copied from DIR instead (a \
target/release directory, or any directory holding libibverbs.so.1 or libibverbs.so, \
libroce_preload.so and librspreload.so). Installing again replaces the libraries (a program running on the old \
ones keeps them until it exits).";

pub const INSTALL_AFTER: &str = "Examples:\n  \
cargo install --locked --git <repo-url> roce-cli  the roce binary, into ~/.cargo/bin\n  \
roce install                                     then its libraries, into ~/.cargo/lib/roce-emu\n  \
roce install --prefix /opt/roce-emu              into /opt/roce-emu/lib/roce-emu\n  \
roce install --from target/release               copy what `cargo build --release` made\n\n\
Then: roce run -- ibv_devinfo -d roce0\n\n\
roce run finds libraries in ../lib/roce-emu from its own directory (or beside it); installed \
elsewhere, pass it --lib-dir DIR or set ROCE_EMU_LIB_DIR=DIR. From a clone, scripts/install.sh \
PREFIX builds and installs both the binary (PREFIX/bin/roce) and the libraries \
(PREFIX/lib/roce-emu). In CI: docs/ci.md.";

#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// Install into PREFIX/lib/roce-emu (default: the `roce` binary's
    /// directory's parent, e.g. ~/.cargo for ~/.cargo/bin/roce).
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<PathBuf>,
    /// Install into exactly DIR (then run with `roce run --lib-dir DIR` or
    /// ROCE_EMU_LIB_DIR=DIR).
    #[arg(long, value_name = "DIR", conflicts_with = "prefix")]
    lib_dir: Option<PathBuf>,
    /// Copy the libraries from DIR (e.g. target/release) instead of building
    /// them.
    #[arg(long, value_name = "DIR")]
    from: Option<PathBuf>,
    /// Cargo's target directory for the build (default:
    /// $XDG_CACHE_HOME/roce-emu/target, else ~/.cache/roce-emu/target).
    #[arg(long, value_name = "DIR", conflicts_with = "from")]
    target_dir: Option<PathBuf>,
}

/// The workspace this binary was built from.
fn source_tree() -> PathBuf {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR"));
    cli.parent().unwrap_or(cli).to_path_buf()
}

fn default_target_dir() -> Result<PathBuf, String> {
    let cache = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(c) => PathBuf::from(c),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(h) => PathBuf::from(h).join(".cache"),
            None => return Err("neither XDG_CACHE_HOME nor HOME is set: pass --target-dir".into()),
        },
    };
    Ok(cache.join("roce-emu").join("target"))
}

/// `cargo build --release -p roce-libibverbs -p roce-preload -p
/// roce-rspreload` in the source
/// tree, into `target`; the directory holding the built libraries.
fn build(target: &Path) -> Result<PathBuf, String> {
    let ws = source_tree();
    let manifest = ws.join("Cargo.toml");
    let sources =
        ["Cargo.toml", "libibverbs/Cargo.toml", "preload/Cargo.toml", "rspreload/Cargo.toml"];
    if let Some(gone) = sources.iter().map(|f| ws.join(f)).find(|f| !f.exists()) {
        return Err(format!(
            "the source tree this roce was built from is gone ({} is missing), so the \
             libraries cannot be built from it. Reinstall roce (cargo install --force --locked \
             --git <repo-url> roce-cli) and run roce install again; or, from a clone of \
             roce-emu, run scripts/install.sh PREFIX; or pass --from DIR with built libraries",
            gone.display()
        ));
    }
    // cargo itself when roce runs under `cargo run`, else the one on PATH
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    eprintln!(
        "roce install: building the libraries from {} (cargo build --release, target directory {})",
        ws.display(),
        target.display()
    );
    // cargo's progress, and anything it prints, goes to our stderr: our
    // stdout says what was installed
    let out: Stdio = {
        use std::os::fd::AsFd;
        match std::io::stderr().as_fd().try_clone_to_owned() {
            Ok(fd) => fd.into(),
            Err(_) => Stdio::inherit(),
        }
    };
    // (in the source tree: cargo's configuration and rustup's toolchain
    // are roce-emu's, not those of the directory roce install runs in)
    let target = std::path::absolute(target).unwrap_or_else(|_| target.to_path_buf());
    let status = Command::new(&cargo)
        .current_dir(&ws)
        .args(["build", "--release", "-p", "roce-libibverbs", "-p", "roce-preload"])
        .args(["-p", "roce-rspreload"])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .stdin(Stdio::null())
        .stdout(out)
        .status();
    match status {
        Ok(s) if s.success() => Ok(target.join("release")),
        Ok(s) => {
            Err(format!("cargo build failed ({s}) in {}: see cargo's messages above", ws.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "cannot run {}: cargo is not on PATH. Install Rust (https://rustup.rs), or pass \
             --from DIR with built libraries",
            cargo.to_string_lossy()
        )),
        Err(e) => Err(format!("cannot run {}: {e}", cargo.to_string_lossy())),
    }
}

/// The built libraries in `from`: (libibverbs, libroce_preload,
/// librspreload).
fn sources(from: &Path) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let verbs =
        ["libibverbs.so.1", "libibverbs.so"].iter().map(|n| from.join(n)).find(|p| p.exists());
    let preload = from.join("libroce_preload.so");
    let rspreload = from.join(crate::run::RSPRELOAD);
    match verbs {
        None => Err(format!("{} has no libibverbs.so.1 (nor libibverbs.so)", from.display())),
        Some(_) if !preload.exists() => {
            Err(format!("{} has no libroce_preload.so", from.display()))
        }
        Some(_) if !rspreload.exists() => {
            Err(format!("{} has no {}", from.display(), crate::run::RSPRELOAD))
        }
        Some(v) => Ok((v, preload, rspreload)),
    }
}

/// Copy `src` (following links) to `dst` through a temporary file renamed
/// over it: a program that has the old library mapped keeps it intact.
fn copy_replacing(src: &Path, dst: &Path) -> Result<(), String> {
    let name = dst.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dst.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::copy(src, &tmp).and_then(|_| std::fs::rename(&tmp, dst)).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("copying {} to {}: {e}", src.display(), dst.display())
    })
}

/// `link` -> `target` (a relative name), replacing what was there.
fn link_replacing(target: &str, link: &Path) -> Result<(), String> {
    let tmp = link.with_file_name(format!(".rdmacm.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).and_then(|_| std::fs::rename(&tmp, link)).map_err(
        |e| {
            let _ = std::fs::remove_file(&tmp);
            format!("linking {} to {target}: {e}", link.display())
        },
    )
}

fn install(args: &InstallArgs) -> Result<(), String> {
    let bin = bin_dir();
    let dest = match (&args.lib_dir, &args.prefix, &bin) {
        (Some(d), _, _) => d.clone(),
        (None, Some(p), _) => p.join("lib").join("roce-emu"),
        (None, None, Some(b)) => installed_lib_dir(b),
        (None, None, None) => {
            return Err("cannot find the roce binary's directory: pass --prefix or --lib-dir".into())
        }
    };
    let from = match &args.from {
        Some(f) => f.clone(),
        None => {
            let target = match &args.target_dir {
                Some(t) => t.clone(),
                None => default_target_dir()?,
            };
            build(&target)?
        }
    };
    let (verbs, preload, rspreload) = sources(&from)?;
    std::fs::create_dir_all(&dest).map_err(|e| format!("creating {}: {e}", dest.display()))?;
    copy_replacing(&verbs, &dest.join("libibverbs.so.1"))?;
    // the same file under librdmacm's name: the dynamic linker maps it once
    // (one device and inode), so a program using both has one library
    link_replacing("libibverbs.so.1", &dest.join("librdmacm.so.1"))?;
    copy_replacing(&preload, &dest.join("libroce_preload.so"))?;
    copy_replacing(&rspreload, &dest.join(crate::run::RSPRELOAD))?;
    println!("roce install: installed into {}:", dest.display());
    for f in crate::run::LIBS.into_iter().chain([crate::run::RSPRELOAD]) {
        let what = match f {
            "libibverbs.so.1" => "the libibverbs drop-in",
            "librdmacm.so.1" => "the librdmacm drop-in (a link to libibverbs.so.1)",
            "librspreload.so" => "TCP programs over rsockets (roce run --rsockets)",
            _ => "roce run's device shim",
        };
        println!("  {:<20} {what}", f);
    }
    // will `roce run` find them without being told?
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let found = bin.as_deref().is_some_and(|b| {
        let d = canon(&dest);
        canon(&installed_lib_dir(b)) == d || canon(b) == d
    });
    let roce = bin.map(|b| b.join("roce")).unwrap_or_else(|| PathBuf::from("roce"));
    let roce = roce.display();
    if found {
        println!("Next: {roce} run -- ibv_devinfo -d roce0");
    } else {
        println!(
            "{roce} run looks in ../lib/roce-emu from its own directory, not here: pass --lib-dir \
             or set ROCE_EMU_LIB_DIR.\nNext: ROCE_EMU_LIB_DIR={} {roce} run -- ibv_devinfo -d roce0",
            dest.display()
        );
    }
    Ok(())
}

pub fn run(args: &InstallArgs) -> ExitCode {
    match install(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roce install: {e}");
            ExitCode::from(2)
        }
    }
}
