//! `roce decode` on arbitrary files (issue 15): every output mode over every
//! input of the packet fuzz target's committed corpus (pcap, pcapng, cut
//! and mangled captures, raw bytes) and a few files made here. The parser
//! itself is fuzzed (`fuzz/`, target `packet`); this covers what the
//! command does with what the parser returns: never a panic (exit status
//! 101), always 0 (decoded), 1 (decoded, bad packets found with
//! `--bad-only`) or 2 (not a capture, or cut short).
//!
//! `ROCE_DECODE_CORPUS=DIR` runs the same over another directory (e.g. an
//! AFL queue: `fuzz/out/packet/default/queue`).

use std::path::{Path, PathBuf};
use std::process::Command;

const MODES: &[&[&str]] = &[
    &[],
    &["--explain"],
    &["--ladder"],
    &["--json"],
    &["--stats"],
    &["--bad-only"],
    &["--ladder", "--svg", "SVG"],
];

fn decode_all(files: &[PathBuf], scratch: &Path) -> usize {
    let mut runs = 0;
    for f in files {
        for mode in MODES {
            let args: Vec<String> = mode
                .iter()
                .map(|a| {
                    if *a == "SVG" {
                        scratch.join("out.svg").display().to_string()
                    } else {
                        a.to_string()
                    }
                })
                .collect();
            let out = Command::new(env!("CARGO_BIN_EXE_roce"))
                .arg("decode")
                .args(&args)
                .arg(f)
                .output()
                .expect("run roce decode");
            let code = out.status.code();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                matches!(code, Some(0..=2)) && !err.contains("panicked"),
                "roce decode {} {}: exit {code:?}\n{err}",
                args.join(" "),
                f.display()
            );
            runs += 1;
        }
    }
    runs
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

#[test]
fn every_mode_on_arbitrary_files_never_panics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let scratch =
        std::env::temp_dir().join(format!("roce-decode-arbitrary-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let mut files = files_in(&root.join("fuzz/corpus/packet"));
    assert!(files.len() >= 10, "{} corpus files", files.len());
    // and a few made here: empty, a pcap header alone, a real capture cut
    // in the middle of a record, a real capture with bytes flipped
    let real = std::fs::read(root.join("packet/tests/data/rnr.pcap")).expect("rnr.pcap");
    let made: [(&str, Vec<u8>); 4] = [
        ("empty", Vec::new()),
        ("header-only", real[..24].to_vec()),
        ("cut", real[..real.len() / 2 + 3].to_vec()),
        ("flipped", {
            let mut v = real.clone();
            for i in (40..v.len()).step_by(7) {
                v[i] ^= 0x5a;
            }
            v
        }),
    ];
    for (name, bytes) in &made {
        let p = scratch.join(name);
        std::fs::write(&p, bytes).expect("write input");
        files.push(p);
    }
    if let Some(extra) = std::env::var_os("ROCE_DECODE_CORPUS") {
        files.extend(files_in(Path::new(&extra)));
    }
    let runs = decode_all(&files, &scratch);
    assert_eq!(runs, files.len() * MODES.len());
    let _ = std::fs::remove_dir_all(&scratch);
}
