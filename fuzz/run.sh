#!/usr/bin/env bash
# Run fuzz targets with AFL++ (stable Rust, cargo-afl) and summarise.
#
#   fuzz/run.sh TARGET SECONDS           # TARGET: packet | device | verbs | dropin | cm | misuse
#   fuzz/run.sh all SECONDS              # every target, in parallel (one per core)
#   fuzz/run.sh packet,device SECONDS    # a list, in parallel
#
# Needs `cargo install cargo-afl` (builds AFL++; clang/llvm from Debian).
# Inputs start from fuzz/corpus/TARGET; findings go to fuzz/out/TARGET
# (not committed). A second run resumes the first (AFL_AUTORESUME): the
# executions and run time in the summary are totals over all runs.
# Prints, per target: run time, executions, corpus size, edge coverage,
# crashes and hangs; the same lines are appended to fuzz/out/summary.txt.
# A crash: reproduce with
#   cargo run -p roce-fuzz --example replay -- TARGET fuzz/out/TARGET/default/crashes/<id>
# fix it, and commit the input under fuzz/corpus/TARGET/ (cargo test
# -p roce-fuzz replays it from then on).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
usage="usage: fuzz/run.sh TARGET[,TARGET...]|all SECONDS"
targets=${1:?$usage}
secs=${2:?$usage}
[ "$targets" = all ] && targets=packet,device,verbs,dropin,cm,misuse
command -v cargo-afl >/dev/null || { echo "cargo-afl missing: cargo install cargo-afl" >&2; exit 2; }
(cd "$here/afl" && cargo afl build --release -q)
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_QUIET=1 \
  AFL_AUTORESUME=1 AFL_NO_AFFINITY=1
summary() {
  local t=$1 s="$here/out/$1/default/fuzzer_stats"
  if [ -f "$s" ]; then
    awk -F' *: *' -v t="$t" -v d="$(date -u +%F)" '
      /^execs_done/ {e=$2} /^corpus_count/ {c=$2} /^bitmap_cvg/ {b=$2}
      /^saved_crashes/ {x=$2} /^saved_hangs/ {h=$2} /^run_time/ {r=$2}
      END {printf "%s %-7s run time %6ss  execs %s  corpus %s  edge coverage %s  crashes %s  hangs %s\n", d, t, r, e, c, b, x, h}' "$s"
  else
    echo "$t: no stats (see $here/out/$t/afl.log)"; tail -5 "$here/out/$t/afl.log"
  fi
}
pids=()
for t in ${targets//,/ }; do
  [ -d "$here/corpus/$t" ] || { echo "unknown target $t" >&2; exit 2; }
  mkdir -p "$here/out/$t"
  # -V: stop after this many seconds; -t: 2 s per input
  cargo afl fuzz -i "$here/corpus/$t" -o "$here/out/$t" -V "$secs" -t 2000 \
    "$here/afl/target/release/$t" >"$here/out/$t/afl.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
for t in ${targets//,/ }; do summary "$t" | tee -a "$here/out/summary.txt"; done
