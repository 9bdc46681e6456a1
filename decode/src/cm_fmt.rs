//! How `roce decode` shows a CM MAD (a UD SEND to QP1 carrying the
//! connection manager's messages, `roce_packet::mad`): a summary on the
//! packet line, a ladder label, an explanation and a JSON object.

use roce_packet::mad::{
    attr_name, parse_ip_service_id, port_space, rej_reason_name, CmMad, CmMsg, IpCmHeader,
};
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv6Addr};

fn ps_name(ps: u8) -> String {
    match ps {
        port_space::TCP => "TCP".into(),
        port_space::UDP => "UDP".into(),
        port_space::IPOIB => "IPOIB".into(),
        port_space::IB => "IB".into(),
        x => format!("{x:#04x}"),
    }
}

/// `TCP:7174` for an IP service ID, else the ID in hex.
fn service(id: u64) -> String {
    match parse_ip_service_id(id) {
        Some((ps, port)) => format!("{}:{port}", ps_name(ps)),
        None => format!("{id:#018x}"),
    }
}

fn mtu_bytes(code: u8) -> Option<u32> {
    (1..=5).contains(&code).then(|| 128u32 << code)
}

fn gid_text(g: &[u8; 16]) -> String {
    let a = Ipv6Addr::from(*g);
    match a.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => a.to_string(),
    }
}

/// Which message an MRA or REJ refers to.
fn which(code: u8) -> &'static str {
    match code {
        0 => "REQ",
        1 => "REP",
        2 => "other",
        _ => "?",
    }
}

/// The librdmacm header of a REQ's or SIDR_REQ's private data, when the
/// service ID is an IP one.
fn ip_header(service_id: u64, pd: &[u8]) -> Option<IpCmHeader> {
    parse_ip_service_id(service_id)?;
    IpCmHeader::parse(pd).ok()
}

/// The summary after the packet line's headers: `CM REQ comm=0x6ccad5f5
/// svc=TCP:7174 qpn=0x23 psn=0x31e278 ...`.
pub fn summary(m: &CmMad) -> String {
    let name = attr_name(m.header.attr_id);
    let body = match &m.msg {
        CmMsg::Req(q) => {
            let mut s = format!(
                "comm={:#010x} svc={} qpn={:#08x} psn={:#08x} rd_atom={}/{} mtu={} timeout={}/{} retry={} rnr={} max_cm_retries={}",
                q.local_comm_id,
                service(q.service_id),
                q.local_qpn,
                q.starting_psn,
                q.responder_resources,
                q.initiator_depth,
                mtu_bytes(q.path_mtu).map_or_else(|| format!("code{}", q.path_mtu), |b| b.to_string()),
                q.local_cm_response_timeout,
                q.remote_cm_response_timeout,
                q.retry_count,
                q.rnr_retry_count,
                q.max_cm_retries
            );
            if q.transport_service_type != 0 {
                // 3 with extended transport type 1: XRC (IBA's XRC annex)
                let t = match (q.transport_service_type & 3, q.extended_transport_type) {
                    (1, _) => "UC".to_string(),
                    (2, _) => "RD".to_string(),
                    (3, 1) => "XRC".to_string(),
                    (t, x) => format!("{t}/ext{x}"),
                };
                s.push_str(&format!(" transport={t}"));
            }
            if q.srq {
                s.push_str(" srq");
            }
            if let Some(h) = ip_header(q.service_id, &q.private_data) {
                s.push_str(&format!(" {}:{} -> {}", h.src, h.src_port, h.dst));
            }
            s
        }
        CmMsg::Rep(r) => format!(
            "comm={:#010x} remote={:#010x} qpn={:#08x}{} psn={:#08x} rd_atom={}/{} rnr={}{}",
            r.local_comm_id,
            r.remote_comm_id,
            r.local_qpn,
            // an XRC target's QPN travels in the EE context field
            if r.local_eecn != 0 { format!(" eecn={:#08x}", r.local_eecn) } else { String::new() },
            r.starting_psn,
            r.responder_resources,
            r.initiator_depth,
            r.rnr_retry_count,
            if r.srq { " srq" } else { "" }
        ),
        CmMsg::Rtu { local_comm_id, remote_comm_id, .. }
        | CmMsg::Drep { local_comm_id, remote_comm_id, .. } => {
            format!("comm={local_comm_id:#010x} remote={remote_comm_id:#010x}")
        }
        CmMsg::Dreq { local_comm_id, remote_comm_id, remote_qpn, .. } => {
            format!("comm={local_comm_id:#010x} remote={remote_comm_id:#010x} qpn={remote_qpn:#08x}")
        }
        CmMsg::Rej { local_comm_id, remote_comm_id, msg_rejected, reason, .. } => format!(
            "comm={local_comm_id:#010x} remote={remote_comm_id:#010x} rejects={} reason={reason} ({})",
            which(*msg_rejected),
            rej_reason_name(*reason)
        ),
        CmMsg::Mra { local_comm_id, remote_comm_id, msg_mraed, service_timeout, .. } => format!(
            "comm={local_comm_id:#010x} remote={remote_comm_id:#010x} for={} service_timeout={service_timeout}",
            which(*msg_mraed)
        ),
        CmMsg::SidrReq { request_id, service_id, private_data, .. } => {
            let mut s = format!("req={request_id:#010x} svc={}", service(*service_id));
            if let Some(h) = ip_header(*service_id, &private_data[..]) {
                s.push_str(&format!(" {}:{} -> {}", h.src, h.src_port, h.dst));
            }
            s
        }
        CmMsg::SidrRep { request_id, status, qpn, qkey, .. } => {
            format!("req={request_id:#010x} status={status} qpn={qpn:#08x} qkey={qkey:#010x}")
        }
        CmMsg::Other(_) => format!("attr={:#06x} (not decoded)", m.header.attr_id),
    };
    format!("CM {name} {body}")
}

/// The ladder arrow's label: `CM REQ qpn=0x23`, `CM REJ consumer reject`...
pub fn label(m: &CmMad) -> String {
    let name = attr_name(m.header.attr_id);
    match &m.msg {
        CmMsg::Req(q) => format!("CM REQ qpn={:#x} svc={}", q.local_qpn, service(q.service_id)),
        CmMsg::Rep(r) if r.local_eecn != 0 && r.local_qpn == 0 => {
            format!("CM REP XRC target qpn={:#x}", r.local_eecn)
        }
        CmMsg::Rep(r) => format!("CM REP qpn={:#x}", r.local_qpn),
        CmMsg::Rej { reason, .. } => format!("CM REJ {}", rej_reason_name(*reason)),
        CmMsg::SidrRep { qpn, .. } => format!("CM SIDR_REP qpn={qpn:#x}"),
        _ => format!("CM {name}"),
    }
}

/// One plain-English sentence on what the message does in the connection.
pub fn explain(m: &CmMad) -> String {
    match &m.msg {
        CmMsg::Req(q) => {
            let who = match ip_header(q.service_id, &q.private_data) {
                Some(h) => format!(
                    "rdma_cm at {}:{} asks {} to connect to {}",
                    h.src,
                    h.src_port,
                    h.dst,
                    service(q.service_id)
                ),
                None => format!("a connection request for service {}", service(q.service_id)),
            };
            let xrc = q.transport_service_type == 3 && q.extended_transport_type == 1;
            let who = if xrc {
                format!(
                    "{who}, an XRC connection (transport service type 3, extended type 1): this \
                     QP is an XRC initiator and the passive side answers with an XRC target QP"
                )
            } else {
                who
            };
            format!(
                "CM REQ (connection request, IBA 12.6.5): {who}; its QP is {:#x} (the passive side \
                 is to send from PSN {:#x}, which this QP expects first), \
                 it takes {} incoming and issues {} outstanding RDMA READs/atomics, path MTU {}, \
                 transport retries {} and RNR retries {}{}; the passive side answers with a REP \
                 (accept) or REJ, or an MRA if it needs more time",
                q.local_qpn,
                q.starting_psn,
                q.responder_resources,
                q.initiator_depth,
                mtu_bytes(q.path_mtu).map_or_else(|| format!("code {}", q.path_mtu), |b| b.to_string()),
                q.retry_count,
                q.rnr_retry_count,
                if q.rnr_retry_count == 7 { " (7 = forever)" } else { "" }
            )
        }
        CmMsg::Rep(r) if r.local_qpn == 0 && r.local_eecn != 0 => format!(
            "CM REP (connection accepted) of an XRC connection: the passive side's XRC target QP \
             is {:#x} (in the local EE context field, with SRQ set: the target receives into the \
             XRC SRQ each request's XRCETH names; the active side is to send from PSN {:#x}); \
             both sides now move their QPs to RTR, and the active side confirms with an RTU",
            r.local_eecn, r.starting_psn
        ),
        CmMsg::Rep(r) => format!(
            "CM REP (connection accepted): the passive side's QP is {:#x} (the active side is \
             to send from PSN {:#x}, which this QP expects first); \
             both sides now move their QPs to RTR, and the active side confirms with an RTU",
            r.local_qpn, r.starting_psn
        ),
        CmMsg::Rtu { .. } => "CM RTU (ready to use): the active side confirms the REP; the \
                              connection is established (RDMA_CM_EVENT_ESTABLISHED on both sides)"
            .into(),
        CmMsg::Dreq { remote_qpn, .. } => format!(
            "CM DREQ (disconnect request) for the connection of QP {remote_qpn:#x}: the sender \
             moves its QP to the error state; the peer answers with a DREP"
        ),
        CmMsg::Drep { .. } => "CM DREP (disconnect reply): the connection is closed; both sides \
                               wait out the TimeWait period before the QP numbers are reused"
            .into(),
        CmMsg::Rej { msg_rejected, reason, .. } => format!(
            "CM REJ: the {} is rejected, reason {reason} ({}); rdma_cm reports \
             RDMA_CM_EVENT_REJECTED (or UNREACHABLE)",
            which(*msg_rejected),
            rej_reason_name(*reason)
        ),
        CmMsg::Mra { msg_mraed, service_timeout, .. } => format!(
            "CM MRA: the {} arrived and the answer will take longer (service timeout {}, i.e. \
             4.096 µs x 2^{}); the sender stops retrying it meanwhile",
            which(*msg_mraed),
            service_timeout,
            service_timeout
        ),
        CmMsg::SidrReq { service_id, .. } => format!(
            "CM SIDR_REQ: asks which UD QP (and Q_Key) serves {} (rdma_resolve_route on a UDP port \
             space id, then the SIDR exchange)",
            service(*service_id)
        ),
        CmMsg::SidrRep { status, qpn, qkey, .. } => format!(
            "CM SIDR_REP: status {status}{}, UD QP {qpn:#x} with Q_Key {qkey:#x}",
            if *status == 0 { " (valid)" } else { "" }
        ),
        CmMsg::Other(_) => format!(
            "CM {} (attribute {:#06x}): not decoded (LAP/APR are not used on RoCE)",
            attr_name(m.header.attr_id),
            m.header.attr_id
        ),
    }
}

/// The `cm` object of a JSON record.
pub fn json(m: &CmMad) -> Value {
    let h = &m.header;
    let mut v = json!({
        "attr": attr_name(h.attr_id),
        "attr_id": h.attr_id,
        "tid": h.tid,
        "class_version": h.class_version,
        "method": h.method,
        "status": h.status,
    });
    let o = v.as_object_mut().expect("object");
    let mut put = |k: &str, x: Value| {
        o.insert(k.into(), x);
    };
    match &m.msg {
        CmMsg::Req(q) => {
            put("local_comm_id", json!(q.local_comm_id));
            put("service_id", json!(q.service_id));
            put("service", json!(service(q.service_id)));
            put("local_ca_guid", json!(q.local_ca_guid));
            put("local_qpn", json!(q.local_qpn));
            put("starting_psn", json!(q.starting_psn));
            put("responder_resources", json!(q.responder_resources));
            put("initiator_depth", json!(q.initiator_depth));
            put("local_cm_response_timeout", json!(q.local_cm_response_timeout));
            put("remote_cm_response_timeout", json!(q.remote_cm_response_timeout));
            put("transport_service_type", json!(q.transport_service_type));
            put("extended_transport_type", json!(q.extended_transport_type));
            put("retry_count", json!(q.retry_count));
            put("rnr_retry_count", json!(q.rnr_retry_count));
            put("max_cm_retries", json!(q.max_cm_retries));
            put("path_mtu", json!(q.path_mtu));
            put("srq", json!(q.srq));
            put("partition_key", json!(q.partition_key));
            put("primary_local_gid", json!(gid_text(&q.primary.local_gid)));
            put("primary_remote_gid", json!(gid_text(&q.primary.remote_gid)));
            put("primary_flow_label", json!(q.primary.flow_label));
            put("primary_hop_limit", json!(q.primary.hop_limit));
            put("primary_traffic_class", json!(q.primary.traffic_class));
            put("primary_local_ack_timeout", json!(q.primary.local_ack_timeout));
            if let Some(ip) = ip_header(q.service_id, &q.private_data) {
                put("ip", ip_json(&ip));
            }
        }
        CmMsg::Rep(r) => {
            put("local_comm_id", json!(r.local_comm_id));
            put("remote_comm_id", json!(r.remote_comm_id));
            put("local_qpn", json!(r.local_qpn));
            put("local_eecn", json!(r.local_eecn));
            put("starting_psn", json!(r.starting_psn));
            put("responder_resources", json!(r.responder_resources));
            put("initiator_depth", json!(r.initiator_depth));
            put("target_ack_delay", json!(r.target_ack_delay));
            put("rnr_retry_count", json!(r.rnr_retry_count));
            put("srq", json!(r.srq));
            put("local_ca_guid", json!(r.local_ca_guid));
        }
        CmMsg::Rtu { local_comm_id, remote_comm_id, .. }
        | CmMsg::Drep { local_comm_id, remote_comm_id, .. } => {
            put("local_comm_id", json!(local_comm_id));
            put("remote_comm_id", json!(remote_comm_id));
        }
        CmMsg::Dreq { local_comm_id, remote_comm_id, remote_qpn, .. } => {
            put("local_comm_id", json!(local_comm_id));
            put("remote_comm_id", json!(remote_comm_id));
            put("remote_qpn", json!(remote_qpn));
        }
        CmMsg::Rej { local_comm_id, remote_comm_id, msg_rejected, reason, .. } => {
            put("local_comm_id", json!(local_comm_id));
            put("remote_comm_id", json!(remote_comm_id));
            put("msg_rejected", json!(which(*msg_rejected)));
            put("reason", json!(reason));
            put("reason_name", json!(rej_reason_name(*reason)));
        }
        CmMsg::Mra { local_comm_id, remote_comm_id, msg_mraed, service_timeout, .. } => {
            put("local_comm_id", json!(local_comm_id));
            put("remote_comm_id", json!(remote_comm_id));
            put("msg_mraed", json!(which(*msg_mraed)));
            put("service_timeout", json!(service_timeout));
        }
        CmMsg::SidrReq { request_id, partition_key, service_id, private_data } => {
            put("request_id", json!(request_id));
            put("partition_key", json!(partition_key));
            put("service_id", json!(service_id));
            put("service", json!(service(*service_id)));
            if let Some(ip) = ip_header(*service_id, &private_data[..]) {
                put("ip", ip_json(&ip));
            }
        }
        CmMsg::SidrRep { request_id, status, qpn, service_id, qkey, .. } => {
            put("request_id", json!(request_id));
            put("status", json!(status));
            put("qpn", json!(qpn));
            put("service_id", json!(service_id));
            put("qkey", json!(qkey));
        }
        CmMsg::Other(_) => {}
    }
    v
}

fn ip_json(h: &IpCmHeader) -> Value {
    let a = |x: IpAddr| x.to_string();
    json!({ "ip_version": h.ip_version, "src": a(h.src), "src_port": h.src_port, "dst": a(h.dst) })
}
