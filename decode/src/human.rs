//! The one-line human summary of a packet, like tshark's but in IBA terms.

use crate::record::{hex4, nak_name, rnr_timer_ms, AethKind, Ecn, Record};
use core::fmt::Write;
use core::net::IpAddr;
use roce_packet::opcode::OpKind;

fn endpoint(a: IpAddr, port: u16) -> String {
    match a {
        IpAddr::V4(v) => format!("{v}:{port}"),
        IpAddr::V6(v) => format!("[{v}]:{port}"),
    }
}

/// `ACK msn=5 credit=31`, `RNR_NAK timer=12 (0.64 ms) msn=0`,
/// `NAK PSN_SEQUENCE_ERROR msn=3`.
pub fn aeth_text(syndrome: u8, msn: u32) -> String {
    let a = crate::record::AethF { syndrome, msn };
    let mut s = match a.kind() {
        AethKind::Ack { credit } => format!("ACK msn={msn} credit={credit}"),
        AethKind::RnrNak { timer } => {
            format!("RNR_NAK timer={timer} ({} ms) msn={msn}", ms_text(rnr_timer_ms(timer)))
        }
        AethKind::Nak { code } => format!("NAK {} msn={msn}", nak_name(code)),
        AethKind::Reserved => format!("AETH RESERVED syndrome={syndrome:#04x} msn={msn}"),
    };
    if syndrome & 0x80 != 0 {
        s.push_str(" (reserved bit set)");
    }
    s
}

/// Milliseconds with up to two decimals and no trailing zeros.
pub fn ms_text(ms: f64) -> String {
    let s = format!("{ms:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// The summary line of one record (no trailing newline).
pub fn line(r: &Record) -> String {
    let mut s = format!(
        "{:>5}  {:.6}  {} -> {}  ",
        r.frame,
        r.time,
        endpoint(r.src, r.udp_sport),
        endpoint(r.dst, r.udp_dport)
    );
    let Some(b) = r.bth else {
        s.push_str("(too short for a BTH and an ICRC)");
        push_errors(&mut s, r);
        return s;
    };
    let name = r.opcode_name.clone().unwrap_or_default();
    if name.starts_with("ROCE_EMU_") {
        // a member message of a shared device: its own layout (byte 5 is
        // the member it is for; an XRC relay names the target QP next)
        let _ = write!(s, "{name}");
        if name != "ROCE_EMU_PROBE" {
            let _ = write!(s, "  to member {}", b.destqp >> 16);
        }
        if name.starts_with("ROCE_EMU_XRC") {
            let _ = write!(s, " target QP={:#08x}", b.psn);
        }
        push_icrc(&mut s, r);
        return s;
    }
    let _ = write!(s, "{name}  QP={:#08x} PSN={:#08x} A={}", b.destqp, b.psn, b.ackreq);
    if b.se != 0 {
        s.push_str(" SE=1");
    }
    if b.migreq != 0 {
        s.push_str(" M=1");
    }
    if b.padcnt != 0 {
        let _ = write!(s, " pad={}", b.padcnt);
    }
    if b.pkey != 0xFFFF {
        let _ = write!(s, " pkey={:#06x}", b.pkey);
    }
    if b.tver != 0 {
        let _ = write!(s, " tver={}", b.tver);
    }
    if b.fecn != 0 {
        s.push_str(" FECN");
    }
    if b.becn != 0 {
        s.push_str(" BECN");
    }
    // CE (a switch's congestion mark) always; ECT(0)/ECT(1), which every
    // packet of an ECN-capable sender carries, only in --explain and JSON
    if r.ecn == Ecn::Ce {
        s.push_str(" ECN=CE");
    }
    if let Some(n) = r.payload_len {
        if n != 0 || r.info.is_some_and(|i| i.has_payload) {
            let _ = write!(s, " len={n}");
        }
    }
    if let Some(e) = r.rdeth_eecnxt {
        let _ = write!(s, " RDETH eecnxt={e:#08x}");
    }
    if let Some((qkey, srcqp)) = r.deth {
        let _ = write!(s, " DETH qkey={qkey:#010x} srcqp={srcqp:#08x}");
    }
    if let Some(x) = r.xrc_srqn {
        let _ = write!(s, " XRCETH xrcsrq={x:#08x}");
    }
    if let Some(f) = r.feth {
        let _ = write!(s, " FETH {f:#010x}");
    }
    if let Some(x) = r.reth {
        let _ = write!(s, " RETH va={:#x} rkey={:#010x} dmalen={}", x.va, x.rkey, x.dmalen);
    }
    if let Some(x) = r.atomiceth {
        let op = r.info.map(|i| i.kind);
        if op == Some(OpKind::FetchAdd) {
            let _ =
                write!(s, " AtomicETH va={:#x} rkey={:#010x} add={:#x}", x.va, x.rkey, x.swap_add);
        } else {
            let _ = write!(
                s,
                " AtomicETH va={:#x} rkey={:#010x} swap={:#x} compare={:#x}",
                x.va, x.rkey, x.swap_add, x.compare
            );
        }
    }
    if let Some(a) = r.aeth {
        let _ = write!(s, " {}", aeth_text(a.syndrome, a.msn));
    }
    if let Some(x) = r.atomicacketh {
        let _ = write!(s, " orig={x:#x}");
    }
    if let Some(x) = r.immdt {
        let _ = write!(s, " imm={x:#010x}");
    }
    if let Some(x) = r.ieth_rkey {
        let _ = write!(s, " IETH rkey={x:#010x}");
    }
    push_cnp(&mut s, r);
    if let Some(c) = &r.cm {
        let _ = write!(s, "  {}", crate::cm_fmt::summary(c));
    }
    if let Some(g) = r.gso {
        let _ = write!(s, "  GSO {}/{} (size {})", g.segment + 1, g.segments, g.size);
    }
    push_icrc(&mut s, r);
    s
}

/// A CNP: whom it notifies (the ladder's `CNP qp=0x..` label, in words)
/// and how it differs from Annex A17.9.3's.
fn push_cnp(s: &mut String, r: &Record) {
    let Some(b) = r.bth.filter(|_| r.is_cnp()) else { return };
    let _ = write!(s, "  congestion notification to qp={:#x}", b.destqp);
    let problems = r.cnp_problems();
    if !problems.is_empty() {
        let _ = write!(s, " (malformed CNP: {})", problems.join(", "));
    }
}

/// The ICRC's verdict, then any errors.
fn push_icrc(s: &mut String, r: &Record) {
    if let (Some(w), Some(e)) = (r.icrc_wire, r.icrc_expected) {
        if r.icrc_ok {
            s.push_str("  ICRC ok");
        } else {
            let _ = write!(s, "  ICRC BAD (wire {}, expected {})", hex4(w), hex4(e));
        }
    }
    push_errors(s, r);
}

fn push_errors(s: &mut String, r: &Record) {
    if !r.errors.is_empty() {
        let _ = write!(s, "  MALFORMED: {}", r.errors.join(", "));
    }
}
