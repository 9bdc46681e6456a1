//! What the example programs' tests share: a command on a program with its
//! output piped, and waiting for it under a deadline.
#![allow(dead_code)] // (each test executable uses its own part)

use std::ffi::OsStr;
use std::io::Read;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How a process ended: its exit code (None: killed at the deadline or by
/// a signal) and what it printed.
pub struct Run {
    pub code: Option<i32>,
    pub out: String,
    pub err: String,
}

impl Run {
    /// stdout then stderr.
    pub fn all(&self) -> String {
        format!("{}{}", self.out, self.err)
    }
}

/// `prog args` with stdin empty, stdout and stderr piped and no pcap
/// recording (`ROCE_EMU_PCAP`, unless the caller sets it again).
pub fn command(prog: impl AsRef<OsStr>, args: &[&str]) -> Command {
    let mut c = Command::new(prog);
    c.env_remove("ROCE_EMU_PCAP")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// [`command`] with the devices `devices` (`ROCE_EMU_DEVICES`) and no
/// statistics, started.
pub fn spawn_on(prog: &str, devices: &str, args: &[&str]) -> Child {
    command(prog, args)
        .env("ROCE_EMU_DEVICES", devices)
        .env("ROCE_EMU_STATS", "0")
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {prog}: {e}"))
}

/// `ROCE_EMU_DEVICES` for roce0 on 127.0.`net`.2 and roce1 on .3.
pub fn two_devices(net: u8) -> String {
    format!("roce0=udp:127.0.{net}.2,roce1=udp:127.0.{net}.3")
}

/// A TCP port free a moment ago.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("0.0.0.0:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Wait for `c` at most until `deadline`; kill it (by its PID) after that.
pub fn finish(mut c: Child, deadline: Instant) -> Run {
    let code = loop {
        match c.try_wait() {
            Ok(Some(st)) => break st.code(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = c.kill();
                let _ = c.wait();
                break None;
            }
        }
    };
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(mut o) = c.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = c.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    Run { code, out, err }
}

/// [`finish`] with a deadline `limit` from now.
pub fn finish_within(c: Child, limit: Duration) -> Run {
    finish(c, Instant::now() + limit)
}
