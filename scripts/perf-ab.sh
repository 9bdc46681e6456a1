#!/usr/bin/env bash
# Two builds against each other, alternated (B, A, B, A, ...) in one run, as
# docs/performance.md asks of every claim that a change made something
# faster or slower: these machines are shared and noisy, so only pairs taken
# minutes apart say anything.
#
#   scripts/perf-ab.sh OLD_DIR NEW_DIR [ROUNDS]      (default 5 rounds)
#
# OLD_DIR and NEW_DIR are two builds' release directories (each holding
# `roce` and, for the drop-in rows, libibverbs.so.1; e.g. a worktree's
# target/release after `cargo build --release -p roce-cli -p roce-libibverbs`).
# Per round and build:
#   roce perf: 8 B SEND round trip busy and event (µs, and the ratio to the
#     raw UDP reference of the same run), 64 KiB WRITE (Gb/s, ratio to the
#     GSO+GRO ceiling), 64 B WRITE (msg/s);
#   the drop-in (when perftest is installed): Debian's ib_send_lat and
#     ib_write_lat t_typical (8 B, µs), ib_write_bw (64 KiB, MB/s) across
#     two devices, ib_read_bw with both ends on one shared device.
# Prints each round, then min / median / max of each build and of the
# per-pair ratios NEW / OLD. A benchmark, not a test; addresses 127.0.41.2
# and .3 (roce perf) and 127.0.0.2/.3 (the drop-in).
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,21p' "$0" >&2; exit 2; }
old=$(cd "$1" && pwd) || exit 2
new=$(cd "$2" && pwd) || exit 2
rounds="${3:-5}"
for d in "$old" "$new"; do
  [ -x "$d/roce" ] || { echo "$d/roce missing: build it first" >&2; exit 2; }
done
perftest=1
for t in ib_send_lat ib_write_lat ib_write_bw ib_read_bw; do
  command -v $t >/dev/null || perftest=0
done
[ -e "$old/libibverbs.so.1" ] && [ -e "$new/libibverbs.so.1" ] || perftest=0
[ $perftest = 1 ] || echo "SKIPPED: the drop-in rows (perftest or libibverbs.so.1 missing)" >&2
export ROCE_EMU_STATS=0
A="--addr-a 127.0.41.2 --addr-b 127.0.41.3 --json"
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" 2>/dev/null; }
last() { echo "$1" | awk '{ if (NF) printf "%.2f", $NF; else printf "-" }'; }
port=$((19600 + RANDOM % 200))
# TOOL DEVICES SERVER_DEV CLIENT_DEV ARGS... -> the client's output
pt() {
  local rel=$1 tool=$2 devs=$3 sdev=$4 cdev=$5
  shift 5
  port=$((port + 1))
  LD_LIBRARY_PATH="$rel" ROCE_EMU_DEVICES="$devs" timeout 60 "$tool" -d "$sdev" -x 1 -p $port "$@" >/dev/null 2>&1 &
  local spid=$!
  sleep 0.5
  LD_LIBRARY_PATH="$rel" ROCE_EMU_DEVICES="$devs" timeout 60 "$tool" -d "$cdev" -x 1 -p $port "$@" 127.0.0.1 2>&1
  wait $spid
}
two="roce0=udp:127.0.0.2,roce1=udp:127.0.0.3"
one="roce0=udp:127.0.0.2"
declare -A V
rows=(busy_us busy_ratio event_us event_ratio w64k_gbps w64k_ratio w64_msgs)
[ $perftest = 1 ] && rows+=(send_lat_us write_lat_us write_bw_mbs read_bw_shared_mbs)
for i in $(seq 1 "$rounds"); do
  for who in old new; do
    rel=$old; [ $who = new ] && rel=$new
    r="$rel/roce"
    o=$("$r" perf lat --poll busy -n 3000 $A 2>/dev/null)
    V[$who,busy_us]+=" $(echo "$o" | json 'd["rtt_us"]["median"]')"
    V[$who,busy_ratio]+=" $(echo "$o" | json 'd["rtt_us"]["median"]/d["udp_rtt_us"]["median"]')"
    o=$("$r" perf lat --poll event -n 3000 $A 2>/dev/null)
    V[$who,event_us]+=" $(echo "$o" | json 'd["rtt_us"]["median"]')"
    V[$who,event_ratio]+=" $(echo "$o" | json 'd["rtt_us"]["median"]/d["udp_rtt_us"]["median"]')"
    o=$("$r" perf write -s 65536 -n 3000 $A 2>/dev/null)
    V[$who,w64k_gbps]+=" $(echo "$o" | json 'd["gbps"]')"
    V[$who,w64k_ratio]+=" $(echo "$o" | json 'd["ratio"]')"
    V[$who,w64_msgs]+=" $("$r" perf write -s 64 -n 30000 $A 2>/dev/null | json 'd["msgs_per_s"]')"
    line="round $i $who: busy $(last "${V[$who,busy_us]}") us, event $(last "${V[$who,event_us]}") us, 64 KiB $(last "${V[$who,w64k_gbps]}") Gb/s, 64 B $(last "${V[$who,w64_msgs]}") msg/s"
    if [ $perftest = 1 ]; then
      export ROCE_EMU_SPIN_US=0
      V[$who,send_lat_us]+=" $(pt "$rel" ib_send_lat "$two" roce0 roce1 -s 8 -n 5000 | awk '/^ *8 +5000 /{print $5; exit}')"
      V[$who,write_lat_us]+=" $(pt "$rel" ib_write_lat "$two" roce0 roce1 -s 8 -n 5000 | awk '/^ *8 +5000 /{print $5; exit}')"
      V[$who,write_bw_mbs]+=" $(pt "$rel" ib_write_bw "$two" roce0 roce1 -s 65536 -n 5000 | awk '/^ *65536 /{print $4; exit}')"
      V[$who,read_bw_shared_mbs]+=" $(pt "$rel" ib_read_bw "$one" roce0 roce0 -s 65536 -n 5000 | awk '/^ *65536 /{print $4; exit}')"
      unset ROCE_EMU_SPIN_US
      line+=", ib_send_lat $(last "${V[$who,send_lat_us]}") us, ib_write_lat $(last "${V[$who,write_lat_us]}") us, ib_write_bw $(last "${V[$who,write_bw_mbs]}") MB/s, ib_read_bw (shared) $(last "${V[$who,read_bw_shared_mbs]}") MB/s"
    fi
    echo "$line"
  done
done
echo "min / median / max over $rounds rounds; ratio = new / old per pair"
for row in "${rows[@]}"; do
  python3 - "$row" "${V[old,$row]:-}" "${V[new,$row]:-}" <<'EOF'
import statistics, sys
name, a, b = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def num(v):
    try:
        return float(v)
    except ValueError:
        return None
pairs = [(num(x), num(y)) for x, y in zip(a, b)]
old = [x for x, _ in pairs if x is not None]
new = [y for _, y in pairs if y is not None]
ratio = [y / x for x, y in pairs if x and y is not None]
f = lambda v: "%.3f / %.3f / %.3f" % (min(v), statistics.median(v), max(v)) if v else "n/a"
print(f"{name:<20} old {f(old):<28} new {f(new):<28} new/old {f(ratio)}")
EOF
done
