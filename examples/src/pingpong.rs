//! `rc_pingpong`, `uc_pingpong` and `ud_pingpong`: the same programs as
//! rdma-core's `ibv_rc_pingpong`, `ibv_uc_pingpong` and `ibv_ud_pingpong`
//! (flags, out-of-band exchange, QP attributes, output lines), over an
//! emulated device, so either side can be rdma-core's binary on rxe.
//!
//! Differences, all deliberate:
//! * `-o/-O/-P` (ODP), `-t` (timestamps), `-j` (device memory) and `-U`
//!   are refused with rdma-core's message for a device without them;
//!   `-N` (new send API) is accepted (same packets).
//! * `-e` waits for the driver's progress instead of a completion
//!   channel (the process sleeps either way).
//! * `-c` checks every byte of the buffer on both sides (rdma-core checks
//!   one byte per page, on the server), and exits with status 1 when a
//!   page is wrong, after the same `invalid data in page N` lines.
//! * Extensions: `--addr IP` names the device by address instead of a
//!   configuration; the client retries the TCP connection for 5 s while
//!   the server is not listening yet; without `-g` (zero GID) the peer is
//!   reached at its TCP address.

use crate::oob::{self, Dest};
use clap::Parser;
use roce_verbs_api::gid::gid_to_addr;
use roce_verbs_api::{
    AccessFlags, AhAttr, Budget, Context, Cq, Mr, PathMtu, Pd, PollCqError, Qp, QpAttr, QpState,
    QpType, RecvWr, SendWr, WcStatus, WorkCompletion, WrOpcode,
};
use std::net::{IpAddr, Ipv6Addr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// Page size the `-c` pattern is laid out in (x86-64 Linux).
const PAGE: usize = 4096;
/// UD receive buffers start with room for the 40-byte GRH.
const GRH: usize = 40;
/// The Q_Key the UD tool uses.
const UD_QKEY: u32 = 0x1111_1111;

/// Which tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `ibv_rc_pingpong`.
    Rc,
    /// `ibv_uc_pingpong`.
    Uc,
    /// `ibv_ud_pingpong`.
    Ud,
}

fn num(s: &str) -> Result<u64, String> {
    crate::parse_c_number(s)
}

/// The options of the pingpong tools (rdma-core's, plus `--addr`).
#[derive(Parser, Debug, Clone)]
#[command(about = "Ping-pong SENDs between two QPs (rdma-core compatible)")]
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
    /// size of message to exchange (default 4096; UD 1024)
    #[arg(short = 's', long = "size", value_parser = num)]
    pub size: Option<u64>,
    /// path MTU (default 1024)
    #[arg(short = 'm', long = "mtu", value_parser = num)]
    pub mtu: Option<u64>,
    /// number of receives to post at a time (default 500)
    #[arg(short = 'r', long = "rx-depth", default_value = "500", value_parser = num)]
    pub rx_depth: u64,
    /// number of exchanges (default 1000)
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
    /// use on demand paging (not supported)
    #[arg(short = 'o', long = "odp")]
    pub odp: bool,
    /// use implicit on demand paging (not supported)
    #[arg(short = 'O', long = "iodp")]
    pub iodp: bool,
    /// prefetch an ODP MR (not supported)
    #[arg(short = 'P', long = "prefetch")]
    pub prefetch: bool,
    /// get CQE with timestamp (not supported)
    #[arg(short = 't', long = "ts")]
    pub ts: bool,
    /// validate received buffer
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// use device memory (not supported)
    #[arg(short = 'j', long = "dm")]
    pub dm: bool,
    /// use new post send WR API (same packets)
    #[arg(short = 'N', long = "new_send")]
    pub new_send: bool,
    /// allow allocation of unprotected/shared memory on CoCo guests (not supported)
    #[arg(short = 'U', long = "allow-cc-unprotected")]
    pub cc_unprotected: bool,
    /// extension: use a UDP device at this local address (no configuration needed)
    #[arg(long = "addr")]
    pub addr: Option<IpAddr>,
    /// extension: record every frame of the device to this pcap file
    #[arg(long = "pcap")]
    pub pcap: Option<std::path::PathBuf>,
    /// extension: inject faults on the real transport, e.g. loss=0.05,seed=7 (as ROCE_EMU_FAULTS)
    #[arg(long = "faults")]
    pub faults: Option<String>,
    /// extension: after the last exchange keep the QP answering for this many seconds, so a
    /// peer whose last ACK was lost gets it when it retransmits (the exchange has no final
    /// handshake: under loss, the side that finishes first can otherwise leave the other
    /// retrying forever)
    #[arg(long = "linger", value_name = "SECS", default_value_t = 0.0)]
    pub linger: f64,
    /// connect to the server at <host> (without: start a server and wait for a connection)
    pub servername: Option<String>,
}

/// The path MTU of `-m` (256, 512, 1024, 2048 or 4096 bytes).
pub(crate) fn mtu_enum(v: u64) -> Option<PathMtu> {
    PathMtu::from_bytes(usize::try_from(v).ok()?)
}

/// Run a tool with the process's arguments; returns its exit status.
pub fn main(kind: Kind) -> ExitCode {
    let args = Args::parse();
    match run(kind, &args) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::from(1)
        }
    }
}

/// Wait until the CQ has at least one completion; up to `max` are returned.
pub(crate) fn wait_cq(
    ctx: &Context,
    cq: &Cq,
    max: usize,
) -> Result<Vec<WorkCompletion>, PollCqError> {
    loop {
        let mut got = Vec::new();
        let mut err = None;
        ctx.progress(
            || match cq.poll(max) {
                Ok(v) => {
                    got = v;
                    !got.is_empty()
                }
                Err(e) => {
                    err = Some(e);
                    true
                }
            },
            Budget { events: 1_000_000, wall: Duration::from_secs(1) },
        );
        if let Some(e) = err {
            return Err(e);
        }
        if !got.is_empty() {
            return Ok(got);
        }
    }
}

/// The attributes of rdma-core's `pp_connect_ctx` that do not depend on
/// the peer: path MTU, source GID index, service level and port.
pub(crate) struct PathOpts {
    pub mtu: PathMtu,
    pub sgid_index: u8,
    pub sl: u8,
    pub port: u8,
}

impl PathOpts {
    /// From the tools' `-m`, `-g`, `-l` and `-i`.
    pub(crate) fn new(mtu: PathMtu, gid_idx: Option<i64>, sl: u64, ib_port: u64) -> PathOpts {
        PathOpts {
            mtu,
            sgid_index: gid_idx.filter(|g| *g >= 0).map(|g| g as u8).unwrap_or(0),
            sl: u8::try_from(sl).unwrap_or(0),
            port: u8::try_from(ib_port).unwrap_or(u8::MAX),
        }
    }

    /// An address vector to `dgid` with `hop_limit`.
    pub(crate) fn ah(&self, dgid: IpAddr, hop_limit: u8) -> AhAttr {
        let mut ah = AhAttr::new(dgid);
        ah.sgid_index = self.sgid_index;
        ah.hop_limit = hop_limit;
        ah.sl = self.sl;
        ah.port_num = self.port;
        ah
    }

    /// RESET -> INIT with rdma-core's attributes (`qkey` for UD, the
    /// default access flags otherwise); `which` names the QP in the error.
    pub(crate) fn init(&self, qp: &Qp, qkey: Option<u32>, which: &str) -> Result<(), String> {
        let init = QpAttr::new().state(QpState::Init).pkey_index(0).port(self.port);
        let init = match qkey {
            Some(q) => init.qkey(q),
            None => init.access_flags(AccessFlags::default()),
        };
        qp.modify(&init).map_err(|e| format!("Failed to modify {which} to INIT: {e}"))
    }

    /// An RC QP to RTR towards `rem` along `ah`, then to RTS sending from
    /// `sq_psn`, with rdma-core's attributes.
    pub(crate) fn rc_rtr_rts(
        &self,
        qp: &Qp,
        ah: AhAttr,
        rem: &Dest,
        sq_psn: u32,
        which: &str,
    ) -> Result<(), String> {
        let rtr = QpAttr::new()
            .state(QpState::Rtr)
            .ah(ah)
            .mtu(self.mtu)
            .dest_qpn(rem.qpn)
            .rq_psn(rem.psn)
            .max_dest_rd_atomic(1)
            .min_rnr_timer(12);
        qp.modify(&rtr).map_err(|e| format!("Failed to modify {which} to RTR: {e}"))?;
        let rts = QpAttr::new()
            .state(QpState::Rts)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .sq_psn(sq_psn)
            .max_rd_atomic(1);
        qp.modify(&rts).map_err(|e| format!("Failed to modify {which} to RTS: {e}"))
    }
}

/// RoCE addresses peers by GID: without one there is no GRH, and rxe
/// refuses the QP at RTR (and the AH of a UD QP) at once, rather than
/// sending to the TCP peer's address and retrying forever; a link-local
/// GID names no address this emulator reaches. `what` is the step that
/// fails ("modify QP to RTR", "create AH").
pub(crate) fn check_peer_gid(rem: &Dest, what: &str) -> Result<(), String> {
    if !rem.has_gid() {
        return Err(format!(
            "Failed to {what}: the peer sent no GID (RoCE needs one): run both sides \
             with -g 1, as with rxe"
        ));
    }
    if (rem.gid.segments()[0] & 0xffc0) == 0xfe80 {
        return Err(format!(
            "remote GID {} is link-local (GID index 0): this emulator reaches peers by their \
             IPv4 or global IPv6 address; run both sides with -g 1",
            rem.gid
        ));
    }
    Ok(())
}

/// The GID at `-g` (the unspecified address without it); `missing` is the
/// message when the index has none.
pub(crate) fn local_gid(
    ctx: &Context,
    gid_idx: Option<i64>,
    missing: impl FnOnce(i64) -> String,
) -> Result<Ipv6Addr, String> {
    match gid_idx {
        Some(g) if g >= 0 => ctx.query_gid(g as u32).ok_or_else(|| missing(g)),
        _ => Ok(Ipv6Addr::UNSPECIFIED),
    }
}

/// rdma-core's "  local address:  LID ..." / "  remote address: LID ..."
/// line; `label` is "local address: " or "remote address:", `sep` what
/// stands before "GID" ("," or ":" in ud_pingpong's local line).
pub(crate) fn print_address(label: &str, d: &Dest, sep: &str) {
    println!(
        "  {label} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
        d.lid, d.qpn, d.psn, d.gid
    );
}

/// Post receives with `post` until `n` are posted or one is refused;
/// returns how many were posted.
pub(crate) fn post_recvs(n: u64, post: impl Fn() -> bool) -> u64 {
    let mut i = 0;
    while i < n && post() {
        i += 1;
    }
    i
}

/// Err with rdma-core's message unless the completion succeeded.
pub(crate) fn check_status(wc: &WorkCompletion) -> Result<(), String> {
    if wc.status == WcStatus::Success {
        return Ok(());
    }
    Err(format!("Failed status {} ({}) for wr_id {}", wc.status, wc.status.code(), wc.wr_id))
}

/// The tools' two result lines for `iters` exchanges of `size` bytes since
/// `start`.
pub(crate) fn print_rate(size: usize, iters: u64, start: Instant) {
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = size as u64 * iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!("{iters} iters in {:.2} seconds = {:.2} usec/iter", usec / 1e6, usec / iters as f64);
}

/// The options no emulated device supports, and the other refusals before
/// anything is opened; the path MTU.
fn check_args(kind: Kind, a: &Args) -> Result<PathMtu, String> {
    if a.port > 65535 {
        return Err("port must be at most 65535".into());
    }
    if a.ib_port < 1 {
        return Err("ib port must be at least 1".into());
    }
    if a.odp || a.iodp {
        return Err(
            "The device isn't ODP capable or does not support RC send and receive with ODP".into(),
        );
    }
    if a.prefetch {
        return Err("prefetch is valid only with on-demand memory region".into());
    }
    if a.ts {
        return Err("The device isn't completion timestamp capable".into());
    }
    if a.dm {
        return Err("Device doesn't support dm allocation".into());
    }
    if a.cc_unprotected {
        return Err("Couldn't allocate parent domain".into());
    }
    if kind == Kind::Ud && a.mtu.is_some() {
        return Err("ud_pingpong has no -m option (UD messages are one packet)".into());
    }
    match a.mtu {
        None => Ok(PathMtu::Mtu1024),
        Some(v) => {
            mtu_enum(v).ok_or_else(|| format!("invalid MTU {v} (256, 512, 1024, 2048, 4096)"))
        }
    }
}

/// One side of a pingpong: rdma-core's `pingpong_context`. (Fields drop
/// in this order: the QP before the CQ and the MR, the device last.)
struct Pp<'a> {
    kind: Kind,
    a: &'a Args,
    qp: Qp,
    cq: Cq,
    mr: Mr,
    _pd: Pd,
    ctx: Context,
    path: PathOpts,
    /// Message size.
    size: usize,
    /// Where messages start in the buffer (after the GRH area for UD).
    off: usize,
    rx_depth: u32,
}

/// What the exchange loop counted.
struct Counts {
    rcnt: u64,
    bad_len: u64,
    bad_data: u64,
}

impl<'a> Pp<'a> {
    /// rdma-core's `pp_init_ctx`: device, PD, buffer, CQ and a QP in INIT.
    fn open(kind: Kind, a: &'a Args, mtu: PathMtu) -> Result<Pp<'a>, String> {
        let size = a.size.unwrap_or(if kind == Kind::Ud { 1024 } else { 4096 });
        let size = u32::try_from(size).map_err(|_| format!("size {size} too large"))? as usize;
        let rx_depth = u32::try_from(a.rx_depth).map_err(|_| "rx depth too large".to_string())?;
        let off = if kind == Kind::Ud { GRH } else { 0 };
        let buf_len = size + off;
        if let Some(f) = &a.faults {
            // read by the transport when the device is opened
            std::env::set_var("ROCE_EMU_FAULTS", f);
        }
        let dev = crate::open_device_with(a.ib_dev.as_deref(), a.addr, a.pcap.as_deref())?;
        let ctx = dev.open();
        let port = ctx.query_port();
        if kind == Kind::Ud && size > port.active_mtu.bytes() {
            return Err(format!(
                "Requested size larger than port MTU ({})",
                port.active_mtu.bytes()
            ));
        }
        let pd = ctx.alloc_pd().map_err(|e| format!("Couldn't allocate PD: {e}"))?;
        let mr = pd
            .reg_mr(buf_len, AccessFlags::LOCAL_WRITE)
            .map_err(|e| format!("Couldn't register MR: {e}"))?;
        mr.write(0, &vec![0x7b; buf_len]).map_err(|e| e.to_string())?;
        let cq = ctx.create_cq(rx_depth + 1).map_err(|e| format!("Couldn't create CQ: {e}"))?;
        let qp_type = match kind {
            Kind::Rc => QpType::Rc,
            Kind::Uc => QpType::Uc,
            Kind::Ud => QpType::Ud,
        };
        let qp = pd
            .qp_builder(&cq, &cq)
            .qp_type(qp_type)
            .max_send_wr(1)
            .max_recv_wr(rx_depth)
            .max_send_sge(1)
            .max_recv_sge(1)
            .build()
            .map_err(|e| format!("Couldn't create QP: {e}"))?;
        let path = PathOpts::new(mtu, a.gid_idx, a.sl, a.ib_port);
        path.init(&qp, (kind == Kind::Ud).then_some(UD_QKEY), "QP")?;
        Ok(Pp { kind, a, qp, cq, mr, _pd: pd, ctx, path, size, off, rx_depth })
    }

    /// Post up to `n` receives of the whole buffer; how many were posted.
    fn post_recv(&self, n: u64) -> u64 {
        let (mr, len) = (&self.mr, (self.size + self.off) as u32);
        post_recvs(n, || {
            self.qp.post_recv(RecvWr::new(RECV_WRID, mr.addr(), len, mr.lkey())).is_ok()
        })
    }

    /// rdma-core's `pp_connect_ctx`: RTR and RTS towards `rem` (reached at
    /// `peer_ip` when it sent no GID); for UD the address vector to send to.
    fn connect(&self, rem: &Dest, peer_ip: IpAddr, my_psn: u32) -> Result<Option<AhAttr>, String> {
        let ud = self.kind == Kind::Ud;
        check_peer_gid(rem, if ud { "create AH" } else { "modify QP to RTR" })?;
        let dgid = if rem.has_gid() { gid_to_addr(rem.gid) } else { peer_ip };
        let ah = self.path.ah(dgid, if ud { 64 } else { 1 });
        let qp = &self.qp;
        let rtr = match self.kind {
            Kind::Rc => return self.path.rc_rtr_rts(qp, ah, rem, my_psn, "QP").map(|()| None),
            Kind::Uc => QpAttr::new()
                .state(QpState::Rtr)
                .ah(ah)
                .mtu(self.path.mtu)
                .dest_qpn(rem.qpn)
                .rq_psn(rem.psn),
            Kind::Ud => QpAttr::new().state(QpState::Rtr),
        };
        qp.modify(&rtr).map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
        qp.modify(&QpAttr::new().state(QpState::Rts).sq_psn(my_psn))
            .map_err(|e| format!("Failed to modify QP to RTS: {e}"))?;
        Ok(ud.then_some(ah))
    }

    /// The out-of-band exchange of `me` for the peer's address, and the
    /// connection towards it (the server connects before it answers, as
    /// rdma-core's does).
    fn exchange(&self, me: Dest) -> Result<(Dest, Option<AhAttr>), String> {
        let port = self.a.port as u16;
        let (rem, peer_ip, mut ud_ah) = match &self.a.servername {
            Some(host) => {
                let (r, ip) = oob::client_exchange(host, port, &[me], Duration::from_secs(5))?;
                (r[0], ip, None)
            }
            None => {
                let mut ud_ah = None;
                let (r, ip) = oob::server_exchange(port, 1, |r, ip| {
                    ud_ah = self.connect(&r[0], ip, me.psn)?;
                    Ok(vec![me])
                })?;
                (r[0], ip, ud_ah)
            }
        };
        print_address("remote address:", &rem, ",");
        if self.a.servername.is_some() {
            ud_ah = self.connect(&rem, peer_ip, me.psn)?;
        }
        Ok((rem, ud_ah))
    }

    fn post_send(&self, rem: &Dest, ud_ah: Option<AhAttr>) -> Result<(), String> {
        let mr = &self.mr;
        let wr = SendWr::new(SEND_WRID, WrOpcode::Send).sge(
            mr.addr() + self.off as u64,
            self.size as u32,
            mr.lkey(),
        );
        let wr = match ud_ah {
            Some(ah) => wr.ud(ah, rem.qpn, UD_QKEY),
            None => wr,
        };
        self.qp.post_send(wr).map_err(|e| format!("Couldn't post send: {e}"))
    }

    /// The exchanges: each side sends when its previous SEND and receive
    /// both completed, until `-n` of each; `routs` receives are posted.
    fn ping(&self, rem: &Dest, ud_ah: Option<AhAttr>, mut routs: u64) -> Result<Counts, String> {
        let (a, size, off, iters) = (self.a, self.size, self.off, self.a.iters);
        let mut pending = RECV_WRID;
        if a.servername.is_some() {
            if a.chk {
                for i in (0..size).step_by(PAGE) {
                    self.mr.write((off + i) as u64, &[0]).map_err(|e| e.to_string())?;
                }
            }
            self.post_send(rem, ud_ah)?;
            pending |= SEND_WRID;
        }
        let (mut rcnt, mut scnt) = (0u64, 0u64);
        let expect_len = (size + off) as u32;
        // -c: every received message is checked as it arrives (the peer's
        // buffer: 0 at each page start, 0x7b elsewhere), not only the last one
        let (mut bad_len, mut bad_data) = (0u64, 0u64);
        let mut got = vec![0u8; size];
        let rx_depth = u64::from(self.rx_depth);
        while rcnt < iters || scnt < iters {
            let wcs = wait_cq(&self.ctx, &self.cq, 2).map_err(|e| format!("poll CQ failed {e}"))?;
            for wc in wcs {
                check_status(&wc)?;
                match wc.wr_id {
                    SEND_WRID => scnt += 1,
                    RECV_WRID => {
                        routs = routs.saturating_sub(1);
                        if routs <= 1 {
                            routs += self.post_recv(rx_depth - routs);
                            if routs < rx_depth {
                                return Err(format!("Couldn't post receive ({routs})"));
                            }
                        }
                        bad_len += u64::from(a.chk && wc.byte_len != expect_len);
                        if a.chk && !page_pattern_ok(&self.mr, off, size, &mut got)? {
                            bad_data += 1;
                        }
                        rcnt += 1;
                    }
                    other => return Err(format!("Completion for unknown wr_id {other}")),
                }
                pending &= !wc.wr_id;
                if scnt < iters && pending == 0 {
                    self.post_send(rem, ud_ah)?;
                    pending = RECV_WRID | SEND_WRID;
                }
            }
        }
        Ok(Counts { rcnt, bad_len, bad_data })
    }

    /// `-c`: the buffer and what the loop counted; prints what is wrong
    /// and returns whether all was right.
    fn check(&self, c: &Counts) -> Result<bool, String> {
        let mut ok = true;
        let mut got = vec![0u8; self.size];
        self.mr.read(self.off as u64, &mut got).map_err(|e| e.to_string())?;
        for (p, page) in got.chunks(PAGE).enumerate() {
            if page.iter().enumerate().any(|(i, &b)| b != if i == 0 { 0 } else { 0x7b }) {
                println!("invalid data in page {p}");
                ok = false;
            }
        }
        if c.bad_len > 0 {
            let expect_len = self.size + self.off;
            println!("{} receive completions with a length other than {expect_len}", c.bad_len);
            ok = false;
        }
        if c.bad_data > 0 {
            println!("{} of {} received messages with invalid data", c.bad_data, c.rcnt);
            ok = false;
        }
        Ok(ok)
    }
}

/// Run a tool; `Err` is a message for stderr (exit status 1).
pub fn run(kind: Kind, a: &Args) -> Result<ExitCode, String> {
    let mtu = check_args(kind, a)?;
    let pp = Pp::open(kind, a, mtu)?;
    let rx_depth = u64::from(pp.rx_depth);
    let routs = pp.post_recv(rx_depth);
    if routs < rx_depth {
        return Err(format!("Couldn't post receive ({routs})"));
    }
    let gid = local_gid(&pp.ctx, a.gid_idx, |g| match kind {
        Kind::Ud => format!("Could not get local gid for gid index {g}"),
        _ => format!("can't read sgid of index {g}"),
    })?;
    let me = Dest { lid: 0, qpn: pp.qp.qpn().value(), psn: rand::random::<u32>() & 0xff_ffff, gid };
    print_address("local address: ", &me, if kind == Kind::Ud { ":" } else { "," });
    let (rem, ud_ah) = pp.exchange(me)?;

    let start = Instant::now();
    let counts = pp.ping(&rem, ud_ah, routs)?;
    print_rate(pp.size, a.iters, start);
    let ok = !a.chk || pp.check(&counts)?;
    if a.linger > 0.0 {
        // the device's driver thread keeps answering while we wait
        std::thread::sleep(Duration::from_secs_f64(a.linger.min(3600.0)));
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Whether the `size` bytes at `off` of `mr` are the peer's `-c` pattern
/// (0 at each page start, 0x7b elsewhere); `buf` is scratch of `size`.
fn page_pattern_ok(mr: &Mr, off: usize, size: usize, buf: &mut [u8]) -> Result<bool, String> {
    mr.read(off as u64, &mut buf[..size]).map_err(|e| e.to_string())?;
    Ok(buf[..size]
        .chunks(PAGE)
        .all(|page| page.iter().enumerate().all(|(i, &b)| b == if i == 0 { 0 } else { 0x7b })))
}
