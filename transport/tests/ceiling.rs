//! The ceiling measurement runs in every mode and reports consistent numbers.

use roce_transport::ceiling::{measure, summarize, CeilingMode};
use std::time::Duration;

#[test]
fn every_mode_moves_data() {
    let src = "127.1.30.2:0".parse().unwrap();
    let dst = "127.1.30.3:0".parse().unwrap();
    let mut runs = Vec::new();
    for mode in CeilingMode::ALL {
        let r = measure(src, dst, mode, 4128, Duration::from_millis(100)).expect("measure");
        assert_eq!(r.mode, mode);
        assert!(r.sent_datagrams > 0 && r.recv_datagrams > 0, "{r:?}");
        assert!(r.recv_datagrams <= r.sent_datagrams);
        assert_eq!(r.recv_bytes, r.recv_datagrams * 4128);
        assert!(r.gbytes_per_sec() > 0.0);
        assert!((0.0..=1.0).contains(&r.loss()));
        if mode == CeilingMode::GsoGro {
            assert!(r.sent_datagrams > r.send_syscalls, "several segments per send");
        }
        runs.push(r);
    }
    let s = summarize(&runs[..1]).unwrap();
    assert_eq!(s.min, s.max);
    assert!(summarize(&[]).is_none());
    assert!(measure(src, dst, CeilingMode::Plain, 0, Duration::from_millis(1)).is_err());
}
