//! The InfiniBand Communication Manager (IBA chapter 12) as RoCE carries
//! it — the protocol `rdma_cm` speaks over QP1 — as a sans-IO state machine.
//!
//! One [`Cm`] per port. No sockets and no clock inside: received MADs come
//! in through [`Cm::handle_mad`] with the current time as a [`Duration`](core::time::Duration) on
//! the caller's clock, expired timers through [`Cm::handle_timeout`];
//! MADs to send ([`Cm::poll_transmit`]), events for the application
//! ([`Cm::poll_event`]) and the next deadline ([`Cm::poll_timeout`]) are
//! pulled. The wire format is [`roce_packet::mad`]'s.
//!
//! The connection state machine follows IBA 12.9 (REQ, MRA, REP, RTU,
//! DREQ, DREP, REJ, with retransmissions every 4.096 µs × 2^timeout up to
//! `max_cm_retries`, duplicate detection, stale connections and TimeWait),
//! and SIDR (12.11) for UD services. LAP/APR (alternate paths) and RD are
//! not supported. `docs/cm.md` has the state diagram, the timers and the
//! mapping to librdmacm's events.
//!
//! ```
//! use roce_cm::*;
//! use roce_packet::mad::{ip_service_id, port_space};
//! use std::net::Ipv4Addr;
//! use std::time::Duration;
//!
//! let (ga, gb) = (ipv4_gid(Ipv4Addr::new(10, 0, 0, 1)), ipv4_gid(Ipv4Addr::new(10, 0, 0, 2)));
//! let mut a = Cm::new(CmConfig::new(ga, 0xA, 1));
//! let mut b = Cm::new(CmConfig::new(gb, 0xB, 2));
//! let now = Duration::ZERO;
//! let service = ip_service_id(port_space::TCP, 7174);
//! b.listen(service).unwrap();
//! let psn = a.random_psn();
//! let ca = a.connect(now, ConnectRequest::new(service, PeerAddr::new(gb), 0x11, psn)).unwrap();
//! let mut pump = |from: &mut Cm, to: &mut Cm, src| {
//!     while let Some(t) = from.poll_transmit() {
//!         to.handle_mad(now, PeerAddr::new(src), &t.mad);
//!     }
//! };
//! pump(&mut a, &mut b, ga); // REQ
//! let Some(CmEvent::ConnectRequest { conn: cb, req, .. }) = b.poll_event() else { panic!() };
//! assert_eq!((req.remote_qpn, req.starting_psn), (0x11, psn));
//! b.accept(now, cb, AcceptParams::new(0x12, 0x1000)).unwrap();
//! pump(&mut b, &mut a, gb); // REP
//! let Some(CmEvent::ConnectResponse { conn, rep }) = a.poll_event() else { panic!() };
//! assert_eq!((conn, rep.remote_qpn), (ca, 0x12));
//! a.complete_connect(ca).unwrap(); // the QP is in RTS: RTU
//! assert_eq!(a.poll_event(), Some(CmEvent::Established { conn: ca }));
//! pump(&mut a, &mut b, ga); // RTU
//! assert_eq!(b.poll_event(), Some(CmEvent::Established { conn: cb }));
//! ```

#![forbid(unsafe_code)]

mod machine;
mod types;

pub use machine::{Cm, ConnInfo};
pub use types::*;
