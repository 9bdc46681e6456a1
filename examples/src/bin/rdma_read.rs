//! RDMA READ: the client fetches bytes from the server's memory. The
//! server only exposes a buffer (REMOTE_READ) and waits; its HCA answers
//! the READ request by itself.
//!
//! ```text
//! rdma_read --addr 127.0.0.2                  # server: exposes a buffer
//! rdma_read --addr 127.0.0.3 127.0.0.2        # client: reads it
//! ```

use roce_examples::keyx::{main_of, Args, Side};
use roce_verbs_api::{AccessFlags, RKey, SendWr, WrOpcode};
use std::process::ExitCode;

const LEN: usize = 4096;

fn main() -> ExitCode {
    main_of("rdma_read", run)
}

fn run(args: &Args) -> Result<(), String> {
    // 1.-4. Device, PD, CQ, RC QP, buffer, exchange, connection (see
    //    `Side::connect`). The server's buffer allows REMOTE_READ and holds
    //    a text; the client's buffer is written by its own HCA with the
    //    READ response, so LOCAL_WRITE.
    let server = Side::is_server(args);
    let access = if server { AccessFlags::REMOTE_READ } else { AccessFlags::LOCAL_WRITE };
    let mut side = Side::connect(args, LEN, access, |ctx, mr| {
        if server {
            let text = format!("the server at {} wrote this before the client read it", ctx.addr());
            mr.write(0, text.as_bytes()).map_err(|e| e.to_string())?;
        }
        Ok(())
    })?;

    if server {
        side.link.wait_done()?;
        println!("server: the client has read my buffer");
        return Ok(());
    }

    // 5. Client: one READ of 64 bytes from the remote buffer into ours.
    let mr = &side.mr;
    let wr = SendWr::new(7, WrOpcode::RdmaRead)
        .sge(mr.addr(), 64, mr.lkey())
        .remote(side.peer.va, RKey::new(side.peer.rkey));
    side.qp.post_send(wr).map_err(|e| e.to_string())?;
    side.wait_one("read")?;
    // 6. The completion means the data is in our buffer.
    let mut got = vec![0u8; 64];
    mr.read(0, &mut got).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&got);
    println!("client: read {:?}", text.trim_end_matches('\0'));
    side.link.send_done()
}
