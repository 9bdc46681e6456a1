#!/usr/bin/env bash
# Run rdma-core's own Python test suite (pyverbs) on the libibverbs drop-in,
# one process per generic module (vendor modules mlx5_*/efa* excluded), as
# it is run on kernel rxe for comparison (docs/libibverbs.md).
#
#   scripts/pyverbs-tests.sh [MODULE ...]      # default: every generic module
#
# Needs Debian's rdma-core (the tests, under /usr/share/doc/rdma-core/tests)
# and python3-pyverbs (for /usr/bin/python3), and the drop-in built:
# `cargo build --release` (the drop-in, and `roce` for `roce run`). Prints
# one line per module and a total "N passed, N failed, N skipped" line.
# Devices: ROCE_EMU_DEVICES if set, else one device roce0 on 127.0.0.1 (the
# suite uses one device and talks to itself). Each module runs under
# `roce run` when target/release/roce exists, so the suite finds the device
# under /sys/class/infiniband, and its netdev (lo) and that netdev's first
# address (127.0.0.1: hence the device's address) as on a kernel device:
# test_rdmacm runs instead of skipping "doesn't have net interface".
# PYVERBS_LOGS=DIR keeps each module's log there (DIR/MODULE.log: one line
# per test, "... ok", "... skipped", "... FAIL", "... ERROR"), e.g. to
# compare test by test with the lab's run on kernel rxe (rxelab's
# pyverbs_tests scenario).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
lib="${ROCE_EMU_LIB:-$root/target/release}"
src=/usr/share/doc/rdma-core/tests
py=/usr/bin/python3
[ -f "$lib/libibverbs.so.1" ] || { echo "build the drop-in first: cargo build --release -p roce-libibverbs" >&2; exit 2; }
[ -d "$src" ] || { echo "SKIPPED: $src missing (apt-get install rdma-core)"; exit 0; }
"$py" -c 'import pyverbs' 2>/dev/null || { echo "SKIPPED: pyverbs missing (apt-get install python3-pyverbs)"; exit 0; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$src" "$work/tests"
gunzip -f "$work"/tests/*.gz 2>/dev/null
cd "$work/tests"
mods=("$@")
if [ ${#mods[@]} -eq 0 ]; then
  for f in test_*.py; do
    m="${f%.py}"
    case "$m" in test_mlx5*|test_efa*) continue ;; esac
    mods+=("$m")
  done
fi
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ROCE_EMU_DEVICES="${ROCE_EMU_DEVICES:-roce0=udp:127.0.0.1}"
run=()
[ -x "$lib/roce" ] && run=("$lib/roce" run --lib-dir "$lib" --)
tp=0; tf=0; ts=0; te=0
for m in "${mods[@]}"; do
  out="$work/$m.log"
  timeout 600 "${run[@]}" "$py" run_tests.py -v "$m" >"$out" 2>&1
  rc=$?
  # unittest's own summary: "Ran N tests" and "OK (skipped=S)" or
  # "FAILED (failures=F, errors=E, skipped=S)"
  n=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in.*/\1/p' "$out" | tail -1)
  sum=$(grep -E '^(OK|FAILED)' "$out" | tail -1)
  num() { echo "$sum" | sed -n "s/.*$1=\([0-9]*\).*/\1/p"; }
  f=$(( $(num failures || true)0 / 10 + $(num errors || true)0 / 10 ))
  s=$(( $(num skipped || true)0 / 10 )); e=0
  if [ -z "$n" ]; then n=0; e=1; fi
  p=$((n - f - s))
  if [ -n "${PYVERBS_LOGS:-}" ]; then mkdir -p "$PYVERBS_LOGS" && cp "$out" "$PYVERBS_LOGS/"; fi
  printf '%-28s %3d passed %3d failed %3d skipped%s\n' "$m" "$p" "$f" "$s" "$([ $e = 1 ] && echo "  (module did not run, exit $rc)")"
  if [ -n "${VERBOSE:-}" ]; then grep -E '\.\.\. (FAIL|ERROR|skipped)' "$out" | sed 's/^/    /'; fi
  tp=$((tp + p)); tf=$((tf + f)); ts=$((ts + s)); te=$((te + e))
done
echo "pyverbs: $tp passed, $tf failed, $ts skipped"
# A module that did not run at all (no "Ran N tests": e.g. `roce run` could
# not start it, a build without libroce_preload.so) is a failure of this
# script, not a quiet "0 passed".
if [ "$te" -gt 0 ]; then
  echo "pyverbs: $te module(s) did not run; the first one's output:" >&2
  for m in "${mods[@]}"; do
    if ! grep -q '^Ran ' "$work/$m.log"; then tail -20 "$work/$m.log" >&2; break; fi
  done
  exit 1
fi
