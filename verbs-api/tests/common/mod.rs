//! Helpers the verbs-api and roce-host tests share (host/tests includes this file by path): access flags, two devices on a
//! simulated network, an RC node (PD, CQ, MR, QP), connecting two QPs,
//! waiting for one completion, and polling a channel's fd. The network
//! itself is the emulator's sim fabric (`SimNet` owns it).
#![allow(dead_code)]

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use roce_sim::SimNet;
use roce_verbs_api::*;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::time::Duration;

/// Every remote and local access right.
pub const ALL: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

/// Local and remote write.
pub const ACCESS: AccessFlags =
    AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0);

/// The two addresses of a simulated pair: 10.0.0.1 and 10.0.0.2.
pub fn sim_addrs() -> [IpAddr; 2] {
    ["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()]
}

/// Two devices on `net` named `names`, at [`sim_addrs`], opened.
pub fn two_contexts(net: &SimNet, names: [&str; 2]) -> (Context, Context) {
    let [ia, ib] = sim_addrs();
    (net.add_device(names[0], ia).open(), net.add_device(names[1], ib).open())
}

/// One side of an RC connection.
pub struct Node {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub mr: Mr,
    pub qp: Qp,
}

/// An RC node on `ctx`: a 64-entry CQ, a 64 KiB region with [`ALL`]
/// rights, a QP with 32 send and 32 receive WRs.
pub fn node(ctx: Context) -> Node {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr = pd.reg_mr(1 << 16, ALL).unwrap();
    let qp = pd.qp_builder(&cq, &cq).max_send_wr(32).max_recv_wr(32).build().unwrap();
    Node { ctx, pd, cq, mr, qp }
}

/// A PD, a CQ of `cqe` entries and an RC QP with default capabilities
/// on `ctx`.
pub fn rc_qp(ctx: &Context, cqe: u32) -> (Pd, Cq, Qp) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(cqe).unwrap();
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    (pd, cq, qp)
}

/// Connect two RC QPs to each other, starting at `psn_a` and `psn_b`.
pub fn connect_qps(qa: &Qp, qb: &Qp, psn_a: u32, psn_b: u32, opts: &ConnectOptions) {
    let (ea, eb) = (qa.endpoint(psn_a), qb.endpoint(psn_b));
    qa.connect(&ea, &eb, opts).unwrap();
    qb.connect(&eb, &ea, opts).unwrap();
}

/// A UC QP on each side (`pa` with CQ `ca`, `pb` with `cb`), connected to
/// each other starting at `psn_a` and `psn_b`.
pub fn uc_pair(pa: &Pd, ca: &Cq, pb: &Pd, cb: &Cq, psn_a: u32, psn_b: u32) -> (Qp, Qp) {
    let qa = pa.qp_builder(ca, ca).qp_type(QpType::Uc).build().unwrap();
    let qb = pb.qp_builder(cb, cb).qp_type(QpType::Uc).build().unwrap();
    let opts = ConnectOptions::default();
    let (ea, eb) = (qa.endpoint(psn_a), qb.endpoint(psn_b));
    qa.connect_uc(&ea, &eb, &opts).unwrap();
    qb.connect_uc(&eb, &ea, &opts).unwrap();
    (qa, qb)
}

/// Connect two nodes' QPs (PSNs 0x100 and 0x200, default options).
pub fn connect(a: &Node, b: &Node) {
    connect_qps(&a.qp, &b.qp, 0x100, 0x200, &ConnectOptions::default());
}

/// Exactly one completion from `cq`, waiting at most `wall`.
pub fn one_wc(cq: &Cq, wall: Duration) -> WorkCompletion {
    let w = cq.poll_blocking(1, Budget { events: 100_000, wall }).unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    w[0]
}

/// Whether `fd` becomes readable within `ms` milliseconds.
pub fn readable(fd: &impl AsFd, ms: u16) -> bool {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let n = poll(&mut fds, PollTimeout::from(ms)).unwrap();
    n == 1 && fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLIN))
}

/// Every completion `cq` holds now (polled without waiting), in order.
pub fn poll_all(cq: &Cq) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wcs = [WorkCompletion::EMPTY; 16];
    loop {
        let n = cq.poll_into(&mut wcs).expect("poll_cq");
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&wcs[..n]);
    }
}
