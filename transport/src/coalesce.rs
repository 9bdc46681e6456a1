//! ACK coalescing in the driver layer.
//!
//! The core answers every request that asks for an acknowledgement with its
//! own ACK packet, exactly as rxe does (the emulator's replay tests compare
//! those bytes with rxe's). An RC ACK is cumulative: an ACK for PSN *n*
//! acknowledges every request up to *n*. So when one transmit batch holds
//! several positive ACKs (`ACKNOWLEDGE` packets whose AETH syndrome is
//! "ACK") to the same destination QP, only the newest needs to go on the
//! wire; [`coalesce_acks`] drops the older ones. NAKs, RNR NAKs, READ
//! responses and atomic acknowledgements are never dropped, and nothing is
//! reordered.

use roce_emulator::Datagram;
use rustc_hash::FxHashMap as HashMap;
use std::net::IpAddr;

/// `ACKNOWLEDGE` of the RC transport.
const RC_ACK: u8 = 0x11;

/// (destination address, destination QP) of a positive RC ACK, or `None`.
pub fn positive_ack(d: &Datagram) -> Option<(IpAddr, u32)> {
    let p = &d.payload;
    // BTH 12 + AETH 4 + ICRC 4
    if p.len() != 20 || p[0] != RC_ACK || p[12] & 0xE0 != 0 {
        return None;
    }
    let qpn = u32::from_be_bytes([0, p[5], p[6], p[7]]);
    Some((d.endpoints.dst, qpn))
}

/// Drop every positive ACK that a later positive ACK to the same QP in
/// `batch` supersedes; returns how many were dropped.
pub fn coalesce_acks(batch: &mut Vec<Datagram>) -> usize {
    let acks = batch.iter().filter(|d| positive_ack(d).is_some()).count();
    if acks < 2 {
        return 0;
    }
    // Index of the last positive ACK per QP.
    let mut last: HashMap<(IpAddr, u32), usize> = HashMap::default();
    for (i, d) in batch.iter().enumerate() {
        if let Some(k) = positive_ack(d) {
            last.insert(k, i);
        }
    }
    if last.len() == acks {
        return 0;
    }
    let before = batch.len();
    let mut i = 0;
    batch.retain(|d| {
        let keep = positive_ack(d).is_none_or(|k| last.get(&k) == Some(&i));
        i += 1;
        keep
    });
    before - batch.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use roce_packet::{IpMeta, UdpEndpoints};

    fn dg(dst: [u8; 4], opcode: u8, qpn: u32, psn: u32, syndrome: u8, len: usize) -> Datagram {
        let mut p = vec![0u8; len];
        p[0] = opcode;
        p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        p[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
        if len > 12 {
            p[12] = syndrome;
        }
        Datagram {
            endpoints: UdpEndpoints {
                src: IpAddr::from([127, 0, 0, 3]),
                dst: IpAddr::from(dst),
                src_port: 49152,
                dst_port: 4791,
            },
            meta: IpMeta::default(),
            payload: Bytes::from(p),
        }
    }

    fn psns(b: &[Datagram]) -> Vec<(u8, u32, u32)> {
        b.iter()
            .map(|d| {
                let p = &d.payload;
                (
                    p[0],
                    u32::from_be_bytes([0, p[5], p[6], p[7]]),
                    u32::from_be_bytes([0, p[9], p[10], p[11]]),
                )
            })
            .collect()
    }

    #[test]
    fn keeps_only_the_newest_positive_ack_per_qp() {
        let a = [127, 0, 0, 2];
        let mut b = vec![
            dg(a, RC_ACK, 17, 1, 0x1F, 20),
            dg(a, RC_ACK, 18, 1, 0x1F, 20),
            dg(a, 0x10, 17, 2, 0x1F, 1044), // READ RESPONSE ONLY: kept
            dg(a, RC_ACK, 17, 3, 0x1F, 20),
            dg(a, RC_ACK, 17, 4, 0x60, 20), // NAK (PSN sequence error): kept
            dg(a, RC_ACK, 17, 5, 0x1F, 20),
            dg([127, 0, 0, 9], RC_ACK, 17, 6, 0x1F, 20), // other host: own QP
            dg(a, RC_ACK, 18, 7, 0x20, 20),              // RNR NAK: kept
        ];
        assert_eq!(coalesce_acks(&mut b), 2);
        assert_eq!(
            psns(&b),
            vec![
                (RC_ACK, 18, 1),
                (0x10, 17, 2),
                (RC_ACK, 17, 4),
                (RC_ACK, 17, 5),
                (RC_ACK, 17, 6),
                (RC_ACK, 18, 7)
            ]
        );
        // Nothing more to drop; single ACKs and empty batches are untouched.
        assert_eq!(coalesce_acks(&mut b), 0);
        let mut one = vec![dg(a, RC_ACK, 17, 1, 0, 20)];
        assert_eq!(coalesce_acks(&mut one), 0);
        assert_eq!(coalesce_acks(&mut Vec::new()), 0);
        // Truncated or odd-sized datagrams are not ACKs.
        let mut odd = vec![dg(a, RC_ACK, 17, 1, 0, 12), dg(a, RC_ACK, 17, 2, 0, 12)];
        assert_eq!(coalesce_acks(&mut odd), 0);
    }
}
