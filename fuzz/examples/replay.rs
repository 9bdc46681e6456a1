//! Replay inputs through a fuzz harness outside the fuzzer, with Rust's
//! panic message and backtrace: `cargo run -p roce-fuzz --example replay --
//! TARGET FILE...`.
fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((target, files)) = args.split_first() else {
        eprintln!("usage: replay TARGET FILE...   (TARGET: packet | device | verbs | dropin | cm)");
        return std::process::ExitCode::from(2);
    };
    let Some(run) = roce_fuzz::by_name(target) else {
        eprintln!("unknown target {target:?} (packet | device | verbs | dropin | cm)");
        return std::process::ExitCode::from(2);
    };
    for f in files {
        let data = match std::fs::read(f) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{f}: {e}");
                return std::process::ExitCode::from(2);
            }
        };
        run(&data);
        println!("{f}: ok");
    }
    std::process::ExitCode::SUCCESS
}
