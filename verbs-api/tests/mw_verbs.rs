//! Memory windows through the verbs API on the simulated fabric: type 1
//! with `Qp::bind_mw`, type 2 with a posted BIND_MW, the QP a type 2
//! window is bound to, MW_BIND_ERR, invalidation and the counters.

use crate::common;
use common::{connect_qps, one_wc, two_contexts, ALL};
use roce_sim::SimNet;
use roce_verbs_api::*;
use std::time::Duration;

const RW: AccessFlags = AccessFlags(AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0);

struct Node {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    mr: Mr,
}

fn node(ctx: Context) -> Node {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr = pd.reg_mr(1 << 16, ALL | AccessFlags::MW_BIND).unwrap();
    Node { ctx, pd, cq, mr }
}

/// A node on each of two devices (roce0 and roce1, at 10.0.0.1 and 10.0.0.2) of
/// the simulated network `net`.
fn two_nodes(net: &SimNet) -> (Node, Node) {
    let (a, b) = two_contexts(net, ["roce0", "roce1"]);
    (node(a), node(b))
}

fn rc_pair(a: &Node, b: &Node, psn: u32) -> (Qp, Qp) {
    let qa = a.pd.qp_builder(&a.cq, &a.cq).build().unwrap();
    let qb = b.pd.qp_builder(&b.cq, &b.cq).build().unwrap();
    connect_qps(&qa, &qb, psn, psn + 0x1000, &ConnectOptions::default());
    (qa, qb)
}

/// How long to wait for a completion.
const WALL: Duration = Duration::from_secs(5);

/// A writes `data` through `rkey` at `va` on `qp`; returns the status.
fn write(a: &Node, qp: &Qp, id: u64, va: u64, rkey: RKey, data: &[u8]) -> WcStatus {
    a.mr.write(0, data).unwrap();
    let wr = SendWr::new(id, WrOpcode::RdmaWrite)
        .sge(a.mr.addr(), data.len() as u32, a.mr.lkey())
        .remote(va, rkey);
    qp.post_send(wr).unwrap();
    let wc = one_wc(&a.cq, WALL);
    assert_eq!(wc.wr_id, id);
    wc.status
}

#[test]
fn type1_and_type2_windows_through_the_verbs() {
    let net = SimNet::new(21);
    let (a, b) = two_nodes(&net);
    let (qa, qb) = rc_pair(&a, &b, 0x100);
    let (qa2, qb2) = rc_pair(&a, &b, 0x200);

    // type 1: bind_mw goes through B's send queue and completes BIND_MW
    let mw1 = b.pd.alloc_mw(MwType::Type1).unwrap();
    let before = mw1.rkey();
    let k1 = qb.bind_mw(&mw1, 1, SendFlags::SIGNALED, b.mr.mw_bind(4096, 512, RW)).unwrap();
    assert_eq!(k1, RKey::new((before.value() & !0xFF) | (before.value().wrapping_add(1) & 0xFF)));
    let wc = one_wc(&b.cq, WALL);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::Success, WcOpcode::BindMw));
    assert_eq!(mw1.rkey(), k1);
    // usable on either connection of the PD
    assert_eq!(
        write(&a, &qa, 10, b.mr.remote_addr(4096), k1, b"type-1 via qp 1"),
        WcStatus::Success
    );
    assert_eq!(write(&a, &qa2, 11, b.mr.remote_addr(4100), k1, b"via qp 2"), WcStatus::Success);
    let mut got = [0u8; 12];
    b.mr.read(4096, &mut got).unwrap();
    assert_eq!(&got, b"typevia qp 2");

    // type 2: a posted BIND_MW on qb; the rkey works on qb's connection only
    let mw2 = b.pd.alloc_mw(MwType::Type2).unwrap();
    let k2 = mw2.inc_rkey();
    let bind = b.mr.mw_bind(8192, 256, RW);
    qb.post_send(SendWr::new(2, WrOpcode::BindMw { mw: mw2.handle(), rkey: k2, bind })).unwrap();
    let wc = one_wc(&b.cq, WALL);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (2, WcStatus::Success, WcOpcode::BindMw));
    assert_eq!(mw2.rkey(), k2);
    assert_eq!(write(&a, &qa, 12, b.mr.remote_addr(8192), k2, b"type-2"), WcStatus::Success);
    assert_eq!(write(&a, &qa2, 13, b.mr.remote_addr(8192), k2, b"TYPE-2"), WcStatus::RemAccessErr);
    let mut got = [0u8; 6];
    b.mr.read(8192, &mut got).unwrap();
    assert_eq!(&got, b"type-2");
    assert_eq!(qb2.state(), QpState::Err, "the responder of the refused write");
    assert_eq!(qb.state(), QpState::Rts);

    // LOCAL_INV frees it; the rkey stops working
    qb.post_send(SendWr::new(3, WrOpcode::LocalInv { rkey: k2 })).unwrap();
    let wc = one_wc(&b.cq, WALL);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (3, WcStatus::Success, WcOpcode::LocalInv));
    assert_eq!(write(&a, &qa, 14, b.mr.remote_addr(8192), k2, b"late"), WcStatus::RemAccessErr);

    let c = b.ctx.counters();
    assert_eq!((c.mw_bind, c.mw_bind_err, c.mw_invalidate), (2, 0, 1), "{c}");
    assert_eq!(mw1.clone().destroy(), Err(DestroyError::Shared { what: "MW", others: 1 }));
    mw1.destroy().unwrap();
}

#[test]
fn bind_errors_through_the_verbs() {
    let net = SimNet::new(22);
    let (a, b) = two_nodes(&net);
    let (_qa, qb) = rc_pair(&a, &b, 0x100);
    let other = b.ctx.alloc_pd().unwrap();
    let mw1 = other.alloc_mw(MwType::Type1).unwrap();
    let mw2 = b.pd.alloc_mw(MwType::Type2).unwrap();
    // refused by the verb: type 2 through bind_mw, window and region in different PDs
    let bind = b.mr.mw_bind(0, 64, RW);
    assert_eq!(
        qb.bind_mw(&mw2, 1, SendFlags::SIGNALED, bind),
        Err(MwError::WrongType(MwType::Type2))
    );
    assert_eq!(qb.bind_mw(&mw1, 1, SendFlags::SIGNALED, bind), Err(MwError::PdMismatch));
    // window and region in one PD, the QP in another: MW_BIND_ERR when executed
    let mr_other = other.reg_mr(4096, ALL | AccessFlags::MW_BIND).unwrap();
    let before = mw1.rkey();
    qb.bind_mw(&mw1, 2, SendFlags::EMPTY, mr_other.mw_bind(0, 64, RW)).unwrap();
    let wc = one_wc(&b.cq, WALL);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (2, WcStatus::MwBindErr, WcOpcode::BindMw));
    assert_eq!(mw1.rkey(), before);
    assert_eq!(qb.state(), QpState::Err);
    assert_eq!(b.ctx.counters().mw_bind_err, 1);
    // the window keeps its PD alive until dropped
    drop(mr_other);
    assert!(matches!(other.clone().destroy(), Err(DestroyError::Shared { .. })));
    drop(mw1);
    other.destroy().unwrap();
}
