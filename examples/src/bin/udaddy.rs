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
use roce_verbs_api::rdma_cm::{CmEventKind, ConnParam, EventChannel, PortSpace};
use roce_verbs_api::{
    ud_send, AccessFlags, Budget, QpEndpoint, RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode, GRH_LEN,
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
    let next = |want: CmEventKind| {
        let e = ch.get_event(T).map_err(|_| format!("no {want} within {T:?}"))?;
        if e.kind != want {
            return Err(format!("event: {}, error: {}", e.kind, e.status));
        }
        Ok(e)
    };
    let size = args.size as usize;
    if let Some(b) = args.bind {
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
        let ctx = id.context().ok_or("no device")?;
        let (pd, cq) = (
            ctx.alloc_pd().map_err(|e| e.to_string())?,
            ctx.create_cq(64).map_err(|e| e.to_string())?,
        );
        let qp =
            id.create_qp(pd.qp_builder(&cq, &cq).max_recv_wr(64)).map_err(|e| e.to_string())?;
        let mr = pd
            .reg_mr((GRH_LEN + size) * args.count as usize, AccessFlags::LOCAL_WRITE)
            .map_err(|e| e.to_string())?;
        for i in 0..args.count as usize {
            let at = mr.addr() + (i * (GRH_LEN + size)) as u64;
            qp.post_recv(RecvWr::new(i as u64, at, (GRH_LEN + size) as u32, mr.lkey()))
                .map_err(|e| e.to_string())?;
        }
        id.accept(&ConnParam::default()).map_err(|e| format!("accept: {e}"))?;
        println!("receiving data transfers");
        let mut got: Vec<WorkCompletion> = Vec::new();
        while got.len() < args.count as usize {
            let wc = cq
                .poll_blocking(1, Budget { events: 1_000_000, wall: T })
                .map_err(|e| e.to_string())?;
            let wc = wc.into_iter().next().ok_or("no datagram within 30 s")?;
            if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv {
                return Err(format!("completion {:?} {:?}", wc.status, wc.opcode));
            }
            got.push(wc);
        }
        println!("sending replies");
        for (i, wc) in got.iter().enumerate() {
            let at = (i * (GRH_LEN + size)) as u64;
            let mut grh = [0u8; GRH_LEN];
            mr.read(at, &mut grh).map_err(|e| e.to_string())?;
            let ah = ctx.create_ah_from_wc(wc, &grh).map_err(|e| e.to_string())?;
            // rdmacm-utils' udaddy names its QP in the immediate data
            let qpn = wc.imm.unwrap_or(wc.src_qp);
            let to = QpEndpoint { addr: ah.dgid, qpn, psn: 0 };
            let src = mr.addr() + at + GRH_LEN as u64;
            let wr = ud_send(
                SendWr::new(i as u64, WrOpcode::SendWithImm)
                    .sge(src, args.size, mr.lkey())
                    .with_imm(qp.qpn().value()),
                ah,
                &to,
                roce_verbs_api::rdma_cm::RDMA_UDP_QKEY,
            );
            qp.post_send(wr).map_err(|e| e.to_string())?;
            let wc = cq
                .poll_blocking(1, Budget { events: 1_000_000, wall: T })
                .map_err(|e| e.to_string())?;
            if wc.first().map(|w| w.status) != Some(WcStatus::Success) {
                return Err(format!("send completion {wc:?}"));
            }
        }
        println!("data transfers complete");
        return Ok(());
    }
    let server = args.server.ok_or("no server")?;
    let id = ch.create_id(PortSpace::Udp);
    id.resolve_addr(None, SocketAddr::new(server, args.port))
        .map_err(|e| format!("resolve_addr: {e}"))?;
    next(CmEventKind::AddrResolved)?;
    id.resolve_route().map_err(|e| format!("resolve_route: {e}"))?;
    next(CmEventKind::RouteResolved)?;
    let ctx = id.context().ok_or("no device")?;
    let (pd, cq) =
        (ctx.alloc_pd().map_err(|e| e.to_string())?, ctx.create_cq(64).map_err(|e| e.to_string())?);
    let qp = id.create_qp(pd.qp_builder(&cq, &cq).max_recv_wr(64)).map_err(|e| e.to_string())?;
    let n = args.count as usize;
    let mr =
        pd.reg_mr((GRH_LEN + size) * n * 2, AccessFlags::LOCAL_WRITE).map_err(|e| e.to_string())?;
    for i in 0..n {
        let at = mr.addr() + (i * (GRH_LEN + size)) as u64;
        qp.post_recv(RecvWr::new(1000 + i as u64, at, (GRH_LEN + size) as u32, mr.lkey()))
            .map_err(|e| e.to_string())?;
    }
    id.connect(&ConnParam::default()).map_err(|e| format!("connect: {e}"))?;
    let est = next(CmEventKind::Established)?;
    let ud = est.ud.ok_or("ESTABLISHED without UD parameters")?;
    println!("initiating data transfers");
    let to = QpEndpoint { addr: server, qpn: ud.qp_num, psn: 0 };
    let out = (GRH_LEN + size) * n;
    for i in 0..n {
        let msg: Vec<u8> = (0..size).map(|k| (k + i) as u8).collect();
        let at = (out + i * size) as u64;
        mr.write(at, &msg).map_err(|e| e.to_string())?;
        // as rdmacm-utils' udaddy: the immediate data names our QP (the
        // server answers it there)
        let wr = ud_send(
            SendWr::new(i as u64, WrOpcode::SendWithImm)
                .sge(mr.addr() + at, args.size, mr.lkey())
                .with_imm(qp.qpn().value()),
            ud.ah,
            &to,
            ud.qkey,
        );
        qp.post_send(wr).map_err(|e| e.to_string())?;
    }
    println!("receiving data transfers");
    let (mut sends, mut recvs) = (0, 0);
    while sends < n || recvs < n {
        let wc = cq
            .poll_blocking(1, Budget { events: 1_000_000, wall: T })
            .map_err(|e| e.to_string())?;
        let wc = wc.into_iter().next().ok_or("no reply within 30 s")?;
        if wc.status != WcStatus::Success {
            return Err(format!("completion {:?} {:?}", wc.status, wc.opcode));
        }
        match wc.opcode {
            WcOpcode::Recv => {
                // a reply from the server's QP, of our size (rdmacm-utils'
                // udaddy answers from its receive buffer, GRH included, so
                // the bytes are not ours to check)
                if wc.src_qp != ud.qp_num || wc.byte_len != (GRH_LEN + size) as u32 {
                    return Err(format!(
                        "a reply from QP {:#x} of {} bytes, expected QP {:#x} and {}",
                        wc.src_qp,
                        wc.byte_len,
                        ud.qp_num,
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
