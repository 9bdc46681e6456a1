//! Transport counters: atomics shared between the driver thread and the
//! application, read as a [`CountersSnapshot`].

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Live counters of one [`crate::UdpTransport`] (relaxed atomics).
        #[derive(Debug, Default)]
        pub struct TransportCounters {
            $( $(#[$doc])* pub $name: AtomicU64, )*
        }

        /// A copy of [`TransportCounters`] at one moment.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct CountersSnapshot {
            $( $(#[$doc])* pub $name: u64, )*
        }

        impl TransportCounters {
            /// Read every counter.
            pub fn snapshot(&self) -> CountersSnapshot {
                CountersSnapshot { $( $name: self.$name.load(Ordering::Relaxed), )* }
            }
        }

        impl CountersSnapshot {
            /// `(name, value)` pairs, in declaration order.
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                vec![$( (stringify!($name), self.$name), )*]
            }

            /// What every counter gained since `earlier` (a snapshot of the
            /// same counters taken before; 0 where it did not grow).
            pub fn since(&self, earlier: &CountersSnapshot) -> CountersSnapshot {
                CountersSnapshot { $( $name: self.$name.saturating_sub(earlier.$name), )* }
            }
        }
    };
}

counters! {
    /// Datagrams handed to the kernel successfully (GSO segments counted one by one).
    dgrams_out,
    /// UDP payload bytes of `dgrams_out`.
    bytes_out,
    /// Of `dgrams_out`, those whose payload the kernel read straight from
    /// region memory (a `RegionBody`: no copy in user space).
    region_bodies_out,
    /// Payload bytes of `region_bodies_out` taken from region memory.
    region_bytes_out,
    /// Datagrams received (after GRO splitting), before the ICRC check.
    dgrams_in,
    /// UDP payload bytes of `dgrams_in`.
    bytes_in,
    /// `sendmmsg`/`sendmsg` system calls.
    send_syscalls,
    /// `recvmmsg` system calls that returned at least one message.
    recv_syscalls,
    /// GSO sends (one `sendmsg` carrying several segments).
    gso_sends,
    /// Segments carried by `gso_sends`.
    gso_segments,
    /// Times GSO was switched off because the kernel refused a GSO send.
    gso_fallbacks,
    /// Received messages that GRO had coalesced from several datagrams.
    gro_coalesced,
    /// Datagrams split out of `gro_coalesced` messages.
    gro_segments,
    /// Transmitted datagrams whose ICRC was recomputed for the real header
    /// (source address/port or identification differed from what the core assumed).
    icrc_recomputed,
    /// Received datagrams whose ICRC matched with a full 32-bit check.
    icrc_ok_exact,
    /// Received IPv4 datagrams accepted only by solving for the unseen
    /// identification (16 bits of protection).
    icrc_ok_solved_id,
    /// Received datagrams with no valid ICRC (dropped).
    icrc_bad,
    /// Received datagrams delivered without an ICRC check (policy `Off`).
    icrc_unchecked,
    /// Datagrams that could not be sent (hard send error, wrong address
    /// family, too large); dropped.
    send_errors,
    /// Receive system call errors other than "would block".
    recv_errors,
    /// Received messages larger than the receive buffer (dropped).
    truncated,
    /// Frames written to the pcap file.
    pcap_frames,
    /// Frames that could not be written to the pcap file.
    pcap_errors,
    /// Received datagrams handed out as slices of the receive buffer, not
    /// copied (messages of at least 2 KiB: GRO batches, large datagrams).
    rx_zero_copy,
    /// Receive buffers taken back for reuse once all their slices were
    /// dropped (instead of allocating new ones).
    rx_buffers_reused,
    /// Received small datagrams copied into the shared receive arena (one
    /// allocation holds many; see [`crate::UdpTransport::recv`]).
    rx_arena_copies,
    /// Datagrams for a QPN of another member of a shared device (the
    /// kernel's steering was stale or the QPN's owner is gone): dropped,
    /// never given to this member's core.
    steer_foreign,
    /// Steering probes answered (a shared device's members are re-mapped
    /// to their sockets after one joins, leaves or dies).
    steer_probes,
    /// Datagrams this member forwarded to the member they belong to (in an
    /// envelope, see [`crate::steer`]): the foreign ones, and envelopes
    /// that reached the wrong member too.
    steer_forwarded_out,
    /// Forwarded datagrams that reached their member (delivered as if
    /// straight from their source).
    steer_forwarded_in,
    /// Datagrams not forwarded: an envelope forwarded
    /// [`crate::steer::MAX_HOPS`] times (its slot's member is gone), one not
    /// from the device's own address, or a failed send.
    steer_forward_dropped,
    /// Datagrams the kernel dropped because this device's socket's receive
    /// buffer was full (`SO_RXQ_OVFL`: learned with the next datagram
    /// received; `netstat -su`'s receive buffer errors, for this socket).
    rx_socket_drops,
    /// Times a send waited because a receiver on this host had no credits
    /// left ([`crate::credits`]: its socket buffer would have overflowed).
    credit_waits,
    /// Sends let through after a receiver read nothing for
    /// [`crate::credits::WATCHDOG`] (it may drop them).
    credit_watchdog,
    /// Receive arenas allocated (the arena's memory is reused in place
    /// whenever every datagram copied into it was dropped).
    rx_arenas,
    /// Datagrams of multicast groups the device joined: messages read from
    /// the groups' sockets ([`crate::UdpTransport::join_group`]), frames to
    /// a joined group (raw devices, [`crate::RawTransport::join_group`]).
    mcast_in,
}

impl TransportCounters {
    /// Add `v` to a counter.
    pub fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_subtracts_every_counter_and_never_wraps() {
        let c = TransportCounters::default();
        TransportCounters::add(&c.dgrams_out, 5);
        TransportCounters::add(&c.steer_foreign, 2);
        let a = c.snapshot();
        TransportCounters::add(&c.dgrams_out, 7);
        TransportCounters::add(&c.gro_segments, 3);
        let b = c.snapshot();
        let d = b.since(&a);
        assert_eq!((d.dgrams_out, d.gro_segments, d.steer_foreign), (7, 3, 0));
        assert!(d
            .pairs()
            .iter()
            .all(|(n, v)| *v == 0 || ["dgrams_out", "gro_segments"].contains(n)));
        assert_eq!(a.since(&b).dgrams_out, 0, "an older snapshot minus a newer one is 0");
    }
}
