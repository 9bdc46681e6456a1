//! XRC domains (`ibv_xrcd`) and XRC target QPs (see `roce_emulator::xrc`):
//! `ctx.alloc_xrcd()`, `pd.create_xrc_srq(n, sge, &xrcd, &cq)`,
//! `xrcd.create_tgt_qp()`, and initiators from `pd.qp_builder(&cq, &cq)
//! .qp_type(QpType::XrcSend)` whose work requests name the target's SRQ
//! (`SendWr::xrc(srq.handle().id())`).

use crate::pd::Xrcd;
use crate::Qp;
use roce_emulator::CreateQpError;

impl Xrcd {
    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: a target QP of this
    /// domain. Move it INIT -> RTR (-> RTS) with the initiator as its peer;
    /// requests then land in the XRC SRQ each names.
    pub fn create_tgt_qp(&self) -> Result<Qp, CreateQpError> {
        let i = &self.inner;
        let qpn = i.ctx.lock().create_xrc_tgt_qp(i.handle, i.pd.handle(), i.cq.handle())?;
        Ok(Qp::xrc_target(self, i.pd.clone(), i.cq.clone(), qpn))
    }
}
