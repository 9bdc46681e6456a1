#!/usr/bin/env bash
# The libibverbs drop-in against the Rust API on the same workloads, each
# pair measured back to back (A, B, A, B, ...), reporting min/median/max of
# each side and of the per-pair ratio drop-in / Rust:
#
#   1. per-call cost: RDMA WRITE message rate, 64-byte messages, 128 in
#      flight, one process, two devices: libibverbs/bench/wr_rate.c calling
#      ibv_post_send + ibv_poll_cq through the drop-in, against
#      `roce perf write -s 64 -t 128` (the same loop on the Rust API);
#   2. bandwidth: Debian's ib_write_bw (two processes, 64 KiB) through the
#      drop-in against `roce perf write -s 65536`;
#   3. latency: Debian's ib_send_lat and ib_write_lat (8 bytes) through the
#      drop-in against `roce perf lat send|write -s 8`.
#
# Each row also pairs the drop-in with a raw-UDP reference measured in the
# same round: the GSO+GRO ceiling of `roce perf write` for the bandwidth
# row, half the raw busy-polled UDP ping-pong of `roce perf lat --poll
# busy` for the latency rows (perftest busy-polls).
#
#   scripts/dropin-bench.sh [ROUNDS]        (default 10)
#
# Needs `cargo build --release`, cc + libibverbs-dev, perftest. Both sides
# use the same driver settings (ROCE_EMU_SPIN_US=20, roce perf's default;
# DROPIN_SPIN_US=N sets another, 0 being a configured device's default).
# A benchmark, not a test: these machines are shared and noisy.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rel="${CARGO_TARGET_DIR:-$root/target}/release"
rounds="${1:-10}"
[ -e "$rel/libibverbs.so.1" ] && [ -x "$rel/roce" ] || { echo "run cargo build --release first" >&2; exit 2; }
for t in cc ib_write_bw ib_send_lat ib_write_lat; do command -v $t >/dev/null || { echo "SKIPPED: $t missing" >&2; exit 0; }; done
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/wr_rate" "$root/libibverbs/bench/wr_rate.c" "$root/libibverbs/tests/c/common.c" -L"$rel" -l:libibverbs.so.1
export ROCE_EMU_SPIN_US="${DROPIN_SPIN_US:-20}" ROCE_EMU_STATS=0
dropin() { LD_LIBRARY_PATH="$rel" ROCE_EMU_DEVICES="roce0=udp:127.0.0.2,roce1=udp:127.0.0.3" "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
port=19100
pair_pt() { # TOOL ARGS... -> client stdout
  port=$((port + 1))
  dropin timeout 60 "$1" -d roce0 -x 1 -p $port "${@:2}" >/dev/null 2>&1 &
  local spid=$!
  sleep 0.4
  dropin timeout 60 "$1" -d roce1 -x 1 -p $port "${@:2}" 127.0.0.1 2>&1
  wait $spid
}
declare -a A1 B1 A2 B2 A3 B3 A4 B4 C2 C3
for i in $(seq 1 "$rounds"); do
  A1+=("$(dropin "$work/wr_rate" 64 200000 128 | sed -n 's/.*mpps=\([0-9.]*\).*/\1/p')")
  B1+=("$("$rel/roce" perf write -s 64 -n 200000 -t 128 --no-ceiling --json 2>/dev/null | json 'd["msgs_per_s"]/1e6')")
  # ib_write_bw's "BW average[MB/sec]" (MB = 2^20 bytes) as Gb/s
  A2+=("$(pair_pt ib_write_bw -s 65536 -n 5000 | awk '/^ *65536 /{printf "%.3f", $4*1048576*8/1e9; exit}')")
  out="$("$rel/roce" perf write -s 65536 -n 5000 --json 2>/dev/null)"
  B2+=("$(echo "$out" | json 'd["gbps"]')")
  C2+=("$(echo "$out" | json 'd["ceiling_gbps"]["gso_gro"]')")
  # ib_send_lat's t_typical (µs) against roce perf's median round trip / 2
  A3+=("$(pair_pt ib_send_lat -s 8 -n 1000 | awk '/^ *8 +1000 /{print $5; exit}')")
  B3+=("$("$rel/roce" perf lat send -s 8 -n 1000 --no-ceiling --json 2>/dev/null | json 'd["rtt_us"]["median"]/2')")
  C3+=("$("$rel/roce" perf lat send -s 8 -n 1000 --poll busy --json 2>/dev/null | json 'd["udp_rtt_us"]["median"]/2')")
  A4+=("$(pair_pt ib_write_lat -s 8 -n 1000 | awk '/^ *8 +1000 /{print $5; exit}')")
  B4+=("$("$rel/roce" perf lat write -s 8 -n 1000 --no-ceiling --json 2>/dev/null | json 'd["rtt_us"]["median"]/2')")
  echo "round $i: wr_rate ${A1[-1]} vs ${B1[-1]} Mmsg/s; ib_write_bw ${A2[-1]} vs ${B2[-1]} Gb/s (ceiling ${C2[-1]}); ib_send_lat ${A3[-1]} vs ${B3[-1]} us (raw ${C3[-1]}); ib_write_lat ${A4[-1]} vs ${B4[-1]} us" >&2
done
stats() { # NAME UNIT A[@] -- B[@]
  python3 - "$@" <<'EOF'
import statistics, sys
name, unit = sys.argv[1], sys.argv[2]
rest = sys.argv[3:]
k = rest.index("--")
a = [float(x) for x in rest[:k] if x]
b = [float(x) for x in rest[k + 1:] if x]
r = [x / y for x, y in zip(a, b) if y]
f = lambda v: "%.3f / %.3f / %.3f" % (min(v), statistics.median(v), max(v)) if v else "n/a"
print(f"{name:<34} drop-in {f(a)} {unit}   rust {f(b)} {unit}   ratio {f(r)}  ({len(r)} pairs)")
EOF
}
echo "min / median / max over $rounds rounds, ratio = drop-in / Rust API per pair"
stats "64 B WRITE rate (post+poll)" Mmsg/s "${A1[@]}" -- "${B1[@]}"
stats "64 KiB WRITE bandwidth" Gb/s "${A2[@]}" -- "${B2[@]}"
stats "8 B SEND one-way latency" us "${A3[@]}" -- "${B3[@]}"
stats "8 B WRITE one-way latency" us "${A4[@]}" -- "${B4[@]}"
echo "against raw UDP in the same round (ratio = drop-in / reference per round; 'rust' = the reference)"
stats "ib_write_bw vs GSO+GRO ceiling" Gb/s "${A2[@]}" -- "${C2[@]}"
stats "ib_send_lat vs raw ping-pong/2" us "${A3[@]}" -- "${C3[@]}"
stats "ib_write_lat vs raw ping-pong/2" us "${A4[@]}" -- "${C3[@]}"
