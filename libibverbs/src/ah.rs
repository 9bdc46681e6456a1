//! Address handles (`ibv_create_ah`, `ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`): RoCE addresses are GIDs, so every AH needs a
//! GRH (`is_global`), as on the kernel's RoCE devices.

use crate::abi;
use crate::device::{ctx, gids};
use crate::handles::{self, Kind};
use crate::mr::{pd_hold, pd_live, PdObj};
use crate::util::{diag, guard_ptr, guard_rc};
use roce_verbs_api::{init_ah_from_wc, AhAttr, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use std::net::{IpAddr, Ipv6Addr};

/// An AH; `c` first.
#[repr(C)]
pub(crate) struct AhObj {
    pub c: abi::ibv_ah,
    pub attr: AhAttr,
    pub pd: *mut PdObj,
}

/// # Safety
/// `p` must be an AH this library created and not yet destroyed.
pub(crate) unsafe fn ah<'a>(p: *mut abi::ibv_ah) -> Option<&'a AhObj> {
    // SAFETY: per the contract, a leaked Box<AhObj> (c at offset 0).
    (!p.is_null()).then(|| unsafe { &*(p as *const AhObj) })
}

/// The address a GID names (IPv4-mapped GIDs are IPv4 addresses; an
/// emulated device's link-local GID names its address, see
/// `roce_verbs_api::gid::gid_to_addr`).
pub(crate) fn gid_addr(raw: [u8; 16]) -> IpAddr {
    roce_verbs_api::gid::gid_to_addr(Ipv6Addr::from(raw))
}

/// The bits of `ibv_global_route.flow_label` a RoCE device uses.
pub(crate) const FLOW_LABEL_MASK: u32 = 0xF_FFFF;

/// A C address vector as the emulator's. Needs a GRH with a usable GID.
/// Every address vector a program hands to this library comes through
/// here (`ibv_create_ah`, `ibv_modify_qp` with `IBV_QP_AV`,
/// `ibv_resolve_eth_l2_from_gid`).
pub(crate) fn ah_from_c(a: &abi::ibv_ah_attr) -> Result<AhAttr, i32> {
    if a.is_global == 0 {
        diag!("address vector without GRH: RoCE needs is_global = 1 and a destination GID");
        return Err(libc::EINVAL);
    }
    // SAFETY: reading the raw bytes of the GID union is always valid.
    let raw = unsafe { a.grh.dgid.raw };
    let addr = gid_addr(raw);
    if addr.is_unspecified() {
        diag!("address vector with the zero GID");
        return Err(libc::EINVAL);
    }
    let mut x = AhAttr::new(addr);
    x.sgid_index = a.grh.sgid_index;
    x.hop_limit = a.grh.hop_limit;
    x.traffic_class = a.grh.traffic_class;
    // The flow label is 20 bits. Kernel drivers keep the low 20 bits of
    // what the program passes (UCX passes ~0 on purpose), so does this.
    x.flow_label = a.grh.flow_label & FLOW_LABEL_MASK;
    x.sl = a.sl;
    x.port_num = if a.port_num == 0 { 1 } else { a.port_num };
    Ok(x)
}

/// The emulator's address vector as C.
pub(crate) fn ah_to_c(a: &AhAttr) -> abi::ibv_ah_attr {
    // SAFETY: plain C data.
    let mut c: abi::ibv_ah_attr = unsafe { std::mem::zeroed() };
    let gid = match a.dgid {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    c.grh.dgid.raw = gid.octets();
    c.grh.flow_label = a.flow_label;
    c.grh.sgid_index = a.sgid_index;
    c.grh.hop_limit = a.hop_limit;
    c.grh.traffic_class = a.traffic_class;
    c.is_global = 1;
    c.sl = a.sl;
    c.port_num = a.port_num;
    c
}

pub(crate) unsafe extern "C" fn create_ah(
    p: *mut abi::ibv_pd,
    attr: *mut abi::ibv_ah_attr,
) -> *mut abi::ibv_ah {
    guard_ptr(|| {
        // SAFETY: the caller's ibv_ah_attr.
        let a = ah_from_c(unsafe { crate::util::arg_ref(attr) }?)?;
        let po = pd_hold(&handles::lock(), p)?;
        let b = Box::new(AhObj {
            c: abi::ibv_ah { context: po.c.context, pd: p, handle: 0 },
            attr: a,
            pd: p as *mut PdObj,
        });
        let h = Box::into_raw(b) as *mut abi::ibv_ah;
        handles::insert(Kind::Ah, h, po.c.context);
        Ok(h)
    })
}

pub(crate) unsafe extern "C" fn destroy_ah(a: *mut abi::ibv_ah) -> libc::c_int {
    guard_rc(|| {
        handles::lock().take(Kind::Ah, a, "ibv_destroy_ah")?;
        // SAFETY: a leaked Box<AhObj>; it left the table just now, so this
        // is its only free.
        let b = unsafe { Box::from_raw(a as *mut AhObj) };
        // SAFETY: the PD outlives its AHs.
        if let Some(p) = unsafe { b.pd.as_ref() } {
            p.put();
        }
        Ok(())
    })
}

/// The emulator's view of a C completion (the fields AH building needs).
fn wc_of(w: &abi::ibv_wc) -> WorkCompletion {
    let mut f = WcFlags::EMPTY;
    if w.wc_flags & abi::IBV_WC_GRH != 0 {
        f |= WcFlags::GRH;
    }
    WorkCompletion {
        wr_id: w.wr_id,
        status: if w.status == abi::IBV_WC_SUCCESS {
            WcStatus::Success
        } else {
            WcStatus::GeneralErr
        },
        opcode: WcOpcode::Recv,
        byte_len: w.byte_len,
        imm: None,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: f,
    }
}

pub(crate) unsafe extern "C" fn init_ah_from_wc_c(
    c: *mut abi::ibv_context,
    port: u8,
    wc: *mut abi::ibv_wc,
    grh: *mut abi::ibv_grh,
    out: *mut abi::ibv_ah_attr,
) -> libc::c_int {
    crate::util::guard_neg(|| {
        // SAFETY: contract of ibv_init_ah_from_wc.
        let cx = unsafe { ctx(c) }.ok_or(libc::EINVAL)?;
        crate::device::check_port(port)?;
        if wc.is_null() || grh.is_null() || out.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's completion and its 40-byte GRH area.
        let (w, g) = unsafe { (&*wc, std::slice::from_raw_parts(grh.cast::<u8>(), 40)) };
        let a = init_ah_from_wc(&gids(cx), &wc_of(w), g).map_err(|e| {
            diag!("init_ah_from_wc: {e}");
            libc::EINVAL
        })?;
        // SAFETY: the caller's out struct.
        unsafe { out.write(ah_to_c(&a)) };
        Ok(0)
    })
}

pub(crate) unsafe extern "C" fn create_ah_from_wc(
    p: *mut abi::ibv_pd,
    wc: *mut abi::ibv_wc,
    grh: *mut abi::ibv_grh,
    port: u8,
) -> *mut abi::ibv_ah {
    guard_ptr(|| {
        // SAFETY: contract of ibv_create_ah_from_wc.
        let po = unsafe { pd_live(p) }?;
        // SAFETY: plain C data.
        let mut a: abi::ibv_ah_attr = unsafe { std::mem::zeroed() };
        // SAFETY: forwarding the caller's pointers.
        if unsafe { init_ah_from_wc_c(po.c.context, port, wc, grh, &mut a) } != 0 {
            return Err(crate::util::errno());
        }
        // SAFETY: a is a valid attr.
        let r = unsafe { create_ah(p, &mut a) };
        if r.is_null() {
            Err(crate::util::errno())
        } else {
            Ok(r)
        }
    })
}
