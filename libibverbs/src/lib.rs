//! `libibverbs.so.1` for roce-emu: unmodified rdma-core programs (C, C++,
//! Python/pyverbs) run on the emulated RoCEv2 devices with
//! `LD_LIBRARY_PATH=<dir>`, no kernel module and no root.
//!
//! The library answers libibverbs' public ABI itself (no provider plugin, no
//! `/dev/infiniband`): every symbol rdma-core 44 exports is exported with its
//! symbol version (`libibverbs.map`, `exports.rs`), the objects handed to the
//! program have rdma-core's exact layouts ([`abi`], checked against the C
//! header by `tests/layout.rs`), and the function tables the inline verbs of
//! `<infiniband/verbs.h>` jump through (`ibv_context.ops`, the
//! `verbs_context` in front of it, `ibv_qp_ex`, `ibv_cq_ex`) are filled.
//!
//! Each exported function is a thin translation: C pointers and enums in,
//! the safe [`roce_verbs_api`] types out, an errno back. The protocol lives
//! in the emulator; this crate only converts.
//!
//! # Layers
//! The modules form layers: each uses only modules below it, and no two
//! modules of one line use each other (no module circle: `cargo run -p
//! roce-tests --bin module-cycles -- --graph libibverbs/src` prints the
//! graph, `tests/tests/layering.rs` checks it):
//!
//! ```text
//! fuzz                        the fuzz harnesses (feature `fuzz`)
//! exports  rdmacm/            every ibv_* symbol with its version; librdmacm
//! context                     ibv_open_device (the function tables), ibv_close_device
//! qp_ex                       the ibv_wr_* calls (the ibv_qp_ex table)
//! qp                          QPs: create, modify, query, destroy, post, bind_mw
//! ah  cq  srq                 address handles; CQs and channels; SRQs
//! mr                          PDs, MRs, MWs
//! device                      the device list and its fork handlers, the context
//!                             object (Ctx), device and port queries, async events
//! compat  strings  wr         IBVERBS_1.0 stubs; the *_str tables; C work-request lists;
//!   handles  fork             the live-handle table; the fork generation
//! util  abi                   panic guards, errno, diagnostics; verbs.h (generated)
//! ```
//!
//! Two calls run up at run time, never as a `use`: a QP gets its
//! `ibv_wr_*` table from its context (`Ctx::fill_qp_ex`, which
//! `context::open_device` sets to `qp_ex::fill`), and the CM hands its
//! fork handlers to the device list's (`device::ForkHooks`, see `fork.rs`).
//!
//! # Memory
//! `ibv_reg_mr(pd, addr, len, access)` registers the caller's own pages
//! (`roce_region::RegionMem::external`, iova = `addr`): the peer's WRITEs
//! land there, as with a NIC's DMA. The region is reached only under the
//! device lock, and `ibv_dereg_mr` removes it from the device before it
//! returns, so the application may free the memory afterwards.
//!
//! # Unsafe code
//! This crate and `roce-region` are the only places in the workspace where
//! `unsafe` is allowed: the C ABI hands us raw pointers. The rules every
//! entry point follows:
//! - a verbs object the program passes to a slow-path verb (create,
//!   destroy, modify, query, resize) is looked up in the live-handle table
//!   ([`handles`]) first: a destroyed object, one of a closed context, or
//!   anything else is answered with `EINVAL`, never read; a destroy
//!   refuses (EBUSY) before it undoes anything and frees the object only
//!   once nothing can refuse any more;
//! - on the fast paths (posts, polls, `ibv_req_notify_cq`, `ibv_wr_*`) a
//!   pointer is trusted as libibverbs trusts it (it must point to a live
//!   object this library created), as is a struct of the documented type;
//!   NULL is checked and answered with `EINVAL`;
//! - objects are `Box`ed `#[repr(C)]` structs whose first field is the C
//!   struct the program sees, so the program's pointer is the box's pointer;
//! - a Rust panic never crosses the ABI: `util::guard` turns it into an error
//!   return.

#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

pub mod abi;
mod ah;
mod compat;
mod context;
mod cq;
mod device;
mod exports;
mod fork;
/// The fuzz harnesses (`fuzz/` drives them): not in the shipped library,
/// only with the `fuzz` feature, which the `roce-fuzz` crate turns on.
#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz;
mod handles;
mod mr;
mod qp;
mod qp_ex;
#[doc(hidden)]
pub mod rdmacm;
mod srq;
mod strings;
mod util;
mod wr;
mod xrc;

/// The rsocket calls (`rsocket`, `rsend`, `rpoll`, ...): the C layer in
/// `roce-rdmacm`, written against this library's public C API; linking it
/// here makes the drop-in export them (version `RDMACM_1.0`).
pub use roce_rdmacm;
