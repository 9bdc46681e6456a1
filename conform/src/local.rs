//! The agent for a roce-emu device opened in the tester's own process: a
//! real UDP device (the same engine, driver thread and socket as any
//! program on the drop-in), driven through the Rust verbs API.

use crate::agent::{Agent, AgentError, Completion, QpInfo, QpSetup, QpStateName, SendReq, Service};
#[cfg(feature = "mutants")]
use roce_emulator::Mutant;
use roce_host::DeviceConfig;
use roce_verbs_api::{
    AccessFlags, ConnectOptions, Context, Cq, Mr, Mw, MwType, PathMtu, Pd, Qp, QpAttr, QpEndpoint,
    QpState, QpType, RKey, RecvWr, SendFlags, SendWr, Srq, WrOpcode,
};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// What one case's set-up created.
struct Objects {
    // dropped in this order: the window (bound, it holds its QP and
    // region; its rkey is the case's Key::Window), then the QP before its
    // SRQ, CQ and region
    _mw: Option<Mw>,
    qp: Qp,
    srq: Option<Srq>,
    cq: Cq,
    mr: Mr,
}

/// A roce-emu UDP device in this process, the target of `roce conform`
/// without `--target`.
pub struct LocalAgent {
    ctx: Context,
    objs: Option<Objects>,
    #[cfg(feature = "mutants")]
    mutant: Option<Mutant>,
}

impl LocalAgent {
    /// Open a UDP device named `name` on `addr` (port 4791).
    pub fn open(name: &str, addr: IpAddr) -> Result<LocalAgent, AgentError> {
        let dev = DeviceConfig::udp(name, addr).open().map_err(|e| open_error(name, addr, e))?;
        Ok(LocalAgent {
            ctx: dev.open(),
            objs: None,
            #[cfg(feature = "mutants")]
            mutant: None,
        })
    }

    /// The same with one IBA rule broken in the device's core
    /// (`roce_emulator::mutant`): for showing that cases catch that bug.
    /// A broken device is one process's alone (not shared), so that every
    /// datagram reaches its core: a shared device's steering would drop
    /// one to an unknown QP before the core could misroute it. Only with
    /// the `mutants` feature (this crate's tests).
    #[cfg(feature = "mutants")]
    pub fn open_mutant(
        name: &str,
        addr: IpAddr,
        mutant: Option<Mutant>,
    ) -> Result<LocalAgent, AgentError> {
        if mutant.is_none() {
            return LocalAgent::open(name, addr);
        }
        let cfg = DeviceConfig { mutant, ..DeviceConfig::udp(name, addr) };
        let opts = roce_host::GroupOptions {
            engine: cfg.engine_config(),
            share: false,
            ..Default::default()
        };
        let mut v = DeviceConfig::open_group(std::slice::from_ref(&cfg), opts)
            .map_err(|e| open_error(name, addr, e))?;
        let dev = v.pop().ok_or_else(|| AgentError::Link(format!("open {name}: no device")))?;
        Ok(LocalAgent { ctx: dev.open(), objs: None, mutant })
    }

    fn objs(&self) -> Result<&Objects, AgentError> {
        self.objs.as_ref().ok_or_else(|| AgentError::Link("no QP: setup first".into()))
    }
}

/// A device that could not be opened.
fn open_error(name: &str, addr: IpAddr, e: impl std::fmt::Display) -> AgentError {
    AgentError::Link(format!("open {name} on {addr}: {e}"))
}

fn verb<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> AgentError {
    move |e| AgentError::Verb(format!("{what}: {e}"))
}

/// A window over the region's first `len` bytes with remote read and
/// write: type 2 bound by a BIND_MW work request on `qp`, type 1 by
/// `ibv_bind_mw` (the bind's completion taken from `cq`).
fn bind_window(pd: &Pd, qp: &Qp, cq: &Cq, mr: &Mr, len: u32, ty: u8) -> Result<Mw, AgentError> {
    let bind = mr.mw_bind(0, u64::from(len), AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE);
    let mw = match ty {
        1 => {
            let mw = pd.alloc_mw(MwType::Type1).map_err(verb("ibv_alloc_mw"))?;
            qp.bind_mw(&mw, u64::MAX, SendFlags::SIGNALED, bind).map_err(verb("ibv_bind_mw"))?;
            mw
        }
        2 => {
            let mw = pd.alloc_mw(MwType::Type2).map_err(verb("ibv_alloc_mw"))?;
            let op = WrOpcode::BindMw { mw: mw.handle(), rkey: mw.inc_rkey(), bind };
            qp.post_send(SendWr::new(u64::MAX, op)).map_err(verb("ibv_post_send(BIND_MW)"))?;
            mw
        }
        t => return Err(AgentError::Unsupported(format!("memory window type {t}"))),
    };
    let end = Instant::now() + Duration::from_secs(2);
    loop {
        let got = cq.poll(1).map_err(verb("ibv_poll_cq"))?;
        if let Some(w) = got.first() {
            if w.status as u32 != 0 {
                return Err(AgentError::Verb(format!("BIND_MW completed with {:?}", w.status)));
            }
            return Ok(mw);
        }
        if Instant::now() >= end {
            return Err(AgentError::Verb("BIND_MW: no completion within 2 s".into()));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn wr_opcode(op: u32) -> Result<WrOpcode, AgentError> {
    use crate::agent::wr;
    Ok(match op {
        wr::RDMA_WRITE => WrOpcode::RdmaWrite,
        wr::RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm,
        wr::SEND => WrOpcode::Send,
        wr::SEND_WITH_IMM => WrOpcode::SendWithImm,
        wr::RDMA_READ => WrOpcode::RdmaRead,
        wr::ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCmpAndSwp,
        wr::ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFetchAndAdd,
        o => return Err(AgentError::Unsupported(format!("work request opcode {o}"))),
    })
}

impl Agent for LocalAgent {
    fn describe(&self) -> String {
        #[cfg(feature = "mutants")]
        let m = self.mutant.map(|m| format!(", mutant {m}")).unwrap_or_default();
        #[cfg(not(feature = "mutants"))]
        let m = "";
        let (drv, name) = (self.ctx.driver_name(), self.ctx.name());
        format!("roce-emu {} ({drv} device {name}{m})", env!("CARGO_PKG_VERSION"))
    }

    fn addr(&self) -> IpAddr {
        self.ctx.addr()
    }

    fn setup(&mut self, setup: &QpSetup) -> Result<QpInfo, AgentError> {
        self.objs = None;
        let s = &setup.params;
        let pd = self.ctx.alloc_pd().map_err(verb("ibv_alloc_pd"))?;
        let cq = self.ctx.create_cq(256).map_err(verb("ibv_create_cq"))?;
        let mr =
            pd.reg_mr(s.mr_len as usize, AccessFlags(s.mr_access)).map_err(verb("ibv_reg_mr"))?;
        let ty = match s.service {
            Service::Rc | Service::Xrc => QpType::Rc,
            Service::Uc => QpType::Uc,
            Service::Ud => QpType::Ud,
        };
        let (qp, srq) = if s.service == Service::Xrc {
            // an XRC domain, one XRC SRQ (completing on the case's CQ) and
            // the domain's target QP
            let xrcd = self.ctx.alloc_xrcd().map_err(verb("ibv_open_xrcd"))?;
            let srq = pd.create_xrc_srq(64, 1, &xrcd, &cq).map_err(verb("ibv_create_srq_ex"))?;
            let qp = xrcd.create_tgt_qp().map_err(verb("ibv_create_qp_ex"))?;
            (qp, Some(srq))
        } else {
            let srq = match s.srq {
                true => Some(pd.create_srq(64, 1).map_err(verb("ibv_create_srq"))?),
                false => None,
            };
            let mut b = pd.qp_builder(&cq, &cq).qp_type(ty);
            if let Some(q) = &srq {
                b = b.srq(q);
            }
            (b.build().map_err(verb("ibv_create_qp"))?, srq)
        };
        let mtu = PathMtu::from_bytes(s.mtu as usize)
            .ok_or_else(|| AgentError::Unsupported(format!("path MTU {}", s.mtu)))?;
        let opts = ConnectOptions {
            access: AccessFlags(s.qp_access),
            mtu,
            timeout: s.timeout,
            retry_cnt: s.retry_cnt,
            rnr_retry: s.rnr_retry,
            min_rnr_timer: s.min_rnr_timer,
            max_rd_atomic: s.max_rd_atomic,
            max_dest_rd_atomic: s.max_dest_rd_atomic,
        };
        let local = qp.endpoint(s.sq_psn);
        let remote = QpEndpoint { addr: setup.peer, qpn: setup.peer_qpn, psn: s.rq_psn };
        match (s.service, s.stop_at) {
            (Service::Rc | Service::Xrc, QpStateName::Rts) => qp.connect(&local, &remote, &opts),
            (Service::Rc, QpStateName::Rtr) => {
                qp.to_init(&opts).and_then(|()| qp.to_rtr(&remote, &opts))
            }
            (Service::Uc, QpStateName::Rts) => qp.connect_uc(&local, &remote, &opts),
            (Service::Ud, QpStateName::Rts) => qp.activate_ud(s.qkey, s.sq_psn),
            (_, st) => return Err(AgentError::Unsupported(format!("set-up stopping at {st:?}"))),
        }
        .map_err(verb("ibv_modify_qp"))?;
        if s.mcast {
            let g = crate::agent::case_group(self.ctx.addr());
            qp.attach_mcast(g).map_err(verb("ibv_attach_mcast"))?;
        }
        let mw = match s.window {
            0 => None,
            n => Some(bind_window(&pd, &qp, &cq, &mr, n, s.window_type)?),
        };
        let info = QpInfo {
            qpn: qp.qpn().value(),
            mr_addr: mr.addr(),
            rkey: mr.rkey().value(),
            mw_rkey: mw.as_ref().map_or(0, |w| w.rkey().value()),
            srqn: match s.service {
                Service::Xrc => srq.as_ref().map_or(0, |q| q.handle().id()),
                _ => 0,
            },
        };
        self.objs = Some(Objects { _mw: mw, qp, srq, cq, mr });
        Ok(info)
    }

    fn post_recv(&mut self, wr_id: u64, offset: u64, len: u32) -> Result<(), AgentError> {
        let o = self.objs()?;
        let wr = RecvWr::new(wr_id, o.mr.addr() + offset, len, o.mr.lkey());
        match &o.srq {
            Some(srq) => srq.post_recv(wr).map_err(verb("ibv_post_srq_recv")),
            None => o.qp.post_recv(wr).map_err(verb("ibv_post_recv")),
        }
    }

    fn post_send(&mut self, r: &SendReq) -> Result<(), AgentError> {
        let o = self.objs()?;
        let mut wr = SendWr::new(r.wr_id, wr_opcode(r.opcode)?);
        if r.len > 0 {
            wr = wr.sge(o.mr.addr() + r.offset, r.len, o.mr.lkey());
        }
        wr = wr.remote(r.remote_addr, RKey::new(r.rkey)).with_imm(r.imm);
        if r.fence {
            wr = wr.with_flags(SendFlags::SIGNALED | SendFlags::FENCE);
        }
        wr.compare_add = r.compare_add;
        wr.swap = r.swap;
        o.qp.post_send(wr).map_err(verb("ibv_post_send"))
    }

    fn poll(&mut self, want: usize, wait: Duration) -> Result<Vec<Completion>, AgentError> {
        let o = self.objs()?;
        let end = Instant::now() + wait;
        loop {
            let got = o.cq.poll(want).map_err(verb("ibv_poll_cq"))?;
            if !got.is_empty() || Instant::now() >= end {
                return Ok(got
                    .iter()
                    .map(|w| Completion {
                        wr_id: w.wr_id,
                        status: w.status as u32,
                        opcode: w.opcode as u32,
                        byte_len: w.byte_len,
                        imm: w.imm,
                    })
                    .collect());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn modify_qp(&mut self, state: QpStateName) -> Result<(), AgentError> {
        let to = match state {
            QpStateName::Sqd => QpState::Sqd,
            QpStateName::Rts => QpState::Rts,
            s => return Err(AgentError::Unsupported(format!("modify_qp to {s:?}"))),
        };
        self.objs()?.qp.modify(&QpAttr::new().state(to)).map_err(verb("ibv_modify_qp"))
    }

    fn qp_state(&mut self) -> Result<QpStateName, AgentError> {
        Ok(match self.objs()?.qp.state() {
            QpState::Reset => QpStateName::Reset,
            QpState::Init => QpStateName::Init,
            QpState::Rtr => QpStateName::Rtr,
            QpState::Rts => QpStateName::Rts,
            QpState::Sqd => QpStateName::Sqd,
            QpState::Sqe => QpStateName::Sqe,
            QpState::Err => QpStateName::Err,
        })
    }

    fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, AgentError> {
        let mut b = vec![0u8; len as usize];
        self.objs()?.mr.read(offset, &mut b).map_err(verb("read region"))?;
        Ok(b)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), AgentError> {
        self.objs()?.mr.write(offset, data).map_err(verb("write region"))
    }

    fn teardown(&mut self) -> Result<(), AgentError> {
        self.objs = None;
        Ok(())
    }
}
