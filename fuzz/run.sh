#!/usr/bin/env bash
# Run fuzz targets with AFL (stable Rust, cargo-afl) and summarise.
#
#   fuzz/run.sh TARGET SECONDS      # TARGET: packet | device | verbs
#   fuzz/run.sh all SECONDS         # each target in turn
#
# Needs `cargo install cargo-afl` (builds AFL++; clang/llvm from Debian).
# Inputs start from fuzz/corpus/TARGET; findings go to fuzz/out/TARGET
# (not committed). Prints, per target: executions, paths found, edge
# coverage and crashes. A crash: reproduce with
#   cargo run -p roce-fuzz --example replay -- TARGET fuzz/out/TARGET/default/crashes/<id>
# (or add the file to fuzz/corpus/TARGET and run cargo test -p roce-fuzz),
# fix it, and commit the input under fuzz/corpus/TARGET/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target=${1:?usage: fuzz/run.sh TARGET|all SECONDS}
secs=${2:?usage: fuzz/run.sh TARGET|all SECONDS}
command -v cargo-afl >/dev/null || { echo "cargo-afl missing: cargo install cargo-afl" >&2; exit 2; }
(cd "$here/afl" && cargo afl build --release -q)
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_QUIET=1
run_one() {
  local t=$1 out="$here/out/$1"
  mkdir -p "$out"
  # -V: stop after this many seconds; -t: 2 s per input
  cargo afl fuzz -i "$here/corpus/$t" -o "$out" -V "$secs" -t 2000 "$here/afl/target/release/$t" \
    >"$out/afl.log" 2>&1 || true
  local s="$out/default/fuzzer_stats"
  if [ -f "$s" ]; then
    awk -F' *: *' -v t="$t" '
      /^execs_done/ {e=$2} /^corpus_count/ {c=$2} /^bitmap_cvg/ {b=$2}
      /^saved_crashes/ {x=$2} /^saved_hangs/ {h=$2} /^run_time/ {r=$2}
      END {printf "%-7s %6ss  execs %s  corpus %s  edge coverage %s  crashes %s  hangs %s\n", t, r, e, c, b, x, h}' "$s"
  else
    echo "$t: no stats (see $out/afl.log)"; tail -5 "$out/afl.log"
  fi
}
if [ "$target" = all ]; then
  for t in packet device verbs; do run_one "$t"; done
else
  run_one "$target"
fi
