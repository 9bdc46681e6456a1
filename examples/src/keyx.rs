//! The out-of-band exchange of the RDMA WRITE/READ/atomics examples.
//!
//! RDMA needs the peer to know three things before the first packet: how
//! to reach the QP (address, QP number, first PSN) and, for one-sided
//! operations, *where* to read or write (the buffer's virtual address, its
//! length and the remote key that grants access). Real applications send
//! these over TCP or use the RDMA connection manager; here each side sends
//! one text line over TCP:
//!
//! ```text
//! addr=127.0.0.2 qpn=0x000011 psn=0x1a2b3c va=0x7f0000000000 len=4096 rkey=0x00000203
//! ```
//!
//! and, when the one-sided work is finished, the client sends `done` so
//! the server (which sees nothing of a WRITE or READ: no completion on its
//! side) knows it may look at its buffer.

use clap::Parser;
use roce_verbs_api::{
    AccessFlags, Budget, ConnectOptions, Context, Cq, Mr, Pd, Qp, QpEndpoint, WcStatus,
};
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// What one side tells the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The device address (the RoCEv2 GID as an IP address).
    pub addr: IpAddr,
    /// The QP number.
    pub qpn: u32,
    /// The first PSN this side sends.
    pub psn: u32,
    /// Virtual address of the exposed buffer.
    pub va: u64,
    /// Its length.
    pub len: u64,
    /// The remote key that grants access to it.
    pub rkey: u32,
}

impl Peer {
    /// The one-line text form (with the newline).
    pub fn to_line(&self) -> String {
        format!(
            "addr={} qpn={:#08x} psn={:#08x} va={:#x} len={} rkey={:#010x}\n",
            self.addr, self.qpn, self.psn, self.va, self.len, self.rkey
        )
    }

    /// Parse the text form; any missing or malformed field is an error.
    pub fn parse(line: &str) -> Result<Peer, String> {
        let mut p =
            Peer { addr: IpAddr::from([0, 0, 0, 0]), qpn: 0, psn: 0, va: 0, len: 0, rkey: 0 };
        let mut seen = 0u8;
        for f in line.split_whitespace() {
            let (k, v) = f.split_once('=').ok_or_else(|| format!("bad field {f:?}"))?;
            let n = || crate::parse_c_number(v);
            match k {
                "addr" => {
                    (p.addr, seen) = (v.parse().map_err(|_| format!("bad addr {v:?}"))?, seen | 1)
                }
                "qpn" => (p.qpn, seen) = (n()? as u32, seen | 2),
                "psn" => (p.psn, seen) = (n()? as u32 & 0xff_ffff, seen | 4),
                "va" => (p.va, seen) = (n()?, seen | 8),
                "len" => (p.len, seen) = (n()?, seen | 16),
                "rkey" => (p.rkey, seen) = (n()? as u32, seen | 32),
                _ => return Err(format!("unknown field {k:?}")),
            }
        }
        if seen != 63 {
            return Err(format!("incomplete peer line {line:?}"));
        }
        Ok(p)
    }
}

/// The command line of the three examples.
#[derive(Parser, Debug, Clone)]
pub struct Args {
    /// TCP port of the key exchange
    #[arg(short = 'p', long = "port", default_value_t = 18516)]
    pub port: u16,
    /// device name (ROCE_EMU_DEVICES / devices.conf)
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// use a UDP device at this local address
    #[arg(long = "addr")]
    pub addr: Option<IpAddr>,
    /// extension: record every frame of the device to this pcap file
    #[arg(long = "pcap")]
    pub pcap: Option<std::path::PathBuf>,
    /// the server to connect to (without: be the server)
    pub server: Option<String>,
}

/// An exchanged connection: the peer's facts and the TCP stream (kept
/// open for the final "done").
pub struct Link {
    /// What the peer sent.
    pub peer: Peer,
    stream: BufReader<TcpStream>,
}

impl Link {
    /// Server: accept one client on `port`, read its line, send ours.
    pub fn accept(port: u16, mine: &Peer) -> Result<Link, String> {
        let l =
            TcpListener::bind(("0.0.0.0", port)).map_err(|e| format!("listen on {port}: {e}"))?;
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let mut stream = BufReader::new(s);
        let peer = read_peer(&mut stream)?;
        stream.get_mut().write_all(mine.to_line().as_bytes()).map_err(|e| e.to_string())?;
        Ok(Link { peer, stream })
    }

    /// Client: connect to `host:port` (retrying for 5 s while the server
    /// starts), send our line, read the server's.
    pub fn connect(host: &str, port: u16, mine: &Peer) -> Result<Link, String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let s = loop {
            match TcpStream::connect((host, port)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => return Err(format!("connect to {host}:{port}: {e}")),
            }
        };
        let mut stream = BufReader::new(s);
        stream.get_mut().write_all(mine.to_line().as_bytes()).map_err(|e| e.to_string())?;
        let peer = read_peer(&mut stream)?;
        Ok(Link { peer, stream })
    }

    /// Tell the peer we are finished.
    pub fn send_done(&mut self) -> Result<(), String> {
        self.stream.get_mut().write_all(b"done\n").map_err(|e| e.to_string())
    }

    /// Wait until the peer says it is finished.
    pub fn wait_done(&mut self) -> Result<(), String> {
        let mut l = String::new();
        self.stream.read_line(&mut l).map_err(|e| e.to_string())?;
        if l.trim() == "done" {
            Ok(())
        } else {
            Err(format!("expected done, got {l:?}"))
        }
    }
}

/// One side of an example, set up and connected to the other.
pub struct Side {
    /// The opened device.
    pub ctx: Context,
    /// The protection domain of the QP and the buffer.
    pub pd: Pd,
    /// The CQ of both of the QP's queues.
    pub cq: Cq,
    /// The RC QP, in RTS towards the peer's.
    pub qp: Qp,
    /// The registered buffer.
    pub mr: Mr,
    /// The TCP exchange, kept for the final "done".
    pub link: Link,
    /// What the peer sent.
    pub peer: Peer,
}

impl Side {
    /// Whether this side is the server (no server named on the command
    /// line): it exposes its buffer and waits.
    pub fn is_server(args: &Args) -> bool {
        args.server.is_none()
    }

    /// The steps every example takes before its one-sided work:
    ///
    /// 1. open the device and create the usual objects: a protection
    ///    domain, a completion queue and a reliable-connected (RC) queue
    ///    pair;
    /// 2. register a buffer of `len` bytes with `access` (what the peer may
    ///    do to it: REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE),
    ///    and let `fill` write its first contents;
    /// 3. exchange what the peer needs: how to reach our QP (address, QP
    ///    number, first PSN), and where our buffer is (virtual address and
    ///    rkey);
    /// 4. connect the QP: RESET -> INIT -> RTR (towards the peer) -> RTS.
    pub fn connect(
        args: &Args,
        len: usize,
        access: AccessFlags,
        fill: impl FnOnce(&Context, &Mr) -> Result<(), String>,
    ) -> Result<Side, String> {
        let dev = crate::open_device_with(args.ib_dev.as_deref(), args.addr, args.pcap.as_deref())?;
        let ctx = dev.open();
        let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
        let cq = ctx.create_cq(16).map_err(|e| e.to_string())?;
        let qp = pd.qp_builder(&cq, &cq).build().map_err(|e| e.to_string())?;
        let mr = pd.reg_mr(len, access).map_err(|e| e.to_string())?;
        fill(&ctx, &mr)?;
        let me = Peer {
            addr: ctx.addr(),
            qpn: qp.qpn().value(),
            psn: rand::random::<u32>() & 0xff_ffff,
            va: mr.addr(),
            len: len as u64,
            rkey: mr.rkey().value(),
        };
        let link = match &args.server {
            None => Link::accept(args.port, &me)?,
            Some(host) => Link::connect(host, args.port, &me)?,
        };
        let peer = link.peer;
        let local = QpEndpoint { addr: me.addr, qpn: me.qpn, psn: me.psn };
        let remote = QpEndpoint { addr: peer.addr, qpn: peer.qpn, psn: peer.psn };
        qp.connect(&local, &remote, &ConnectOptions::default()).map_err(|e| e.to_string())?;
        Ok(Side { ctx, pd, cq, qp, mr, link, peer })
    }

    /// Wait (10 s at most) for one completion; an error names `what`
    /// failed unless it succeeded.
    pub fn wait_one(&self, what: &str) -> Result<(), String> {
        let wc = self
            .cq
            .poll_blocking(1, Budget { events: 0, wall: Duration::from_secs(10) })
            .map_err(|e| e.to_string())?;
        match wc.first() {
            Some(wc) if wc.status == WcStatus::Success => Ok(()),
            Some(wc) => Err(format!("{what} failed: {}", wc.status)),
            None => Err("no completion within 10 s".into()),
        }
    }
}

/// An example's `main`: parse the command line, run, and on an error print
/// it after the program's name and exit 1.
pub fn main_of(name: &str, run: fn(&Args) -> Result<(), String>) -> std::process::ExitCode {
    match run(&Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

fn read_peer(s: &mut BufReader<TcpStream>) -> Result<Peer, String> {
    let mut line = String::new();
    s.get_mut().set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    s.read_line(&mut line).map_err(|e| format!("reading the peer's line: {e}"))?;
    Peer::parse(&line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_line_round_trip() {
        let p = Peer {
            addr: "127.0.0.2".parse().unwrap(),
            qpn: 0x11,
            psn: 0xabcdef,
            va: 0x7f00_0000_0000,
            len: 4096,
            rkey: 0x203,
        };
        let l = p.to_line();
        assert_eq!(
            l,
            "addr=127.0.0.2 qpn=0x000011 psn=0xabcdef va=0x7f0000000000 len=4096 rkey=0x00000203\n"
        );
        assert_eq!(Peer::parse(&l), Ok(p));
        assert!(Peer::parse("addr=1.2.3.4 qpn=1").is_err());
        assert!(Peer::parse("addr=x qpn=1 psn=1 va=1 len=1 rkey=1").is_err());
        assert!(Peer::parse("bogus").is_err());
    }
}
