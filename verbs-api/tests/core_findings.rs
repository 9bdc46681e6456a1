//! Reproducers for problems found in the HCA core while building the soak
//! test. A test is `#[ignore]`d while its problem is open (run those with
//! `cargo test -p roce-verbs-api --test all core_findings:: -- --ignored`); fixed
//! ones run by default and say what the fix was.

use roce_packet::Opcode;
use roce_sim::SimNet;
use roce_sim::{Filter, Match};
use roce_verbs_api::*;

use crate::common;
use common::{connect_qps, rc_qp, two_contexts, ALL};

struct Rig {
    net: SimNet,
    a: Context,
    cq: Cq,
    qp: Qp,
    mr: Mr,
    peer: Mr,
    _keep: (Qp, Cq),
}

fn rig() -> Rig {
    let net = SimNet::new(1);
    let (a, b) = two_contexts(&net, ["roce0", "roce1"]);
    let ((pa, ca, qa), (pb, cb, qb)) = (rc_qp(&a, 64), rc_qp(&b, 64));
    let o = ConnectOptions { timeout: 10, ..ConnectOptions::default() };
    connect_qps(&qa, &qb, 100, 500, &o);
    let mr = pa.reg_mr(1 << 16, ALL).unwrap();
    let peer = pb.reg_mr(1 << 16, ALL).unwrap();
    Rig { net, a, cq: ca, qp: qa, mr, peer, _keep: (qb, cb) }
}

fn reads(r: &Rig, n: u64, len: u32) {
    for i in 0..n {
        let off = i * u64::from(len);
        r.qp.post_send(
            SendWr::new(i, WrOpcode::RdmaRead)
                .sge(r.mr.addr() + off, len, r.mr.lkey())
                .remote(r.peer.remote_addr(off), r.peer.rkey()),
        )
        .unwrap();
    }
}

/// One lost READ RESPONSE FIRST with six 2-packet READs outstanding: the
/// gap is one loss, so one retry should do. The completer used to charge
/// a retry (and rewind) for every later response of the same burst
/// (`complete_covered` → implied NAK was not guarded like the
/// read-response gap was), exhausting `retry_cnt` 7 → RETRY_EXC_ERR.
/// Fixed: once a go-back-N is started, responses start no other retry
/// until progress (rxe's `started_retry`); see emulator/tests/recovery.rs.
#[test]
fn one_lost_read_response_costs_one_retry() {
    let r = rig();
    r.net.with_fabric(|f| {
        f.add_filter(
            Filter::matching(Match::Opcode(Opcode::RC_RDMA_READ_RESPONSE_FIRST)).nth(1).drop(),
        )
    });
    reads(&r, 6, 2048);
    let wcs = r.net.poll_cq_blocking(&r.cq, 6, 100_000).unwrap();
    let st: Vec<WcStatus> = wcs.iter().map(|w| w.status).collect();
    assert_eq!(st, vec![WcStatus::Success; 6]);
    assert_eq!(r.a.counters().completer_retry_err, 1, "{:?}", r.a.counters());
}
