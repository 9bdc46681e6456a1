//! RDMA WRITE: the client puts a message straight into the server's
//! memory. The server's CPU takes no part: it posts no receive and gets no
//! completion; it only learns from the TCP "done" that the data is there.
//!
//! ```text
//! rdma_write --addr 127.0.0.2                 # server: exposes a buffer
//! rdma_write --addr 127.0.0.3 127.0.0.2       # client: writes into it
//! ```
//! (or `-d NAME` with ROCE_EMU_DEVICES; ROCE_EMU_PCAP=DIR records the packets)

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
            eprintln!("rdma_write: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    // 1. Open the device and create the usual objects: a protection domain,
    //    a completion queue and a reliable-connected (RC) queue pair.
    let dev =
        roce_examples::open_device_with(args.ib_dev.as_deref(), args.addr, args.pcap.as_deref())?;
    let ctx = dev.open();
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(16).map_err(|e| e.to_string())?;
    let qp = pd.qp_builder(&cq, &cq).build().map_err(|e| e.to_string())?;

    // 2. Register a buffer. The server allows remote writes into it
    //    (REMOTE_WRITE, which requires LOCAL_WRITE); the client's buffer is
    //    only read locally by its own HCA, so it needs nothing special.
    let access = if args.server.is_none() {
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
    } else {
        AccessFlags::LOCAL_WRITE
    };
    let mr = pd.reg_mr(LEN, access).map_err(|e| e.to_string())?;

    // 3. Exchange what the peer needs: how to reach our QP, and where our
    //    buffer is (virtual address + rkey).
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

    // 4. Connect the QP: RESET -> INIT -> RTR (towards the peer) -> RTS.
    let local = QpEndpoint { addr: me.addr, qpn: me.qpn, psn: me.psn };
    let remote = QpEndpoint { addr: peer.addr, qpn: peer.qpn, psn: peer.psn };
    qp.connect(&local, &remote, &ConnectOptions::default()).map_err(|e| e.to_string())?;

    if args.server.is_none() {
        // Server: nothing to do but wait; the write lands without us.
        link.wait_done()?;
        let mut msg = vec![0u8; 64];
        mr.read(0, &mut msg).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&msg);
        println!("server: my buffer now holds {:?}", text.trim_end_matches('\0'));
        return Ok(());
    }

    // 5. Client: fill the local buffer and post an RDMA WRITE that names
    //    the remote address and rkey. SIGNALED asks for a completion.
    let text = format!("hello from {} by RDMA WRITE", ctx.addr());
    mr.write(0, text.as_bytes()).map_err(|e| e.to_string())?;
    let wr = SendWr::new(1, WrOpcode::RdmaWrite)
        .sge(mr.addr(), text.len() as u32, mr.lkey())
        .remote(peer.va, RKey::new(peer.rkey));
    qp.post_send(wr).map_err(|e| e.to_string())?;

    // 6. Wait for the completion: the server's HCA acknowledged the data.
    let wc = cq
        .poll_blocking(1, Budget { events: 0, wall: Duration::from_secs(10) })
        .map_err(|e| e.to_string())?;
    match wc.first() {
        Some(wc) if wc.status == WcStatus::Success => {
            println!("client: wrote {} bytes to {:#x} (rkey {:#x})", text.len(), peer.va, peer.rkey)
        }
        Some(wc) => return Err(format!("write failed: {}", wc.status)),
        None => return Err("no completion within 10 s".into()),
    }
    link.send_done()
}
