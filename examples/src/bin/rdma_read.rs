//! RDMA READ: the client fetches bytes from the server's memory. The
//! server only exposes a buffer (REMOTE_READ) and waits; its HCA answers
//! the READ request by itself.
//!
//! ```text
//! rdma_read --addr 127.0.0.2                  # server: exposes a buffer
//! rdma_read --addr 127.0.0.3 127.0.0.2        # client: reads it
//! ```

use clap::Parser;
use roce_examples::keyx::{Args, Link, Peer};
use roce_verbs_api::{
    AccessFlags, Budget, ConnectOptions, QpEndpoint, RKey, SendWr, WcStatus, WrOpcode,
};
use std::process::ExitCode;
use std::time::Duration;

const LEN: usize = 4096;

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma_read: {e}");
            ExitCode::from(1)
        }
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

    // 2. The server's buffer allows REMOTE_READ; the client's buffer is
    //    written by its own HCA with the READ response, so LOCAL_WRITE.
    let access =
        if args.server.is_none() { AccessFlags::REMOTE_READ } else { AccessFlags::LOCAL_WRITE };
    let mr = pd.reg_mr(LEN, access).map_err(|e| e.to_string())?;
    if args.server.is_none() {
        let text = format!("the server at {} wrote this before the client read it", ctx.addr());
        mr.write(0, text.as_bytes()).map_err(|e| e.to_string())?;
    }

    // 3. Exchange addresses, QP numbers, PSNs and the buffer's rkey.
    let me = Peer {
        addr: ctx.addr(),
        qpn: qp.qpn().value(),
        psn: rand::random::<u32>() & 0xff_ffff,
        va: mr.addr(),
        len: LEN as u64,
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
        println!("server: the client has read my buffer");
        return Ok(());
    }

    // 4. Client: one READ of 64 bytes from the remote buffer into ours.
    let wr = SendWr::new(7, WrOpcode::RdmaRead)
        .sge(mr.addr(), 64, mr.lkey())
        .remote(peer.va, RKey::new(peer.rkey));
    qp.post_send(wr).map_err(|e| e.to_string())?;
    let wc = cq
        .poll_blocking(1, Budget { events: 0, wall: Duration::from_secs(10) })
        .map_err(|e| e.to_string())?;
    match wc.first() {
        Some(wc) if wc.status == WcStatus::Success => {
            // 5. The completion means the data is in our buffer.
            let mut got = vec![0u8; 64];
            mr.read(0, &mut got).map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&got);
            println!("client: read {:?}", text.trim_end_matches('\0'));
        }
        Some(wc) => return Err(format!("read failed: {}", wc.status)),
        None => return Err("no completion within 10 s".into()),
    }
    link.send_done()
}
