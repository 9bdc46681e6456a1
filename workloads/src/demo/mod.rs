//! The workloads of `roce demo` (its front, options and printing, is
//! `cli/src/demo/`):
//!
//! * the workload ([`Workload`], `traffic.rs`; what it runs and reports:
//!   `config.rs`): the deterministic, verified operation mix of `roce demo`
//!   and the soaks;
//! * the lessons of `roce demo --scenario NAME` ([`Lesson`], `lesson.rs`):
//!   the [`lab`] they run in and the [`scenarios`] themselves;
//! * a pcap capture of the simulated fabric ([`PcapTap`]).

mod capture;
mod config;
mod fabric;
pub mod lab;
mod lesson;
pub mod scenarios;
mod traffic;

pub use capture::PcapTap;
pub use config::{
    fill_pattern, Delivery, OpKind, PairType, Progress, QpTypes, Report, WorkloadConfig,
};
pub use fabric::{run_fabric_lesson, FabricLesson, FABRIC_SCENARIOS};
pub use lab::{status_name, wc_opcode_name, Scenario};
pub use lesson::Lesson;
pub use scenarios::SCENARIOS;
pub use traffic::{run, SetupError, Workload};
