//! `roce run -- CMD [ARGS...]`: run a program, and every program it starts,
//! on the host's roce-emu devices, found as kernel devices are found.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub const RUN_LONG: &str = "Run CMD, and every process it starts (mpirun's ranks, UCX's and \
libfabric's modules), on the roce-emu devices: the drop-in libibverbs.so.1 and librdmacm.so.1 \
come first on LD_LIBRARY_PATH, and libroce_preload.so shows the devices where software that \
looks for them outside libibverbs looks (UCX, Open MPI's openib BTL, libfabric, pyverbs): \
/sys/class/infiniband/<dev>/..., /sys/class/infiniband_verbs/uverbsN/... and \
/dev/infiniband/uverbsN, from a tree written for the configured devices (ROCE_EMU_DEVICES or \
devices.conf, as the drop-in reads them). Nothing else of the file system changes, nothing needs \
root. roce run becomes CMD (same PID, signals and exit status); the tree it writes for CMD \
is removed by a later roce run once CMD has ended.";

pub const RUN_AFTER: &str = "Examples:\n  \
roce run -- ucx_info -d                          UCX lists rc_verbs and ud_verbs on roce0, roce1\n  \
roce run -- ibv_devinfo -d roce0                 rdma-core's tools, as with LD_LIBRARY_PATH\n  \
roce run -- mpirun -np 2 --mca pml ucx ./a.out    every rank sees the devices\n  \
roce run -- rstream -b 127.0.0.2 -T v            rsockets (rdmacm-utils' rstream, riostream, rcopy, udpong)\n  \
roce run --rsockets -- python3 -m http.server --bind 127.0.0.2 8000\n  \
roce run --rsockets -- curl -O http://127.0.0.2:8000/FILE   unmodified TCP programs over rsockets\n  \
roce run --print-env                             the variables roce run sets, for a shell\n\n\
Environment set for CMD: LD_LIBRARY_PATH (the drop-in's directory first), LD_PRELOAD \
(libroce_preload.so, then with --rsockets librspreload.so, in front of what it held), \
ROCE_EMU_SYSFS (the tree).\n\n\
--rsockets: CMD's TCP sockets (AF_INET/AF_INET6, SOCK_STREAM) become rsockets over the devices \
(our librspreload.so: socket, accept/accept4, connect, read/write/send/recv..., poll/select, \
fcntl, dup; a connect no rsocket answers goes over kernel TCP). UDP and unix sockets stay the \
kernel's; epoll, and rsockets handed to a forked child, are not covered (docs/libibverbs.md, \
\"rsockets\").\n\n\
The libraries (libibverbs.so.1, librdmacm.so.1, libroce_preload.so; librspreload.so for \
--rsockets) are looked for in: --lib-dir; \
else ROCE_EMU_LIB_DIR; else beside the `roce` binary (target/release after `cargo build \
--release`); else in ../lib/roce-emu from the `roce` binary, where `roce install` puts them \
(~/.cargo/lib/roce-emu after `cargo install`).";

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Print the environment roce run would set (as `export` lines) and exit.
    #[arg(long)]
    print_env: bool,
    /// The directory holding libibverbs.so.1, librdmacm.so.1 and
    /// libroce_preload.so (default: ROCE_EMU_LIB_DIR, else beside `roce`,
    /// else ../lib/roce-emu from `roce`, where `roce install` puts them).
    #[arg(long, value_name = "DIR")]
    lib_dir: Option<PathBuf>,
    /// Run CMD's TCP sockets over rsockets: librspreload.so (from the
    /// same directory) is preloaded after libroce_preload.so.
    #[arg(long)]
    rsockets: bool,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

/// The files `roce run` needs in its library directory.
pub const LIBS: [&str; 3] = ["libibverbs.so.1", "librdmacm.so.1", "libroce_preload.so"];

/// The rsocket preload (`roce run --rsockets`), beside [`LIBS`]; `roce
/// install` installs it with them.
pub const RSPRELOAD: &str = "librspreload.so";

/// The directory of the running `roce` binary.
pub fn bin_dir() -> Option<PathBuf> {
    std::env::current_exe().ok()?.parent().map(Path::to_path_buf)
}

/// Where `roce install` puts the libraries by default, and where `roce
/// run` looks last: `<dir of roce>/../lib/roce-emu` (`~/.cargo/lib/roce-emu`
/// for a `roce` in `~/.cargo/bin`).
pub fn installed_lib_dir(bin_dir: &Path) -> PathBuf {
    bin_dir.parent().unwrap_or(bin_dir).join("lib").join("roce-emu")
}

/// The first library of [`LIBS`] missing from `dir`.
fn missing(dir: &Path) -> Option<&'static str> {
    LIBS.into_iter().find(|f| !dir.join(f).exists())
}

/// The library directory: `--lib-dir`, else ROCE_EMU_LIB_DIR (each used
/// alone: a named directory without the libraries is an error), else beside
/// the `roce` binary, else `roce install`'s directory.
fn lib_dir(args: &RunArgs) -> Result<PathBuf, String> {
    let named = match (&args.lib_dir, std::env::var_os("ROCE_EMU_LIB_DIR")) {
        (Some(d), _) => Some((d.clone(), "--lib-dir")),
        (None, Some(d)) if !d.is_empty() => Some((PathBuf::from(d), "ROCE_EMU_LIB_DIR")),
        _ => None,
    };
    if let Some((dir, how)) = named {
        return match missing(&dir) {
            None => Ok(dir),
            Some(f) => Err(format!(
                "{} has no {f} (from {how}): install the libraries with `roce install` \
                 (roce install --help), or build them in a clone (cargo build --release)",
                dir.display()
            )),
        };
    }
    let bin = bin_dir().ok_or("cannot find the roce binary's directory: pass --lib-dir")?;
    let installed = installed_lib_dir(&bin);
    for dir in [&bin, &installed] {
        if missing(dir).is_none() {
            return Ok(dir.clone());
        }
    }
    Err(format!(
        "no libibverbs.so.1, librdmacm.so.1 and libroce_preload.so beside {} nor in {}: \
         install them with `roce install` (roce install --help), or build them in a clone \
         (cargo build --release), or pass --lib-dir DIR",
        bin.display(),
        installed.display()
    ))
}

/// Remove the trees of earlier runs whose process has ended (`sysfs-PID`:
/// the run's process becomes CMD, so nobody is left to remove it at exit).
fn remove_stale_trees(run_dir: &Path) {
    let Ok(rd) = std::fs::read_dir(run_dir) else { return };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("sysfs-")) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The tree of the configured devices, written into directory `name` of
/// the user's runtime directory.
fn write_tree(name: &str) -> Result<PathBuf, String> {
    use roce_host::{DeviceConfig, TransportKind};
    use roce_verbs_api::gid::{gid_table, node_guid};
    let cfgs = DeviceConfig::load_all().map_err(|e| format!("device configuration: {e}"))?;
    let devs: Vec<roce_host::sysfs::SysfsDevice> = cfgs
        .iter()
        .enumerate()
        .map(|(index, c)| roce_host::sysfs::SysfsDevice {
            name: c.name.clone(),
            index,
            gids: gid_table(c.addr).to_vec(),
            node_guid: node_guid(c.addr),
            fw_ver: roce_emulator::objects::DeviceAttr::default().fw_ver,
            netdev: match &c.transport {
                TransportKind::Raw { ifname } => Some(ifname.clone()),
                _ => roce_host::sysfs::netdev_of(c.addr),
            },
            active_mtu: c.mtu.bytes() as u32,
            alias_prefix: match &c.transport {
                TransportKind::Raw { .. } => None,
                _ => roce_host::sysfs::owner_of(c.addr).and_then(|o| o.1),
            },
        })
        .collect();
    let run_dir = roce_host::registry::run_dir();
    remove_stale_trees(&run_dir);
    let root = run_dir.join(name);
    let _ = std::fs::remove_dir_all(&root);
    roce_host::sysfs::write_tree(&root, &devs)
        .map_err(|e| format!("writing {}: {e}", root.display()))?;
    Ok(root)
}

/// `VAR=new:old` (new first), or `new` alone.
fn prepend(var: &str, new: &Path, sep: &str) -> OsString {
    let mut v = OsString::from(new.as_os_str());
    if let Some(old) = std::env::var_os(var).filter(|o| !o.is_empty()) {
        v.push(sep);
        v.push(old);
    }
    v
}

pub fn run(args: &RunArgs) -> ExitCode {
    let dir = match lib_dir(args) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("roce run: {e}");
            return ExitCode::from(2);
        }
    };
    // libroce_preload.so, then (--rsockets) librspreload.so
    let mut preload = OsString::from(dir.join("libroce_preload.so"));
    if args.rsockets {
        let rs = dir.join(RSPRELOAD);
        if !rs.exists() {
            eprintln!(
                "roce run: {} has no {RSPRELOAD} (for --rsockets): install the libraries again \
                 with `roce install` (roce install --help), or build them in a clone (cargo \
                 build --release)",
                dir.display()
            );
            return ExitCode::from(2);
        }
        preload.push(" ");
        preload.push(rs);
    }
    // `--print-env`'s tree outlives this process (a shell uses it): one
    // fixed name, rewritten by the next --print-env
    let name = match args.print_env {
        true => "sysfs-shell".to_string(),
        false => format!("sysfs-{}", std::process::id()),
    };
    let tree = match write_tree(&name) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("roce run: {e}");
            return ExitCode::from(2);
        }
    };
    let env = [
        ("LD_LIBRARY_PATH", prepend("LD_LIBRARY_PATH", &dir, ":")),
        ("LD_PRELOAD", prepend("LD_PRELOAD", Path::new(&preload), " ")),
        (roce_preload_env(), tree.clone().into_os_string()),
    ];
    if args.print_env {
        for (k, v) in &env {
            println!("export {k}='{}'", v.to_string_lossy());
        }
        return ExitCode::SUCCESS;
    }
    let Some((prog, rest)) = args.cmd.split_first() else {
        let _ = std::fs::remove_dir_all(&tree);
        eprintln!("roce run: no command given (roce run -- CMD [ARGS...]; see roce run --help)");
        return ExitCode::from(2);
    };
    // Become CMD (exec): its PID, signals and exit status are the
    // program's own, with no process of ours in between (a launcher that
    // kills CMD by its PID kills the program). The tree, named by this PID,
    // is removed by a later run once the program has ended.
    let mut c = std::process::Command::new(prog);
    c.args(rest);
    for (k, v) in &env {
        c.env(k, v);
    }
    use std::os::unix::process::CommandExt;
    let e = c.exec();
    let _ = std::fs::remove_dir_all(&tree);
    eprintln!("roce run: cannot run {}: {e}", prog.to_string_lossy());
    ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 })
}

/// The variable naming the tree (`roce_preload::ENV_SYSFS`).
fn roce_preload_env() -> &'static str {
    "ROCE_EMU_SYSFS"
}
