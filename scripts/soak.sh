#!/usr/bin/env bash
# Long soaks (issue 15). Not part of CI: they take minutes to hours.
#
#   scripts/soak.sh sim [OPS] [SEED]          # default 10^7 operations, seed 1
#   scripts/soak.sh sockets [SECONDS] [LANES] # default 600 s, 4 lanes
#   scripts/soak.sh tests                     # the test suite's long soaks (~3 min)
#
# tests: the soaks of tests/tests/sim_soak.rs that `cargo test` leaves out
#   (#[ignore]): 100 000 SENDs and WRITEs, 100 000 mixed operations, and
#   24 seeds of 100 000 mixed operations, every fault on, every counter
#   cross-checked.
#
# sim: `roce demo` (the deterministic simulator, one process) with 256 QP
#   pairs of RC, UC and UD at once (RC and UD receive from SRQs) under 10 %
#   loss, 10 % reordering, 5 % duplication and 0.1 % corruption. The demo
#   verifies every delivered byte and every atomic result (each executed
#   exactly once: its old value and the final word match a model). The
#   script samples the process's resident memory every 5 s and fails if
#   it grows after warm-up: the peak of the last half of the samples may
#   not exceed the peak of the 20-50 % window by more than 10 %.
#
# sockets: LANES pairs of processes (`rc_pingpong -c`, both sides checking
#   every byte of every 4 KiB message as it arrives, `--linger 5` so the
#   side that finishes first still ACKs a retransmitted last message) over
#   real UDP sockets on loopback,
#   each process with its own seeded ROCE_EMU_FAULTS (the same rates, both
#   directions), for about SECONDS. Each lane has its own devices
#   (127.0.1x.1 and .2). Resident memory of every process is sampled the
#   same way; every process must exit 0.
#
# Both print a summary (operations, time, peak RSS, growth) and exit 1 if
# anything failed. Figures of the runs are in docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
FAULTS_SIM=(--loss 0.1 --reorder 0.1 --dup 0.05 --corrupt 0.001)
FAULTS_SOCK="loss=0.1,reorder=0.1,dup=0.05,corrupt=0.001,dir=both"

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || true; }

# growth FILE: peak of the last half / peak of the 20-50 % window
growth() {
  awk '{v[NR]=$2} END {
    n=NR; if (n < 10) {print "n/a"; exit}
    a=int(n*0.2); b=int(n*0.5); w=0; l=0
    for (i=a+1;i<=b;i++) if (v[i]>w) w=v[i]
    for (i=b+1;i<=n;i++) if (v[i]>l) l=v[i]
    printf "%.3f", l/w }' "$1"
}

case "$mode" in
tests)
  cargo test -p roce-tests --test all sim_soak -- --ignored
  ;;
sim)
  ops=${2:-10000000}
  seed=${3:-1}
  cargo build --release -q -p roce-cli
  out=$(mktemp -d)
  echo "soak sim: $ops operations, 256 QP pairs (RC+UC+UD, SRQs), seed $seed, faults ${FAULTS_SIM[*]}"
  start=$(date +%s)
  target/release/roce demo --qp-type mixed --qps 256 --ops "$ops" --seed "$seed" \
    "${FAULTS_SIM[@]}" --json >"$out/report.json" 2>"$out/stderr" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    r=$(rss_kb "$pid"); [ -n "$r" ] && echo "$(( $(date +%s) - start )) $r" >>"$out/rss"
    sleep 5
  done
  rc=0; wait "$pid" || rc=$?
  secs=$(( $(date +%s) - start ))
  g=$(growth "$out/rss")
  peak=$(sort -k2 -n "$out/rss" | tail -1 | awk '{print $2}')
  [ -s "$out/report.json" ] || { echo "soak sim: FAILED (exit $rc, no report)"; tail -5 "$out/stderr"; exit 1; }
  python3 - "$out/report.json" "$secs" "$peak" "$g" "$rc" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
secs, peak, g, rc = sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
d = r["delivery"]
print(f"  ok {r['ok']} exit {rc}: {r['ops_completed']}/{r['ops_requested']} operations in {secs} s, "
      f"{r['total_bytes']/2**20:.0f} MiB of payload verified, mismatches {r['mismatches']}, order errors {r['order_errors']}")
print(f"  atomics {r['ops'].get('CMP_AND_SWP',0)} CMP_AND_SWP + {r['ops'].get('FETCH_AND_ADD',0)} FETCH_AND_ADD, each result checked")
for t, x in d.items():
    print(f"  {t}: {x['sent']} sent, {x['received']} received intact, {x['lost']} lost, {x['duplicates']} duplicates, accounted {x['accounted']}")
f = r["fabric"]
print(f"  fabric: {f['transmitted']} frames, {f['dropped_loss']} lost, {f['duplicated']} duplicated, "
      f"{f['reordered']} reordered, {f['corrupted']} corrupted")
print(f"  peak RSS {peak/1024:.0f} MiB, growth after warm-up {g} (limit 1.10)")
EOF
  echo "  samples: $out/rss"
  [ "$rc" = 0 ] && awk -v g="$g" 'BEGIN {exit !(g == "n/a" || g <= 1.10)}' || { echo "soak sim: FAILED"; exit 1; }
  echo "soak sim: PASS"
  ;;
sockets)
  secs=${2:-600}
  lanes=${3:-4}
  cargo build --release -q -p roce-examples
  out=$(mktemp -d)
  # about 8.6 round trips per second at these fault rates (each lost
  # packet waits for the retransmit timeout), so this lasts about SECONDS
  iters=$(( secs * 9 ))
  echo "soak sockets: $lanes lanes of rc_pingpong -c, $iters round trips each (~$secs s), faults $FAULTS_SOCK"
  start=$(date +%s)
  pids=()
  for l in $(seq 1 "$lanes"); do
    net="127.0.$((10 + l))"
    export ROCE_EMU_DEVICES="s${l}a=udp:$net.1,s${l}b=udp:$net.2"
    port=$((18600 + l))
    ROCE_EMU_FAULTS="$FAULTS_SOCK,seed=$((2 * l))" target/release/rc_pingpong -d "s${l}a" -g 1 -c --linger 5 \
      -n "$iters" -p "$port" >"$out/srv$l.log" 2>&1 &
    pids+=($!)
    sleep 0.3
    ROCE_EMU_FAULTS="$FAULTS_SOCK,seed=$((2 * l + 1))" target/release/rc_pingpong -d "s${l}b" -g 1 -c --linger 5 \
      -n "$iters" -p "$port" "$net.1" >"$out/cli$l.log" 2>&1 &
    pids+=($!)
  done
  unset ROCE_EMU_DEVICES
  alive=1
  while [ "$alive" = 1 ]; do
    alive=0
    for p in "${pids[@]}"; do
      if kill -0 "$p" 2>/dev/null; then
        alive=1
        r=$(rss_kb "$p"); [ -n "$r" ] && echo "$(( $(date +%s) - start )) $r" >>"$out/rss.$p"
      fi
    done
    # a lane may not outlive three times the planned duration
    if [ $(( $(date +%s) - start )) -gt $(( 3 * secs + 60 )) ]; then
      echo "soak sockets: still running after $(( 3 * secs + 60 )) s: stopping"; kill "${pids[@]}" 2>/dev/null || true
    fi
    sleep 5
  done
  fail=0
  for p in "${pids[@]}"; do wait "$p" || fail=1; done
  total=$(( $(date +%s) - start ))
  worst=0; peak=0
  for f in "$out"/rss.*; do
    g=$(growth "$f"); p=$(sort -k2 -n "$f" | tail -1 | awk '{print $2}')
    [ "$p" -gt "$peak" ] && peak=$p
    if [ "$g" != n/a ] && awk -v g="$g" -v w="$worst" 'BEGIN {exit !(g > w)}'; then worst=$g; fi
  done
  done_iters=0
  for l in $(seq 1 "$lanes"); do
    grep -q "iters in" "$out/cli$l.log" || { echo "  lane $l: client did not finish"; tail -3 "$out/cli$l.log"; fail=1; }
    grep -q "iters in" "$out/srv$l.log" || { echo "  lane $l: server did not finish"; tail -3 "$out/srv$l.log"; fail=1; }
    n=$(awk '/iters in/ {print $1}' "$out/cli$l.log" | head -1); done_iters=$(( done_iters + ${n:-0} ))
    grep -h "invalid data\|with a length other" "$out/cli$l.log" "$out/srv$l.log" && fail=1
  done
  echo "  $done_iters round trips ($(( done_iters * 2 )) messages of 4096 B, every byte checked on arrival) in $total s"
  grep -h "roce faults" "$out"/*.log | awk '{for (i=1;i<=NF;i++) if ($i ~ /=/) {split($i,a,"="); s[a[1]]+=a[2]}}
    END {printf "  injected: rx_dropped %d tx_dropped %d duplicated %d reordered %d corrupted %d\n",
      s["rx_dropped"], s["tx_dropped"], s["duplicated"], s["reordered"], s["corrupted"]}'
  echo "  peak RSS $(( peak / 1024 )) MiB (largest process), worst growth after warm-up $worst (limit 1.10)"
  echo "  logs: $out"
  if [ "$fail" = 0 ] && awk -v g="$worst" 'BEGIN {exit !(g <= 1.10)}'; then
    echo "soak sockets: PASS"
  else
    echo "soak sockets: FAILED"; exit 1
  fi
  ;;
*)
  sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'
  [ -z "$mode" ] || [ "$mode" = -h ] || [ "$mode" = --help ] || exit 2
  ;;
esac
