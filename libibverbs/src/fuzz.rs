//! The drop-in's fuzz harness (issue 15, target `dropin` in `fuzz/`): the C
//! entry points called the way a program calls them, with every pointer
//! valid and every value arbitrary.
//!
//! It lives here, not in `fuzz/`, because calling a C entry point is
//! `unsafe` and the workspace allows `unsafe` only in this crate and in
//! `roce-region`; `roce_fuzz::dropin` calls [`dropin`], which is safe.
//!
//! Per input: two devices (`fz0`, `fz1` on 127.0.99.1 and 127.0.99.2, opened
//! once), on each a PD, a CQ and a QP of an input-chosen type and
//! capacities, a buffer of three pages whose middle page is registered with
//! input-chosen rights; optionally the two QPs are connected properly; then
//! up to 64 calls from the input — `ibv_modify_qp` with an arbitrary
//! `ibv_qp_attr` and mask, `ibv_post_send` chains with arbitrary opcodes,
//! flags, SGEs, remote addresses and keys, `ibv_post_recv`, `ibv_poll_cq`,
//! `ibv_query_qp`/`port`/`gid`/`pkey`, `ibv_req_notify_cq`, `ibv_resize_cq`,
//! `ibv_create_ah`/`ibv_create_ah_from_wc`, `ibv_alloc_mw`/`ibv_bind_mw`,
//! `ibv_rereg_mr` — and everything is destroyed.
//!
//! What stays valid (a program that breaks these breaks rdma-core too):
//! object pointers are ours or NULL, an SGE list has `num_sge` entries,
//! inline data points into the buffer, a re-registration stays inside the
//! middle page. Every GID is forced onto 127.0.99.0/24 so no datagram leaves
//! loopback.
//!
//! Checked after every input (a violation panics: a crash for the fuzzer):
//! no Rust panic anywhere in the library (the panic guard would otherwise
//! hide it as `EIO`); the guard pages around each region never change; no
//! completion names a work request that was not accepted by a post; every
//! object is destroyed without error.

pub mod misuse;

use crate::{abi, exports as x};
use std::collections::HashSet;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

const PAGE: usize = 4096;
const GUARD: u8 = 0xa5;

static PANICKED: AtomicBool = AtomicBool::new(false);

/// Reads bytes from a fuzz input, zeros when it runs out; shared with the
/// `roce-fuzz` targets.
pub struct In<'a>(pub &'a [u8]);

impl In<'_> {
    /// The next byte.
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | u16::from(self.u8()) << 8
    }
    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | u32::from(self.u16()) << 16
    }
    /// The next eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
    /// The next `n` bytes, fewer when the input ends first.
    pub fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    /// Whether the input is used up.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Fill a plain C struct's bytes from the input.
    ///
    /// # Safety
    /// `T` must be valid for every bit pattern (no pointers the library
    /// follows unless the caller fixes them afterwards, no bool/enum).
    unsafe fn fill<T>(&mut self, t: &mut T) {
        let n = std::mem::size_of::<T>();
        // SAFETY: `t` is n writable bytes; per the contract any bytes are a
        // valid T.
        let b = unsafe { std::slice::from_raw_parts_mut((t as *mut T).cast::<u8>(), n) };
        for x in b {
            *x = self.u8();
        }
    }
}

/// The two open contexts, as addresses (used only through the library's
/// thread-safe entry points).
struct Devs {
    ctx: [usize; 2],
}

fn devs() -> &'static Devs {
    static D: OnceLock<Devs> = OnceLock::new();
    D.get_or_init(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |i| {
            PANICKED.store(true, Ordering::SeqCst);
            prev(i)
        }));
        std::env::set_var("ROCE_EMU_DEVICES", "fz0=udp:127.0.99.1,fz1=udp:127.0.99.2");
        if std::env::var_os("ROCE_EMU_RUNTIME_DIR").is_none() {
            std::env::set_var("ROCE_EMU_RUNTIME_DIR", std::env::temp_dir().join("roce-fuzz"));
        }
        let mut n = 0;
        // SAFETY: ibv_get_device_list with a valid out pointer; the list is
        // read for n entries and freed after opening.
        let ctx = unsafe {
            let list = x::ibv_get_device_list(&mut n);
            assert!(!list.is_null() && n == 2, "fuzz devices: {n}");
            let c = [x::ibv_open_device(*list), x::ibv_open_device(*list.add(1))];
            x::ibv_free_device_list(list);
            assert!(!c[0].is_null() && !c[1].is_null(), "open fuzz devices");
            c
        };
        Devs { ctx: ctx.map(|c| c as usize) }
    })
}

/// One side: its objects and its buffer.
struct Side {
    ctx: *mut abi::ibv_context,
    pd: *mut abi::ibv_pd,
    cq: *mut abi::ibv_cq,
    qp: *mut abi::ibv_qp,
    mr: *mut abi::ibv_mr,
    buf: Vec<u8>,
    /// Offset of the page-aligned middle page in `buf`.
    mid: usize,
    ahs: Vec<*mut abi::ibv_ah>,
    mws: Vec<*mut abi::ibv_mw>,
    posted: HashSet<u64>,
    completions: u64,
    successes: u64,
}

impl Side {
    fn base(&self) -> u64 {
        self.buf.as_ptr() as u64 + self.mid as u64
    }
    /// The guard pages (the page before and after the middle one) intact.
    fn guards_intact(&self) -> bool {
        let b = &self.buf;
        b[..self.mid].iter().all(|&v| v == GUARD)
            && b[self.mid + PAGE..].iter().all(|&v| v == GUARD)
    }
}

/// A GID on 127.0.99.0/24 (never leaves loopback).
fn loopback_gid(g: &mut abi::ibv_gid, host: u8) {
    let mut raw = [0u8; 16];
    raw[10] = 0xff;
    raw[11] = 0xff;
    raw[12..].copy_from_slice(&[127, 0, 99, 1 + host % 3]);
    g.raw = raw;
}

fn sanitize_ah(a: &mut abi::ibv_ah_attr, host: u8) {
    loopback_gid(&mut a.grh.dgid, host);
}

/// LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, MW_BIND, ZERO_BASED.
const ACCESS_ALL: u32 = 0x3f;

fn access(i: &mut In) -> u32 {
    let a = i.u16();
    if a & 0x8000 != 0 {
        u32::from(a) // arbitrary bits, unknown ones included
    } else {
        u32::from(a) & ACCESS_ALL
    }
}

/// Create one side: PD, CQ, buffer, MR, QP.
///
/// # Safety
/// `ctx` is an open context of this library.
unsafe fn side(ctx: *mut abi::ibv_context, i: &mut In, qpt: u32) -> Side {
    let mut buf = vec![GUARD; 4 * PAGE];
    // a page-aligned middle page with at least a page of guard each side
    let mid = PAGE + (PAGE - buf.as_ptr() as usize % PAGE) % PAGE;
    for b in &mut buf[mid..mid + PAGE] {
        *b = 0;
    }
    // SAFETY: ctx is open; each call gets valid pointers or NULL.
    unsafe {
        let pd = x::ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        let cqe = match i.u8() {
            0 => i.u32() as i32,
            n => i32::from(n) * 4,
        };
        let mut cq = x::ibv_create_cq(ctx, cqe, null_mut(), null_mut(), 0);
        if cq.is_null() {
            cq = x::ibv_create_cq(ctx, 256, null_mut(), null_mut(), 0);
        }
        assert!(!cq.is_null());
        let acc = access(i);
        let mr = x::ibv_reg_mr(pd, buf.as_mut_ptr().add(mid).cast(), PAGE, acc as i32);
        let mut ia: abi::ibv_qp_init_attr = std::mem::zeroed();
        i.fill(&mut ia.cap);
        if i.u8() & 1 == 0 {
            // mostly sane capacities
            ia.cap.max_send_wr %= 64;
            ia.cap.max_recv_wr %= 64;
            ia.cap.max_send_sge %= 5;
            ia.cap.max_recv_sge %= 5;
            ia.cap.max_inline_data %= 512;
        }
        ia.qp_type = qpt;
        ia.sq_sig_all = i32::from(i.u8() & 1);
        ia.send_cq = if i.u8() == 0xff { null_mut() } else { cq };
        ia.recv_cq = cq;
        let qp = x::ibv_create_qp(pd, &mut ia);
        Side {
            ctx,
            pd,
            cq,
            qp,
            mr,
            buf,
            mid,
            ahs: Vec::new(),
            mws: Vec::new(),
            posted: HashSet::new(),
            completions: 0,
            successes: 0,
        }
    }
}

/// Bring `s`'s QP to RTS towards `peer` (best effort: errors are fine, the
/// input may have made the QP unusable).
///
/// # Safety
/// Both sides' objects are live.
unsafe fn connect(s: &Side, peer: &Side, host: u8, qpt: u32) {
    // SAFETY: both sides' QPs are live or NULL (checked there).
    unsafe { connect_qp(s.qp, peer.qp, host, qpt) }
}

/// Bring QP `qp` (of type `qpt`) to RTS towards `peer` on 127.0.99.x
/// (best effort: errors are fine). Also the `misuse` target's.
///
/// # Safety
/// Both are live QPs of this library, or NULL (then nothing happens).
unsafe fn connect_qp(qp: *mut abi::ibv_qp, peer: *mut abi::ibv_qp, host: u8, qpt: u32) {
    if qp.is_null() || peer.is_null() {
        return;
    }
    // SAFETY: valid QP and attr.
    unsafe {
        let mut a: abi::ibv_qp_attr = std::mem::zeroed();
        a.qp_state = abi::IBV_QPS_INIT;
        a.port_num = 1;
        a.qkey = 0x1111_1111;
        a.qp_access_flags = 0xf;
        let m = if qpt == abi::IBV_QPT_UD {
            abi::IBV_QP_STATE | abi::IBV_QP_PKEY_INDEX | abi::IBV_QP_PORT | abi::IBV_QP_QKEY
        } else {
            abi::IBV_QP_STATE | abi::IBV_QP_PKEY_INDEX | abi::IBV_QP_PORT | abi::IBV_QP_ACCESS_FLAGS
        };
        x::ibv_modify_qp(qp, &mut a, m as i32);
        a.qp_state = abi::IBV_QPS_RTR;
        a.path_mtu = abi::IBV_MTU_1024;
        a.dest_qp_num = (*peer).qp_num;
        a.rq_psn = 0;
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = 1;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        a.ah_attr.grh.sgid_index = 1;
        a.ah_attr.grh.hop_limit = 64;
        loopback_gid(&mut a.ah_attr.grh.dgid, host);
        let m = if qpt == abi::IBV_QPT_UD {
            abi::IBV_QP_STATE
        } else if qpt == abi::IBV_QPT_UC {
            abi::IBV_QP_STATE
                | abi::IBV_QP_AV
                | abi::IBV_QP_PATH_MTU
                | abi::IBV_QP_DEST_QPN
                | abi::IBV_QP_RQ_PSN
        } else {
            abi::IBV_QP_STATE
                | abi::IBV_QP_AV
                | abi::IBV_QP_PATH_MTU
                | abi::IBV_QP_DEST_QPN
                | abi::IBV_QP_RQ_PSN
                | abi::IBV_QP_MAX_DEST_RD_ATOMIC
                | abi::IBV_QP_MIN_RNR_TIMER
        };
        x::ibv_modify_qp(qp, &mut a, m as i32);
        a.qp_state = abi::IBV_QPS_RTS;
        a.sq_psn = 0;
        a.timeout = 12; // 16 ms: an ACK over loopback is back long before
        a.retry_cnt = 2;
        a.rnr_retry = 1;
        a.max_rd_atomic = 4;
        let m = if qpt == abi::IBV_QPT_RC {
            abi::IBV_QP_STATE
                | abi::IBV_QP_SQ_PSN
                | abi::IBV_QP_TIMEOUT
                | abi::IBV_QP_RETRY_CNT
                | abi::IBV_QP_RNR_RETRY
                | abi::IBV_QP_MAX_QP_RD_ATOMIC
        } else {
            abi::IBV_QP_STATE | abi::IBV_QP_SQ_PSN
        };
        x::ibv_modify_qp(qp, &mut a, m as i32);
    }
}

/// Up to `n` SGEs: mostly inside the region with its lkey, sometimes
/// anywhere with any key. With `inline`, always inside the buffer (inline
/// data is read from the program's memory with no key).
fn sges(s: &Side, i: &mut In, n: usize, inline: bool) -> Vec<abi::ibv_sge> {
    let lkey = if s.mr.is_null() {
        0
    } else {
        // SAFETY: a live MR of this side.
        unsafe { (*s.mr).lkey }
    };
    (0..n)
        .map(|_| {
            let sel = i.u8();
            let (off, len) = (u64::from(i.u16()) % (3 * PAGE as u64), u32::from(i.u16()) % 4200);
            if inline {
                let start = s.buf.as_ptr() as u64 + (off % (3 * PAGE as u64));
                let room = (s.buf.as_ptr() as u64 + s.buf.len() as u64) - start;
                abi::ibv_sge { addr: start, length: len.min(room as u32), lkey }
            } else if sel < 200 {
                abi::ibv_sge {
                    addr: s.base() + off % PAGE as u64,
                    length: len,
                    lkey: if sel < 190 { lkey } else { i.u32() },
                }
            } else {
                abi::ibv_sge {
                    addr: i.u64(),
                    length: i.u32(),
                    lkey: if sel & 1 == 0 { lkey } else { i.u32() },
                }
            }
        })
        .collect()
}

/// One `ibv_post_send` of a chain of one or two WRs.
///
/// # Safety
/// The side's objects are live.
unsafe fn post_send(s: &mut Side, peer: &Side, i: &mut In, next_id: &mut u64, qpt: u32) {
    let n = 1 + usize::from(i.u8() & 1);
    let mut wrs: Vec<abi::ibv_send_wr> = Vec::new();
    let mut lists: Vec<Vec<abi::ibv_sge>> = Vec::new();
    for _ in 0..n {
        // SAFETY: an all-zero ibv_send_wr is valid (NULL pointers).
        let mut w: abi::ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = *next_id;
        *next_id += 1;
        let op = i.u8();
        w.opcode = if op < 240 { u32::from(op % 16) } else { i.u32() };
        let f = i.u8();
        w.send_flags = if f & 0x80 != 0 { i.u32() } else { u32::from(f & 0xf) };
        let inline = w.send_flags & abi::IBV_SEND_INLINE != 0;
        let k = usize::from(i.u8() % 5);
        let list = sges(s, i, k, inline);
        w.num_sge = list.len() as i32;
        lists.push(list);
        w.__bindgen_anon_1.imm_data = i.u32();
        let peer_base = peer.base();
        let peer_rkey = if peer.mr.is_null() {
            0
        } else {
            // SAFETY: a live MR of the peer.
            unsafe { (*peer.mr).rkey }
        };
        let sel = i.u8();
        let (ra, rk) = if sel < 200 {
            (
                peer_base + u64::from(i.u16()) % (PAGE as u64 + 64) - 8 * u64::from(sel & 1),
                peer_rkey,
            )
        } else {
            (i.u64(), i.u32())
        };
        if qpt == abi::IBV_QPT_UD {
            w.wr.ud.ah = if s.ahs.is_empty() || i.u8() == 0 {
                null_mut()
            } else {
                s.ahs[usize::from(i.u8()) % s.ahs.len()]
            };
            w.wr.ud.remote_qpn = if i.u8() < 200 && !peer.qp.is_null() {
                // SAFETY: a live QP.
                unsafe { (*peer.qp).qp_num }
            } else {
                i.u32()
            };
            w.wr.ud.remote_qkey = if i.u8() < 200 { 0x1111_1111 } else { i.u32() };
        } else if w.opcode == abi::IBV_WR_ATOMIC_CMP_AND_SWP
            || w.opcode == abi::IBV_WR_ATOMIC_FETCH_AND_ADD
        {
            w.wr.atomic.remote_addr = ra;
            w.wr.atomic.rkey = rk;
            w.wr.atomic.compare_add = i.u64();
            w.wr.atomic.swap = i.u64();
        } else {
            w.wr.rdma.remote_addr = ra;
            w.wr.rdma.rkey = rk;
        }
        // bind_mw / tso share a union: keep its pointers ours or NULL
        w.__bindgen_anon_2.bind_mw.mw =
            if s.mws.is_empty() { null_mut() } else { s.mws[usize::from(i.u8()) % s.mws.len()] };
        w.__bindgen_anon_2.bind_mw.rkey = i.u32();
        w.__bindgen_anon_2.bind_mw.bind_info.mr = if i.u8() < 220 { s.mr } else { null_mut() };
        w.__bindgen_anon_2.bind_mw.bind_info.addr =
            s.base() + u64::from(i.u16()) % (PAGE as u64 + 16);
        w.__bindgen_anon_2.bind_mw.bind_info.length = u64::from(i.u16());
        w.__bindgen_anon_2.bind_mw.bind_info.mw_access_flags = access(i);
        wrs.push(w);
    }
    for (w, l) in wrs.iter_mut().zip(lists.iter_mut()) {
        w.sg_list = if l.is_empty() { null_mut() } else { l.as_mut_ptr() };
    }
    let p = wrs.as_mut_ptr();
    if n == 2 {
        // SAFETY: both entries exist; the chain ends at the second.
        unsafe { (*p).next = p.add(1) };
    }
    let mut bad: *mut abi::ibv_send_wr = null_mut();
    // SAFETY: the program's path: the context's post_send op on our QP.
    let rc = unsafe {
        let post = (*s.ctx).ops.post_send.expect("post_send op");
        post(s.qp, p, &mut bad)
    };
    // accepted: all (rc 0) or those before `bad`
    let accepted = if rc == 0 {
        n
    } else {
        assert!(!bad.is_null(), "post_send failed ({rc}) without bad_wr");
        // SAFETY: bad points into wrs.
        (unsafe { bad.offset_from(p) }) as usize
    };
    for w in &wrs[..accepted] {
        s.posted.insert(w.wr_id);
    }
}

/// # Safety
/// The side's objects are live.
unsafe fn post_recv(s: &mut Side, i: &mut In, next_id: &mut u64) {
    let k = usize::from(i.u8() % 5);
    let mut list = sges(s, i, k, false);
    // SAFETY: zeroed recv WR is valid.
    let mut w: abi::ibv_recv_wr = unsafe { std::mem::zeroed() };
    w.wr_id = *next_id;
    *next_id += 1;
    w.num_sge = list.len() as i32;
    w.sg_list = if list.is_empty() { null_mut() } else { list.as_mut_ptr() };
    let mut bad = null_mut();
    // SAFETY: the context's post_recv op on our QP.
    let rc = unsafe {
        let post = (*s.ctx).ops.post_recv.expect("post_recv op");
        post(s.qp, &mut w, &mut bad)
    };
    if rc == 0 {
        s.posted.insert(w.wr_id);
    }
}

/// Poll up to `max` completions; each names an accepted WR of this side.
///
/// # Safety
/// The CQ is live.
unsafe fn poll(s: &mut Side, max: i32) -> usize {
    // SAFETY: zeroed wcs are valid.
    let mut wc: [abi::ibv_wc; 16] = unsafe { std::mem::zeroed() };
    // SAFETY: the context's poll_cq op; num_entries may be anything <= 16.
    let n = unsafe {
        let p = (*s.ctx).ops.poll_cq.expect("poll_cq op");
        p(s.cq, max.min(16), wc.as_mut_ptr())
    };
    assert!(n <= max.clamp(0, 16), "poll_cq returned {n} for at most {max}");
    for w in &wc[..n.max(0) as usize] {
        // the CQ serves this side's QP alone
        assert!(
            s.posted.contains(&w.wr_id),
            "completion for wr_id {} never posted (status {})",
            w.wr_id,
            w.status
        );
        s.completions += 1;
        if w.status == abi::IBV_WC_SUCCESS {
            s.successes += 1;
        }
    }
    n.max(0) as usize
}

/// What one input reached: completions polled, and how many of them
/// succeeded.
#[derive(Debug, Default, Clone, Copy)]
pub struct Reached {
    pub completions: u64,
    pub successes: u64,
}

/// Run one input. Panics when an invariant breaks.
pub fn dropin(data: &[u8]) {
    dropin_run(data);
}

/// [`dropin`], reporting what the input reached.
pub fn dropin_run(data: &[u8]) -> Reached {
    let d = devs();
    let mut i = In(data);
    let qpt = match i.u8() % 8 {
        0..=2 => abi::IBV_QPT_RC,
        3 | 4 => abi::IBV_QPT_UC,
        5 | 6 => abi::IBV_QPT_UD,
        _ => i.u32(),
    };
    let ctx = d.ctx.map(|c| c as *mut abi::ibv_context);
    // SAFETY: contexts are open for the process's life; every call below
    // passes objects created here (or NULL) and structs of the right type.
    unsafe {
        let mut a = side(ctx[0], &mut i, qpt);
        let mut b = side(ctx[1], &mut i, qpt);
        if i.u8() < 200 {
            connect(&a, &b, 1, qpt);
            connect(&b, &a, 0, qpt);
        }
        let mut next_id = 1u64;
        let mut steps = 0;
        while !i.is_empty() && steps < 64 {
            steps += 1;
            let which = i.u8();
            let (s, peer, host) =
                if which & 1 == 0 { (&mut a, &b, 1u8) } else { (&mut b, &a, 0u8) };
            let op = (which >> 1) % 16;
            if s.qp.is_null() && matches!(op, 0..=7 | 9 | 13) {
                continue; // a program holds no NULL QP
            }
            call(s, peer, host, op, &mut i, &mut next_id, qpt);
        }
        // let the devices finish what is in flight, reaping completions
        // (until every accepted WR completed, or 5 ms)
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(5);
        while std::time::Instant::now() < deadline
            && a.completions + b.completions < (a.posted.len() + b.posted.len()) as u64
        {
            if poll(&mut a, 16) + poll(&mut b, 16) == 0 {
                std::thread::yield_now();
            }
        }
        for s in [&mut a, &mut b] {
            teardown(s);
        }
        assert!(a.guards_intact(), "bytes outside device fz0's region changed");
        assert!(b.guards_intact(), "bytes outside device fz1's region changed");
        assert!(!PANICKED.load(Ordering::SeqCst), "the library panicked (see the message above)");
        Reached { completions: a.completions + b.completions, successes: a.successes + b.successes }
    }
}

/// One call of the input's choosing (`op`, 0 to 15) on side `s`, whose
/// peer is on host `host`.
///
/// # Safety
/// The sides' objects are live and used by no other thread; `s.qp` is not
/// NULL for the calls on the QP.
unsafe fn call(
    s: &mut Side,
    peer: &Side,
    host: u8,
    op: u8,
    i: &mut In,
    next_id: &mut u64,
    qpt: u32,
) {
    // SAFETY: per the contract; every struct passed is of the right type.
    unsafe {
        match op {
            0 | 1 => {
                let mut at: abi::ibv_qp_attr = std::mem::zeroed();
                i.fill(&mut at);
                sanitize_ah(&mut at.ah_attr, host);
                sanitize_ah(&mut at.alt_ah_attr, host);
                let mask = i.u32() as i32;
                x::ibv_modify_qp(s.qp, &mut at, mask);
            }
            2..=5 => post_send(s, peer, i, next_id, qpt),
            6 | 7 => post_recv(s, i, next_id),
            8 => {
                let max = i32::from(i.u8() as i8);
                poll(s, max);
            }
            9 => query(s, i),
            10 => {
                let arm = (*s.ctx).ops.req_notify_cq.expect("req_notify op");
                arm(s.cq, i32::from(i.u8() & 1));
                x::ibv_resize_cq(s.cq, i32::from(i.u16() as i16));
            }
            11 | 12 if s.ahs.len() < 8 => {
                let ah = if op == 11 {
                    let mut aa: abi::ibv_ah_attr = std::mem::zeroed();
                    i.fill(&mut aa);
                    sanitize_ah(&mut aa, host);
                    x::ibv_create_ah(s.pd, &mut aa)
                } else {
                    let mut wc: abi::ibv_wc = std::mem::zeroed();
                    i.fill(&mut wc);
                    let mut grh: abi::ibv_grh = std::mem::zeroed();
                    i.fill(&mut grh);
                    loopback_gid(&mut grh.sgid, host);
                    loopback_gid(&mut grh.dgid, 1 - host);
                    x::ibv_create_ah_from_wc(s.pd, &mut wc, &mut grh, i.u8())
                };
                if !ah.is_null() {
                    s.ahs.push(ah);
                }
            }
            11 | 12 => {}
            13 => window(s, i, next_id),
            14 => {
                if !s.mr.is_null() {
                    let flags = i32::from(i.u8() % 16);
                    let off = usize::from(i.u16()) % PAGE;
                    let len = usize::from(i.u16()) % (PAGE - off + 1);
                    let addr = s.buf.as_mut_ptr().add(s.mid + off).cast::<c_void>();
                    x::ibv_rereg_mr(s.mr, flags, s.pd, addr, len, access(i) as i32);
                }
            }
            _ => std::thread::sleep(std::time::Duration::from_micros(u64::from(i.u8()) * 20)),
        }
    }
}

/// The queries: QP, port, GID, P_Key, with input-chosen arguments.
///
/// # Safety
/// The side's objects are live and its QP is not NULL.
unsafe fn query(s: &Side, i: &mut In) {
    // SAFETY: per the contract; every out-struct is of the right type.
    unsafe {
        let mut at: abi::ibv_qp_attr = std::mem::zeroed();
        let mut ia: abi::ibv_qp_init_attr = std::mem::zeroed();
        x::ibv_query_qp(s.qp, &mut at, i.u32() as i32, &mut ia);
        query_port(s.ctx, i, |i| i32::from(i.u8() as i8));
    }
}

/// `ibv_query_port`, `ibv_query_gid` and `ibv_query_pkey` on `ctx`, with
/// input-chosen port numbers and the table indices `index` reads.
///
/// # Safety
/// `ctx` is a context of this library (live or not) or NULL.
unsafe fn query_port(ctx: *mut abi::ibv_context, i: &mut In, index: fn(&mut In) -> i32) {
    // SAFETY: per the contract; every out-struct is of the right type.
    unsafe {
        let mut pa: abi::ibv_port_attr = std::mem::zeroed();
        x::query_port_ex(ctx, i.u8(), &mut pa, std::mem::size_of::<abi::ibv_port_attr>());
        let mut g: abi::ibv_gid = std::mem::zeroed();
        let port = i.u8();
        x::ibv_query_gid(ctx, port, index(i), &mut g);
        let mut pk = 0u16;
        let port = i.u8();
        x::ibv_query_pkey(ctx, port, index(i), &mut pk);
    }
}

/// `ibv_alloc_mw` while the side has fewer than four windows, then
/// `ibv_bind_mw` of one of them with input-chosen bounds and rights.
///
/// # Safety
/// The side's objects are live, used by no other thread, and its QP is
/// not NULL.
unsafe fn window(s: &mut Side, i: &mut In, next_id: &mut u64) {
    // SAFETY: per the contract; the ops are the library's own.
    unsafe {
        if s.mws.len() < 4 {
            let alloc = (*s.ctx).ops.alloc_mw.expect("alloc_mw op");
            let mw = alloc(s.pd, u32::from(i.u8() % 4));
            if !mw.is_null() {
                s.mws.push(mw);
            }
            return;
        }
        let bind = (*s.ctx).ops.bind_mw.expect("bind_mw op");
        let mut mb: abi::ibv_mw_bind = std::mem::zeroed();
        mb.wr_id = *next_id;
        *next_id += 1;
        mb.send_flags = u32::from(i.u8());
        mb.bind_info.mr = s.mr;
        mb.bind_info.addr = s.base() + u64::from(i.u16()) % (PAGE as u64 + 16);
        mb.bind_info.length = u64::from(i.u16());
        mb.bind_info.mw_access_flags = access(i);
        let mw = s.mws[usize::from(i.u8()) % s.mws.len()];
        if bind(s.qp, mw, &mut mb) == 0 {
            s.posted.insert(mb.wr_id);
        }
    }
}

/// Destroy a side's objects in dependency order; each destroy succeeds.
///
/// # Safety
/// The side's objects are live and used by no other thread.
unsafe fn teardown(s: &mut Side) {
    // SAFETY: per the contract.
    unsafe {
        if !s.qp.is_null() {
            assert_eq!(x::ibv_destroy_qp(s.qp), 0, "destroy_qp");
        }
        for ah in s.ahs.drain(..) {
            assert_eq!(x::ibv_destroy_ah(ah), 0, "destroy_ah");
        }
        let dealloc = (*s.ctx).ops.dealloc_mw.expect("dealloc_mw op");
        for mw in s.mws.drain(..) {
            assert_eq!(dealloc(mw), 0, "dealloc_mw");
        }
        if !s.mr.is_null() {
            assert_eq!(x::ibv_dereg_mr(s.mr), 0, "dereg_mr");
        }
        assert_eq!(x::ibv_destroy_cq(s.cq), 0, "destroy_cq");
        assert_eq!(x::ibv_dealloc_pd(s.pd), 0, "dealloc_pd");
    }
}
