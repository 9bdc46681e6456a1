//! The CM's REQ and REP against rping's through kernel rxe
//! (packet/tests/data/rping.pcap): given the values rping used, the MADs
//! are byte for byte the kernel's, but for the comm IDs and TIDs that
//! each side draws at random.

use roce_cm::*;
use roce_packet::frame::parse_frame;
use roce_packet::mad::{ip_service_id, port_space, CmMad, CmMsg, IpCmHeader, GSI_QKEY, MAD_LEN};
use roce_packet::{Opcode, RoceRepr};
use roce_pcap::read_capture;
use std::net::Ipv4Addr;
use std::time::Duration;

/// The CM MADs of rping.pcap, in order.
fn rping_mads() -> Vec<Vec<u8>> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../packet/tests/data/rping.pcap");
    let frames = read_capture(&std::fs::read(path).expect("rping.pcap")).expect("pcap");
    let mut out = Vec::new();
    for f in frames {
        let Ok(Some(ds)) = parse_frame(f.linktype, &f.data, 4791) else { continue };
        for d in ds {
            let Ok((r, payload)) = RoceRepr::parse_bytes(&d.udp_payload) else { continue };
            if r.bth.opcode == Opcode::UD_SEND_ONLY && r.bth.dest_qp.value() == 1 {
                assert_eq!(r.deth.expect("DETH").qkey.value(), GSI_QKEY);
                out.push(payload[..MAD_LEN].to_vec());
            }
        }
    }
    assert_eq!(out.len(), 5, "REQ REP RTU DREQ DREP");
    out
}

/// Overwrite a MAD's TID and the comm IDs at the attribute's offsets 0
/// and 4 (the REQ has only the first).
fn with_ids(mad: &[u8], tid: u64, local: u32, remote: Option<u32>) -> Vec<u8> {
    let mut m = mad.to_vec();
    m[8..16].copy_from_slice(&tid.to_be_bytes());
    m[24..28].copy_from_slice(&local.to_be_bytes());
    if let Some(r) = remote {
        m[28..32].copy_from_slice(&r.to_be_bytes());
    }
    m
}

#[test]
fn req_and_rep_match_rpings_through_rxe_field_for_field() {
    let rping = rping_mads();
    // the kernel's TIDs: one per connection end (its agent's high half and
    // its comm ID): the active side's REQ, RTU and DREQ share one, the REP
    // and the DREP answer with the TID of what they answer
    let tid = |m: &[u8]| CmMad::parse(m).unwrap().header.tid;
    assert!(rping.iter().all(|m| tid(m) == tid(&rping[0])));
    let CmMsg::Req(q) = CmMad::parse(&rping[0]).unwrap().msg else { panic!("REQ") };
    let client = ipv4_gid(Ipv4Addr::new(192, 168, 77, 3));
    let server = ipv4_gid(Ipv4Addr::new(192, 168, 77, 2));
    // the defaults are rping's: response timeouts 20, 15 CM retries
    let mut a = Cm::new(CmConfig::new(client, 0x5054_00ff_fe77_0003, 7));
    let mut b = Cm::new(CmConfig::new(server, 0x5054_00ff_fe77_0002, 8));
    let service = ip_service_id(port_space::TCP, 7174);
    b.listen(service).unwrap();

    // rping's connection parameters; its private data is librdmacm's IP
    // header alone (and zeros)
    let ip = IpCmHeader::parse(&q.private_data).unwrap();
    let mut req = ConnectRequest::new(service, PeerAddr::new(server), 0x23, 0x31e278);
    req.path.flow_label = 0x7fac7; // the kernel hashes the UDP ports into it
    req.private_data = ip_private_data(&ip, &[]);
    assert_eq!(req.private_data.len(), 36);
    let now = Duration::ZERO;
    let ca = a.connect(now, req).unwrap();
    let t = a.poll_transmit().expect("REQ");
    assert_eq!(t.to, PeerAddr { gid: server, qpn: 1 });
    let ours = CmMad::parse(&t.mad).unwrap();
    let CmMsg::Req(oq) = &ours.msg else { panic!("REQ") };
    // the fields the task names, one by one
    assert_eq!((oq.responder_resources, oq.initiator_depth), (1, 1));
    assert_eq!((oq.remote_cm_response_timeout, oq.local_cm_response_timeout), (20, 20));
    assert_eq!((oq.retry_count, oq.rnr_retry_count, oq.max_cm_retries), (7, 7, 15));
    assert_eq!((oq.path_mtu, oq.transport_service_type), (3, 0));
    assert_eq!(oq.service_id, 0x0000_0000_0106_1c06);
    assert_eq!(&oq.private_data[..36], &q.private_data[..36]);
    assert_eq!(oq.local_comm_id, a.conn_info(ca).unwrap().local_comm_id);
    // and every other byte: only the comm ID and the TID differ
    assert_ne!(oq.local_comm_id, q.local_comm_id);
    let expected = with_ids(&rping[0], ours.header.tid, oq.local_comm_id, None);
    assert_eq!(&t.mad[..], &expected[..], "REQ differs from rping's beyond the IDs");

    // the passive side's REP with rping's values (QPN 0x22, PSN 0xb3de0c)
    b.handle_mad(now, PeerAddr::new(client), &t.mad);
    let Some(CmEvent::ConnectRequest { conn: cb, req: got, .. }) = b.poll_event() else {
        panic!("ConnectRequest")
    };
    assert_eq!((got.remote_qpn, got.starting_psn, got.path_mtu), (0x23, 0x31e278, 3));
    assert_eq!(got.path.local_ack_timeout, 19);
    assert_eq!(IpCmHeader::parse(&got.private_data).unwrap(), ip);
    b.accept(now, cb, AcceptParams::new(0x22, 0xb3de0c)).unwrap();
    let t = b.poll_transmit().expect("REP");
    let rep = CmMad::parse(&t.mad).unwrap();
    let CmMsg::Rep(op) = &rep.msg else { panic!("REP") };
    assert_eq!(rep.header.tid, ours.header.tid, "the REP answers with the REQ's TID");
    assert_eq!(op.remote_comm_id, oq.local_comm_id);
    let expected = with_ids(&rping[1], rep.header.tid, op.local_comm_id, Some(op.remote_comm_id));
    assert_eq!(&t.mad[..], &expected[..], "REP differs from rping's beyond the IDs");

    // the RTU and the disconnection too
    a.handle_mad(now, PeerAddr::new(server), &t.mad);
    assert!(matches!(a.poll_event(), Some(CmEvent::ConnectResponse { .. })));
    a.complete_connect(ca).unwrap();
    let rtu = a.poll_transmit().expect("RTU");
    let expected = with_ids(&rping[2], ours.header.tid, oq.local_comm_id, Some(op.local_comm_id));
    assert_eq!(&rtu.mad[..], &expected[..], "RTU");
    b.handle_mad(now, PeerAddr::new(client), &rtu.mad);
    a.disconnect(now, ca, &[]).unwrap();
    let dreq = a.poll_transmit().expect("DREQ");
    let dtid = CmMad::parse(&dreq.mad).unwrap().header.tid;
    assert_eq!(dtid, ours.header.tid, "the active side's DREQ reuses its REQ's TID");
    let expected = with_ids(&rping[3], dtid, oq.local_comm_id, Some(op.local_comm_id));
    assert_eq!(&dreq.mad[..], &expected[..], "DREQ");
    b.handle_mad(now, PeerAddr::new(client), &dreq.mad);
    let drep = b.poll_transmit().expect("DREP");
    let expected = with_ids(&rping[4], dtid, op.local_comm_id, Some(oq.local_comm_id));
    assert_eq!(&drep.mad[..], &expected[..], "DREP");
}
