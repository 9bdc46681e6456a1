//! One rsocket: its CM id and event channel (whose fd is the rsocket's
//! number, as in rdma-core), where it is in connecting, its verbs
//! resources and the protocol state machine ([`roce_rsocket::Stream`])
//! that says what to post. Progress is made by whoever calls: every call
//! takes the CM events and completions that are there, and a blocking
//! call sleeps in `poll(2)` on the CM channel and the completion channel.

use crate::ep::Ep;
use crate::ffi::*;
use roce_rsocket::{Action, ConnData, RecvCompletion, Stream, StreamConfig};
use std::collections::VecDeque;
use std::ptr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Init,
    Bound,
    Listening,
    ResolvingAddr,
    ResolvingRoute,
    Connecting,
    /// Accepted; the CM's ESTABLISHED not seen yet.
    Accepting,
    Connected,
    /// Connecting failed with this errno.
    ConnectError(i32),
}

pub(crate) struct Rs {
    pub fd: i32,
    pub chan: *mut rdma_event_channel,
    pub id: *mut rdma_cm_id,
    pub state: State,
    /// `F_GETFL`/`F_SETFL` flags (`O_NONBLOCK`...), `F_GETFD` flags.
    pub fs_flags: i32,
    pub fd_flags: i32,
    pub cfg: StreamConfig,
    /// Option bits per level (`1 << optname`), as rdma-core keeps them.
    pub so_opts: u64,
    pub tcp_opts: u64,
    pub ipv6_opts: u64,
    pub keepalive_time: u32,
    pub ep: Option<Ep>,
    pub stream: Option<Stream>,
    /// `SO_ERROR`.
    pub err: i32,
    /// Accepted rsockets not yet taken by `raccept` (listener).
    pub accept_q: VecDeque<Rs>,
    /// Actions of `establish` held until the CM says the connection is up.
    pub pending: Vec<Action>,
    /// The CM reported the connection gone; we said goodbye to the CM.
    pub cm_gone: bool,
    pub cm_disconnect_sent: bool,
    /// When the last keepalive went (`SO_KEEPALIVE`: one every
    /// `keepalive_time` seconds, sent by whichever call makes progress;
    /// a blocked call looks at least every `SLEEP_CAP_MS`).
    pub last_keepalive: std::time::Instant,
    /// `riomap`ped buffers.
    pub iomaps: Vec<crate::ep::IoMapping>,
}

// SAFETY: the raw pointers are objects of the drop-in, usable from any
// thread; an `Rs` is reached only under its mutex.
unsafe impl Send for Rs {}

/// Bytes handed out per completion poll.
const WC_BATCH: usize = 32;

impl Rs {
    pub fn nonblocking(&self) -> bool {
        self.fs_flags & libc::O_NONBLOCK != 0
    }

    pub fn connected(&self) -> bool {
        self.state == State::Connected && self.stream.is_some()
    }

    /// Take every CM event waiting on our channel (it is non-blocking).
    /// Listeners accept here (new rsockets go to `accept_q`).
    pub fn drive_cm(&mut self) -> bool {
        let mut any = false;
        loop {
            let mut e = ptr::null_mut();
            // SAFETY: our live channel, non-blocking.
            if unsafe { rdma_get_cm_event(self.chan, &mut e) } != 0 || e.is_null() {
                return any;
            }
            any = true;
            // SAFETY: a live event until acknowledged below.
            let (kind, status, cid, param) =
                unsafe { ((*e).event, (*e).status, (*e).id, (*e).conn) };
            let data = if param.private_data.is_null() {
                Vec::new()
            } else {
                // SAFETY: the event's private data, `private_data_len` bytes.
                unsafe {
                    std::slice::from_raw_parts(
                        param.private_data as *const u8,
                        usize::from(param.private_data_len),
                    )
                }
                .to_vec()
            };
            // SAFETY: acknowledged once; nothing of it is used after.
            unsafe { rdma_ack_cm_event(e) };
            self.on_cm_event(kind, status, cid, param, &data);
        }
    }

    fn on_cm_event(
        &mut self,
        kind: u32,
        status: i32,
        cid: *mut rdma_cm_id,
        param: rdma_conn_param,
        data: &[u8],
    ) {
        crate::diag(&format!(
            "rsocket {}: CM event {kind} (status {status}) in {:?}",
            self.fd, self.state
        ));
        match (self.state, kind) {
            (State::Listening, ev::CONNECT_REQUEST) => {
                if let Some(rs) = accept_one(self, cid, param, data) {
                    self.accept_q.push_back(rs);
                }
            }
            (State::ResolvingAddr, ev::ADDR_RESOLVED) => {
                self.state = State::ResolvingRoute;
                // SAFETY: our live id.
                if unsafe { rdma_resolve_route(self.id, 2000) } != 0 {
                    self.connect_failed(crate::errno());
                }
            }
            (State::ResolvingRoute, ev::ROUTE_RESOLVED) => {
                if let Err(e) = self.start_connect() {
                    self.connect_failed(e);
                }
            }
            (State::Connecting, ev::ESTABLISHED | ev::CONNECT_RESPONSE) => self.established(data),
            (State::Accepting, ev::ESTABLISHED) => {
                self.state = State::Connected;
                let acts = std::mem::take(&mut self.pending);
                let _ = self.run(acts, &[]);
            }
            (
                State::ResolvingAddr | State::ResolvingRoute | State::Connecting | State::Accepting,
                ev::ADDR_ERROR
                | ev::ROUTE_ERROR
                | ev::UNREACHABLE
                | ev::REJECTED
                | ev::CONNECT_ERROR,
            ) => {
                let e = match kind {
                    ev::REJECTED => libc::ECONNREFUSED,
                    ev::ADDR_ERROR | ev::ROUTE_ERROR => libc::EHOSTUNREACH,
                    _ if status != 0 => status.abs(),
                    _ => libc::ETIMEDOUT,
                };
                self.connect_failed(e);
            }
            (_, ev::DISCONNECTED) => {
                self.cm_gone = true;
                self.cm_disconnect();
            }
            _ => {}
        }
    }

    fn connect_failed(&mut self, e: i32) {
        self.state = State::ConnectError(e);
        self.err = e;
    }

    /// Route resolved: resources, receives, and the REQ with our data.
    fn start_connect(&mut self) -> Result<(), i32> {
        let mut cfg = self.cfg;
        let ep = Ep::create(self.id, &mut cfg)?;
        self.cfg = cfg;
        let stream = Stream::new(cfg, ep.memory());
        let mine = stream.conn_data().emit();
        self.ep = Some(ep);
        self.stream = Some(stream);
        let mut p = rdma_conn_param {
            private_data: mine.as_ptr().cast(),
            private_data_len: mine.len() as u8,
            responder_resources: 0,
            initiator_depth: 0,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        };
        self.state = State::Connecting;
        // SAFETY: our live id with its QP; the private data lives across
        // the call (the CM copies it).
        if unsafe { rdma_connect(self.id, &mut p) } != 0 {
            return Err(crate::errno().max(1));
        }
        Ok(())
    }

    /// The REP's data came: connected (`rs_save_conn_data`), or refused.
    fn established(&mut self, data: &[u8]) {
        let Some(stream) = self.stream.as_mut() else { return };
        match stream.establish(data) {
            Ok(acts) => {
                self.state = State::Connected;
                let _ = self.run(acts, &[]);
            }
            Err(e) => {
                crate::diag(&format!("rsocket: the peer's connection data: {e}"));
                self.connect_failed(e.errno());
                self.cm_disconnect();
            }
        }
    }

    /// Say goodbye to the CM once.
    pub fn cm_disconnect(&mut self) {
        if !self.cm_disconnect_sent && !self.id.is_null() {
            self.cm_disconnect_sent = true;
            // SAFETY: our live id.
            unsafe { rdma_disconnect(self.id) };
        }
    }

    /// Do what the stream said. `app` is the buffer of the call.
    pub fn run(&mut self, acts: Vec<Action>, app: &[u8]) -> Result<(), i32> {
        let Some(ep) = self.ep.as_ref() else { return Ok(()) };
        let mut res = Ok(());
        let mut gone = false;
        for a in acts {
            let r = match &a {
                Action::Post(wr) => ep.post(wr, app),
                Action::PostRecv => ep.post_recv(),
                Action::Disconnected => {
                    gone = true;
                    Ok(())
                }
                Action::Arrived { .. } | Action::PeerShutdown => Ok(()),
            };
            if let Err(e) = r {
                res = Err(e);
            }
        }
        if gone {
            self.cm_disconnect();
        }
        res
    }

    /// Take the CM events and every completion there is; `Ok(true)` when
    /// something happened.
    pub fn progress(&mut self) -> Result<bool, i32> {
        let mut any = self.drive_cm();
        self.keepalive();
        loop {
            let Some(ep) = self.ep.as_mut() else { return Ok(any) };
            ep.drain_events();
            let mut wc = [ibv_wc::default(); WC_BATCH];
            let n = ep.poll(&mut wc)?;
            if n == 0 {
                return Ok(any);
            }
            any = true;
            for w in &wc[..n] {
                self.on_completion(w);
            }
        }
    }

    /// A keepalive when `SO_KEEPALIVE` is on and one is due
    /// (`tcp_svc_send_keepalive`): a 0-byte RDMA WRITE whose completion,
    /// an error when the peer is gone, is what counts.
    fn keepalive(&mut self) {
        if self.so_opts & (1 << libc::SO_KEEPALIVE) == 0 || !self.connected() {
            return;
        }
        let every = std::time::Duration::from_secs(u64::from(self.keepalive_time.max(1)));
        if self.last_keepalive.elapsed() < every {
            return;
        }
        self.last_keepalive = std::time::Instant::now();
        let (Some(ep), Some(stream)) = (self.ep.as_ref(), self.stream.as_mut()) else { return };
        if let Some(wr) = stream.keepalive() {
            let _ = ep.post(&wr, &[]);
        }
    }

    fn on_completion(&mut self, w: &ibv_wc) {
        // the peer's first message before our CM saw its RTU: the
        // connection is up (as a kernel CM takes the QP's communication
        // established event): what waited for ESTABLISHED goes first
        if self.state == State::Accepting
            && w.status == IBV_WC_SUCCESS
            && w.wr_id & roce_rsocket::consts::RECV_WR_ID != 0
        {
            crate::diag(&format!("rsocket {}: established by the peer's first message", self.fd));
            self.state = State::Connected;
            let acts = std::mem::take(&mut self.pending);
            let _ = self.run(acts, &[]);
        }
        let (Some(ep), Some(stream)) = (self.ep.as_ref(), self.stream.as_mut()) else { return };
        let ok = w.status == IBV_WC_SUCCESS;
        let r = if w.wr_id & roce_rsocket::consts::RECV_WR_ID != 0 {
            let c = RecvCompletion { imm: u32::from_be(w.imm_data), byte_len: w.byte_len, ok };
            let image = ep.target_image();
            stream.handle_recv_completion(c, &image)
        } else {
            stream.handle_send_completion(w.wr_id, ok)
        };
        match r {
            Ok(acts) => {
                let _ = self.run(acts, &[]);
            }
            Err(e) => {
                crate::diag(&format!("rsocket: {e}"));
                self.err = e.errno();
                self.cm_disconnect();
            }
        }
    }

    /// The fds to sleep on: the CM channel, and the completion channel
    /// (armed) when there are resources.
    pub fn arm(&mut self) -> (i32, Option<i32>) {
        let cm = self.fd;
        match self.ep.as_mut() {
            Some(ep) => {
                ep.arm();
                (cm, Some(ep.comp_fd()))
            }
            None => (cm, None),
        }
    }

    /// The connection is up or failed (a connecting rsocket made progress).
    pub fn connect_done(&self) -> bool {
        matches!(self.state, State::Connected | State::ConnectError(_))
    }

    /// Free everything (the rsocket is out of the table).
    pub fn destroy(&mut self) {
        for m in &mut self.iomaps {
            m.release();
        }
        self.iomaps.clear();
        if let Some(mut ep) = self.ep.take() {
            ep.destroy();
        }
        self.stream = None;
        // SAFETY: our id and channel, destroyed once, the id first.
        unsafe {
            if !self.id.is_null() {
                rdma_destroy_id(self.id);
                self.id = ptr::null_mut();
            }
            // drain what is left so the channel can go
            loop {
                let mut e = ptr::null_mut();
                if rdma_get_cm_event(self.chan, &mut e) != 0 || e.is_null() {
                    break;
                }
                rdma_ack_cm_event(e);
            }
            if !self.chan.is_null() {
                rdma_destroy_event_channel(self.chan);
                self.chan = ptr::null_mut();
            }
        }
    }
}

/// The connection data of a REQ, checked (`rs_accept` rejects a version
/// other than 1).
fn check_req(data: &[u8]) -> bool {
    ConnData::parse(data).is_ok()
}

/// A fresh rsocket state around a channel and an id.
pub(crate) fn blank(chan: *mut rdma_event_channel, id: *mut rdma_cm_id, cfg: StreamConfig) -> Rs {
    Rs {
        // SAFETY: a live channel of the CM.
        fd: unsafe { (*chan).fd },
        chan,
        id,
        state: State::Init,
        fs_flags: 0,
        fd_flags: 0,
        cfg,
        so_opts: 0,
        tcp_opts: 0,
        ipv6_opts: 0,
        keepalive_time: roce_rsocket::consts::DEF_KEEPALIVE_TIME_S,
        ep: None,
        stream: None,
        err: 0,
        accept_q: VecDeque::new(),
        pending: Vec::new(),
        cm_gone: false,
        cm_disconnect_sent: false,
        last_keepalive: std::time::Instant::now(),
        iomaps: Vec::new(),
    }
}

/// A non-blocking event channel of our own.
pub(crate) fn new_channel() -> Result<*mut rdma_event_channel, i32> {
    // SAFETY: a plain CM call.
    let chan = unsafe { rdma_create_event_channel() };
    if chan.is_null() {
        return Err(crate::errno().max(1));
    }
    // SAFETY: the channel just made.
    crate::set_nonblock(unsafe { (*chan).fd }, true);
    Ok(chan)
}

/// A connection request on `listener` (rsocket.c's `rs_accept`): the new
/// id moves to a channel of its own, gets its resources, checks the
/// peer's connection data, and is accepted with ours. Its number, or
/// `None` when it was refused. It joins the rsocket table when `raccept`
/// takes it.
pub(crate) fn accept_one(
    listener: &Rs,
    cid: *mut rdma_cm_id,
    param: rdma_conn_param,
    data: &[u8],
) -> Option<Rs> {
    let reject = |why: &str| {
        crate::diag(&format!("rsocket: connection request refused: {why}"));
        // SAFETY: the request's id, ours to refuse and destroy.
        unsafe {
            rdma_reject(cid, ptr::null(), 0);
            rdma_destroy_id(cid);
        }
        None
    };
    if !check_req(data) {
        return reject("bad connection data");
    }
    let chan = match new_channel() {
        Ok(c) => c,
        Err(_) => return reject("no channel"),
    };
    // SAFETY: the request's id and our new channel.
    if unsafe { rdma_migrate_id(cid, chan) } != 0 {
        // SAFETY: our channel, no id on it.
        unsafe { rdma_destroy_event_channel(chan) };
        return reject("migrate");
    }
    let mut rs = blank(chan, cid, listener.cfg);
    rs.fs_flags = listener.fs_flags;
    rs.fd_flags = listener.fd_flags;
    rs.so_opts = listener.so_opts;
    rs.tcp_opts = listener.tcp_opts;
    match finish_accept(&mut rs, param, data) {
        Ok(()) => Some(rs),
        Err(e) => {
            crate::diag(&format!("rsocket: accept failed: errno {e}"));
            // SAFETY: the id is ours; refuse before freeing it.
            unsafe { rdma_reject(cid, ptr::null(), 0) };
            rs.destroy();
            None
        }
    }
}

fn finish_accept(rs: &mut Rs, param: rdma_conn_param, data: &[u8]) -> Result<(), i32> {
    let mut cfg = rs.cfg;
    let ep = Ep::create(rs.id, &mut cfg)?;
    rs.cfg = cfg;
    let mut stream = Stream::new(cfg, ep.memory());
    rs.ep = Some(ep);
    let acts = stream.establish(data).map_err(|e| e.errno())?;
    let mine = stream.conn_data().emit();
    rs.stream = Some(stream);
    // the receives are posted at once (below), as rdma-core's rsocket posts
    // them before it accepts: the peer may send as soon as it has our REP,
    // before our CM sees its RTU; the rest waits for ESTABLISHED
    let (recvs, rest): (Vec<Action>, Vec<Action>) =
        acts.into_iter().partition(|a| matches!(a, Action::PostRecv));
    rs.pending = rest;
    let mut p = param;
    p.private_data = mine.as_ptr().cast();
    p.private_data_len = mine.len() as u8;
    p.srq = 0;
    p.qp_num = 0;
    rs.state = State::Accepting;
    // SAFETY: the id with its QP; the private data outlives the call.
    if unsafe { rdma_accept(rs.id, &mut p) } != 0 {
        return Err(crate::errno().max(1));
    }
    rs.run(recvs, &[])
}
