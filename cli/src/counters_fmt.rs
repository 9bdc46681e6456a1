//! Counter tables in rxe's layout, shared by `roce stats`, `roce demo --stats`
//! and `roce perf --stats`.
//!
//! rxe exposes its counters as files under
//! `/sys/class/infiniband/<dev>/ports/1/hw_counters/`; `grep .` over them
//! prints `name:value` lines. The table here prints the same names as
//! `name: value`, one per line, rxe's counters first (in rxe's order), then
//! the emulator's own under a `# not in rxe` line, zeros included, so the
//! two can be compared line by line.

use roce_verbs_api::Counters;
use std::io::{self, Write};

/// rxe's hw_counters, in the order rxe declares them (`rxe_hw_counters.c`).
pub const RXE_COUNTERS: [&str; 15] = [
    "sent_pkts",
    "rcvd_pkts",
    "duplicate_request",
    "out_of_seq_request",
    "rcvd_rnr_err",
    "send_rnr_err",
    "rcvd_seq_err",
    "ack_deferred",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
    "completer_retry_err",
    "send_err",
    "link_downed",
    "rdma_sends",
    "rdma_recvs",
];

/// Whether `name` is one of rxe's hw_counters.
pub fn is_rxe(name: &str) -> bool {
    RXE_COUNTERS.contains(&name)
}

/// Print `name`'s counters: a `name:` header, then every counter as
/// `counter: value` (rxe's first, then `# not in rxe` and ours).
pub fn print_counters(name: &str, c: &Counters, out: &mut dyn Write) -> io::Result<()> {
    let pairs: Vec<(String, u64)> = c.iter().map(|(n, v)| (n.to_string(), v)).collect();
    print_pairs(name, &pairs, None, out)
}

/// Like [`print_counters`] over `(name, value)` pairs; with `prev`, a
/// changed value is followed by `(+delta)`.
pub fn print_pairs(
    name: &str,
    pairs: &[(String, u64)],
    prev: Option<&[(String, u64)]>,
    out: &mut dyn Write,
) -> io::Result<()> {
    writeln!(out, "{name}:")?;
    let line = |out: &mut dyn Write, n: &str, v: u64| -> io::Result<()> {
        let old = prev.and_then(|p| p.iter().find(|(k, _)| k == n)).map(|(_, v)| *v);
        match old {
            Some(o) if o != v => writeln!(out, "{n}: {v} ({:+})", i128::from(v) - i128::from(o)),
            _ => writeln!(out, "{n}: {v}"),
        }
    };
    for rxe in RXE_COUNTERS {
        if let Some((_, v)) = pairs.iter().find(|(k, _)| k == rxe) {
            line(out, rxe, *v)?;
        }
    }
    let ours: Vec<&(String, u64)> = pairs.iter().filter(|(k, _)| !is_rxe(k)).collect();
    if !ours.is_empty() {
        writeln!(out, "# not in rxe")?;
        for (n, v) in ours {
            line(out, n, *v)?;
        }
    }
    Ok(())
}

/// All counters as a JSON object (`{"sent_pkts": 12, ...}`, zeros included).
pub fn counters_json(c: &Counters) -> serde_json::Value {
    serde_json::Value::Object(c.iter().map(|(n, v)| (n.to_string(), v.into())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxe_counters_first_zeros_included() {
        let c = Counters { sent_pkts: 5, rdma_recvs: 2, icrc_err: 1, ..Counters::default() };
        let mut v = Vec::new();
        print_counters("roce0", &c, &mut v).unwrap();
        let t = String::from_utf8(v).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "roce0:");
        assert_eq!(lines[1], "sent_pkts: 5");
        assert_eq!(lines[13], "link_downed: 0");
        assert_eq!(lines[15], "rdma_recvs: 2");
        assert_eq!(lines[16], "# not in rxe");
        assert!(lines.contains(&"icrc_err: 1"), "{t}");
        assert_eq!(lines.len(), 2 + c.iter().count());
        // every rxe name is a real counter
        for n in RXE_COUNTERS {
            assert!(c.get(n).is_some(), "{n}");
        }
        let j = counters_json(&c);
        assert_eq!((j["sent_pkts"].as_u64(), j["link_downed"].as_u64()), (Some(5), Some(0)));
    }

    #[test]
    fn deltas() {
        let p = vec![("sent_pkts".to_string(), 3), ("icrc_err".to_string(), 1)];
        let n = vec![("sent_pkts".to_string(), 10), ("icrc_err".to_string(), 1)];
        let mut v = Vec::new();
        print_pairs("d", &n, Some(&p), &mut v).unwrap();
        assert_eq!(
            String::from_utf8(v).unwrap(),
            "d:\nsent_pkts: 10 (+7)\n# not in rxe\nicrc_err: 1\n"
        );
    }
}
