//! `roce`: command-line tools for the roce-emu software RoCEv2 HCA.
//!
//! `roce decode FILE` reads a pcap/pcapng capture and prints every RoCEv2
//! packet in InfiniBand terms, checks its ICRC, and can explain what each
//! packet means for the two queue pairs. See docs/decode.md.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod conform;
mod counters_fmt;
mod decode;
#[cfg(feature = "demo")]
mod demo;
mod devices;
mod install;
mod logging;
mod perf;
mod run;

const ABOUT: &str = "Tools for RoCEv2, the InfiniBand transport (RDMA: SEND, WRITE, READ, \
atomics between queue pairs) carried in UDP datagrams to port 4791 over ordinary IP networks.";

#[derive(Parser, Debug)]
#[command(name = "roce", version, about = ABOUT, long_about = None)]
#[command(
    after_help = "Example:\n  roce decode capture.pcap --explain   decode a capture and explain every RoCEv2 packet\n\n\
Run `roce decode --help` for the decoder's options, output and exit status."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: logging::LogArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Decode the RoCEv2 packets of a pcap/pcapng capture and check their ICRCs.
    #[command(long_about = decode::DECODE_LONG, after_help = decode::DECODE_AFTER)]
    Decode(decode::DecodeArgs),
    /// Run two emulated HCAs on a simulated lossy network and verify every byte they move.
    #[cfg(feature = "demo")]
    #[command(long_about = demo::DEMO_LONG, after_help = demo::DEMO_AFTER)]
    Demo(demo::DemoArgs),
    /// List the configured devices like ibv_devices (ROCE_EMU_DEVICES, devices.conf).
    Devices,
    /// Print device and port attributes like ibv_devinfo (-v: all of them, and the GID table).
    Devinfo(devices::DevinfoArgs),
    /// Print the counters of running devices with rxe's hw_counters names.
    #[command(long_about = devices::stats::STATS_LONG, after_help = devices::stats::STATS_AFTER)]
    Stats(devices::stats::StatsArgs),
    /// perftest-like bandwidth (write/read/send/atomic) and latency (lat) between two emulated HCAs.
    #[command(long_about = perf::PERF_LONG, after_help = perf::PERF_AFTER)]
    Perf(perf::PerfArgs),
    /// Run a program (and all it starts) on the roce-emu devices, found as kernel devices are.
    #[command(long_about = run::RUN_LONG, after_help = run::RUN_AFTER)]
    Run(run::RunArgs),
    /// Install the libraries `roce run` needs beside roce (after `cargo install`: roce install).
    #[command(long_about = install::INSTALL_LONG, after_help = install::INSTALL_AFTER)]
    Install(install::InstallArgs),
    /// Test a RoCE device against IBA's rules packet by packet (roce-emu, kernel rxe, a NIC).
    #[command(long_about = conform::CONFORM_LONG, after_help = conform::CONFORM_AFTER)]
    Conform(conform::ConformArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Err(e) = logging::init(&cli.log) {
        eprintln!("roce: {e}");
        return ExitCode::from(2);
    }
    match cli.command {
        Command::Decode(args) => decode::run(&args),
        #[cfg(feature = "demo")]
        Command::Demo(args) => demo::run(&args),
        Command::Devices => devices::run_devices(),
        Command::Devinfo(args) => devices::run_devinfo(&args),
        Command::Stats(args) => devices::stats::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Install(args) => install::run(&args),
        Command::Conform(args) => conform::run(&args),
    }
}
