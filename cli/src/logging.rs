//! Live tracing for every command: `--log FILTER` (or `ROCE_LOG`, else
//! `RUST_LOG`) selects the emulator's `tracing` events by target and level
//! (`RUST_LOG`'s `target=level,...` directives, parsed by tracing-subscriber's
//! `Targets`: no regex engine in `roce`); `--log-format` picks a compact
//! human line or one JSON object per event. Output goes to stderr only, so
//! it never mixes with data on stdout (`decode --json`, `demo --json`).
//! Default: warnings only. See docs/tracing.md for the useful targets.

use std::io::IsTerminal;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::time::uptime;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Environment variable with the default filter (before `RUST_LOG`).
pub const ENV_LOG: &str = "ROCE_LOG";

/// Format of the trace lines on stderr.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One short human line per event: time, level, spans, target, message, fields.
    #[default]
    Compact,
    /// One JSON object per event (`timestamp`, `level`, `fields`, `target`, `spans`).
    Json,
}

/// The global tracing options.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LogArgs {
    /// Trace filter, e.g. `roce_emulator=debug` or
    /// `roce_emulator::responder=debug,roce_sim=trace` (RUST_LOG syntax; default
    /// $ROCE_LOG, else $RUST_LOG, else `warn`). Traces go to stderr.
    #[arg(long, global = true, value_name = "FILTER")]
    pub log: Option<String>,
    /// Trace line format on stderr.
    #[arg(long, global = true, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Compact)]
    pub log_format: LogFormat,
}

/// The filter string in force: `--log`, else `$ROCE_LOG`, else `$RUST_LOG`, else `warn`.
pub fn filter_spec(args: &LogArgs) -> String {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    args.log
        .clone()
        .or_else(|| env(ENV_LOG))
        .or_else(|| env("RUST_LOG"))
        .unwrap_or_else(|| "warn".into())
}

/// Install the global subscriber; returns an error message for a bad filter.
pub fn init(args: &LogArgs) -> Result<(), String> {
    let spec = filter_spec(args);
    let filter: Targets = spec.parse().map_err(|e| format!("bad --log filter {spec:?}: {e}"))?;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_timer(uptime());
    let registry = tracing_subscriber::registry().with(filter);
    let res = match args.log_format {
        LogFormat::Compact => registry.with(layer.compact().with_ansi(ansi)).try_init(),
        LogFormat::Json => {
            registry.with(layer.json().with_ansi(false).with_current_span(false)).try_init()
        }
    };
    res.map_err(|e| format!("cannot install the trace subscriber: {e}"))
}
