//! Device counters. The first block carries rxe's names
//! (`/sys/class/infiniband/rxe0/ports/1/hw_counters/*`), the rest are ours.
//! Every dropped packet bumps exactly one drop counter.

use core::fmt;

macro_rules! counters {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        /// Counter values; print with `{}` for `name value` lines.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Counters {
            $($(#[$m])* pub $name: u64,)*
        }
        impl Counters {
            /// Every counter as `(name, value)`, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($name), self.$name)),*].into_iter()
            }
            /// Look a counter up by its name.
            pub fn get(&self, name: &str) -> Option<u64> {
                self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
            }
            /// A counter by its name, to change (adding up snapshots).
            pub fn get_mut(&mut self, name: &str) -> Option<&mut u64> {
                match name {
                    $(stringify!($name) => Some(&mut self.$name),)*
                    _ => None,
                }
            }
        }
    };
}

counters!(
    /// Datagrams handed to the transport.
    sent_pkts,
    /// Datagrams accepted (ICRC good, parsed, to a known QP).
    rcvd_pkts,
    /// Responder: duplicate requests (PSN before the expected one).
    duplicate_request,
    /// Responder: requests with a PSN after the expected one.
    out_of_seq_request,
    /// Completer: RNR NAKs received.
    rcvd_rnr_err,
    /// Responder: RNR NAKs sent.
    send_rnr_err,
    /// Completer: PSN sequence error NAKs received.
    rcvd_seq_err,
    /// Responder: requests executed without an immediate ACK (no AckReq;
    /// acknowledged later by a coalesced ACK). rxe uses this name for
    /// completer rescheduling, which a single-threaded core does not have.
    ack_deferred,
    /// Work requests failed with RETRY_EXC_ERR.
    retry_exceeded_err,
    /// Work requests failed with RNR_RETRY_EXC_ERR.
    retry_rnr_exceeded_err,
    /// Retransmissions started by the completer (timeout, NAK, implied NAK).
    completer_retry_err,
    /// Packets that could not be built or sent.
    send_err,
    /// Port down events (never, in the emulator).
    link_downed,
    /// Completed send-side work requests that were SENDs.
    rdma_sends,
    /// Completed receive work requests.
    rdma_recvs,
    /// UDP payload bytes sent.
    sent_bytes,
    /// UDP payload bytes received (accepted packets).
    rcvd_bytes,
    /// Ours: ICRC mismatch.
    icrc_err,
    /// Ours: not a well-formed RoCEv2 packet (truncated, bad pad, unknown opcode).
    malformed,
    /// Ours: BTH transport version not 0.
    bad_tver,
    /// Ours: destination QP does not exist.
    unknown_qp,
    /// Ours: QP state does not accept the packet.
    bad_state,
    /// Ours: P_Key mismatch.
    bad_pkey,
    /// Ours: opcode not valid for the QP's transport.
    bad_opcode,
    /// Ours: NAKs sent by the responder (all codes, RNR excluded).
    naks_sent,
    /// Ours: plain ACKs sent (read responses and atomic ACKs not counted).
    acks_sent,
    /// Ours: responses dropped by the completer (stale, duplicate, for a PSN
    /// not outstanding, or after a read-response gap already retried).
    stale_response,
    /// Ours: retransmit timer expirations.
    retransmit_timeouts,
    /// Ours: CQ overflows.
    cq_overflow,
    /// Ours: UC messages abandoned by the responder (gap, no receive WQE,
    /// bad key, ...); UC never NAKs.
    uc_msg_dropped,
    /// Ours: UD datagrams dropped (Q_Key mismatch, no receive WQE).
    ud_dropped,
    /// Ours: memory window binds executed (type 1 `bind_mw` and type 2
    /// BIND_MW work requests).
    mw_bind,
    /// Ours: binds that completed with MW_BIND_ERR.
    mw_bind_err,
    /// Ours: rkeys invalidated (LOCAL_INV, SEND_WITH_INVALIDATE's IETH at
    /// the responder, `local_invalidate`).
    mw_invalidate,
    /// Ours: invalidations refused (unknown rkey, type 1 window, other PD).
    mw_invalidate_err,
    /// Ours: FLUSH requests executed by the responder (IBA 1.5).
    flush_ops,
    /// Ours: FLUSH requests refused by the responder: a bad FETH, or the
    /// rkey/region check (placement rights, range) failed.
    flush_err,
    /// Ours: positive ACKs replaced by a newer one before they left (ACK
    /// coalescing, `LinkProfile::ack_coalescing`; off by default).
    acks_merged,
    /// Ours: accesses to an application's region that failed because its
    /// pages were unmapped or write-protected after registration (a
    /// kernel device would have pinned them): a peer's WRITE, READ or
    /// atomic gets a remote access error NAK, a local post an error.
    region_faults,
    /// Ours: UD datagrams sent to a multicast group.
    mcast_sent,
    /// Ours: multicast datagrams delivered to at least one attached QP (each
    /// QP then takes a receive of its own, or counts `ud_dropped`).
    mcast_rcvd,
    /// Ours: multicast datagrams for a group no QP of the device is
    /// attached to (or none ready to receive).
    mcast_dropped,
    /// Ours: XRC requests this member's target QPs sent to the member whose
    /// XRC SRQ they name (a domain shared by processes, `crate::xrc_relay`).
    xrc_relayed_out,
    /// Ours: such requests executed here for another member's target QP.
    xrc_relayed_in,
    /// Ours: requests held while a target QP waited for a member's verdict.
    xrc_relay_held,
    /// Ours: relay messages dropped (malformed, from another address, for
    /// no waiting request, or beyond the held queue).
    xrc_relay_dropped,
    /// Ours: verdicts not received in time (the request is left to the
    /// initiator's retransmission).
    xrc_relay_timeouts,
    /// Ours, counted by the link under the device (the host copies them
    /// in; 0 on the simulator): datagrams the kernel dropped for a full
    /// receive buffer of this device's socket (`SO_RXQ_OVFL`).
    rx_socket_drops,
    /// Ours, the link's: times a send waited for credits of a receiver on
    /// this host (`roce_transport::credits`: its buffer would have
    /// overflowed).
    credit_waits,
    /// Ours, the link's: sends let through after a receiver read nothing
    /// for the credits' watchdog (it may drop them).
    credit_watchdog,
    /// Notification point (mlx5's name): received RoCE packets whose IP
    /// header said Congestion Experienced (a switch marked them).
    np_ecn_marked_roce_packets,
    /// Notification point: CNPs sent (at most one per QP per
    /// `min_time_between_cnps`).
    np_cnp_sent,
    /// Reaction point: CNPs that reached a QP whose rate follows them.
    rp_cnp_handled,
    /// Reaction point: CNPs for a QP whose reaction point is off (device
    /// or QP switch), or that has no send queue.
    rp_cnp_ignored,
);

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, v) in self.iter() {
            writeln!(f, "{n:<24} {v}")?;
        }
        Ok(())
    }
}

impl Counters {
    /// Count an executed memory window bind (`mw_bind` / `mw_bind_err`).
    pub(crate) fn count_bind(&mut self, ok: bool) {
        if ok {
            self.mw_bind += 1;
        } else {
            self.mw_bind_err += 1;
        }
    }

    /// Count an invalidation: LOCAL_INV, IETH or `local_invalidate`
    /// (`mw_invalidate` / `mw_invalidate_err`).
    pub(crate) fn count_invalidate(&mut self, ok: bool) {
        if ok {
            self.mw_invalidate += 1;
        } else {
            self.mw_invalidate_err += 1;
        }
    }
}
