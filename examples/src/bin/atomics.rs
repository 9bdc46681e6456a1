//! Atomics: the client updates a 64-bit counter in the server's memory
//! with FETCH_AND_ADD and COMPARE_AND_SWAP. Each returns the value the
//! counter had before, into the client's buffer; the server's HCA performs
//! the operation atomically, without the server's CPU.
//!
//! ```text
//! atomics --addr 127.0.0.2                    # server: a counter starting at 100
//! atomics --addr 127.0.0.3 127.0.0.2          # client: adds 5 three times, then swaps
//! ```

use clap::Parser;
use roce_examples::keyx::{Args, Link, Peer};
use roce_verbs_api::{
    AccessFlags, Budget, ConnectOptions, Cq, QpEndpoint, RKey, SendWr, WcStatus, WrOpcode,
};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("atomics: {e}");
            ExitCode::from(1)
        }
    }
}

/// Wait for one successful completion.
fn wait_one(cq: &Cq) -> Result<(), String> {
    let wc = cq
        .poll_blocking(1, Budget { events: 0, wall: Duration::from_secs(10) })
        .map_err(|e| e.to_string())?;
    match wc.first() {
        Some(wc) if wc.status == WcStatus::Success => Ok(()),
        Some(wc) => Err(format!("atomic failed: {}", wc.status)),
        None => Err("no completion within 10 s".into()),
    }
}

fn run(args: &Args) -> Result<(), String> {
    // 1. Device, PD, CQ, RC QP (see rdma_write.rs for the commentary).
    let dev =
        roce_examples::open_device_with(args.ib_dev.as_deref(), args.addr, args.pcap.as_deref())?;
    let ctx = dev.open();
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(16).map_err(|e| e.to_string())?;
    let qp = pd.qp_builder(&cq, &cq).build().map_err(|e| e.to_string())?;

    // 2. The counter: 8 bytes the peer may update atomically
    //    (REMOTE_ATOMIC, which requires LOCAL_WRITE). The client's 8 bytes
    //    receive the original values.
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC;
    let mr = pd.reg_mr(8, access).map_err(|e| e.to_string())?;
    if args.server.is_none() {
        mr.write_u64(0, 100).map_err(|e| e.to_string())?;
    }

    // 3. Exchange and connect.
    let me = Peer {
        addr: ctx.addr(),
        qpn: qp.qpn().value(),
        psn: rand::random::<u32>() & 0xff_ffff,
        va: mr.addr(),
        len: 8,
        rkey: mr.rkey().value(),
    };
    let mut link = match &args.server {
        None => Link::accept(args.port, &me)?,
        Some(host) => Link::connect(host, args.port, &me)?,
    };
    let peer = link.peer;
    let local = QpEndpoint { addr: me.addr, qpn: me.qpn, psn: me.psn };
    let remote = QpEndpoint { addr: peer.addr, qpn: peer.qpn, psn: peer.psn };
    qp.connect(&local, &remote, &ConnectOptions::default()).map_err(|e| e.to_string())?;

    if args.server.is_none() {
        link.wait_done()?;
        let v = mr.read_u64(0).map_err(|e| e.to_string())?;
        println!("server: counter is now {v}");
        return Ok(());
    }

    // 4. Client: FETCH_AND_ADD(5) three times. `compare_add` is the addend.
    for i in 0..3 {
        let mut wr = SendWr::new(i, WrOpcode::AtomicFetchAndAdd)
            .sge(mr.addr(), 8, mr.lkey())
            .remote(peer.va, RKey::new(peer.rkey));
        wr.compare_add = 5;
        qp.post_send(wr).map_err(|e| e.to_string())?;
        wait_one(&cq)?;
        println!("client: fetch_and_add(5) found {}", mr.read_u64(0).map_err(|e| e.to_string())?);
    }
    // 5. COMPARE_AND_SWAP: if the counter is 115, make it 1000.
    let mut wr = SendWr::new(9, WrOpcode::AtomicCmpAndSwp)
        .sge(mr.addr(), 8, mr.lkey())
        .remote(peer.va, RKey::new(peer.rkey));
    wr.compare_add = 115;
    wr.swap = 1000;
    qp.post_send(wr).map_err(|e| e.to_string())?;
    wait_one(&cq)?;
    println!(
        "client: compare_and_swap(115 -> 1000) found {}",
        mr.read_u64(0).map_err(|e| e.to_string())?
    );
    link.send_done()
}
