//! `srq_pingpong`: rdma-core's `ibv_srq_pingpong` over an emulated device
//! (see `roce_examples::srq_pingpong` for the flags and the differences).
//!
//! ```text
//! ROCE_EMU_DEVICES=roce0=udp:127.0.0.2,roce1=udp:127.0.0.3
//! srq_pingpong -d roce0 -g 1                 # server
//! srq_pingpong -d roce1 -g 1 127.0.0.2       # client
//! ```

fn main() -> std::process::ExitCode {
    roce_examples::srq_pingpong::main()
}
