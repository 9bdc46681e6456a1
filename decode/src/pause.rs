//! Ethernet PAUSE frames: IEEE 802.3x PAUSE and 802.1Qbb priority flow
//! control (PFC), the MAC control frames (ethertype `0x8808`) a switch or
//! NIC sends to stop its link partner when a buffer fills. They are not
//! RoCE, but RoCE fabrics run on them (docs/congestion.md), so `roce
//! decode` shows them between the RoCE packets: one line each, what they
//! ask with `--explain`, a count in `--stats`.

use serde_json::json;

/// A PAUSE frame.
#[derive(Clone, Debug, PartialEq)]
pub struct Pause {
    /// Frame number.
    pub frame: u64,
    /// Seconds since the first frame.
    pub time: f64,
    /// Source MAC address.
    pub src: [u8; 6],
    /// 802.1Qbb (per priority) rather than 802.3x (the whole link).
    pub pfc: bool,
    /// The priorities it applies to (PFC's class-enable vector; 802.3x:
    /// all, `0xff`).
    pub enable: u8,
    /// Quanta per priority (512 bit times each; 0 resumes). 802.3x: the
    /// one value in every slot.
    pub quanta: [u16; 8],
}

/// The PAUSE frame in an Ethernet frame's bytes (untagged or one 802.1Q
/// tag), if it is one.
pub fn parse(data: &[u8], frame: u64, time: f64) -> Option<Pause> {
    let mut at = 12;
    if data.get(12..14)? == [0x81, 0x00] {
        at = 16;
    }
    if data.get(at..at + 2)? != [0x88, 0x08] {
        return None;
    }
    let body = data.get(at + 2..)?;
    let src: [u8; 6] = data.get(6..12)?.try_into().ok()?;
    let be = |i: usize| body.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    match be(0)? {
        0x0101 => {
            let enable = (be(2)? & 0xff) as u8;
            let mut quanta = [0u16; 8];
            for (p, q) in quanta.iter_mut().enumerate() {
                *q = be(4 + 2 * p)?;
            }
            Some(Pause { frame, time, src, pfc: true, enable, quanta })
        }
        0x0001 => Some(Pause { frame, time, src, pfc: false, enable: 0xff, quanta: [be(2)?; 8] }),
        _ => None,
    }
}

fn mac(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

impl Pause {
    /// The priorities it names, with their quanta.
    fn classes(&self) -> Vec<(u8, u16)> {
        (0..8u8)
            .filter(|p| self.enable & (1 << p) != 0)
            .map(|p| (p, self.quanta[p as usize]))
            .collect()
    }

    /// Every named priority resumes (quanta 0).
    pub fn is_resume(&self) -> bool {
        self.classes().iter().all(|c| c.1 == 0)
    }

    /// The packet line.
    pub fn line(&self) -> String {
        let what = match (self.pfc, self.is_resume()) {
            (true, true) => "PFC RESUME",
            (true, false) => "PFC PAUSE",
            (false, true) => "PAUSE (802.3x) RESUME",
            (false, false) => "PAUSE (802.3x)",
        };
        let cls: Vec<String> = match self.pfc {
            true => self.classes().iter().map(|(p, q)| format!("prio {p} quanta={q}")).collect(),
            false => vec![format!("quanta={}", self.quanta[0])],
        };
        format!(
            "{:>5}  {:.6}  {}  {what}  {}",
            self.frame,
            self.time,
            mac(&self.src),
            cls.join(" ")
        )
    }

    /// What it asks, for `--explain`.
    pub fn explain(&self) -> String {
        let who = match self.pfc {
            true => "priority flow control (IEEE 802.1Qbb): the sender's buffer for the named priority passed its XOFF threshold",
            false => "Ethernet flow control (IEEE 802.3x): the sender's buffer filled",
        };
        match self.is_resume() {
            true => format!("{who} earlier and is now at or below XON: its link partner may send again (a quanta of 0 resumes)"),
            false => format!(
                "{who}; its link partner stops sending {} for the quanta given (512 bit times each: 65535 is 839 µs at 40 Gb/s) or until a PAUSE of 0; nothing is dropped, but every flow on that link waits (head-of-line blocking). A MAC control frame, not RoCE: switches and NICs answer it, not the HCA",
                if self.pfc { "that priority" } else { "anything" }
            ),
        }
    }

    /// The JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        let classes: serde_json::Map<String, serde_json::Value> =
            self.classes().iter().map(|(p, q)| (p.to_string(), json!(q))).collect();
        json!({
            "frame": self.frame,
            "time": self.time,
            "pause": { "pfc": self.pfc, "src": mac(&self.src), "classes": classes },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pfc(quanta3: u16) -> Vec<u8> {
        let mut f = vec![0x01, 0x80, 0xc2, 0, 0, 1, 2, 0, 0, 0, 0, 9, 0x88, 0x08, 0x01, 0x01, 0, 8];
        for p in 0..8 {
            f.extend_from_slice(&(if p == 3 { quanta3 } else { 0 }).to_be_bytes());
        }
        f.resize(60, 0);
        f
    }

    #[test]
    fn pfc_pause_and_resume() {
        let p = parse(&pfc(65535), 7, 0.5).expect("a PAUSE");
        assert_eq!(p.line(), "    7  0.500000  02:00:00:00:00:09  PFC PAUSE  prio 3 quanta=65535");
        assert!(p.explain().contains("XOFF") && p.explain().contains("head-of-line"));
        assert_eq!(p.to_json()["pause"]["classes"]["3"], 65535);
        let r = parse(&pfc(0), 8, 0.6).unwrap();
        assert!(r.is_resume());
        assert!(r.line().ends_with("PFC RESUME  prio 3 quanta=0"));
    }

    #[test]
    fn tagged_8023x_and_not_a_pause() {
        let mut f = vec![
            0x01, 0x80, 0xc2, 0, 0, 1, 2, 0, 0, 0, 0, 9, 0x81, 0, 0, 5, 0x88, 0x08, 0, 1, 0x12,
            0x34,
        ];
        f.resize(60, 0);
        let p = parse(&f, 1, 0.0).unwrap();
        assert!(!p.pfc);
        assert!(p.line().ends_with("PAUSE (802.3x)  quanta=4660"), "{}", p.line());
        // other MAC control opcodes, other ethertypes, short frames: none
        f[18] = 0x01;
        f[19] = 0x02;
        assert_eq!(parse(&f, 1, 0.0), None);
        assert_eq!(parse(&pfc(1)[..20], 1, 0.0), None);
        assert_eq!(parse(&[0u8; 14], 1, 0.0), None);
        assert_eq!(parse(&[], 1, 0.0), None);
    }
}
