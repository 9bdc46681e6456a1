//! Two network namespaces joined by a veth pair, for the tests that move
//! real frames through the kernel: the raw transport's (`raw_netns.rs`) and
//! `rc_pingpong` over it (`examples/tests/pingpong_raw.rs`, which includes
//! this file by path). Making them needs root and `ip`.

use std::process::{Command, Stdio};

/// Run `args[0]` with the other arguments: its standard output, or what it
/// said on standard error.
pub fn run(args: &[&str]) -> Result<String, String> {
    let o = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(format!("{args:?}: {}", String::from_utf8_lossy(&o.stderr).trim()))
    }
}

/// Two namespaces joined by a veth pair (the first device in `a`, the
/// second in `b`); deleted on drop, even when the test fails.
pub struct Netns {
    pub a: String,
    pub b: String,
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.a]);
        let _ = run(&["ip", "netns", "del", &self.b]);
    }
}

impl Netns {
    /// Create namespaces `names` joined by the veth pair `devs`, loopback
    /// and veth up, without duplicate address detection; `addrs` (CIDR)
    /// are assigned to the two devices when given. `None` (with a
    /// `SKIPPED` message) when namespaces cannot be made here.
    pub fn create(
        names: [String; 2],
        devs: [&str; 2],
        addrs: Option<(&str, &str)>,
    ) -> Option<Netns> {
        let [a, b] = names;
        if let Err(e) = run(&["ip", "netns", "add", &a]) {
            eprintln!("SKIPPED: cannot create a network namespace (needs root and `ip`): {e}");
            return None;
        }
        let ns = Netns { a: a.clone(), b: b.clone() };
        run(&["ip", "netns", "add", &b]).expect("second namespace");
        // No duplicate address detection in our private namespaces: a
        // tentative (link-local) address delays neighbour discovery on a
        // loaded machine.
        for ns_name in [&a, &b] {
            for conf in ["default", "all"] {
                let key = format!("net.ipv6.conf.{conf}.accept_dad=0");
                let _ = run(&["ip", "netns", "exec", ns_name, "sysctl", "-qw", &key]);
            }
        }
        let [da, db] = devs;
        run(&[
            "ip", "link", "add", da, "netns", &a, "type", "veth", "peer", "name", db, "netns", &b,
        ])
        .expect("veth pair");
        for (ns_name, dev, addr) in [(&a, da, addrs.map(|x| x.0)), (&b, db, addrs.map(|x| x.1))] {
            run(&["ip", "-n", ns_name, "link", "set", "lo", "up"]).expect("lo up");
            if let Some(addr) = addr {
                let mut cmd = vec!["ip", "-n", ns_name, "addr", "add", addr, "dev", dev];
                if addr.contains(':') {
                    cmd.push("nodad");
                }
                run(&cmd).expect("address");
            }
            run(&["ip", "-n", ns_name, "link", "set", dev, "up"]).expect("link up");
        }
        Some(ns)
    }
}
