//! The tester's wire: a UDP socket on port 4791 of the tester's own
//! address, from which it sends the packets a case crafts (headers from
//! the packet crate, ICRC computed for the IP header Linux will put in
//! front: DF set, identification 0 for an unconnected socket with
//! `IP_PMTUDISC_DO`) and on which it receives what the target answers.
//! Every frame both ways is kept for the case's pcap.
//!
//! The IP TOS byte (DSCP and ECN; the ICRC masks it) matters for RoCEv2
//! congestion management (IBA Annex A17.9): the tester sends with the TOS
//! a case asks for ([`Wire::set_tos`], `IP_TOS` on the socket, e.g. a CE
//! mark) and learns the TOS of every datagram that arrives (`IP_RECVTOS` /
//! `IPV6_RECVTCLASS`, [`Received::tos`]).

use nix::sys::socket::{self as nsock, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage};
use roce_packet::frame::{ethernet_frame, fill_icrc, verify_icrc, LinkType};
use roce_packet::{IpMeta, RocePacket, RoceRepr, UdpEndpoints, ROCE_V2_PORT};
use roce_pcap::PcapWriter;
use std::io::{self, IoSlice, IoSliceMut};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

/// One packet the target sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The headers.
    pub repr: RoceRepr,
    /// The payload (pad excluded).
    pub payload: Vec<u8>,
    /// When it arrived, from the start of the case.
    pub at: Duration,
    /// The UDP source port it came from.
    pub src_port: u16,
    /// The IPv4 TOS / IPv6 traffic class byte it came with (DSCP and
    /// ECN), `None` when the kernel did not say.
    pub tos: Option<u8>,
    /// The whole UDP payload: BTH to ICRC.
    pub raw: Vec<u8>,
}

/// The ECN field of a TOS byte, by name: `Not-ECT`, `ECT(1)`, `ECT(0)`,
/// `CE`.
pub fn ecn_name(tos: u8) -> &'static str {
    match tos & 3 {
        0 => "Not-ECT",
        1 => "ECT(1)",
        2 => "ECT(0)",
        _ => "CE",
    }
}

/// A datagram as the reader thread took it off the socket: its bytes,
/// its sender, when it arrived, and its IP TOS (if the kernel said).
type Arrival = (Vec<u8>, SocketAddr, Instant, Option<u8>);

/// The tester's socket and the case's capture. A reader thread takes every
/// datagram off the socket as it arrives and stamps it then, so the times
/// the cases check (a retransmission's delay) do not depend on when the
/// runner gets round to reading.
pub struct Wire {
    sock: UdpSocket,
    arrivals: std::sync::mpsc::Receiver<Arrival>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
    me: IpAddr,
    target: IpAddr,
    start: Instant,
    frames: Vec<(Duration, Vec<u8>)>,
    /// Datagrams that were not RoCE packets (dropped, counted).
    pub malformed: u32,
    /// Only packets to this QPN are the case's (set by [`Wire::reset`]):
    /// late packets of an earlier case's QP are neither returned nor
    /// recorded.
    qpn: Option<u32>,
    /// The socket's `IP_TOS` / `IPV6_TCLASS`: what the next packets leave
    /// with.
    tos: u8,
}

/// A short description of a packet for verdicts: `ACK psn=0x100`,
/// `NAK(RemoteAccessError) psn=0x100`, `RC_RDMA_READ_RESPONSE_ONLY psn=...`.
pub fn describe(r: &RoceRepr) -> String {
    let mut s = match r.aeth.map(|a| a.syndrome) {
        Some(roce_packet::Syndrome::Nak(c)) => format!("NAK({c:?})"),
        Some(roce_packet::Syndrome::RnrNak(t)) => format!("RNR-NAK(timer {})", t.code()),
        Some(roce_packet::Syndrome::Ack { .. })
            if r.atomic_ack_eth.is_none() && r.payload_len == 0 && !is_read_response(r) =>
        {
            "ACK".to_string()
        }
        _ if r.bth.opcode == roce_packet::Opcode::CNP => "CNP".to_string(),
        _ => format!("{:?}", r.bth.opcode),
    };
    s.push_str(&format!(" psn={:#x}", r.bth.psn.value()));
    if r.payload_len > 0 {
        s.push_str(&format!(" len={}", r.payload_len));
    }
    s
}

fn is_read_response(r: &RoceRepr) -> bool {
    (0x0D..=0x10).contains(&r.bth.opcode.0)
}

impl Wire {
    /// Bind `me`:4791 to talk to `target`.
    pub fn bind(me: IpAddr, target: IpAddr) -> io::Result<Wire> {
        let sock = UdpSocket::bind(SocketAddr::new(me, ROCE_V2_PORT))?;
        roce_transport::udp::set_pmtudisc_do(sock.as_fd(), me.is_ipv6())?;
        // each datagram's TOS / traffic class (best effort: without it a
        // case that needs it is n/a)
        let _ = match me.is_ipv6() {
            false => nsock::setsockopt(&sock, sockopt::IpRecvTos, &true),
            true => nsock::setsockopt(&sock, sockopt::Ipv6RecvTClass, &true),
        };
        let reader = sock.try_clone()?;
        // (woken every 50 ms to see whether the wire is gone)
        reader.set_read_timeout(Some(Duration::from_millis(50)))?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, arrivals) = std::sync::mpsc::channel();
        let halt = stop.clone();
        let reader = std::thread::Builder::new().name("conform-wire".into()).spawn(move || {
            let mut rx =
                Reader { sock: reader, buf: vec![0u8; 65536], cmsg: nix::cmsg_space!(i32, i32) };
            while !halt.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(a) = rx.recv() {
                    if tx.send(a).is_err() {
                        return;
                    }
                }
            }
        })?;
        Ok(Wire {
            sock,
            arrivals,
            stop,
            reader: Some(reader),
            me,
            target,
            start: Instant::now(),
            frames: Vec::new(),
            malformed: 0,
            qpn: None,
            tos: 0,
        })
    }

    /// Send the next packets with IP TOS / traffic class `tos` (DSCP and
    /// ECN: `0x03` is a CE mark), `IP_TOS` / `IPV6_TCLASS` set on the
    /// socket when it changes. The ICRC masks the byte.
    pub fn set_tos(&mut self, tos: u8) -> io::Result<()> {
        if tos == self.tos {
            return Ok(());
        }
        match self.me.is_ipv6() {
            false => rustix::net::sockopt::set_ip_tos(&self.sock, tos)?,
            true => rustix::net::sockopt::set_ipv6_tclass(&self.sock, u32::from(tos))?,
        }
        self.tos = tos;
        Ok(())
    }

    /// Time since the case started.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// The tester's address.
    pub fn addr(&self) -> IpAddr {
        self.me
    }

    /// Start a case whose tester QP is `qpn`: forget what earlier cases
    /// left (the capture, the clock, packets still queued), and from now on
    /// take only packets to `qpn`.
    pub fn reset(&mut self, qpn: u32) {
        while self.arrivals.try_recv().is_ok() {}
        self.frames.clear();
        self.malformed = 0;
        self.qpn = Some(qpn);
        self.start = Instant::now();
    }

    fn endpoints(&self, out: bool, src_port: u16) -> UdpEndpoints {
        if out {
            UdpEndpoints {
                src: self.me,
                dst: self.target,
                src_port: ROCE_V2_PORT,
                dst_port: ROCE_V2_PORT,
            }
        } else {
            UdpEndpoints { src: self.target, dst: self.me, src_port, dst_port: ROCE_V2_PORT }
        }
    }

    /// Send `r` with `payload` (taken as they are: a case may lie in any
    /// field), ICRC filled in; `corrupt_icrc` flips its bits afterwards.
    pub fn send(&mut self, r: &RoceRepr, payload: &[u8], corrupt_icrc: bool) -> io::Result<()> {
        let ep = self.endpoints(true, ROCE_V2_PORT);
        let b = build(r, payload, corrupt_icrc, &ep)?;
        self.sock.send_to(&b, SocketAddr::new(self.target, ROCE_V2_PORT))?;
        self.record(&ep, &b);
        Ok(())
    }

    /// Send `packets` (headers and payload each, ICRC filled in) to the
    /// target so that they arrive back to back, as close together as this
    /// host can put them: packets of one size as one UDP GSO send (the
    /// kernel cuts it into datagrams, segment `k` with IPv4 identification
    /// `k`, which its ICRC is computed for; a receiver with `UDP_GRO` gets
    /// them as one message), else one `sendmmsg`.
    pub fn send_burst(&mut self, packets: &[(RoceRepr, Vec<u8>)]) -> io::Result<()> {
        let ep = self.endpoints(true, ROCE_V2_PORT);
        let first = packets.first().map(|(r, p)| build(r, p, false, &ep)).transpose()?;
        let size = first.as_ref().map_or(0, Vec::len);
        let gso = packets.len() > 1
            && packets.len() <= 64
            && roce_transport::udp::gso_supported(self.sock.as_fd())
            && packets.iter().all(|(r, p)| r.to_vec(p).is_ok_and(|b| b.len() == size));
        if gso {
            let mut bufs = Vec::with_capacity(packets.len());
            for (k, (r, p)) in packets.iter().enumerate() {
                let meta = IpMeta { ipv4_id: k as u16, ..IpMeta::default() };
                bufs.push(build_with(r, p, &ep, &meta)?);
            }
            if self.send_gso(&bufs, size).is_ok() {
                for (k, b) in bufs.iter().enumerate() {
                    let meta = IpMeta { ipv4_id: k as u16, tos: self.tos, ..IpMeta::default() };
                    self.record_meta(self.start.elapsed(), &ep, b, &meta);
                }
                return Ok(());
            }
        }
        let bufs = packets
            .iter()
            .map(|(r, p)| build(r, p, false, &ep))
            .collect::<io::Result<Vec<Vec<u8>>>>()?;
        self.send_mmsg(&bufs)?;
        for b in &bufs {
            self.record(&ep, b);
        }
        Ok(())
    }

    /// `bufs`, each `size` bytes, as one UDP GSO send to the target.
    fn send_gso(&self, bufs: &[Vec<u8>], size: usize) -> io::Result<()> {
        let seg = u16::try_from(size).map_err(|_| io::Error::other("segment too long"))?;
        let all = bufs.concat();
        let iov = [IoSlice::new(&all)];
        let cmsg = [nsock::ControlMessage::UdpGsoSegments(&seg)];
        let to = SockaddrStorage::from(SocketAddr::new(self.target, ROCE_V2_PORT));
        nsock::sendmsg(self.sock.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), Some(&to))?;
        Ok(())
    }

    /// `bufs` to the target in `sendmmsg` calls.
    fn send_mmsg(&self, bufs: &[Vec<u8>]) -> io::Result<()> {
        let to = rustix::net::SocketAddrAny::from(SocketAddr::new(self.target, ROCE_V2_PORT));
        let mut sent = 0;
        while sent < bufs.len() {
            let iovs: Vec<[IoSlice<'_>; 1]> =
                bufs[sent..].iter().map(|b| [IoSlice::new(b)]).collect();
            let mut ctl: Vec<rustix::net::SendAncillaryBuffer<'_, '_, '_>> =
                iovs.iter().map(|_| Default::default()).collect();
            let mut msgs: Vec<rustix::net::MMsgHdr<'_>> = iovs
                .iter()
                .zip(ctl.iter_mut())
                .map(|(iov, c)| rustix::net::MMsgHdr::new_with_addr(&to, iov, c))
                .collect();
            match rustix::net::sendmmsg(&self.sock, &mut msgs, rustix::net::SendFlags::empty()) {
                Ok(0) => return Err(io::Error::other("sendmmsg sent nothing")),
                Ok(n) => sent += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// [`Wire::send`] to the multicast group `group` (port 4791) from the
    /// tester's interface: every device on the host that joined it gets it.
    pub fn send_to_group(
        &mut self,
        r: &RoceRepr,
        payload: &[u8],
        corrupt_icrc: bool,
        group: IpAddr,
    ) -> io::Result<()> {
        let ep = UdpEndpoints {
            src: self.me,
            dst: group,
            src_port: ROCE_V2_PORT,
            dst_port: ROCE_V2_PORT,
        };
        let b = build(r, payload, corrupt_icrc, &ep)?;
        roce_transport::set_multicast_sender(&self.sock, self.me);
        self.sock.send_to(&b, SocketAddr::new(group, ROCE_V2_PORT))?;
        self.record(&ep, &b);
        Ok(())
    }

    fn record(&mut self, ep: &UdpEndpoints, udp_payload: &[u8]) {
        self.record_at(self.start.elapsed(), ep, udp_payload, self.tos);
    }

    fn record_at(&mut self, at: Duration, ep: &UdpEndpoints, udp_payload: &[u8], tos: u8) {
        self.record_meta(at, ep, udp_payload, &IpMeta { tos, ..IpMeta::default() });
    }

    fn record_meta(&mut self, at: Duration, ep: &UdpEndpoints, udp_payload: &[u8], m: &IpMeta) {
        let mac = |ip: IpAddr| roce_transport::pcap::mac_of(ip);
        if let Ok(f) = ethernet_frame(mac(ep.src), mac(ep.dst), ep, m, udp_payload) {
            self.frames.push((at, f));
        }
    }

    /// The next RoCE packet from the target, waiting at most `timeout`.
    /// Datagrams from elsewhere are ignored; ones that do not parse are
    /// counted in [`Wire::malformed`] and skipped.
    pub fn recv(&mut self, timeout: Duration) -> io::Result<Option<Received>> {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let (b, from, when, tos) = match self.arrivals.recv_timeout(left) {
                Ok(a) => a,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return Ok(None),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(io::Error::other("the tester's reader thread ended"))
                }
            };
            if from.ip() != self.target {
                continue;
            }
            let at = when.saturating_duration_since(self.start);
            let parsed = RocePacket::new_checked(&b[..]);
            if let (Ok(p), Some(q)) = (&parsed, self.qpn) {
                if p.bth().dest_qp().value() != q {
                    continue; // another case's QP
                }
            }
            let ep = self.endpoints(false, from.port());
            self.record_at(at, &ep, &b, tos.unwrap_or(0));
            match parsed {
                Ok(p) => {
                    let repr = RoceRepr::parse(&p);
                    let payload = p.payload().to_vec();
                    let src_port = from.port();
                    return Ok(Some(Received { repr, payload, at, src_port, tos, raw: b }));
                }
                Err(_) => self.malformed += 1,
            }
        }
    }

    /// Whether `udp_payload` from the target carries the ICRC of an IPv4
    /// header with identification 0 (what a UDP socket of the target
    /// sends); only a hint, other devices choose other identifications.
    pub fn icrc_hint(&self, src_port: u16, udp_payload: &[u8]) -> bool {
        verify_icrc(&self.endpoints(false, src_port), &IpMeta::default(), udp_payload)
    }

    /// Whether `udp_payload` from the target carries a good ICRC. A UDP
    /// socket does not see the IPv4 header's identification and DF flag,
    /// which the ICRC covers: identification 0 with DF (what an
    /// unconnected socket with `IP_PMTUDISC_DO` sends) is tried first,
    /// then every identification with DF set and clear (one chance in
    /// 2^16 of a wrong ICRC passing).
    pub fn icrc_valid(&self, src_port: u16, udp_payload: &[u8]) -> bool {
        let ep = self.endpoints(false, src_port);
        if verify_icrc(&ep, &IpMeta::default(), udp_payload) {
            return true;
        }
        if self.target.is_ipv6() {
            return false; // no identification in an IPv6 header
        }
        [true, false].into_iter().any(|dont_fragment| {
            (0..=u16::MAX).any(|ipv4_id| {
                let meta = IpMeta { ipv4_id, dont_fragment, ..IpMeta::default() };
                verify_icrc(&ep, &meta, udp_payload)
            })
        })
    }

    /// The case's capture as a pcap file (Ethernet frames).
    pub fn pcap(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // in time order (a packet is stamped when it arrived, and recorded
        // when the runner takes it)
        let mut frames: Vec<_> = self.frames.iter().collect();
        frames.sort_by_key(|(ts, _)| *ts);
        if let Ok(mut w) = PcapWriter::new(&mut out, LinkType::Ethernet) {
            for (ts, f) in frames {
                let _ = w.write_frame(*ts, f);
            }
        }
        out
    }
}

/// `r` with `payload` as bytes to send from `ep`, ICRC filled in (its
/// bits flipped afterwards when `corrupt_icrc`).
fn build(
    r: &RoceRepr,
    payload: &[u8],
    corrupt_icrc: bool,
    ep: &UdpEndpoints,
) -> io::Result<Vec<u8>> {
    let mut b = build_with(r, payload, ep, &IpMeta::default())?;
    if corrupt_icrc {
        let n = b.len();
        for x in &mut b[n.saturating_sub(4)..] {
            *x ^= 0xFF;
        }
    }
    Ok(b)
}

/// `r` with `payload` as bytes to send from `ep` with the IP header
/// fields `meta`, ICRC filled in.
fn build_with(
    r: &RoceRepr,
    payload: &[u8],
    ep: &UdpEndpoints,
    meta: &IpMeta,
) -> io::Result<Vec<u8>> {
    let bad = |e: roce_packet::Error| io::Error::new(io::ErrorKind::InvalidInput, e.to_string());
    let mut b = r.to_vec(payload).map_err(bad)?;
    fill_icrc(ep, meta, &mut b).map_err(bad)?;
    Ok(b)
}

/// The reader thread's socket and buffers.
struct Reader {
    sock: UdpSocket,
    buf: Vec<u8>,
    /// Control-message space for the TOS / traffic class.
    cmsg: Vec<u8>,
}

impl Reader {
    /// One datagram, stamped now, with its sender and its IP TOS / traffic
    /// class (`IP_RECVTOS` / `IPV6_RECVTCLASS`); `None` on the socket's
    /// receive timeout or an error.
    fn recv(&mut self) -> Option<Arrival> {
        let mut iov = [IoSliceMut::new(&mut self.buf)];
        let m = nsock::recvmsg::<SockaddrStorage>(
            self.sock.as_raw_fd(),
            &mut iov,
            Some(&mut self.cmsg),
            MsgFlags::empty(),
        )
        .ok()?;
        let when = Instant::now();
        let mut tos = None;
        if let Ok(it) = m.cmsgs() {
            for c in it {
                match c {
                    ControlMessageOwned::Ipv4Tos(t) => tos = Some(t),
                    ControlMessageOwned::Ipv6TClass(t) => tos = u8::try_from(t).ok(),
                    _ => {}
                }
            }
        }
        let from = m.address.as_ref().and_then(|a| {
            if let Some(v4) = a.as_sockaddr_in() {
                return Some(SocketAddr::new(IpAddr::V4(v4.ip()), v4.port()));
            }
            a.as_sockaddr_in6().map(|v6| SocketAddr::new(IpAddr::V6(v6.ip()), v6.port()))
        })?;
        let n = m.bytes;
        Some((self.buf.get(..n)?.to_vec(), from, when, tos))
    }
}

/// The reader thread ends within its 50 ms receive timeout and closes its
/// handle on the socket: the address is free again once the wire is gone.
impl Drop for Wire {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.reader.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecn_names() {
        assert_eq!(ecn_name(0xC0), "Not-ECT");
        assert_eq!(ecn_name(0x02), "ECT(0)");
        assert_eq!(ecn_name(0x01), "ECT(1)");
        assert_eq!(ecn_name(0xBB), "CE");
    }

    /// A CNP's ICRC is found good whatever IPv4 identification and DF
    /// flag it was computed for (the tester's socket sees neither), and a
    /// changed byte is found.
    #[test]
    fn icrc_of_any_identification() {
        let me: IpAddr = "127.0.109.40".parse().unwrap();
        let target: IpAddr = "127.0.109.41".parse().unwrap();
        let w = Wire::bind(me, target).expect("tester socket");
        let mut r = RoceRepr::default();
        r.bth.opcode = roce_packet::Opcode::CNP;
        r.bth.becn = true;
        r.bth.dest_qp = roce_packet::Qpn::new(0xc0_0001);
        r.cnp = Some([0; 16]);
        let ep = UdpEndpoints { src: target, dst: me, src_port: 50_000, dst_port: ROCE_V2_PORT };
        for meta in [
            IpMeta::default(),
            IpMeta { ipv4_id: 0x1234, dont_fragment: false, tos: 0xC0, ..IpMeta::default() },
        ] {
            let mut b = build_with(&r, &[], &ep, &meta).unwrap();
            assert_eq!(b.len(), 32);
            assert!(w.icrc_valid(50_000, &b), "{meta:?}");
            b[12] ^= 1;
            assert!(!w.icrc_valid(50_000, &b), "{meta:?}: a reserved byte changed");
        }
    }
}
