//! The congestion lessons of `roce demo --scenario NAME` (docs/course/15):
//! RC flows between `Hca`s on a switched fabric in virtual time
//! (`roce_sim::switched`, `roce_sim::incast`), told as a transcript, with a
//! plot (SVG) of each flow's rate and the bottleneck queue, and the pcap
//! of what the hosts received (PAUSE frames included).

use core::fmt::Write as _;
use core::time::Duration;
use roce_emulator::CongestionConfig;
use roce_sim::incast::{self, Flow, FlowsConfig, FlowsReport, Topology};

/// The congestion lessons: name and one line (listed by `roce demo --help`).
pub const FABRIC_SCENARIOS: &[(&str, &str)] = &[
    ("incast", "8 senders into 1 through a switch at 40 Gb/s, DCQCN on then off (PFC alone): fair shares and a short queue, or pauses"),
    ("dcqcn-converge", "one flow alone at 40 Gb/s, a second joins at 5 ms: CNPs cut the first, both converge to 20 Gb/s"),
    ("pfc-storm", "a receiver stops draining for 8 ms on a leaf/spine fabric: PAUSEs spread hop by hop and stop an innocent flow"),
    ("hol-blocking", "a sender of an incast also sends to an idle host: PFC pauses its link and the innocent flow with it; DCQCN does not"),
];

/// A congestion lesson's outcome.
pub struct FabricLesson {
    /// What happened, for people.
    pub transcript: String,
    /// Each flow's rate and the bottleneck queue over time.
    pub svg: String,
    /// What the hosts received (with `pcap`).
    pub pcap: Vec<u8>,
    /// It behaved as the lesson says.
    pub ok: bool,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Run lesson `name` with `seed`; `None` for an unknown name.
pub fn run_fabric_lesson(name: &str, seed: u64, pcap: bool) -> Option<FabricLesson> {
    let mut out = String::new();
    let (main, ok) = match name {
        "incast" => incast_lesson(seed, &mut out),
        "dcqcn-converge" => converge_lesson(seed, &mut out),
        "pfc-storm" => storm_lesson(seed, pcap, &mut out),
        "hol-blocking" => hol_lesson(seed, &mut out),
        _ => return None,
    };
    let _ = writeln!(
        out,
        "\n{}",
        if ok { "behaved as described" } else { "DID NOT behave as described" }
    );
    let svg = plot(name, &main);
    Some(FabricLesson { transcript: out, svg, pcap: main.pcap.clone(), ok })
}

fn setup(out: &mut String, cfg: &FlowsConfig, what: &str) {
    let sw = &cfg.switch;
    let _ = writeln!(out, "{what}");
    let _ = writeln!(
        out,
        "links: {} Gb/s, {} µs; RC WRITEs of {} KiB, {} in flight per flow, MTU 4096",
        cfg.gbps,
        cfg.delay.as_micros(),
        cfg.msg / 1024,
        cfg.outstanding
    );
    if let Some(r) = sw.red {
        let _ = write!(
            out,
            "switch: RED/ECN Kmin {} KB, Kmax {} KB, Pmax {} %",
            r.kmin / 1000,
            r.kmax / 1000,
            r.pmax * 100.0
        );
    }
    match sw.pfc {
        Some(p) => {
            let _ = writeln!(
                out,
                "; PFC XOFF {} KB, XON {} KB per ingress port",
                p.xoff / 1000,
                p.xon / 1000
            );
        }
        None => {
            let _ = writeln!(out, "; no PFC: {} KB per port, tail drop", sw.buffer / 1000);
        }
    }
}

/// Every `every` of the samples: time, each flow's rate, the queue.
fn timeline(out: &mut String, r: &FlowsReport, every: Duration, until: Duration) {
    let width = (r.keys.len() * 6).saturating_sub(1).max(24);
    let _ = writeln!(out, "\n  time   {:<width$}   queue", "rate of each flow (Gb/s)");
    let mut t = every;
    while t <= until {
        let rates: Vec<String> =
            // (+ 0.0: no "-0.0")
            (0..r.keys.len()).map(|i| format!("{:5.1}", r.rate_between(i, t - every, t) + 0.0)).collect();
        let q = r
            .samples
            .iter()
            .rev()
            .find(|s| s.at <= roce_emulator::Instant::ZERO + t)
            .and_then(|s| s.queues.iter().map(|x| x.1).max())
            .unwrap_or(0);
        let _ = writeln!(
            out,
            "  {:3} ms {:<width$}  {:5} KB",
            t.as_millis(),
            rates.join(" "),
            q / 1000
        );
        t += every;
    }
}

fn summary_rows(out: &mut String, cols: &[(&str, &FlowsReport)]) {
    let heads: Vec<String> = cols.iter().map(|(h, _)| format!("{h:>22}")).collect();
    let _ = writeln!(out, "  {:<26}{}", "", heads.join(""));
    let mut row = |name: &str, f: &dyn Fn(&FlowsReport) -> String| {
        let cells: Vec<String> = cols.iter().map(|(_, r)| format!("{:>22}", f(r))).collect();
        let _ = writeln!(out, "  {name:<26}{}", cells.join(""));
    };
    row("flow rates (Gb/s)", &|r| {
        let lo = r.rates.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = r.rates.iter().cloned().fold(0.0, f64::max);
        format!("{lo:.2}-{hi:.2}")
    });
    row("Jain's index", &|r| format!("{:.4}", r.jain));
    row("bottleneck utilisation", &|r| format!("{:.3}", r.utilisation));
    row("queue below Kmax", &|r| format!("{:.0} %", r.below_kmax * 100.0));
    row("deepest queue", &|r| format!("{} KB", r.bottleneck.max_queue / 1000));
    row("frames dropped", &|r| r.ports.iter().map(|p| p.1.dropped).sum::<u64>().to_string());
    row("PAUSE frames (senders)", &|r| {
        r.nics.iter().map(|n| n.pauses_received).sum::<u64>().to_string()
    });
    row("time paused (mean sender)", &|r| {
        let s: Vec<_> =
            r.nics.iter().filter(|n| n.tx_frames > 0 && n.pauses_received > 0).collect();
        let t: Duration = s.iter().map(|n| n.paused).sum();
        format!("{:.2} ms", t.as_secs_f64() * 1e3 / s.len().max(1) as f64)
    });
    row("CNPs", &|r| r.cnps_sent.to_string());
    row("retransmissions", &|r| r.retries.to_string());
}

fn incast_lesson(seed: u64, out: &mut String) -> (FlowsReport, bool) {
    let cfg = FlowsConfig { duration: ms(40), seed, ..FlowsConfig::incast(8) };
    setup(out, &cfg, "incast: 8 senders -> 1 receiver through one switch; the port to the receiver is the bottleneck (fair share 5 Gb/s)");
    let _ = writeln!(out, "devices: DCQCN with the paper's parameters (g 1/256, 55 µs timers, CNPs at most every 50 µs); run 40 ms twice: DCQCN on, then off");
    let on = incast::run(&cfg);
    let off = incast::run(&FlowsConfig { congestion: CongestionConfig::off(), ..cfg.clone() });
    timeline(out, &on, ms(4), ms(40));
    let _ = writeln!(out, "\nover the second half (20-40 ms):");
    summary_rows(out, &[("DCQCN on", &on), ("off (PFC alone)", &off)]);
    let _ = writeln!(
        out,
        "\nWith DCQCN the switch marks (ECN CE) instead of filling up; the receiver answers \
         with CNPs; each sender's reaction point cuts its rate and climbs back, so the rates \
         settle near 5 Gb/s with the queue mostly under Kmax. Without it the queue fills to \
         PFC's threshold and the switch pauses every sender most of the time: still fair and \
         lossless here, but the pauses stop everything else on those links (hol-blocking, pfc-storm)."
    );
    let ok = on.jain >= 0.98 && on.utilisation >= 0.9 && off.below_kmax < on.below_kmax;
    (on, ok)
}

fn converge_lesson(seed: u64, out: &mut String) -> (FlowsReport, bool) {
    let mut cfg = FlowsConfig { duration: ms(30), seed, ..FlowsConfig::incast(2) };
    cfg.starts = vec![(1, ms(5))];
    cfg.sample_every = Duration::from_micros(100);
    setup(
        out,
        &cfg,
        "dcqcn-converge: flow 1 sends alone; flow 2 joins at 5 ms; both to one receiver",
    );
    let r = incast::run(&cfg);
    timeline(out, &r, ms(1), ms(30));
    // converged: both within 10 % of 20 Gb/s for every 1 ms window after
    let within = |t: u64| (0..2).all(|i| (r.rate_between(i, ms(t - 1), ms(t)) - 20.0).abs() <= 2.0);
    let at = (6..=30).find(|&t| (t..=30).all(within));
    match at {
        Some(t) => {
            let _ = writeln!(
                out,
                "\nconverged {} ms after flow 2 joined: both within 10 % of 20 Gb/s from {t} ms on",
                t - 5
            );
        }
        None => {
            let _ = writeln!(out, "\ndid not converge within 25 ms");
        }
    }
    let _ = writeln!(
        out,
        "CNPs: {} sent, {} handled; frames dropped: {}",
        r.cnps_sent, r.cnps, r.bottleneck.dropped
    );
    let _ = writeln!(
        out,
        "\nFlow 1 runs at line rate until flow 2's arrival builds the queue past Kmin: marks, \
         CNPs, and alpha near 1 make the first cuts deep; then both climb back by fast \
         recovery and additive increase until the marks stop them, near the fair share."
    );
    (r, at.is_some())
}

fn storm_lesson(seed: u64, pcap: bool, out: &mut String) -> (FlowsReport, bool) {
    let mut cfg = FlowsConfig { duration: ms(16), seed, ..FlowsConfig::incast(1) };
    cfg.topology = Topology::LeafSpine { leaves: 2, spines: 1, hosts_per_leaf: 2 };
    cfg.flows = vec![Flow { from: 2, to: 0 }, Flow { from: 3, to: 1 }];
    cfg.congestion = CongestionConfig::off();
    cfg.stalls = vec![(0, ms(4), ms(12))];
    cfg.outstanding = 32;
    setup(out, &cfg, "pfc-storm: leaf 0 has hosts 0 and 1, leaf 1 hosts 2 and 3, one spine; flows 2 -> 0 and 3 -> 1 cross the spine; host 0 stops draining from 4 to 12 ms (DCQCN off)");
    let r = match pcap {
        true => incast::run_with_pcap(&cfg),
        false => incast::run(&cfg),
    };
    timeline(out, &r, ms(2), ms(16));
    let sent = |sw: usize| {
        r.ports.iter().filter(|(at, _)| at.0 == sw).map(|(_, s)| s.pauses_sent).sum::<u64>()
    };
    let _ = writeln!(
        out,
        "\nPAUSE frames sent: host 0 {}, leaf 0 {}, spine {}, leaf 1 {}; received by host 3 (innocent): {}",
        r.nics[0].pauses_sent,
        sent(0),
        sent(2),
        sent(1),
        r.nics[3].pauses_received
    );
    let (before, during) = (r.rate_between(1, ms(1), ms(4)), r.rate_between(1, ms(6), ms(12)));
    let dropped: u64 = r.ports.iter().map(|p| p.1.dropped).sum();
    let _ = writeln!(
        out,
        "flow 3 -> 1 (innocent): {before:.1} Gb/s before, {:.1} during; frames dropped: {dropped}",
        during + 0.0
    );
    let _ = writeln!(
        out,
        "\nHost 0's NIC pauses leaf 0; leaf 0's queue to host 0 fills with what the spine \
         sends, so leaf 0 pauses the spine; the spine, holding both flows, pauses leaf 1; \
         leaf 1 pauses hosts 2 and 3. Flow 3 -> 1 shares no congested port, yet stops: a \
         pause storm. Nothing is lost, and everything resumes when host 0 drains."
    );
    (r.clone(), during < 0.1 * before && before > 15.0)
}

fn hol_lesson(seed: u64, out: &mut String) -> (FlowsReport, bool) {
    let mut cfg = FlowsConfig { duration: ms(20), seed, ..FlowsConfig::incast(5) };
    cfg.flows = (2..=5).map(|from| Flow { from, to: 0 }).collect();
    cfg.flows.push(Flow { from: 2, to: 1 });
    setup(out, &cfg, "hol-blocking: hosts 2-5 send to host 0 (incast); host 2 also sends to host 1, which nothing else uses (flow 5)");
    let off = incast::run(&FlowsConfig { congestion: CongestionConfig::off(), ..cfg.clone() });
    let on = incast::run(&cfg);
    let _ = writeln!(out, "\nPFC alone (DCQCN off):");
    timeline(out, &off, ms(4), ms(20));
    let _ = writeln!(out, "\nover the second half (10-20 ms):");
    summary_rows(out, &[("DCQCN on", &on), ("off (PFC alone)", &off)]);
    let _ = writeln!(
        out,
        "  {:<26}{:>22.1}{:>22.1}",
        "flow 5 (2 -> 1) Gb/s", on.rates[4], off.rates[4]
    );
    let _ = writeln!(
        out,
        "\nPFC pauses a whole link (one priority), not a flow: when host 2's share of the \
         incast fills the switch's ingress, host 2 is paused, and its flow to the idle host 1 \
         waits behind it (head-of-line blocking). With DCQCN host 2's QP to host 0 is slowed \
         instead, and the other QP uses the rest of the link."
    );
    let ok = off.rates[4] < 15.0 && on.rates[4] > 25.0;
    (off, ok)
}

/// Each flow's rate (top) and the deepest switch queue (bottom) over time.
fn plot(title: &str, r: &FlowsReport) -> String {
    let (w, h, pad) = (760.0, 200.0, 50.0);
    let t_end = r.samples.last().map_or(1.0, |s| s.at.as_nanos() as f64 / 1e6).max(1e-3);
    let max_rate =
        r.samples.iter().flat_map(|s| s.flows.iter().map(|f| f.1 / 1e9)).fold(1.0, f64::max).ceil();
    let max_q =
        r.samples.iter().flat_map(|s| s.queues.iter().map(|q| q.1)).max().unwrap_or(1).max(1)
            as f64;
    let x = |t: f64| pad + t / t_end * (w - 2.0 * pad);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="monospace" font-size="11">"#,
        w,
        2.0 * h + 3.0 * pad
    );
    let _ =
        writeln!(s, r#"<text x="{pad}" y="20" font-size="14">roce demo --scenario {title}</text>"#);
    let colours =
        ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
    let top = pad;
    let bottom = 2.0 * pad + h;
    for (y0, label) in [
        (top, format!("rate per flow, Gb/s (max {max_rate})")),
        (bottom, format!("deepest switch queue, KB (max {})", max_q as usize / 1000)),
    ] {
        let _ = writeln!(
            s,
            r##"<rect x="{pad}" y="{y0}" width="{}" height="{h}" fill="none" stroke="#999"/><text x="{pad}" y="{}">{label}</text>"##,
            w - 2.0 * pad,
            y0 - 4.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}">{t_end:.0} ms</text>"#,
        w - pad - 30.0,
        bottom + h + 14.0
    );
    for (i, key) in r.keys.iter().enumerate() {
        let pts: Vec<String> = r
            .samples
            .iter()
            .map(|smp| {
                let v = smp.flows.iter().find(|f| &f.0 == key).map_or(0.0, |f| f.1 / 1e9);
                format!(
                    "{:.1},{:.1}",
                    x(smp.at.as_nanos() as f64 / 1e6),
                    top + h - v / max_rate * h
                )
            })
            .collect();
        let c = colours[i % colours.len()];
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1" points="{}"/>"#,
            pts.join(" ")
        );
    }
    let pts: Vec<String> = r
        .samples
        .iter()
        .map(|smp| {
            let q = smp.queues.iter().map(|q| q.1).max().unwrap_or(0) as f64;
            format!("{:.1},{:.1}", x(smp.at.as_nanos() as f64 / 1e6), bottom + h - q / max_q * h)
        })
        .collect();
    let _ = writeln!(
        s,
        r##"<polyline fill="none" stroke="#333" stroke-width="1" points="{}"/>"##,
        pts.join(" ")
    );
    s.push_str("</svg>\n");
    s
}
