//! The lessons of `roce demo --scenario NAME` (the lab they run in: `lab.rs`; the runner: `lesson.rs`).
//! Every scenario is deterministic for a seed: fixed QPNs, PSNs, sizes and
//! targeted faults (a filter on the simulated fabric), so docs/course can
//! show their real output and a test re-runs them.

use super::lab::{End, Lab, PairSpec, Scenario, STEP_EVENTS};
use crate::pattern::Pattern;
use roce_emulator::{MwBind, MwType};
use roce_packet::Opcode;
use roce_sim::{Filter, Match};
use roce_verbs_api::{
    AccessFlags, PathMtu, QpAttr, QpState, QpType, RKey, RecvWr, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
use std::net::IpAddr;

/// Every scenario, in course order.
pub const SCENARIOS: &[Scenario] = &[
    Scenario { name: "qp-states", about: "the objects, and one QP walked RESET->INIT->RTR->RTS->SQD->RTS->ERR with two refused transitions", run: qp_states },
    Scenario { name: "send", about: "SEND/RECV: a 100-byte SEND and a 2500-byte SEND with immediate data into posted receives", run: send },
    Scenario { name: "write", about: "one 2500-byte RDMA WRITE, then an RDMA WRITE WITH IMMEDIATE that consumes a receive", run: write },
    Scenario { name: "read", about: "one 2500-byte RDMA READ: one request, three response packets", run: read },
    Scenario { name: "atomic", about: "CMP_AND_SWP (hit, then miss) and FETCH_AND_ADD on a remote 8-byte word", run: atomic },
    Scenario { name: "ack-coalescing", about: "a 100-packet WRITE: AckReq only every 64 packets and on the last, one ACK each", run: ack_coalescing },
    Scenario { name: "lost-packet", about: "the 2nd packet of a 4-packet WRITE is lost: PSN sequence NAK, go-back-N", run: lost_packet },
    Scenario { name: "lost-ack", about: "the only ACK of a WRITE is lost: retransmit timeout, duplicate, ACK again", run: lost_ack },
    Scenario { name: "rnr", about: "a SEND arrives before its receive is posted: RNR NAK, wait, retry", run: rnr },
    Scenario { name: "rnr-exceeded", about: "no receive is ever posted and rnr_retry=1: RNR_RETRY_EXC_ERR, then WR_FLUSH_ERR", run: rnr_exceeded },
    Scenario { name: "retry-exceeded", about: "every ACK is lost and retry_cnt=2: three timeouts, RETRY_EXC_ERR", run: retry_exceeded },
    Scenario { name: "uc", about: "UC: a message that loses a packet is dropped silently, the next one arrives", run: uc },
    Scenario { name: "ud", about: "UD: datagrams with a DETH, one with a wrong Q_Key dropped; the 40-byte GRH area", run: ud },
    Scenario { name: "srq", about: "two QPs share one receive queue (SRQ); its limit event fires", run: srq },
    Scenario { name: "mw", about: "a type 2 memory window: bind, remote WRITE through it, invalidate, WRITE refused", run: mw },
    Scenario { name: "multicast", about: "UD multicast: three devices join 239.1.1.1, one datagram to QPN 0xffffff reaches each; one leaves, the next reaches two", run: multicast },
    Scenario { name: "xrc", about: "XRC: one initiator QP, one target QP, two XRC SRQs picked by the XRCETH; an SRQ of another domain is NAKed", run: xrc },
    Scenario { name: "wc-errors", about: "one cause for each error completion status, each on a fresh QP pair", run: wc_errors },
    Scenario { name: "wrong-gid", about: "the peer's GID (address) is wrong: requests go nowhere, RETRY_EXC_ERR", run: wrong_gid },
    Scenario { name: "mtu-mismatch", about: "requester path MTU 4096, responder 1024: NAK invalid request", run: mtu_mismatch },
    Scenario { name: "mtu-blackhole", about: "path MTU 4096 over a 1500-byte link: small messages work, large ones RETRY_EXC_ERR", run: mtu_blackhole },
];

/// Active port MTU and link MTU of a scenario's fabric.
pub fn fabric_of(name: &str) -> (PathMtu, usize) {
    match name {
        "mtu-mismatch" => (PathMtu::Mtu4096, 9000),
        "mtu-blackhole" => (PathMtu::Mtu4096, 1500),
        _ => (PathMtu::Mtu1024, 9000),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
}

/// A description of a send WR for the transcript.
fn describe(wr: &SendWr) -> String {
    let len = wr.length();
    let remote = format!("remote_addr={:#x} rkey={}", wr.remote_addr, wr.rkey);
    match wr.opcode {
        WrOpcode::Send => format!("SEND {len} B"),
        WrOpcode::SendWithImm => format!("SEND_WITH_IMM {len} B imm={:#x}", wr.imm),
        WrOpcode::RdmaWrite => format!("RDMA_WRITE {len} B -> {remote}"),
        WrOpcode::RdmaWriteWithImm => {
            format!("RDMA_WRITE_WITH_IMM {len} B imm={:#x} -> {remote}", wr.imm)
        }
        WrOpcode::RdmaRead => format!("RDMA_READ {len} B <- {remote}"),
        WrOpcode::AtomicCmpAndSwp => {
            format!("ATOMIC_CMP_AND_SWP compare={} swap={} at {remote}", wr.compare_add, wr.swap)
        }
        WrOpcode::AtomicFetchAndAdd => {
            format!("ATOMIC_FETCH_AND_ADD add={} at {remote}", wr.compare_add)
        }
        WrOpcode::LocalInv { rkey } => format!("LOCAL_INV rkey={rkey}"),
        WrOpcode::BindMw { rkey, bind, .. } => format!(
            "BIND_MW new rkey={rkey} addr={:#x} length={} {}",
            bind.addr,
            bind.length,
            bind.access.names().join("|")
        ),
        other => format!("{other:?} {len} B"),
    }
}

/// `ibv_post_send`, printed; an error is printed too (and returned).
fn post(lab: &mut Lab, e: &End, wr: SendWr) -> bool {
    let d = format!("post_send  wr_id={} {}", wr.wr_id, describe(&wr));
    lab.say(&e.who(), d);
    match e.qp.post_send(wr) {
        Ok(()) => true,
        Err(err) => {
            lab.say(&e.who(), format!("post_send failed: {err}"));
            false
        }
    }
}

/// `ibv_post_recv` of `len` bytes at `offset` of the end's region, printed.
fn post_recv(lab: &mut Lab, e: &End, wr_id: u64, offset: u64, len: u32) {
    lab.say(&e.who(), format!("post_recv  wr_id={wr_id} {len} B buffer"));
    if let Err(err) = e.qp.post_recv(RecvWr::new(wr_id, e.mr.addr() + offset, len, e.mr.lkey())) {
        lab.say(&e.who(), format!("post_recv failed: {err}"));
    }
}

/// A WR of `len` bytes from the start of `from`'s region to `to`'s region at `at`.
fn rdma(wr_id: u64, op: WrOpcode, from: &End, len: u32, to: &End, at: u64) -> SendWr {
    SendWr::new(wr_id, op)
        .sge(from.mr.addr(), len, from.mr.lkey())
        .remote(to.mr.remote_addr(at), to.mr.rkey())
}

fn send_wr(wr_id: u64, from: &End, len: u32) -> SendWr {
    SendWr::new(wr_id, WrOpcode::Send).sge(from.mr.addr(), len, from.mr.lkey())
}

/// The bytes a scenario moves: the first `len` of the [`Pattern`] of `seed`.
fn pattern(seed: u32, len: usize) -> Vec<u8> {
    Pattern::new(seed).bytes(0, len)
}

fn region(e: &End, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let _ = e.mr.read(off, &mut v);
    v
}

/// The statuses of `wcs` in order.
/// Run the fabric a step and expect one completion: wr_id 1 with `status`.
fn expect_one(lab: &mut Lab, status: WcStatus, what: &str) {
    let w = lab.run(STEP_EVENTS);
    lab.expect(statuses(&w) == vec![(1, status)], what);
}

/// A key that is not the region's: its key byte and index bits flipped.
fn wrong_key(key: u32) -> u32 {
    key ^ 0x5500
}

/// An 8-byte RDMA WRITE (wr_id 1) from `a` to `b` with a wrong rkey.
fn write_with_wrong_rkey(a: &End, b: &End) -> SendWr {
    SendWr::new(1, WrOpcode::RdmaWrite)
        .sge(a.mr.addr(), 8, a.mr.lkey())
        .remote(b.mr.remote_addr(0), RKey::new(wrong_key(b.mr.rkey().value())))
}

fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// The statuses of the completions of `e`'s device's QP.
fn statuses_of(wcs: &[WorkCompletion], e: &End) -> Vec<(u64, WcStatus)> {
    let mine: Vec<WorkCompletion> = wcs.iter().filter(|w| w.qp_num == e.ep.qpn).copied().collect();
    statuses(&mine)
}

fn counter(e: &End, name: &str) -> u64 {
    e.ctx.counters().get(name).unwrap_or(0)
}

fn add_filter(lab: &Lab, f: Filter) {
    lab.net.with_fabric(|fab| {
        fab.add_filter(f);
    });
}

fn mtu(m: PathMtu) -> roce_verbs_api::ConnectOptions {
    roce_verbs_api::ConnectOptions { mtu: m, ..Default::default() }
}

// ---------------------------------------------------------------- chapter 2

fn qp_states(lab: &mut Lab) -> Result<(), String> {
    let ctx = lab.a.clone();
    let attr = ctx.query_device();
    lab.say(
        "roce0",
        format!(
            "open device 10.0.0.1: GID[0] {} (link-local), GID[1] {} (RoCEv2), max_qp {}, max_mr_size {}, max_qp_wr {}",
            ctx.query_gid(0).map(|g| g.to_string()).unwrap_or_default(),
            ctx.query_gid(1).map(|g| g.to_string()).unwrap_or_default(),
            attr.max_qp,
            attr.max_mr_size,
            attr.max_qp_wr
        ),
    );
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    lab.say("roce0", "alloc_pd   -> PD (QPs and MRs must share it to work together)");
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = pd.reg_mr(4096, access).map_err(|e| e.to_string())?;
    lab.say(
        "roce0",
        format!(
            "reg_mr     4096 B {} -> addr={:#x} lkey={} rkey={}",
            access.names().join("|"),
            mr.addr(),
            mr.lkey(),
            mr.rkey()
        ),
    );
    let cq = ctx.create_cq(16).map_err(|e| e.to_string())?;
    lab.say("roce0", format!("create_cq  16 entries -> CQ (depth {})", cq.depth()));
    let qp = pd.qp_builder(&cq, &cq).build().map_err(|e| e.to_string())?;
    let who = format!("roce0 QP {:#x}", qp.qpn().value());
    lab.watch(&who, &cq);
    lab.say(
        &who,
        format!(
            "create_qp  RC, send CQ = recv CQ -> QPN {:#x}, state {}",
            qp.qpn().value(),
            qp.state()
        ),
    );
    let try_modify = |lab: &mut Lab, what: &str, attr: QpAttr| -> bool {
        let before = qp.state();
        match qp.modify(&attr) {
            Ok(()) => {
                lab.say(&who, format!("modify_qp  {before} -> {} ({what})", qp.state()));
                true
            }
            Err(e) => {
                lab.say(&who, format!("modify_qp  {what}: REFUSED: {e}"));
                false
            }
        }
    };
    let r = try_modify(lab, "straight to RTS", QpAttr::new().state(QpState::Rts).sq_psn(0x100));
    lab.expect(!r, "RESET -> RTS must be refused");
    let r = try_modify(
        lab,
        "pkey_index, port, access",
        QpAttr::new().state(QpState::Init).pkey_index(0).port(1).access_flags(access),
    );
    lab.expect(r, "RESET -> INIT");
    // a send before the QP can send
    let wr = SendWr::new(1, WrOpcode::Send).sge(mr.addr(), 8, mr.lkey());
    match qp.post_send(wr) {
        Ok(()) => lab.expect(false, "post_send in INIT must fail"),
        Err(e) => lab.say(&who, format!("post_send  wr_id=1 SEND 8 B: REFUSED: {e}")),
    }
    let r = try_modify(lab, "only the new state", QpAttr::new().state(QpState::Rtr));
    lab.expect(!r, "INIT -> RTR without attributes must be refused");
    let peer = ip("10.0.0.2");
    let r = try_modify(
        lab,
        "peer address, path MTU, dest QPN, rq_psn, ...",
        QpAttr::new()
            .state(QpState::Rtr)
            .ah(roce_verbs_api::create_ah(peer))
            .mtu(PathMtu::Mtu1024)
            .dest_qpn(0x11)
            .rq_psn(0x1000)
            .max_dest_rd_atomic(16)
            .min_rnr_timer(12),
    );
    lab.expect(r, "INIT -> RTR");
    let r = try_modify(
        lab,
        "sq_psn, timeout, retry_cnt, rnr_retry, max_rd_atomic",
        QpAttr::new()
            .state(QpState::Rts)
            .sq_psn(0x100)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .max_rd_atomic(16),
    );
    lab.expect(r, "RTR -> RTS");
    let r = try_modify(lab, "drain the send queue", QpAttr::new().state(QpState::Sqd));
    lab.expect(r, "RTS -> SQD");
    lab.run(STEP_EVENTS);
    let r = try_modify(lab, "resume", QpAttr::new().state(QpState::Rts));
    lab.expect(r, "SQD -> RTS");
    let r = try_modify(lab, "error", QpAttr::new().state(QpState::Err));
    lab.expect(r, "RTS -> ERR");
    let wr = SendWr::new(2, WrOpcode::Send).sge(mr.addr(), 8, mr.lkey());
    match qp.post_send(wr) {
        Ok(()) => lab.say(&who, "post_send  wr_id=2 SEND 8 B (accepted in ERR: it is flushed)"),
        Err(e) => lab.say(&who, format!("post_send  wr_id=2: {e}")),
    }
    let wcs = lab.run(STEP_EVENTS);
    lab.expect(statuses(&wcs) == vec![(2, WcStatus::WrFlushErr)], "wr 2 flushed");
    let r = try_modify(lab, "back to the start", QpAttr::new().state(QpState::Reset));
    lab.expect(r, "ERR -> RESET");
    Ok(())
}

// ---------------------------------------------------------------- chapters 3-6

fn send(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    post_recv(lab, &b, 101, 0, 1024);
    post_recv(lab, &b, 102, 1024, 3072);
    a.mr.write(0, &pattern(1, 2500)).map_err(|e| e.to_string())?;
    post(lab, &a, send_wr(1, &a, 100));
    let wcs = lab.run(STEP_EVENTS);
    let mut wr = send_wr(2, &a, 2500).with_imm(0x1234);
    wr.opcode = WrOpcode::SendWithImm;
    post(lab, &a, wr);
    let mut wcs2 = lab.run(STEP_EVENTS);
    let mut all = wcs;
    all.append(&mut wcs2);
    let ok = all.iter().all(|w| w.status == WcStatus::Success) && all.len() == 4;
    lab.expect(ok, "four successful completions");
    lab.expect(
        region(&b, 0, 100) == pattern(1, 100) && region(&b, 1024, 2500) == pattern(1, 2500),
        "both messages landed in the receive buffers",
    );
    lab.note("check        roce1's receive buffers hold the 100 and 2500 bytes roce0 sent: ok");
    Ok(())
}

fn write(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    a.mr.write(0, &pattern(7, 2500)).map_err(|e| e.to_string())?;
    post(lab, &a, rdma(1, WrOpcode::RdmaWrite, &a, 2500, &b, 0));
    let w1 = lab.run(STEP_EVENTS);
    lab.expect(statuses(&w1) == vec![(1, WcStatus::Success)], "the WRITE completes at roce0 only");
    lab.expect(region(&b, 0, 2500) == pattern(7, 2500), "the bytes are in roce1's region");
    lab.note("check        roce1's region holds the 2500 bytes; roce1's CPU saw no completion");
    post_recv(lab, &b, 101, 0, 0);
    let wr = rdma(2, WrOpcode::RdmaWriteWithImm, &a, 16, &b, 3000).with_imm(0xcafe);
    post(lab, &a, wr);
    let w2 = lab.run(STEP_EVENTS);
    lab.expect(
        w2.iter().any(|w| w.opcode == WcOpcode::RecvRdmaWithImm && w.imm == Some(0xcafe)),
        "the responder gets RECV_RDMA_WITH_IMM with the immediate",
    );
    Ok(())
}

fn read(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    b.mr.write(0, &pattern(9, 2500)).map_err(|e| e.to_string())?;
    post(lab, &a, rdma(1, WrOpcode::RdmaRead, &a, 2500, &b, 0));
    expect_one(lab, WcStatus::Success, "the READ completes");
    lab.expect(region(&a, 0, 2500) == pattern(9, 2500), "roce0 has roce1's bytes");
    lab.note("check        roce0's region now holds the 2500 bytes read from roce1's region: ok");
    Ok(())
}

fn atomic(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    b.mr.write_u64(64, 5).map_err(|e| e.to_string())?;
    lab.note("              roce1's 8-byte word at offset 64 of its region is 5");
    let target = b.mr.remote_addr(64);
    let mk = |id: u64, op: WrOpcode, c: u64, s: u64, off: u64| {
        let mut wr =
            SendWr::new(id, op).sge(a.mr.addr() + off, 8, a.mr.lkey()).remote(target, b.mr.rkey());
        wr.compare_add = c;
        wr.swap = s;
        wr
    };
    let steps = [
        (mk(1, WrOpcode::AtomicCmpAndSwp, 5, 42, 0), 5, 42),
        (mk(2, WrOpcode::AtomicCmpAndSwp, 5, 7, 8), 42, 42),
        (mk(3, WrOpcode::AtomicFetchAndAdd, 10, 0, 16), 42, 52),
        (mk(4, WrOpcode::AtomicFetchAndAdd, 10, 0, 24), 52, 62),
    ];
    for (i, (wr, orig, after)) in steps.into_iter().enumerate() {
        post(lab, &a, wr);
        let w = lab.run(STEP_EVENTS);
        lab.expect(w.len() == 1 && w[0].status == WcStatus::Success, "atomic completes");
        let got = a.mr.read_u64(i as u64 * 8).unwrap_or(u64::MAX);
        let now = b.mr.read_u64(64).unwrap_or(u64::MAX);
        lab.note(format!(
            "              original value returned to roce0: {got}; roce1's word is now {now}"
        ));
        lab.expect(got == orig && now == after, "atomic result");
    }
    Ok(())
}

// ---------------------------------------------------------------- chapter 7

fn ack_coalescing(lab: &mut Lab) -> Result<(), String> {
    let spec = PairSpec {
        a: mtu(PathMtu::Mtu256),
        b: mtu(PathMtu::Mtu256),
        mr_len: 25600,
        ..PairSpec::default()
    };
    let (a, b) = lab.pair(&spec)?;
    post(lab, &a, rdma(1, WrOpcode::RdmaWrite, &a, 25600, &b, 0));
    expect_one(lab, WcStatus::Success, "the WRITE completes");
    let acks = counter(&b, "acks_sent");
    lab.note(format!(
        "              100 request packets, {} ACKs from roce1 (ack_deferred={}: packets it did not have to ACK)",
        acks,
        counter(&b, "ack_deferred")
    ));
    lab.expect(acks == 2, "two ACKs");
    Ok(())
}

fn lost_packet(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    add_filter(lab, Filter::matching(Match::Opcode(Opcode::RC_RDMA_WRITE_MIDDLE)).nth(1).drop());
    lab.note(
        "              fault: the fabric drops the first RDMA_WRITE_MIDDLE packet (PSN 0x101)",
    );
    a.mr.write(0, &pattern(3, 4000)).map_err(|e| e.to_string())?;
    post(lab, &a, rdma(1, WrOpcode::RdmaWrite, &a, 4000, &b, 0));
    expect_one(lab, WcStatus::Success, "the WRITE still completes");
    lab.expect(region(&b, 0, 4000) == pattern(3, 4000), "data exact");
    lab.note(format!(
        "              roce1: out_of_seq_request={} (packets after the gap, answered by one NAK); roce0: rcvd_seq_err={} completer_retry_err={}",
        counter(&b, "out_of_seq_request"),
        counter(&a, "rcvd_seq_err"),
        counter(&a, "completer_retry_err")
    ));
    lab.expect(counter(&a, "rcvd_seq_err") == 1, "one sequence NAK");
    Ok(())
}

fn lost_ack(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    add_filter(lab, Filter::matching(Match::Opcode(Opcode::RC_ACKNOWLEDGE)).nth(1).drop());
    lab.note("              fault: the fabric drops the first ACK; timeout 14 = 4.096 µs * 2^14 = 67.1 ms");
    post(lab, &a, rdma(1, WrOpcode::RdmaWrite, &a, 100, &b, 0));
    expect_one(lab, WcStatus::Success, "the WRITE completes after the retry");
    lab.note(format!(
        "              roce1: duplicate_request={} (executed once, ACKed twice); roce0: completer_retry_err={}",
        counter(&b, "duplicate_request"),
        counter(&a, "completer_retry_err")
    ));
    lab.expect(counter(&b, "duplicate_request") == 1, "one duplicate");
    Ok(())
}

fn rnr(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    lab.note("              roce1 has posted no receive yet; min_rnr_timer 12 = 0.64 ms, rnr_retry 7 = forever");
    post(lab, &a, send_wr(1, &a, 64));
    lab.run_until_ms(1.5);
    post_recv(lab, &b, 101, 0, 1024);
    let w = lab.run(STEP_EVENTS);
    lab.expect(w.iter().all(|w| w.status == WcStatus::Success) && w.len() == 2, "both complete");
    lab.note(format!(
        "              roce1: send_rnr_err={} (RNR NAKs sent); roce0: rcvd_rnr_err={}",
        counter(&b, "send_rnr_err"),
        counter(&a, "rcvd_rnr_err")
    ));
    lab.expect(counter(&a, "rcvd_rnr_err") >= 1, "RNR NAKs");
    Ok(())
}

fn rnr_exceeded(lab: &mut Lab) -> Result<(), String> {
    let mut spec = PairSpec::default();
    spec.a.rnr_retry = 1;
    let (a, _b) = lab.pair(&spec)?;
    lab.note("              roce0's rnr_retry is 1; roce1 never posts a receive");
    post(lab, &a, send_wr(1, &a, 64));
    post(lab, &a, send_wr(2, &a, 64));
    let w = lab.run(STEP_EVENTS);
    lab.expect(
        statuses(&w) == vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)],
        "RNR_RETRY_EXC_ERR then WR_FLUSH_ERR",
    );
    lab.say(&a.who(), format!("QP state is now {}", a.qp.state()));
    Ok(())
}

fn retry_exceeded(lab: &mut Lab) -> Result<(), String> {
    let mut spec = PairSpec::default();
    spec.a.retry_cnt = 2;
    let (a, b) = lab.pair(&spec)?;
    add_filter(lab, Filter::matching(Match::From(ip("10.0.0.2"))).drop());
    lab.note("              fault: everything roce1 sends is lost; roce0's retry_cnt is 2, timeout 14 (67.1 ms)");
    post(lab, &a, rdma(1, WrOpcode::RdmaWrite, &a, 100, &b, 0));
    expect_one(lab, WcStatus::RetryExcErr, "RETRY_EXC_ERR");
    lab.say(&a.who(), format!("QP state is now {}", a.qp.state()));
    lab.note(format!(
        "              roce0: completer_retry_err={} retry_exceeded_err={}; roce1: duplicate_request={}",
        counter(&a, "completer_retry_err"),
        counter(&a, "retry_exceeded_err"),
        counter(&b, "duplicate_request")
    ));
    Ok(())
}

// ---------------------------------------------------------------- chapter 8

fn uc(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec { qp_type: QpType::Uc, ..PairSpec::default() })?;
    add_filter(lab, Filter::matching(Match::Opcode(Opcode::UC_SEND_MIDDLE)).nth(1).drop());
    lab.note("              fault: the fabric drops the first UC SEND_MIDDLE packet");
    post_recv(lab, &b, 101, 0, 4096);
    post_recv(lab, &b, 102, 0, 4096);
    post(lab, &a, send_wr(1, &a, 3000));
    post(lab, &a, send_wr(2, &a, 200));
    let w = lab.run(STEP_EVENTS);
    let recvs: Vec<_> = w.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
    lab.expect(
        recvs.len() == 1 && recvs[0].byte_len == 200 && recvs[0].wr_id == 101,
        "only the 200-byte message arrives, in the first receive buffer",
    );
    lab.expect(w.iter().filter(|w| w.opcode == WcOpcode::Send).count() == 2, "both sends complete");
    lab.note(format!(
        "              roce1: uc_msg_dropped={}; roce0 thinks both were sent (UC has no ACKs)",
        counter(&b, "uc_msg_dropped")
    ));
    Ok(())
}

fn ud(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec { qp_type: QpType::Ud, ..PairSpec::default() })?;
    post_recv(lab, &b, 101, 0, 1064);
    post_recv(lab, &b, 102, 1064, 1064);
    let ah = roce_verbs_api::create_ah(ip("10.0.0.2"));
    lab.say(&a.who(), "create_ah  to 10.0.0.2 (GID ::ffff:10.0.0.2)");
    let qkey = roce_verbs_api::DEFAULT_QKEY;
    for (id, len, k) in [(1u64, 300u32, qkey), (2, 100, 0x2222_2222), (3, 1024, qkey)] {
        let wr = send_wr(id, &a, len).ud(ah, b.ep.qpn, k);
        lab.say(
            &a.who(),
            format!("post_send  wr_id={id} SEND {len} B to QP {:#x} with Q_Key {k:#x}", b.ep.qpn),
        );
        if let Err(e) = a.qp.post_send(wr) {
            lab.say(&a.who(), format!("post_send failed: {e}"));
        }
    }
    let w = lab.run(STEP_EVENTS);
    let recvs: Vec<_> =
        w.iter().filter(|w| w.opcode == WcOpcode::Recv).map(|w| w.byte_len).collect();
    lab.expect(recvs == vec![340, 1064], "two datagrams arrive (40-byte GRH area + payload)");
    lab.note(format!(
        "              roce1 dropped the datagram with the wrong Q_Key silently: ud_dropped={}",
        counter(&b, "ud_dropped")
    ));
    Ok(())
}

// ---------------------------------------------------------------- chapter 9

fn srq(lab: &mut Lab) -> Result<(), String> {
    let b = lab.b.clone();
    let pd_b = b.alloc_pd().map_err(|e| e.to_string())?;
    let cq_b = b.create_cq(64).map_err(|e| e.to_string())?;
    let mr_b = pd_b.reg_mr(8192, AccessFlags::LOCAL_WRITE).map_err(|e| e.to_string())?;
    let srq = pd_b.create_srq(8, 1).map_err(|e| e.to_string())?;
    lab.say("roce1", "create_srq max_wr 8 -> SRQ");
    for i in 0..4u64 {
        lab.say("roce1", format!("post_srq_recv wr_id={} 1024 B buffer", 101 + i));
        srq.post_recv(RecvWr::new(101 + i, mr_b.addr() + i * 1024, 1024, mr_b.lkey()))
            .map_err(|e| e.to_string())?;
    }
    srq.set_limit(2).map_err(|e| e.to_string())?;
    lab.say("roce1", "modify_srq srq_limit 2: an event when fewer than 2 receives remain");
    lab.watch("roce1 CQ", &cq_b);
    let a = lab.a.clone();
    let pd_a = a.alloc_pd().map_err(|e| e.to_string())?;
    let cq_a = a.create_cq(64).map_err(|e| e.to_string())?;
    let mr_a = pd_a.reg_mr(4096, AccessFlags::LOCAL_WRITE).map_err(|e| e.to_string())?;
    lab.watch("roce0 CQ", &cq_a);
    let opts = roce_verbs_api::ConnectOptions::default();
    let mut qps = Vec::new();
    for i in 0..2u32 {
        let qa = pd_a.qp_builder(&cq_a, &cq_a).build().map_err(|e| e.to_string())?;
        let qb = pd_b.qp_builder(&cq_b, &cq_b).srq(&srq).build().map_err(|e| e.to_string())?;
        let (ea, eb) = (qa.endpoint(0x100 * (i + 1)), qb.endpoint(0x1000 * (i + 1)));
        qa.connect(&ea, &eb, &opts).map_err(|e| e.to_string())?;
        qb.connect(&eb, &ea, &opts).map_err(|e| e.to_string())?;
        lab.say(
            "setup",
            format!("roce0 QP {:#x} <-> roce1 QP {:#x} (receives from the SRQ)", ea.qpn, eb.qpn),
        );
        qps.push((qa, qb, ea, eb));
    }
    for (id, (qa, _qb, ea, eb)) in (1u64..).zip(qps.iter().chain(qps.iter()).take(3)) {
        let wr = SendWr::new(id, WrOpcode::Send).sge(mr_a.addr(), 100 * id as u32, mr_a.lkey());
        lab.say(
            &format!("roce0 QP {:#x}", ea.qpn),
            format!("post_send  wr_id={id} SEND {} B to QP {:#x}", 100 * id, eb.qpn),
        );
        qa.post_send(wr).map_err(|e| e.to_string())?;
        lab.run(STEP_EVENTS);
    }
    let left = srq.query().map(|(_, n)| n).unwrap_or(0);
    lab.say("roce1", format!("query_srq  {left} receives left"));
    lab.expect(left == 1, "one receive left");
    Ok(())
}

fn mw(lab: &mut Lab) -> Result<(), String> {
    let spec = PairSpec {
        mr_access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND,
        ..PairSpec::default()
    };
    let (a, b) = lab.pair(&spec)?;
    let mw = b.pd.alloc_mw(MwType::Type2).map_err(|e| e.to_string())?;
    let (mwh, rkey0) = (mw.handle(), mw.rkey());
    lab.say(&b.who(), format!("alloc_mw   type 2 -> rkey {rkey0} (not usable until bound)"));
    let new_rkey = RKey::new((rkey0.value() & !0xff) | (rkey0.value().wrapping_add(1) & 0xff));
    let bind = MwBind {
        mr: b.mr.info().handle,
        addr: b.mr.addr() + 1024,
        length: 256,
        access: AccessFlags::REMOTE_WRITE,
    };
    post(lab, &b, SendWr::new(11, WrOpcode::BindMw { mw: mwh, rkey: new_rkey, bind }));
    lab.run(STEP_EVENTS);
    lab.note(format!(
        "              roce1 hands roce0 the window: addr {:#x}, 256 bytes, rkey {new_rkey}",
        bind.addr
    ));
    let through = |id: u64, len: u32| {
        SendWr::new(id, WrOpcode::RdmaWrite)
            .sge(a.mr.addr(), len, a.mr.lkey())
            .remote(bind.addr, new_rkey)
    };
    a.mr.write(0, &pattern(5, 256)).map_err(|e| e.to_string())?;
    post(lab, &a, through(1, 256));
    let w1 = lab.run(STEP_EVENTS);
    lab.expect(statuses_of(&w1, &a) == vec![(1, WcStatus::Success)], "WRITE through the window");
    lab.expect(region(&b, 1024, 256) == pattern(5, 256), "bytes in the window");
    post(lab, &b, SendWr::new(12, WrOpcode::LocalInv { rkey: new_rkey }));
    lab.run(STEP_EVENTS);
    post(lab, &a, through(2, 16));
    let w2 = lab.run(STEP_EVENTS);
    lab.expect(
        statuses_of(&w2, &a) == vec![(2, WcStatus::RemAccessErr)],
        "REM_ACCESS_ERR after invalidation",
    );
    let _ = mw.destroy();
    Ok(())
}

// ---------------------------------------------------------------- chapter 14

/// The group of the multicast scenario.
const GROUP: &str = "239.1.1.1";

/// A UD QP on `ctx` with its own PD, CQ and a 4096-byte region, in RTS
/// with the default Q_Key (QPN and first PSN fixed per device).
fn ud_end(lab: &mut Lab, ctx: &roce_verbs_api::Context, watch: bool) -> Result<End, String> {
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(64).map_err(|e| e.to_string())?;
    let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).map_err(|e| e.to_string())?;
    let qp = pd
        .qp_builder(&cq, &cq)
        .qp_type(QpType::Ud)
        .max_recv_wr(16)
        .build()
        .map_err(|e| e.to_string())?;
    let ep = qp.endpoint(0x100);
    qp.activate_ud(roce_verbs_api::DEFAULT_QKEY, ep.psn).map_err(|e| e.to_string())?;
    let e = End { dev: ctx.name().to_string(), ctx: ctx.clone(), pd, cq, qp, mr, ep };
    if watch {
        lab.watch(&e.who(), &e.cq);
    }
    Ok(e)
}

fn multicast(lab: &mut Lab) -> Result<(), String> {
    let group = ip(GROUP);
    let qkey = roce_verbs_api::DEFAULT_QKEY;
    let a_ctx = lab.a.clone();
    let a = ud_end(lab, &a_ctx, true)?;
    lab.say(
        "setup",
        format!(
            "roce0 QP {:#x} (10.0.0.1): UD, Q_Key {qkey:#x}, the sender (not in the group)",
            a.ep.qpn
        ),
    );
    let (c2, c3) = (lab.add_device(), lab.add_device());
    let mut rx = Vec::new();
    for ctx in [lab.b.clone(), c2, c3] {
        let e = ud_end(lab, &ctx, true)?;
        let addr = ctx.addr();
        lab.say("setup", format!("{} QP {:#x} ({addr}): UD, Q_Key {qkey:#x}", e.dev, e.ep.qpn));
        rx.push(e);
    }
    // each device's receives have wr_ids of their own (roce1: 101, 102;
    // roce2: 201, 202; ...): the QPs all have QPN 0x11
    for (k, e) in (1u64..).zip(&rx) {
        post_recv(lab, e, k * 100 + 1, 0, 1064);
        post_recv(lab, e, k * 100 + 2, 1064, 1064);
    }
    let of = recvs_of;
    for e in &rx {
        match e.qp.attach_mcast(group) {
            Ok(()) => lab.say(
                &e.who(),
                format!(
                    "attach_mcast {GROUP}: {}'s first QP in the group, the device joins it (IGMP)",
                    e.dev
                ),
            ),
            Err(err) => lab.say(&e.who(), format!("attach_mcast failed: {err}")),
        }
    }
    let members = lab.net.group_members(group);
    lab.note(format!("              the fabric's group {GROUP}: {}", members.join(", ")));
    lab.expect(members == ["roce1", "roce2", "roce3"], "three devices in the group");
    let ah = roce_verbs_api::create_ah(group);
    lab.say(&a.who(), format!("create_ah  to {GROUP} (GID ::ffff:{GROUP}, the group)"));
    let data1 = pattern(14, 200);
    let data2 = pattern(15, 100);
    a.mr.write(0, &data1).map_err(|e| e.to_string())?;
    a.mr.write(1024, &data2).map_err(|e| e.to_string())?;
    say_group_send(lab, &a, 1, 200);
    a.qp.post_send(group_send(&a, ah, 1, 0, 200)).map_err(|e| e.to_string())?;
    let w1 = lab.run(STEP_EVENTS);
    let got1: Vec<u64> = (1..=3).map(|k| of(&w1, k).len() as u64).collect();
    for (k, e) in (1u64..).zip(&rx) {
        let r = of(&w1, k);
        lab.expect(
            r == vec![(k * 100 + 1, WcStatus::Success)],
            format!("{} receives the datagram", e.dev),
        );
        lab.expect(region(e, 40, 200) == data1, format!("{}: the bytes after the GRH area", e.dev));
    }
    let grh = region(&rx[0], 0, 40);
    let dst = std::net::Ipv4Addr::new(grh[36], grh[37], grh[38], grh[39]);
    let src = std::net::Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]);
    lab.note(format!(
        "              roce1's buffer: GRH area (IPv4 header at bytes 20..40) says {src} -> {dst}, then the 200 bytes"
    ));
    lab.expect(IpAddr::V4(dst) == group, "the GRH's destination is the group");
    lab.expect(got1 == vec![1, 1, 1], "one copy per attached QP");
    multicast_after_detach(lab, &a, &rx, ah, &data2)
}

/// The `multicast` scenario's second half: roce2 detaches, the next
/// datagram reaches roce1 and roce3 only; the counters.
fn multicast_after_detach(
    lab: &mut Lab,
    a: &End,
    rx: &[End],
    ah: roce_verbs_api::AhAttr,
    data2: &[u8],
) -> Result<(), String> {
    let group = ip(GROUP);
    let of = recvs_of;
    match rx[1].qp.detach_mcast(group) {
        Ok(()) => lab.say(
            &rx[1].who(),
            format!("detach_mcast {GROUP}: roce2's last QP in the group, the device leaves it"),
        ),
        Err(err) => lab.say(&rx[1].who(), format!("detach_mcast failed: {err}")),
    }
    let members = lab.net.group_members(group);
    lab.note(format!("              the fabric's group {GROUP}: {}", members.join(", ")));
    say_group_send(lab, a, 2, 100);
    a.qp.post_send(group_send(a, ah, 2, 1024, 100)).map_err(|e| e.to_string())?;
    let w2 = lab.run(STEP_EVENTS);
    for ((k, e), want) in (1u64..).zip(rx).zip([true, false, true]) {
        let r = of(&w2, k);
        let ok = if want {
            r == vec![(k * 100 + 2, WcStatus::Success)] && region(e, 1064 + 40, 100) == data2
        } else {
            r.is_empty() && region(e, 1064, 140) == vec![0u8; 140]
        };
        lab.expect(
            ok,
            format!("{}: the second datagram {}", e.dev, if want { "arrives" } else { "does not" }),
        );
    }
    let rcvd: Vec<u64> = rx.iter().map(|e| counter(e, "mcast_rcvd")).collect();
    lab.note(format!(
        "              roce0 sent 2 datagrams (mcast_sent={}); mcast_rcvd: roce1={} roce2={} roce3={}",
        counter(a, "mcast_sent"),
        rcvd[0],
        rcvd[1],
        rcvd[2]
    ));
    lab.expect(counter(a, "mcast_sent") == 2 && rcvd == vec![2, 1, 2], "the multicast counters");
    lab.expect(lab.net.stats().mcast_copies == 5, "five copies on the fabric");
    Ok(())
}

/// The receive completions of device `k` (wr_ids k01, k02, ...).
fn recvs_of(w: &[WorkCompletion], k: u64) -> Vec<(u64, WcStatus)> {
    let mine: Vec<WorkCompletion> =
        w.iter().filter(|c| c.opcode == WcOpcode::Recv && c.wr_id / 100 == k).copied().collect();
    statuses(&mine)
}

/// A SEND of `len` bytes at `off` of `a`'s region to the multicast QPN
/// through `ah` (the group).
fn group_send(a: &End, ah: roce_verbs_api::AhAttr, id: u64, off: u64, len: u32) -> SendWr {
    SendWr::new(id, WrOpcode::Send).sge(a.mr.addr() + off, len, a.mr.lkey()).ud(
        ah,
        roce_verbs_api::MCAST_QPN,
        roce_verbs_api::DEFAULT_QKEY,
    )
}

fn say_group_send(lab: &mut Lab, a: &End, id: u64, len: u32) {
    lab.say(
        &a.who(),
        format!(
            "post_send  wr_id={id} SEND {len} B to QP {:#x} (the multicast QPN) with Q_Key {:#x}",
            roce_verbs_api::MCAST_QPN,
            roce_verbs_api::DEFAULT_QKEY
        ),
    );
}

fn xrc(lab: &mut Lab) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    // roce1: one XRC domain, two XRC SRQs each with its CQ, one target QP
    let b = lab.b.clone();
    let pd_b = b.alloc_pd().map_err(|x| e(&x))?;
    let mr_b = pd_b.reg_mr(4096, AccessFlags::LOCAL_WRITE).map_err(|x| e(&x))?;
    let xrcd = b.alloc_xrcd().map_err(|x| e(&x))?;
    lab.say("roce1", format!("open_xrcd  -> XRC domain {}", xrcd.handle().id()));
    let mut srqs = Vec::new();
    for i in 1..=2u64 {
        let cq = b.create_cq(16).map_err(|x| e(&x))?;
        let srq = pd_b.create_xrc_srq(8, 1, &xrcd, &cq).map_err(|x| e(&x))?;
        let n = srq.handle().id();
        lab.say(
            "roce1",
            format!(
                "create_srq_ex XRC, domain {}, CQ{i} -> XRC SRQ number {n:#x}",
                xrcd.handle().id()
            ),
        );
        lab.watch(&format!("roce1 CQ{i}"), &cq);
        srqs.push((srq, cq, n));
    }
    // SRQ 1: one receive (wr_id 101); SRQ 2: two (201, 202)
    for (k, id, off) in [(0usize, 101u64, 0u64), (1, 201, 1024), (1, 202, 2048)] {
        let (srq, _, n) = &srqs[k];
        lab.say("roce1", format!("post_srq_recv wr_id={id} 1024 B buffer to XRC SRQ {n:#x}"));
        srq.post_recv(RecvWr::new(id, mr_b.addr() + off, 1024, mr_b.lkey())).map_err(|x| e(&x))?;
    }
    // another domain, with an SRQ of its own: not the target's
    let other = b.alloc_xrcd().map_err(|x| e(&x))?;
    let cq_o = b.create_cq(16).map_err(|x| e(&x))?;
    let foreign = pd_b.create_xrc_srq(8, 1, &other, &cq_o).map_err(|x| e(&x))?;
    let nf = foreign.handle().id();
    foreign
        .post_recv(RecvWr::new(301, mr_b.addr() + 3072, 1024, mr_b.lkey()))
        .map_err(|x| e(&x))?;
    lab.say(
        "roce1",
        format!(
            "open_xrcd  -> XRC domain {}, with XRC SRQ {nf:#x} (and a receive posted)",
            other.handle().id()
        ),
    );
    lab.watch("roce1 CQ3", &cq_o);
    let tgt = xrcd.create_tgt_qp().map_err(|x| e(&x))?;
    // roce0: the initiator
    let a = lab.a.clone();
    let pd_a = a.alloc_pd().map_err(|x| e(&x))?;
    let cq_a = a.create_cq(16).map_err(|x| e(&x))?;
    let mr_a = pd_a.reg_mr(4096, AccessFlags::LOCAL_WRITE).map_err(|x| e(&x))?;
    let ini = pd_a
        .qp_builder(&cq_a, &cq_a)
        .qp_type(QpType::XrcSend)
        .max_recv_wr(0)
        .build()
        .map_err(|x| e(&x))?;
    let (ea, eb) = (ini.endpoint(0x100), tgt.endpoint(0x1000));
    let opts = roce_verbs_api::ConnectOptions::default();
    ini.connect(&ea, &eb, &opts).map_err(|x| e(&x))?;
    tgt.connect(&eb, &ea, &opts).map_err(|x| e(&x))?;
    lab.say(
        "setup",
        format!(
            "roce0 QP {:#x} (XRC_SEND, first PSN {:#x}) <-> roce1 QP {:#x} (XRC_RECV in domain {}, first PSN {:#x}): connected, path MTU {}",
            ea.qpn,
            ea.psn,
            eb.qpn,
            xrcd.handle().id(),
            eb.psn,
            opts.mtu.bytes()
        ),
    );
    let who_a = format!("roce0 QP {:#x}", ea.qpn);
    lab.watch(&who_a, &cq_a);
    let (n1, n2) = (srqs[0].2, srqs[1].2);
    let sends: [(u64, u32, u32, u64); 4] =
        [(1, 100, n2, 0), (2, 300, n1, 1024), (3, 50, n2, 2048), (4, 8, nf, 3072)];
    for (id, len, srqn, off) in sends {
        a_write(&mr_a, off, &pattern(20 + id as u32, len as usize))?;
        let wr = SendWr::new(id, WrOpcode::Send).sge(mr_a.addr() + off, len, mr_a.lkey()).xrc(srqn);
        lab.say(&who_a, format!("post_send  wr_id={id} SEND {len} B to XRC SRQ {srqn:#x}"));
        ini.post_send(wr).map_err(|x| e(&x))?;
        if id == 3 {
            // the first three, then the one to the other domain's SRQ
            xrc_first_three(lab, &who_a, ea.qpn, eb.qpn);
        }
    }
    let w = lab.run_by_cq(STEP_EVENTS);
    let got: Vec<_> = w.iter().map(|(l, c)| (l.as_str(), c.wr_id, c.status)).collect();
    lab.expect(
        got == vec![(who_a.as_str(), 4, WcStatus::RemInvReqErr)],
        "REM_INV_REQ_ERR for the SRQ of another domain, nothing on roce1's CQs",
    );
    xrc_landed(lab, &mr_b);
    let left: Vec<usize> = [&srqs[0].0, &srqs[1].0, &foreign]
        .iter()
        .map(|s| s.query().map(|(_, n)| n).unwrap_or(usize::MAX))
        .collect();
    lab.say(
        "roce1",
        format!(
            "query_srq  receives left: SRQ {n1:#x} {}, SRQ {n2:#x} {}, SRQ {nf:#x} {}",
            left[0], left[1], left[2]
        ),
    );
    lab.expect(left == vec![0, 0, 1], "each SEND took one receive of the SRQ it named");
    let state = tgt.state();
    lab.say(&format!("roce1 QP {:#x}", eb.qpn), format!("query_qp   state {state}"));
    lab.expect(state == QpState::Err, "the target QP is in ERR");
    Ok(())
}

/// The `xrc` scenario's first three SENDs: completed, each in the SRQ
/// (and on the CQ) its XRCETH named, for the target QP.
fn xrc_first_three(lab: &mut Lab, who_a: &str, ini: u32, tgt: u32) {
    let w = lab.run_by_cq(STEP_EVENTS);
    let on = |label: &str| -> Vec<(u64, WcStatus, u32)> {
        w.iter().filter(|(l, _)| l == label).map(|(_, c)| (c.wr_id, c.status, c.byte_len)).collect()
    };
    let ok = WcStatus::Success;
    lab.expect(
        on(who_a) == vec![(1, ok, 100), (2, ok, 300), (3, ok, 50)],
        "the three SENDs complete",
    );
    lab.expect(on("roce1 CQ1") == vec![(101, ok, 300)], "SRQ 1's receive on CQ1");
    lab.expect(on("roce1 CQ2") == vec![(201, ok, 100), (202, ok, 50)], "SRQ 2's receives on CQ2");
    lab.expect(
        w.iter()
            .filter(|(l, _)| l.starts_with("roce1 CQ"))
            .all(|(_, c)| c.qp_num == tgt && c.src_qp == ini),
        "the receives complete for the target QP, from the initiator",
    );
}

/// Where the `xrc` scenario's bytes landed: wr 1 and 3 in SRQ 2's
/// receives, wr 2 in SRQ 1's, nothing in the other domain's.
fn xrc_landed(lab: &mut Lab, mr_b: &roce_verbs_api::Mr) {
    let read_b = |off: u64, len: usize| {
        let mut v = vec![0u8; len];
        let _ = mr_b.read(off, &mut v);
        v
    };
    lab.expect(read_b(1024, 100) == pattern(21, 100), "wr 1's bytes in XRC SRQ 2's first buffer");
    lab.expect(read_b(0, 300) == pattern(22, 300), "wr 2's bytes in XRC SRQ 1's buffer");
    lab.expect(read_b(2048, 50) == pattern(23, 50), "wr 3's bytes in XRC SRQ 2's second buffer");
    lab.expect(read_b(3072, 8) == vec![0u8; 8], "nothing in the other domain's buffer");
}

fn a_write(mr: &roce_verbs_api::Mr, off: u64, bytes: &[u8]) -> Result<(), String> {
    mr.write(off, bytes).map_err(|e| e.to_string())
}

// ---------------------------------------------------------------- chapter 11

fn case(lab: &mut Lab, title: &str) {
    lab.note("");
    lab.note(format!("--- {title}"));
}

/// One case of `wc-errors`: its title and the case (on a fresh QP pair).
type Case = (&'static str, fn(&mut Lab) -> Result<(), String>);

const WC_ERROR_CASES: &[Case] = &[
    ("LOC_LEN_ERR (responder) + REM_INV_REQ_ERR (requester): a 200-byte SEND into a 100-byte receive buffer", loc_len_err),
    ("LOC_PROT_ERR: a SEND whose SGE names a wrong lkey", loc_prot_err),
    ("REM_ACCESS_ERR: an RDMA WRITE with a wrong rkey", rem_access_err_rkey),
    ("REM_ACCESS_ERR: an RDMA READ past the end of the remote region", rem_access_err_range),
    ("REM_OP_ERR (requester) + LOC_PROT_ERR (responder): the receive buffer's lkey is wrong", rem_op_err),
    ("REM_INV_REQ_ERR: an RDMA READ on a QP that allows no remote reads", rem_inv_req_err),
    ("WR_FLUSH_ERR: work queued behind a failed WR, and receives posted to a QP in ERR", wr_flush_err),
    ("LOC_QP_OP_ERR: LOCAL_INV of an rkey that does not exist", loc_qp_op_err),
    ("MW_BIND_ERR: binding a window to a region registered without MW_BIND", mw_bind_err),
    ("RNR_RETRY_EXC_ERR: no receive posted and rnr_retry=0 (see --scenario rnr-exceeded)", rnr_retry_exc_err),
    ("RETRY_EXC_ERR: no answer at all and retry_cnt=0 (see --scenario retry-exceeded)", retry_exc_err),
];

fn wc_errors(lab: &mut Lab) -> Result<(), String> {
    for (title, run) in WC_ERROR_CASES {
        case(lab, title);
        run(lab)?;
    }
    lab.note("");
    Ok(())
}

/// LOC_LEN_ERR / REM_INV_REQ_ERR: receive buffer too small
fn loc_len_err(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    post_recv(lab, &b, 101, 0, 100);
    post(lab, &a, send_wr(1, &a, 200));
    let w = lab.run(STEP_EVENTS);
    lab.expect(
        w.iter().any(|w| w.status == WcStatus::LocLenErr)
            && w.iter().any(|w| w.status == WcStatus::RemInvReqErr),
        "LOC_LEN_ERR and REM_INV_REQ_ERR",
    );
    Ok(())
}

fn loc_prot_err(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    post_recv(lab, &b, 101, 0, 100);
    let bad = roce_verbs_api::LKey::new(wrong_key(a.mr.lkey().value()));
    post(lab, &a, SendWr::new(1, WrOpcode::Send).sge(a.mr.addr(), 8, bad));
    expect_one(lab, WcStatus::LocProtErr, "LOC_PROT_ERR");
    Ok(())
}

fn rem_access_err_rkey(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    post(lab, &a, write_with_wrong_rkey(&a, &b));
    expect_one(lab, WcStatus::RemAccessErr, "REM_ACCESS_ERR");
    Ok(())
}

fn rem_access_err_range(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    post(lab, &a, rdma(1, WrOpcode::RdmaRead, &a, 64, &b, 4090));
    expect_one(lab, WcStatus::RemAccessErr, "REM_ACCESS_ERR (range)");
    Ok(())
}

fn rem_op_err(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    let bad = roce_verbs_api::LKey::new(wrong_key(b.mr.lkey().value()));
    lab.say(&b.who(), "post_recv  wr_id=101 100 B buffer with a wrong lkey");
    b.qp.post_recv(RecvWr::new(101, b.mr.addr(), 100, bad)).map_err(|e| e.to_string())?;
    post(lab, &a, send_wr(1, &a, 50));
    let w = lab.run(STEP_EVENTS);
    lab.expect(w.iter().any(|w| w.status == WcStatus::RemOpErr), "REM_OP_ERR");
    Ok(())
}

fn rem_inv_req_err(lab: &mut Lab) -> Result<(), String> {
    let mut spec = PairSpec::default();
    spec.b.access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let (a, b) = lab.pair(&spec)?;
    post(lab, &a, rdma(1, WrOpcode::RdmaRead, &a, 64, &b, 0));
    expect_one(lab, WcStatus::RemInvReqErr, "REM_INV_REQ_ERR");
    Ok(())
}

fn wr_flush_err(lab: &mut Lab) -> Result<(), String> {
    let (a, b) = lab.pair(&PairSpec::default())?;
    post(lab, &a, write_with_wrong_rkey(&a, &b));
    post(lab, &a, send_wr(2, &a, 8));
    let w = lab.run(STEP_EVENTS);
    post_recv(lab, &b, 101, 0, 100);
    let mut w2 = lab.run(STEP_EVENTS);
    let mut all = w;
    all.append(&mut w2);
    lab.expect(
        statuses(&all)
            == vec![
                (1, WcStatus::RemAccessErr),
                (2, WcStatus::WrFlushErr),
                (101, WcStatus::WrFlushErr),
            ],
        "REM_ACCESS_ERR, then WR_FLUSH_ERR twice",
    );
    Ok(())
}

fn loc_qp_op_err(lab: &mut Lab) -> Result<(), String> {
    let (a, _b) = lab.pair(&PairSpec::default())?;
    post(lab, &a, SendWr::new(1, WrOpcode::LocalInv { rkey: RKey::new(0x00de_ad00) }));
    expect_one(lab, WcStatus::LocQpOpErr, "LOC_QP_OP_ERR");
    Ok(())
}

fn mw_bind_err(lab: &mut Lab) -> Result<(), String> {
    let (a, _b) = lab.pair(&PairSpec::default())?;
    let mw = a.pd.alloc_mw(MwType::Type2).map_err(|e| e.to_string())?;
    let (mwh, rk) = (mw.handle(), mw.rkey());
    let bind = MwBind {
        mr: a.mr.info().handle,
        addr: a.mr.addr(),
        length: 64,
        access: AccessFlags::REMOTE_WRITE,
    };
    let nk = RKey::new((rk.value() & !0xff) | (rk.value().wrapping_add(1) & 0xff));
    post(lab, &a, SendWr::new(1, WrOpcode::BindMw { mw: mwh, rkey: nk, bind }));
    expect_one(lab, WcStatus::MwBindErr, "MW_BIND_ERR");
    let _ = mw.destroy();
    Ok(())
}

fn rnr_retry_exc_err(lab: &mut Lab) -> Result<(), String> {
    let mut spec = PairSpec::default();
    spec.a.rnr_retry = 0;
    let (a, _b) = lab.pair(&spec)?;
    post(lab, &a, send_wr(1, &a, 8));
    expect_one(lab, WcStatus::RnrRetryExcErr, "RNR_RETRY_EXC_ERR");
    Ok(())
}

fn retry_exc_err(lab: &mut Lab) -> Result<(), String> {
    let mut spec = PairSpec::default();
    spec.a.retry_cnt = 0;
    spec.a.timeout = 8;
    spec.a_dest = Some(ip("10.0.0.99"));
    let (a, b) = lab.pair(&spec)?;
    post(lab, &a, rdma(1, WrOpcode::RdmaWrite, &a, 8, &b, 0));
    expect_one(lab, WcStatus::RetryExcErr, "RETRY_EXC_ERR");
    Ok(())
}

// ---------------------------------------------------------------- chapter 12

fn wrong_gid(lab: &mut Lab) -> Result<(), String> {
    let gid0 = lab.b.query_gid(0).ok_or("roce1 has no GID 0")?;
    let gid1 = lab.b.query_gid(1).ok_or("roce1 has no GID 1")?;
    let mut spec = PairSpec { a_dest: Some(IpAddr::V6(gid0)), ..PairSpec::default() };
    spec.a.retry_cnt = 3;
    lab.note(format!(
        "              roce0 was given roce1's GID index 0 ({gid0}, link-local) instead of index 1 ({gid1})"
    ));
    let (a, b) = lab.pair(&spec)?;
    post(lab, &a, rdma(1, WrOpcode::RdmaWrite, &a, 64, &b, 0));
    expect_one(lab, WcStatus::RetryExcErr, "RETRY_EXC_ERR");
    lab.expect(counter(&b, "rcvd_pkts") == 0, "roce1 saw nothing");
    lab.note(format!(
        "              roce1: rcvd_pkts={} (it never saw a packet)",
        counter(&b, "rcvd_pkts")
    ));
    Ok(())
}

fn mtu_mismatch(lab: &mut Lab) -> Result<(), String> {
    let spec =
        PairSpec { a: mtu(PathMtu::Mtu4096), b: mtu(PathMtu::Mtu1024), ..PairSpec::default() };
    let (a, b) = lab.pair(&spec)?;
    lab.note("              roce1's QP was set up with path MTU 1024");
    post(lab, &a, rdma(1, WrOpcode::RdmaWrite, &a, 1000, &b, 0));
    let w1 = lab.run(STEP_EVENTS);
    post(lab, &a, rdma(2, WrOpcode::RdmaWrite, &a, 3000, &b, 0));
    let w2 = lab.run(STEP_EVENTS);
    lab.expect(statuses(&w1) == vec![(1, WcStatus::Success)], "small WRITE works");
    lab.expect(statuses(&w2) == vec![(2, WcStatus::RemInvReqErr)], "REM_INV_REQ_ERR");
    Ok(())
}

fn mtu_blackhole(lab: &mut Lab) -> Result<(), String> {
    let mut spec =
        PairSpec { a: mtu(PathMtu::Mtu4096), b: mtu(PathMtu::Mtu4096), ..PairSpec::default() };
    spec.a.retry_cnt = 2;
    lab.note("              both QPs use path MTU 4096; the link carries IP packets of at most 1500 bytes");
    let (a, b) = lab.pair(&spec)?;
    post(lab, &a, rdma(1, WrOpcode::RdmaWrite, &a, 1000, &b, 0));
    let w1 = lab.run(STEP_EVENTS);
    post(lab, &a, rdma(2, WrOpcode::RdmaWrite, &a, 3000, &b, 0));
    let w2 = lab.run(STEP_EVENTS);
    lab.expect(statuses(&w1) == vec![(1, WcStatus::Success)], "small WRITE works");
    lab.expect(statuses(&w2) == vec![(2, WcStatus::RetryExcErr)], "RETRY_EXC_ERR");
    Ok(())
}
