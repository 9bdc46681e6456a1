//! `roce conform`: an IBA conformance tester for RoCE devices.
//!
//! The tester speaks raw RoCEv2 from a UDP socket of its own
//! ([`wire::Wire`]); the device under test runs an [`agent::Agent`] that
//! does only what an application would (create a QP towards the tester,
//! post work, poll completions). Each [`case::Case`] of the
//! [`catalogue`] cites the IBA rule it checks and is a list of steps:
//! crafted requests and the answers they must get (the device as
//! responder), or posted work and the packets, retransmissions and
//! completions it must produce (the device as requester). [`run::Runner`]
//! plays them; [`report`] prints the verdicts.

pub mod agent;
#[cfg(feature = "clap")]
pub mod args;
pub mod case;
pub mod catalogue;
pub mod local;
pub mod remote;
pub mod report;
pub mod run;
pub mod session;
pub mod wire;
