//! perftest's out-of-band TCP exchange, as spoken by perftest 4.5-0.17
//! (the Debian/rdma-core package; `ib_write_bw -V` prints `Version: 6.06`),
//! so that `roce perf` in cross-process mode can face `ib_write_bw`,
//! `ib_read_bw`, `ib_send_bw`, `ib_atomic_bw` and `ib_send_lat` themselves.
//!
//! Every step is an *exchange* of two messages of the same length: the
//! client writes its message and then reads the server's, the server reads
//! then writes (perftest's `ctx_xchg_data` / `ctx_hand_shake` over a plain
//! socket, no `-R`/`--rdma_cm`). The sequence (checked against captures of
//! two rxe guests, `workloads/tests/data/perftest/*.{client,server}.bin`):
//!
//! 1. version: 16 bytes, a NUL-terminated string (`"6.06"`);
//! 2. `cycle_buffer` then `cache_line_size`: 4 bytes each, big-endian; both
//!    sides keep the larger value;
//! 3. the MTU: 2 bytes, the decimal `ibv_mtu` enum value and a NUL (`"3\0"`
//!    = 1024); both sides use the smaller one;
//! 4. per QP, 108 bytes `LID:OUT_READS:QPN:PSN:RKEY:VADDR:` + 16 GID bytes
//!    as `%02x:` + `SRQN:` (`%04x:%04x:%06x:%06x:%08x:%016llx:...:%08x:` and
//!    a NUL), exchanged several times as synchronisation points (see
//!    [`Flow`]);
//! 5. for WRITE/READ/atomic bandwidth: five 8-byte big-endian report fields
//!    (size, iterations, peak BW, average BW, message rate as IEEE doubles);
//! 6. the end: one more 108-byte exchange, then each side writes `"done\0"`
//!    (5 bytes, nobody reads it) and closes.
//!
//! This version has no parameter negotiation: both sides must be given the
//! same `-s`, `-n`, `-q`, ... (newer perftest versions exchange their
//! parameters after the version). Our own processes mark their version
//! field after the NUL (`"6.06\0roce-emu"`): perftest reads it with `atof`
//! and ignores the rest, and two `roce perf` processes recognise each other
//! and check each other's data.

use std::io::{Read, Write};
use std::net::Ipv6Addr;

/// The version string perftest 4.5-0.17 sends.
pub const PERFTEST_VERSION: &str = "6.06";
/// Size of the version field.
pub const VERSION_LEN: usize = 16;
/// Size of a per-QP message with a GID (perftest's `KEY_MSG_SIZE_GID`).
pub const KEY_MSG_SIZE_GID: usize = 108;
/// The bytes `roce perf` puts after the NUL of its version string.
pub const OUR_MARK: &[u8] = b"roce-emu";
/// What each side writes last.
pub const DONE: &[u8; 5] = b"done\0";

/// Which end of the TCP connection we are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Connected to the server: writes first.
    Client,
    /// Accepted the connection: reads first.
    Server,
}

/// A failure of the exchange (the peer closed early, sent garbage, ...).
#[derive(Debug)]
pub enum OobError {
    /// The socket failed or closed before a whole message arrived.
    Io(std::io::Error),
    /// A message that does not parse, with what was wrong.
    Malformed(String),
}

impl std::fmt::Display for OobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OobError::Io(e) => write!(f, "out-of-band exchange: {e}"),
            OobError::Malformed(m) => write!(f, "out-of-band exchange: malformed message: {m}"),
        }
    }
}

impl std::error::Error for OobError {}

impl From<std::io::Error> for OobError {
    fn from(e: std::io::Error) -> Self {
        OobError::Io(e)
    }
}

/// One QP's connection data (perftest's `struct pingpong_dest`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerftestDest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// READ/atomic requests the sender accepts (its `max_dest_rd_atomic`).
    pub out_reads: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN (24 bits).
    pub psn: u32,
    /// R_Key of the buffer.
    pub rkey: u32,
    /// Virtual address of the buffer.
    pub vaddr: u64,
    /// The sender's GID (raw, network order).
    pub gid: [u8; 16],
    /// SRQ number (XRC/DC only; 0 otherwise).
    pub srqn: u32,
}

impl PerftestDest {
    /// The GID as an IPv6 address.
    pub fn gid_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.gid)
    }

    /// The 108-byte message (`KEY_PRINT_FMT_GID` and its NUL).
    pub fn encode(&self) -> [u8; KEY_MSG_SIZE_GID] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid {
            s += &format!("{b:02x}:");
        }
        s += &format!("{:08x}:", self.srqn);
        let mut out = [0u8; KEY_MSG_SIZE_GID];
        let n = s.len().min(KEY_MSG_SIZE_GID - 1);
        out[..n].copy_from_slice(&s.as_bytes()[..n]);
        out
    }

    /// Parse a 108-byte message (as perftest does: colon-separated hex
    /// fields, text after the NUL ignored).
    pub fn decode(msg: &[u8]) -> Result<PerftestDest, OobError> {
        if msg.len() != KEY_MSG_SIZE_GID {
            return Err(OobError::Malformed(format!(
                "QP message of {} bytes, expected {KEY_MSG_SIZE_GID}",
                msg.len()
            )));
        }
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end])
            .map_err(|_| OobError::Malformed("QP message is not ASCII".into()))?;
        let f: Vec<&str> = text.split(':').collect();
        // 6 fields + 16 GID bytes + SRQN (+ the empty piece after the last ':')
        if f.len() < 23 {
            return Err(OobError::Malformed(format!("{} fields in {text:?}", f.len())));
        }
        let hex = |i: usize, what: &str| -> Result<u64, OobError> {
            u64::from_str_radix(f[i], 16)
                .map_err(|_| OobError::Malformed(format!("{what} {:?} in {text:?}", f[i])))
        };
        let mut gid = [0u8; 16];
        for (k, g) in gid.iter_mut().enumerate() {
            *g = u8::try_from(hex(6 + k, "GID byte")?)
                .map_err(|_| OobError::Malformed(format!("GID byte {:?}", f[6 + k])))?;
        }
        Ok(PerftestDest {
            lid: hex(0, "LID")? as u16,
            out_reads: hex(1, "out_reads")? as u16,
            qpn: hex(2, "QPN")? as u32 & 0xff_ffff,
            psn: hex(3, "PSN")? as u32 & 0xff_ffff,
            rkey: hex(4, "RKey")? as u32,
            vaddr: hex(5, "VAddr")?,
            gid,
            srqn: hex(22, "SRQN")? as u32,
        })
    }
}

/// What the prologue settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The peer's version string (up to its NUL).
    pub remote_version: String,
    /// The peer is `roce perf` (its version field carries [`OUR_MARK`]).
    pub remote_is_ours: bool,
    /// max(ours, theirs): the span remote addresses cycle over.
    pub cycle_buffer: u32,
    /// max(ours, theirs): the stride unit of the cycling.
    pub cache_line: u32,
    /// min(ours, theirs) of the `ibv_mtu` enum (1 = 256 ... 5 = 4096).
    pub mtu_enum: u8,
}

impl Negotiated {
    /// The path MTU in bytes.
    pub fn mtu_bytes(&self) -> u32 {
        128u32 << self.mtu_enum.clamp(1, 5)
    }
}

/// A bandwidth report (perftest's `struct bw_report_data`, the fields it
/// exchanges).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations (perftest sends the total over all QPs).
    pub iters: u64,
    /// Peak bandwidth (MB/s).
    pub bw_peak: f64,
    /// Average bandwidth (MB/s).
    pub bw_avg: f64,
    /// Message rate (Mpps).
    pub msg_rate: f64,
}

/// The shape of a tool's exchange after the per-QP messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// `ib_write_bw`, `ib_read_bw`, `ib_atomic_bw`: QP messages, the QP
    /// messages again after RTR, one sync; the server then waits in a sync
    /// for the client's end, the reports are exchanged, then the close.
    Bw,
    /// `ib_send_bw`, `ib_send_lat`: QP messages, one sync after connect,
    /// the QP messages again, one sync when the receives are posted; the
    /// close after the run (no reports).
    Send,
}

/// Direction of one recorded message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// We wrote it.
    Out,
    /// We read it.
    In,
}

/// An exchange over a stream (a `TcpStream`, or a test double).
pub struct Oob<S: Read + Write> {
    stream: S,
    role: Role,
    /// Every message, in order (for `--oob-log` and the tests).
    pub transcript: Vec<(Dir, Vec<u8>)>,
}

impl<S: Read + Write> Oob<S> {
    /// Wrap a connected stream.
    pub fn new(stream: S, role: Role) -> Oob<S> {
        Oob { stream, role, transcript: Vec::new() }
    }

    fn write_msg(&mut self, m: &[u8]) -> Result<(), OobError> {
        self.stream.write_all(m)?;
        self.stream.flush()?;
        self.transcript.push((Dir::Out, m.to_vec()));
        Ok(())
    }

    fn read_msg(&mut self, len: usize) -> Result<Vec<u8>, OobError> {
        let mut b = vec![0u8; len];
        self.stream.read_exact(&mut b)?;
        self.transcript.push((Dir::In, b.clone()));
        Ok(b)
    }

    /// One exchange of equal-sized messages (client writes first).
    pub fn xchg(&mut self, mine: &[u8]) -> Result<Vec<u8>, OobError> {
        match self.role {
            Role::Client => {
                self.write_msg(mine)?;
                self.read_msg(mine.len())
            }
            Role::Server => {
                let r = self.read_msg(mine.len())?;
                self.write_msg(mine)?;
                Ok(r)
            }
        }
    }

    /// Version, cycle buffer, cache line and MTU (perftest's
    /// `exchange_versions`, `check_sys_data`, `check_mtu`).
    pub fn prologue(
        &mut self,
        cycle_buffer: u32,
        cache_line: u32,
        mtu_enum: u8,
    ) -> Result<Negotiated, OobError> {
        let mut v = [0u8; VERSION_LEN];
        v[..PERFTEST_VERSION.len()].copy_from_slice(PERFTEST_VERSION.as_bytes());
        let at = PERFTEST_VERSION.len() + 1;
        v[at..at + OUR_MARK.len()].copy_from_slice(OUR_MARK);
        let rv = self.xchg(&v)?;
        let end = rv.iter().position(|&b| b == 0).unwrap_or(rv.len());
        let remote_version = String::from_utf8_lossy(&rv[..end]).into_owned();
        let num: f64 = leading_float(&remote_version);
        if num < 5.70 {
            return Err(OobError::Malformed(format!(
                "peer version {remote_version:?}: perftest older than 5.70 is not supported"
            )));
        }
        let remote_is_ours = rv.get(end + 1..end + 1 + OUR_MARK.len()) == Some(OUR_MARK);
        let rc = self.xchg(&cycle_buffer.to_be_bytes())?;
        let rcl = self.xchg(&cache_line.to_be_bytes())?;
        let r_cycle = u32::from_be_bytes([rc[0], rc[1], rc[2], rc[3]]);
        let r_cl = u32::from_be_bytes([rcl[0], rcl[1], rcl[2], rcl[3]]);
        let m = [b'0' + mtu_enum.clamp(1, 5), 0];
        let rm = self.xchg(&m)?;
        // perftest: strtol of the 2 bytes; an invalid value keeps ours
        let rmtu = match rm[0] {
            b'1'..=b'5' => rm[0] - b'0',
            _ => mtu_enum,
        };
        Ok(Negotiated {
            remote_version,
            remote_is_ours,
            cycle_buffer: cycle_buffer.max(r_cycle).clamp(64, 1 << 24),
            cache_line: cache_line.max(r_cl).clamp(1, 4096),
            mtu_enum: mtu_enum.min(rmtu),
        })
    }

    /// One 108-byte QP message each way.
    pub fn hand_shake(&mut self, mine: &PerftestDest) -> Result<PerftestDest, OobError> {
        let r = self.xchg(&mine.encode())?;
        PerftestDest::decode(&r)
    }

    /// The five report fields (`xchg_bw_reports`, peer version ≥ 5.33).
    pub fn xchg_bw_report(&mut self, mine: &BwReport) -> Result<BwReport, OobError> {
        let mut get = |v: [u8; 8]| -> Result<[u8; 8], OobError> {
            let r = self.xchg(&v)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(&r);
            Ok(a)
        };
        let size = u64::from_be_bytes(get(mine.size.to_be_bytes())?);
        let iters = u64::from_be_bytes(get(mine.iters.to_be_bytes())?);
        let bw_peak = f64::from_be_bytes(get(mine.bw_peak.to_be_bytes())?);
        let bw_avg = f64::from_be_bytes(get(mine.bw_avg.to_be_bytes())?);
        let msg_rate = f64::from_be_bytes(get(mine.msg_rate.to_be_bytes())?);
        Ok(BwReport { size, iters, bw_peak, bw_avg, msg_rate })
    }

    /// The close: a last QP-message exchange, then `"done\0"` (written,
    /// never read).
    pub fn close(&mut self, mine: &PerftestDest) -> Result<(), OobError> {
        self.hand_shake(mine)?;
        // the peer may already have closed: a failed write is not an error
        let _ = self.stream.write_all(DONE);
        let _ = self.stream.flush();
        self.transcript.push((Dir::Out, DONE.to_vec()));
        Ok(())
    }

    /// The connection phase for `n` QPs: QP messages, the tool-specific
    /// syncs around `connect` (called with the peer's messages, it moves
    /// our QPs to RTR/RTS), up to the point where the test runs.
    pub fn connect_phase(
        &mut self,
        flow: Flow,
        mine: &[PerftestDest],
        connect: &mut dyn FnMut(&[PerftestDest]) -> Result<(), String>,
    ) -> Result<Vec<PerftestDest>, String> {
        let e = |e: OobError| e.to_string();
        let mut rem = Vec::with_capacity(mine.len());
        for d in mine {
            rem.push(self.hand_shake(d).map_err(e)?);
        }
        connect(&rem)?;
        if flow == Flow::Send {
            self.hand_shake(&mine[0]).map_err(e)?;
        }
        // the second round: perftest prints the remote QPs from it
        for (i, d) in mine.iter().enumerate() {
            let again = self.hand_shake(d).map_err(e)?;
            if again.qpn != rem[i].qpn {
                // perftest sends its QPs in order in both rounds: a QP that
                // "changes" is the next of the peer's QPs, so the two sides
                // were started with different -q
                return Err(format!(
                    "peer's QP {i} changed between exchanges (0x{:06x} then 0x{:06x}): the \
                     peer runs a different number of QPs than this side's {}; start both \
                     sides with the same -q (perftest needs that too)",
                    rem[i].qpn,
                    again.qpn,
                    mine.len()
                ));
            }
        }
        Ok(rem)
    }
}

/// `atof` of a version string: the leading decimal number.
fn leading_float(s: &str) -> f64 {
    let t: String = s.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    t.parse().unwrap_or(0.0)
}

/// The message lengths of a tool's exchange with `qps` QPs, in order (one
/// direction), for splitting captured byte streams.
#[cfg(test)]
pub fn message_lengths(flow: Flow, qps: usize) -> Vec<usize> {
    let mut v = vec![VERSION_LEN, 4, 4, 2];
    match flow {
        Flow::Bw => {
            v.extend(std::iter::repeat_n(KEY_MSG_SIZE_GID, 2 * qps + 2));
            v.extend([8; 5]);
        }
        Flow::Send => v.extend(std::iter::repeat_n(KEY_MSG_SIZE_GID, 2 * qps + 2)),
    }
    v.push(KEY_MSG_SIZE_GID);
    v.push(DONE.len());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_round_trip_and_layout() {
        let d = PerftestDest {
            lid: 0,
            out_reads: 0x10,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234,
            vaddr: 0x5566_7788_99aa,
            gid: Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0xc0a8, 0x4d01).octets(),
            srqn: 0,
        };
        let m = d.encode();
        let text = std::str::from_utf8(&m[..107]).unwrap();
        assert_eq!(
            text,
            "0000:0010:000011:abcdef:00001234:00005566778899aa:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:4d:01:00000000:"
        );
        assert_eq!(m[107], 0);
        assert_eq!(PerftestDest::decode(&m).unwrap(), d);
    }

    #[test]
    fn malformed_messages_are_errors() {
        assert!(PerftestDest::decode(&[0u8; 10]).is_err());
        assert!(PerftestDest::decode(&[b'z'; 108]).is_err());
        let mut m = PerftestDest::default().encode();
        m[3] = b'g';
        assert!(PerftestDest::decode(&m).is_err());
        m = PerftestDest::default().encode();
        m[40] = 0; // cut inside the GID
        assert!(PerftestDest::decode(&m).is_err());
    }

    #[test]
    fn lengths_of_the_flows() {
        let bw: usize = message_lengths(Flow::Bw, 1).iter().sum();
        assert_eq!(bw, 16 + 8 + 2 + 4 * 108 + 40 + 108 + 5);
        let send: usize = message_lengths(Flow::Send, 1).iter().sum();
        assert_eq!(send, 16 + 8 + 2 + 5 * 108 + 5);
    }

    #[test]
    fn leading_float_parses_versions() {
        assert_eq!(leading_float("6.06"), 6.06);
        assert_eq!(leading_float("5.70xyz"), 5.70);
        assert_eq!(leading_float(""), 0.0);
    }

    /// A stream that replays captured bytes and records what we write.
    struct Replay {
        input: std::io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Read for Replay {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.input.read(b)
        }
    }

    impl Write for Replay {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.output.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Captures of two rxe guests (perftest 4.5-0.17, client 192.168.77.3,
    /// server 192.168.77.2), one byte stream per direction:
    /// (name, flow, QPs, client stream, server stream).
    type Capture = (&'static str, Flow, usize, &'static [u8], &'static [u8]);

    fn captures() -> Vec<Capture> {
        macro_rules! cap {
            ($n:literal, $f:expr, $q:expr) => {
                (
                    $n,
                    $f,
                    $q,
                    &include_bytes!(concat!("../tests/data/perftest/", $n, ".client.bin"))[..],
                    &include_bytes!(concat!("../tests/data/perftest/", $n, ".server.bin"))[..],
                )
            };
        }
        vec![
            cap!("write_bw", Flow::Bw, 1),
            cap!("read_bw", Flow::Bw, 1),
            cap!("atomic_bw", Flow::Bw, 1),
            cap!("atomic_bw_cas", Flow::Bw, 1),
            cap!("write_bw_D2", Flow::Bw, 1),
            cap!("write_bw_q2", Flow::Bw, 2),
            cap!("send_bw", Flow::Send, 1),
            cap!("send_lat", Flow::Send, 1),
        ]
    }

    fn split<'a>(b: &'a [u8], lens: &[usize]) -> Vec<&'a [u8]> {
        assert_eq!(b.len(), lens.iter().sum::<usize>(), "stream length");
        let mut at = 0;
        lens.iter()
            .map(|&l| {
                at += l;
                &b[at - l..at]
            })
            .collect()
    }

    #[test]
    fn captured_perftest_exchanges_decode() {
        for (name, flow, qps, cli, srv) in captures() {
            for (stream, host) in [(cli, 3u8), (srv, 2u8)] {
                let m = split(stream, &message_lengths(flow, qps));
                assert_eq!(&m[0][..5], b"6.06\0", "{name}: version");
                assert!(m[0][5..].iter().all(|&b| b == 0), "{name}: version padding");
                assert_eq!(m[1], 4096u32.to_be_bytes(), "{name}: cycle buffer (page size)");
                assert_eq!(m[2], 64u32.to_be_bytes(), "{name}: cache line");
                assert_eq!(m[3], b"3\0", "{name}: MTU enum 3 = 1024");
                let n108 = m.iter().filter(|x| x.len() == KEY_MSG_SIZE_GID).count();
                assert_eq!(n108, 2 * qps + 3, "{name}");
                let dests: Vec<PerftestDest> = m
                    .iter()
                    .filter(|x| x.len() == KEY_MSG_SIZE_GID)
                    .map(|x| PerftestDest::decode(x).unwrap())
                    .collect();
                let gid = Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0xc0a8, 0x4d00 | u16::from(host));
                for (k, d) in dests.iter().enumerate() {
                    assert_eq!(d.gid_addr(), gid, "{name} message {k}");
                    assert_eq!(d.lid, 0);
                    assert_eq!(d.srqn, 0);
                    // the first round names QPs 0..qps; every later message repeats QP 0
                    // except the second round, which names them all again
                    let qp = if k < qps {
                        k
                    } else if flow == Flow::Send && k == qps {
                        0
                    } else if k < 2 * qps + usize::from(flow == Flow::Send) {
                        k - qps - usize::from(flow == Flow::Send)
                    } else {
                        0
                    };
                    assert_eq!(d.qpn, dests[qp].qpn, "{name} message {k} is QP {qp}");
                    assert_eq!(d.psn, dests[qp].psn);
                    assert_eq!(d.rkey, dests[qp].rkey);
                    assert_eq!(d.vaddr, dests[qp].vaddr);
                    // and the text is exactly what we would print for it
                    assert_eq!(
                        &d.encode()[..],
                        *m.iter().filter(|x| x.len() == 108).nth(k).unwrap()
                    );
                }
                if qps == 2 {
                    assert_ne!(dests[0].qpn, dests[1].qpn);
                }
                if flow == Flow::Bw {
                    let r = &m[4 + 2 * qps + 2..4 + 2 * qps + 7];
                    let size = u64::from_be_bytes(r[0].try_into().unwrap());
                    let iters = u64::from_be_bytes(r[1].try_into().unwrap());
                    let avg = f64::from_be_bytes(r[3].try_into().unwrap());
                    if host == 3 {
                        // the client reports what it did
                        let want = if name.starts_with("atomic") { 8 } else { 4096 };
                        assert_eq!(size, want, "{name}");
                        if name == "write_bw_D2" {
                            assert!(iters > 5, "{name}: {iters}");
                        } else {
                            // the total over all QPs
                            assert_eq!(iters, 5 * qps as u64, "{name}");
                        }
                        assert!(avg > 0.0 && avg.is_finite(), "{name}: {avg}");
                    }
                }
                assert_eq!(*m.last().unwrap(), DONE);
            }
        }
    }

    #[test]
    fn our_side_replays_against_captured_perftest() {
        for (name, flow, qps, cli, srv) in captures() {
            for role in [Role::Client, Role::Server] {
                let (theirs, ours) = match role {
                    Role::Client => (srv, cli),
                    Role::Server => (cli, srv),
                };
                let replay =
                    Replay { input: std::io::Cursor::new(theirs.to_vec()), output: Vec::new() };
                let mut oob = Oob::new(replay, role);
                let neg = oob.prologue(4096, 64, 3).unwrap();
                assert_eq!(neg.remote_version, "6.06");
                assert!(!neg.remote_is_ours);
                assert_eq!((neg.cycle_buffer, neg.cache_line, neg.mtu_enum), (4096, 64, 3));
                let mine: Vec<PerftestDest> = (0..qps)
                    .map(|q| PerftestDest {
                        out_reads: 16,
                        qpn: 0x11 + q as u32,
                        psn: 0x123456,
                        rkey: 0x208,
                        vaddr: 0x7f00_0000_0000,
                        gid: Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0xc0a8, 0x4d01).octets(),
                        ..Default::default()
                    })
                    .collect();
                let mut connected = 0;
                let rem = oob
                    .connect_phase(flow, &mine, &mut |r: &[PerftestDest]| {
                        connected = r.len();
                        Ok(())
                    })
                    .unwrap();
                assert_eq!(connected, qps, "{name}");
                assert_eq!(rem.len(), qps);
                oob.hand_shake(&mine[0]).unwrap();
                if flow == Flow::Bw {
                    oob.hand_shake(&mine[0]).unwrap();
                    let r = oob
                        .xchg_bw_report(&BwReport { size: 4096, iters: 5, ..Default::default() })
                        .unwrap();
                    if role == Role::Server {
                        let want = if name == "write_bw_D2" { r.iters } else { 5 * qps as u64 };
                        assert_eq!(r.iters, want, "{name}");
                    }
                }
                oob.close(&mine[0]).unwrap();
                // all of perftest's messages consumed but its "done", which nobody reads
                let pos = oob.stream.input.position() as usize;
                assert_eq!(&theirs[pos..], DONE, "{name} {role:?}");
                // what we wrote has perftest's framing, and the fixed fields byte for byte
                let out = &oob.stream.output;
                assert_eq!(out.len(), ours.len(), "{name} {role:?}");
                assert_eq!(&out[..4], b"6.06");
                assert_eq!(out[4], 0);
                assert_eq!(&out[16..26], &ours[16..26], "{name}: cycle buffer, cache line, MTU");
                let ms = split(out, &message_lengths(flow, qps));
                for m in ms.iter().filter(|m| m.len() == KEY_MSG_SIZE_GID) {
                    let d = PerftestDest::decode(m).unwrap();
                    assert!(mine.contains(&d));
                }
                assert_eq!(*ms.last().unwrap(), DONE);
            }
        }
    }
}
