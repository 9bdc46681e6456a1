#!/usr/bin/env bash
# The README's two commands as a newcomer runs them, timed: a fresh clone of
# this repository in a temporary directory (empty target/), command 1 (the
# demo and its decode), then command 2 (`cargo test --workspace`). Prints
# each command's seconds, the test counts and the SKIPPED lines.
#
#   scripts/newcomer.sh [RUNS]      (default 1; each run is a new clone)
#   KEEP=1 scripts/newcomer.sh      keep the clone and the logs
#
# Crates come from cargo's registry cache when they are there (a machine
# that never fetched them also pays the download). Issue 37's targets on a
# 2-core machine: command 1 at most 150 s, command 2 at most 300 s.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-1}
for i in $(seq 1 "$runs"); do
  d=$(mktemp -d /tmp/roce-newcomer.XXXXXX)
  git clone -q "$src" "$d/roce-emu" || exit 2
  cd "$d/roce-emu" || exit 2
  s=$(date +%s.%N)
  (set +o pipefail
   cargo run --release -p roce-cli -- demo --pcap demo.pcap &&
   cargo run --release -p roce-cli -- decode demo.pcap --explain | head -40) > "$d/command1.log" 2>&1
  rc1=$?
  t1=$(echo "$(date +%s.%N) - $s" | bc)
  s=$(date +%s.%N)
  cargo test --workspace > "$d/command2.log" 2>&1
  rc2=$?
  t2=$(echo "$(date +%s.%N) - $s" | bc)
  passed=$(grep -Eo '^test result: .* ([0-9]+) passed' "$d/command2.log" | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
  failed=$(grep -Eo '^test result: .* ([0-9]+) failed' "$d/command2.log" | grep -Eo '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
  skipped=$(grep -c 'SKIPPED' "$d/command2.log")
  executables=$(grep -Ec '^ *(Running|Doc-tests) ' "$d/command2.log")
  printf 'run %d: command 1 %.0f s (exit %d), command 2 %.0f s (exit %d): %d passed, %d failed, %d SKIPPED lines, %d test executables\n' \
    "$i" "$t1" "$rc1" "$t2" "$rc2" "$passed" "$failed" "$skipped" "$executables"
  cd /tmp || exit 2
  if [ "${KEEP:-0}" = 1 ]; then echo "  kept: $d"; else rm -rf "$d"; fi
done
