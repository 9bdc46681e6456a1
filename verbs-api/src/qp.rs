//! Queue pairs (`ibv_qp`) and the connection helpers.

use crate::error::{destroy_on_drop, DestroyError, McastAttachError};
use crate::objects::Context;
use crate::objects::Cq;
use crate::pd::{Mw, Pd};
use crate::srq::Srq;
use roce_emulator::{
    AccessFlags, AhAttr, CreateQpError, ModifyQpError, MwBind, MwBindWr, MwError, PathMtu,
    PostRecvError, PostSendError, QpAttr, QpCap, QpInitAttr, QpLookupError, QpState, QpType,
    RecvWr, SendFlags, SendWr,
};
use roce_packet::{Qpn, RKey};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// What a peer needs to connect to a QP, exchanged out of band (the same
/// facts `ibv_rc_pingpong` sends over TCP: GID, QPN and initial PSN; RoCE
/// has no LID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpEndpoint {
    /// The port's address (GID index 0 as an IP address).
    pub addr: IpAddr,
    /// The QP number.
    pub qpn: u32,
    /// The first PSN this QP will send (the peer's `rq_psn`).
    pub psn: u32,
}

/// Connection parameters for [`Qp::to_init`], [`Qp::to_rtr`],
/// [`Qp::to_rts`]. The defaults are rdma-core's (`ibv_rc_pingpong`):
/// path MTU 1024, local ACK timeout 14 (4.096 µs × 2^14 ≈ 67 ms), 7
/// retries, RNR retry 7 (forever), minimum RNR timer 12 (0.64 ms); the
/// read/atomic depths are 16 both ways (perftest-like; `ibv_rc_pingpong`
/// uses 1), and the QP grants remote write, read and atomic access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Remote access the QP grants (`qp_access_flags`).
    pub access: AccessFlags,
    /// Path MTU (at most the port's active MTU).
    pub mtu: PathMtu,
    /// Local ACK timeout code (0 disables the retransmit timer).
    pub timeout: u8,
    /// Transport retries before RETRY_EXC_ERR (0..=7).
    pub retry_cnt: u8,
    /// RNR retries before RNR_RETRY_EXC_ERR; 7 = forever.
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code (IBA table 45; 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic requests this QP may initiate (1..=16 here).
    pub max_rd_atomic: u8,
    /// READ/atomic requests this QP accepts at once as responder.
    pub max_dest_rd_atomic: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            mtu: PathMtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
        }
    }
}

impl ConnectOptions {
    /// The INIT → RTR attributes towards `remote` ([`Qp::to_rtr`]).
    pub fn rtr_attr(&self, remote: &QpEndpoint) -> QpAttr {
        QpAttr::new()
            .state(QpState::Rtr)
            .ah(AhAttr::new(remote.addr))
            .mtu(self.mtu)
            .dest_qpn(remote.qpn)
            .rq_psn(remote.psn)
            .max_dest_rd_atomic(self.max_dest_rd_atomic)
            .min_rnr_timer(self.min_rnr_timer)
    }

    /// The RTR → RTS attributes, sending from `sq_psn` ([`Qp::to_rts`]).
    pub fn rts_attr(&self, sq_psn: u32) -> QpAttr {
        QpAttr::new()
            .state(QpState::Rts)
            .sq_psn(sq_psn)
            .timeout(self.timeout)
            .retry_cnt(self.retry_cnt)
            .rnr_retry(self.rnr_retry)
            .max_rd_atomic(self.max_rd_atomic)
    }
}

impl Pd {
    /// Start creating a QP on this PD (RC by default) that reports to
    /// `send_cq` and `recv_cq` (they may be the same CQ).
    pub fn qp_builder(&self, send_cq: &Cq, recv_cq: &Cq) -> QpBuilder {
        QpBuilder::new(self.clone(), send_cq.clone(), recv_cq.clone())
    }
}

/// Builds a QP: `pd.qp_builder(&cq, &cq).max_send_wr(64).build()`.
#[derive(Clone, Debug)]
pub struct QpBuilder {
    pd: Pd,
    send_cq: Cq,
    recv_cq: Cq,
    qp_type: QpType,
    cap: QpCap,
    sq_sig_all: bool,
    srq: Option<Srq>,
}

/// [`QpBuilder`]'s setters of one capacity each.
macro_rules! cap_setters {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, n: u32) -> Self {
            self.cap.$name = n;
            self
        }
    )*};
}

impl QpBuilder {
    pub(crate) fn new(pd: Pd, send_cq: Cq, recv_cq: Cq) -> QpBuilder {
        QpBuilder {
            pd,
            send_cq,
            recv_cq,
            qp_type: QpType::Rc,
            cap: QpCap {
                max_send_wr: 128,
                max_recv_wr: 128,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            sq_sig_all: false,
            srq: None,
        }
    }
    /// Take receives from `srq` instead of a receive queue of its own
    /// (the QP keeps the SRQ alive).
    pub fn srq(mut self, srq: &Srq) -> Self {
        self.srq = Some(srq.clone());
        self
    }
    /// The transport: RC (default), UC or UD.
    pub fn qp_type(mut self, t: QpType) -> Self {
        self.qp_type = t;
        self
    }
    /// All capacities at once.
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }
    cap_setters! {
        /// Send queue depth (default 128).
        max_send_wr;
        /// Receive queue depth (default 128).
        max_recv_wr;
        /// SGEs per send WR (default 4).
        max_send_sge;
        /// SGEs per receive WR (default 4).
        max_recv_sge;
        /// Largest inline send (default 64).
        max_inline_data;
    }
    /// Complete every send WR, not only the SIGNALED ones (default false).
    pub fn sq_sig_all(mut self, all: bool) -> Self {
        self.sq_sig_all = all;
        self
    }
    /// `ibv_create_qp`. The QP starts in RESET.
    pub fn build(self) -> Result<Qp, CreateQpError> {
        let init = QpInitAttr {
            pd: self.pd.handle(),
            send_cq: self.send_cq.handle(),
            recv_cq: self.recv_cq.handle(),
            qp_type: self.qp_type,
            cap: self.cap,
            sq_sig_all: self.sq_sig_all,
            srq: self.srq.as_ref().map(Srq::handle),
        };
        let (qpn, rq, sq) = {
            let mut g = self.pd.context().lock();
            let qpn = g.create_qp(init)?;
            (qpn, g.rq_ring(qpn), g.sq_ring(qpn))
        };
        Ok(Qp {
            inner: Arc::new(QpInner {
                pd: self.pd,
                send_cq: self.send_cq,
                recv_cq: self.recv_cq,
                srq: self.srq,
                qpn,
                destroyed: false,
                xrcd: None,
                rq,
                sq,
            }),
        })
    }
}

impl Qp {
    /// An XRC target QP of `xrcd` on its placeholder PD and CQ (see
    /// [`crate::pd::Xrcd::create_tgt_qp`]).
    pub(crate) fn xrc_target(xrcd: &crate::pd::Xrcd, pd: Pd, cq: Cq, qpn: Qpn) -> Qp {
        Qp {
            inner: Arc::new(QpInner {
                pd,
                send_cq: cq.clone(),
                recv_cq: cq,
                srq: None,
                qpn,
                destroyed: false,
                xrcd: Some(xrcd.clone()),
                rq: None,
                sq: None,
            }),
        }
    }

    /// An XRC target's domain.
    pub fn xrcd(&self) -> Option<&crate::pd::Xrcd> {
        self.inner.xrcd.as_ref()
    }
}

pub(crate) struct QpInner {
    pd: Pd,
    send_cq: Cq,
    recv_cq: Cq,
    srq: Option<Srq>,
    qpn: Qpn,
    destroyed: bool,
    /// An XRC target's domain (kept alive while the QP is).
    xrcd: Option<crate::pd::Xrcd>,
    /// Its receive queue as `post_recv` appends to it without the device
    /// lock, `max_recv_wr`, `max_recv_sge` (`None`: on an SRQ, or XRC).
    rq: Option<(Arc<roce_emulator::RqRing>, u32, u32)>,
    /// Its send queue as `post_send` appends to it without the device
    /// lock (`None`: an XRC target, which sends nothing).
    sq: Option<Arc<roce_emulator::SqRing>>,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        if !self.destroyed {
            leave_all_groups(self.pd.context(), self.qpn);
        }
        destroy_on_drop(self.destroyed, "destroy_qp", self.qpn, || {
            self.pd.context().lock().destroy_qp(self.qpn)
        });
        if !self.destroyed {
            // (the ACKs it still owed its peer leave now)
            self.pd.context().kick();
        }
    }
}

/// A queue pair (`struct ibv_qp`). It keeps its PD and CQs alive. Clones
/// share the QP (e.g. one posting thread, one polling thread).
#[derive(Clone)]
pub struct Qp {
    inner: Arc<QpInner>,
}

impl fmt::Debug for Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qp")
            .field("device", &self.inner.pd.context().name())
            .field("qpn", &self.inner.qpn)
            .finish()
    }
}

impl Qp {
    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.inner.qpn
    }
    /// The PD it was created on.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }
    /// Its send CQ.
    pub fn send_cq(&self) -> &Cq {
        &self.inner.send_cq
    }
    /// Its receive CQ.
    pub fn recv_cq(&self) -> &Cq {
        &self.inner.recv_cq
    }
    /// The SRQ it takes receives from, if any.
    pub fn srq(&self) -> Option<&Srq> {
        self.inner.srq.as_ref()
    }

    /// What a peer needs to connect to this QP, if it starts sending at `psn`.
    pub fn endpoint(&self, psn: u32) -> QpEndpoint {
        QpEndpoint { addr: self.inner.pd.context().addr(), qpn: self.qpn().value(), psn }
    }

    /// `ibv_modify_qp`. The attribute's setters put their bits in its mask;
    /// the transition table (IBA §11.2.5) explains every rejection, e.g.
    /// `invalid attribute mask for INIT -> RTR: missing [DEST_QPN]`.
    pub fn modify(&self, attr: &QpAttr) -> Result<(), ModifyQpError> {
        self.inner.pd.context().lock().modify_qp(self.inner.qpn, attr)
    }

    /// `ibv_query_qp`: the current attributes and the creation attributes.
    pub fn query(&self) -> Result<(QpAttr, QpInitAttr), QpLookupError> {
        self.inner.pd.context().lock().query_qp(self.inner.qpn)
    }

    /// The current state (RESET if the QP vanished, which cannot happen
    /// while this handle exists).
    pub fn state(&self) -> QpState {
        self.inner.pd.context().lock().qp_state(self.inner.qpn).unwrap_or(QpState::Reset)
    }

    /// RESET → INIT with P_Key index 0, port 1 and `opts.access`.
    pub fn to_init(&self, opts: &ConnectOptions) -> Result<(), ModifyQpError> {
        self.modify(
            &QpAttr::new().state(QpState::Init).pkey_index(0).port(1).access_flags(opts.access),
        )
    }

    /// INIT → RTR towards `remote`: its address, QPN and first PSN.
    pub fn to_rtr(&self, remote: &QpEndpoint, opts: &ConnectOptions) -> Result<(), ModifyQpError> {
        self.modify(&opts.rtr_attr(remote))
    }

    /// RTR → RTS, sending from `sq_psn` (what the peer was told in
    /// [`Qp::endpoint`]).
    pub fn to_rts(&self, sq_psn: u32, opts: &ConnectOptions) -> Result<(), ModifyQpError> {
        self.modify(&opts.rts_attr(sq_psn))
    }

    /// RESET → INIT → RTR → RTS in one call: `local` is this QP's own
    /// endpoint (its `psn` becomes the send PSN), `remote` the peer's.
    pub fn connect(
        &self,
        local: &QpEndpoint,
        remote: &QpEndpoint,
        opts: &ConnectOptions,
    ) -> Result<(), ModifyQpError> {
        self.to_init(opts)?;
        self.to_rtr(remote, opts)?;
        self.to_rts(local.psn, opts)
    }

    /// `ibv_post_send`: queue one work request (the driver is kicked so
    /// its packets leave).
    ///
    /// In RTS the WQE is appended to the QP's send queue without the
    /// device lock ([`roce_emulator::SqRing`]) and the device takes it
    /// when the driver runs it; in other states the device decides (the
    /// error, SQD's queue, ERR's flush completion).
    pub fn post_send(&self, wr: SendWr) -> Result<(), PostSendError> {
        self.post_send_deferred(wr)?;
        self.inner.pd.context().kick();
        Ok(())
    }

    /// [`Qp::post_send`] without kicking the driver (ring [`Qp::doorbell`]
    /// after the last of a batch).
    pub fn post_send_deferred(&self, wr: SendWr) -> Result<(), PostSendError> {
        use roce_emulator::RingSend;
        let wr = match &self.inner.sq {
            Some(ring) => match ring.post(wr) {
                Ok(()) => return Ok(()),
                Err(RingSend::Refused(e)) => return Err(e),
                Err(RingSend::Device(wr)) => wr,
            },
            None => wr,
        };
        self.inner.pd.context().lock().post_send(self.inner.qpn, wr)
    }

    /// `ibv_post_send` with a list of work requests (`wr->next` chains):
    /// queued in order, then the driver is kicked once, so their packets
    /// can leave in one batch. Stops at the first request that fails;
    /// returns how many were queued and that error.
    pub fn post_send_list(
        &self,
        wrs: impl IntoIterator<Item = SendWr>,
    ) -> Result<usize, (usize, PostSendError)> {
        let r = self.post_send_list_deferred(wrs);
        if r.as_ref().map_or_else(|(n, _)| *n, |n| *n) > 0 {
            self.doorbell();
        }
        r
    }

    /// Like [`Qp::post_send_list`] but without kicking the driver: post the
    /// lists of several QPs, then ring [`Qp::doorbell`] once (on any QP of
    /// the device). Until then the packets may not leave.
    pub fn post_send_list_deferred(
        &self,
        wrs: impl IntoIterator<Item = SendWr>,
    ) -> Result<usize, (usize, PostSendError)> {
        let mut n = 0;
        for wr in wrs {
            if let Err(e) = self.post_send_deferred(wr) {
                return Err((n, e));
            }
            n += 1;
        }
        Ok(n)
    }

    /// Kick the device's driver so that everything posted with
    /// [`Qp::post_send_list_deferred`] (on any QP of the device) leaves.
    pub fn doorbell(&self) {
        self.inner.pd.context().kick();
    }

    /// `ibv_post_recv`: queue one receive buffer.
    ///
    /// Appended to the QP's receive queue without the device lock
    /// ([`roce_emulator::RqRing`]); a QP in RESET or ERR, on an SRQ, or
    /// XRC takes the device's path (the error, or the flush completion at
    /// once).
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostRecvError> {
        use roce_emulator::RingPost;
        let ctx = self.inner.pd.context();
        let wr = match &self.inner.rq {
            Some((ring, max_wr, max_sge)) => match ring.post(wr, *max_wr, *max_sge) {
                Ok(()) => {
                    ctx.driver().recv_posted();
                    return Ok(());
                }
                Err(RingPost::Full) => return Err(PostRecvError::QueueFull { max: *max_wr }),
                Err(RingPost::TooManySge(n)) => {
                    return Err(PostRecvError::TooManySge { n, max: *max_sge })
                }
                Err(RingPost::Device(wr)) => wr,
            },
            None => wr,
        };
        ctx.lock().post_recv(self.inner.qpn, wr)?;
        ctx.driver().recv_posted();
        Ok(())
    }

    /// `ibv_destroy_qp` now, reporting errors (outstanding work is dropped
    /// without completions). Fails with [`DestroyError::Shared`] while
    /// clones exist.
    pub fn destroy(self) -> Result<(), DestroyError<QpLookupError>> {
        let mut inner = DestroyError::sole(self.inner, "QP")?;
        inner.destroyed = true;
        leave_all_groups(inner.pd.context(), inner.qpn);
        let r = inner.pd.context().lock().destroy_qp(inner.qpn);
        // (the ACKs it still owed its peer leave now)
        inner.pd.context().kick();
        r.map_err(DestroyError::Verb)
    }
}

/// Detach `qpn` from every multicast group (a QP going away), leaving on
/// the wire the groups it was the device's last QP of.
fn leave_all_groups(ctx: &Context, qpn: Qpn) {
    let groups = ctx.lock().mcast_groups(qpn);
    for g in groups {
        if let Ok(true) = ctx.lock().detach_mcast(qpn, g) {
            let _ = ctx.driver().leave_group(&ctx.inner.hca, g);
        }
    }
}

impl Qp {
    /// `ibv_attach_mcast`: this UD QP receives the datagrams sent to the
    /// multicast group `gid` (an IPv4 224.0.0.0/4 or IPv6 ff00::/8 address,
    /// IPv4-mapped or not). The device joins the group on the wire with
    /// its first QP in it. Attaching twice is a no-op.
    pub fn attach_mcast(&self, gid: IpAddr) -> Result<(), McastAttachError> {
        let ctx = self.pd().context();
        let first = ctx.lock().attach_mcast(self.inner.qpn, gid)?;
        if first {
            let g = roce_emulator::mcast::canonical_gid(gid);
            if let Err(e) = ctx.driver().join_group(&ctx.inner.hca, g) {
                let _ = ctx.lock().detach_mcast(self.inner.qpn, gid);
                return Err(McastAttachError::Join(e));
            }
        }
        Ok(())
    }

    /// `ibv_detach_mcast`; the device leaves the group on the wire with its
    /// last QP.
    pub fn detach_mcast(&self, gid: IpAddr) -> Result<(), roce_emulator::McastError> {
        let ctx = self.pd().context();
        let last = ctx.lock().detach_mcast(self.inner.qpn, gid)?;
        if last {
            let g = roce_emulator::mcast::canonical_gid(gid);
            if let Err(e) = ctx.driver().leave_group(&ctx.inner.hca, g) {
                tracing::debug!(group = %g, error = %e, "leaving the IP multicast group failed");
            }
        }
        Ok(())
    }

    /// The multicast groups this QP is attached to.
    pub fn mcast_groups(&self) -> Vec<IpAddr> {
        self.pd().context().lock().mcast_groups(self.inner.qpn)
    }
}

impl Qp {
    /// `ibv_bind_mw` for a type 1 window: posts the bind on this QP's send
    /// queue (after every earlier work request) and returns the rkey the
    /// window will have. It completes with opcode BIND_MW when `send_flags`
    /// has SIGNALED, and with MW_BIND_ERR (QP to ERR) if a check fails
    /// when it executes. Use the rkey once the completion arrived (or a
    /// later one, completions being in order).
    pub fn bind_mw(
        &self,
        mw: &Mw,
        wr_id: u64,
        send_flags: SendFlags,
        bind: MwBind,
    ) -> Result<RKey, MwError> {
        let ctx = self.pd().context();
        let wr = MwBindWr { wr_id, send_flags, bind };
        let rkey = ctx.lock().bind_mw(self.qpn(), mw.handle(), wr)?;
        ctx.kick();
        Ok(rkey)
    }
}
