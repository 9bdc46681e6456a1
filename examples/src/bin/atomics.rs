//! Atomics: the client updates a 64-bit counter in the server's memory
//! with FETCH_AND_ADD and COMPARE_AND_SWAP. Each returns the value the
//! counter had before, into the client's buffer; the server's HCA performs
//! the operation atomically, without the server's CPU.
//!
//! ```text
//! atomics --addr 127.0.0.2                    # server: a counter starting at 100
//! atomics --addr 127.0.0.3 127.0.0.2          # client: adds 5 three times, then swaps
//! ```

use roce_examples::keyx::{main_of, Args, Side};
use roce_verbs_api::{AccessFlags, RKey, SendWr, WrOpcode};
use std::process::ExitCode;

fn main() -> ExitCode {
    main_of("atomics", run)
}

fn run(args: &Args) -> Result<(), String> {
    // 1.-4. Device, PD, CQ, RC QP, exchange, connection (see
    //    `Side::connect`). The counter: 8 bytes the peer may update
    //    atomically (REMOTE_ATOMIC, which requires LOCAL_WRITE), 100 at the
    //    server. The client's 8 bytes receive the original values.
    let server = Side::is_server(args);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC;
    let mut side = Side::connect(args, 8, access, |_, mr| {
        if server {
            mr.write_u64(0, 100).map_err(|e| e.to_string())?;
        }
        Ok(())
    })?;
    let mr = &side.mr;

    if server {
        side.link.wait_done()?;
        let v = mr.read_u64(0).map_err(|e| e.to_string())?;
        println!("server: counter is now {v}");
        return Ok(());
    }

    let remote = |op, id| {
        SendWr::new(id, op)
            .sge(mr.addr(), 8, mr.lkey())
            .remote(side.peer.va, RKey::new(side.peer.rkey))
    };
    // 5. Client: FETCH_AND_ADD(5) three times. `compare_add` is the addend.
    for i in 0..3 {
        let mut wr = remote(WrOpcode::AtomicFetchAndAdd, i);
        wr.compare_add = 5;
        side.qp.post_send(wr).map_err(|e| e.to_string())?;
        side.wait_one("atomic")?;
        println!("client: fetch_and_add(5) found {}", mr.read_u64(0).map_err(|e| e.to_string())?);
    }
    // 6. COMPARE_AND_SWAP: if the counter is 115, make it 1000.
    let mut wr = remote(WrOpcode::AtomicCmpAndSwp, 9);
    wr.compare_add = 115;
    wr.swap = 1000;
    side.qp.post_send(wr).map_err(|e| e.to_string())?;
    side.wait_one("atomic")?;
    println!(
        "client: compare_and_swap(115 -> 1000) found {}",
        mr.read_u64(0).map_err(|e| e.to_string())?
    );
    side.link.send_done()
}
