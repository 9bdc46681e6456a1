//! `uc_pingpong`: rdma-core's `ibv_uc_pingpong` over an emulated device
//! (see `roce_examples::pingpong` for the flags and the few differences).
//!
//! ```text
//! ROCE_EMU_DEVICES=roce0=udp:127.0.0.2,roce1=udp:127.0.0.3
//! uc_pingpong -d roce0 -g 1                 # server
//! uc_pingpong -d roce1 -g 1 127.0.0.2       # client
//! ```

fn main() -> std::process::ExitCode {
    roce_examples::pingpong::main(roce_examples::pingpong::Kind::Uc)
}
