//! Executes cases: sets the agent up, plays the steps, and gives each case
//! a verdict with the packets it saw and a pcap of the exchange.

use crate::agent::{wc_status_name, Agent, AgentError, QpInfo, QpSetup, SendReq};
use crate::case::{data, Bytes, Case, Key, Post, Req, Resp, Step, Va, BACKGROUND};
use crate::wire::{describe, Received, Wire};
use roce_packet::{
    pad_for, AethRepr, AtomicAckEthRepr, AtomicEthRepr, Msn, NakCode, Opcode, Position, Psn, Qpn,
    RKey, RethRepr, RnrTimer, RoceRepr, Syndrome,
};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

mod cc;

/// A case's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The target did what the rule says.
    Pass,
    /// It did not: what was expected and what came.
    Fail(String),
    /// The target cannot be asked this (the agent said why).
    NotApplicable(String),
}

impl Verdict {
    /// `pass`, `fail` or `n/a`.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail(_) => "fail",
            Verdict::NotApplicable(_) => "n/a",
        }
    }
    /// Why (empty for a pass).
    pub fn why(&self) -> &str {
        match self {
            Verdict::Pass => "",
            Verdict::Fail(s) | Verdict::NotApplicable(s) => s,
        }
    }
}

/// One executed case.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The case.
    pub case: &'static Case,
    /// Its verdict.
    pub verdict: Verdict,
    /// Every packet of the exchange, in order (`>` sent, `<` received).
    pub packets: Vec<String>,
    /// The exchange as a pcap file.
    pub pcap: Vec<u8>,
    /// How long it took.
    pub elapsed: Duration,
}

/// How long the target has to answer a request.
const ANSWER: Duration = Duration::from_secs(2);

/// Runs cases against one agent through one wire.
pub struct Runner<'a> {
    agent: &'a mut dyn Agent,
    wire: Wire,
    next_qpn: u32,
}

impl<'a> Runner<'a> {
    /// A runner for `agent`, testing through `wire`.
    pub fn new(agent: &'a mut dyn Agent, wire: Wire) -> Runner<'a> {
        Runner { agent, wire, next_qpn: 0x00c0_0000 }
    }

    /// Run one case.
    pub fn run(&mut self, case: &'static Case) -> Outcome {
        let start = Instant::now();
        // every case talks to the target from a QPN of its own, so late
        // packets of an earlier case are not taken for answers
        self.next_qpn += 1;
        self.wire.reset(self.next_qpn);
        let mut x = Exec {
            agent: &mut *self.agent,
            wire: &mut self.wire,
            setup: None,
            qp: QpInfo { qpn: 0, mr_addr: 0, rkey: 0, mw_rkey: 0, srqn: 0 },
            tqpn: self.next_qpn,
            packets: Vec::new(),
            last_at: None,
            last_req: None,
            last_post: None,
            msn: 0,
            wr_id: 0,
            cnps: Vec::new(),
            cnps_checked: 0,
            held: VecDeque::new(),
            last_tos: None,
        };
        let verdict = match x.play(case) {
            Ok(()) => Verdict::Pass,
            Err(Stop::Fail(s)) => Verdict::Fail(s),
            Err(Stop::NotApplicable(s)) => Verdict::NotApplicable(s),
        };
        let packets = std::mem::take(&mut x.packets);
        let _ = self.agent.teardown();
        Outcome { case, verdict, packets, pcap: self.wire.pcap(), elapsed: start.elapsed() }
    }
}

enum Stop {
    Fail(String),
    NotApplicable(String),
}

impl From<AgentError> for Stop {
    fn from(e: AgentError) -> Stop {
        match e {
            AgentError::Unsupported(s) => Stop::NotApplicable(s),
            e => Stop::Fail(e.to_string()),
        }
    }
}

fn fail<T>(s: String) -> Result<T, Stop> {
    Err(Stop::Fail(s))
}

struct Exec<'r> {
    agent: &'r mut dyn Agent,
    wire: &'r mut Wire,
    setup: Option<QpSetup>,
    qp: QpInfo,
    /// The tester's QPN in this case.
    tqpn: u32,
    packets: Vec<String>,
    /// When the target's last request arrived.
    last_at: Option<Duration>,
    /// The target's last request, and the last work request posted.
    last_req: Option<RoceRepr>,
    last_post: Option<Post>,
    msn: u32,
    wr_id: u64,
    /// The CNPs that came to the tester's QP in this case (never taken
    /// for answers or requests).
    cnps: Vec<Received>,
    /// How many of them earlier [`Step::Cnps`] took.
    cnps_checked: usize,
    /// Packets taken off the wire while waiting for CNPs, for the steps
    /// after.
    held: VecDeque<Received>,
    /// The IP TOS of the target's latest packet that was not a CNP (`None`
    /// inside: the kernel did not say), and what that packet was.
    last_tos: Option<(Option<u8>, String)>,
}

/// An ACK (an XRC target's: XRC ACKNOWLEDGE, 0xB1).
fn is_ack(r: &RoceRepr, xrc: bool) -> bool {
    let op = if xrc { Opcode(0xB1) } else { Opcode::RC_ACKNOWLEDGE };
    r.bth.opcode == op && matches!(r.aeth.map(|a| a.syndrome), Some(Syndrome::Ack { .. }))
}

impl Exec<'_> {
    fn s(&self) -> crate::agent::QpParams {
        self.setup.expect("set up before the steps").params
    }

    fn rq(&self, rel: i32) -> Psn {
        Psn::new(self.s().rq_psn).add(rel as u32)
    }

    fn sq(&self, rel: i32) -> Psn {
        Psn::new(self.s().sq_psn).add(rel as u32)
    }

    fn play(&mut self, case: &Case) -> Result<(), Stop> {
        let s = QpSetup { params: case.setup, peer: self.wire.addr(), peer_qpn: self.tqpn };
        self.qp = self.agent.setup(&s)?;
        self.setup = Some(s);
        self.agent.write(0, &data(BACKGROUND, 0, case.setup.mr_len))?;
        for (i, step) in case.steps.iter().enumerate() {
            self.step(step).map_err(|e| match e {
                Stop::Fail(s) => Stop::Fail(format!("step {} ({step:?}): {s}", i + 1)),
                n => n,
            })?;
        }
        Ok(())
    }

    fn step(&mut self, step: &Step) -> Result<(), Stop> {
        match *step {
            Step::PostRecv { off, len } => {
                self.wr_id += 1;
                self.agent.post_recv(self.wr_id, off, len)?;
            }
            Step::Send(r) => self.send(&r)?,
            Step::Sleep(ms) => std::thread::sleep(Duration::from_millis(ms.into())),
            Step::Ack(_)
            | Step::Nak(..)
            | Step::RnrNak(_)
            | Step::ReadResp { .. }
            | Step::AtomicAck(..)
            | Step::Quiet(_) => self.expect_answer(step)?,
            Step::Completion(_)
            | Step::CompletionLen(..)
            | Step::CompletionImm(..)
            | Step::NoCompletion
            | Step::State(_)
            | Step::Mem { .. } => self.check_agent(step)?,
            Step::Request(..)
            | Step::Retransmit { .. }
            | Step::ReqImm(_)
            | Step::ReqReth { .. }
            | Step::PostRefused(_)
            | Step::Modify(_)
            | Step::Respond(_)
            | Step::Post(_) => self.as_responder(step)?,
            Step::Burst { .. } | Step::Cnps { .. } | Step::SendCnp | Step::Ect => {
                self.congestion(step)?
            }
        }
        Ok(())
    }

    /// The target's answers to the tester's requests.
    fn expect_answer(&mut self, step: &Step) -> Result<(), Stop> {
        match *step {
            Step::Ack(rel) => {
                let want = self.rq(rel);
                let p = self.answer(want)?;
                if !(is_ack(&p.repr, self.s().service == crate::agent::Service::Xrc)
                    && p.repr.bth.psn == want)
                {
                    return fail(format!(
                        "expected ACK psn={:#x}, got {}",
                        want.value(),
                        describe(&p.repr)
                    ));
                }
            }
            Step::Nak(rel, code) => {
                let want = self.rq(rel);
                let p = self.answer(want)?;
                let got = p.repr.aeth.map(|a| a.syndrome);
                if !(got == Some(Syndrome::Nak(code)) && p.repr.bth.psn == want) {
                    return fail(format!(
                        "expected NAK({code:?}) psn={:#x}, got {}",
                        want.value(),
                        describe(&p.repr)
                    ));
                }
            }
            Step::RnrNak(rel) => {
                let want = self.rq(rel);
                let p = self.answer(want)?;
                match p.repr.aeth.map(|a| a.syndrome) {
                    Some(Syndrome::RnrNak(t)) if p.repr.bth.psn == want => {
                        if t.code() != self.s().min_rnr_timer {
                            return fail(format!(
                                "RNR NAK timer code {}, the QP's min_rnr_timer is {}",
                                t.code(),
                                self.s().min_rnr_timer
                            ));
                        }
                    }
                    _ => {
                        return fail(format!(
                            "expected RNR NAK psn={:#x}, got {}",
                            want.value(),
                            describe(&p.repr)
                        ))
                    }
                }
            }
            Step::ReadResp { psn, off, len } => self.read_responses(psn, off, len)?,
            Step::AtomicAck(rel, orig) => {
                let want = self.rq(rel);
                let p = self.answer(want)?;
                let got = p.repr.atomic_ack_eth.map(|a| a.orig_rem_data);
                if !(p.repr.bth.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE
                    && p.repr.bth.psn == want
                    && got == Some(orig))
                {
                    return fail(format!(
                        "expected ATOMIC ACK psn={:#x} orig={orig:#x}, got {} orig={got:x?}",
                        want.value(),
                        describe(&p.repr)
                    ));
                }
            }
            Step::Quiet(ms) => {
                let cnps = self.cnps.len();
                if let Some(p) = self.next(Duration::from_millis(ms.into()))? {
                    return fail(format!(
                        "expected nothing for {ms} ms, got {}",
                        describe(&p.repr)
                    ));
                }
                if self.cnps.len() > cnps {
                    return fail(format!("expected nothing for {ms} ms, got a CNP"));
                }
            }
            _ => unreachable!("{step:?} is not a step of this kind"),
        }
        Ok(())
    }

    /// What the agent reports: completions, QP state, region bytes.
    fn check_agent(&mut self, step: &Step) -> Result<(), Stop> {
        match *step {
            Step::Completion(status) => {
                self.completion(status, None)?;
            }
            Step::CompletionLen(status, len) => {
                self.completion(status, Some(len))?;
            }
            Step::CompletionImm(status, len, imm) => {
                if let Some(got) = self.completion(status, Some(len))? {
                    if got != imm {
                        return fail(format!("completion immediate {got:#x}, expected {imm:#x}"));
                    }
                } else {
                    return fail(format!("completion without immediate, expected {imm:#x}"));
                }
            }
            Step::NoCompletion => {
                let got = self.agent.poll(1, Duration::from_millis(100))?;
                if let Some(c) = got.first() {
                    return fail(format!(
                        "expected no completion, got {}",
                        wc_status_name(c.status)
                    ));
                }
            }
            Step::State(want) => {
                let end = Instant::now() + Duration::from_secs(1);
                loop {
                    let got = self.agent.qp_state()?;
                    if got == want {
                        break;
                    }
                    if Instant::now() >= end {
                        return fail(format!("QP state {got:?}, expected {want:?}"));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            Step::Mem { off, len, want } => {
                let got = self.agent.read(off, len)?;
                let exp = match want {
                    Bytes::Untouched => data(BACKGROUND, off as u32, len),
                    Bytes::Data { salt, msg_off } => data(salt, msg_off, len),
                    Bytes::U64(v) => v.to_le_bytes().to_vec(),
                    Bytes::GrhV4 => return self.grh_v4(&got),
                };
                if let Some(i) = (0..got.len().max(exp.len())).find(|&i| got.get(i) != exp.get(i)) {
                    return fail(format!(
                        "region byte {} is {:02x?}, expected {:02x?} ({want:?})",
                        off + i as u64,
                        got.get(i),
                        exp.get(i)
                    ));
                }
            }
            _ => unreachable!("{step:?} is not a step of this kind"),
        }
        Ok(())
    }

    /// The tester as responder to the target's requests.
    fn as_responder(&mut self, step: &Step) -> Result<(), Stop> {
        match *step {
            Step::Post(p) => self.post(&p)?,
            Step::PostRefused(p) => {
                let wr = self.work_request(&p);
                match self.agent.post_send(&wr) {
                    Err(AgentError::Verb(_)) => {}
                    Ok(()) => return fail("the device took the work request".into()),
                    Err(e) => return Err(e.into()),
                }
            }
            Step::Modify(s) => self.agent.modify_qp(s)?,
            Step::ReqImm(imm) => {
                let got = self.last_req.as_ref().and_then(|r| r.immdt);
                if got != Some(imm) {
                    return fail(format!("request immediate {got:x?}, expected {imm:#x}"));
                }
            }
            Step::ReqReth { off, len } => {
                let base = self.last_post.map(|p| p.remote_addr).unwrap_or(0);
                let got = self.last_req.as_ref().and_then(|r| r.reth);
                let ok = got.is_some_and(|t| t.va == base.wrapping_add(off) && t.dma_len == len);
                if !ok {
                    return fail(format!(
                        "request RETH {got:x?}, expected va={:#x} dma_len={len}",
                        base.wrapping_add(off)
                    ));
                }
            }
            Step::Request(op, rel) => {
                let want = self.sq(rel);
                let p = self.request(ANSWER)?;
                if !(p.repr.bth.opcode == op && p.repr.bth.psn == want) {
                    return fail(format!(
                        "expected {op:?} psn={:#x}, got {}",
                        want.value(),
                        describe(&p.repr)
                    ));
                }
            }
            Step::Retransmit { op, psn, min_ms, max_ms } => {
                let want = self.sq(psn);
                let before = self.last_at.unwrap_or_default();
                let p = self.request(Duration::from_millis(u64::from(max_ms) + 1000))?;
                let dt = p.at.saturating_sub(before);
                if !(p.repr.bth.opcode == op && p.repr.bth.psn == want) {
                    return fail(format!(
                        "expected {op:?} psn={:#x} again, got {}",
                        want.value(),
                        describe(&p.repr)
                    ));
                }
                let ms = dt.as_secs_f64() * 1e3;
                if ms < f64::from(min_ms) || ms > f64::from(max_ms) {
                    return fail(format!(
                        "retransmitted after {ms:.1} ms, expected {min_ms}..{max_ms} ms"
                    ));
                }
            }
            Step::Respond(r) => self.respond(&r)?,
            _ => unreachable!("{step:?} is not a step of this kind"),
        }
        Ok(())
    }

    /// The next packet to the tester's QP, if one comes within `wait`
    /// (one held by an earlier step first). CNPs are not answers: they
    /// are kept aside ([`Step::Cnps`] checks them).
    fn next(&mut self, wait: Duration) -> Result<Option<Received>, Stop> {
        if let Some(p) = self.held.pop_front() {
            return Ok(Some(p));
        }
        self.take(wait)
    }

    /// [`Exec::next`] from the wire only.
    fn take(&mut self, wait: Duration) -> Result<Option<Received>, Stop> {
        let end = Instant::now() + wait;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let Some(p) = self.wire.recv(left).map_err(|e| Stop::Fail(format!("receive: {e}")))?
            else {
                return Ok(None);
            };
            if p.repr.bth.dest_qp.value() != self.tqpn {
                continue;
            }
            self.packets.push(format!(
                "< {:>8.3} ms {}",
                p.at.as_secs_f64() * 1e3,
                describe(&p.repr)
            ));
            if p.repr.bth.opcode == Opcode::CNP {
                self.cnps.push(p);
                continue;
            }
            self.last_tos = Some((p.tos, describe(&p.repr)));
            return Ok(Some(p));
        }
    }

    /// The target's answer concerning `want`: positive ACKs of earlier
    /// PSNs (a device that acknowledges every request sends them) are
    /// skipped.
    fn answer(&mut self, want: Psn) -> Result<Received, Stop> {
        loop {
            let Some(p) = self.next(ANSWER)? else {
                return fail(format!("no answer within {} s", ANSWER.as_secs()));
            };
            if is_ack(&p.repr, self.s().service == crate::agent::Service::Xrc)
                && p.repr.bth.psn.is_before(want)
            {
                continue;
            }
            return Ok(p);
        }
    }

    /// The target's next request; every one is held to C9-22 (a FIRST or
    /// MIDDLE packet carries exactly the path MTU, no packet more).
    fn request(&mut self, wait: Duration) -> Result<Received, Stop> {
        let Some(p) = self.next(wait)? else {
            return fail(format!("no request within {} ms", wait.as_millis()));
        };
        self.last_at = Some(p.at);
        self.last_req = Some(p.repr);
        let mtu = self.s().mtu as usize;
        if let Ok(info) = p.repr.info() {
            let exact = matches!(info.position, Position::First | Position::Middle);
            if p.payload.len() > mtu || (exact && p.payload.len() != mtu) {
                return fail(format!(
                    "{} carries {} bytes at path MTU {mtu} (C9-22)",
                    describe(&p.repr),
                    p.payload.len()
                ));
            }
        }
        Ok(p)
    }

    /// The next completion, checked; its immediate value, if any.
    fn completion(&mut self, status: u32, len: Option<u32>) -> Result<Option<u32>, Stop> {
        let got = self.agent.poll(1, Duration::from_secs(3))?;
        let Some(c) = got.first() else {
            return fail(format!("no completion within 3 s (expected {})", wc_status_name(status)));
        };
        if c.status != status {
            return fail(format!(
                "completion {}, expected {}",
                wc_status_name(c.status),
                wc_status_name(status)
            ));
        }
        if let Some(l) = len.filter(|&l| l != c.byte_len) {
            return fail(format!("completion of {} bytes, expected {l}", c.byte_len));
        }
        Ok(c.imm)
    }

    /// A UD receive's GRH area for an IPv4 sender: 20 bytes the device
    /// may leave as they are, then an IPv4 header (version 4, 20 bytes)
    /// from the tester to the target.
    fn grh_v4(&self, got: &[u8]) -> Result<(), Stop> {
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (self.wire.addr(), self.agent.addr()) else {
            return Err(Stop::NotApplicable("the GRH check is for IPv4 addresses".into()));
        };
        let ip = got.get(20..40).unwrap_or_default();
        if ip.len() != 20
            || ip[0] != 0x45
            || ip[12..16] != src.octets()
            || ip[16..20] != dst.octets()
        {
            return fail(format!(
                "GRH area bytes 20..40 {ip:02x?} are not an IPv4 header {src} -> {dst}"
            ));
        }
        Ok(())
    }

    fn va(&self, v: Va) -> u64 {
        match v {
            Va::Off(o) => self.qp.mr_addr.wrapping_add(o),
            Va::Before(n) => self.qp.mr_addr.wrapping_sub(n),
            Va::Abs(a) => a,
        }
    }

    fn key(&self, k: Key) -> RKey {
        RKey::new(match k {
            Key::Good => self.qp.rkey,
            Key::WrongKey => self.qp.rkey ^ 0x5A,
            Key::WrongIndex => self.qp.rkey ^ 0x003F_0000,
            Key::Window => self.qp.mw_rkey,
        })
    }

    fn send(&mut self, r: &Req) -> Result<(), Stop> {
        let (h, payload) = self.request_packet(r);
        let group = r.to_group.then(|| crate::agent::case_group(self.agent.addr()));
        self.emit_to(&h, &payload, r.bad_icrc, group, r.tos)
    }

    /// The headers and payload of the crafted request `r`.
    fn request_packet(&self, r: &Req) -> (RoceRepr, Vec<u8>) {
        let payload = data(r.salt, r.msg_off, r.len);
        let mut h = RoceRepr::default();
        h.bth.opcode = r.op;
        h.bth.dest_qp = Qpn::new(r.dest_qp.unwrap_or(self.qp.qpn));
        h.bth.psn = self.rq(r.psn);
        h.bth.ack_req = r.ack_req;
        h.bth.pad_count = r.pad.unwrap_or(pad_for(payload.len()));
        h.bth.tver = r.tver.unwrap_or(0);
        if let Some(k) = r.pkey {
            h.bth.pkey = roce_packet::PKey::new(k);
        }
        h.bth.fecn = r.ecn;
        h.bth.becn = r.ecn;
        h.reth = r.reth.map(|x| RethRepr {
            va: self.va(x.va),
            rkey: self.key(x.key),
            dma_len: x.dma_len,
        });
        h.atomic_eth = r.atomic.map(|a| AtomicEthRepr {
            va: self.va(a.va),
            rkey: self.key(a.key),
            swap_add: a.swap_add,
            compare: a.compare,
        });
        h.immdt = r.imm;
        h.feth = r.feth;
        if r.op.info().is_some_and(|i| i.headers.contains(roce_packet::ExtHeader::Xrceth)) {
            h.xrceth = Some(r.xrc_srq.unwrap_or(self.qp.srqn));
        }
        h.ieth = r.ieth.map(|k| self.key(k));
        if matches!(r.op, Opcode::UD_SEND_ONLY | Opcode::UD_SEND_ONLY_WITH_IMMEDIATE) {
            h.deth = Some(roce_packet::DethRepr {
                qkey: roce_packet::QKey::new(r.qkey.unwrap_or(self.s().qkey)),
                src_qp: Qpn::new(self.tqpn),
                resv8: 0,
            });
        }
        h.payload_len = payload.len();
        (h, payload)
    }

    fn emit(&mut self, h: &RoceRepr, payload: &[u8], bad_icrc: bool) -> Result<(), Stop> {
        self.emit_to(h, payload, bad_icrc, None, 0)
    }

    /// [`Exec::emit`] to the target, or to the multicast group `group`,
    /// with IP TOS `tos`.
    fn emit_to(
        &mut self,
        h: &RoceRepr,
        payload: &[u8],
        bad_icrc: bool,
        group: Option<std::net::IpAddr>,
        tos: u8,
    ) -> Result<(), Stop> {
        self.wire.set_tos(tos).map_err(|e| Stop::Fail(format!("IP_TOS {tos:#04x}: {e}")))?;
        match group {
            None => self.wire.send(h, payload, bad_icrc),
            Some(g) => self.wire.send_to_group(h, payload, bad_icrc, g),
        }
        .map_err(|e| Stop::Fail(format!("send {}: {e}", describe(h))))?;
        self.log_sent(h, bad_icrc, tos);
        Ok(())
    }

    /// A line in the case's packet list for `h`, just sent.
    fn log_sent(&mut self, h: &RoceRepr, bad_icrc: bool, tos: u8) {
        let at = self.wire.elapsed().as_secs_f64() * 1e3;
        self.packets.push(format!(
            "> {:>8.3} ms {}{}{}",
            at,
            describe(h),
            if bad_icrc { " (bad ICRC)" } else { "" },
            if tos & 3 == crate::case::CE { " (CE)" } else { "" }
        ));
    }

    fn read_responses(&mut self, psn: i32, off: u64, len: u32) -> Result<(), Stop> {
        let mtu = self.s().mtu;
        let n = len.div_ceil(mtu).max(1);
        let want_bytes = self.agent.read(off, len)?;
        let mut got = Vec::new();
        for k in 0..n {
            let want = self.rq(psn).add(k);
            let p = self.answer(want)?;
            let op = match (n, k) {
                (1, _) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                (_, 0) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                (n, k) if k == n - 1 => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                _ => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            };
            if p.repr.bth.opcode != op || p.repr.bth.psn != want {
                return fail(format!(
                    "expected {op:?} psn={:#x}, got {}",
                    want.value(),
                    describe(&p.repr)
                ));
            }
            got.extend_from_slice(&p.payload);
        }
        if got != want_bytes {
            return fail(format!(
                "READ returned {} bytes that differ from the region's {}",
                got.len(),
                want_bytes.len()
            ));
        }
        Ok(())
    }

    fn post(&mut self, p: &Post) -> Result<(), Stop> {
        let wr = self.work_request(p);
        Ok(self.agent.post_send(&wr)?)
    }

    /// The next work request, for `p`.
    fn work_request(&mut self, p: &Post) -> SendReq {
        self.wr_id += 1;
        self.last_post = Some(*p);
        SendReq {
            wr_id: self.wr_id,
            opcode: p.opcode,
            offset: p.off,
            len: p.len,
            remote_addr: p.remote_addr,
            rkey: p.rkey,
            imm: p.imm,
            compare_add: p.compare_add,
            swap: p.swap,
            fence: p.fence,
        }
    }

    fn response(&self, op: Opcode, rel: i32, syndrome: Option<Syndrome>) -> RoceRepr {
        let mut h = RoceRepr::default();
        h.bth.opcode = op;
        h.bth.dest_qp = Qpn::new(self.qp.qpn);
        h.bth.psn = self.sq(rel);
        h.bth.ack_req = false;
        h.aeth = syndrome.map(|syndrome| AethRepr { syndrome, msn: Msn::new(self.msn) });
        h
    }

    fn respond(&mut self, r: &Resp) -> Result<(), Stop> {
        match *r {
            Resp::Ack(rel) => {
                self.msn += 1;
                let h =
                    self.response(Opcode::RC_ACKNOWLEDGE, rel, Some(Syndrome::Ack { credit: 31 }));
                self.emit(&h, &[], false)
            }
            Resp::Nak(rel, code) => {
                let h = self.response(Opcode::RC_ACKNOWLEDGE, rel, Some(Syndrome::Nak(code)));
                self.emit(&h, &[], false)
            }
            Resp::RnrNak(rel, t) => {
                let h = self.response(
                    Opcode::RC_ACKNOWLEDGE,
                    rel,
                    Some(Syndrome::RnrNak(RnrTimer::new(t))),
                );
                self.emit(&h, &[], false)
            }
            Resp::AtomicAck(rel, orig) => {
                self.msn += 1;
                let mut h = self.response(
                    Opcode::RC_ATOMIC_ACKNOWLEDGE,
                    rel,
                    Some(Syndrome::Ack { credit: 31 }),
                );
                h.atomic_ack_eth = Some(AtomicAckEthRepr { orig_rem_data: orig });
                self.emit(&h, &[], false)
            }
            Resp::Read { psn, len, salt, msg_off, skip, only } => {
                let mtu = self.s().mtu;
                let n = len.div_ceil(mtu).max(1);
                let end = only.map_or(n, |o| (skip + o).min(n));
                for k in skip..end {
                    let (op, aeth) = match (n, k) {
                        (1, _) => (Opcode::RC_RDMA_READ_RESPONSE_ONLY, true),
                        (_, 0) => (Opcode::RC_RDMA_READ_RESPONSE_FIRST, true),
                        (n, k) if k == n - 1 => (Opcode::RC_RDMA_READ_RESPONSE_LAST, true),
                        _ => (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, false),
                    };
                    if k == n - 1 {
                        self.msn += 1;
                    }
                    let mut h = self.response(
                        op,
                        psn + k as i32,
                        aeth.then_some(Syndrome::Ack { credit: 31 }),
                    );
                    let chunk = data(salt, msg_off + k * mtu, (len - k * mtu).min(mtu));
                    h.payload_len = chunk.len();
                    h.bth.pad_count = pad_for(chunk.len());
                    self.emit(&h, &chunk, false)?;
                }
                Ok(())
            }
        }
    }
}

/// Names of NAK codes as IBA table 43 calls them.
pub fn nak_name(c: NakCode) -> &'static str {
    match c {
        NakCode::PsnSequenceError => "PSN sequence error",
        NakCode::InvalidRequest => "invalid request",
        NakCode::RemoteAccessError => "remote access error",
        NakCode::RemoteOperationalError => "remote operational error",
        NakCode::InvalidRdRequest => "invalid RD request",
        NakCode::Reserved(_) => "reserved",
    }
}
