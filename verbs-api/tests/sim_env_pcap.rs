//! `ROCE_EMU_PCAP` makes a SimNet record what it delivers. This test sets
//! the variable, so it lives alone in its own test binary (its own process):
//! no other test can observe the variable while it is set.

mod common;
use common::{connect_qps, rc_qp, two_contexts};
use roce_verbs_api::{AccessFlags, ConnectOptions, RecvWr, SendWr, WrOpcode};

#[test]
fn sim_net_records_with_env_pcap() {
    let dir = std::env::temp_dir().join(format!("roce-sim-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("ROCE_EMU_PCAP", &dir);
    let net = roce_sim::SimNet::new(5);
    std::env::remove_var("ROCE_EMU_PCAP");
    let (a, b) = two_contexts(&net, ["s0", "s1"]);
    let ((pa, ca, qa), (pb, cb, qb)) = (rc_qp(&a, 8), rc_qp(&b, 8));
    connect_qps(&qa, &qb, 1, 2, &ConnectOptions::default());
    let m = pb.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    qb.post_recv(RecvWr::new(9, m.addr(), 64, m.lkey())).unwrap();
    qa.post_send(SendWr::new(1, WrOpcode::Send).inline(b"hi")).unwrap();
    assert!(net.run_until_idle(10_000));
    drop((qa, qb, m, ca, cb, pa, pb, a, b));
    drop(net);
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    let ours: Vec<_> = files
        .iter()
        .filter_map(|f| std::fs::read(f).ok())
        .filter(|b| {
            b.len() == 24 + (16 + 14 + 20 + 8 + 12 + 4 + 4) + (16 + 14 + 20 + 8 + 12 + 4 + 4)
        })
        .collect();
    // one SEND_ONLY with 2 bytes (+2 pad) and one ACK, both as Ethernet frames
    assert_eq!(ours.len(), 1, "{files:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
