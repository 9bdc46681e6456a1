#!/bin/bash
# `roce conform` against the Linux kernel's soft-RoCE (rdma_rxe) in the lab's qemu guest.
#
#   scripts/conform-rxe.sh [bookworm|trixie] [roce conform options...]
#
# Root, on a machine where ../shared/rxelab works (lab.sh sets itself up on first use).
# bookworm = kernel 6.1 (default), trixie = kernel 6.12. It builds `roce` (release),
# boots guest a (rxe0 on 192.168.77.2) unless it is up, starts the pyverbs agent
# conform/agent/roce-conform-agent.py in it, runs the catalogue from the lab's namespace
# (tester 192.168.77.1), writes the verdicts to docs/conformance/rxe-<kernel>.md (the
# table docs/conformance.md shows) and a pcap per case to /var/tmp/roce-conform/<suite>/,
# and stops the agent (and the guest, if it booted it). Exit status: roce conform's
# (0 all pass or n/a, 1 a case failed, 2 the run could not start).
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
SHARED=$ROOT/../shared; [ -d "$SHARED" ] || SHARED=$ROOT/../../shared
LAB=${CONFORM_LAB:-$SHARED/rxelab}
SUITE=bookworm
case "${1:-}" in bookworm | trixie) SUITE=$1; shift ;; esac
export LAB_SUITE=$SUITE
WORK=${LAB_DIR:-/var/tmp/rxelab}
NS=${LAB_NS:-rxelab}
KERNEL=$([ "$SUITE" = trixie ] && echo 6.12 || echo 6.1)
OUT=$ROOT/docs/conformance/rxe-$KERNEL.md
PCAPS=/var/tmp/roce-conform/$SUITE

[ "$(id -u)" = 0 ] || { echo "conform-rxe: needs root (the lab boots qemu guests in a network namespace)" >&2; exit 2; }
[ -x "$LAB/lab.sh" ] || { echo "conform-rxe: no lab at $LAB (set CONFORM_LAB)" >&2; exit 2; }

(cd "$ROOT" && cargo build --release -q -p roce-cli)
"$LAB/lab.sh" setup   # idempotent: builds the guest image of this suite only when missing
booted=0
status=$("$LAB/lab.sh" status 2>/dev/null || true)
if ! grep -q '^vm a: running' <<<"$status"; then
  "$LAB/lab.sh" boot a
  booted=1
fi
cleanup() {
  [ -n "${job:-}" ] && "$LAB/lab.sh" kill a "$job" >/dev/null 2>&1 || true
  [ "$booted" = 1 ] && "$LAB/lab.sh" stop-vm a >/dev/null 2>&1 || true
}
trap cleanup EXIT

cp "$ROOT/conform/agent/roce-conform-agent.py" "$WORK/run/share/conform-agent.py"
job=$("$LAB/lab.sh" bg a "python3 /lab/conform-agent.py --dev rxe0 --addr 192.168.77.2")
for _ in $(seq 100); do
  grep -q 'on TCP' "$WORK/run/share/a/jobs/$job.out" 2>/dev/null && break
  sleep 0.2
done
mkdir -p "$(dirname "$OUT")" "$PCAPS"
set +e
ip netns exec "$NS" "$ROOT/target/release/roce" conform --target 192.168.77.2:18700 \
  --tester-addr 192.168.77.1 --pcap "$PCAPS" --markdown "$@" >"$PCAPS/verdicts.md"
rc=$?
cat "$PCAPS/verdicts.md"
if [ $# -eq 0 ] && [ "$rc" -le 1 ]; then
  cp "$PCAPS/verdicts.md" "$OUT" && echo "conform-rxe: wrote $OUT"
fi
exit "$rc"
