//! The `misuse` fuzz target (issue 26): random sequences of verbs calls
//! through the C entry points, with the arguments a buggy program passes —
//! handles it already destroyed (a second destroy, a query, a create on a
//! destroyed PD/CQ/channel), NULL, huge counts, sizes, lengths and indices,
//! unknown flags, a context closed under its objects.
//!
//! What is held back, because rdma-core crashes on it too (its inline
//! `ibv_post_send`/`ibv_poll_cq` follow `qp->context->ops` before any
//! check): the fast paths (`post_send`, `post_recv`, `poll_cq`,
//! `req_notify_cq`) get live objects only; pointers are ours, stale or
//! NULL, never made up; an SGE list or WC array is as long as the count
//! says up to 256; registrations are of a page of ours (or of addresses
//! nothing is mapped at), so a WRITE the fuzzer aims well lands there.
//!
//! Checked after every input: no Rust panic inside the library (its panic
//! guard would turn one into `EIO`); the guard pages around the registered
//! page never change; and, by the fuzzer, no crash and no hang.

use super::{loopback_gid, In, PANICKED};
use crate::{abi, exports as x};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::Ordering;

const PAGE: usize = 4096;
const GUARD: u8 = 0x5c;
/// Most objects of one kind per input.
const MAX_OBJS: usize = 6;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Ctx,
    Pd,
    Mr,
    Cq,
    Chan,
    Qp,
    Srq,
    Ah,
    Mw,
}

/// One object a call made: its pointer, whether it is still live, and
/// the context it belongs to (index into the context pool).
#[derive(Clone, Copy, Debug)]
struct Obj {
    kind: Kind,
    ptr: usize,
    live: bool,
    ctx: usize,
}

/// Everything one input made.
struct Pool {
    objs: Vec<Obj>,
    /// Three pages: guard, registered, guard (page aligned).
    arena: Vec<u8>,
    mid: usize,
}

impl Pool {
    fn of(&self, k: Kind) -> impl Iterator<Item = &Obj> {
        self.objs.iter().filter(move |o| o.kind == k)
    }
    fn count(&self, k: Kind) -> usize {
        self.of(k).count()
    }
    /// An argument of kind `k`: NULL, or any object of that kind made
    /// so far, live or destroyed.
    fn any(&self, k: Kind, i: &mut In) -> (*mut c_void, Option<Obj>) {
        let b = i.u8();
        let v: Vec<Obj> = self.of(k).copied().collect();
        if b.is_multiple_of(8) || v.is_empty() {
            return (null_mut(), None);
        }
        let o = v[usize::from(b / 8) % v.len()];
        (o.ptr as *mut c_void, Some(o))
    }
    /// A live object of kind `k` whose context is live.
    fn live(&self, k: Kind, i: &mut In) -> Option<Obj> {
        let v: Vec<Obj> = self.of(k).copied().filter(|o| o.live && self.ctx_live(o.ctx)).collect();
        if v.is_empty() {
            return None;
        }
        Some(v[usize::from(i.u8()) % v.len()])
    }
    fn ctx_live(&self, c: usize) -> bool {
        self.objs.get(c).is_some_and(|o| o.kind == Kind::Ctx && o.live)
    }
    fn add(&mut self, kind: Kind, ptr: *mut c_void, ctx: usize) {
        if !ptr.is_null() {
            self.objs.push(Obj { kind, ptr: ptr as usize, live: true, ctx });
        }
    }
    /// `o` was destroyed (its call returned 0).
    fn kill(&mut self, o: Obj) {
        for x in &mut self.objs {
            if x.kind == o.kind && x.ptr == o.ptr && x.live {
                x.live = false;
                break;
            }
        }
        // a freed address may come back for a new object of any kind:
        // the pool keeps the newest one live only
    }
    fn base(&self) -> usize {
        self.arena.as_ptr() as usize + self.mid
    }
    fn guards_intact(&self) -> bool {
        self.arena[..self.mid].iter().all(|&v| v == GUARD)
            && self.arena[self.mid + PAGE..].iter().all(|&v| v == GUARD)
    }
    /// The context index of a context object.
    fn ctx_index(&self, o: &Obj) -> usize {
        self.objs.iter().position(|x| x.kind == Kind::Ctx && x.ptr == o.ptr).unwrap_or(usize::MAX)
    }
}

/// A count, size or index: small, at a limit, or huge.
fn amount(i: &mut In) -> u32 {
    match i.u8() % 8 {
        0 => 0,
        1 => u32::MAX,
        2 => 1 << 31,
        3 => i.u32(),
        4 => u32::from(i.u16()),
        _ => u32::from(i.u8()),
    }
}

/// An address for a registration: inside or around our page, or where
/// nothing is mapped.
fn address(p: &Pool, i: &mut In) -> (*mut c_void, usize) {
    let base = p.base();
    let (addr, len) = match i.u8() % 8 {
        0 => (0usize, PAGE),
        1 => (0xdead_0000_0000, PAGE),
        2 => (usize::MAX - 100, 4096),
        3 => (base, amount(i) as usize),
        _ => {
            let off = usize::from(i.u16()) % PAGE;
            (base + off, usize::from(i.u16()) % (PAGE - off + 1))
        }
    };
    (addr as *mut c_void, len)
}

/// A random `ibv_qp_attr`, its GIDs forced onto loopback.
///
/// # Safety
/// None beyond `In::fill`'s: the struct has no pointers.
unsafe fn qp_attr(i: &mut In) -> abi::ibv_qp_attr {
    // SAFETY: ibv_qp_attr is plain data valid for any bits.
    unsafe {
        let mut a: abi::ibv_qp_attr = std::mem::zeroed();
        i.fill(&mut a);
        loopback_gid(&mut a.ah_attr.grh.dgid, 0);
        loopback_gid(&mut a.alt_ah_attr.grh.dgid, 1);
        a
    }
}

/// What one input reached.
#[derive(Debug, Default, Clone, Copy)]
pub struct Reached {
    /// Calls made.
    pub calls: u64,
    /// Calls that failed (an error return or NULL).
    pub refused: u64,
    /// Objects created.
    pub created: u64,
}

/// Run one input. Panics when an invariant breaks.
pub fn misuse(data: &[u8]) {
    misuse_run(data);
}

/// [`misuse`], reporting what the input reached.
pub fn misuse_run(data: &[u8]) -> Reached {
    let _ = super::devs(); // the fuzz devices, the panic hook
    let mut i = In(data);
    let mut arena = vec![GUARD; 4 * PAGE];
    let mid = PAGE + (PAGE - arena.as_ptr() as usize % PAGE) % PAGE;
    arena[mid..mid + PAGE].fill(0);
    let mut p = Pool { objs: Vec::new(), arena, mid };
    let mut r = Reached::default();
    let mut n = 0;
    // SAFETY: the device list is read for n entries and freed at the end.
    let list = unsafe { x::ibv_get_device_list(&mut n) };
    assert!(!list.is_null() && n >= 1, "fuzz devices");
    let mut steps = 0;
    while !i.is_empty() && steps < 64 {
        steps += 1;
        // SAFETY: every call gets pointers this library returned (live or
        // destroyed) or NULL, and structs of the right types with buffers
        // as long as their counts; see the module documentation.
        unsafe { step(&mut p, &mut i, list, n, &mut r) };
        assert!(!PANICKED.load(Ordering::SeqCst), "a panic inside the library");
        assert!(p.guards_intact(), "a guard page changed");
    }
    // SAFETY: as above; the live objects are destroyed children first.
    unsafe {
        for k in [Kind::Qp, Kind::Srq, Kind::Ah, Kind::Mw, Kind::Mr, Kind::Cq, Kind::Chan, Kind::Pd]
        {
            let live: Vec<Obj> = p.of(k).copied().filter(|o| o.live && p.ctx_live(o.ctx)).collect();
            for o in live {
                destroy(&mut p, o);
            }
        }
        let ctxs: Vec<Obj> = p.of(Kind::Ctx).copied().filter(|o| o.live).collect();
        for o in ctxs {
            x::ibv_close_device(o.ptr as *mut abi::ibv_context);
        }
        x::ibv_free_device_list(list);
    }
    assert!(!PANICKED.load(Ordering::SeqCst), "a panic inside the library");
    assert!(p.guards_intact(), "a guard page changed");
    r
}

/// Destroy `o` with its kind's call; the return code.
///
/// # Safety
/// `o.ptr` is an object of kind `o.kind` this library returned (live or
/// not).
unsafe fn destroy(p: &mut Pool, o: Obj) -> i32 {
    let v = o.ptr as *mut c_void;
    // SAFETY: per the contract; stale handles are what is being tested.
    let rc = unsafe {
        match o.kind {
            Kind::Ctx => x::ibv_close_device(v.cast()),
            Kind::Pd => x::ibv_dealloc_pd(v.cast()),
            Kind::Mr => x::ibv_dereg_mr(v.cast()),
            Kind::Cq => x::ibv_destroy_cq(v.cast()),
            Kind::Chan => x::ibv_destroy_comp_channel(v.cast()),
            Kind::Qp => x::ibv_destroy_qp(v.cast()),
            Kind::Srq => x::ibv_destroy_srq(v.cast()),
            Kind::Ah => x::ibv_destroy_ah(v.cast()),
            Kind::Mw => match p.objs.get(o.ctx).filter(|c| c.live) {
                Some(c) => {
                    let ctx = c.ptr as *mut abi::ibv_context;
                    match (*ctx).ops.dealloc_mw {
                        Some(f) => f(v.cast()),
                        None => -1,
                    }
                }
                None => -1,
            },
        }
    };
    if rc == 0 && o.live {
        p.kill(o);
    }
    rc
}

/// One call chosen by the input.
///
/// # Safety
/// `list` holds `n` devices of this library.
unsafe fn step(p: &mut Pool, i: &mut In, list: *mut *mut abi::ibv_device, n: i32, r: &mut Reached) {
    r.calls += 1;
    let op = i.u8() % 24;
    // SAFETY: see misuse_run.
    unsafe {
        match op {
            0..=9 => create(p, op, i, list, n, r),
            10..=12 => destroy_any(p, i, r),
            13..=18 => modify_or_query(p, op, i, r),
            _ => fast_path(p, op, i, r),
        }
    }
}

/// A create (`op` 0 to 9) with arguments of any of the pool's objects.
///
/// # Safety
/// As [`step`].
unsafe fn create(
    p: &mut Pool,
    op: u8,
    i: &mut In,
    list: *mut *mut abi::ibv_device,
    n: i32,
    r: &mut Reached,
) {
    // SAFETY: see misuse_run.
    unsafe {
        match op {
            0 if p.count(Kind::Ctx) < MAX_OBJS => {
                let d = *list.add(usize::from(i.u8()) % n as usize);
                let c = x::ibv_open_device(d);
                let idx = p.objs.len();
                p.add(Kind::Ctx, c.cast(), idx);
                r.created += u64::from(!c.is_null());
            }
            1 => {
                let (c, o) = p.any(Kind::Ctx, i);
                let a = p.count(Kind::Pd) < MAX_OBJS;
                if a {
                    let pd = x::ibv_alloc_pd(c.cast());
                    let ci = o.map(|o| p.ctx_index(&o)).unwrap_or(usize::MAX);
                    r.refused += u64::from(pd.is_null());
                    p.add(Kind::Pd, pd.cast(), ci);
                }
            }
            2 => {
                let (pd, o) = p.any(Kind::Pd, i);
                let (addr, len) = address(p, i);
                let acc = if i.u8() & 1 == 0 { 0x0f } else { i.u32() as i32 };
                let mr = x::ibv_reg_mr(pd.cast(), addr, len, acc);
                r.refused += u64::from(mr.is_null());
                p.add(Kind::Mr, mr.cast(), o.map_or(usize::MAX, |o| o.ctx));
            }
            3 => {
                let (c, o) = p.any(Kind::Ctx, i);
                let (ch, _) = p.any(Kind::Chan, i);
                let cqe = amount(i) as i32;
                let vec = i.u32() as i32;
                let cq = x::ibv_create_cq(c.cast(), cqe, null_mut(), ch.cast(), vec);
                r.refused += u64::from(cq.is_null());
                p.add(Kind::Cq, cq.cast(), o.map_or(usize::MAX, |o| p.ctx_index(&o)));
            }
            4 => {
                let (c, o) = p.any(Kind::Ctx, i);
                let ch = x::ibv_create_comp_channel(c.cast());
                p.add(Kind::Chan, ch.cast(), o.map_or(usize::MAX, |o| p.ctx_index(&o)));
            }
            5 | 6 => {
                let (pd, o) = p.any(Kind::Pd, i);
                let mut ia: abi::ibv_qp_init_attr = std::mem::zeroed();
                ia.send_cq = p.any(Kind::Cq, i).0.cast();
                ia.recv_cq = p.any(Kind::Cq, i).0.cast();
                ia.srq = if i.u8() & 3 == 0 { p.any(Kind::Srq, i).0.cast() } else { null_mut() };
                ia.qp_type = match i.u8() % 5 {
                    0 | 1 => abi::IBV_QPT_RC,
                    2 => abi::IBV_QPT_UC,
                    3 => abi::IBV_QPT_UD,
                    _ => i.u32(),
                };
                ia.cap.max_send_wr = amount(i);
                ia.cap.max_recv_wr = amount(i);
                ia.cap.max_send_sge = amount(i) % 300;
                ia.cap.max_recv_sge = amount(i) % 300;
                ia.cap.max_inline_data = amount(i);
                if i.u8() & 1 == 0 {
                    ia.cap.max_send_wr %= 64;
                    ia.cap.max_recv_wr %= 64;
                    ia.cap.max_inline_data %= 256;
                }
                ia.sq_sig_all = i32::from(i.u8() & 1);
                let qp = x::ibv_create_qp(pd.cast(), &mut ia);
                r.refused += u64::from(qp.is_null());
                r.created += u64::from(!qp.is_null());
                p.add(Kind::Qp, qp.cast(), o.map_or(usize::MAX, |o| o.ctx));
            }
            7 => {
                let (pd, o) = p.any(Kind::Pd, i);
                let mut si: abi::ibv_srq_init_attr = std::mem::zeroed();
                si.attr.max_wr = amount(i);
                si.attr.max_sge = amount(i);
                si.attr.srq_limit = amount(i);
                let srq = x::ibv_create_srq(pd.cast(), &mut si);
                r.refused += u64::from(srq.is_null());
                p.add(Kind::Srq, srq.cast(), o.map_or(usize::MAX, |o| o.ctx));
            }
            8 => {
                let (pd, o) = p.any(Kind::Pd, i);
                let mut aa: abi::ibv_ah_attr = std::mem::zeroed();
                i.fill(&mut aa);
                loopback_gid(&mut aa.grh.dgid, i.u8());
                let ah = x::ibv_create_ah(pd.cast(), &mut aa);
                r.refused += u64::from(ah.is_null());
                p.add(Kind::Ah, ah.cast(), o.map_or(usize::MAX, |o| o.ctx));
            }
            9 => {
                // alloc_mw is reached through the context's ops (as
                // rdma-core's inline ibv_alloc_mw does): a live PD only
                if let Some(o) = p.live(Kind::Pd, i) {
                    if let Some(c) = p.objs.get(o.ctx).filter(|c| c.live) {
                        let ctx = c.ptr as *mut abi::ibv_context;
                        if let Some(f) = (*ctx).ops.alloc_mw {
                            let t = if i.u8() & 1 == 0 { 1 } else { i.u32() };
                            let mw = f(o.ptr as *mut abi::ibv_pd, t);
                            p.add(Kind::Mw, mw.cast(), o.ctx);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// A destroy of anything made so far: live, or a second time.
///
/// # Safety
/// As [`step`].
unsafe fn destroy_any(p: &mut Pool, i: &mut In, r: &mut Reached) {
    // SAFETY: see misuse_run.
    unsafe {
        let kinds = [
            Kind::Pd,
            Kind::Mr,
            Kind::Cq,
            Kind::Chan,
            Kind::Qp,
            Kind::Srq,
            Kind::Ah,
            Kind::Mw,
            Kind::Ctx,
        ];
        let k = kinds[usize::from(i.u8()) % kinds.len()];
        let (v, o) = p.any(k, i);
        match o {
            Some(o) if k != Kind::Mw || o.live => {
                r.refused += u64::from(destroy(p, o) != 0);
            }
            Some(_) => {}
            None => {
                let rc = destroy(p, Obj { kind: k, ptr: v as usize, live: false, ctx: 0 });
                r.refused += u64::from(rc != 0);
            }
        }
    }
}

/// A modify or a query (`op` 13 to 18) of any of the pool's objects.
///
/// # Safety
/// As [`step`].
unsafe fn modify_or_query(p: &mut Pool, op: u8, i: &mut In, r: &mut Reached) {
    // SAFETY: see misuse_run.
    unsafe {
        match op {
            13 => {
                let (qp, _) = p.any(Kind::Qp, i);
                let mut a = qp_attr(i);
                let mask = if i.u8() & 1 == 0 { i.u32() as i32 } else { 1 };
                r.refused += u64::from(x::ibv_modify_qp(qp.cast(), &mut a, mask) != 0);
            }
            14 => {
                let (qp, _) = p.any(Kind::Qp, i);
                let mut a: abi::ibv_qp_attr = std::mem::zeroed();
                let mut ia: abi::ibv_qp_init_attr = std::mem::zeroed();
                r.refused +=
                    u64::from(x::ibv_query_qp(qp.cast(), &mut a, i.u32() as i32, &mut ia) != 0);
            }
            15 => {
                let (srq, _) = p.any(Kind::Srq, i);
                let mut a: abi::ibv_srq_attr = std::mem::zeroed();
                a.max_wr = amount(i);
                a.srq_limit = amount(i);
                if i.u8() & 1 == 0 {
                    r.refused +=
                        u64::from(x::ibv_modify_srq(srq.cast(), &mut a, i.u32() as i32) != 0);
                } else {
                    r.refused += u64::from(x::ibv_query_srq(srq.cast(), &mut a) != 0);
                }
            }
            16 => {
                let (cq, _) = p.any(Kind::Cq, i);
                r.refused += u64::from(x::ibv_resize_cq(cq.cast(), amount(i) as i32) != 0);
            }
            17 => {
                let (mr, _) = p.any(Kind::Mr, i);
                let (pd, _) = p.any(Kind::Pd, i);
                let (addr, len) = address(p, i);
                let flags = i.u8() as i32 & 0x1f;
                let rc = x::ibv_rereg_mr(mr.cast(), flags, pd.cast(), addr, len, i.u32() as i32);
                r.refused += u64::from(rc != 0);
            }
            _ => {
                let (c, _) = p.any(Kind::Ctx, i);
                let mut a: abi::ibv_device_attr = std::mem::zeroed();
                r.refused += u64::from(x::ibv_query_device(c.cast(), &mut a) != 0);
                super::query_port(c.cast(), i, |i| amount(i) as i32);
            }
        }
    }
}

/// A call on the fast paths (`op` 19 to 23), on live objects only, or the
/// connection of two live QPs.
///
/// # Safety
/// As [`step`].
unsafe fn fast_path(p: &mut Pool, op: u8, i: &mut In, r: &mut Reached) {
    // SAFETY: see misuse_run.
    unsafe {
        match op {
            19 => {
                if let Some(o) = p.live(Kind::Qp, i) {
                    post_send(p, o, i, r);
                }
            }
            20 => {
                if let Some(o) = p.live(Kind::Qp, i) {
                    post_recv(p, o, i, r);
                }
            }
            21 => {
                if let Some(o) = p.live(Kind::Cq, i) {
                    let c = p.objs[o.ctx].ptr as *mut abi::ibv_context;
                    let mut wc: [abi::ibv_wc; 64] = std::mem::zeroed();
                    let max = match i.u8() % 4 {
                        0 => -i32::from(i.u8()),
                        _ => i32::from(i.u8() % 65),
                    };
                    if let Some(f) = (*c).ops.poll_cq {
                        f(o.ptr as *mut abi::ibv_cq, max, wc.as_mut_ptr());
                    }
                    if let Some(f) = (*c).ops.req_notify_cq {
                        f(o.ptr as *mut abi::ibv_cq, i32::from(i.u8() & 1));
                    }
                }
            }
            22 => {
                // connect two live QPs to each other properly (so that posts
                // move data), through the public calls
                let (Some(a), Some(b)) = (p.live(Kind::Qp, i), p.live(Kind::Qp, i)) else {
                    return;
                };
                let (a, b) = (a.ptr as *mut abi::ibv_qp, b.ptr as *mut abi::ibv_qp);
                super::connect_qp(a, b, 0, (*a).qp_type);
                super::connect_qp(b, a, 0, (*b).qp_type);
            }
            _ => {
                let (cq, _) = p.any(Kind::Cq, i);
                x::ibv_ack_cq_events(cq.cast(), i.u8().into());
            }
        }
    }
}

/// An SGE list of up to 256 entries inside our page (lengths may run past
/// it: the registration check refuses those), and a count that may be
/// larger than the QP allows (refused before it is read).
fn sges(p: &Pool, i: &mut In) -> (Vec<abi::ibv_sge>, i32) {
    // the lkey of a live MR of ours, or any
    let lkey = p.live(Kind::Mr, i).map(|m| {
        // SAFETY: a live MR of this library.
        unsafe { (*(m.ptr as *mut abi::ibv_mr)).lkey }
    });
    let lkey = match lkey {
        Some(k) => k,
        None => i.u32(),
    };
    let list: Vec<abi::ibv_sge> = (0..256)
        .map(|k| abi::ibv_sge {
            addr: (p.base() + (k * 16) % PAGE) as u64,
            length: if k == 0 { amount(i) } else { 16 },
            lkey,
        })
        .collect();
    let n = match i.u8() % 4 {
        0 => amount(i) as i32,
        _ => i32::from(i.u8() % 5),
    };
    // a count past the list would be the caller's overrun (rdma-core reads
    // it too): counts above 256 go only where the QP's limit refuses them
    let n = if n > 256 { n.max(1 << 20) } else { n };
    (list, n)
}

/// # Safety
/// `o` is a live QP of a live context.
unsafe fn post_send(p: &Pool, o: Obj, i: &mut In, r: &mut Reached) {
    let (mut list, n) = sges(p, i);
    // SAFETY: ibv_send_wr is plain data (NULL pointers when zeroed).
    let mut wr: abi::ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = u64::from(i.u32());
    wr.opcode = u32::from(i.u8() % 16);
    wr.send_flags = u32::from(i.u8() & 0x1f);
    wr.sg_list = list.as_mut_ptr();
    wr.num_sge = n;
    // (writes of union members: on a UD QP the ud one, whose AH is a
    // live one of ours or NULL, as a program's is; else the rdma one)
    // SAFETY: a live QP of this library (the contract).
    let ud = unsafe { (*(o.ptr as *mut abi::ibv_qp)).qp_type } == abi::IBV_QPT_UD;
    let ah = p.live(Kind::Ah, i);
    if ud {
        wr.wr.ud.ah = ah.map_or(null_mut(), |a| a.ptr as *mut abi::ibv_ah);
        wr.wr.ud.remote_qpn = i.u32() & 0xff_ffff;
        wr.wr.ud.remote_qkey = 0x1111_1111;
    } else {
        wr.wr.rdma.remote_addr = (p.base() + usize::from(i.u16()) % PAGE) as u64;
        wr.wr.rdma.rkey = i.u32();
    }
    let mut bad: *mut abi::ibv_send_wr = null_mut();
    // SAFETY: a live QP; the WR and its list live across the call.
    unsafe {
        let c = p.objs[o.ctx].ptr as *mut abi::ibv_context;
        if let Some(f) = (*c).ops.post_send {
            r.refused += u64::from(f(o.ptr as *mut abi::ibv_qp, &mut wr, &mut bad) != 0);
        }
    }
}

/// # Safety
/// `o` is a live QP of a live context.
unsafe fn post_recv(p: &Pool, o: Obj, i: &mut In, r: &mut Reached) {
    let (mut list, n) = sges(p, i);
    let mut wr = abi::ibv_recv_wr {
        wr_id: u64::from(i.u32()),
        next: null_mut(),
        sg_list: list.as_mut_ptr(),
        num_sge: n,
    };
    let mut bad: *mut abi::ibv_recv_wr = null_mut();
    // SAFETY: a live QP; the WR and its list live across the call.
    unsafe {
        let c = p.objs[o.ctx].ptr as *mut abi::ibv_context;
        if let Some(f) = (*c).ops.post_recv {
            r.refused += u64::from(f(o.ptr as *mut abi::ibv_qp, &mut wr, &mut bad) != 0);
        }
    }
}
