//! Receive demultiplexer (IBA §9.6 packet header validation; rxe's
//! `rxe_recv.c`): ICRC (Annex A17.3.3), BTH structure, transport version
//! (C9-...: TVer must be 0), destination QP, QP type, P_Key, QP state,
//! then dispatch to the responder (requests) or the completer (responses).
//!
//! Every drop is a [`DropReason`] value that bumps exactly one counter and
//! emits one `tracing` event; nothing a peer sends can panic or make a call
//! fail.

use crate::hca::Hca;
use crate::io::Datagram;
use crate::mutant::{self, Mutant};
use crate::time::Instant;
use roce_packet::{IpUdpHeader, Opcode, RocePacket, RoceRepr, Transport};

/// Why a received datagram was dropped before reaching a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Not a well-formed RoCEv2 packet (too short, bad pad, unknown opcode...).
    Malformed,
    /// The ICRC does not match.
    IcrcMismatch,
    /// BTH TVer is not 0.
    BadTver,
    /// No QP with the destination QPN.
    UnknownQp,
    /// The opcode's transport does not match the QP type (or is a CNP).
    BadOpcode,
    /// The P_Key is not the QP's partition.
    BadPkey,
    /// The QP's state does not accept this packet.
    BadState,
}

impl DropReason {
    /// The counter name this reason bumps.
    pub const fn counter(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::IcrcMismatch => "icrc_err",
            DropReason::BadTver => "bad_tver",
            DropReason::UnknownQp => "unknown_qp",
            DropReason::BadOpcode => "bad_opcode",
            DropReason::BadPkey => "bad_pkey",
            DropReason::BadState => "bad_state",
        }
    }
}

impl Hca {
    pub(crate) fn receive(&mut self, now: Instant, d: &Datagram) {
        // a shared device's members talk about XRC requests from the
        // device's own address (crate::xrc_relay)
        if d.payload.first() == Some(&crate::xrc_relay::RELAY_OPCODE)
            && self.member_slot.is_some()
            && d.endpoints.src == self.dev.tx.addr
        {
            self.on_relay(now, d);
            return;
        }
        if let Err(reason) = self.try_receive(now, d) {
            let c = &mut self.dev.counters;
            match reason {
                DropReason::Malformed => c.malformed += 1,
                DropReason::IcrcMismatch => c.icrc_err += 1,
                DropReason::BadTver => c.bad_tver += 1,
                DropReason::UnknownQp => c.unknown_qp += 1,
                DropReason::BadOpcode => c.bad_opcode += 1,
                DropReason::BadPkey => c.bad_pkey += 1,
                DropReason::BadState => c.bad_state += 1,
            }
            // name the QP and PSN when the BTH is readable (drop path only)
            match RoceRepr::parse_bytes(&d.payload) {
                Ok((r, _)) => tracing::debug!(reason = reason.counter(), qpn = %r.bth.dest_qp,
                    psn = %r.bth.psn, len = d.payload.len(), src = %d.endpoints.src, "drop"),
                Err(_) => tracing::debug!(reason = reason.counter(), len = d.payload.len(),
                    src = %d.endpoints.src, "drop"),
            }
        }
    }

    fn try_receive(&mut self, now: Instant, d: &Datagram) -> Result<(), DropReason> {
        let b: &[u8] = &d.payload;
        if b.len() < roce_packet::bth::LEN + roce_packet::icrc::LEN {
            return Err(DropReason::Malformed);
        }
        if self.rx_icrc == crate::io::RxIcrc::Core && !mutant::is(self.mutant, Mutant::NoIcrcCheck)
        {
            let hdr = IpUdpHeader::build(&d.endpoints, &d.meta, b.len())
                .map_err(|_| DropReason::Malformed)?;
            if !hdr.verify_icrc(b) {
                return Err(DropReason::IcrcMismatch);
            }
        }
        let pkt = RocePacket::new_checked(b).map_err(|_| DropReason::Malformed)?;
        let repr = RoceRepr::parse(&pkt);
        if repr.bth.tver != 0 && !mutant::is(self.mutant, Mutant::NoTverCheck) {
            return Err(DropReason::BadTver);
        }
        let info = pkt.info();
        let qpn = repr.bth.dest_qp;
        if let Some(r) = self.special_qpn(qpn.value(), &repr, &pkt, info, d, now) {
            return r;
        }
        let qpn = match self.qps.get(&qpn) {
            None if mutant::is(self.mutant, Mutant::MisroutesUnknownQp) => {
                self.misrouted(info.transport).unwrap_or(qpn)
            }
            _ => qpn,
        };
        let mut entry = self.qps.get_mut(&qpn).ok_or(DropReason::UnknownQp)?;
        let qp = &mut *entry;
        if info.transport == Transport::Cnp {
            return on_cnp(&mut self.dev, qp, &repr, b.len(), now);
        }
        let want = check_qp(self.mutant, qp.init.qp_type, info, &repr)?;
        let payload = pkt.payload();
        if info.is_request() {
            use crate::qp_attr::QpState as S;
            let err_executes =
                qp.state == S::Err && mutant::is(self.mutant, Mutant::ErrStateExecutes);
            let broken_drop = (qp.state == S::Rtr
                && mutant::is(self.mutant, Mutant::RtrDropsRequests))
                || (qp.state == S::Sqd && mutant::is(self.mutant, Mutant::SqdStopsResponder));
            if (!qp.state.allows().requests && !err_executes) || broken_drop {
                return Err(DropReason::BadState);
            }
            // an XRC target waiting for another member's verdict holds
            // its requests (crate::xrc_relay); they are counted when taken
            if qp.relay.is_some() && crate::xrc_member::hold(qp, &mut self.dev.counters, now, d) {
                return Ok(());
            }
            self.dev.counters.rcvd_pkts += 1;
            self.dev.counters.rcvd_bytes += b.len() as u64;
            on_marked(&mut self.dev, qp, &repr, d, now);
            let span = tracing::debug_span!("qp", qpn = %qpn, role = "responder");
            let _g = span.enter();
            if want == Transport::Ud {
                qp.on_ud_request(&mut self.dev.resp(), &repr, payload, d);
            } else if qp.init.qp_type == crate::qp_attr::QpType::XrcRecv {
                // an SRQ of another member of the domain (crate::xrc_relay)
                let remote = match mutant::is(self.mutant, Mutant::XrcIgnoresXrceth) {
                    true => None,
                    false => self.member_slot.zip(crate::xrc_relay::remote_target(
                        self.member_slot,
                        &self.xrcds,
                        qp.xrcd,
                        repr.xrceth,
                    )),
                };
                if let Some(to) = remote {
                    let (dev, parting) = (&mut self.dev, &mut self.parting);
                    crate::xrc_member::relay(qp, dev, parting, to, repr, now, d);
                    return Ok(());
                }
                let srq = match mutant::is(self.mutant, Mutant::XrcIgnoresXrceth) {
                    true => crate::xrc::first_srq(&self.dev.srqs, qp.xrcd),
                    false => crate::xrc::target_srq(&self.dev.srqs, qp.xrcd, repr.xrceth),
                };
                qp.on_xrc_request(&mut self.dev.resp(), now, &repr, payload, srq);
            } else {
                qp.on_request(&mut self.dev.resp(), now, &repr, payload);
            }
        } else if info.is_response() {
            if !qp.state.allows().send_queue {
                return Err(DropReason::BadState);
            }
            self.dev.counters.rcvd_pkts += 1;
            self.dev.counters.rcvd_bytes += b.len() as u64;
            on_marked(&mut self.dev, qp, &repr, d, now);
            let span = tracing::debug_span!("qp", qpn = %qpn, role = "completer");
            let _g = span.enter();
            qp.on_response(&mut self.dev.comp(), now, &repr, payload);
        } else {
            return Err(DropReason::BadOpcode);
        }
        Ok(())
    }

    /// QP1 without an application GSI QP (the port's CM takes it) and the
    /// multicast QPN (every QP attached to the destination group): what
    /// became of the datagram; `None` for any other QPN.
    fn special_qpn(
        &mut self,
        qpn: u32,
        repr: &RoceRepr,
        pkt: &RocePacket<&[u8]>,
        info: &roce_packet::OpInfo,
        d: &Datagram,
        now: Instant,
    ) -> Option<Result<(), DropReason>> {
        let cm = qpn == 1 && self.cm_owns_qp1();
        let mcast = qpn == crate::mcast::MCAST_QPN;
        if !cm && !mcast {
            return None;
        }
        if cm && repr.bth.opcode != Opcode::UD_SEND_ONLY {
            return Some(Err(DropReason::BadOpcode));
        }
        if mcast && (info.transport != Transport::Ud || !info.is_request()) {
            return Some(Err(DropReason::BadOpcode));
        }
        if repr.bth.pkey.value() & 0x7FFF != 0x7FFF {
            return Some(Err(DropReason::BadPkey));
        }
        match cm {
            true => self.cm.receive(&mut self.dev.counters, now, repr, pkt.payload(), d),
            false => self.receive_mcast(repr, pkt.payload(), d),
        }
        Some(Ok(()))
    }

    /// The newest (highest-numbered) QP whose type carries `t` ([`Mutant::MisroutesUnknownQp`]).
    fn misrouted(&self, t: Transport) -> Option<roce_packet::Qpn> {
        let want = match t {
            Transport::Xrc => crate::qp_attr::QpType::XrcRecv,
            Transport::Uc => crate::qp_attr::QpType::Uc,
            Transport::Ud => crate::qp_attr::QpType::Ud,
            _ => crate::qp_attr::QpType::Rc,
        };
        self.qps
            .iter()
            .filter(|(_, q)| q.init.qp_type == want)
            .map(|(n, _)| *n)
            .max_by_key(|n| n.value())
    }
}

/// CNPs queued at most (a hostile peer marking packets to many QPs at
/// once): beyond, the notification point sends none (each QP asks again
/// at its next marked packet).
const MAX_QUEUED_CNPS: usize = 4096;

/// If a packet of `qp` arrived marked Congestion Experienced: count it
/// and, if the QP's notification point is due, queue a CNP to the QP that
/// sent it (its connected peer's; a UD sender's from the DETH).
fn on_marked(
    dev: &mut crate::dev::Dev,
    qp: &mut crate::qp::Qp,
    repr: &roce_packet::RoceRepr,
    d: &crate::Datagram,
    now: Instant,
) {
    if !crate::congestion::is_ce(d.meta.tos) {
        return;
    }
    dev.counters.np_ecn_marked_roce_packets += 1;
    if mutant::is(qp.mutant, Mutant::NoCnp) {
        return;
    }
    if dev.cnps.len() >= MAX_QUEUED_CNPS
        || !(qp.cc.cnp_due(&dev.cc.np, now) || mutant::is(qp.mutant, Mutant::CnpEveryMark))
    {
        return;
    }
    let dest = match qp.init.qp_type {
        crate::QpType::Ud => repr.deth.map(|x| x.src_qp),
        _ => Some(qp.p.dest_qpn),
    };
    let Some(dest) = dest else { return };
    if let Some(c) = dev.tx.cnp(qp, d.endpoints.src, dest, dev.cc.np.cnp_dscp) {
        tracing::debug!(qpn = %qp.qpn, to = %dest, "CE mark: CNP");
        dev.cnps.push_back(c);
        dev.counters.np_cnp_sent += 1;
    }
}

/// A CNP for `qp` (of `len` bytes): its reaction point cuts the rate, or
/// it is counted as ignored. Never acknowledged.
fn on_cnp(
    dev: &mut crate::dev::Dev,
    qp: &mut crate::qp::Qp,
    repr: &roce_packet::RoceRepr,
    len: usize,
    now: Instant,
) -> Result<(), crate::DropReason> {
    if repr.bth.pkey.value() & 0x7FFF != 0x7FFF {
        return Err(crate::DropReason::BadPkey);
    }
    dev.counters.rcvd_pkts += 1;
    dev.counters.rcvd_bytes += len as u64;
    if mutant::is(qp.mutant, Mutant::CnpAcked) {
        qp.ack_as_request(&mut dev.resp());
    }
    if qp.cc.sw.rp && qp.init.qp_type != crate::QpType::XrcRecv {
        let cut = qp.cc.rp.on_cnp(&dev.cc.rp, dev.cc.line_kbps(), now);
        tracing::debug!(qpn = %qp.qpn, cut, rate_mbps = qp.cc.rp.rate_mbps(), "CNP");
        dev.counters.rp_cnp_handled += 1;
    } else {
        dev.counters.rp_cnp_ignored += 1;
    }
    Ok(())
}

/// The checks of a packet against its QP's type and partition: the
/// transport the QP takes, or why the packet is dropped.
fn check_qp(
    m: Option<Mutant>,
    ty: crate::qp_attr::QpType,
    info: &roce_packet::OpInfo,
    repr: &RoceRepr,
) -> Result<Transport, DropReason> {
    use crate::qp_attr::QpType;
    let want = match ty {
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
        QpType::Rc => Transport::Rc,
        QpType::XrcSend | QpType::XrcRecv => Transport::Xrc,
    };
    // an XRC initiator only takes responses, a target only requests
    let xrc_wrong_way = match ty {
        QpType::XrcSend => info.is_request(),
        QpType::XrcRecv => info.is_response(),
        _ => false,
    };
    if xrc_wrong_way && !mutant::is(m, Mutant::NoTransportCheck) {
        return Err(DropReason::BadOpcode);
    }
    if info.transport != want && !mutant::is(m, Mutant::NoTransportCheck) {
        return Err(DropReason::BadOpcode);
    }
    // Default partition: the low 15 bits must be all ones (full or limited member).
    let pkey_mask = match mutant::is(m, Mutant::FullMemberPkeyOnly) {
        true => 0xFFFF,
        false => 0x7FFF,
    };
    if repr.bth.pkey.value() & pkey_mask != pkey_mask && !mutant::is(m, Mutant::NoPkeyCheck) {
        return Err(DropReason::BadPkey);
    }
    Ok(want)
}
