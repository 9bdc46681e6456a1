//! Golden tests on real kernel rxe traffic and on the oracle's crafted
//! samples (all in tests/data/, see tests/data/make_expect.py).
//!
//! * Every RoCE frame of every capture is decoded and compared with what the
//!   independent oracle (`oracle.py --no-tshark`) reported for it: frame
//!   number, GSO segment, addresses, ports, TOS/TTL, L2 trailer, every BTH
//!   field, every extension header, payload length, ICRC verdict and the
//!   ICRC the oracle computed.
//! * Every RoCE frame is re-emitted from values (Ethernet header, IP/UDP
//!   headers via `IpUdpHeader::build`, `RoceRepr::emit`, ICRC via
//!   `fill_icrc`) and must equal the captured bytes exactly.
//! * GSO splitting, every link type, pcap/pcapng reading and writing, and
//!   `parse_frame` never panicking on truncated or random input.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::time::Duration;
use std::collections::HashMap;
use std::path::PathBuf;

use etherparse::{EtherType, Ethernet2Header, UdpHeader};
use roce_packet::frame::{
    ethernet_frame, parse_frame, split_gso, GsoInfo, IpMeta, IpUdpHeader, RoceDatagram,
    UdpEndpoints,
};
use roce_packet::{
    icrc, BthRepr, Error, Opcode, PKey, Psn, Qpn, RocePacket, RoceRepr, ROCE_V2_PORT,
};
use roce_pcap::{
    read_capture, read_capture_file, CaptureError, CapturedFrame, LinkType, PcapWriter,
};

/// Every capture in tests/data and the number of RoCE packets the oracle
/// reports in it (also the number this test checks).
const CAPTURES: [(&str, usize); 15] = [
    ("host_udp", 217),
    ("rc_pingpong", 208),
    ("rc_pingpong_mtu9000", 200),
    ("rc_pingpong_small", 40),
    ("read_lat", 200),
    ("retry_exceeded", 4),
    ("rnr", 44),
    ("rping", 65),
    ("send_lat", 406),
    ("srq_pingpong", 210),
    ("uc_pingpong", 160),
    ("ud_pingpong", 40),
    ("write_bw", 300),
    ("write_lat", 406),
    ("samples", 29),
];

fn data_path(file: &str) -> PathBuf {
    PathBuf::from(crate::CRATE_DIR).join("tests").join("data").join(file)
}

fn frames_of(name: &str) -> Vec<CapturedFrame> {
    read_capture_file(&data_path(&format!("{name}.pcap")))
        .unwrap_or_else(|e| panic!("{name}.pcap: {e}"))
}

/// One line of NAME.expect.tsv.
struct Row(HashMap<String, String>);

impl Row {
    fn s(&self, k: &str) -> &str {
        self.0.get(k).unwrap_or_else(|| panic!("column {k} missing")).as_str()
    }
    fn n(&self, k: &str) -> u64 {
        self.s(k).parse().unwrap_or_else(|_| panic!("column {k}: {:?} is not a number", self.s(k)))
    }
}

fn load_expect(name: &str) -> Vec<Row> {
    let text = std::fs::read_to_string(data_path(&format!("{name}.expect.tsv"))).unwrap();
    let mut lines = text.lines();
    let cols: Vec<&str> = lines.next().unwrap().split('\t').collect();
    lines
        .map(|l| {
            let vals: Vec<&str> = l.split('\t').collect();
            assert_eq!(vals.len(), cols.len(), "{name}: bad expectation line {l:?}");
            Row(cols.iter().zip(vals).map(|(c, v)| (c.to_string(), v.to_string())).collect())
        })
        .collect()
}

/// All RoCE datagrams of a capture, with the frame each came from.
fn roce_of(frames: &[CapturedFrame]) -> Vec<(&CapturedFrame, RoceDatagram)> {
    let mut out = Vec::new();
    for f in frames {
        match parse_frame(f.linktype, &f.data, ROCE_V2_PORT) {
            Ok(Some(v)) => out.extend(v.into_iter().map(|d| (f, d))),
            Ok(None) => {}
            Err(e) => panic!("frame {}: {e}", f.number),
        }
    }
    out
}

/// The extension headers in make_expect.py's notation.
fn ext_string(r: &RoceRepr) -> String {
    let mut p = Vec::new();
    if let Some(x) = r.reth {
        p.push(format!("reth={}:{}:{}", x.va, x.rkey.value(), x.dma_len));
    }
    if let Some(x) = r.aeth {
        p.push(format!("aeth={}:{}", x.syndrome.to_u8(), x.msn.value()));
    }
    if let Some(x) = r.atomic_eth {
        p.push(format!("atomiceth={}:{}:{}:{}", x.va, x.rkey.value(), x.swap_add, x.compare));
    }
    if let Some(x) = r.atomic_ack_eth {
        p.push(format!("atomicacketh={}", x.orig_rem_data));
    }
    if let Some(x) = r.immdt {
        p.push(format!("immdt={x}"));
    }
    if let Some(x) = r.ieth {
        p.push(format!("ieth={}", x.value()));
    }
    if let Some(x) = r.deth {
        p.push(format!("deth={}:{}", x.qkey.value(), x.src_qp.value()));
    }
    if let Some(x) = r.rdeth {
        p.push(format!("rdeth={}", x & 0xFF_FFFF));
    }
    if let Some(x) = r.feth {
        p.push(format!("feth={x}"));
    }
    if p.is_empty() {
        "-".into()
    } else {
        p.join(";")
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Compare one datagram with the oracle's record for it.
fn check_row(name: &str, row: &Row, f: &CapturedFrame, d: &RoceDatagram) {
    let ctx = format!("{name} frame {}", f.number);
    assert_eq!(row.n("frame") as usize, f.number, "{ctx}");
    let seg = d.gso.map(|g| g.segment.to_string()).unwrap_or("-".into());
    assert_eq!(row.s("seg"), seg, "{ctx}: GSO segment");
    assert_eq!(row.n("ipver"), u64::from(d.ip_version), "{ctx}");
    assert_eq!(row.s("src"), d.endpoints.src.to_string(), "{ctx}");
    assert_eq!(row.s("dst"), d.endpoints.dst.to_string(), "{ctx}");
    assert_eq!(row.n("sport"), u64::from(d.endpoints.src_port), "{ctx}");
    assert_eq!(row.n("dport"), u64::from(d.endpoints.dst_port), "{ctx}");
    assert_eq!(row.n("tos"), u64::from(d.meta.tos), "{ctx}: TOS/traffic class");
    assert_eq!(row.n("ttl"), u64::from(d.meta.ttl), "{ctx}: TTL/hop limit");
    assert_eq!(row.n("trailer") as usize, d.l2_trailer_len, "{ctx}: L2 trailer");
    assert!(!d.truncated, "{ctx}");
    if d.ip_version == 4 {
        assert_eq!(d.ipv4_checksum_ok, Some(true), "{ctx}");
    }

    let b = &d.udp_payload;
    let bth = BthRepr::parse_bytes(b).unwrap();
    assert_eq!(row.n("opcode"), u64::from(bth.opcode.0), "{ctx}: opcode");
    assert_eq!(row.n("se"), u64::from(bth.solicited), "{ctx}: SE");
    assert_eq!(row.n("migreq"), u64::from(bth.migreq), "{ctx}: M");
    assert_eq!(row.n("padcnt"), u64::from(bth.pad_count), "{ctx}: PadCnt");
    assert_eq!(row.n("tver"), u64::from(bth.tver), "{ctx}: TVer");
    assert_eq!(row.n("pkey"), u64::from(bth.pkey.value()), "{ctx}: P_Key");
    assert_eq!(row.n("fecn"), u64::from(bth.fecn), "{ctx}: FECN");
    assert_eq!(row.n("becn"), u64::from(bth.becn), "{ctx}: BECN");
    assert_eq!(row.n("resv6"), u64::from(bth.resv6), "{ctx}: resv6");
    assert_eq!(row.n("destqp"), u64::from(bth.dest_qp.value()), "{ctx}: DestQP");
    assert_eq!(row.n("ackreq"), u64::from(bth.ack_req), "{ctx}: AckReq");
    assert_eq!(row.n("resv7"), u64::from(bth.resv7), "{ctx}: resv7");
    assert_eq!(row.n("psn"), u64::from(bth.psn.value()), "{ctx}: PSN");

    assert_eq!(row.n("icrc_ok") == 1, d.icrc_ok(), "{ctx}: ICRC verdict");
    let computed = icrc::compute(&d.ip_header, &d.udp_header, &b[..b.len() - icrc::LEN]);
    assert_eq!(row.s("icrc_expected"), hex(&computed), "{ctx}: ICRC value");

    if row.s("errors") == "-" {
        let p = d.packet().unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let r = RoceRepr::parse(&p);
        assert_eq!(row.n("payload_len") as usize, r.payload_len, "{ctx}: payload length");
        assert_eq!(row.s("ext"), ext_string(&r), "{ctx}: extension headers");
    } else {
        assert!(d.packet().is_err(), "{ctx}: oracle says {}, we accepted it", row.s("errors"));
    }
}

#[derive(Default, Debug)]
struct EmitStats {
    exact: usize,
    bad_icrc: usize,
    with_trailer: usize,
    with_udp_csum: usize,
    nonzero_pad: usize,
    not_roce: usize,
}

/// Rebuild a captured Ethernet frame from parsed values and compare.
fn reemit(ctx: &str, f: &CapturedFrame, d: &RoceDatagram, st: &mut EmitStats) {
    assert_eq!(f.linktype, LinkType::Ethernet, "{ctx}");
    assert!(d.gso.is_none(), "{ctx}: golden captures hold no GSO super-packets");
    let Ok(p) = d.packet() else {
        st.not_roce += 1;
        return;
    };
    let r = RoceRepr::parse(&p);

    let (eth, _) = Ethernet2Header::from_slice(&f.data).unwrap();
    let et = if d.ip_version == 4 { EtherType::IPV4 } else { EtherType::IPV6 };
    let eth = Ethernet2Header { source: eth.source, destination: eth.destination, ether_type: et };
    let mut out = eth.to_bytes().to_vec();

    let mut roce = r.to_vec(p.payload()).unwrap();
    // RoceRepr::emit writes zero pad bytes; keep the wire's if they are not.
    let pad = p.pad();
    if pad.iter().any(|&x| x != 0) {
        st.nonzero_pad += 1;
        let end = roce.len() - icrc::LEN;
        roce[end - pad.len()..end].copy_from_slice(pad);
    }
    let h = IpUdpHeader::build(&d.endpoints, &d.meta, roce.len()).unwrap();
    h.fill_icrc(&mut roce);
    out.extend_from_slice(h.ip());
    let mut udp: [u8; 8] = h.udp().try_into().unwrap();
    // rxe sends UDP checksum 0; scapy-made samples carry a real one:
    // recompute it from values when the capture has one.
    if d.udp_header[6..8] != [0, 0] {
        st.with_udp_csum += 1;
        let uh = UdpHeader {
            source_port: d.endpoints.src_port,
            destination_port: d.endpoints.dst_port,
            length: (8 + roce.len()) as u16,
            checksum: 0,
        };
        let c = match (d.endpoints.src, d.endpoints.dst) {
            (IpAddr::V4(s), IpAddr::V4(t)) => {
                uh.calc_checksum_ipv4_raw(s.octets(), t.octets(), &roce).unwrap()
            }
            (IpAddr::V6(s), IpAddr::V6(t)) => {
                uh.calc_checksum_ipv6_raw(s.octets(), t.octets(), &roce).unwrap()
            }
            _ => unreachable!(),
        };
        udp[6..8].copy_from_slice(&c.to_be_bytes());
    }
    out.extend_from_slice(&udp);
    out.extend_from_slice(&roce);
    // Ethernet padding after the IP datagram is not ours to build: append
    // the captured bytes and count the frames that have some.
    if d.l2_trailer_len > 0 {
        st.with_trailer += 1;
        let trailer = &f.data[f.data.len() - d.l2_trailer_len..];
        assert!(trailer.iter().all(|&b| b == 0), "{ctx}: non-zero Ethernet padding");
        assert_eq!(f.data.len(), 60, "{ctx}: padding only up to the 60-byte minimum");
        out.extend_from_slice(trailer);
    }
    assert_eq!(out.len(), f.data.len(), "{ctx}: rebuilt length");
    if d.icrc_ok() {
        assert_eq!(hex(&out), hex(&f.data), "{ctx}: rebuilt bytes differ");
        st.exact += 1;
    } else {
        // Everything but the ICRC matches; the ICRC we compute differs.
        let ie = f.data.len() - d.l2_trailer_len;
        assert_eq!(out[..ie - 4], f.data[..ie - 4], "{ctx}");
        assert_ne!(out[ie - 4..ie], f.data[ie - 4..ie], "{ctx}: recomputed ICRC equals wire");
        assert_eq!(out[ie..], f.data[ie..], "{ctx}");
        st.bad_icrc += 1;
    }
}

#[test]
fn captures_match_oracle_and_reemit_exactly() {
    let mut total = 0;
    let mut report = Vec::new();
    for (name, count) in CAPTURES {
        let frames = frames_of(name);
        let expect = load_expect(name);
        let got = roce_of(&frames);
        assert_eq!(expect.len(), count, "{name}: expectation file");
        assert_eq!(got.len(), count, "{name}: RoCE packets found");
        let mut st = EmitStats::default();
        for (row, (f, d)) in expect.iter().zip(&got) {
            check_row(name, row, f, d);
            reemit(&format!("{name} frame {}", f.number), f, d, &mut st);
        }
        report.push(format!("{name}: {} frames, {count} RoCE checked, {st:?}", frames.len()));
        match name {
            "samples" => {
                assert_eq!(
                    (st.exact, st.bad_icrc, st.with_trailer, st.with_udp_csum),
                    (27, 2, 1, 3)
                )
            }
            "host_udp" => assert_eq!((st.exact, st.not_roce), (216, 1)),
            _ => assert_eq!(st.exact, count, "{name}"),
        }
        assert_eq!(st.nonzero_pad, 0, "{name}");
        total += count;
    }
    for l in &report {
        println!("{l}");
    }
    assert_eq!(total, 2529);
}

/// The manifest's frame numbers with `"icrc_ok": false` (tiny ad-hoc reader).
fn manifest_bad_frames() -> Vec<usize> {
    let text = std::fs::read_to_string(data_path("samples.manifest.json")).unwrap();
    let mut bad = Vec::new();
    for entry in text.split('}') {
        let num = |key: &str| -> Option<String> {
            let i = entry.find(key)? + key.len();
            let rest = entry[i..].trim_start_matches([':', ' ']);
            Some(rest.chars().take_while(|c| c.is_alphanumeric()).collect())
        };
        if num("\"icrc_ok\"").as_deref() == Some("false") {
            bad.push(num("\"frame\"").unwrap().parse().unwrap());
        }
    }
    bad
}

#[test]
fn samples_only_frames_28_and_29_have_bad_icrc() {
    assert_eq!(manifest_bad_frames(), vec![28, 29]);
    let frames = frames_of("samples");
    let bad: Vec<usize> =
        roce_of(&frames).iter().filter(|(_, d)| !d.icrc_ok()).map(|(f, _)| f.number).collect();
    assert_eq!(bad, vec![28, 29]);
}

#[test]
fn host_udp_non_roce_datagram_is_not_split() {
    let frames = frames_of("host_udp");
    let f = &frames[14];
    assert_eq!(f.number, 15);
    let v = parse_frame(f.linktype, &f.data, ROCE_V2_PORT).unwrap().unwrap();
    assert_eq!(v.len(), 1, "a bad-ICRC datagram with no GSO structure stays whole");
    let d = &v[0];
    assert_eq!(d.gso, None);
    assert_eq!(d.udp_payload.len(), 64);
    assert!(!d.icrc_ok());
    assert_eq!(d.packet().unwrap_err(), Error::UnknownOpcode(0x72));
    assert_eq!(split_gso(d), None);
    // Every other RoCE frame of the capture is a single good packet.
    let all = roce_of(&frames);
    assert_eq!(all.iter().filter(|(_, d)| d.gso.is_some()).count(), 0);
    assert_eq!(all.iter().filter(|(_, d)| !d.icrc_ok()).count(), 1);
}

// ------------------------------------------------------------------ GSO

fn seg_payload(op: Opcode, psn: u32, payload: &[u8]) -> RoceRepr {
    let mut r = RoceRepr::default();
    r.bth.opcode = op;
    r.bth.pkey = PKey::new(0xFFFF);
    r.bth.dest_qp = Qpn::new(0x11);
    r.bth.psn = Psn::new(psn);
    r.bth.pad_count = roce_packet::pad_for(payload.len());
    r.payload_len = payload.len();
    r
}

/// Three segments as the kernel would send them, and the super-packet a
/// capture before segmentation shows.
fn gso_case(ep: &UdpEndpoints, base_id: u16) -> (Vec<u8>, Vec<(IpUdpHeader, Vec<u8>)>) {
    let sizes =
        [(Opcode::RC_SEND_FIRST, 256), (Opcode::RC_SEND_MIDDLE, 256), (Opcode::RC_SEND_LAST, 99)];
    let mut segs = Vec::new();
    let mut all = Vec::new();
    for (k, (op, n)) in sizes.into_iter().enumerate() {
        let payload: Vec<u8> = (0..n).map(|i| (i * 7 + k) as u8).collect();
        let r = seg_payload(op, 1000 + k as u32, &payload);
        let mut b = r.to_vec(&payload).unwrap();
        let meta = IpMeta { ipv4_id: base_id.wrapping_add(k as u16), ..IpMeta::default() };
        let h = IpUdpHeader::build(ep, &meta, b.len()).unwrap();
        h.fill_icrc(&mut b);
        all.extend_from_slice(&b);
        segs.push((h, b));
    }
    let meta = IpMeta { ipv4_id: base_id, ..IpMeta::default() };
    let frame = ethernet_frame([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], ep, &meta, &all).unwrap();
    (frame, segs)
}

fn check_gso(ep: &UdpEndpoints, base_id: u16) {
    let (frame, segs) = gso_case(ep, base_id);
    let v = parse_frame(LinkType::Ethernet, &frame, ROCE_V2_PORT).unwrap().unwrap();
    assert_eq!(v.len(), 3);
    for (k, (d, (h, bytes))) in v.iter().zip(&segs).enumerate() {
        assert_eq!(d.gso, Some(GsoInfo { segment: k, segments: 3, size: 272 }));
        assert_eq!(&d.udp_payload, bytes, "segment {k} payload");
        assert_eq!(d.ip_header, h.ip(), "segment {k} IP header as segmentation writes it");
        assert_eq!(&d.udp_header[..], h.udp(), "segment {k} UDP header");
        assert!(d.icrc_ok(), "segment {k} ICRC");
        let r = RoceRepr::parse(&d.packet().unwrap());
        assert_eq!(r.bth.psn, Psn::new(1000 + k as u32));
        if d.ip_version == 4 {
            assert_eq!(d.meta.ipv4_id, base_id.wrapping_add(k as u16));
        }
    }
}

#[test]
fn gso_super_packet_is_split_ipv4_and_ipv6() {
    let v4 = UdpEndpoints {
        src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        src_port: 0xC001,
        dst_port: ROCE_V2_PORT,
    };
    check_gso(&v4, 0x1234);
    check_gso(&v4, 0xFFFF); // identification wraps
    let v6 = UdpEndpoints {
        src: IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1)),
        dst: IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2)),
        src_port: 0xC001,
        dst_port: ROCE_V2_PORT,
    };
    check_gso(&v6, 0);

    // Corrupt the first segment's ICRC: no segment size validates, so the
    // datagram is returned whole with a bad ICRC.
    let (mut frame, _) = gso_case(&v4, 7);
    let i = 14 + 28 + 271;
    frame[i] ^= 1;
    let v = parse_frame(LinkType::Ethernet, &frame, ROCE_V2_PORT).unwrap().unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].gso, None);
    assert!(!v[0].icrc_ok());
}

#[test]
fn gso_search_is_bounded_on_hostile_datagrams() {
    // A period-4 pattern makes every offset look like a BTH of the same
    // P_Key/DestQP, so every candidate size costs a CRC.
    let ep = UdpEndpoints {
        src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        src_port: 1,
        dst_port: ROCE_V2_PORT,
    };
    let payload: Vec<u8> = [4u8, 0, 0xFF, 0xFF].repeat(16_000);
    let frame = ethernet_frame([0; 6], [0; 6], &ep, &IpMeta::default(), &payload).unwrap();
    // The search is bounded structurally (segment sizes up to GSO_MAX_SEGMENT),
    // not by a timer: this must simply finish and refuse to split.
    let v = parse_frame(LinkType::Ethernet, &frame, ROCE_V2_PORT).unwrap().unwrap();
    assert_eq!(v.len(), 1);
    assert!(!v[0].icrc_ok());
}

// ------------------------------------------------------------ link types

fn sample_frame(n: usize) -> Vec<u8> {
    frames_of("samples")[n - 1].data.clone()
}

/// Frame `f` (Ethernet, no VLAN) re-wrapped in each link type.
fn rewrap(f: &[u8]) -> Vec<(LinkType, Vec<u8>)> {
    let et = [f[12], f[13]];
    let ip = &f[14..];
    let v6 = et == [0x86, 0xDD];
    let cat = |h: &[u8]| [h, ip].concat();
    let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0];
    sll.extend_from_slice(&et);
    let mut sll2 = et.to_vec();
    sll2.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
    let fam_null: u32 = if v6 { 10 } else { 2 };
    let fam_loop: u32 = if v6 { 24 } else { 2 };
    let mut vlan = f[..12].to_vec();
    vlan.extend_from_slice(&[0x81, 0x00, 0x20, 0x05]);
    vlan.extend_from_slice(&f[12..]);
    let mut qinq = f[..12].to_vec();
    qinq.extend_from_slice(&[0x88, 0xA8, 0x00, 0x64, 0x81, 0x00, 0x20, 0x05]);
    qinq.extend_from_slice(&f[12..]);
    vec![
        (LinkType::Ethernet, f.to_vec()),
        (LinkType::Ethernet, vlan),
        (LinkType::Ethernet, qinq),
        (LinkType::RawIp, ip.to_vec()),
        (LinkType::LinuxSll, cat(&sll)),
        (LinkType::LinuxSll2, cat(&sll2)),
        (LinkType::Null, cat(&fam_null.to_le_bytes())),
        (LinkType::Null, cat(&fam_null.to_be_bytes())),
        (LinkType::Loop, cat(&fam_loop.to_be_bytes())),
    ]
}

#[test]
fn every_link_type_yields_the_same_datagram() {
    // Sample 1: IPv4; sample 22: IPv6.
    for n in [1, 22] {
        let f = sample_frame(n);
        let want = parse_frame(LinkType::Ethernet, &f, ROCE_V2_PORT).unwrap().unwrap();
        assert!(want[0].icrc_ok());
        for (lt, data) in rewrap(&f) {
            let got = parse_frame(lt, &data, ROCE_V2_PORT).unwrap();
            assert_eq!(got.as_ref(), Some(&want), "sample {n} as {lt:?}");
        }
        // Not RoCE: other port, unknown link type, ARP ethertype.
        assert_eq!(parse_frame(LinkType::Ethernet, &f, 4792).unwrap(), None);
        assert_eq!(parse_frame(LinkType::Other(147), &f, ROCE_V2_PORT).unwrap(), None);
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(parse_frame(LinkType::Ethernet, &arp, ROCE_V2_PORT).unwrap(), None);
    }
    for (v, lt) in [(1, LinkType::Ethernet), (101, LinkType::RawIp), (113, LinkType::LinuxSll)] {
        assert_eq!(LinkType::from_u32(v), lt);
        assert_eq!(lt.to_u32(), v);
    }
    for v in [12, 14, 228, 229] {
        assert_eq!(LinkType::from_u32(v), LinkType::RawIp);
    }
    assert_eq!(LinkType::from_u32(276), LinkType::LinuxSll2);
    assert_eq!(LinkType::from_u32(0), LinkType::Null);
    assert_eq!(LinkType::from_u32(108), LinkType::Loop);
    assert_eq!(LinkType::from_u32(147), LinkType::Other(147));
    assert_eq!(LinkType::Other(147).to_u32(), 147);
}

#[test]
fn fragments_and_broken_udp_lengths() {
    let f = sample_frame(1);
    // IPv4 fragment (MF set): not RoCE.
    let mut frag = f.clone();
    frag[14 + 6] |= 0x20;
    assert_eq!(parse_frame(LinkType::Ethernet, &frag, ROCE_V2_PORT).unwrap(), None);
    // Non-zero fragment offset: not RoCE.
    let mut frag = f.clone();
    frag[14 + 7] = 1;
    assert_eq!(parse_frame(LinkType::Ethernet, &frag, ROCE_V2_PORT).unwrap(), None);
    // UDP length disagreeing with the IP length: error.
    let mut bad = f.clone();
    let ul = u16::from_be_bytes([bad[38], bad[39]]);
    bad[38..40].copy_from_slice(&(ul - 4).to_be_bytes());
    assert!(matches!(
        parse_frame(LinkType::Ethernet, &bad, ROCE_V2_PORT),
        Err(Error::InvalidField(_))
    ));
    // UDP length below 8: error.
    bad[38..40].copy_from_slice(&4u16.to_be_bytes());
    assert!(matches!(
        parse_frame(LinkType::Ethernet, &bad, ROCE_V2_PORT),
        Err(Error::InvalidField(_))
    ));
    // IPv4 total length leaving no room for UDP: error.
    let mut bad = f.clone();
    bad[16..18].copy_from_slice(&24u16.to_be_bytes());
    assert!(matches!(
        parse_frame(LinkType::Ethernet, &bad, ROCE_V2_PORT),
        Err(Error::InvalidField(_))
    ));
    // Bad IPv4 header checksum is reported, the packet is still decoded
    // (the checksum is masked out of the ICRC).
    let mut bad = f.clone();
    bad[14 + 10] ^= 0xFF;
    let v = parse_frame(LinkType::Ethernet, &bad, ROCE_V2_PORT).unwrap().unwrap();
    assert_eq!(v[0].ipv4_checksum_ok, Some(false));
    assert!(v[0].icrc_ok());
}

// ---------------------------------------------------------- never panics

#[test]
fn truncated_frames_at_every_length() {
    let mut checked = 0;
    let mut sources: Vec<(String, Vec<u8>)> = frames_of("samples")
        .into_iter()
        .map(|f| (format!("samples {}", f.number), f.data))
        .collect();
    for (name, _) in CAPTURES {
        for f in frames_of(name).into_iter().take(3) {
            sources.push((format!("{name} {}", f.number), f.data));
        }
    }
    for (ctx, full) in &sources {
        let whole = parse_frame(LinkType::Ethernet, full, ROCE_V2_PORT).unwrap();
        let Some(whole) = whole else { continue };
        let d0 = &whole[0];
        let ip_end = full.len() - d0.l2_trailer_len;
        let udp_end = 14 + d0.ip_header.len() + 8;
        for (lt, wrapped) in rewrap(full) {
            let extra = wrapped.len() as isize - full.len() as isize;
            for len in 0..wrapped.len() {
                let r = parse_frame(lt, &wrapped[..len], ROCE_V2_PORT);
                let cut = len as isize - extra; // length in the Ethernet frame's terms
                if cut < udp_end as isize {
                    assert_eq!(r, Ok(None), "{ctx} as {lt:?} cut at {len}");
                } else {
                    let v = r.unwrap().unwrap_or_else(|| panic!("{ctx} cut at {len}"));
                    assert_eq!(v[0].truncated, (cut as usize) < ip_end, "{ctx} cut at {len}");
                    if v[0].truncated {
                        assert!(v.iter().all(|d| !d.icrc_ok()));
                        assert_eq!(v[0].l2_trailer_len, 0);
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 100_000, "{checked}");
}

/// xorshift64*: deterministic, bounded pseudo-random bytes.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const ALL_LINKTYPES: [LinkType; 7] = [
    LinkType::Ethernet,
    LinkType::RawIp,
    LinkType::LinuxSll,
    LinkType::LinuxSll2,
    LinkType::Null,
    LinkType::Loop,
    LinkType::Other(42),
];

fn sane(r: &Result<Option<Vec<RoceDatagram>>, Error>, input: &[u8]) {
    if let Ok(Some(v)) = r {
        assert!(!v.is_empty());
        for d in v {
            assert!(d.udp_payload.len() <= input.len());
            if let Some(g) = d.gso {
                assert_eq!(g.segments, v.len());
                assert_eq!(g.size % 4, 0);
            }
        }
    }
}

#[test]
fn garbage_and_mutated_frames_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut some = 0;
    for _ in 0..20_000 {
        let len = rng.below(160);
        let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Make a good share look like IPv4/IPv6 UDP to the RoCE port.
        if len > 50 && rng.below(2) == 0 {
            b[12..14].copy_from_slice(if rng.below(2) == 0 { &[8, 0] } else { &[0x86, 0xDD] });
            b[14] = if b[13] == 0 { 0x45 } else { 0x60 };
            b[14 + 9] = 17;
            b[14 + 6] = if b[13] == 0 { b[14 + 6] & 0x40 } else { 17 };
            b[14 + 7] = 0;
            let u = if b[13] == 0 { 34 } else { 54 };
            if u + 4 <= len {
                b[u + 2..u + 4].copy_from_slice(&ROCE_V2_PORT.to_be_bytes());
            }
        }
        for lt in ALL_LINKTYPES {
            let r = parse_frame(lt, &b, ROCE_V2_PORT);
            sane(&r, &b);
            some += usize::from(matches!(r, Ok(Some(_))));
        }
    }
    // Mutations of real frames (including a GSO super-packet).
    let v4 = UdpEndpoints {
        src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        src_port: 0xC001,
        dst_port: ROCE_V2_PORT,
    };
    let mut seeds: Vec<Vec<u8>> = frames_of("samples").into_iter().map(|f| f.data).collect();
    seeds.push(gso_case(&v4, 3).0);
    for seed in &seeds {
        for _ in 0..300 {
            let mut b = seed.clone();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            let r = parse_frame(LinkType::Ethernet, &b, ROCE_V2_PORT);
            sane(&r, &b);
            some += usize::from(matches!(r, Ok(Some(_))));
        }
    }
    assert!(some > 1000, "the generator reached the RoCE path only {some} times");
}

// ------------------------------------------------------------ pcap files

#[test]
fn pcap_writer_round_trip_all_link_types() {
    let f = sample_frame(5);
    for (i, (lt, data)) in rewrap(&f).into_iter().enumerate() {
        let mut w = PcapWriter::new(Vec::new(), lt).unwrap();
        let t0 = Duration::new(1_700_000_000, 123_456_789);
        w.write_frame(t0, &data).unwrap();
        w.write_frame(t0 + Duration::from_nanos(1), &data[..data.len() - 1]).unwrap();
        let bytes = w.into_inner().unwrap();
        assert_eq!(&bytes[..4], &[0x4d, 0x3c, 0xb2, 0xa1], "LE nanosecond pcap");
        let back = read_capture(&bytes).unwrap();
        assert_eq!(back.len(), 2, "{i}");
        assert_eq!(
            back[0],
            CapturedFrame {
                number: 1,
                timestamp: t0,
                linktype: lt,
                orig_len: data.len() as u32,
                data: data.clone()
            }
        );
        assert_eq!(back[1].number, 2);
        assert_eq!(back[1].timestamp, t0 + Duration::from_nanos(1));
        assert_eq!(back[1].data, data[..data.len() - 1]);
        let v = parse_frame(back[0].linktype, &back[0].data, ROCE_V2_PORT).unwrap().unwrap();
        assert!(v[0].icrc_ok());
    }
    // A whole real capture survives writer -> reader unchanged.
    let frames = frames_of("rnr");
    let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet).unwrap();
    for f in &frames {
        w.write_frame(f.timestamp, &f.data).unwrap();
    }
    let back = read_capture(&w.into_inner().unwrap()).unwrap();
    assert_eq!(back, frames);
}

/// A big-endian microsecond pcap written by hand.
#[test]
fn reads_big_endian_microsecond_pcap() {
    let f = sample_frame(1);
    let mut b = vec![0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0];
    b.extend_from_slice(&65535u32.to_be_bytes());
    b.extend_from_slice(&101u32.to_be_bytes());
    let ip = &f[14..];
    b.extend_from_slice(&7u32.to_be_bytes());
    b.extend_from_slice(&250_000u32.to_be_bytes());
    b.extend_from_slice(&(ip.len() as u32).to_be_bytes());
    b.extend_from_slice(&(ip.len() as u32 + 10).to_be_bytes());
    b.extend_from_slice(ip);
    let v = read_capture(&b).unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].timestamp, Duration::from_micros(7_250_000));
    assert_eq!(v[0].linktype, LinkType::RawIp);
    assert_eq!(v[0].orig_len, ip.len() as u32 + 10);
    assert_eq!(v[0].data, ip);
}

#[test]
fn reads_pcapng_with_two_interfaces_and_simple_packets() {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::{
        InterfaceDescriptionBlock, InterfaceDescriptionOption,
    };
    use pcap_file::pcapng::blocks::simple_packet::SimplePacketBlock;
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::DataLink;
    use std::borrow::Cow;

    let eth = sample_frame(22);
    let raw = eth[14..].to_vec();
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    // Interface 0: Ethernet, nanosecond timestamps.
    let mut idb0 = InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0);
    idb0.options.push(InterfaceDescriptionOption::IfTsResol(9));
    w.write_pcapng_block(idb0).unwrap();
    // Interface 1: raw IP, default (microsecond) timestamps, snaplen 64.
    w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::RAW, 64)).unwrap();
    let epb = |id: u32, units: u64, data: &[u8]| EnhancedPacketBlock {
        interface_id: id,
        // pcap-file stores Duration::as_nanos() as the raw timestamp units.
        timestamp: Duration::from_nanos(units),
        original_len: data.len() as u32,
        data: Cow::Owned(data.to_vec()),
        options: vec![],
    };
    w.write_pcapng_block(epb(0, 1_700_000_000_000_000_001, &eth)).unwrap();
    w.write_pcapng_block(epb(1, 1_700_000_000_000_002, &raw)).unwrap();
    // A Simple Packet Block: interface 0 (Ethernet, snaplen 0 = unlimited).
    w.write_pcapng_block(SimplePacketBlock {
        original_len: eth.len() as u32,
        data: Cow::Owned(eth.clone()),
    })
    .unwrap();
    let bytes = w.into_inner();

    let v = read_capture(&bytes).unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(v[0].linktype, LinkType::Ethernet);
    assert_eq!(v[0].timestamp, Duration::new(1_700_000_000, 1));
    assert_eq!(v[1].linktype, LinkType::RawIp);
    assert_eq!(v[1].timestamp, Duration::new(1_700_000_000, 2_000));
    assert_eq!(v[2].linktype, LinkType::Ethernet);
    assert_eq!(v[2].data, eth, "SPB padding removed");
    assert_eq!(v.iter().map(|f| f.number).collect::<Vec<_>>(), vec![1, 2, 3]);
    let want = parse_frame(LinkType::Ethernet, &eth, ROCE_V2_PORT).unwrap().unwrap();
    for f in &v {
        assert_eq!(parse_frame(f.linktype, &f.data, ROCE_V2_PORT).unwrap().as_ref(), Some(&want));
    }

    // Truncated inside the last block (SHB, 2 IDBs, 2 EPBs, SPB = block 6).
    let err = read_capture(&bytes[..bytes.len() - 10]).unwrap_err();
    assert!(matches!(err, CaptureError::Truncated { what: "block", record: 6, .. }), "{err}");
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[test]
fn pcapng_packet_for_undeclared_interface_is_an_error() {
    use pcap_file::pcapng::blocks::simple_packet::SimplePacketBlock;
    use pcap_file::pcapng::PcapNgWriter;
    use std::borrow::Cow;
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(SimplePacketBlock { original_len: 4, data: Cow::Owned(vec![1, 2, 3, 4]) })
        .unwrap();
    let err = read_capture(&w.into_inner()).unwrap_err();
    assert!(matches!(err, CaptureError::Malformed { record: 2, .. }), "{err}");
}

#[test]
fn capture_errors_are_clear() {
    let err = read_capture(b"hello world").unwrap_err();
    assert!(matches!(err, CaptureError::NotACapture(_)));
    assert!(err.to_string().contains("not a pcap or pcapng file"), "{err}");
    assert!(matches!(read_capture(b""), Err(CaptureError::NotACapture(_))));

    let bytes = std::fs::read(data_path("rc_pingpong_small.pcap")).unwrap();
    let frames = read_capture(&bytes).unwrap();
    assert_eq!(frames.len(), 40);
    // Offset of record 5.
    let off5 = 24 + frames[..4].iter().map(|f| 16 + f.data.len()).sum::<usize>();
    // Cut exactly between records: the first four are read.
    assert_eq!(read_capture(&bytes[..off5]).unwrap().len(), 4);
    for cut in [off5 + 3, off5 + 16, off5 + 20] {
        let err = read_capture(&bytes[..cut]).unwrap_err();
        match &err {
            CaptureError::Truncated { what: "record", record: 5, offset } => {
                assert_eq!(*offset, off5)
            }
            e => panic!("cut at {cut}: {e}"),
        }
        assert!(err.to_string().contains("record 5"), "{err}");
    }
    // Cut inside the file header.
    assert!(matches!(
        read_capture(&bytes[..10]),
        Err(CaptureError::Truncated { what: "file header", .. })
    ));
    let err = read_capture_file(&data_path("no-such-file.pcap")).unwrap_err();
    assert!(matches!(err, CaptureError::Io(_)));
}

#[test]
fn capture_readers_never_panic_on_damaged_files() {
    let mut rng = Rng(12345);
    let pcap = std::fs::read(data_path("retry_exceeded.pcap")).unwrap();
    let mut w = pcap_file::pcapng::PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(
        pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock::new(
            pcap_file::DataLink::ETHERNET,
            0,
        ),
    )
    .unwrap();
    for f in read_capture(&pcap).unwrap() {
        w.write_pcapng_block(pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock {
            interface_id: 0,
            timestamp: f.timestamp,
            original_len: f.orig_len,
            data: f.data.into(),
            options: vec![],
        })
        .unwrap();
    }
    let ng = w.into_inner();
    let mut errors = 0;
    for file in [&pcap, &ng] {
        for len in 0..file.len() {
            errors += usize::from(read_capture(&file[..len]).is_err());
        }
        for _ in 0..3000 {
            let mut b = file.clone();
            for _ in 0..1 + rng.below(3) {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            if let Ok(frames) = read_capture(&b) {
                for f in &frames {
                    sane(&parse_frame(f.linktype, &f.data, ROCE_V2_PORT), &f.data);
                }
            }
        }
    }
    assert!(errors > 500, "{errors}");
}

#[test]
fn roce_datagram_packet_view() {
    let f = sample_frame(13); // RC COMPARE_SWAP
    let v = parse_frame(LinkType::Ethernet, &f, ROCE_V2_PORT).unwrap().unwrap();
    let p: RocePacket<&[u8]> = v[0].packet().unwrap();
    assert_eq!(p.opcode(), Opcode::RC_COMPARE_SWAP);
    assert!(p.atomic_eth().is_some());
    assert_eq!(v[0].ip_version, 4);
    assert_eq!(v[0].meta.ttl, 64);
    assert_eq!(v[0].meta.tos, 2);
    assert!(v[0].meta.dont_fragment);
}
