//! The tester's wire: a UDP socket on port 4791 of the tester's own
//! address, from which it sends the packets a case crafts (headers from
//! the packet crate, ICRC computed for the IP header Linux will put in
//! front: DF set, identification 0 for an unconnected socket with
//! `IP_PMTUDISC_DO`) and on which it receives what the target answers.
//! Every frame both ways is kept for the case's pcap.

use roce_packet::frame::{ethernet_frame, fill_icrc, verify_icrc, LinkType};
use roce_packet::{IpMeta, RocePacket, RoceRepr, UdpEndpoints, ROCE_V2_PORT};
use roce_pcap::PcapWriter;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
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
}

/// A datagram as the reader thread took it off the socket: its bytes,
/// its sender, and when it arrived.
type Arrival = (Vec<u8>, SocketAddr, Instant);

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
        let reader = sock.try_clone()?;
        // (woken every 50 ms to see whether the wire is gone)
        reader.set_read_timeout(Some(Duration::from_millis(50)))?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, arrivals) = std::sync::mpsc::channel();
        let halt = stop.clone();
        let reader = std::thread::Builder::new().name("conform-wire".into()).spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !halt.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok((n, from)) = reader.recv_from(&mut buf) {
                    if tx.send((buf[..n].to_vec(), from, Instant::now())).is_err() {
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
        })
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
        let mut b = r
            .to_vec(payload)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let ep = self.endpoints(true, ROCE_V2_PORT);
        fill_icrc(&ep, &IpMeta::default(), &mut b)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        if corrupt_icrc {
            let n = b.len();
            for x in &mut b[n - 4..] {
                *x ^= 0xFF;
            }
        }
        self.sock.send_to(&b, SocketAddr::new(self.target, ROCE_V2_PORT))?;
        self.record(&ep, &b);
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
        let mut b = r
            .to_vec(payload)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let ep = UdpEndpoints {
            src: self.me,
            dst: group,
            src_port: ROCE_V2_PORT,
            dst_port: ROCE_V2_PORT,
        };
        fill_icrc(&ep, &IpMeta::default(), &mut b)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        if corrupt_icrc {
            let n = b.len();
            for x in &mut b[n - 4..] {
                *x ^= 0xFF;
            }
        }
        roce_transport::set_multicast_sender(&self.sock, self.me);
        self.sock.send_to(&b, SocketAddr::new(group, ROCE_V2_PORT))?;
        self.record(&ep, &b);
        Ok(())
    }

    fn record(&mut self, ep: &UdpEndpoints, udp_payload: &[u8]) {
        self.record_at(self.start.elapsed(), ep, udp_payload);
    }

    fn record_at(&mut self, at: Duration, ep: &UdpEndpoints, udp_payload: &[u8]) {
        let mac = |ip: IpAddr| roce_transport::pcap::mac_of(ip);
        if let Ok(f) = ethernet_frame(mac(ep.src), mac(ep.dst), ep, &IpMeta::default(), udp_payload)
        {
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
            let (b, from, when) = match self.arrivals.recv_timeout(left) {
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
            self.record_at(at, &ep, &b);
            match parsed {
                Ok(p) => {
                    let repr = RoceRepr::parse(&p);
                    let payload = p.payload().to_vec();
                    return Ok(Some(Received { repr, payload, at, src_port: from.port() }));
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
