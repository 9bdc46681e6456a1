//! `roce perf` across processes, the front: the options checked
//! (`args.rs`), the engine run (`roce_workloads::perf::remote`: one side
//! of a perftest run, facing `ib_write_bw` & co. or another `roce perf`),
//! and its report as perftest prints one, with our data checks.
//!
//! * server: `roce perf write --server` (or with `-d DEV`, `--local IP`,
//!   `-p PORT` and no address): listens on TCP `-p` (18515);
//! * client: `roce perf write 192.168.77.2 -s 4096 -n 100`.

use super::args::{self, PerfArgs, TestKind};
use roce_workloads::perf::remote::{self, Event, Outcome, RemoteConfig};
use roce_workloads::perftest::Negotiated;
use std::process::ExitCode;

const LINE: &str =
    "---------------------------------------------------------------------------------------";

/// Run the cross-process mode; returns the exit status (0 ok, 1 test
/// failure, 2 usage).
pub fn run(a: &PerfArgs) -> ExitCode {
    let cfg = match args::validate_remote(a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("roce perf: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(spec) = &a.faults {
        // the transports read it when the device is opened
        std::env::set_var("ROCE_EMU_FAULTS", spec);
    }
    match report(&cfg, a) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("roce perf: {e}");
            ExitCode::from(1)
        }
    }
}

/// Run, printing as it goes; then the results. Whether everything passed.
fn report(cfg: &RemoteConfig, a: &PerfArgs) -> Result<bool, String> {
    let out = remote::run(cfg, &mut |e| print_event(cfg, e))?;
    if let Some(path) = &a.oob_log {
        let mut s = String::new();
        for (d, m) in &out.transcript {
            s += &format!("{:?} {} {}\n", d, m.len(), hex(m));
        }
        std::fs::write(path, s).map_err(|e| format!("--oob-log {}: {e}", path.display()))?;
    }
    print_results(cfg, a.report_gbits, &out);
    let nz: Vec<String> =
        out.counters.iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k}={v}")).collect();
    println!(" counters: {}", nz.join(" "));
    for (good, what) in &out.checks {
        println!(" data check: {} ({what})", if *good { "OK" } else { "FAILED" });
    }
    if let Some(err) = &out.error {
        println!(" {err}");
    }
    let ops: Vec<String> = out.ops.iter().map(|o| o.to_string()).collect();
    println!(
        " result: role={} peer={} ops={} checks_ok={} checks_failed={} error={}",
        if out.client { "client" } else { "server" },
        if out.remote_is_ours { "roce" } else { "perftest" },
        ops.join(","),
        out.checks.iter().filter(|c| c.0).count(),
        out.checks.iter().filter(|c| !c.0).count(),
        if out.error.is_some() { "yes" } else { "no" }
    );
    Ok(out.ok())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What the run says while it runs.
fn print_event(cfg: &RemoteConfig, e: Event) {
    match e {
        Event::Waiting => {
            println!("\n************************************");
            println!("* Waiting for client to connect... *");
            println!("************************************");
        }
        Event::Header { device, neg, sgid_index } => print_header(cfg, neg, device, sgid_index),
        Event::Connected { mine, rem, neg } => {
            for (i, (m, r)) in mine.iter().zip(rem).enumerate() {
                println!(
                    " local address: LID {:#06x} QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x}  GID {}",
                    m.lid,
                    m.qpn,
                    m.psn,
                    m.rkey,
                    m.vaddr,
                    m.gid_addr()
                );
                println!(
                    " remote address: LID {:#06x} QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x}  GID {}  (QP {i})",
                    r.lid,
                    r.qpn,
                    r.psn,
                    r.rkey,
                    r.vaddr,
                    r.gid_addr()
                );
            }
            println!(
                " peer: {} (perftest version {}), cycle buffer {} B, cache line {} B, MTU {}",
                if neg.remote_is_ours { "roce perf" } else { "perftest" },
                neg.remote_version,
                neg.cycle_buffer,
                neg.cache_line,
                neg.mtu_bytes()
            );
        }
        Event::ServerWaits => {
            println!(" (server: the client runs the test; waiting for its end)")
        }
        Event::PeerReport(theirs) => println!(
            " peer reported: {} B x {} iterations, BW average {:.2} MB/sec, {:.6} Mpps",
            theirs.size, theirs.iters, theirs.bw_avg, theirs.msg_rate
        ),
    }
}

fn print_header(cfg: &RemoteConfig, neg: &Negotiated, device: &str, sgid_index: u8) {
    let title = match (cfg.test, cfg.cas) {
        (TestKind::Write, _) => "RDMA_Write BW Test",
        (TestKind::Read, _) => "RDMA_Read BW Test",
        (TestKind::Send, _) => "Send BW Test",
        (TestKind::Atomic, false) => "Atomic FETCH_AND_ADD BW Test",
        (TestKind::Atomic, true) => "Atomic CMP_AND_SWAP BW Test",
        (TestKind::Lat, _) => "Send Latency Test",
    };
    let line = LINE;
    println!("{line}\n                    {title}");
    println!(" Dual-port       : OFF\t\tDevice         : {device}");
    println!(" Number of qps   : {}\t\tTransport type : IB", cfg.qps);
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    println!(" TX depth        : {}", cfg.tx_depth);
    if matches!(cfg.test, TestKind::Send | TestKind::Lat) {
        println!(" RX depth        : {}", cfg.rx_depth);
    }
    println!(" Mtu             : {}[B]", neg.mtu_bytes());
    println!(" Link type       : Ethernet");
    println!(" GID index       : {sgid_index}");
    println!(" Max inline data : 0[B]");
    println!(" rdma_cm QPs     : OFF");
    println!(" Data ex. method : Ethernet");
    println!("{line}");
}

fn print_results(cfg: &RemoteConfig, gbits: bool, out: &Outcome) {
    let line = LINE;
    let size = cfg.size;
    let total: u64 = out.ops.iter().sum();
    if cfg.test == TestKind::Lat {
        let mut s = out.rtt_us.clone();
        s.sort_by(|a, b| a.total_cmp(b));
        println!(
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
        );
        if s.is_empty() {
            println!(" {:<7} {:<10}  (no samples on this side)", cfg.size, out.ops[0]);
        } else {
            let avg = s.iter().sum::<f64>() / s.len() as f64;
            println!(
                " {:<7} {:<10}  {:<7.2}        {:<7.2}      {:<7.2}          {:<7.2}",
                cfg.size,
                s.len(),
                s[0] / 2.0,
                s[s.len() - 1] / 2.0,
                s[s.len() / 2] / 2.0,
                avg / 2.0
            );
        }
        println!("{line}");
        return;
    }
    if !out.client {
        println!(" (server side) {size} operations per QP counted here: {:?}", out.ops);
        println!("{line}");
        return;
    }
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    let mbps = total as f64 * f64::from(size) / secs / 1_048_576.0;
    // perftest's units: MB/sec = 2^20 bytes/s; with --report_gbits, Gb/sec = 10^9 bits/s
    let (unit, scale) = if gbits { ("Gb/sec", 1_048_576.0 * 8.0 / 1e9) } else { ("MB/sec", 1.0) };
    println!(" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]");
    println!(
        " {:<10} {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        cfg.size,
        out.ops.first().copied().unwrap_or(0),
        out.peak_mbps.max(mbps) * scale,
        mbps * scale,
        total as f64 / secs / 1e6
    );
    println!("{line}");
}
