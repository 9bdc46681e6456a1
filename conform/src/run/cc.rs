//! The steps of RoCEv2 congestion management (IBA Annex A17.9): a burst
//! of requests, the CNPs the target sends (their number and every byte of
//! each), a CNP the tester sends, and the ECN field of the target's
//! packets.

use super::{fail, Exec, Stop};
use crate::case::{Req, Step};
use crate::wire::{ecn_name, Received};
use roce_packet::{Opcode, Psn, Qpn, RoceRepr};
use std::time::{Duration, Instant};

/// The TOS a NIC's notification point sends its CNPs with: DSCP 48
/// (mlx5's `cnp_dscp`), Not-ECT.
const CNP_TOS: u8 = 48 << 2;

/// Why a device whose packets are Not-ECT is not asked about congestion.
const NO_CC: &str = "it takes no part in RoCEv2 congestion management (Annex A17.9)";

impl Exec<'_> {
    /// [`Step::Burst`], [`Step::Cnps`], [`Step::SendCnp`], [`Step::Ect`].
    pub(super) fn congestion(&mut self, step: &Step) -> Result<(), Stop> {
        match *step {
            Step::Burst { req, n } => self.burst(&req, n),
            Step::Cnps { min, max, wait_ms } => self.expect_cnps(min, max, wait_ms),
            Step::SendCnp => {
                let mut h = RoceRepr::default();
                h.bth.opcode = Opcode::CNP;
                h.bth.dest_qp = Qpn::new(self.qp.qpn);
                h.bth.psn = Psn::new(0);
                h.bth.becn = true;
                h.cnp = Some([0; 16]);
                self.emit_to(&h, &[], false, None, CNP_TOS)
            }
            Step::Ect => self.expect_ect(),
            _ => unreachable!("{step:?} is not a step of this kind"),
        }
    }

    /// `n` copies of `req` at consecutive PSNs in one `sendmmsg`.
    fn burst(&mut self, req: &Req, n: u32) -> Result<(), Stop> {
        let packets: Vec<(RoceRepr, Vec<u8>)> = (0..n)
            .map(|i| self.request_packet(&Req { psn: req.psn.wrapping_add(i as i32), ..*req }))
            .collect();
        self.wire.set_tos(req.tos).map_err(|e| Stop::Fail(format!("IP_TOS: {e}")))?;
        self.wire.send_burst(&packets).map_err(|e| Stop::Fail(format!("sendmmsg: {e}")))?;
        for (h, _) in &packets {
            self.log_sent(h, false, req.tos);
        }
        Ok(())
    }

    /// `min..=max` new CNPs, after waiting `wait_ms` for more (packets
    /// that are not CNPs are held for the next steps); each well formed.
    fn expect_cnps(&mut self, min: u32, max: u32, wait_ms: u32) -> Result<(), Stop> {
        let (min, max) = (min as usize, max as usize);
        let end = Instant::now() + Duration::from_millis(wait_ms.into());
        let before = self.cnps_checked;
        while self.cnps.len() - before <= max {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.take(left)? {
                Some(p) => self.held.push_back(p),
                None => break,
            }
        }
        let got = self.cnps.len() - before;
        self.cnps_checked = self.cnps.len();
        if got == 0 && min > 0 {
            if let Some((Some(tos), what)) = &self.last_tos {
                if tos & 3 == 0 {
                    return Err(Stop::NotApplicable(format!(
                        "no CNP, and the device's {what} left Not-ECT (TOS {tos:#04x}): {NO_CC}"
                    )));
                }
            }
        }
        if got < min || got > max {
            let want = match min == max {
                true => format!("{min}"),
                false => format!("{min} to {max}"),
            };
            return fail(format!(
                "{got} CNPs to QP {:#x} within {wait_ms} ms, expected {want}",
                self.tqpn
            ));
        }
        for (i, c) in self.cnps[before..].iter().enumerate() {
            if let Err(why) = self.cnp_format(c) {
                return fail(format!("CNP {} of {got}: {why}", before + i + 1));
            }
        }
        Ok(())
    }

    /// Annex A17.9.3's CNP, byte by byte: BTH (opcode 0x81, byte 1 zero,
    /// P_Key 0xFFFF, BECN alone in byte 4, the tester's QPN, A 0 and PSN
    /// 0), 16 reserved zero bytes, a good ICRC: 32 bytes.
    fn cnp_format(&self, c: &Received) -> Result<(), String> {
        let b = &c.raw;
        if b.len() != 32 {
            return Err(format!("{} bytes, not 32 (BTH, 16 reserved bytes, ICRC)", b.len()));
        }
        let qp = self.tqpn.to_be_bytes();
        if b[0] != 0x81 {
            return Err(format!("opcode {:#04x}, not 0x81", b[0]));
        }
        if b[1] != 0 {
            return Err(format!("BTH byte 1 (SE, M, pad count, TVer) is {:#04x}, not 0", b[1]));
        }
        if b[2..4] != [0xFF, 0xFF] {
            return Err(format!("P_Key {:#06x}, not 0xffff", u16::from_be_bytes([b[2], b[3]])));
        }
        if b[4] != 0x40 {
            return Err(format!("BTH byte 4 is {:#04x}, not 0x40 (BECN set, FECN clear)", b[4]));
        }
        if b[5..8] != qp[1..4] {
            return Err(format!(
                "destination QP {:#x}, not the sender's {:#x}",
                u32::from_be_bytes([0, b[5], b[6], b[7]]),
                self.tqpn
            ));
        }
        if b[8..12] != [0; 4] {
            return Err(format!("A bit and PSN {:02x?}, not zero", &b[8..12]));
        }
        if b[12..28].iter().any(|&x| x != 0) {
            return Err(format!("reserved bytes {:02x?}, not zero", &b[12..28]));
        }
        if !self.wire.icrc_valid(c.src_port, b) {
            return Err(format!("bad ICRC {:02x?}", &b[28..32]));
        }
        Ok(())
    }

    /// The target's latest packet left ECN-capable.
    fn expect_ect(&self) -> Result<(), Stop> {
        let Some((tos, what)) = &self.last_tos else {
            return fail("no packet from the target to look at".into());
        };
        let Some(tos) = *tos else {
            return Err(Stop::NotApplicable(format!(
                "the tester's socket did not report the IP TOS of the device's {what}"
            )));
        };
        match tos & 3 {
            1 | 2 => Ok(()),
            0 => Err(Stop::NotApplicable(format!(
                "the device's {what} left Not-ECT (TOS {tos:#04x}): {NO_CC}"
            ))),
            _ => fail(format!(
                "the device's {what} left {} (TOS {tos:#04x}): a sender marks ECT(0) or ECT(1); \
                 only a congested switch marks CE",
                ecn_name(tos)
            )),
        }
    }
}
