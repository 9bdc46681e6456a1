//! RDMA WRITE: the client puts a message straight into the server's
//! memory. The server's CPU takes no part: it posts no receive and gets no
//! completion; it only learns from the TCP "done" that the data is there.
//!
//! ```text
//! rdma_write --addr 127.0.0.2                 # server: exposes a buffer
//! rdma_write --addr 127.0.0.3 127.0.0.2       # client: writes into it
//! ```
//! (or `-d NAME` with ROCE_EMU_DEVICES; ROCE_EMU_PCAP=DIR records the packets)

use roce_examples::keyx::{main_of, Args, Side};
use roce_verbs_api::{AccessFlags, RKey, SendWr, WrOpcode};
use std::process::ExitCode;

const LEN: usize = 4096;

fn main() -> ExitCode {
    main_of("rdma_write", run)
}

fn run(args: &Args) -> Result<(), String> {
    // 1.-4. Device, PD, CQ, RC QP, a registered buffer, the exchange and
    //    the connection (see `Side::connect`). The server allows remote
    //    writes into its buffer (REMOTE_WRITE, which requires LOCAL_WRITE);
    //    the client's buffer is only read locally by its own HCA, so it
    //    needs nothing special.
    let access = if Side::is_server(args) {
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
    } else {
        AccessFlags::LOCAL_WRITE
    };
    let mut side = Side::connect(args, LEN, access, |_, _| Ok(()))?;
    let mr = &side.mr;

    if Side::is_server(args) {
        // Server: nothing to do but wait; the write lands without us.
        side.link.wait_done()?;
        let mut msg = vec![0u8; 64];
        mr.read(0, &mut msg).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&msg);
        println!("server: my buffer now holds {:?}", text.trim_end_matches('\0'));
        return Ok(());
    }

    // 5. Client: fill the local buffer and post an RDMA WRITE that names
    //    the remote address and rkey. SIGNALED asks for a completion.
    let text = format!("hello from {} by RDMA WRITE", side.ctx.addr());
    mr.write(0, text.as_bytes()).map_err(|e| e.to_string())?;
    let wr = SendWr::new(1, WrOpcode::RdmaWrite)
        .sge(mr.addr(), text.len() as u32, mr.lkey())
        .remote(side.peer.va, RKey::new(side.peer.rkey));
    side.qp.post_send(wr).map_err(|e| e.to_string())?;

    // 6. Wait for the completion: the server's HCA acknowledged the data.
    side.wait_one("write")?;
    println!(
        "client: wrote {} bytes to {:#x} (rkey {:#x})",
        text.len(),
        side.peer.va,
        side.peer.rkey
    );
    side.link.send_done()
}
