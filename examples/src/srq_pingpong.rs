//! `srq_pingpong`: rdma-core's `ibv_srq_pingpong` over an emulated device.
//!
//! `-q N` RC QPs (default 16) share one CQ and one shared receive queue of
//! `-r` receive WRs (default 500); the tools exchange one 52-byte
//! `LID:QPN:PSN:GID` message per QP in each direction (client first), and
//! every QP ping-pongs SENDs of `-s` bytes. As in rdma-core, the loop ends
//! when `-n` sends and `-n` receives completed in total (over all QPs).
//!
//! Differences, all deliberate: `-c` (not in rdma-core's tool) checks the
//! buffer and every receive length as the other pingpong tools do; `-e`
//! waits for the driver's progress; `--addr IP` and `--pcap FILE` as in
//! [`crate::pingpong`]; the client retries the TCP connection for 5 s.

use crate::oob::{self, Dest};
use crate::pingpong::{mtu_enum, wait_cq};
use clap::Parser;
use roce_verbs_api::gid::gid_to_addr;
use roce_verbs_api::{
    AccessFlags, AhAttr, PathMtu, QpAttr, QpState, RecvWr, SendWr, WcStatus, WrOpcode,
};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
const PAGE: usize = 4096;

fn num(s: &str) -> Result<u64, String> {
    crate::parse_c_number(s)
}

/// How many QP addresses rdma-core's `ibv_srq_pingpong` sends and expects.
const MAX_QP: usize = 256;

/// The options of `srq_pingpong` (rdma-core's, plus `-c`, `--addr`, `--pcap`).
#[derive(Parser, Debug, Clone)]
#[command(about = "Ping-pong SENDs over many RC QPs sharing one SRQ (rdma-core compatible)")]
pub struct Args {
    /// listen on/connect to port <port> (default 18515)
    #[arg(short = 'p', long = "port", default_value = "18515", value_parser = num)]
    pub port: u64,
    /// use IB device <dev> (default first device found)
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// use port <port> of IB device (default 1)
    #[arg(short = 'i', long = "ib-port", default_value = "1", value_parser = num)]
    pub ib_port: u64,
    /// size of message to exchange (default 4096)
    #[arg(short = 's', long = "size", default_value = "4096", value_parser = num)]
    pub size: u64,
    /// path MTU (default 1024)
    #[arg(short = 'm', long = "mtu", default_value = "1024", value_parser = num)]
    pub mtu: u64,
    /// number of QPs to use (default 16)
    #[arg(short = 'q', long = "num-qp", default_value = "16", value_parser = num)]
    pub num_qp: u64,
    /// number of receives to post at a time (default 500)
    #[arg(short = 'r', long = "rx-depth", default_value = "500", value_parser = num)]
    pub rx_depth: u64,
    /// number of exchanges per QP(default 1000)
    #[arg(short = 'n', long = "iters", default_value = "1000", value_parser = num)]
    pub iters: u64,
    /// service level value
    #[arg(short = 'l', long = "sl", default_value = "0", value_parser = num)]
    pub sl: u64,
    /// sleep on CQ events (default poll)
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// local port gid index
    #[arg(short = 'g', long = "gid-idx", allow_negative_numbers = true)]
    pub gid_idx: Option<i64>,
    /// extension: validate received buffer and lengths
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// extension: use a UDP device at this local address (no configuration needed)
    #[arg(long = "addr")]
    pub addr: Option<IpAddr>,
    /// extension: record every frame of the device to this pcap file
    #[arg(long = "pcap")]
    pub pcap: Option<std::path::PathBuf>,
    /// connect to the server at <host> (without: start a server and wait for a connection)
    pub servername: Option<String>,
}

/// Run the tool with the process's arguments; returns its exit status.
pub fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::from(1)
        }
    }
}

/// Run the tool; `Err` is a message for stderr (exit status 1).
pub fn run(a: &Args) -> Result<ExitCode, String> {
    if a.port > 65535 {
        return Err("port must be at most 65535".into());
    }
    if a.ib_port < 1 {
        return Err("ib port must be at least 1".into());
    }
    if a.size < 1 {
        return Err("size must be at least 1".into());
    }
    let mtu: PathMtu = mtu_enum(a.mtu)
        .ok_or_else(|| format!("invalid MTU {} (256, 512, 1024, 2048, 4096)", a.mtu))?;
    let size = u32::try_from(a.size).map_err(|_| format!("size {} too large", a.size))? as usize;
    let rx_depth = u32::try_from(a.rx_depth).map_err(|_| "rx depth too large".to_string())?;
    let num_qp = u32::try_from(a.num_qp).map_err(|_| "too many QPs".to_string())?;
    if num_qp > rx_depth {
        return Err(format!(
            "rx_depth {rx_depth} is too small for {num_qp} QPs -- must have at least one receive per QP."
        ));
    }
    if num_qp == 0 {
        return Err("at least one QP is needed".into());
    }
    let iters = a.iters;

    // --- pp_init_ctx ---
    let dev = crate::open_device_with(a.ib_dev.as_deref(), a.addr, a.pcap.as_deref())?;
    let ctx = dev.open();
    let pd = ctx.alloc_pd().map_err(|e| format!("Couldn't allocate PD: {e}"))?;
    let mr = pd
        .reg_mr(size, AccessFlags::LOCAL_WRITE)
        .map_err(|e| format!("Couldn't register MR: {e}"))?;
    // rdma-core's srq_pingpong zeroes its buffer (rc_pingpong fills 0x7b)
    mr.write(0, &vec![0; size]).map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(rx_depth + num_qp).map_err(|e| format!("Couldn't create CQ: {e}"))?;
    let srq = pd.create_srq(rx_depth, 1).map_err(|e| format!("Couldn't create SRQ: {e}"))?;
    let mut qps = Vec::new();
    for i in 0..num_qp {
        let qp = pd
            .qp_builder(&cq, &cq)
            .srq(&srq)
            .max_send_wr(1)
            .max_send_sge(1)
            .max_recv_wr(0)
            .max_recv_sge(0)
            .build()
            .map_err(|e| format!("Couldn't create QP[{i}]: {e}"))?;
        qps.push(qp);
    }
    let ib_port = u8::try_from(a.ib_port).unwrap_or(u8::MAX);
    for (i, qp) in qps.iter().enumerate() {
        let init = QpAttr::new()
            .state(QpState::Init)
            .pkey_index(0)
            .port(ib_port)
            .access_flags(AccessFlags::default());
        qp.modify(&init).map_err(|e| format!("Failed to modify QP[{i}] to INIT: {e}"))?;
    }
    let index: HashMap<u32, usize> =
        qps.iter().enumerate().map(|(i, q)| (q.qpn().value(), i)).collect();

    // --- main ---
    let post_recv = |n: u64| -> u64 {
        let mut i = 0;
        while i < n {
            if srq.post_recv(RecvWr::new(RECV_WRID, mr.addr(), size as u32, mr.lkey())).is_err() {
                break;
            }
            i += 1;
        }
        i
    };
    let mut routs = post_recv(u64::from(rx_depth));
    if routs < u64::from(rx_depth) {
        return Err(format!("Couldn't post receive ({routs})"));
    }
    let gid = match a.gid_idx {
        Some(g) if g >= 0 => ctx
            .query_gid(g as u32)
            .ok_or_else(|| format!("Could not get local gid for gid index {g}"))?,
        _ => Ipv6Addr::UNSPECIFIED,
    };
    let sgid_index = a.gid_idx.filter(|g| *g >= 0).map(|g| g as u8).unwrap_or(0);
    let mine: Vec<Dest> = qps
        .iter()
        .map(|q| Dest { lid: 0, qpn: q.qpn().value(), psn: rand::random::<u32>() & 0xff_ffff, gid })
        .collect();
    for d in &mine {
        println!(
            "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            d.lid, d.qpn, d.psn, d.gid
        );
    }

    let sl = u8::try_from(a.sl).unwrap_or(0);
    // pp_connect_ctx: every QP to RTR and RTS with rdma-core's RC attributes
    let connect = |rem: &[Dest], _peer_ip: IpAddr| -> Result<(), String> {
        if rem.len() != qps.len() {
            return Err(format!("{} remote addresses for {} QPs", rem.len(), qps.len()));
        }
        for (i, (qp, r)) in qps.iter().zip(rem).enumerate() {
            if !r.has_gid() {
                // as rc_pingpong: RoCE needs a GID, rxe refuses RTR without
                return Err("Failed to modify QP to RTR: the peer sent no GID (RoCE needs one): \
                            run both sides with -g 1, as with rxe"
                    .to_string());
            }
            if (r.gid.segments()[0] & 0xffc0) == 0xfe80 {
                return Err(format!(
                    "remote GID {} is link-local (GID index 0): this emulator reaches peers by \
                     their IPv4 or global IPv6 address; run both sides with -g 1",
                    r.gid
                ));
            }
            let mut ah = AhAttr::new(gid_to_addr(r.gid));
            ah.sgid_index = sgid_index;
            ah.hop_limit = 1;
            ah.sl = sl;
            ah.port_num = ib_port;
            let rtr = QpAttr::new()
                .state(QpState::Rtr)
                .ah(ah)
                .mtu(mtu)
                .dest_qpn(r.qpn)
                .rq_psn(r.psn)
                .max_dest_rd_atomic(1)
                .min_rnr_timer(12);
            qp.modify(&rtr).map_err(|e| format!("Failed to modify QP[{i}] to RTR: {e}"))?;
            let rts = QpAttr::new()
                .state(QpState::Rts)
                .timeout(14)
                .retry_cnt(7)
                .rnr_retry(7)
                .sq_psn(mine[i].psn)
                .max_rd_atomic(1);
            qp.modify(&rts).map_err(|e| format!("Failed to modify QP[{i}] to RTS: {e}"))?;
        }
        Ok(())
    };

    let n = qps.len();
    // rdma-core's srq_pingpong always exchanges MAX_QP (256) messages, the
    // first num_qp of them real, whatever -q is (seen against rxe)
    let mut wire = mine.clone();
    wire.resize(
        MAX_QP.max(n),
        Dest { lid: 0, qpn: 0, psn: 0, gid: std::net::Ipv6Addr::UNSPECIFIED },
    );
    let rem = match &a.servername {
        Some(host) => {
            let (mut r, ip) =
                oob::client_exchange(host, a.port as u16, &wire, Duration::from_secs(5))?;
            r.truncate(n);
            for d in &r {
                print_remote(d);
            }
            connect(&r, ip)?;
            r
        }
        None => {
            let (mut r, _) = oob::server_exchange(a.port as u16, wire.len(), |r, ip| {
                connect(&r[..n.min(r.len())], ip)?;
                Ok(wire.clone())
            })?;
            r.truncate(n);
            for d in &r {
                print_remote(d);
            }
            r
        }
    };
    debug_assert_eq!(rem.len(), n);

    let post_send = |i: usize| {
        let wr = SendWr::new(SEND_WRID, WrOpcode::Send).sge(mr.addr(), size as u32, mr.lkey());
        qps[i].post_send(wr).map_err(|e| format!("Couldn't post send: {e}"))
    };
    let mut pending = vec![RECV_WRID; n];
    if a.servername.is_some() {
        if a.chk {
            for i in (0..size).step_by(PAGE) {
                mr.write(i as u64, &[0]).map_err(|e| e.to_string())?;
            }
        }
        for (i, p) in pending.iter_mut().enumerate() {
            post_send(i)?;
            *p = SEND_WRID | RECV_WRID;
        }
    }

    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut bad_len = 0u64;
    let num_wc = (rx_depth + num_qp) as usize;
    while rcnt < iters || scnt < iters {
        let wcs = wait_cq(&ctx, &cq, num_wc).map_err(|e| format!("poll CQ failed {e}"))?;
        for wc in wcs {
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status,
                    wc.status.code(),
                    wc.wr_id
                ));
            }
            let Some(&qi) = index.get(&wc.qp_num) else {
                return Err(format!("Couldn't find QPN {:06x}", wc.qp_num));
            };
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs = routs.saturating_sub(1);
                    if routs <= u64::from(num_qp) {
                        routs += post_recv(u64::from(rx_depth) - routs);
                        if routs < u64::from(rx_depth) {
                            return Err(format!("Couldn't post receive ({routs})"));
                        }
                    }
                    if a.chk && wc.byte_len as usize != size {
                        bad_len += 1;
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}")),
            }
            pending[qi] &= !wc.wr_id;
            if scnt < iters && pending[qi] == 0 {
                post_send(qi)?;
                pending[qi] = RECV_WRID | SEND_WRID;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = size as u64 * iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!("{iters} iters in {:.2} seconds = {:.2} usec/iter", usec / 1e6, usec / iters as f64);

    let mut ok = true;
    if a.chk {
        let mut got = vec![0u8; size];
        mr.read(0, &mut got).map_err(|e| e.to_string())?;
        for (p, page) in got.chunks(PAGE).enumerate() {
            if page.iter().any(|&b| b != 0) {
                println!("invalid data in page {p}");
                ok = false;
            }
        }
        if bad_len > 0 {
            println!("{bad_len} receive completions with a length other than {size}");
            ok = false;
        }
    }
    // let the last acknowledgements leave before the device closes
    ctx.progress(
        || false,
        roce_verbs_api::Budget { events: 10_000, wall: Duration::from_millis(50) },
    );
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_remote(d: &Dest) {
    println!(
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid, d.qpn, d.psn, d.gid
    );
}
