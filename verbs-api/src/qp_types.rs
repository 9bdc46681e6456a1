//! Connection helpers for the unreliable transports (UC and UD), the UD
//! send helper and address handles (`create_ah`, `create_ah_from_wc`). RC
//! uses [`Qp::connect`].

use crate::device::Context;
use crate::qp::{ConnectOptions, Qp, QpEndpoint};
use roce_emulator::{
    AccessFlags, AhAttr, ModifyQpError, QpAttr, QpState, SendWr, WcFlags, WcStatus, WorkCompletion,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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
    ) -> Result<(), ModifyQpError> {
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
    pub fn activate_ud(&self, qkey: u32, sq_psn: u32) -> Result<(), ModifyQpError> {
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

/// Bytes of the GRH area at the head of a UD receive buffer.
pub const GRH_LEN: usize = 40;

/// `create_ah_from_wc` could not build an address handle.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AhFromWcError {
    /// The completion is not a successful receive (its buffer holds nothing).
    #[error("the completion's status is {0}, not success")]
    NotSuccess(WcStatus),
    /// The completion has no GRH (`IBV_WC_GRH` not set: not a UD receive).
    #[error("the completion has no GRH (IBV_WC_GRH not set)")]
    NoGrh,
    /// Fewer than 40 bytes were given.
    #[error("the GRH area is {0} bytes; it has 40")]
    Truncated(usize),
    /// The 40 bytes hold neither an IPv6 header nor (in their last 20
    /// bytes) an IPv4 header with a valid checksum.
    #[error("the GRH area holds neither an IPv6 nor a valid IPv4 header")]
    Malformed,
    /// The datagram's destination GID is none of this device's GIDs.
    #[error("destination GID {0} is not in this device's GID table")]
    UnknownGid(Ipv6Addr),
}

/// The addressing fields of a received GRH area (RoCEv2: an IPv6 header
/// in the 40 bytes, or an IPv4 header in their last 20, rxe's layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grh {
    /// The sender's GID (IPv4-mapped for IPv4).
    pub sgid: Ipv6Addr,
    /// The GID the datagram was sent to (IPv4-mapped for IPv4).
    pub dgid: Ipv6Addr,
    /// Traffic class (IPv6) or TOS (IPv4).
    pub traffic_class: u8,
    /// Flow label (0 for IPv4).
    pub flow_label: u32,
    /// Hop limit (IPv6) or TTL (IPv4) as received.
    pub hop_limit: u8,
    /// Whether the area held an IPv4 header.
    pub ipv4: bool,
}

/// The ones'-complement sum of a 20-byte IPv4 header folds to 0xFFFF
/// when its checksum is right.
fn ipv4_checksum_ok(h: &[u8]) -> bool {
    let mut sum: u32 = h.chunks_exact(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum == 0xFFFF
}

impl Grh {
    /// Decode the first 40 bytes of `area`. Like libibverbs, an IPv4
    /// header (version 4, 20 bytes, valid checksum) in bytes 20..40 wins
    /// over an IPv6 version nibble in byte 0; anything else is
    /// [`AhFromWcError::Malformed`]. Never panics.
    pub fn parse(area: &[u8]) -> Result<Grh, AhFromWcError> {
        let a = area.get(..GRH_LEN).ok_or(AhFromWcError::Truncated(area.len()))?;
        let v4 = &a[20..GRH_LEN];
        if v4[0] == 0x45 && ipv4_checksum_ok(v4) {
            let addr = |i: usize| Ipv4Addr::new(v4[i], v4[i + 1], v4[i + 2], v4[i + 3]);
            return Ok(Grh {
                sgid: addr(12).to_ipv6_mapped(),
                dgid: addr(16).to_ipv6_mapped(),
                traffic_class: v4[1],
                flow_label: 0,
                hop_limit: v4[8],
                ipv4: true,
            });
        }
        if a[0] >> 4 != 6 {
            return Err(AhFromWcError::Malformed);
        }
        let gid = |i: usize| {
            let mut g = [0u8; 16];
            g.copy_from_slice(&a[i..i + 16]);
            Ipv6Addr::from(g)
        };
        Ok(Grh {
            sgid: gid(8),
            dgid: gid(24),
            traffic_class: (a[0] << 4) | (a[1] >> 4),
            flow_label: u32::from_be_bytes([0, a[1] & 0x0F, a[2], a[3]]),
            hop_limit: a[7],
            ipv4: false,
        })
    }
}

/// `ibv_init_ah_from_wc` for RoCEv2 against a GID table: the address
/// vector back to the sender of a UD datagram. `grh` is the 40-byte area
/// at the head of the receive buffer. The destination is the datagram's
/// source GID; `sgid_index` is the index of `gids` holding the GID the
/// datagram was sent to; traffic class and flow label are echoed; the hop
/// limit is 0xFF (as libibverbs sets it). Reply to `wc.src_qp`.
pub fn init_ah_from_wc(
    gids: &[Ipv6Addr],
    wc: &WorkCompletion,
    grh: &[u8],
) -> Result<AhAttr, AhFromWcError> {
    if wc.status != WcStatus::Success {
        return Err(AhFromWcError::NotSuccess(wc.status));
    }
    if !wc.wc_flags.contains(WcFlags::GRH) {
        return Err(AhFromWcError::NoGrh);
    }
    let g = Grh::parse(grh)?;
    let index = gids.iter().position(|x| *x == g.dgid).ok_or(AhFromWcError::UnknownGid(g.dgid))?;
    let dgid = match g.sgid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(g.sgid),
    };
    let mut ah = AhAttr::new(dgid);
    ah.sgid_index = u8::try_from(index).unwrap_or(u8::MAX);
    ah.traffic_class = g.traffic_class;
    ah.flow_label = g.flow_label;
    ah.hop_limit = 0xFF;
    Ok(ah)
}

impl Context {
    /// `ibv_create_ah_from_wc`: an address handle back to the sender of the
    /// UD datagram `wc` completed, from the 40-byte GRH area at the head of
    /// its receive buffer (see [`init_ah_from_wc`]; the GID table is
    /// [`Context::query_gid`]'s). Reply with
    /// `wr.ud(ah, wc.src_qp, qkey)`.
    pub fn create_ah_from_wc(
        &self,
        wc: &WorkCompletion,
        grh: &[u8],
    ) -> Result<AhAttr, AhFromWcError> {
        let gids: Vec<Ipv6Addr> = (0..).map_while(|i| self.query_gid(i)).collect();
        init_ah_from_wc(&gids, wc, grh)
    }
}
