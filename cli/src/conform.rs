//! `roce conform`: run the IBA conformance catalogue and print the verdicts.

pub use roce_conform::args::{ConformArgs, CONFORM_AFTER, CONFORM_LONG};
use roce_conform::{catalogue, report::*, session::*};
use std::io::IsTerminal;
use std::process::ExitCode;

/// Run `roce conform`; returns the exit status.
pub fn run(args: &ConformArgs) -> ExitCode {
    if args.list {
        print!("{}", catalogue::listing());
        return ExitCode::SUCCESS;
    }
    let fail = |e: String| {
        eprintln!("roce conform: {e}");
        ExitCode::from(2)
    };
    let cases = select(&args.patterns());
    if cases.is_empty() || (args.ladder.is_some() && cases.len() != 1) {
        return fail("no case matches (roce conform --list shows them)".into());
    }
    let Results { target, outcomes: out } = match args.session().run(&cases) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if args.ladder.is_some() {
        if let Err(e) = ladder(&out[0], std::io::stdout().is_terminal(), &mut std::io::stdout()) {
            return fail(format!("ladder: {e}"));
        }
    } else if args.markdown {
        print!("{}", markdown(&target, &out));
    } else if args.json {
        println!("{}", json(&target, &out));
    } else {
        print!("{}", table(&target, &out));
    }
    ExitCode::from(u8::from(tally(&out).fail > 0))
}
