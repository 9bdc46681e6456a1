//! Helpers shared by the transport tests (loopback only, bounded loops).
#![allow(dead_code)]

pub mod netns;

use bytes::Bytes;
use roce_emulator::{
    AccessFlags, CqHandle, Hca, MrInfo, QpCap, QpType, RecvWr, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
use roce_emulator::{Datagram, Instant as CoreInstant, SansIo};
use roce_packet::{pad_for, IpMeta, IpUdpHeader, Psn, Qpn, RoceRepr, UdpEndpoints};
use roce_sim::testkit::{qp_cap, qp_init, rc_connect, RcPath};
use roce_transport::{Link, NodeThread, NodeThreadHandle, UdpConfig, UdpTransport};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A valid RC SEND_ONLY UDP payload of `payload_len` data bytes whose ICRC
/// is computed the way the core does (its own endpoints, default meta).
pub fn send_only(ep: &UdpEndpoints, qpn: u32, psn: u32, data: &[u8]) -> Datagram {
    let mut repr = RoceRepr { payload_len: data.len(), ..RoceRepr::default() };
    repr.bth.dest_qp = Qpn::new(qpn);
    repr.bth.psn = Psn::new(psn);
    repr.bth.pad_count = pad_for(data.len());
    let mut buf = repr.to_vec(data).expect("emit");
    let meta = IpMeta::default();
    IpUdpHeader::build(ep, &meta, buf.len()).expect("hdr").fill_icrc(&mut buf);
    Datagram { endpoints: *ep, meta, payload: Bytes::from(buf), body: None }
}

/// [`send_only`] with its `len` data bytes in region memory at `off` (a
/// [`roce_emulator::RegionBody`], as the core builds it for a socket that
/// gathers): headers, pad and ICRC in `payload`, the ICRC computed over the
/// region's bytes.
pub fn send_only_body(
    ep: &UdpEndpoints,
    qpn: u32,
    psn: u32,
    mem: &std::sync::Arc<roce_emulator::RegionMem>,
    off: usize,
    len: usize,
) -> Datagram {
    let mut repr = RoceRepr { payload_len: len, ..RoceRepr::default() };
    repr.bth.dest_qp = Qpn::new(qpn);
    repr.bth.psn = Psn::new(psn);
    repr.bth.pad_count = pad_for(len);
    let mut h = [0u8; 64];
    let n = repr.emit_headers(&mut h).expect("emit");
    let pad = usize::from(repr.bth.pad_count);
    let mut buf = h[..n].to_vec();
    buf.resize(n + pad + 4, 0);
    let meta = IpMeta::default();
    let hdr = IpUdpHeader::build(ep, &meta, n + len + pad + 4).expect("hdr");
    let mut c = hdr.icrc_hasher(&buf[..n]);
    mem.read_chunks(off, len, |b| c.update(b)).expect("in bounds");
    c.update(&buf[n..n + pad]);
    buf[n + pad..].copy_from_slice(&c.finish());
    let body = roce_emulator::RegionBody { mem: mem.clone(), off, len, at: n };
    Datagram { endpoints: *ep, meta, payload: Bytes::from(buf), body: Some(body) }
}

/// Pattern bytes for message `i`.
pub fn pattern(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

/// Bind `ip` on port 4791, or an ephemeral port if 4791 is taken.
pub fn bind(ip: &str, f: impl Fn(&mut UdpConfig)) -> UdpTransport {
    let ip: IpAddr = ip.parse().expect("ip");
    let mut cfg = UdpConfig::on(ip);
    f(&mut cfg);
    match UdpTransport::bind(cfg.clone()) {
        Ok(t) => t,
        Err(_) => {
            cfg.local = SocketAddr::new(ip, 0);
            UdpTransport::bind(cfg).expect("bind ephemeral")
        }
    }
}

/// Two transports bound on `{net}.2` and `{net}.3` (as [`bind`], default
/// configuration) and the endpoints of a packet from the first to the
/// second ([`core_ep`]).
pub fn bind_pair(net: &str) -> (UdpTransport, UdpTransport, UdpEndpoints) {
    let ta = bind(&format!("{net}.2"), |_| {});
    let tb = bind(&format!("{net}.3"), |_| {});
    let ep = core_ep(&ta, &tb);
    (ta, tb, ep)
}

/// Endpoints as the core would fill them for a packet from `a` to `b`
/// (per-QP source port 0xC123, destination = `b`'s real port).
pub fn core_ep(a: &UdpTransport, b: &UdpTransport) -> UdpEndpoints {
    UdpEndpoints {
        src: a.local_addr().ip(),
        dst: b.local_addr().ip(),
        src_port: 0xC123,
        dst_port: b.local_addr().port(),
    }
}

/// Receive until `n` datagrams arrived or `limit` passed.
pub fn recv_n(t: &mut UdpTransport, n: usize, limit: Duration) -> Vec<Datagram> {
    let mut out = Vec::new();
    let end = Instant::now() + limit;
    while out.len() < n && Instant::now() < end {
        if t.recv(&mut out).expect("recv") == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    out
}

/// The IB part (BTH .. pad) of a payload, i.e. without the ICRC.
pub fn body(p: &[u8]) -> &[u8] {
    &p[..p.len() - 4]
}

/// A node that sends what is queued, records what it receives (optionally
/// echoing it back) and fires timers.
#[derive(Default)]
pub struct Fake {
    pub outbox: VecDeque<Datagram>,
    pub inbox: Vec<(CoreInstant, Datagram)>,
    pub timers: Vec<CoreInstant>,
    pub fired: Vec<(CoreInstant, CoreInstant)>,
    pub echo: bool,
}

impl Fake {
    /// A fake node shared with an engine (as the engine takes its nodes).
    pub fn shared() -> Arc<Mutex<Fake>> {
        Arc::new(Mutex::new(Fake::default()))
    }
}

impl SansIo for Fake {
    fn handle_datagram(&mut self, now: CoreInstant, d: Datagram) {
        if self.echo {
            let ep = UdpEndpoints {
                src: d.endpoints.dst,
                dst: d.endpoints.src,
                src_port: 0xC000,
                dst_port: d.endpoints.src_port,
            };
            // Same RoCE bytes with the ICRC for the header this node
            // declares (as the core does); the transport adjusts it for the
            // wire (its own source port, identification).
            let meta = roce_packet::IpMeta::default();
            let mut payload = d.payload.to_vec();
            roce_packet::frame::fill_icrc(&ep, &meta, &mut payload).expect("icrc");
            self.outbox.push_back(Datagram {
                endpoints: ep,
                meta,
                payload: payload.into(),
                body: None,
            });
        }
        self.inbox.push((now, d));
    }
    fn poll_transmit(&mut self, _now: CoreInstant) -> Option<Datagram> {
        self.outbox.pop_front()
    }
    fn poll_timeout(&self) -> Option<CoreInstant> {
        self.timers.iter().min().copied()
    }
    fn handle_timeout(&mut self, now: CoreInstant) {
        let (due, rest): (Vec<_>, Vec<_>) = self.timers.iter().partition(|&&t| t <= now);
        self.timers = rest;
        for t in due {
            self.fired.push((t, now));
        }
    }
}

/// An HCA a driver thread runs over a transport, with a CQ of 1024
/// entries, a region of 1 MiB (local and remote writes, remote reads) and
/// one RC QP (`wrs` work requests each way, two SGEs, 64 bytes inline).
pub struct DrivenSide<T: Link> {
    pub hca: Arc<Mutex<Hca>>,
    pub h: NodeThreadHandle<T>,
    pub cq: CqHandle,
    pub mr: MrInfo,
    pub qpn: Qpn,
}

/// The access rights of [`DrivenSide`]'s region and QP.
pub const DRIVEN_ACCESS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_READ.0,
);

impl<T: Link> DrivenSide<T> {
    /// `hca` set up as above (a CQ of `cqe`), run over `t`.
    pub fn new(mut hca: Hca, t: T, cqe: u32, wrs: u32) -> DrivenSide<T> {
        let pd = hca.alloc_pd().unwrap();
        let cq = hca.create_cq(cqe).unwrap();
        let mr = hca.reg_mr(pd, 1 << 20, DRIVEN_ACCESS).unwrap();
        let cap =
            QpCap { max_send_sge: 2, max_recv_sge: 2, max_inline_data: 64, ..qp_cap(wrs, wrs) };
        let qpn = hca.create_qp(qp_init(pd, cq, QpType::Rc, cap, true)).unwrap();
        let hca = Arc::new(Mutex::new(hca));
        let h = NodeThread::spawn(hca.clone(), t).unwrap();
        DrivenSide { hca, h, cq, mr, qpn }
    }

    /// The QP to RTS towards QP `peer_qpn` at `peer`: [`DRIVEN_ACCESS`],
    /// four READs in flight each way, `path`'s MTU and PSNs.
    pub fn connect(&self, peer: IpAddr, peer_qpn: Qpn, path: RcPath) {
        let path =
            RcPath { access: DRIVEN_ACCESS, max_dest_rd_atomic: 4, max_rd_atomic: 4, ..path };
        rc_connect(&mut self.hca.lock().unwrap(), self.qpn, peer, peer_qpn.value(), &path).unwrap();
    }

    /// Wait for `n` completions on the CQ (at most `limit`).
    pub fn completions(&self, n: usize, limit: Duration) -> Vec<WorkCompletion> {
        let end = Instant::now() + limit;
        let mut out = Vec::new();
        let mut seen = self.h.progress();
        while out.len() < n && Instant::now() < end {
            out.extend(self.hca.lock().unwrap().poll_cq(self.cq, 64).unwrap());
            if out.len() < n {
                seen = self.h.wait_for_progress(seen, Duration::from_millis(20));
            }
        }
        out
    }

    /// SEND `msg` (from offset 0 of the region, WR 1) to `peer`, into a
    /// receive of `recv_len` bytes at offset 4096 of its region (WR 11):
    /// one successful completion each side, the bytes where they belong.
    pub fn send_checked<U: Link>(&self, peer: &DrivenSide<U>, msg: &[u8], recv_len: u32) {
        let b = peer;
        b.hca
            .lock()
            .unwrap()
            .post_recv(b.qpn, RecvWr::new(11, b.mr.addr + 4096, recv_len, b.mr.lkey))
            .unwrap();
        {
            let mut ha = self.hca.lock().unwrap();
            ha.mr_write(self.mr.handle, 0, msg).unwrap();
            let wr =
                SendWr::new(1, WrOpcode::Send).sge(self.mr.addr, msg.len() as u32, self.mr.lkey);
            ha.post_send(self.qpn, wr).unwrap();
        }
        self.h.notify();
        let wb = b.completions(1, Duration::from_secs(10));
        assert_eq!(wb.len(), 1, "receive completion; B {:?}", b.h.counters());
        assert_eq!(
            (wb[0].wr_id, wb[0].status, wb[0].opcode),
            (11, WcStatus::Success, WcOpcode::Recv)
        );
        assert_eq!(wb[0].byte_len as usize, msg.len());
        let mut got = vec![0u8; msg.len()];
        b.hca.lock().unwrap().mr_read(b.mr.handle, 4096, &mut got).unwrap();
        assert_eq!(got, msg);
        let wa = self.completions(1, Duration::from_secs(10));
        assert_eq!(wa.len(), 1);
        assert_eq!(
            (wa[0].wr_id, wa[0].status, wa[0].opcode),
            (1, WcStatus::Success, WcOpcode::Send)
        );
    }

    /// RDMA WRITE `data` from offset 100 000 of the region to offset
    /// 500 000 of `peer`'s (WR 2): one successful completion, the bytes
    /// landed.
    pub fn write_checked<U: Link>(&self, peer: &DrivenSide<U>, data: &[u8]) {
        let b = peer;
        {
            let mut ha = self.hca.lock().unwrap();
            ha.mr_write(self.mr.handle, 100_000, data).unwrap();
            let wr = SendWr::new(2, WrOpcode::RdmaWrite)
                .sge(self.mr.addr + 100_000, data.len() as u32, self.mr.lkey)
                .remote(b.mr.addr + 500_000, b.mr.rkey);
            ha.post_send(self.qpn, wr).unwrap();
        }
        self.h.notify();
        let wa = self.completions(1, Duration::from_secs(10));
        assert_eq!(wa.len(), 1);
        assert_eq!(
            (wa[0].wr_id, wa[0].status, wa[0].opcode),
            (2, WcStatus::Success, WcOpcode::RdmaWrite)
        );
        let mut got = vec![0u8; data.len()];
        b.hca.lock().unwrap().mr_read(b.mr.handle, 500_000, &mut got).unwrap();
        assert_eq!(got, data);
    }
}
