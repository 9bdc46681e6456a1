//! What the members of a shared device do with XRC relay messages (see
//! [`crate::xrc_relay`] for the protocol): the SRQ's member executes a
//! request on its shadow of the owner's target QP; the owner holds the
//! target QP's requests while a verdict is awaited and answers the
//! initiator with it.

use crate::io::Datagram;
use crate::time::Instant;
use crate::xrc_relay::{
    exec_datagram, initiator_av, member_srq, parse, verdict_datagram, Exec, Message, RelayQp,
    Verdict, Wait, HELD_MAX, PATIENCE,
};
use roce_packet::{Psn, Qpn};
use std::collections::VecDeque;

impl crate::hca::Hca {
    /// A relay message from the device's own address (`receive` sends
    /// nothing else here): an EXEC for one of this member's SRQs, or a
    /// VERDICT for one of its target QPs.
    pub(crate) fn on_relay(&mut self, now: Instant, d: &Datagram) {
        let Some(me) = self.member_slot else { return };
        match parse(&d.payload, me) {
            None => {
                tracing::debug!(len = d.payload.len(), "XRC relay: malformed message");
                self.dev.counters.xrc_relay_dropped += 1;
            }
            Some(Message::Exec(e)) => self.relay_exec(now, me, e),
            Some(Message::Verdict { from, tgt, seq, psn, verdict }) => {
                self.relay_verdict(now, from, tgt, seq, psn, verdict)
            }
        }
    }

    /// Execute a request for another member's target QP on its shadow
    /// here, answer with a VERDICT.
    fn relay_exec(&mut self, now: Instant, me: u8, e: Exec) {
        use crate::qp::{Qp, QpInitAttr};
        use crate::qp_attr::QpState;
        let Ok(pkt) = roce_packet::RocePacket::new_checked(&e.packet[..]) else {
            self.dev.counters.xrc_relay_dropped += 1;
            return;
        };
        self.dev.counters.xrc_relayed_in += 1;
        let repr = roce_packet::RoceRepr::parse(&pkt);
        let psn = repr.bth.psn;
        let verdict = match member_srq(&self.dev.srqs, &self.xrcds, &e) {
            None => {
                tracing::debug!(qpn = %e.tgt, srqn = e.srqn, "XRC relay: no XRC SRQ of the target's domain");
                Verdict::Error(roce_packet::NakCode::InvalidRequest.to_u5())
            }
            Some((srq, pd, cq)) => {
                let key = (e.from, e.tgt);
                if !matches!(self.xrc_shadows.get(&key), Some((g, _)) if *g == e.gen) {
                    let init = QpInitAttr::xrc_target(pd, cq, Some(srq));
                    let mut q = Qp::new(e.tgt, init, e.mtu);
                    q.state = QpState::Rts;
                    q.mutant = self.mutant;
                    self.xrc_shadows.insert(key, (e.gen, q));
                }
                let Some((_, q)) = self.xrc_shadows.get_mut(&key) else { return };
                q.init.srq = Some(srq);
                q.init.pd = pd;
                q.init.recv_cq = cq;
                q.p.mtu = e.mtu;
                q.p.access = e.access;
                q.p.max_dest_rd_atomic = e.max_dest_rd_atomic;
                q.p.ah = Some(initiator_av(&e));
                q.p.dest_qpn = e.dest_qpn;
                q.src_port = e.src_port;
                q.resp.msn = roce_packet::Msn::new(e.msn);
                let mut out = VecDeque::new();
                let span = tracing::debug_span!("qp", qpn = %e.tgt, role = "xrc shadow");
                let _g = span.enter();
                let v = q.relay_execute(&mut self.dev.resp(), now, &repr, pkt.payload(), &mut out);
                self.parting.extend(out);
                if let Verdict::Error(_) = v {
                    self.xrc_shadows.remove(&key);
                }
                v
            }
        };
        match verdict_datagram(self.dev.tx.addr, me, e.from, e.tgt, e.seq, psn, verdict) {
            Some(x) => self.parting.push_back(x),
            None => self.dev.counters.send_err += 1,
        }
    }

    /// A member's verdict on the request a target QP of this member waits
    /// for: answer the initiator, then take the requests held meanwhile.
    fn relay_verdict(&mut self, now: Instant, from: u8, tgt: Qpn, seq: u32, psn: Psn, v: Verdict) {
        let Some(mut entry) = self.qps.get_mut(&tgt) else {
            self.dev.counters.xrc_relay_dropped += 1;
            return;
        };
        let qp = &mut *entry;
        let rl = qp.relay.as_mut();
        let Some(w) = rl.and_then(|r| match &r.wait {
            Some(w) if w.seq == seq && w.repr.bth.psn == psn => r.wait.take(),
            _ => None,
        }) else {
            tracing::debug!(qpn = %tgt, seq, from, "XRC relay: verdict for no waiting request");
            self.dev.counters.xrc_relay_dropped += 1;
            return;
        };
        tracing::debug!(qpn = %tgt, %psn, from, ?v, "XRC relay: verdict");
        qp.relay_finish(&mut self.dev.resp(), &w.repr, w.dup, v);
        let held = qp.relay.as_mut().map(|r| std::mem::take(&mut r.held)).unwrap_or_default();
        drop(entry);
        for d in held {
            self.receive(now, &d);
        }
    }
}

/// An owner's target QP waits for a verdict: hold `d` behind it (`true`),
/// or give the wait up after [`PATIENCE`] and let `d` through (`false`).
pub(crate) fn hold(
    qp: &mut crate::qp::Qp,
    ctrs: &mut crate::counters::Counters,
    now: Instant,
    d: &Datagram,
) -> bool {
    let Some(rl) = qp.relay.as_mut() else { return false };
    let Some(w) = &rl.wait else { return false };
    if now.saturating_duration_since(w.since) >= PATIENCE {
        tracing::debug!(qpn = %qp.qpn, psn = %w.repr.bth.psn, held = rl.held.len(),
            "XRC relay: no verdict, given up");
        rl.wait = None;
        ctrs.xrc_relay_timeouts += 1;
        // (what waited behind it goes too: the initiator retransmits it,
        // in order, after the request given up)
        ctrs.xrc_relay_dropped += rl.held.len() as u64;
        rl.held.clear();
        return false;
    }
    if rl.held.len() >= HELD_MAX {
        ctrs.xrc_relay_dropped += 1;
    } else {
        rl.held.push_back(d.clone());
        ctrs.xrc_relay_held += 1;
    }
    true
}

/// Relay the request `d` of the target `qp` to the member `slot` (`me`
/// is this member's), whose SRQ `srqn` of the domain `key` its XRCETH
/// names: step 1 (the PSN) here, then an EXEC, and the QP waits for the
/// verdict. A duplicate SEND, WRITE or atomic is answered here at once.
pub(crate) fn relay(
    qp: &mut crate::qp::Qp,
    dev: &mut crate::dev::Dev,
    parting: &mut VecDeque<Datagram>,
    (me, (slot, key, srqn)): (u8, (u8, (u64, u64), u32)),
    repr: roce_packet::RoceRepr,
    now: Instant,
    d: &Datagram,
) {
    let Some(dup) = qp.relay_check_psn(&mut dev.resp(), &repr) else { return };
    let rl = qp.relay.get_or_insert_with(|| Box::new(RelayQp::new(dev.id())));
    rl.seq = rl.seq.wrapping_add(1);
    let e = Exec {
        from: me,
        tgt: qp.qpn,
        seq: rl.seq,
        key,
        srqn,
        mtu: qp.p.mtu,
        max_dest_rd_atomic: qp.p.max_dest_rd_atomic,
        dup,
        traffic_class: qp.p.ah.map_or(0, |a| a.traffic_class),
        access: qp.p.access,
        msn: qp.resp.msn.value(),
        dest_qpn: qp.p.dest_qpn,
        src_port: qp.src_port,
        dgid: qp.p.ah.map_or(dev.tx.addr, |a| a.dgid),
        gen: rl.gen,
        packet: d.payload.clone(),
    };
    match exec_datagram(dev.tx.addr, slot, &e) {
        Some(x) => {
            tracing::debug!(qpn = %qp.qpn, psn = %repr.bth.psn, srqn, slot, "XRC relay: to the SRQ's member");
            rl.wait = Some(Wait { seq: rl.seq, repr, dup, since: now });
            parting.push_back(x);
            dev.counters.xrc_relayed_out += 1;
        }
        None => dev.counters.send_err += 1,
    }
}
