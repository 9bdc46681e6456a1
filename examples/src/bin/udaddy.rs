//! udaddy over the RDMA connection manager: UD QPs found with SIDR
//! (SIDR_REQ / SIDR_REP over QP1), then datagrams both ways, as rdma-core's
//! `udaddy` does.
//!
//! ```text
//! export ROCE_EMU_DEVICES=roce0=udp:127.0.0.2,roce1=udp:127.0.0.3
//! udaddy -b 127.0.0.2 &                 # server: waits for a client
//! udaddy -s 127.0.0.2                   # client: SIDR, 10 datagrams, 10 replies
//! ```
//!
//! The client resolves the server's port (RDMA_PS_UDP) and connects: the
//! server's SIDR_REP names its UD QP and Q_Key, which the client's
//! ESTABLISHED event reports. The client sends `-C` datagrams of `-S`
//! bytes, each with its QP number as immediate data (as rdmacm-utils'
//! udaddy does: SIDR tells the server nothing of the client's QP); the
//! server receives them and answers each to the address the datagram's
//! GRH names (`ibv_create_ah_from_wc`) and the QP its immediate data names.

use clap::Parser;
use roce_host::DeviceConfig;
use roce_verbs_api::rdma_cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use roce_verbs_api::{
    ud_send, AccessFlags, AhAttr, Budget, Context, Cq, Mr, Pd, Qp, QpEndpoint, RecvWr, SendWr,
    WcOpcode, WcStatus, WorkCompletion, WrOpcode, GRH_LEN,
};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

/// udaddy: UD datagrams between QPs found by the RDMA CM (SIDR).
#[derive(Parser, Debug)]
#[command(name = "udaddy", version)]
struct Args {
    /// Client: the server's address.
    #[arg(short = 's')]
    server: Option<IpAddr>,
    /// Server: the address to bind (a device's).
    #[arg(short = 'b')]
    bind: Option<IpAddr>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Datagrams each way.
    #[arg(short = 'C', default_value_t = 10)]
    count: u32,
    /// Datagram size (bytes, at most the path MTU).
    #[arg(short = 'S', default_value_t = 100)]
    size: u32,
    /// The device to use (a name from ROCE_EMU_DEVICES or the config file).
    #[arg(short = 'd')]
    device: Option<String>,
}

const T: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let args = Args::parse();
    if args.server.is_none() == args.bind.is_none() {
        eprintln!("udaddy: give -b ADDR (server) or -s ADDR (client)");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("udaddy: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let all = DeviceConfig::load_all().map_err(|e| e.to_string())?;
    let cfg = match (&args.device, args.bind, args.server) {
        (Some(n), _, _) => {
            all.into_iter().find(|c| &c.name == n).ok_or_else(|| format!("device {n} not found"))?
        }
        (None, Some(b), _) => {
            all.into_iter().find(|c| c.addr == b).unwrap_or_else(|| DeviceConfig::udp("roce0", b))
        }
        (None, None, Some(s)) => all
            .into_iter()
            .find(|c| c.addr != s)
            .ok_or("no device for the client besides the server's (ROCE_EMU_DEVICES)")?,
        (None, None, None) => return Err("nothing to do".into()),
    };
    let dev = cfg.open().map_err(|e| format!("couldn't open {}: {e}", cfg.name))?;
    let ch = EventChannel::new(vec![dev]);
    match (args.bind, args.server) {
        (Some(b), _) => serve(args, &ch, b),
        (None, Some(s)) => client(args, &ch, s),
        (None, None) => Err("no server".into()),
    }
}

/// A side's UD objects on `id`'s device: a QP on one CQ and a buffer of
/// `slots` datagrams of `-S` bytes with room for the GRH, the first
/// `receives` of them posted as receives (work request IDs from `wr_id`).
struct Ud {
    ctx: Context,
    qp: Qp,
    cq: Cq,
    mr: Mr,
    _pd: Pd,
}

impl Ud {
    fn new(
        id: &CmId,
        size: usize,
        slots: usize,
        receives: usize,
        wr_id: u64,
    ) -> Result<Ud, String> {
        let ctx = id.context().ok_or("no device")?;
        let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
        let cq = ctx.create_cq(64).map_err(|e| e.to_string())?;
        let qp =
            id.create_qp(pd.qp_builder(&cq, &cq).max_recv_wr(64)).map_err(|e| e.to_string())?;
        let mr = pd
            .reg_mr((GRH_LEN + size) * slots, AccessFlags::LOCAL_WRITE)
            .map_err(|e| e.to_string())?;
        for i in 0..receives {
            let at = mr.addr() + (i * (GRH_LEN + size)) as u64;
            qp.post_recv(RecvWr::new(wr_id + i as u64, at, (GRH_LEN + size) as u32, mr.lkey()))
                .map_err(|e| e.to_string())?;
        }
        Ok(Ud { ctx, qp, cq, mr, _pd: pd })
    }

    /// The next completion (30 s at most; `none` is the error without one).
    fn next(&self, none: &str) -> Result<WorkCompletion, String> {
        let wc = self
            .cq
            .poll_blocking(1, Budget { events: 1_000_000, wall: T })
            .map_err(|e| e.to_string())?;
        wc.into_iter().next().ok_or_else(|| none.to_string())
    }

    /// Post a SEND with our QP number as immediate data (as rdmacm-utils'
    /// udaddy: SIDR tells the server nothing of the client's QP) of `-S`
    /// bytes at `at` of the buffer, to `to` along `ah`.
    fn send(
        &self,
        i: usize,
        at: u64,
        len: u32,
        ah: AhAttr,
        to: &QpEndpoint,
        qkey: u32,
    ) -> Result<(), String> {
        let wr = ud_send(
            SendWr::new(i as u64, WrOpcode::SendWithImm)
                .sge(self.mr.addr() + at, len, self.mr.lkey())
                .with_imm(self.qp.qpn().value()),
            ah,
            to,
            qkey,
        );
        self.qp.post_send(wr).map_err(|e| e.to_string())
    }
}

/// The server: wait for a client's SIDR request, accept it with a UD QP,
/// take its datagrams and answer each.
fn serve(args: &Args, ch: &EventChannel, b: IpAddr) -> Result<(), String> {
    let size = args.size as usize;
    let listen = ch.create_id(PortSpace::Udp);
    listen.bind_addr(SocketAddr::new(b, args.port)).map_err(|e| format!("bind: {e}"))?;
    listen.listen().map_err(|e| format!("listen: {e}"))?;
    let req = loop {
        match ch.get_event(Duration::from_secs(3600)) {
            Ok(e) if e.kind == CmEventKind::ConnectRequest => break e,
            Ok(e) => return Err(format!("event: {}, error: {}", e.kind, e.status)),
            Err(_) => continue,
        }
    };
    let id = req.id.clone();
    let n = args.count as usize;
    let ud = Ud::new(&id, size, n, n, 0)?;
    id.accept(&ConnParam::default()).map_err(|e| format!("accept: {e}"))?;
    println!("receiving data transfers");
    let mut got: Vec<WorkCompletion> = Vec::new();
    while got.len() < n {
        let wc = ud.next("no datagram within 30 s")?;
        if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv {
            return Err(format!("completion {:?} {:?}", wc.status, wc.opcode));
        }
        got.push(wc);
    }
    println!("sending replies");
    for (i, wc) in got.iter().enumerate() {
        let at = (i * (GRH_LEN + size)) as u64;
        let mut grh = [0u8; GRH_LEN];
        ud.mr.read(at, &mut grh).map_err(|e| e.to_string())?;
        let ah = ud.ctx.create_ah_from_wc(wc, &grh).map_err(|e| e.to_string())?;
        // rdmacm-utils' udaddy names its QP in the immediate data
        let qpn = wc.imm.unwrap_or(wc.src_qp);
        let to = QpEndpoint { addr: ah.dgid, qpn, psn: 0 };
        let qkey = roce_verbs_api::rdma_cm::RDMA_UDP_QKEY;
        ud.send(i, at + GRH_LEN as u64, args.size, ah, &to, qkey)?;
        let wc = ud.next("no send completion within 30 s")?;
        if wc.status != WcStatus::Success {
            return Err(format!("send completion {wc:?}"));
        }
    }
    println!("data transfers complete");
    Ok(())
}

/// The client: find the server's UD QP with SIDR, send it `-C` datagrams
/// and take as many replies.
fn client(args: &Args, ch: &EventChannel, server: IpAddr) -> Result<(), String> {
    let next = |want: CmEventKind| {
        let e = ch.get_event(T).map_err(|_| format!("no {want} within {T:?}"))?;
        if e.kind != want {
            return Err(format!("event: {}, error: {}", e.kind, e.status));
        }
        Ok(e)
    };
    let size = args.size as usize;
    let id = ch.create_id(PortSpace::Udp);
    id.resolve_addr(None, SocketAddr::new(server, args.port))
        .map_err(|e| format!("resolve_addr: {e}"))?;
    next(CmEventKind::AddrResolved)?;
    id.resolve_route().map_err(|e| format!("resolve_route: {e}"))?;
    next(CmEventKind::RouteResolved)?;
    let n = args.count as usize;
    let ud = Ud::new(&id, size, n * 2, n, 1000)?;
    id.connect(&ConnParam::default()).map_err(|e| format!("connect: {e}"))?;
    let est = next(CmEventKind::Established)?;
    let peer = est.ud.ok_or("ESTABLISHED without UD parameters")?;
    println!("initiating data transfers");
    let to = QpEndpoint { addr: server, qpn: peer.qp_num, psn: 0 };
    let out = (GRH_LEN + size) * n;
    for i in 0..n {
        let msg: Vec<u8> = (0..size).map(|k| (k + i) as u8).collect();
        let at = (out + i * size) as u64;
        ud.mr.write(at, &msg).map_err(|e| e.to_string())?;
        // the server answers the QP the immediate data names
        ud.send(i, at, args.size, peer.ah, &to, peer.qkey)?;
    }
    println!("receiving data transfers");
    let (mut sends, mut recvs) = (0, 0);
    while sends < n || recvs < n {
        let wc = ud.next("no reply within 30 s")?;
        if wc.status != WcStatus::Success {
            return Err(format!("completion {:?} {:?}", wc.status, wc.opcode));
        }
        match wc.opcode {
            WcOpcode::Recv => {
                // a reply from the server's QP, of our size (rdmacm-utils'
                // udaddy answers from its receive buffer, GRH included, so
                // the bytes are not ours to check)
                if wc.src_qp != peer.qp_num || wc.byte_len != (GRH_LEN + size) as u32 {
                    return Err(format!(
                        "a reply from QP {:#x} of {} bytes, expected QP {:#x} and {}",
                        wc.src_qp,
                        wc.byte_len,
                        peer.qp_num,
                        GRH_LEN + size
                    ));
                }
                recvs += 1;
            }
            _ => sends += 1,
        }
    }
    println!("data transfers complete");
    Ok(())
}
