//! Two UDP devices on loopback (127.0.1.2 and 127.0.1.3, port 4791): SEND
//! and RDMA WRITE through the verbs, waited for synchronously and from a
//! tokio current-thread runtime.

use crate::common;
use common::{connect_qps, rc_qp, two_contexts};
use roce_host::DeviceConfig;
use roce_verbs_api::gid::gid_to_addr;
use roce_verbs_api::{
    AccessFlags, Budget, ConnectOptions, RecvWr, SendWr, WcOpcode, WcStatus, WrOpcode,
};
use std::time::Duration;

struct Pair {
    a: roce_verbs_api::Context,
    b: roce_verbs_api::Context,
}

fn pair(x: &str, y: &str) -> Pair {
    let a = DeviceConfig::udp("ua", x.parse().unwrap()).open().expect("open a").open();
    let b = DeviceConfig::udp("ub", y.parse().unwrap()).open().expect("open b").open();
    Pair { a, b }
}

#[test]
fn udp_send_and_write_sync_and_async() {
    let p = pair("127.0.1.2", "127.0.1.3");
    assert_eq!(p.a.driver_name(), "udp");
    assert_eq!(p.a.query_gid(1).unwrap().to_string(), "::ffff:127.0.1.2");
    assert_eq!(p.a.query_gid(0).unwrap().to_string(), "fe80::7fff:fe00:102");
    assert_eq!(p.a.query_gid(2), None);
    assert_eq!(gid_to_addr(p.b.query_gid(1).unwrap()), p.b.addr());
    let (pa, pb) = (p.a.alloc_pd().unwrap(), p.b.alloc_pd().unwrap());
    let (ca, cb) = (p.a.create_cq(64).unwrap(), p.b.create_cq(64).unwrap());
    let qa = pa.qp_builder(&ca, &ca).build().unwrap();
    let qb = pb.qp_builder(&cb, &cb).build().unwrap();
    let opts = ConnectOptions::default();
    let (ea, eb) = (qa.endpoint(0x1234), qb.endpoint(0xabcdef));
    qa.connect(&ea, &eb, &opts).unwrap();
    qb.connect(&eb, &ea, &opts).unwrap();
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let src = pa.reg_mr(8192, acc).unwrap();
    let dst = pb.reg_mr(8192, acc).unwrap();
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    src.write(0, &data).unwrap();

    // synchronous: SEND of 5000 bytes (5 packets at MTU 1024)
    qb.post_recv(RecvWr::new(1, dst.addr(), 8192, dst.lkey())).unwrap();
    qa.post_send(SendWr::new(2, WrOpcode::Send).sge(src.addr(), 5000, src.lkey())).unwrap();
    let budget = Budget { events: 0, wall: Duration::from_secs(10) };
    let wb = cb.poll_blocking(1, budget).unwrap();
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].status, wb[0].opcode, wb[0].byte_len),
        (WcStatus::Success, WcOpcode::Recv, 5000)
    );
    let wa = ca.poll_blocking(1, budget).unwrap();
    assert_eq!((wa[0].wr_id, wa[0].status), (2, WcStatus::Success));
    let mut got = vec![0u8; 5000];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    // The four full packets left straight from the region (the kernel
    // copied them; nothing in user space did); the 904-byte last one was
    // copied into its packet.
    let t = roce_host::transport_counters(&p.a).expect("a UDP device").snapshot();
    assert_eq!((t.region_bodies_out, t.region_bytes_out), (4, 4096), "{t:?}");

    // async: RDMA WRITE, the completion awaited on a current-thread runtime
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        src.write(0, b"written over UDP").unwrap();
        let wr = SendWr::new(3, WrOpcode::RdmaWrite)
            .sge(src.addr(), 16, src.lkey())
            .remote(dst.remote_addr(100), dst.rkey());
        qa.post_send(wr).unwrap();
        let wc = tokio::time::timeout(Duration::from_secs(10), ca.poll_async(1))
            .await
            .expect("completion within 10 s")
            .unwrap();
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode),
            (3, WcStatus::Success, WcOpcode::RdmaWrite)
        );
    });
    let mut w = [0u8; 16];
    dst.read(100, &mut w).unwrap();
    assert_eq!(&w, b"written over UDP");
    let c = p.b.counters();
    assert!(c.rcvd_pkts >= 6, "{c:?}");
}

#[test]
fn async_poll_on_sim_driver() {
    let net = roce_sim::SimNet::new(3);
    let (a, b) = two_contexts(&net, ["s0", "s1"]);
    let ((_pa, _ca, qa), (pb, cb, qb)) = (rc_qp(&a, 8), rc_qp(&b, 8));
    connect_qps(&qa, &qb, 1, 2, &ConnectOptions::default());
    let m = pb.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    qb.post_recv(RecvWr::new(9, m.addr(), 64, m.lkey())).unwrap();
    qa.post_send(SendWr::new(1, WrOpcode::Send).inline(b"hi")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let wc = rt.block_on(cb.poll_async(1)).unwrap();
    assert_eq!((wc[0].wr_id, wc[0].byte_len), (9, 2));
    assert_eq!(&m.to_vec()[..2], b"hi");
}

#[test]
fn open_errors() {
    let mut c = DeviceConfig::udp("bad", "192.0.2.77".parse().unwrap());
    let e = c.open().unwrap_err().to_string();
    assert!(e.starts_with("device bad: cannot bind 192.0.2.77:4791"), "{e}");
    c.transport = roce_host::TransportKind::Sim;
    assert!(c.open().unwrap_err().to_string().contains("SimNet"));
    // raw devices are opened through RawTransport: a missing interface (as
    // root) or the missing capability (otherwise) is reported, not panicked.
    c.transport = roce_host::TransportKind::Raw { ifname: "nosuchif77".into() };
    let e = c.open().unwrap_err().to_string();
    assert!(
        e.starts_with("device bad: ")
            && (e.contains("no network interface named \"nosuchif77\"")
                || e.contains("needs CAP_NET_RAW")),
        "{e}"
    );
}
