//! Publishing a running device's counters for other processes (`roce stats`).
//!
//! A process cannot read another process's emulated HCA, so every device
//! opened with [`crate::DeviceConfig::open`] runs a small publisher
//! thread that writes its counters every [`interval`] (and once more when
//! the device closes) under [`runtime_dir`]`/<name>/`:
//!
//! * `hw_counters/<counter>`: one file per counter holding its decimal
//!   value and a newline, like `/sys/class/infiniband/rxe0/ports/1/hw_counters/`
//!   (so `grep . …/hw_counters/*` works the same on both);
//! * `counters.json`: one consistent snapshot,
//!   `{"name", "addr", "pid", "updated_ms", "running", "counters": {name: value}}`
//!   (`updated_ms` is Unix time in milliseconds; `running` is false after the
//!   device closed).
//!
//! Files are replaced atomically (write a temporary file, rename). Devices
//! on a `roce_sim::SimNet` do not publish. `ROCE_EMU_STATS=0` turns
//! publishing off; `ROCE_EMU_STATS_INTERVAL_MS` sets the period (default 200).

use roce_emulator::{Counters, Hca};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// The counters the link under a device keeps, copied into the core's.
pub fn with_link(c: &mut Counters, t: &roce_transport::TransportCounters) {
    use std::sync::atomic::Ordering::Relaxed;
    c.rx_socket_drops = t.rx_socket_drops.load(Relaxed);
    c.credit_waits = t.credit_waits.load(Relaxed);
    c.credit_watchdog = t.credit_watchdog.load(Relaxed);
}

/// Environment variable overriding the directory counters are published under.
pub const ENV_RUNTIME_DIR: &str = "ROCE_EMU_RUNTIME_DIR";
/// Environment variable: `0`, `off` or `no` disables publishing.
pub const ENV_STATS: &str = "ROCE_EMU_STATS";
/// Environment variable: the publishing period in milliseconds.
pub const ENV_INTERVAL: &str = "ROCE_EMU_STATS_INTERVAL_MS";

/// Where devices publish: `$ROCE_EMU_RUNTIME_DIR`, else
/// `$XDG_RUNTIME_DIR/roce-emu`, else `<temp dir>/roce-emu-<user>`.
pub fn runtime_dir() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = env(ENV_RUNTIME_DIR) {
        return d;
    }
    if let Some(d) = env("XDG_RUNTIME_DIR") {
        return d.join("roce-emu");
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    std::env::temp_dir().join(format!("roce-emu-{user}"))
}

/// The directory of device `name`: [`runtime_dir`]`/<name>`.
pub fn device_dir(name: &str) -> PathBuf {
    runtime_dir().join(name)
}

/// Whether publishing is on (`ROCE_EMU_STATS` is not `0`/`off`/`no`).
pub fn enabled() -> bool {
    !matches!(
        std::env::var(ENV_STATS).unwrap_or_default().trim().to_ascii_lowercase().as_str(),
        "0" | "off" | "no" | "false"
    )
}

/// The publishing period (`ROCE_EMU_STATS_INTERVAL_MS`, default 200 ms, at least 10 ms).
pub fn interval() -> Duration {
    let ms = std::env::var(ENV_INTERVAL).ok().and_then(|v| v.trim().parse::<u64>().ok());
    Duration::from_millis(ms.unwrap_or(200).max(10))
}

/// One published snapshot, as `roce stats` reads it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Device name.
    pub name: String,
    /// Device address.
    pub addr: String,
    /// Process that published it.
    pub pid: u32,
    /// Unix time of the snapshot, in milliseconds.
    pub updated_ms: u64,
    /// False once the device was closed (the values are final).
    pub running: bool,
    /// Counter values by name, in [`Counters::iter`] order (unknown names kept at the end).
    pub counters: Vec<(String, u64)>,
    /// The QPs whose rate DCQCN limits, with that rate in Mb/s, by QPN
    /// (`qp_rates` beside `counters.json`: one `QPN RATE` line each).
    pub qp_rates: Vec<(u32, u64)>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
    }
    std::fs::rename(&tmp, path)
}

fn json_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o
}

/// Render a snapshot as the `counters.json` text.
pub fn to_json(name: &str, addr: &str, running: bool, c: &Counters) -> String {
    to_json_pid(name, addr, running, c, std::process::id())
}

fn to_json_pid(name: &str, addr: &str, running: bool, c: &Counters, pid: u32) -> String {
    let body: Vec<String> = c.iter().map(|(n, v)| format!("\"{n}\":{v}")).collect();
    format!(
        "{{\"name\":\"{}\",\"addr\":\"{}\",\"pid\":{},\"updated_ms\":{},\"running\":{},\"counters\":{{{}}}}}\n",
        json_escape(name),
        json_escape(addr),
        pid,
        now_ms(),
        running,
        body.join(",")
    )
}

/// Write `c` for device `name` into `dir` (`hw_counters/*` for changed
/// values, and `counters.json`). `prev` is what was written last time.
pub fn write_snapshot(
    dir: &Path,
    name: &str,
    addr: &str,
    running: bool,
    c: &Counters,
    prev: Option<&Counters>,
) -> std::io::Result<()> {
    let hw = dir.join("hw_counters");
    std::fs::create_dir_all(&hw)?;
    for (n, v) in c.iter() {
        if prev.and_then(|p| p.get(n)) != Some(v) {
            write_atomic(&hw.join(n), format!("{v}\n").as_bytes())?;
        }
    }
    write_atomic(&dir.join("counters.json"), to_json(name, addr, running, c).as_bytes())
}

/// Parse a `counters.json` text (the subset [`to_json`] writes).
pub fn parse_json(text: &str) -> Result<Snapshot, String> {
    let field = |key: &str| -> Result<&str, String> {
        let k = format!("\"{key}\":");
        let i = text.find(&k).ok_or_else(|| format!("no {key:?}"))? + k.len();
        Ok(text[i..].trim_start())
    };
    let string = |key: &str| -> Result<String, String> {
        let s = field(key)?.strip_prefix('"').ok_or_else(|| format!("{key:?} is not a string"))?;
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Ok(out),
                '\\' => match chars.next() {
                    Some('u') => {
                        let h: String = chars.by_ref().take(4).collect();
                        let v =
                            u32::from_str_radix(&h, 16).map_err(|_| "bad escape".to_string())?;
                        out.push(char::from_u32(v).unwrap_or('?'));
                    }
                    Some(e) => out.push(e),
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(format!("unterminated {key:?}"))
    };
    let number = |s: &str| -> Result<u64, String> {
        let d: String = s.chars().take_while(char::is_ascii_digit).collect();
        d.parse().map_err(|_| format!("bad number near {:?}", &s[..s.len().min(10)]))
    };
    let body = field("counters")?.strip_prefix('{').ok_or("\"counters\" is not an object")?;
    let body = &body[..body.find('}').ok_or("unterminated \"counters\"")?];
    let mut counters = Vec::new();
    for item in body.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = item.split_once(':').ok_or_else(|| format!("bad counter {item:?}"))?;
        counters.push((k.trim().trim_matches('"').to_string(), number(v.trim())?));
    }
    let order: Vec<&str> = Counters::default().iter().map(|(n, _)| n).collect();
    counters.sort_by_key(|(n, _)| order.iter().position(|o| o == n).unwrap_or(usize::MAX));
    Ok(Snapshot {
        name: string("name")?,
        addr: string("addr")?,
        pid: u32::try_from(number(field("pid")?)?).map_err(|_| "bad pid")?,
        updated_ms: number(field("updated_ms")?)?,
        running: field("running")?.starts_with("true"),
        counters,
        qp_rates: Vec::new(),
    })
}

/// Read the snapshot of device `name` from [`device_dir`] (for a device
/// shared by several processes: the sum over its members).
pub fn read(name: &str) -> std::io::Result<Snapshot> {
    read_file(&device_dir(name).join("counters.json"))
}

/// The members of a shared device: [`device_dir`]`/members/<pid>/`, one
/// snapshot per process that opened it since it was last unused, by pid.
pub fn read_members(name: &str) -> Vec<Snapshot> {
    read_members_in(&device_dir(name))
}

fn read_members_in(dir: &Path) -> Vec<Snapshot> {
    let Ok(rd) = std::fs::read_dir(dir.join("members")) else { return Vec::new() };
    let mut v: Vec<Snapshot> =
        rd.flatten().filter_map(|e| read_file(&e.path().join("counters.json")).ok()).collect();
    v.sort_by_key(|s| s.pid);
    v
}

/// Fold the snapshots of members whose process is gone into
/// `members/retired` (pid 0, closed), so the device's sum stays
/// cumulative, as a device's counters are, while the member directories
/// do not pile up. One process at a time (`members/.lock`).
fn retire_dead_members(total_dir: &Path, name: &str, addr: &str) {
    use nix::fcntl::{Flock, FlockArg};
    let members = total_dir.join("members");
    if std::fs::create_dir_all(&members).is_err() {
        return;
    }
    let Ok(f) = std::fs::File::create(members.join(".lock")) else { return };
    let Ok(_lock) = Flock::lock(f, FlockArg::LockExclusive) else { return };
    let retired_dir = members.join("retired");
    let mut retired = read_file(&retired_dir.join("counters.json"))
        .map(|s| sum(std::slice::from_ref(&s)))
        .unwrap_or_default();
    let mut gone = Vec::new();
    for m in read_members_in(total_dir) {
        if m.pid != 0 && !alive(m.pid) {
            retired = sum(&[snapshot_of(&retired), m.clone()]);
            gone.push(m.pid);
        }
    }
    if gone.is_empty() {
        return;
    }
    let json = to_json_pid(name, addr, false, &retired, 0);
    if std::fs::create_dir_all(&retired_dir).is_ok()
        && write_atomic(&retired_dir.join("counters.json"), json.as_bytes()).is_ok()
    {
        for pid in gone {
            let _ = std::fs::remove_dir_all(members.join(pid.to_string()));
        }
    }
}

fn snapshot_of(c: &Counters) -> Snapshot {
    Snapshot {
        name: String::new(),
        addr: String::new(),
        pid: 0,
        updated_ms: 0,
        running: false,
        counters: c.iter().map(|(n, v)| (n.to_string(), v)).collect(),
        qp_rates: Vec::new(),
    }
}

/// Whether process `pid` exists (the one check of the host's crates:
/// [`roce_transport::credits::process_alive`]).
pub fn alive(pid: u32) -> bool {
    roce_transport::credits::process_alive(pid)
}

/// The counters of `members` added up, by name.
pub fn sum(members: &[Snapshot]) -> Counters {
    let mut total = Counters::default();
    for m in members {
        for (n, v) in &m.counters {
            if let Some(t) = total.get_mut(n) {
                *t = t.saturating_add(*v);
            }
        }
    }
    total
}

fn read_file(path: &Path) -> std::io::Result<Snapshot> {
    let text = std::fs::read_to_string(path)?;
    let mut s = parse_json(&text).map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
    })?;
    if let Some(dir) = path.parent() {
        s.qp_rates = read_rates(dir);
    }
    Ok(s)
}

/// The name of the rates file beside `counters.json`.
const RATES: &str = "qp_rates";

/// Write the rate-limited QPs of a device (`QPN RATE_MBPS` lines) into
/// `dir`.
pub fn write_rates(dir: &Path, rates: &[(u32, u64)]) -> std::io::Result<()> {
    let text: String = rates.iter().map(|(q, r)| format!("{q} {r}\n")).collect();
    write_atomic(&dir.join(RATES), text.as_bytes())
}

/// The rate-limited QPs published in `dir` (none if there is no file;
/// lines that do not parse are skipped).
pub fn read_rates(dir: &Path) -> Vec<(u32, u64)> {
    let text = std::fs::read_to_string(dir.join(RATES)).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (q, r) = l.trim().split_once(' ')?;
            Some((q.parse().ok()?, r.trim().parse().ok()?))
        })
        .collect()
}

/// Lock a device's core; a poisoned lock is used anyway (the counters are
/// whatever the panicking holder left).
fn lock(hca: &Mutex<Hca>) -> MutexGuard<'_, Hca> {
    hca.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running publisher; dropping it writes the final snapshot
/// (`running: false`) and stops its thread.
pub struct Publisher {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").finish_non_exhaustive()
    }
}

impl Publisher {
    /// Start publishing `hca`'s counters into [`device_dir`]`(name)` now and
    /// every [`interval`] (when they changed); `None` when publishing is off or the thread cannot start.
    ///
    /// A member of a shared device (`shared`) writes its own counters to
    /// [`device_dir`]`(name)/members/<pid>/` and the sum over the members
    /// to [`device_dir`]`(name)`; a new member first folds the files of
    /// members whose process is gone into `members/retired`, so the sum
    /// stays cumulative.
    ///
    /// `link`: the live counters of the transport under the device; the
    /// ones counted there (`rx_socket_drops`, `credit_waits`,
    /// `credit_watchdog`) are published with the core's.
    pub fn start(
        hca: Arc<Mutex<Hca>>,
        shared: bool,
        link: Option<Arc<roce_transport::TransportCounters>>,
    ) -> Option<Publisher> {
        if !enabled() {
            return None;
        }
        let (name, addr) = {
            let h = lock(&hca);
            (h.name().to_string(), h.addr().to_string())
        };
        let total_dir = device_dir(&name);
        let dir = match shared {
            true => {
                retire_dead_members(&total_dir, &name, &addr);
                total_dir.join("members").join(std::process::id().to_string())
            }
            false => total_dir.clone(),
        };
        let mut prev_total: Option<Counters> = None;
        let period = interval();
        let (tx, rx) = mpsc::channel::<()>();
        let thread =
            roce_transport::signals::spawn_quiet(format!("roce-stats-{name}"), move || {
                let mut prev: Option<Counters> = None;
                let mut prev_rates: Option<Vec<(u32, u64)>> = None;
                let mut warned = false;
                let mut stop = false;
                loop {
                    let (mut c, mut rates) = {
                        let h = lock(&hca);
                        (h.counters(), h.qp_rates())
                    };
                    if stop {
                        rates.clear(); // (a closed device limits nothing)
                    }
                    if let Some(t) = &link {
                        with_link(&mut c, t);
                    }
                    if stop || prev != Some(c) || prev_rates.as_ref() != Some(&rates) {
                        let mut r = write_snapshot(&dir, &name, &addr, !stop, &c, prev.as_ref())
                            .and_then(|()| write_rates(&dir, &rates));
                        prev_rates = Some(rates);
                        if shared && r.is_ok() {
                            let members = read_members_in(&total_dir);
                            let running = members.iter().any(|m| m.running && alive(m.pid));
                            let all: Vec<(u32, u64)> = members
                                .iter()
                                .filter(|m| m.running && alive(m.pid))
                                .flat_map(|m| m.qp_rates.iter().copied())
                                .collect();
                            let _ = write_rates(&total_dir, &all);
                            let t = sum(&members);
                            r = write_snapshot(
                                &total_dir,
                                &name,
                                &addr,
                                running,
                                &t,
                                prev_total.as_ref(),
                            );
                            prev_total = Some(t);
                        }
                        match r {
                            Ok(()) => prev = Some(c),
                            Err(e) if !warned => {
                                warned = true;
                                tracing::warn!(dev = %name, dir = %dir.display(), error = %e,
                                    "cannot publish counters");
                            }
                            Err(_) => {}
                        }
                    }
                    if stop {
                        break;
                    }
                    stop = !matches!(rx.recv_timeout(period), Err(RecvTimeoutError::Timeout));
                }
            })
            .ok()?;
        Some(Publisher { stop: Some(tx), thread: Some(thread) })
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_links_counters_are_published_with_the_cores() {
        let t = roce_transport::TransportCounters::default();
        roce_transport::TransportCounters::add(&t.rx_socket_drops, 3);
        roce_transport::TransportCounters::add(&t.credit_waits, 5);
        roce_transport::TransportCounters::add(&t.credit_watchdog, 1);
        let mut c = Counters { sent_pkts: 9, ..Counters::default() };
        with_link(&mut c, &t);
        assert_eq!(
            (c.sent_pkts, c.rx_socket_drops, c.credit_waits, c.credit_watchdog),
            (9, 3, 5, 1)
        );
        let json = to_json("roce9", "127.0.0.9", true, &c);
        assert!(json.contains("\"credit_waits\":5"), "{json}");
    }

    #[test]
    fn json_round_trip_and_files() {
        let c = Counters { sent_pkts: 7, rcvd_seq_err: 2, icrc_err: 1, ..Counters::default() };
        let dir = std::env::temp_dir().join(format!("roce-publish-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_snapshot(&dir, "ro\"ce0", "127.0.0.2", true, &c, None).unwrap();
        let s = parse_json(&std::fs::read_to_string(dir.join("counters.json")).unwrap()).unwrap();
        assert_eq!((s.name.as_str(), s.addr.as_str(), s.running), ("ro\"ce0", "127.0.0.2", true));
        assert_eq!(s.pid, std::process::id());
        assert_eq!(s.counters.len(), c.iter().count());
        assert_eq!(s.counters[0], ("sent_pkts".to_string(), 7));
        assert!(s.counters.contains(&("rcvd_seq_err".to_string(), 2)));
        assert_eq!(std::fs::read_to_string(dir.join("hw_counters/icrc_err")).unwrap(), "1\n");
        assert_eq!(std::fs::read_to_string(dir.join("hw_counters/link_downed")).unwrap(), "0\n");
        // only changed values are rewritten; the JSON always
        let c2 = Counters { sent_pkts: 9, ..c };
        std::fs::write(dir.join("hw_counters/icrc_err"), "x\n").unwrap();
        write_snapshot(&dir, "ro\"ce0", "127.0.0.2", false, &c2, Some(&c)).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("hw_counters/sent_pkts")).unwrap(), "9\n");
        assert_eq!(std::fs::read_to_string(dir.join("hw_counters/icrc_err")).unwrap(), "x\n");
        let s = parse_json(&std::fs::read_to_string(dir.join("counters.json")).unwrap()).unwrap();
        assert!(!s.running);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(parse_json("{}").is_err());
        // a shared device: members' snapshots add up
        let m = |pid: u32, sent: u64| Snapshot {
            name: "r".into(),
            addr: "a".into(),
            pid,
            updated_ms: 0,
            running: true,
            counters: vec![("sent_pkts".into(), sent), ("rcvd_pkts".into(), 1), ("nope".into(), 5)],
            qp_rates: Vec::new(),
        };
        let t = sum(&[m(1, 10), m(2, 32)]);
        assert_eq!((t.sent_pkts, t.rcvd_pkts, t.icrc_err), (42, 2, 0));
        assert!(parse_json("{\"counters\":{\"a\":x}}").is_err());
    }

    #[test]
    fn rate_limited_qps_are_published_beside_the_counters() {
        let dir = std::env::temp_dir().join(format!("roce-rates-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_snapshot(&dir, "roce0", "127.0.0.2", true, &Counters::default(), None).unwrap();
        assert!(read_rates(&dir).is_empty(), "no file: no limited QP");
        write_rates(&dir, &[(17, 1165), (0x12, 40_000)]).unwrap();
        let s = read_file(&dir.join("counters.json")).unwrap();
        assert_eq!(s.qp_rates, [(17, 1165), (18, 40_000)]);
        std::fs::write(dir.join(RATES), "17 5\njunk\n19\n20 x\n21 7\n").unwrap();
        assert_eq!(read_rates(&dir), [(17, 5), (21, 7)], "bad lines skipped");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
