//! The core must stay sans-IO and deterministic: no wall clock, no sleeping,
//! no sockets, no threads and no OS randomness anywhere under emulator/src or
//! packet/src. (Clippy's `disallowed-methods` says the same in clippy.toml;
//! this test enforces it in the ordinary test run.)

use std::path::Path;

const FORBIDDEN: &[&str] = &[
    "Instant::now",
    "SystemTime::now",
    "thread::sleep",
    "thread::spawn",
    "UdpSocket",
    "TcpStream",
    "thread_rng",
    "from_entropy",
    "OsRng",
];

fn scan(dir: &Path, hits: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            scan(&p, hits);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for f in FORBIDDEN {
                    if code.contains(f) {
                        hits.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
                    }
                }
            }
        }
    }
}

#[test]
fn core_reads_no_clock_and_does_no_io() {
    let root = Path::new(crate::CRATE_DIR);
    let mut hits = Vec::new();
    scan(&root.join("src"), &mut hits);
    scan(&root.join("../packet/src"), &mut hits);
    assert!(hits.is_empty(), "sans-IO violations:\n{}", hits.join("\n"));
    // the scan really looked at files
    assert!(root.join("src/io.rs").exists());
}
