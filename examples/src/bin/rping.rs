//! rping over the RDMA connection manager, speaking rdma-core's `rping`
//! protocol, so either side can be Debian's `rping` (on kernel rxe or on
//! the drop-in) and the other this program.
//!
//! The connection is made with CM MADs over QP1 (REQ, REP, RTU; DREQ and
//! DREP at the end), not over a TCP side channel. Then, per ping:
//!
//! ```text
//! client                                   server
//!   SEND {start_buf addr, rkey, size}  ─►    RDMA READ of start_buf
//!                                      ◄─    SEND (go ahead)
//!   SEND {rdma_buf addr, rkey, size}   ─►    RDMA WRITE of what it read
//!                                      ◄─    SEND (done)
//!   compare rdma_buf with start_buf (-V)
//! ```
//!
//! ```text
//! export ROCE_EMU_DEVICES=roce0=udp:127.0.0.2,roce1=udp:127.0.0.3
//! rping -s -a 127.0.0.2 -v &              # server on roce0's address
//! rping -c -a 127.0.0.2 -C 3 -v -V        # client (uses another device)
//! ```

use clap::Parser;
use roce_host::DeviceConfig;
use roce_verbs_api::rdma_cm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use roce_verbs_api::{
    AccessFlags, Budget, Cq, Device, Mr, Qp, RKey, RecvWr, SendFlags, SendWr, WcOpcode, WcStatus,
    WrOpcode,
};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

/// rping: a ping over RDMA READ and WRITE, connected with the RDMA CM.
#[derive(Parser, Debug)]
#[command(name = "rping", version, disable_version_flag = true)]
struct Args {
    /// Server: listen on -a ADDR -p PORT.
    #[arg(short = 's', conflicts_with = "client")]
    server: bool,
    /// Client: connect to -a ADDR -p PORT.
    #[arg(short = 'c')]
    client: bool,
    /// The server's address (server: the address to bind, a device's).
    #[arg(short = 'a')]
    addr: IpAddr,
    /// The client's own address (picks its device).
    #[arg(short = 'I')]
    src: Option<IpAddr>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Pings (0 = forever; client).
    #[arg(short = 'C', default_value_t = 0)]
    count: u64,
    /// Ping data size (bytes, at least 16).
    #[arg(short = 'S', default_value_t = 64)]
    size: usize,
    /// Print each ping's data.
    #[arg(short = 'v')]
    verbose: bool,
    /// Check each ping's data (client).
    #[arg(short = 'V')]
    validate: bool,
    /// The device to use (a name from ROCE_EMU_DEVICES or the config file).
    #[arg(short = 'd')]
    device: Option<String>,
    /// Seconds to wait for any one step before giving up.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if !args.server && !args.client {
        eprintln!("rping: give -s (server) or -c (client)");
        return ExitCode::from(2);
    }
    if args.size < 16 {
        eprintln!("rping: invalid size {} (min 16)", args.size);
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rping: {e}");
            ExitCode::from(1)
        }
    }
}

/// The device this side uses: `-d`, else the server's one with address
/// `-a`, the client's one with address `-I` or else the first configured
/// device whose address is not the server's (each process owns its
/// devices: the server's is open in the server process).
fn device(args: &Args) -> Result<Device, String> {
    let all = DeviceConfig::load_all().map_err(|e| e.to_string())?;
    let cfg = if let Some(n) = &args.device {
        all.into_iter().find(|c| &c.name == n).ok_or_else(|| format!("device {n} not found"))?
    } else if args.server {
        match all.into_iter().find(|c| c.addr == args.addr) {
            Some(c) => c,
            None => DeviceConfig::udp("roce0", args.addr),
        }
    } else if let Some(src) = args.src {
        match all.into_iter().find(|c| c.addr == src) {
            Some(c) => c,
            None => DeviceConfig::udp("roce1", src),
        }
    } else {
        all.into_iter().find(|c| c.addr != args.addr).ok_or_else(|| {
            "no device for the client: configure one besides the server's \
             (ROCE_EMU_DEVICES=roce0=udp:127.0.0.2,roce1=udp:127.0.0.3) or give -I ADDR"
                .to_string()
        })?
    };
    cfg.open().map_err(|e| format!("couldn't open {}: {e}", cfg.name))
}

struct Side {
    qp: Qp,
    cq: Cq,
    /// Where the peer's 16-byte {addr, rkey, size} messages arrive.
    recv_buf: Mr,
    /// What we send: {addr, rkey, size} of one of our buffers.
    send_buf: Mr,
    /// The server's READ target and WRITE source; the client's WRITE target.
    rdma_buf: Mr,
    /// The client's ping data (the server READs it).
    start_buf: Mr,
    timeout: Duration,
    /// The CM events of the connection.
    ch: EventChannel,
}

/// What [`Side::wait`] returns when the peer disconnected.
const DISCONNECTED: &str = "disconnected";

impl Side {
    fn new(id: &CmId, ch: &EventChannel, size: usize, timeout: Duration) -> Result<Side, String> {
        let ctx = id.context().ok_or("the id has no device")?;
        let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
        let cq = ctx.create_cq(16).map_err(|e| e.to_string())?;
        let qp = id
            .create_qp(pd.qp_builder(&cq, &cq).max_send_wr(8).max_recv_wr(4))
            .map_err(|e| format!("rdma_create_qp: {e}"))?;
        let remote =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let reg = |len: usize, a: AccessFlags| pd.reg_mr(len, a).map_err(|e| e.to_string());
        let s = Side {
            recv_buf: reg(16, AccessFlags::LOCAL_WRITE)?,
            send_buf: reg(16, AccessFlags::LOCAL_WRITE)?,
            rdma_buf: reg(size, remote)?,
            start_buf: reg(size, remote)?,
            qp,
            cq,
            timeout,
            ch: ch.clone(),
        };
        s.post_recv()?;
        Ok(s)
    }

    fn post_recv(&self) -> Result<(), String> {
        let b = &self.recv_buf;
        self.qp.post_recv(RecvWr::new(1, b.addr(), 16, b.lkey())).map_err(|e| e.to_string())
    }

    /// SEND {addr, rkey, size} of `buf` (rping's `rping_format_send`).
    fn advertise(&self, buf: &Mr, size: usize) -> Result<(), String> {
        let mut m = [0u8; 16];
        m[..8].copy_from_slice(&buf.addr().to_be_bytes());
        m[8..12].copy_from_slice(&buf.rkey().value().to_be_bytes());
        m[12..].copy_from_slice(&(size as u32).to_be_bytes());
        self.send_buf.write(0, &m).map_err(|e| e.to_string())?;
        self.send(16)
    }

    fn send(&self, len: u32) -> Result<(), String> {
        let b = &self.send_buf;
        let wr = SendWr::new(2, WrOpcode::Send)
            .sge(b.addr(), len, b.lkey())
            .with_flags(SendFlags::SIGNALED);
        self.qp.post_send(wr).map_err(|e| e.to_string())?;
        self.wait(WcOpcode::Send).map(|_| ())
    }

    /// The next completion, which must be `want` and successful. The CM's
    /// events are watched meanwhile (rping's CM thread): a DISCONNECTED
    /// ends the wait with [`DISCONNECTED`].
    fn wait(&self, want: WcOpcode) -> Result<u32, String> {
        let end = std::time::Instant::now() + self.timeout;
        loop {
            let budget = Budget { events: 10_000, wall: Duration::from_millis(20) };
            let wc = self.cq.poll_blocking(1, budget).map_err(|e| e.to_string())?;
            if let Some(wc) = wc.first() {
                if wc.status != WcStatus::Success {
                    return Err(format!(
                        "cq completion failed status {:?} ({:?})",
                        wc.status, wc.opcode
                    ));
                }
                if wc.opcode != want {
                    return Err(format!(
                        "unexpected completion {:?} while waiting for {want:?}",
                        wc.opcode
                    ));
                }
                return Ok(wc.byte_len);
            }
            if let Some(ev) = self.ch.try_get_event() {
                if ev.kind == CmEventKind::Disconnected {
                    return Err(DISCONNECTED.into());
                }
                return Err(format!("cma event {}, error {}", ev.kind, ev.status));
            }
            if std::time::Instant::now() >= end {
                return Err(format!("no {want:?} completion within {:?}", self.timeout));
            }
        }
    }

    /// A received {addr, rkey, size}.
    fn recv_advert(&self) -> Result<(u64, u32, u32), String> {
        self.wait(WcOpcode::Recv)?;
        let mut m = [0u8; 16];
        self.recv_buf.read(0, &mut m).map_err(|e| e.to_string())?;
        self.post_recv()?;
        let addr = u64::from_be_bytes(m[..8].try_into().unwrap_or_default());
        let rkey = u32::from_be_bytes(m[8..12].try_into().unwrap_or_default());
        let len = u32::from_be_bytes(m[12..].try_into().unwrap_or_default());
        Ok((addr, rkey, len))
    }
}

fn event(ch: &EventChannel, want: CmEventKind, timeout: Duration) -> Result<CmEvent, String> {
    let e = ch.get_event(timeout).map_err(|_| format!("no {want} within {timeout:?}"))?;
    if e.kind != want {
        return Err(format!("cma event {}, error {}", e.kind, e.status));
    }
    Ok(e)
}

fn run(args: &Args) -> Result<(), String> {
    let timeout = Duration::from_secs(args.timeout);
    let dev = device(args)?;
    let ch = EventChannel::new(vec![dev]);
    let peer = SocketAddr::new(args.addr, args.port);
    if args.server {
        server(args, &ch, peer, timeout)
    } else {
        client(args, &ch, peer, timeout)
    }
}

fn server(args: &Args, ch: &EventChannel, at: SocketAddr, timeout: Duration) -> Result<(), String> {
    let listen = ch.create_id(PortSpace::Tcp);
    listen.bind_addr(at).map_err(|e| format!("rdma_bind_addr: {e}"))?;
    listen.listen().map_err(|e| format!("rdma_listen: {e}"))?;
    // wait for a client as long as it takes (rping's server does)
    let req = loop {
        match ch.get_event(Duration::from_secs(3600)) {
            Ok(e) if e.kind == CmEventKind::ConnectRequest => break e,
            Ok(e) => return Err(format!("cma event {}, error {}", e.kind, e.status)),
            Err(_) => continue,
        }
    };
    let id = req.id.clone();
    let side = Side::new(&id, ch, args.size, timeout)?;
    id.accept(&ConnParam::default()).map_err(|e| format!("rdma_accept: {e}"))?;
    event(ch, CmEventKind::Established, timeout)?;
    loop {
        // the client's start buffer, or its disconnection
        let (addr, rkey, len) = match side.recv_advert() {
            Ok(a) => a,
            Err(e) if e == DISCONNECTED => break,
            Err(e) => return Err(e),
        };
        let len = len.min(args.size as u32);
        let b = &side.rdma_buf;
        let rd = SendWr::new(3, WrOpcode::RdmaRead)
            .sge(b.addr(), len, b.lkey())
            .remote(addr, RKey::new(rkey))
            .with_flags(SendFlags::SIGNALED);
        side.qp.post_send(rd).map_err(|e| e.to_string())?;
        side.wait(WcOpcode::RdmaRead)?;
        let data = side.rdma_buf.to_vec();
        if args.verbose {
            println!("server ping data: {}", c_str(&data));
        }
        side.send(16)?; // go ahead
        let (addr, rkey, _) = side.recv_advert()?;
        let n = (c_str(&data).len() + 1).min(args.size) as u32;
        let wr = SendWr::new(4, WrOpcode::RdmaWrite)
            .sge(b.addr(), n, b.lkey())
            .remote(addr, RKey::new(rkey))
            .with_flags(SendFlags::SIGNALED);
        side.qp.post_send(wr).map_err(|e| e.to_string())?;
        side.wait(WcOpcode::RdmaWrite)?;
        side.send(16)?; // done
    }
    println!("server DISCONNECT EVENT...");
    let _ = ch.get_event(timeout); // TIMEWAIT_EXIT
    Ok(())
}

fn client(args: &Args, ch: &EventChannel, to: SocketAddr, timeout: Duration) -> Result<(), String> {
    let id = ch.create_id(PortSpace::Tcp);
    id.resolve_addr(args.src, to).map_err(|e| format!("rdma_resolve_addr: {e}"))?;
    event(ch, CmEventKind::AddrResolved, timeout)?;
    id.resolve_route().map_err(|e| format!("rdma_resolve_route: {e}"))?;
    event(ch, CmEventKind::RouteResolved, timeout)?;
    let side = Side::new(&id, ch, args.size, timeout)?;
    id.connect(&ConnParam::default()).map_err(|e| format!("rdma_connect: {e}"))?;
    // (a REQ nobody answers is retried for over a minute, as librdmacm's)
    event(ch, CmEventKind::Established, timeout.max(Duration::from_secs(90)))?;
    let mut start = b'A';
    let mut ping = 0u64;
    while args.count == 0 || ping < args.count {
        let mut buf = format!("rdma-ping-{ping}: ").into_bytes();
        buf.truncate(args.size);
        let mut c = start;
        while buf.len() < args.size {
            buf.push(c);
            c = if c >= b'z' { b'A' } else { c + 1 };
        }
        start = if start >= b'z' { b'A' } else { start + 1 };
        buf[args.size - 1] = 0;
        side.start_buf.write(0, &buf).map_err(|e| e.to_string())?;
        side.advertise(&side.start_buf, args.size)?;
        side.recv_advert()?; // go ahead
        side.advertise(&side.rdma_buf, args.size)?;
        side.recv_advert()?; // done
        let got = side.rdma_buf.to_vec();
        if args.validate && got != buf {
            return Err(format!("data mismatch in ping {ping}"));
        }
        if args.verbose {
            println!("ping data: {}", c_str(&got));
        }
        ping += 1;
    }
    id.disconnect().map_err(|e| format!("rdma_disconnect: {e}"))?;
    event(ch, CmEventKind::Disconnected, timeout)?;
    Ok(())
}

/// The bytes before the first NUL, as text.
fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}
