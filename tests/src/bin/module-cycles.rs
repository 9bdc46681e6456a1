//! Print the module graph of a source directory and its circles.
//!
//! ```text
//! cargo run -p roce-tests --bin module-cycles -- [--graph] [--docs] [--tests] [DIR...]
//! ```
//!
//! DIR is a crate's `src/` (default `emulator/src`) or a module directory
//! below it. `--graph` prints each module and the modules it uses; `--docs`
//! counts paths in comments (doc links) too; `--tests` counts
//! `#[cfg(test)] mod` blocks too. Exit status 1 when a directory has a
//! circle. `tests/tests/layering.rs` runs the same analysis over every
//! crate of the workspace in `cargo test`.

use roce_tests::layering::{cycles, elementary_cycles, module_graph, GraphOptions};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The crate `src/` directory that `dir` is in (the nearest ancestor
/// named `src`, or `dir` itself).
fn crate_src(dir: &Path) -> PathBuf {
    dir.ancestors().find(|a| a.file_name().is_some_and(|n| n == "src")).unwrap_or(dir).to_path_buf()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "usage: module-cycles [--graph] [--docs] [--tests] [DIR...]\n\n\
             Prints the circles among the modules of DIR (default emulator/src): a\n\
             module is a file x.rs or a directory x/; a use is a crate::x path in code.\n\
             --graph  also print each module and the modules it uses\n\
             --docs   count paths in comments (doc links) too\n\
             --tests  count #[cfg(test)] mod blocks too\n\
             Exit status 1 when there is a circle."
        );
        return ExitCode::SUCCESS;
    }
    let opts = GraphOptions {
        docs: args.iter().any(|a| a == "--docs"),
        tests: args.iter().any(|a| a == "--tests"),
    };
    let graph_out = args.iter().any(|a| a == "--graph");
    let mut dirs: Vec<PathBuf> =
        args.iter().filter(|a| !a.starts_with("--")).map(PathBuf::from).collect();
    if dirs.is_empty() {
        dirs.push("emulator/src".into());
    }
    let mut failed = false;
    for dir in &dirs {
        if dirs.len() > 1 {
            println!("== {}", dir.display());
        }
        let g = match module_graph(dir, &crate_src(dir), opts) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("module-cycles: {}: {e}", dir.display());
                return ExitCode::from(2);
            }
        };
        if graph_out {
            for (m, uses) in &g {
                println!("{m}: {}", uses.iter().cloned().collect::<Vec<_>>().join(" "));
            }
        }
        let sccs = cycles(&g);
        if sccs.is_empty() {
            println!("no module cycles");
            continue;
        }
        failed = true;
        for comp in &sccs {
            println!("strongly connected: {}", comp.join(" "));
            for c in elementary_cycles(&g, comp, 20) {
                println!("cycle: {} -> {}", c.join(" -> "), c[0]);
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
