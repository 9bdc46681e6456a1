//! Neighbour resolution for the raw transport: ARP (IPv4) and NDP (IPv6)
//! frames we build and parse ourselves, the kernel's neighbour table as a
//! first source, and a small cache with a bounded queue of frames waiting
//! for an answer. Pure functions only; the transport does the I/O.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Ethernet broadcast address.
pub const BROADCAST: [u8; 6] = [0xFF; 6];
/// EtherType of ARP.
pub const ETH_ARP: u16 = 0x0806;
/// EtherType of IPv4.
pub const ETH_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETH_IPV6: u16 = 0x86DD;

/// Write an Ethernet II header.
pub fn eth_header(out: &mut Vec<u8>, dst: [u8; 6], src: [u8; 6], ethertype: u16) {
    out.extend_from_slice(&dst);
    out.extend_from_slice(&src);
    out.extend_from_slice(&ethertype.to_be_bytes());
}

/// An ARP packet for Ethernet/IPv4 (operation 1 = request, 2 = reply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arp {
    /// 1 request, 2 reply.
    pub op: u16,
    /// Sender hardware address.
    pub sha: [u8; 6],
    /// Sender protocol address.
    pub spa: Ipv4Addr,
    /// Target hardware address.
    pub tha: [u8; 6],
    /// Target protocol address.
    pub tpa: Ipv4Addr,
}

impl Arp {
    /// The whole Ethernet frame carrying this ARP packet.
    pub fn frame(&self, eth_dst: [u8; 6]) -> Vec<u8> {
        let mut f = Vec::with_capacity(42);
        eth_header(&mut f, eth_dst, self.sha, ETH_ARP);
        f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4]);
        f.extend_from_slice(&self.op.to_be_bytes());
        f.extend_from_slice(&self.sha);
        f.extend_from_slice(&self.spa.octets());
        f.extend_from_slice(&self.tha);
        f.extend_from_slice(&self.tpa.octets());
        f
    }

    /// Parse the ARP payload after the Ethernet header (Ethernet/IPv4 only).
    pub fn parse(p: &[u8]) -> Option<Arp> {
        if p.len() < 28 || p[..6] != [0, 1, 0x08, 0x00, 6, 4] {
            return None;
        }
        let op = u16::from_be_bytes([p[6], p[7]]);
        let mac = |o: usize| -> [u8; 6] { p[o..o + 6].try_into().unwrap_or([0; 6]) };
        let ip = |o: usize| Ipv4Addr::new(p[o], p[o + 1], p[o + 2], p[o + 3]);
        Some(Arp { op, sha: mac(8), spa: ip(14), tha: mac(18), tpa: ip(24) })
    }
}

pub use roce_packet::frame::inet_checksum;

/// Checksum of an upper-layer IPv6 packet (`body`, checksum field zeroed)
/// with its pseudo-header (RFC 8200 section 8.1).
pub fn ipv6_upper_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, next: u8, body: &[u8]) -> u16 {
    let len = (body.len() as u32).to_be_bytes();
    let nh = [0, 0, 0, next];
    inet_checksum(&[&src.octets(), &dst.octets(), &len, &nh, body])
}

/// UDP-over-IPv6 checksum as it goes on the wire: 0 is sent as 0xFFFF
/// (a zero UDP checksum is not allowed over IPv6).
pub fn udp6_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, udp_header_and_payload: &[u8]) -> u16 {
    match ipv6_upper_checksum(src, dst, 17, udp_header_and_payload) {
        0 => 0xFFFF,
        c => c,
    }
}

/// The solicited-node multicast address of `a` (ff02::1:ffXX:XXXX).
pub fn solicited_node(a: &Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// The Ethernet multicast address of an IPv6 multicast address.
pub fn ipv6_multicast_mac(a: &Ipv6Addr) -> [u8; 6] {
    let o = a.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// An ICMPv6 neighbour solicitation (135) or advertisement (136) frame.
/// `target` is the address asked about (or advertised); the link-layer
/// option is source (1) for a solicitation, target (2) for an advertisement.
pub fn ndp_frame(
    kind: u8,
    src_mac: [u8; 6],
    eth_dst: [u8; 6],
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    target: &Ipv6Addr,
    flags: u8,
) -> Vec<u8> {
    let mut icmp = Vec::with_capacity(32);
    icmp.extend_from_slice(&[kind, 0, 0, 0, flags, 0, 0, 0]);
    icmp.extend_from_slice(&target.octets());
    icmp.extend_from_slice(&[if kind == 135 { 1 } else { 2 }, 1]);
    icmp.extend_from_slice(&src_mac);
    let c = ipv6_upper_checksum(src, dst, 58, &icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = Vec::with_capacity(14 + 40 + icmp.len());
    eth_header(&mut f, eth_dst, src_mac, ETH_IPV6);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, 255]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&icmp);
    f
}

/// A parsed neighbour solicitation/advertisement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ndp {
    /// 135 solicitation, 136 advertisement.
    pub kind: u8,
    /// IPv6 source address.
    pub src: Ipv6Addr,
    /// Target address.
    pub target: Ipv6Addr,
    /// The link-layer address option (source for 135, target for 136).
    pub lladdr: Option<[u8; 6]>,
}

/// Parse an IPv6 packet (after the Ethernet header) as NS/NA; `None` for
/// anything else. The ICMPv6 checksum and hop limit 255 are checked.
pub fn parse_ndp(p: &[u8]) -> Option<Ndp> {
    if p.len() < 40 + 24 || p[0] >> 4 != 6 || p[6] != 58 || p[7] != 255 {
        return None;
    }
    let plen = usize::from(u16::from_be_bytes([p[4], p[5]]));
    let icmp = p.get(40..40 + plen)?;
    if icmp.len() < 24 {
        return None;
    }
    let kind = icmp[0];
    if !(kind == 135 || kind == 136) || icmp[1] != 0 {
        return None;
    }
    let a16 =
        |b: &[u8]| -> Option<Ipv6Addr> { Some(Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?)) };
    let src = a16(&p[8..24])?;
    let dst = a16(&p[24..40])?;
    let mut z = icmp.to_vec();
    z[2] = 0;
    z[3] = 0;
    if ipv6_upper_checksum(&src, &dst, 58, &z) != u16::from_be_bytes([icmp[2], icmp[3]]) {
        return None;
    }
    let target = a16(&icmp[8..24])?;
    let want = if kind == 135 { 1 } else { 2 };
    let mut lladdr = None;
    let mut opts = &icmp[24..];
    while opts.len() >= 8 {
        let (t, l) = (opts[0], usize::from(opts[1]) * 8);
        if l == 0 || l > opts.len() {
            break;
        }
        if t == want && l >= 8 {
            lladdr = opts[2..8].try_into().ok();
        }
        opts = &opts[l..];
    }
    Some(Ndp { kind, src, target, lladdr })
}

/// Parse a MAC address `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut n = 0;
    for part in s.split(':') {
        if n == 6 || part.len() != 2 {
            return None;
        }
        m[n] = u8::from_str_radix(part, 16).ok()?;
        n += 1;
    }
    (n == 6).then_some(m)
}

/// Find `ip` on `dev` in the text of `/proc/net/arp`: complete entries
/// (flag `ATF_COM` = 0x2) with a non-zero hardware address only.
pub fn lookup_proc_arp(text: &str, ip: Ipv4Addr, dev: &str) -> Option<[u8; 6]> {
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || f[0].parse::<Ipv4Addr>().ok()? != ip || f[5] != dev {
            return None;
        }
        let flags = u32::from_str_radix(f[2].trim_start_matches("0x"), 16).ok()?;
        let mac = parse_mac(f[3])?;
        (flags & 0x2 != 0 && mac != [0; 6]).then_some(mac)
    })
}

/// Find the link-layer address in the output of `ip -6 neigh show ADDR dev
/// DEV` (lines like `fd00::2 lladdr 02:.. REACHABLE`); entries in state
/// `FAILED` or `INCOMPLETE` (no `lladdr`) are ignored.
pub fn lookup_ip_neigh(text: &str, ip: Ipv6Addr) -> Option<[u8; 6]> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.first()?.parse::<Ipv6Addr>().ok()? != ip || f.contains(&"FAILED") {
            return None;
        }
        let i = f.iter().position(|w| *w == "lladdr")?;
        parse_mac(f.get(i + 1)?)
    })
}

/// A resolved neighbour.
#[derive(Clone, Copy, Debug)]
struct Entry {
    mac: [u8; 6],
    at: Instant,
}

/// Frames (without their destination MAC yet) waiting for one address.
#[derive(Debug)]
pub struct Waiting {
    /// Complete frames; bytes 0..6 are overwritten with the MAC once known.
    pub frames: VecDeque<Vec<u8>>,
    /// Requests sent so far.
    pub tries: u32,
    /// When to send the next request (or give up).
    pub next_try: Instant,
}

/// Neighbour cache plus the bounded queue of frames pending resolution.
#[derive(Debug)]
pub struct NeighCache {
    entries: HashMap<IpAddr, Entry>,
    /// Frames waiting per destination.
    pub pending: HashMap<IpAddr, Waiting>,
    pending_frames: usize,
    /// How long an entry is trusted before the kernel table is read again.
    pub ttl: Duration,
    /// Most frames waiting in total.
    pub max_pending: usize,
    /// Most entries kept.
    pub max_entries: usize,
}

impl NeighCache {
    /// An empty cache.
    pub fn new(ttl: Duration, max_pending: usize) -> NeighCache {
        NeighCache {
            entries: HashMap::new(),
            pending: HashMap::new(),
            pending_frames: 0,
            ttl,
            max_pending,
            max_entries: 4096,
        }
    }
    /// A fresh cached MAC for `ip`.
    pub fn get(&self, ip: &IpAddr, now: Instant) -> Option<[u8; 6]> {
        self.entries.get(ip).filter(|e| now.duration_since(e.at) < self.ttl).map(|e| e.mac)
    }
    /// Remember `ip` → `mac`; returns the frames that were waiting for it.
    pub fn insert(&mut self, ip: IpAddr, mac: [u8; 6], now: Instant) -> VecDeque<Vec<u8>> {
        if self.entries.len() >= self.max_entries && !self.entries.contains_key(&ip) {
            let ttl = self.ttl;
            self.entries.retain(|_, e| now.duration_since(e.at) < ttl);
            if self.entries.len() >= self.max_entries {
                self.entries.clear();
            }
        }
        self.entries.insert(ip, Entry { mac, at: now });
        match self.pending.remove(&ip) {
            Some(w) => {
                self.pending_frames -= w.frames.len();
                w.frames
            }
            None => VecDeque::new(),
        }
    }
    /// Whether a frame for `ip` would be queued behind others (keeps order).
    pub fn is_pending(&self, ip: &IpAddr) -> bool {
        self.pending.contains_key(ip)
    }
    /// Queue a frame for `ip`. Returns `Err(frame)` if the queue is full,
    /// `Ok(true)` if this is the first frame for `ip` (send a request now).
    pub fn enqueue(&mut self, ip: IpAddr, frame: Vec<u8>, now: Instant) -> Result<bool, Vec<u8>> {
        if self.pending_frames >= self.max_pending {
            return Err(frame);
        }
        self.pending_frames += 1;
        let first = !self.pending.contains_key(&ip);
        self.pending
            .entry(ip)
            .or_insert_with(|| Waiting { frames: VecDeque::new(), tries: 0, next_try: now })
            .frames
            .push_back(frame);
        Ok(first)
    }
    /// Drop the frames waiting for `ip`; returns how many.
    pub fn give_up(&mut self, ip: &IpAddr) -> usize {
        let n = self.pending.remove(ip).map(|w| w.frames.len()).unwrap_or(0);
        self.pending_frames -= n;
        n
    }
    /// Frames waiting in total.
    pub fn pending_frames(&self) -> usize {
        self.pending_frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arp_roundtrip() {
        let a = Arp {
            op: 1,
            sha: [2, 0, 1, 2, 3, 4],
            spa: Ipv4Addr::new(10, 77, 0, 1),
            tha: [0; 6],
            tpa: Ipv4Addr::new(10, 77, 0, 2),
        };
        let f = a.frame(BROADCAST);
        assert_eq!(f.len(), 42);
        assert_eq!(&f[12..14], &[0x08, 0x06]);
        assert_eq!(Arp::parse(&f[14..]), Some(a));
        assert_eq!(Arp::parse(&f[14..30]), None);
    }

    #[test]
    fn proc_arp_parsing() {
        let t = "IP address       HW type     Flags       HW address            Mask     Device\n\
                 10.77.0.2        0x1         0x2         aa:bb:cc:dd:ee:01     *        veth-a\n\
                 10.77.0.3        0x1         0x0         00:00:00:00:00:00     *        veth-a\n\
                 10.77.0.4        0x1         0x2         aa:bb:cc:dd:ee:04     *        other\n";
        let ip = |s: &str| s.parse().unwrap();
        assert_eq!(
            lookup_proc_arp(t, ip("10.77.0.2"), "veth-a"),
            Some([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 1])
        );
        assert_eq!(lookup_proc_arp(t, ip("10.77.0.3"), "veth-a"), None);
        assert_eq!(lookup_proc_arp(t, ip("10.77.0.4"), "veth-a"), None);
        assert_eq!(lookup_proc_arp("garbage\n1 2", ip("10.77.0.2"), "x"), None);
    }

    #[test]
    fn ip_neigh_parsing() {
        let t = "fd00:77::2 lladdr 02:11:22:33:44:55 REACHABLE\nfd00:77::3  FAILED\n";
        assert_eq!(
            lookup_ip_neigh(t, "fd00:77::2".parse().unwrap()),
            Some([2, 0x11, 0x22, 0x33, 0x44, 0x55])
        );
        assert_eq!(lookup_ip_neigh(t, "fd00:77::3".parse().unwrap()), None);
        assert_eq!(parse_mac("02:11:22:33:44"), None);
        assert_eq!(parse_mac("02:11:22:33:44:55:66"), None);
    }

    #[test]
    fn ndp_roundtrip_and_checksum() {
        let src: Ipv6Addr = "fd00:77::1".parse().unwrap();
        let tgt: Ipv6Addr = "fd00:77::2".parse().unwrap();
        let dst = solicited_node(&tgt);
        assert_eq!(dst, "ff02::1:ff00:2".parse::<Ipv6Addr>().unwrap());
        let mac = [2, 0, 0, 0, 0, 1];
        let f = ndp_frame(135, mac, ipv6_multicast_mac(&dst), &src, &dst, &tgt, 0);
        assert_eq!(&f[..6], &[0x33, 0x33, 0xff, 0, 0, 2]);
        let n = parse_ndp(&f[14..]).expect("parses");
        assert_eq!((n.kind, n.src, n.target, n.lladdr), (135, src, tgt, Some(mac)));
        let mut bad = f.clone();
        bad[14 + 40 + 10] ^= 1;
        assert_eq!(parse_ndp(&bad[14..]), None, "checksum is checked");
        assert_eq!(parse_ndp(&f[14..50]), None);
        // A payload length of 0..23 (or beyond the frame) is rejected, not a panic.
        for plen in [0u16, 1, 23, 1000] {
            let mut g = f[14..].to_vec();
            g[4..6].copy_from_slice(&plen.to_be_bytes());
            assert_eq!(parse_ndp(&g), None, "plen {plen}");
        }
        // Options with length 0 or running past the end stop the scan.
        let mut g = f[14..].to_vec();
        g[40 + 25] = 0;
        assert!(parse_ndp(&g).is_none(), "checksum no longer matches");
    }

    #[test]
    fn parsers_never_panic_on_arbitrary_bytes() {
        let mut x: u32 = 0x1234_5678;
        for len in 0..200usize {
            for _ in 0..20 {
                let v: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        x as u8
                    })
                    .collect();
                let _ = Arp::parse(&v);
                let mut w = v.clone();
                if w.len() >= 8 {
                    w[0] = 0x60;
                    w[6] = 58;
                    w[7] = 255;
                }
                let _ = parse_ndp(&w);
                let _ = lookup_proc_arp(&String::from_utf8_lossy(&v), Ipv4Addr::LOCALHOST, "x");
            }
        }
    }

    #[test]
    fn udp6_checksum_known_value() {
        // Checksum of a UDP datagram verifies to zero when summed with itself.
        let s: Ipv6Addr = "fd00::1".parse().unwrap();
        let d: Ipv6Addr = "fd00::2".parse().unwrap();
        let mut udp = vec![0x12, 0xB7, 0x12, 0xB7, 0, 12, 0, 0, 1, 2, 3, 4];
        let c = udp6_checksum(&s, &d, &udp);
        udp[6..8].copy_from_slice(&c.to_be_bytes());
        assert_eq!(ipv6_upper_checksum(&s, &d, 17, &udp), 0);
    }

    #[test]
    fn cache_queue_is_bounded_and_ordered() {
        let now = Instant::now();
        let mut c = NeighCache::new(Duration::from_secs(30), 2);
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(c.enqueue(ip, vec![1], now), Ok(true));
        assert_eq!(c.enqueue(ip, vec![2], now), Ok(false));
        assert_eq!(c.enqueue(ip, vec![3], now), Err(vec![3]));
        let q = c.insert(ip, [9; 6], now);
        assert_eq!(q, VecDeque::from(vec![vec![1], vec![2]]));
        assert_eq!(c.pending_frames(), 0);
        assert_eq!(c.get(&ip, now), Some([9; 6]));
        assert_eq!(c.get(&ip, now + Duration::from_secs(31)), None);
        assert_eq!(c.enqueue(ip, vec![4], now), Ok(true));
        assert_eq!(c.give_up(&ip), 1);
        assert_eq!(c.pending_frames(), 0);
    }
}
