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
use crate::pingpong::{
    check_peer_gid, check_status, local_gid, mtu_enum, post_recvs, print_address, print_rate,
    wait_cq, PathOpts,
};
use clap::Parser;
use roce_verbs_api::gid::gid_to_addr;
use roce_verbs_api::{AccessFlags, Context, Cq, Mr, PathMtu, Pd, Qp, RecvWr, SendWr, WrOpcode};
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

/// The sizes the options give, checked: (message size, receive depth,
/// QP count, path MTU).
fn check_args(a: &Args) -> Result<(usize, u32, u32, PathMtu), String> {
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
    Ok((size, rx_depth, num_qp, mtu))
}

/// One side: rdma-core's `pingpong_context` with its SRQ and QPs. (Fields
/// drop in this order: the QPs first, the device last.)
struct Srq<'a> {
    a: &'a Args,
    qps: Vec<Qp>,
    srq: roce_verbs_api::Srq,
    cq: Cq,
    mr: Mr,
    _pd: Pd,
    ctx: Context,
    path: PathOpts,
    size: usize,
    rx_depth: u32,
    /// QP number -> index in `qps`.
    index: HashMap<u32, usize>,
}

impl<'a> Srq<'a> {
    /// rdma-core's `pp_init_ctx`: device, PD, buffer, CQ, SRQ and the QPs in
    /// INIT.
    fn open(a: &'a Args) -> Result<Srq<'a>, String> {
        let (size, rx_depth, num_qp, mtu) = check_args(a)?;
        let dev = crate::open_device_with(a.ib_dev.as_deref(), a.addr, a.pcap.as_deref())?;
        let ctx = dev.open();
        let pd = ctx.alloc_pd().map_err(|e| format!("Couldn't allocate PD: {e}"))?;
        let mr = pd
            .reg_mr(size, AccessFlags::LOCAL_WRITE)
            .map_err(|e| format!("Couldn't register MR: {e}"))?;
        // rdma-core's srq_pingpong zeroes its buffer (rc_pingpong fills 0x7b)
        mr.write(0, &vec![0; size]).map_err(|e| e.to_string())?;
        let cq =
            ctx.create_cq(rx_depth + num_qp).map_err(|e| format!("Couldn't create CQ: {e}"))?;
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
        let path = PathOpts::new(mtu, a.gid_idx, a.sl, a.ib_port);
        for (i, qp) in qps.iter().enumerate() {
            path.init(qp, None, &format!("QP[{i}]"))?;
        }
        let index = qps.iter().enumerate().map(|(i, q)| (q.qpn().value(), i)).collect();
        Ok(Srq { a, qps, srq, cq, mr, _pd: pd, ctx, path, size, rx_depth, index })
    }

    /// Post up to `n` receives on the SRQ; how many were posted.
    fn post_recv(&self, n: u64) -> u64 {
        let (mr, len) = (&self.mr, self.size as u32);
        post_recvs(n, || {
            self.srq.post_recv(RecvWr::new(RECV_WRID, mr.addr(), len, mr.lkey())).is_ok()
        })
    }

    /// rdma-core's `pp_connect_ctx`: every QP to RTR and RTS with rdma-core's
    /// RC attributes, towards the peer's QP of the same index.
    fn connect(&self, rem: &[Dest], mine: &[Dest]) -> Result<(), String> {
        if rem.len() != self.qps.len() {
            return Err(format!("{} remote addresses for {} QPs", rem.len(), self.qps.len()));
        }
        for (i, (qp, r)) in self.qps.iter().zip(rem).enumerate() {
            // as rc_pingpong: RoCE needs a GID, rxe refuses RTR without
            check_peer_gid(r, "modify QP to RTR")?;
            let ah = self.path.ah(gid_to_addr(r.gid), 1);
            self.path.rc_rtr_rts(qp, ah, r, mine[i].psn, &format!("QP[{i}]"))?;
        }
        Ok(())
    }

    /// The out-of-band exchange (client first) and the connections; the
    /// peer's addresses, one per QP.
    fn exchange(&self, mine: &[Dest]) -> Result<Vec<Dest>, String> {
        let n = self.qps.len();
        // rdma-core's srq_pingpong always exchanges MAX_QP (256) messages, the
        // first num_qp of them real, whatever -q is (seen against rxe)
        let mut wire = mine.to_vec();
        wire.resize(MAX_QP.max(n), Dest { lid: 0, qpn: 0, psn: 0, gid: Ipv6Addr::UNSPECIFIED });
        let port = self.a.port as u16;
        let rem = match &self.a.servername {
            Some(host) => {
                let (mut r, _) = oob::client_exchange(host, port, &wire, Duration::from_secs(5))?;
                r.truncate(n);
                for d in &r {
                    print_address("remote address:", d, ",");
                }
                self.connect(&r, mine)?;
                r
            }
            None => {
                let (mut r, _) = oob::server_exchange(port, wire.len(), |r, _| {
                    self.connect(&r[..n.min(r.len())], mine)?;
                    Ok(wire.clone())
                })?;
                r.truncate(n);
                for d in &r {
                    print_address("remote address:", d, ",");
                }
                r
            }
        };
        debug_assert_eq!(rem.len(), n);
        Ok(rem)
    }

    fn post_send(&self, i: usize) -> Result<(), String> {
        let mr = &self.mr;
        let wr = SendWr::new(SEND_WRID, WrOpcode::Send).sge(mr.addr(), self.size as u32, mr.lkey());
        self.qps[i].post_send(wr).map_err(|e| format!("Couldn't post send: {e}"))
    }

    /// The exchanges: each QP sends when its previous SEND and a receive
    /// both completed, until `-n` of each in total; `routs` receives are
    /// posted. Returns how many receives had the wrong length.
    fn ping(&self, mut routs: u64) -> Result<u64, String> {
        let (a, n, iters) = (self.a, self.qps.len(), self.a.iters);
        let mut pending = vec![RECV_WRID; n];
        if a.servername.is_some() {
            if a.chk {
                for i in (0..self.size).step_by(PAGE) {
                    self.mr.write(i as u64, &[0]).map_err(|e| e.to_string())?;
                }
            }
            for (i, p) in pending.iter_mut().enumerate() {
                self.post_send(i)?;
                *p = SEND_WRID | RECV_WRID;
            }
        }
        let (mut rcnt, mut scnt, mut bad_len) = (0u64, 0u64, 0u64);
        let (rx_depth, num_qp) = (u64::from(self.rx_depth), n as u64);
        let num_wc = (rx_depth + num_qp) as usize;
        while rcnt < iters || scnt < iters {
            let wcs =
                wait_cq(&self.ctx, &self.cq, num_wc).map_err(|e| format!("poll CQ failed {e}"))?;
            for wc in wcs {
                check_status(&wc)?;
                let Some(&qi) = self.index.get(&wc.qp_num) else {
                    return Err(format!("Couldn't find QPN {:06x}", wc.qp_num));
                };
                match wc.wr_id {
                    SEND_WRID => scnt += 1,
                    RECV_WRID => {
                        routs = routs.saturating_sub(1);
                        if routs <= num_qp {
                            routs += self.post_recv(rx_depth - routs);
                            if routs < rx_depth {
                                return Err(format!("Couldn't post receive ({routs})"));
                            }
                        }
                        bad_len += u64::from(a.chk && wc.byte_len as usize != self.size);
                        rcnt += 1;
                    }
                    other => return Err(format!("Completion for unknown wr_id {other}")),
                }
                pending[qi] &= !wc.wr_id;
                if scnt < iters && pending[qi] == 0 {
                    self.post_send(qi)?;
                    pending[qi] = RECV_WRID | SEND_WRID;
                }
            }
        }
        Ok(bad_len)
    }

    /// `-c`: the buffer (all zero) and the receive lengths; prints what is
    /// wrong and returns whether all was right.
    fn check(&self, bad_len: u64) -> Result<bool, String> {
        let mut ok = true;
        let mut got = vec![0u8; self.size];
        self.mr.read(0, &mut got).map_err(|e| e.to_string())?;
        for (p, page) in got.chunks(PAGE).enumerate() {
            if page.iter().any(|&b| b != 0) {
                println!("invalid data in page {p}");
                ok = false;
            }
        }
        if bad_len > 0 {
            println!("{bad_len} receive completions with a length other than {}", self.size);
            ok = false;
        }
        Ok(ok)
    }
}

/// Run the tool; `Err` is a message for stderr (exit status 1).
pub fn run(a: &Args) -> Result<ExitCode, String> {
    let pp = Srq::open(a)?;
    let rx_depth = u64::from(pp.rx_depth);
    let routs = pp.post_recv(rx_depth);
    if routs < rx_depth {
        return Err(format!("Couldn't post receive ({routs})"));
    }
    let gid =
        local_gid(&pp.ctx, a.gid_idx, |g| format!("Could not get local gid for gid index {g}"))?;
    let mine: Vec<Dest> = pp
        .qps
        .iter()
        .map(|q| Dest { lid: 0, qpn: q.qpn().value(), psn: rand::random::<u32>() & 0xff_ffff, gid })
        .collect();
    for d in &mine {
        print_address("local address: ", d, ",");
    }
    pp.exchange(&mine)?;

    let start = Instant::now();
    let bad_len = pp.ping(routs)?;
    print_rate(pp.size, a.iters, start);
    let ok = !a.chk || pp.check(bad_len)?;
    // let the last acknowledgements leave before the device closes
    pp.ctx.progress(
        || false,
        roce_verbs_api::Budget { events: 10_000, wall: Duration::from_millis(50) },
    );
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
