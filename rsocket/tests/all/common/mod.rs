//! A tiny wire between two [`Stream`]s: each side's registered memory as
//! byte arrays (receive buffer, target list, send buffer), an in-order
//! queue of RDMA WRITEs per direction (RC), and an HCA's checks — the
//! remote range must be inside a region with the right rkey, and a write
//! must not land on bytes the receiver has not read yet.

#![allow(dead_code)]

use roce_rsocket::*;
use std::collections::VecDeque;

/// A deterministic xorshift generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// `n` pseudo-random bytes.
pub fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.next() as u8).collect()
}

/// One side: the stream and its memory.
pub struct Host {
    pub s: Stream,
    pub mem: LocalMemory,
    pub rbuf: Vec<u8>,
    /// Bytes of `rbuf` that arrived and are not read yet.
    pub live: Vec<bool>,
    pub target: Vec<u8>,
    /// An iomapped buffer (`riomap`): 64 KiB at `io_addr`, rkey `io_rkey`.
    pub io: Vec<u8>,
    pub io_addr: u64,
    pub io_rkey: u32,
    pub sbuf: Vec<u8>,
    /// Send-buffer bytes of writes still in flight.
    pub sbuf_busy: Vec<u32>,
    pub recvs: u32,
    /// Everything the application read, in order.
    pub got: Vec<u8>,
    /// The non-post actions seen (shutdown, disconnect).
    pub events: Vec<Action>,
    pub arrived: u64,
}

impl Host {
    pub fn new(cfg: StreamConfig, base: u64) -> Host {
        let mem = LocalMemory {
            rbuf_addr: base,
            rbuf_rkey: (base >> 20) as u32 | 1,
            target_addr: base + 0x1000_0000,
            target_rkey: (base >> 20) as u32 | 2,
        };
        let mut h = Host {
            s: Stream::new(cfg, mem),
            mem,
            rbuf: vec![0; cfg.rbuf_size as usize],
            live: vec![false; cfg.rbuf_size as usize],
            target: vec![0; cfg.target_list_len()],
            io: vec![0; 65536],
            io_addr: base + 0x2000_0000,
            io_rkey: (base >> 20) as u32 | 3,
            sbuf: vec![0; cfg.sbuf_total_len() as usize],
            sbuf_busy: vec![0; cfg.sbuf_total_len() as usize],
            recvs: 0,
            got: Vec::new(),
            events: Vec::new(),
            arrived: 0,
        };
        h.recvs = u32::from(cfg.rq_size); // posted before connecting
        h
    }

    /// Copy out up to `max` readable bytes as `rrecv` would.
    pub fn read(&mut self, max: usize) -> (usize, Vec<Action>) {
        let spans = self.s.read_spans(max);
        let mut n = 0;
        for sp in &spans {
            let r = sp.offset as usize..(sp.offset + sp.len) as usize;
            assert!(self.live[r.clone()].iter().all(|&l| l), "reading bytes that never arrived");
            self.got.extend_from_slice(&self.rbuf[r.clone()]);
            self.live[r].iter_mut().for_each(|l| *l = false);
            n += sp.len as usize;
        }
        let (k, acts) = self.s.consume(n);
        assert_eq!(k, n);
        (n, acts)
    }
}

/// One RDMA WRITE on the wire, its bytes gathered when posted.
pub struct InFlight {
    pub wr: Wr,
    pub bytes: Vec<u8>,
    /// Send-buffer segments to release at completion.
    pub segs: Vec<Seg>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

pub struct Pair {
    pub a: Host,
    pub b: Host,
    pub to_b: VecDeque<InFlight>,
    pub to_a: VecDeque<InFlight>,
    /// Bytes of data messages delivered each way (A→B, B→A).
    pub data_writes: (u64, u64),
}

impl Pair {
    /// Two streams, connected: each got the other's connection data, and
    /// their first actions (offering their second halves) are on the wire.
    pub fn connected(ca: StreamConfig, cb: StreamConfig) -> Pair {
        let mut p = Pair {
            a: Host::new(ca, 0x7f00_0000_0000),
            b: Host::new(cb, 0x5500_0000_0000),
            to_b: VecDeque::new(),
            to_a: VecDeque::new(),
            data_writes: (0, 0),
        };
        let a_cd = p.a.s.conn_data().emit();
        let b_cd = p.b.s.conn_data().emit();
        let acts = p.b.s.establish(&a_cd).expect("b establishes");
        p.apply(Side::B, acts, &[]);
        let acts = p.a.s.establish(&b_cd).expect("a establishes");
        p.apply(Side::A, acts, &[]);
        p
    }

    pub fn host(&mut self, s: Side) -> &mut Host {
        match s {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// Perform `side`'s actions; `app` is the application buffer of the
    /// call that produced them.
    pub fn apply(&mut self, side: Side, acts: Vec<Action>, app: &[u8]) {
        for act in acts {
            match act {
                Action::Post(wr) => {
                    let f = self.gather(side, wr, app);
                    match side {
                        Side::A => self.to_b.push_back(f),
                        Side::B => self.to_a.push_back(f),
                    }
                }
                Action::PostRecv => self.host(side).recvs += 1,
                Action::Arrived { .. } => {}
                other => self.host(side).events.push(other),
            }
        }
    }

    fn gather(&mut self, side: Side, wr: Wr, app: &[u8]) -> InFlight {
        let h = self.host(side);
        let (bytes, segs) = match &wr.payload {
            Payload::Empty => (Vec::new(), Vec::new()),
            Payload::InlineApp { offset, len } => {
                (app[*offset..*offset + *len as usize].to_vec(), Vec::new())
            }
            Payload::InlineBytes(b) => (b.clone(), Vec::new()),
            Payload::Sbuf { segs, source } => {
                let total: usize = segs.iter().map(|s| s.len as usize).sum();
                let src: Vec<u8> = match source {
                    Source::App { offset } => app[*offset..*offset + total].to_vec(),
                    Source::Bytes(b) => b.clone(),
                };
                assert_eq!(src.len(), total);
                let mut at = 0;
                for s in segs {
                    let r = s.offset as usize..(s.offset + s.len) as usize;
                    assert!(r.end <= h.sbuf.len(), "send segment outside the send buffer");
                    assert!(
                        h.sbuf_busy[r.clone()].iter().all(|&b| b == 0),
                        "send buffer reused while in flight"
                    );
                    h.sbuf[r.clone()].copy_from_slice(&src[at..at + s.len as usize]);
                    h.sbuf_busy[r].iter_mut().for_each(|b| *b += 1);
                    at += s.len as usize;
                }
                let bytes = segs
                    .iter()
                    .flat_map(|s| h.sbuf[s.offset as usize..(s.offset + s.len) as usize].to_vec())
                    .collect();
                (bytes, segs.clone())
            }
        };
        assert_eq!(bytes.len() as u32, wr.payload.len());
        InFlight { wr, bytes, segs }
    }

    /// Deliver the oldest write `from` one side: land it in the peer's
    /// memory, complete the receive there, then the send here.
    pub fn deliver(&mut self, from: Side) -> bool {
        let f = match from {
            Side::A => self.to_b.pop_front(),
            Side::B => self.to_a.pop_front(),
        };
        let Some(f) = f else { return false };
        let to = if from == Side::A { Side::B } else { Side::A };
        let is_data = f.wr.imm.is_some_and(|m| m >> 29 == 0);
        if is_data {
            let n = f.bytes.len() as u64;
            if from == Side::A {
                self.data_writes.0 += n
            } else {
                self.data_writes.1 += n
            }
        }
        self.land(to, &f);
        if let Some(imm) = f.wr.imm {
            let h = self.host(to);
            assert!(h.recvs > 0, "RNR: a message with no receive posted");
            h.recvs -= 1;
            let c = RecvCompletion { imm, byte_len: f.bytes.len() as u32, ok: true };
            let target = h.target.clone();
            let acts = h.s.handle_recv_completion(c, &target).expect("receive completion");
            for a in &acts {
                if let Action::Arrived { offset, len } = a {
                    let r = *offset as usize..(*offset + *len) as usize;
                    h.live[r].iter_mut().for_each(|l| *l = true);
                    h.arrived += u64::from(*len);
                }
            }
            self.apply(to, acts, &[]);
        }
        let h = self.host(from);
        for s in &f.segs {
            h.sbuf_busy[s.offset as usize..(s.offset + s.len) as usize]
                .iter_mut()
                .for_each(|b| *b -= 1);
        }
        let acts = h.s.handle_send_completion(f.wr.wr_id, true).expect("send completion");
        self.apply(from, acts, &[]);
        true
    }

    /// Write the bytes where an HCA would, checking the rkey and range.
    fn land(&mut self, to: Side, f: &InFlight) {
        if f.bytes.is_empty() {
            return;
        }
        let h = self.host(to);
        let (addr, len) = (f.wr.remote_addr, f.bytes.len() as u64);
        let in_rbuf = f.wr.rkey == h.mem.rbuf_rkey
            && addr >= h.mem.rbuf_addr
            && addr + len <= h.mem.rbuf_addr + h.rbuf.len() as u64;
        let in_target = f.wr.rkey == h.mem.target_rkey
            && addr >= h.mem.target_addr
            && addr + len <= h.mem.target_addr + h.target.len() as u64;
        let in_io = f.wr.rkey == h.io_rkey
            && addr >= h.io_addr
            && addr + len <= h.io_addr + h.io.len() as u64;
        if in_io {
            let at = (addr - h.io_addr) as usize;
            h.io[at..at + len as usize].copy_from_slice(&f.bytes);
        } else if in_rbuf {
            let at = (addr - h.mem.rbuf_addr) as usize;
            let r = at..at + len as usize;
            assert!(h.live[r.clone()].iter().all(|&l| !l), "a write over unread data at {at}");
            h.rbuf[r].copy_from_slice(&f.bytes);
        } else if in_target {
            let at = (addr - h.mem.target_addr) as usize;
            h.target[at..at + len as usize].copy_from_slice(&f.bytes);
        } else {
            panic!("remote access error: {len} bytes at {addr:#x} rkey {:#x}", f.wr.rkey);
        }
    }

    /// Deliver everything in flight, both ways, until quiet.
    pub fn drain(&mut self) {
        while self.deliver(Side::A) | self.deliver(Side::B) {}
    }

    /// `from` sends `data[*sent..]` once: the bytes taken (0 when it would
    /// block).
    pub fn send(
        &mut self,
        from: Side,
        data: &[u8],
        sent: &mut usize,
        ramp: &mut SendRamp,
    ) -> usize {
        match self.host(from).s.send(data.len() - *sent, ramp) {
            Ok((n, acts)) => {
                let app = data[*sent..].to_vec();
                self.apply(from, acts, &app);
                *sent += n;
                n
            }
            Err(Error::WouldBlock) => 0,
            Err(e) => panic!("send: {e}"),
        }
    }

    /// `side` reads up to `max` bytes.
    pub fn read(&mut self, side: Side, max: usize) -> usize {
        let (n, acts) = self.host(side).read(max);
        self.apply(side, acts, &[]);
        n
    }
}

/// Small buffers that make every path run often: 4 KiB receive buffer
/// (2 KiB halves), 4 KiB send buffer, 16-entry queues, nothing inline (SGL
/// updates from the control slots).
pub fn small() -> StreamConfig {
    StreamConfig {
        sbuf_size: 4096,
        rbuf_size: 4096,
        sq_size: 16,
        rq_size: 16,
        sq_inline: 0,
        target_iomap_size: 0,
    }
}
