//! Connection helpers for the unreliable transports (UC and UD) and the
//! UD send helper. RC uses [`Qp::connect`].

use crate::qp::{ConnectOptions, Qp, QpEndpoint};
use roce_emulator::{AccessFlags, AhAttr, QpAttr, QpModifyError, QpState, SendWr};
use std::net::IpAddr;

/// The Q_Key the helpers use when none is given (rdma-core's
/// `ibv_ud_pingpong` value).
pub const DEFAULT_QKEY: u32 = 0x1111_1111;

impl Qp {
    /// UC: RESET → INIT → RTR → RTS towards `remote` (UC has no ACK
    /// timer, retries or READ/atomic depths; only `opts.mtu` and the
    /// REMOTE_WRITE bit of `opts.access` are used).
    pub fn connect_uc(
        &self,
        local: &QpEndpoint,
        remote: &QpEndpoint,
        opts: &ConnectOptions,
    ) -> Result<(), QpModifyError> {
        let access =
            AccessFlags(opts.access.0 & (AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0));
        self.modify(
            &QpAttr::new().state(QpState::Init).pkey_index(0).port(1).access_flags(access),
        )?;
        self.modify(
            &QpAttr::new()
                .state(QpState::Rtr)
                .ah(AhAttr::new(remote.addr))
                .mtu(opts.mtu)
                .dest_qpn(remote.qpn)
                .rq_psn(remote.psn),
        )?;
        self.modify(&QpAttr::new().state(QpState::Rts).sq_psn(local.psn))
    }

    /// UD: RESET → INIT (with `qkey`) → RTR → RTS sending from `sq_psn`.
    /// A UD QP has no peer: each send names one ([`ud_send`]).
    pub fn activate_ud(&self, qkey: u32, sq_psn: u32) -> Result<(), QpModifyError> {
        self.modify(&QpAttr::new().state(QpState::Init).pkey_index(0).port(1).qkey(qkey))?;
        self.modify(&QpAttr::new().state(QpState::Rtr))?;
        self.modify(&QpAttr::new().state(QpState::Rts).sq_psn(sq_psn))
    }
}

/// `ibv_create_ah` for RoCEv2: the address vector towards the port at
/// `addr` (GID = the address, hop limit 64 as `ibv_ud_pingpong` sets).
pub fn create_ah(addr: IpAddr) -> AhAttr {
    let mut ah = AhAttr::new(addr);
    ah.hop_limit = 64;
    ah
}

/// Address a send WR to a UD peer: its address handle, QPN and Q_Key.
pub fn ud_send(wr: SendWr, ah: AhAttr, remote: &QpEndpoint, qkey: u32) -> SendWr {
    wr.ud(ah, remote.qpn, qkey)
}
