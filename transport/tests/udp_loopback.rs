//! Two UDP transports on loopback exchanging RoCE datagrams.

use crate::common;
use common::*;
use roce_packet::frame::verify_icrc;
use roce_transport::RxIcrcPolicy;
use std::net::UdpSocket;
use std::time::Duration;

const T: Duration = Duration::from_secs(5);

fn exchange(
    a_ip: &str,
    b_ip: &str,
    gso: bool,
    gro: bool,
    n: usize,
    sizes: &dyn Fn(usize) -> usize,
) {
    let mut a = bind(a_ip, |c| c.gso = gso);
    let mut b = bind(b_ip, |c| c.gro = gro);
    assert_eq!(a.gso_enabled(), gso);
    assert_eq!(b.gro_enabled(), gro);
    let ep = core_ep(&a, &b);
    let sent: Vec<_> =
        (0..n).map(|i| send_only(&ep, 0x11, i as u32, &pattern(i, sizes(i)))).collect();
    let o = a.send(&sent);
    assert_eq!(o.consumed, n);
    assert!(!o.would_block);
    let got = recv_n(&mut b, n, T);
    assert_eq!(got.len(), n, "{:?} {:?}", a.snapshot(), b.snapshot());
    for (s, g) in sent.iter().zip(&got) {
        // Same BTH..pad bytes; the ICRC was recomputed for the wire header.
        assert_eq!(body(&s.payload), body(&g.payload));
        assert_eq!(g.endpoints.src, a.local_addr().ip());
        assert_eq!(g.endpoints.src_port, a.local_addr().port());
        assert_eq!(g.endpoints.dst, b.local_addr().ip());
        assert_eq!(g.endpoints.dst_port, b.local_addr().port());
        // What the core checks on receive: exact ICRC with the delivered meta.
        assert!(verify_icrc(&g.endpoints, &g.meta, &g.payload));
    }
    let ca = a.snapshot();
    let cb = b.snapshot();
    assert_eq!(ca.dgrams_out, n as u64);
    assert_eq!(ca.bytes_out, sent.iter().map(|d| d.payload.len() as u64).sum::<u64>());
    assert_eq!(ca.icrc_recomputed, n as u64, "source port differs from the core's");
    assert_eq!(ca.send_errors, 0);
    assert_eq!(cb.dgrams_in, n as u64);
    let ids: Vec<u16> = got.iter().map(|g| g.meta.ipv4_id).collect();
    assert_eq!(cb.icrc_ok_exact, n as u64, "{cb:?} {ids:?}");
    assert_eq!(cb.icrc_ok_solved_id + cb.icrc_bad + cb.truncated, 0);
    if gso {
        assert!(ca.gso_sends >= 1, "{ca:?}");
        // Runs of equal sizes go out as GSO; odd sizes as single datagrams.
        let equal_runs =
            sent.windows(2).filter(|w| w[0].payload.len() == w[1].payload.len()).count();
        assert!(ca.gso_segments as usize >= equal_runs && ca.gso_segments <= n as u64, "{ca:?}");
        assert!(ca.send_syscalls < n as u64);
    } else {
        assert_eq!(ca.gso_sends, 0);
        assert!(ca.send_syscalls <= n.div_ceil(32) as u64 + 1, "{ca:?}");
    }
    if gso && gro {
        assert!(cb.gro_coalesced >= 1, "{cb:?}");
        assert!(cb.recv_syscalls < n as u64);
    }
}

#[test]
fn ipv4_batched_without_gso() {
    exchange("127.1.0.2", "127.1.0.3", false, false, 40, &|i| [0, 1, 64, 1024, 4096][i % 5]);
}

#[test]
fn ipv4_gso_to_gro_receiver() {
    exchange("127.1.1.2", "127.1.1.3", true, true, 40, &|_| 1024);
}

#[test]
fn ipv4_gso_to_plain_receiver_uses_id_prediction() {
    // The kernel segments on receive; segment k carries id k, which the
    // receiver predicts from the previous datagram (exact check, no solving).
    exchange("127.1.2.2", "127.1.2.3", true, false, 40, &|_| 4096);
}

#[test]
fn ipv4_mixed_sizes_with_gso_and_gro() {
    exchange("127.1.3.2", "127.1.3.3", true, true, 50, &|i| if i % 10 < 7 { 1024 } else { 60 + i });
}

#[test]
fn ipv6_two_ports_on_loopback() {
    let mut a = bind("::1", |c| c.local.set_port(0));
    let mut b = bind("::1", |c| c.local.set_port(0));
    assert_ne!(a.local_addr().port(), b.local_addr().port());
    let ep = core_ep(&a, &b);
    let sent: Vec<_> = (0..20).map(|i| send_only(&ep, 7, i, &pattern(i as usize, 512))).collect();
    assert_eq!(a.send(&sent).consumed, 20);
    let got = recv_n(&mut b, 20, T);
    assert_eq!(got.len(), 20);
    for (s, g) in sent.iter().zip(&got) {
        assert_eq!(body(&s.payload), body(&g.payload));
        assert!(verify_icrc(&g.endpoints, &g.meta, &g.payload));
    }
    assert_eq!(b.snapshot().icrc_ok_exact, 20);
    assert_eq!(a.snapshot().dgrams_out, 20);
}

#[test]
fn flipped_bit_is_counted_bad_and_dropped() {
    let mut b = bind("127.1.4.3", |_| {});
    let raw = UdpSocket::bind("127.1.4.2:0").unwrap();
    let ep = roce_packet::UdpEndpoints {
        src: "127.1.4.2".parse().unwrap(),
        dst: b.local_addr().ip(),
        src_port: raw.local_addr().unwrap().port(),
        dst_port: b.local_addr().port(),
    };
    let good = send_only(&ep, 3, 9, &pattern(1, 200));
    let mut bad = good.payload.to_vec();
    bad[100] ^= 0x04;
    raw.send_to(&bad, b.local_addr()).unwrap();
    raw.send_to(&good.payload, b.local_addr()).unwrap();
    let got = recv_n(&mut b, 1, T);
    std::thread::sleep(Duration::from_millis(20));
    let mut more = Vec::new();
    b.recv(&mut more).unwrap();
    assert_eq!(got.len() + more.len(), 1, "only the good datagram is delivered");
    assert_eq!(got[0].payload, good.payload);
    let c = b.snapshot();
    assert_eq!(c.dgrams_in, 2);
    assert_eq!(c.icrc_bad, 1);
    assert_eq!(c.icrc_ok_exact, 1);
}

fn with_id(ep: &roce_packet::UdpEndpoints, id: u16) -> Vec<u8> {
    let d = send_only(ep, 5, 77, &pattern(3, 300));
    let mut p = d.payload.to_vec();
    let meta = roce_packet::IpMeta { ipv4_id: id, ..Default::default() };
    roce_packet::frame::fill_icrc(ep, &meta, &mut p).unwrap();
    p
}

#[test]
fn unknown_nonzero_id_is_solved_or_rejected_by_policy() {
    for (policy, ip) in
        [(RxIcrcPolicy::SolveId, "127.1.5.3"), (RxIcrcPolicy::ExactOnly, "127.1.6.3")]
    {
        let mut b = bind(ip, |c| c.rx_icrc = policy);
        let raw = UdpSocket::bind((ip.replace(".3", ".2").as_str(), 0)).unwrap();
        let ep = roce_packet::UdpEndpoints {
            src: raw.local_addr().unwrap().ip(),
            dst: b.local_addr().ip(),
            src_port: raw.local_addr().unwrap().port(),
            dst_port: b.local_addr().port(),
        };
        // An ICRC computed for identification 0x4d2 (as an rxe peer would send).
        let p = with_id(&ep, 0x4d2);
        raw.send_to(&p, b.local_addr()).unwrap();
        // The next one with id + 1 is predicted: exact.
        let p2 = with_id(&ep, 0x4d3);
        raw.send_to(&p2, b.local_addr()).unwrap();
        let got = recv_n(&mut b, 2, Duration::from_millis(500));
        let c = b.snapshot();
        assert_eq!(c.dgrams_in, 2);
        match policy {
            RxIcrcPolicy::SolveId => {
                assert_eq!(got.len(), 2);
                assert_eq!(got[0].meta.ipv4_id, 0x4d2);
                assert_eq!(got[1].meta.ipv4_id, 0x4d3);
                assert!(verify_icrc(&got[0].endpoints, &got[0].meta, &got[0].payload));
                assert_eq!((c.icrc_ok_solved_id, c.icrc_ok_exact, c.icrc_bad), (1, 1, 0));
            }
            _ => {
                assert!(got.is_empty());
                assert_eq!((c.icrc_ok_solved_id, c.icrc_ok_exact, c.icrc_bad), (0, 0, 2));
            }
        }
    }
}

#[test]
fn policy_off_delivers_unchecked() {
    let mut b = bind("127.1.7.3", |c| c.rx_icrc = RxIcrcPolicy::Off);
    let raw = UdpSocket::bind("127.1.7.2:0").unwrap();
    raw.send_to(&[0u8; 40], b.local_addr()).unwrap();
    let got = recv_n(&mut b, 1, T);
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].payload[..], &[0u8; 40][..]);
    assert_eq!(b.snapshot().icrc_unchecked, 1);
}

#[test]
fn wrong_family_and_oversized_are_send_errors() {
    let mut a = bind("127.1.8.2", |c| c.gso = false);
    let b = bind("127.1.8.3", |_| {});
    let mut ep = core_ep(&a, &b);
    let ok = send_only(&ep, 1, 1, &pattern(0, 16));
    ep.dst = "::1".parse().unwrap();
    let v6 = roce_emulator::Datagram { endpoints: ep, ..ok.clone() };
    let o = a.send(&[v6, ok]);
    assert_eq!(o.consumed, 2);
    let c = a.snapshot();
    assert_eq!(c.send_errors, 1);
    assert_eq!(c.dgrams_out, 1);
}

#[test]
fn unspecified_bind_is_refused() {
    let cfg = roce_transport::UdpConfig::new("0.0.0.0:0".parse().unwrap());
    assert!(matches!(
        roce_transport::UdpTransport::bind(cfg),
        Err(roce_transport::TransportError::Unspecified(_))
    ));
}

#[test]
fn many_devices_on_distinct_loopback_addresses() {
    // Five devices on 127.1.9.2..=6, each sends one datagram to every other.
    let mut ts: Vec<_> = (2..7).map(|i| bind(&format!("127.1.9.{i}"), |_| {})).collect();
    for i in 0..ts.len() {
        let mut out = Vec::new();
        for j in 0..ts.len() {
            if i != j {
                out.push(send_only(&core_ep(&ts[i], &ts[j]), j as u32, i as u32, &pattern(i, 100)));
            }
        }
        assert_eq!(ts[i].send(&out).consumed, 4);
    }
    for (j, t) in ts.iter_mut().enumerate() {
        let got = recv_n(t, 4, T);
        assert_eq!(got.len(), 4, "device {j}");
        let mut srcs: Vec<_> = got.iter().map(|d| d.endpoints.src.to_string()).collect();
        srcs.sort();
        let mut want: Vec<_> =
            (2..7).filter(|&k| k - 2 != j).map(|k| format!("127.1.9.{k}")).collect();
        want.sort();
        assert_eq!(srcs, want);
        assert_eq!(t.snapshot().icrc_ok_exact, 4);
    }
}

/// GRO batches are handed out as slices of the receive buffer (no copy);
/// a buffer is reused only once every datagram of it was dropped, so
/// datagrams kept across later receives keep their bytes.
#[test]
fn large_messages_are_received_without_copy_and_buffers_reused() {
    let mut a = bind("127.1.9.2", |c| c.gso = true);
    let mut b = bind("127.1.9.3", |c| c.gro = true);
    assert!(a.gso_enabled() && b.gro_enabled());
    let ep = core_ep(&a, &b);
    let mut kept = Vec::new();
    let rounds = 12;
    let per = 15;
    for round in 0..rounds {
        let sent: Vec<_> = (0..per)
            .map(|i| {
                send_only(&ep, 0x11, (round * per + i) as u32, &pattern(round * per + i, 4096))
            })
            .collect();
        assert_eq!(a.send(&sent).consumed, per);
        let got = recv_n(&mut b, per, T);
        assert_eq!(got.len(), per);
        for (s, g) in sent.iter().zip(&got) {
            assert_eq!(body(&s.payload), body(&g.payload));
        }
        // keep every third round's datagrams alive, drop the others
        if round % 3 == 0 {
            kept.push((sent, got));
        }
    }
    // the kept datagrams still hold their own bytes
    for (sent, got) in &kept {
        for (s, g) in sent.iter().zip(got) {
            assert_eq!(body(&s.payload), body(&g.payload));
            assert!(verify_icrc(&g.endpoints, &g.meta, &g.payload));
        }
    }
    let cb = b.snapshot();
    assert_eq!(cb.dgrams_in, (rounds * per) as u64);
    assert_eq!(cb.icrc_ok_exact, (rounds * per) as u64, "{cb:?}");
    assert!(cb.gro_coalesced >= 1, "{cb:?}");
    // every datagram of a coalesced batch came without a copy
    assert!(cb.rx_zero_copy >= cb.gro_segments, "{cb:?}");
    // the buffers of every dropped round but the last came back at the next
    // receive (rounds 1, 2, 4, 5, 7, 8, 10: at least one message each)
    assert!(cb.rx_buffers_reused >= 7, "{cb:?}");
}

/// The core computes ICRCs for the socket's own port
/// (`LinkProfile::src_port`): a single datagram then leaves untouched, and
/// in a GSO run only segment k > 0 changes (identification k), from the
/// per-run table of identification bits. Every segment still verifies
/// exactly at the receiver, with and without GRO.
#[test]
fn wire_port_icrcs_need_no_fix_but_the_gso_identification() {
    for (gro, a_ip, b_ip) in
        [(false, "127.1.10.2", "127.1.10.3"), (true, "127.1.11.2", "127.1.11.3")]
    {
        let mut a = bind(a_ip, |c| c.gso = true);
        let mut b = bind(b_ip, |c| c.gro = gro);
        let mut ep = core_ep(&a, &b);
        ep.src_port = a.local_addr().port();
        // a run of 64 equal sizes (one GSO send), then 37, then a single
        let sizes = |i: usize| if i < 101 { 200 } else { 9 };
        let n = 102;
        let sent: Vec<_> =
            (0..n).map(|i| send_only(&ep, 0x12, i as u32, &pattern(i, sizes(i)))).collect();
        let o = a.send(&sent);
        assert_eq!((o.consumed, o.would_block), (n, false));
        let got = recv_n(&mut b, n, T);
        assert_eq!(got.len(), n, "{:?} {:?}", a.snapshot(), b.snapshot());
        for (k, (s, g)) in sent.iter().zip(&got).enumerate() {
            assert_eq!(body(&s.payload), body(&g.payload), "datagram {k}");
            assert!(verify_icrc(&g.endpoints, &g.meta, &g.payload), "datagram {k}");
        }
        // segment k of a run carries identification k
        assert_eq!(got[0].meta.ipv4_id, 0);
        assert_eq!(got[63].meta.ipv4_id, 63);
        assert_eq!(got[64].meta.ipv4_id, 0);
        assert_eq!(got[100].meta.ipv4_id, 36);
        // ICRCs that changed: first segments of the two runs and the single kept theirs
        assert_eq!(&got[0].payload[..], &sent[0].payload[..]);
        assert_eq!(&got[101].payload[..], &sent[101].payload[..]);
        assert_ne!(&got[5].payload[..], &sent[5].payload[..]);
        let (ca, cb) = (a.snapshot(), b.snapshot());
        assert_eq!(ca.gso_sends, 2, "{ca:?}");
        assert_eq!(ca.icrc_recomputed, 63 + 36, "{ca:?}");
        assert_eq!(cb.icrc_ok_exact, n as u64, "{cb:?}");
        assert_eq!(cb.icrc_bad + cb.icrc_ok_solved_id, 0, "{cb:?}");
    }
}

/// `recv_at_most(1)` reads one message with a plain `recvmsg`: a single
/// datagram, or a whole GRO batch (split into its datagrams as `recv` does);
/// what is left stays queued for the next read.
#[test]
fn receive_of_one_message_splits_gro_and_leaves_the_rest() {
    let mut a = bind("127.1.12.2", |c| c.gso = true);
    let mut b = bind("127.1.12.3", |c| c.gro = true);
    let ep = core_ep(&a, &b);
    // a GSO run of 10 equal sizes, then one odd-sized single
    let sent: Vec<_> = (0..11)
        .map(|i| send_only(&ep, 0x13, i as u32, &pattern(i, if i < 10 { 300 } else { 7 })))
        .collect();
    assert_eq!(a.send(&sent).consumed, 11);
    let mut got = Vec::new();
    let end = std::time::Instant::now() + T;
    let mut calls = Vec::new();
    while got.len() < 11 && std::time::Instant::now() < end {
        let k = b.recv_at_most(&mut got, 1).unwrap();
        if k > 0 {
            calls.push((k, got.len()));
        }
    }
    assert_eq!(got.len(), 11, "{:?}", b.snapshot());
    for (s, g) in sent.iter().zip(&got) {
        assert_eq!(body(&s.payload), body(&g.payload));
        assert!(verify_icrc(&g.endpoints, &g.meta, &g.payload));
    }
    // every call returned one message: the GRO batch (10 datagrams), then the single
    assert_eq!(calls, vec![(1, 10), (1, 11)], "{:?}", b.snapshot());
    let cb = b.snapshot();
    assert_eq!((cb.recv_syscalls, cb.gro_coalesced, cb.gro_segments), (2, 1, 10));
}

/// After a read that found the socket empty (a program polling in a loop),
/// the next read starts with one plain `recvmsg` (no header array to
/// allocate) and reads the rest as a batch only when something came: a
/// burst still arrives in one call, every datagram intact.
#[test]
fn a_read_after_an_empty_one_starts_small_and_takes_the_burst() {
    let mut a = bind("127.1.12.4", |c| c.gso = false);
    let mut b = bind("127.1.12.5", |c| c.gro = false);
    let ep = core_ep(&a, &b);
    let mut got = Vec::new();
    assert_eq!(b.recv(&mut got).unwrap(), 0, "nothing sent yet");
    for (round, n) in [(0u32, 5usize), (1, 3)] {
        let sent: Vec<_> = (0..n)
            .map(|i| send_only(&ep, 0x13, round * 100 + i as u32, &pattern(i, 40 + i)))
            .collect();
        assert_eq!(a.send(&sent).consumed, n);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let before = b.snapshot().recv_syscalls;
        got.clear();
        assert_eq!(b.recv(&mut got).unwrap(), n, "round {round}: the burst in one call");
        // one plain receive, then one batch for the rest
        assert_eq!(b.snapshot().recv_syscalls - before, 2, "round {round}");
        for (s, g) in sent.iter().zip(&got) {
            assert_eq!(body(&s.payload), body(&g.payload));
            assert!(verify_icrc(&g.endpoints, &g.meta, &g.payload));
        }
        assert_eq!(b.recv(&mut got).unwrap(), 0, "round {round}: drained");
    }
}

/// No allocation per datagram (issue 41): a batch of three single
/// datagrams (`sendmmsg`, its arrays on the stack), a lone one (`sendto`)
/// and one whose data is in region memory (a gathered `sendmsg`) allocate
/// nothing; receiving them allocates only nix's message headers of
/// a batch read (`recvmmsg`: built per call, four allocations), and nothing
/// per datagram (small ones go into the reused arena). 300 rounds after a warm-up, every byte
/// checked.
#[test]
fn sends_allocate_nothing_and_receives_only_their_read_headers() {
    let mut a = bind("127.1.14.2", |c| c.gso = false);
    let mut b = bind("127.1.14.3", |c| c.gro = false);
    let ep = core_ep(&a, &b);
    let mut lone_ep = ep;
    lone_ep.src_port = a.local_addr().port(); // its ICRC stands: the sendto path
    let batch: Vec<_> = (0..3u32)
        .map(|i| send_only(&ep, 0x21, i, &pattern(i as usize, 100 + i as usize)))
        .collect();
    let lone = [send_only(&lone_ep, 0x21, 3, &pattern(3, 64))];
    // and one whose data stays in region memory (a gathered sendmsg)
    let mem = std::sync::Arc::new(roce_emulator::RegionMem::owned(4096));
    mem.write(0, &pattern(5, 4096)).unwrap();
    let gathered = [send_only_body(&lone_ep, 0x21, 4, &mem, 100, 1502)];
    let mut got = Vec::with_capacity(64);
    let (mut sent_allocs, mut recv_allocs, mut reads) = (0, 0, 0);
    for round in 0..350 {
        let counted = round >= 50; // (the first 50: warm-up)
        let s = allocation_counter::measure(|| {
            assert_eq!(a.send(&batch).consumed, 3);
            assert_eq!(a.send(&lone).consumed, 1);
            assert_eq!(a.send(&gathered).consumed, 1);
        });
        got.clear();
        let before = b.snapshot().recv_syscalls;
        let r = allocation_counter::measure(|| {
            for _ in 0..100_000 {
                if got.len() >= 5 || b.recv(&mut got).is_err() {
                    break;
                }
            }
        });
        assert_eq!(got.len(), 5, "round {round}");
        for (s, g) in batch.iter().chain(&lone).zip(&got) {
            assert_eq!(body(&s.payload), body(&g.payload), "round {round}");
        }
        // (BTH, then the region's 1502 bytes)
        assert_eq!(got[4].payload[12..12 + 1502], pattern(5, 4096)[100..1602], "round {round}");
        assert!(verify_icrc(&got[4].endpoints, &got[4].meta, &got[4].payload));
        if counted {
            sent_allocs += s.count_total;
            recv_allocs += r.count_total;
            reads += b.snapshot().recv_syscalls - before;
        }
    }
    assert_eq!(sent_allocs, 0, "allocations sending 1500 datagrams");
    // nix's headers: four allocations per recvmmsg (the control-message
    // template, the addresses, the control buffers, the headers); the
    // arenas: 16 KiB each, shared by the datagrams copied into them
    assert!(
        recv_allocs <= 4 * reads + 1500 / 8,
        "{recv_allocs} allocations receiving 1500 datagrams in {reads} reads"
    );
}

/// A ping-pong's receiver reads one datagram at a time: after a batch read
/// that returned one message, seven plain `recvmsg`s (nothing allocated)
/// and then a batch again; a burst that comes meanwhile is read within
/// those eight reads' time and then in growing batches, every byte in order.
#[test]
fn one_datagram_at_a_time_is_read_without_batch_headers() {
    let mut a = bind("127.1.14.4", |c| c.gso = false);
    let mut b = bind("127.1.14.5", |c| c.gro = false);
    let ep = core_ep(&a, &b);
    let one = |i: u32| send_only(&ep, 0x22, i, &pattern(i as usize, 80));
    let mut got = Vec::with_capacity(64);
    let mut allocs = 0;
    for i in 0..160u32 {
        let d = [one(i)];
        assert_eq!(a.send(&d).consumed, 1);
        got.clear();
        let r = allocation_counter::measure(|| {
            for _ in 0..100_000 {
                if !got.is_empty() || b.recv_at_most(&mut got, usize::MAX).is_err() {
                    break;
                }
            }
        });
        assert_eq!(got.len(), 1, "datagram {i}");
        assert_eq!(body(&got[0].payload), body(&d[0].payload), "datagram {i}");
        if i >= 16 {
            allocs += r.count_total;
        }
    }
    // 144 reads, one batch of them in eight (four allocations each), and
    // an arena now and then
    assert!(allocs <= 4 * 144 / 8 + 8, "{allocs} allocations in 144 one-datagram reads");
    // a burst now: all of it, in order, within a few calls
    let burst: Vec<_> = (1000..1040).map(one).collect();
    assert_eq!(a.send(&burst).consumed, 40);
    got.clear();
    let mut calls = 0;
    while got.len() < 40 && calls < 100 {
        b.recv(&mut got).unwrap();
        calls += 1;
    }
    assert_eq!(got.len(), 40, "the burst in {calls} calls");
    assert!(calls <= 14, "the burst took {calls} calls");
    for (s, g) in burst.iter().zip(&got) {
        assert_eq!(body(&s.payload), body(&g.payload));
    }
}

/// A batch above what one read can take (its iovecs are a stack array of
/// 32) is clamped at bind, so the engine's "a full batch: read again" test
/// still sees full batches.
#[test]
fn batch_is_clamped_to_what_a_read_takes() {
    let a = bind("127.1.14.6", |c| c.batch = 100);
    assert_eq!(a.config().batch, 32);
    let b = bind("127.1.14.7", |c| c.batch = 0);
    assert_eq!(b.config().batch, 1);
}

/// A lone datagram the kernel refuses (destination port 0: EINVAL) on the
/// `sendto` path is consumed and counted as a send error, not retried.
#[test]
fn lone_datagram_refused_by_sendto_is_a_counted_send_error() {
    let mut a = bind("127.1.13.2", |_| {});
    let b = bind("127.1.13.3", |_| {});
    let mut ep = core_ep(&a, &b);
    ep.src_port = a.local_addr().port(); // ICRC for the socket: the sendto path
    ep.dst_port = 0;
    let d = send_only(&ep, 1, 1, &pattern(0, 16));
    let o = a.send(&[d]);
    assert_eq!((o.consumed, o.would_block), (1, false));
    let c = a.snapshot();
    assert_eq!((c.send_errors, c.dgrams_out, c.send_syscalls, c.icrc_recomputed), (1, 0, 1, 0));
}

/// Small datagrams are copied into a shared arena, not one allocation
/// each: 300 datagrams of 100 bytes take a few arenas while they are kept,
/// and once they are dropped the next ones reuse the same arena's memory
/// (no new arena at all).
#[test]
fn small_datagrams_share_a_reused_receive_arena() {
    let mut a = bind("127.1.9.12", |_| {});
    // (without GRO: coalesced small datagrams are a large message, which is
    // received without a copy)
    let mut b = bind("127.1.9.13", |c| c.gro = false);
    let ep = core_ep(&a, &b);
    let batch = 30;
    let mut kept = Vec::new();
    for round in 0..10 {
        let sent: Vec<_> = (0..batch)
            .map(|i| {
                send_only(&ep, 0x11, (round * batch + i) as u32, &pattern(round * batch + i, 100))
            })
            .collect();
        assert_eq!(a.send(&sent).consumed, batch);
        let got = recv_n(&mut b, batch, T);
        assert_eq!(got.len(), batch);
        for (s, g) in sent.iter().zip(&got) {
            assert_eq!(body(&s.payload), body(&g.payload));
        }
        kept.push((sent, got));
    }
    // every kept datagram still holds its own bytes
    for (sent, got) in &kept {
        for (s, g) in sent.iter().zip(got) {
            assert_eq!(body(&s.payload), body(&g.payload));
            assert!(verify_icrc(&g.endpoints, &g.meta, &g.payload));
        }
    }
    let held = b.snapshot();
    assert_eq!(held.rx_arena_copies, 300, "{held:?}");
    assert_eq!(held.rx_zero_copy, 0, "{held:?}");
    // 300 datagrams of 140 bytes (headers + 100 + ICRC) in 16 KiB arenas
    assert!((2..=5).contains(&held.rx_arenas), "{held:?}");
    drop(kept);
    // one at a time, each dropped once checked (as the engine does: a
    // round hands its datagrams to the core, which copies what it keeps)
    for i in 0..600 {
        let s = send_only(&ep, 0x12, i as u32, &pattern(i, 100));
        assert_eq!(a.send(std::slice::from_ref(&s)).consumed, 1);
        let g = recv_n(&mut b, 1, T);
        assert_eq!(g.len(), 1);
        assert_eq!(body(&s.payload), body(&g[0].payload));
    }
    let after = b.snapshot();
    assert_eq!(after.rx_arena_copies, 900, "{after:?}");
    // 600 datagrams (84 KiB) and at most one new arena: each time the arena
    // fills, every datagram in it is gone and `reserve` takes it back
    assert!(after.rx_arenas <= held.rx_arenas + 1, "{held:?} then {after:?}");
}

/// Datagrams whose payload is in region memory (the core's `RegionBody`)
/// leave byte for byte as their flat form would: a GSO run, a lone one
/// and a flat one in between, with the ICRC fixed for the wire (source
/// port, segment identification). A datagram whose region was revoked
/// (deregistered) since it was built is a counted send error and sends
/// nothing; the datagrams around it still go.
#[test]
fn region_bodies_leave_as_their_flat_form() {
    use roce_emulator::RegionMem;
    use std::sync::Arc;
    for (gso, gro, a_ip, b_ip) in
        [(true, true, "127.1.13.2", "127.1.13.3"), (false, false, "127.1.14.2", "127.1.14.3")]
    {
        let mut a = bind(a_ip, |c| c.gso = gso);
        let mut b = bind(b_ip, |c| c.gro = gro);
        let mut ep = core_ep(&a, &b);
        if gso {
            // as a device sends: ICRCs for the socket's port, so only the
            // GSO identifications change them
            ep.src_port = a.local_addr().port();
        }
        let mem = Arc::new(RegionMem::owned(64 * 1024));
        mem.write(0, &pattern(3, 64 * 1024)).unwrap();
        let gone = Arc::new(RegionMem::owned(4096));
        // 10 equal bodies (one GSO run), a flat one, a lone odd-sized body
        // (pad 2), then one from a revoked region, then a flat one
        let mut sent: Vec<_> = (0..10)
            .map(|i| send_only_body(&ep, 0x13, i, &mem, 1000 + 4096 * i as usize, 4096))
            .collect();
        sent.push(send_only(&ep, 0x13, 10, &pattern(10, 300)));
        sent.push(send_only_body(&ep, 0x13, 11, &mem, 7, 1502));
        sent.push(send_only_body(&ep, 0x13, 12, &gone, 0, 2048));
        sent.push(send_only(&ep, 0x13, 13, &pattern(13, 64)));
        gone.revoke();
        let o = a.send(&sent);
        assert_eq!((o.consumed, o.would_block), (sent.len(), false));
        let expect: Vec<roce_emulator::Datagram> = sent
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 12)
            .map(|(_, d)| d.clone().flatten().expect("region live"))
            .collect();
        assert!(sent[12].clone().flatten().is_none(), "a revoked region has no bytes");
        let got = recv_n(&mut b, expect.len(), T);
        assert_eq!(got.len(), expect.len(), "{:?} {:?}", a.snapshot(), b.snapshot());
        for (k, (s, g)) in expect.iter().zip(&got).enumerate() {
            assert_eq!(body(&s.payload), body(&g.payload), "datagram {k}");
            assert_eq!(&g.payload[..32], &s.payload[..32], "datagram {k}: headers");
            assert!(verify_icrc(&g.endpoints, &g.meta, &g.payload), "datagram {k}");
        }
        // the region's bytes themselves, past the 12-byte BTH
        assert_eq!(&got[0].payload[12..12 + 4096], &pattern(3, 64 * 1024)[1000..1000 + 4096]);
        assert_eq!(&got[11].payload[12..12 + 1502], &pattern(3, 64 * 1024)[7..7 + 1502]);
        let (ca, cb) = (a.snapshot(), b.snapshot());
        assert_eq!(ca.dgrams_out, 13, "{ca:?}");
        assert_eq!(ca.region_bodies_out, 11, "{ca:?}");
        assert_eq!(ca.region_bytes_out, 10 * 4096 + 1502, "{ca:?}");
        assert_eq!(ca.send_errors, 1, "{ca:?}");
        assert_eq!(
            ca.bytes_out,
            expect.iter().map(|d| d.payload.len() as u64).sum::<u64>(),
            "{ca:?}"
        );
        if gso {
            assert_eq!(ca.gso_sends, 1, "{ca:?}");
            assert_eq!(ca.gso_segments, 10, "{ca:?}");
            assert_eq!(ca.icrc_recomputed, 9, "segments 1..=9: {ca:?}");
        } else {
            assert_eq!(ca.gso_sends, 0, "{ca:?}");
            assert!(ca.icrc_recomputed >= 12, "each for the port: {ca:?}");
        }
        assert_eq!(cb.icrc_ok_exact, 13, "{cb:?}");
        assert_eq!(cb.icrc_bad, 0, "{cb:?}");
    }
}

#[test]
fn multicast_group_reaches_every_joined_device_the_sender_included() {
    // (a group of this test's own: sockets of other suites joined to
    // another group never see these datagrams)
    let group: std::net::IpAddr = "239.123.0.1".parse().unwrap();
    let mut a = bind("127.0.123.2", |_| {});
    let mut b = bind("127.0.123.3", |_| {});
    let mut c = bind("127.0.123.4", |_| {});
    a.join_group(group).expect("join a");
    b.join_group(group).expect("join b");
    assert_eq!(b.groups(), vec![group]);
    assert!(b.group_fd().is_some());
    b.join_group(group).expect("a second join is a no-op");
    assert_eq!(b.groups(), vec![group]);
    let mut ep = core_ep(&a, &b);
    ep.dst = group;
    ep.dst_port = 4791;
    let data = pattern(7, 64);
    let d = send_only(&ep, 0xFF_FFFF, 9, &data);
    assert_eq!(a.send(std::slice::from_ref(&d)).consumed, 1);
    for t in [&mut a, &mut b] {
        let got = recv_n(t, 1, T);
        assert_eq!(got.len(), 1, "{:?}", t.snapshot());
        assert_eq!(body(&got[0].payload), body(&d.payload));
        assert_eq!((got[0].endpoints.src, got[0].endpoints.dst), (ep.src, group));
        assert_eq!(got[0].endpoints.dst_port, 4791);
        // the ICRC holds for the group as the destination address
        assert!(verify_icrc(&got[0].endpoints, &got[0].meta, &got[0].payload));
        assert_eq!(t.snapshot().mcast_in, 1);
    }
    // c did not join: nothing
    assert!(recv_n(&mut c, 1, Duration::from_millis(100)).is_empty());
    // b leaves: the next datagram reaches a only
    b.leave_group(group).expect("leave");
    assert!(b.leave_group(group).is_err(), "not joined any more");
    assert_eq!(a.send(std::slice::from_ref(&d)).consumed, 1);
    assert_eq!(recv_n(&mut a, 1, T).len(), 1);
    assert!(recv_n(&mut b, 1, Duration::from_millis(100)).is_empty());
    // not a group address
    assert!(c.join_group("10.1.2.3".parse().unwrap()).is_err());
}

/// Receive `n` datagrams on `s` (IP_RECVTOS / IPV6_RECVTCLASS set) and
/// return the TOS / traffic class byte each arrived with.
fn tos_of_received(s: &UdpSocket, n: usize) -> Vec<u8> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
    use std::io::IoSliceMut;
    use std::os::fd::AsRawFd;
    s.set_read_timeout(Some(T)).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2048];
    let mut cmsg = nix::cmsg_space!(i32, i32);
    while out.len() < n {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let m =
            recvmsg::<SockaddrStorage>(s.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty())
                .expect("a datagram within the timeout");
        let tos = m.cmsgs().unwrap().find_map(|c| match c {
            ControlMessageOwned::Ipv4Tos(t) => Some(t),
            ControlMessageOwned::Ipv6TClass(t) => Some(t as u8),
            _ => None,
        });
        out.push(tos.expect("a TOS control message"));
    }
    out
}

/// SEND ONLYs of 64 bytes along `ep`, PSN `i` with TOS byte `toses[i]`
/// (the ICRC masks the byte: the one computed for 0 holds).
fn with_tos(ep: &roce_packet::UdpEndpoints, toses: &[u8]) -> Vec<roce_emulator::Datagram> {
    toses
        .iter()
        .enumerate()
        .map(|(i, &tos)| {
            let mut d = send_only(ep, 0x11, i as u32, &pattern(i, 64));
            d.meta.tos = tos;
            d
        })
        .collect()
}

/// Datagrams of equal size (GSO candidates) with these TOS bytes, from `a`
/// to `dst`: each leaves with its own byte, and a GSO run never mixes two.
fn tos_on_the_wire(a: &mut roce_transport::UdpTransport, rx: &UdpSocket, toses: &[u8]) {
    let ep = roce_packet::UdpEndpoints {
        src: a.local_addr().ip(),
        dst: rx.local_addr().unwrap().ip(),
        src_port: 0xC123,
        dst_port: rx.local_addr().unwrap().port(),
    };
    let o = a.send(&with_tos(&ep, toses));
    assert_eq!((o.consumed, o.would_block), (toses.len(), false));
    assert_eq!(tos_of_received(rx, toses.len()), toses);
    let c = a.snapshot();
    assert_eq!((c.dgrams_out, c.send_errors), (toses.len() as u64, 0), "{c:?}");
}

#[test]
fn ipv4_tos_of_each_datagram_is_on_the_wire() {
    use nix::sys::socket::{setsockopt, sockopt};
    let mut a = bind("127.1.31.2", |c| c.gso = true);
    let rx = UdpSocket::bind("127.1.31.3:0").unwrap();
    setsockopt(&rx, sockopt::IpRecvTos, &true).unwrap();
    tos_on_the_wire(&mut a, &rx, &[0, 0, 0x60, 0x60, 0x60, 0xb8, 0, 0, 0x2e]);
    // 0 (2, GSO), 0x60 (3, GSO), 0xb8, 0 (2, GSO), 0x2e: five sends
    if a.gso_enabled() {
        assert_eq!(a.snapshot().send_syscalls, 5, "{:?}", a.snapshot());
    }
}

#[test]
fn ipv6_traffic_class_of_each_datagram_is_on_the_wire() {
    use nix::sys::socket::{setsockopt, sockopt};
    // (an ephemeral port: [::1]:4791 is the IPv6 device's of other tests)
    let mut cfg = roce_transport::UdpConfig::new("[::1]:0".parse().unwrap());
    cfg.gso = false;
    let mut a = roce_transport::UdpTransport::bind(cfg).unwrap();
    let rx = UdpSocket::bind("[::1]:0").unwrap();
    setsockopt(&rx, sockopt::Ipv6RecvTClass, &true).unwrap();
    tos_on_the_wire(&mut a, &rx, &[0x60, 0, 0xfe, 0xfe]);
}

/// Each received datagram carries the TOS / traffic class byte it came
/// with (DSCP and ECN; `IP_RECVTOS` / `IPV6_RECVTCLASS`) into its meta:
/// GSO runs of one byte each from one transport, received with GRO by
/// another, IPv4 and IPv6; every ICRC still checks (the byte is masked).
#[test]
fn received_datagrams_carry_their_tos() {
    for (a_ip, b_ip) in [("127.1.32.2", "127.1.32.3"), ("::1", "::1")] {
        let mut a = bind(a_ip, |c| {
            c.gso = true;
            if a_ip == "::1" {
                c.local.set_port(0);
            }
        });
        let mut b = bind(b_ip, |c| {
            c.gro = true;
            if b_ip == "::1" {
                c.local.set_port(0);
            }
        });
        let ep = core_ep(&a, &b);
        let toses = [0u8, 0, 0x60, 0x60, 0x60, 0xb8, 0x02, 0x03, 0];
        assert_eq!(a.send(&with_tos(&ep, &toses)).consumed, toses.len());
        let got = recv_n(&mut b, toses.len(), T);
        let by_psn: Vec<(u32, u8)> = got
            .iter()
            .map(|d| {
                (u32::from_be_bytes([0, d.payload[9], d.payload[10], d.payload[11]]), d.meta.tos)
            })
            .collect();
        let want: Vec<(u32, u8)> = toses.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
        assert_eq!(by_psn, want, "{a_ip}");
        let c = b.snapshot();
        assert_eq!(c.icrc_bad, 0, "{c:?}");
    }
}

/// `ROCE_EMU_FAULTS`'s `ce=1` on a real socket, as a switch's RED/ECN
/// queue would mark: received ECN-capable datagrams (ECT(0), ECT(1), CE)
/// reach the core CE, a non-ECT one does not (`dir=rx`); with `dir=tx` the
/// datagrams leave with CE in their TOS byte on the wire. DSCP bits stay,
/// every ICRC still checks (the byte is masked).
#[test]
fn fault_injector_marks_ecn_capable_datagrams_ce() {
    use nix::sys::socket::{setsockopt, sockopt};
    use roce_transport::faults::{FaultSpec, FaultyTransport};
    use roce_transport::socket::Link;
    let toses = [0x6au8, 0x69, 0x6b, 0x68, 0x02, 0x00];
    let marked = [0x6bu8, 0x6b, 0x6b, 0x68, 0x03, 0x00];
    let ce = |c: &roce_transport::faults::FaultCounters| {
        c.pairs().into_iter().find(|(k, _)| *k == "ce_marked").map(|(_, v)| v)
    };
    // receive side
    let mut a = bind("127.1.33.2", |_| {});
    let b = bind("127.1.33.3", |_| {});
    let ep = core_ep(&a, &b);
    let mut fb = FaultyTransport::new(b, FaultSpec::parse("ce=1").unwrap(), "b");
    assert_eq!(a.send(&with_tos(&ep, &toses)).consumed, toses.len());
    let mut got = Vec::new();
    let end = std::time::Instant::now() + T;
    while got.len() < toses.len() && std::time::Instant::now() < end {
        if fb.recv(&mut got).unwrap() == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let mut by_psn: Vec<(u32, u8)> = got
        .iter()
        .map(|d| (u32::from_be_bytes([0, d.payload[9], d.payload[10], d.payload[11]]), d.meta.tos))
        .collect();
    by_psn.sort_unstable();
    let want: Vec<(u32, u8)> = marked.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
    assert_eq!(by_psn, want);
    assert!(got.iter().all(|d| verify_icrc(&d.endpoints, &d.meta, &d.payload)));
    assert_eq!(ce(&fb.fault_counters()), Some(4));
    // send side: CE on the wire
    let a = bind("127.1.34.2", |c| c.gso = false);
    let mut fa = FaultyTransport::new(a, FaultSpec::parse("ce=1,dir=tx").unwrap(), "a");
    let rx = UdpSocket::bind("127.1.34.3:0").unwrap();
    setsockopt(&rx, sockopt::IpRecvTos, &true).unwrap();
    let ep = roce_packet::UdpEndpoints {
        src: fa.local_addr().ip(),
        dst: rx.local_addr().unwrap().ip(),
        src_port: 0xC123,
        dst_port: rx.local_addr().unwrap().port(),
    };
    let o = fa.send(&with_tos(&ep, &toses));
    assert_eq!((o.consumed, o.would_block), (toses.len(), false));
    assert_eq!(tos_of_received(&rx, toses.len()), marked);
    assert_eq!(ce(&fa.fault_counters()), Some(4));
}

/// Datagrams the kernel drops for a full receive buffer are counted where
/// they happen (`rx_socket_drops`, from `SO_RXQ_OVFL`, which the kernel
/// reports with the next datagram it queues): 300 datagrams into a receive
/// buffer of a few KiB that nobody reads, then reads and one more datagram;
/// what was dropped plus what arrived is what was sent.
#[test]
fn a_full_receive_buffer_counts_its_drops() {
    let mut b = bind("127.0.122.2", |c| {
        c.gro = false;
        c.socket_buffer = Some(4096);
    });
    let to = b.local_addr();
    let tx = std::net::UdpSocket::bind("127.0.122.3:0").unwrap();
    let sent = 300u64;
    for i in 0..sent {
        tx.send_to(&[i as u8; 1000], to).unwrap();
    }
    let mut got = Vec::new();
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < end {
        if b.recv(&mut got).expect("recv") == 0 && b.snapshot().dgrams_in > 0 {
            break;
        }
    }
    // (not RoCE: the ICRC check drops them, after the drop count was read)
    let c = b.snapshot();
    assert!(c.dgrams_in > 0 && c.dgrams_in < sent, "a few KiB hold a few datagrams: {c:?}");
    // the count comes with a datagram queued after the drops
    tx.send_to(&[7u8; 1000], to).unwrap();
    let before = c.dgrams_in;
    while b.snapshot().dgrams_in == before && std::time::Instant::now() < end {
        let _ = b.recv(&mut got).expect("recv");
    }
    let c = b.snapshot();
    assert_eq!(c.dgrams_in, before + 1, "{c:?}");
    assert_eq!(c.rx_socket_drops + c.dgrams_in, sent + 1, "{c:?}");
}

/// The host's credits (issue 41: no datagram lost between the devices of
/// one host): a receiver with a 64 KiB buffer that reads only now and
/// then, and a sender of 3000 datagrams of 1000 bytes (45 times what the
/// buffer holds). Without credits the kernel drops most of them
/// (`a_full_receive_buffer_counts_its_drops`); with them the sender waits
/// (`credit_waits`), nothing is dropped, every datagram arrives in order,
/// and no credit is left out at the end. Then a receiver that stops
/// reading: after the watchdog the sender goes on (counted), and a
/// receiver that leaves frees its slot (its senders are not held).
#[test]
fn credits_hold_a_sender_instead_of_overflowing_a_receiver() {
    use roce_transport::credits::{CreditTable, WATCHDOG};
    let dir = std::env::temp_dir().join(format!("roce-credits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let table = CreditTable::open(&dir.join("credits")).unwrap();
    let small = |c: &mut roce_transport::UdpConfig| {
        c.gro = false;
        c.gso = false;
        c.socket_buffer = Some(64 * 1024);
    };
    let mut a = bind("127.0.123.3", small);
    let mut b = bind("127.0.123.2", small);
    assert!(a.use_credits(&table, None) && b.use_credits(&table, None));
    let ep = core_ep(&a, &b);
    let n = 3000usize;
    let sent: Vec<_> = (0..n).map(|i| send_only(&ep, 0x11, i as u32, &pattern(i, 1000))).collect();
    let (mut next, mut got) = (0usize, Vec::new());
    let end = std::time::Instant::now() + Duration::from_secs(20);
    let mut rounds = 0u32;
    while got.len() < n && std::time::Instant::now() < end {
        if next < n {
            let o = a.send(&sent[next..]);
            assert!(!o.would_block, "the socket never refuses: the credits hold first");
            next += o.consumed;
        }
        rounds += 1;
        // the receiver reads one round in four
        if rounds.is_multiple_of(4) {
            let _ = b.recv(&mut got).unwrap();
        }
    }
    let (ca, cb) = (a.snapshot(), b.snapshot());
    assert_eq!(got.len(), n, "{ca:?} {cb:?}");
    let psns: Vec<u32> = got
        .iter()
        .map(|d| u32::from_be_bytes([0, d.payload[9], d.payload[10], d.payload[11]]))
        .collect();
    assert_eq!(psns, (0..n as u32).collect::<Vec<_>>(), "every datagram, in order");
    assert_eq!(cb.rx_socket_drops, 0, "{cb:?}");
    assert!(ca.credit_waits > 0, "the sender waited: {ca:?}");
    assert_eq!(ca.credit_watchdog, 0, "{ca:?}");
    // (an empty read gives back whatever is still counted)
    let _ = b.recv(&mut got).unwrap();
    assert_eq!(b.credits_outstanding(), Some(0));
    // a receiver that reads nothing: the sender waits, then after the
    // watchdog sends anyway (the receiver's kernel may drop those)
    let t0 = std::time::Instant::now();
    let mut left = 200usize;
    while left > 0 && t0.elapsed() < Duration::from_secs(5) {
        let o = a.send(&sent[..left]);
        left -= o.consumed;
    }
    assert_eq!(left, 0);
    assert!(t0.elapsed() >= WATCHDOG, "the sender waited for the watchdog");
    assert!(a.snapshot().credit_watchdog > 0, "{:?}", a.snapshot());
    // a receiver that is gone holds nobody
    drop(b);
    let before = a.snapshot().credit_waits;
    let o = a.send(&sent[..200]);
    assert_eq!(o.consumed, 200);
    assert_eq!(a.snapshot().credit_waits, before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each link declares what it does for the core (`Link::profile`): the
/// UDP link checks received ICRCs (not with the `Off` policy), sends from
/// its socket's port and gathers region bodies; behind the fault injector
/// the core checks every ICRC (a fault may corrupt after the link's check).
#[test]
fn links_declare_their_profile() {
    use roce_emulator::{LinkProfile, RxIcrc};
    use roce_transport::faults::{FaultSpec, FaultyTransport};
    use roce_transport::socket::Link;
    let t = bind("127.0.124.2", |_| {});
    let want = LinkProfile {
        rx_icrc: RxIcrc::Link,
        src_port: Some(t.local_addr().port()),
        region_bodies: true,
        ..LinkProfile::default()
    };
    assert_eq!(t.profile(), want);
    let off = bind("127.0.124.3", |c| c.rx_icrc = RxIcrcPolicy::Off);
    assert_eq!(off.profile().rx_icrc, RxIcrc::Core);
    let f = FaultyTransport::new(t, FaultSpec::parse("seed=1,loss=0.1").unwrap(), "f");
    assert_eq!(f.profile(), LinkProfile { rx_icrc: RxIcrc::Core, ..want });
    assert!(!f.profile().ack_coalescing && f.profile().ack_delay.is_none(), "the host's to set");
}

/// A GSO send carries datagrams of one destination QPN top byte only: the
/// kernel steers the whole send by its first segment, and a shared
/// device's members are steered by that byte (before, a run for two
/// members of one device reached the first, which forwarded the rest late
/// and out of order: go-back-N, and 1 s stalls under Open MPI).
#[test]
fn a_gso_run_never_mixes_destination_qpn_top_bytes() {
    let (mut a, mut b, ep) = bind_pair("127.0.125");
    if !a.gso_enabled() {
        eprintln!("SKIPPED: no UDP GSO on this kernel");
        return;
    }
    // four to QPN 0x01_0011, four to 0x02_0011, then alternating
    let qpns = [1, 1, 1, 1, 2, 2, 2, 2, 1, 2, 1, 2].map(|b: u32| b << 16 | 0x11);
    let sent: Vec<_> = qpns
        .iter()
        .enumerate()
        .map(|(i, &q)| send_only(&ep, q, i as u32, &pattern(i, 512)))
        .collect();
    let o = a.send(&sent);
    assert_eq!(o.consumed, sent.len());
    let c = a.snapshot();
    assert_eq!((c.gso_sends, c.gso_segments), (2, 8), "{c:?}");
    let got = recv_n(&mut b, sent.len(), T);
    let bytes: Vec<u8> = got.iter().map(|d| d.payload[5]).collect();
    assert_eq!(bytes, qpns.map(|q| (q >> 16) as u8).to_vec(), "in order, each with its QPN");
}
