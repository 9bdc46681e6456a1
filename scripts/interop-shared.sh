#!/bin/bash
# Several of our processes on ONE shared device against the Linux kernel's rxe.
#
#   scripts/interop-shared.sh [N]     (root; N processes per role, default 2)
#
# Our device roce0=udp:192.168.77.1 (INTEROP_SHARED_DEVICE=raw:br0:192.168.77.1 for the raw
# transport: each member's AF_PACKET socket with its own filter) lives in the lab's network namespace (rxelab,
# ../shared/rxelab). N of our ibv_rc_pingpong processes (the drop-in) are clients of
# N rxe servers in guest a, and N more are servers for N rxe clients in guest b: 2N
# members of one device at once, every message checked (-c). Then rping: our server
# and our client as two members of the device, the client's connection going to guest
# a's rping server and the server serving guest b's client. Each of our pcaps is
# checked by ../shared/oracles/oracle.py when it is there. Boots the lab if needed
# (scripts/interop.sh setup builds the tools). Results go to
# /var/tmp/roce-interop-shared/RUN-<time>/. Exits non-zero if any case fails.
set -uo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
SHARED=$ROOT/../shared
LAB=${INTEROP_LAB:-$SHARED/rxelab}
ORACLE=${INTEROP_ORACLE:-$SHARED/oracles/oracle.py}
N=${1:-2}
ITERS=${INTEROP_ITERS:-200}
BIN=$ROOT/target/release
RUN=/var/tmp/roce-interop-shared/RUN-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RUN/pcap"
lab() { "$LAB/lab.sh" "$@"; }
log() { echo "[interop-shared $(date -u +%H:%M:%S)] $*" >&2; }
[ "$(id -u)" = 0 ] || { echo "interop-shared: needs root (network namespace)" >&2; exit 2; }
[ -e "$BIN/libibverbs.so.1" ] || { echo "interop-shared: build first: cargo build --release" >&2; exit 2; }
ip netns exec rxelab true 2>/dev/null || lab boot >&2 || exit 2

ours() { # OUT CMD... : one of our processes in the namespace, on the shared roce0 (PID in LAST)
  local out=$1; shift
  ip netns exec rxelab env LD_LIBRARY_PATH="$BIN" ROCE_EMU_DEVICES=roce0=${INTEROP_SHARED_DEVICE:-udp:192.168.77.1} \
    ROCE_EMU_PCAP="$RUN/pcap" ROCE_EMU_STATS=0 timeout 120 "$@" >"$out" 2>&1 &
  LAST=$!
}

fail=0
pids=(); jobs_a=(); jobs_b=()
log "$N of our clients against rxe servers in guest a, $N of our servers for rxe clients in guest b"
for i in $(seq 1 "$N"); do
  p=$((18700 + i))
  jobs_a+=("$(lab bg a ibv_rc_pingpong -d rxe0 -g 1 -p $p -n "$ITERS" -c)")
done
# (Debian's tools; our side is the drop-in library under them)
for i in $(seq 1 "$N"); do
  s=$((18750 + i))
  ours "$RUN/server-$i.log" ibv_rc_pingpong -d roce0 -g 1 -p $s -n "$ITERS" -c; pids+=("$LAST")
done
sleep 3
for i in $(seq 1 "$N"); do
  p=$((18700 + i)); s=$((18750 + i))
  ours "$RUN/client-$i.log" ibv_rc_pingpong -d roce0 -g 1 -p $p -n "$ITERS" -c 192.168.77.2
  pids+=("$LAST")
  jobs_b+=("$(lab bg b ibv_rc_pingpong -d rxe0 -g 1 -p $s -n "$ITERS" -c 192.168.77.1)")
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
for j in "${jobs_a[@]}"; do lab wait a "$j" 120 >>"$RUN/guest-a.log" 2>&1 || fail=1; done
for j in "${jobs_b[@]}"; do lab wait b "$j" 120 >>"$RUN/guest-b.log" 2>&1 || fail=1; done
for f in "$RUN"/server-*.log "$RUN"/client-*.log; do
  if grep -q " iters in " "$f"; then
    q=$(awk '/local address/ {print $6}' "$f" | tr -d ,); log "$(basename "$f"): ok (local QPN $q)"
  else
    log "$(basename "$f"): FAILED"; sed 's/^/    /' "$f" >&2; fail=1
  fi
done

log "rping: our client to guest a's server, our server for guest b's client, one device"
ja=$(lab bg a rping -s -a 192.168.77.2 -p 7174 -C 3 -v)
ours "$RUN/rping-server.log" rping -s -a 192.168.77.1 -p 7175 -C 3 -v; sp=$LAST
sleep 3
ours "$RUN/rping-client.log" rping -c -a 192.168.77.2 -p 7174 -C 3 -v; cp=$LAST
jb=$(lab bg b rping -c -a 192.168.77.1 -p 7175 -C 3 -v)
wait "$cp" || fail=1
wait "$sp" || fail=1
lab wait a "$ja" 120 >"$RUN/rping-guest-a.log" 2>&1 || fail=1
lab wait b "$jb" 120 >"$RUN/rping-guest-b.log" 2>&1 || fail=1
for f in "$RUN"/rping-server.log "$RUN"/rping-client.log; do
  if [ "$(grep -c 'ping data: rdma-ping-' "$f")" -ge 3 ]; then log "$(basename "$f"): ok"
  else log "$(basename "$f"): FAILED"; sed 's/^/    /' "$f" >&2; fail=1; fi
done

if [ -f "$ORACLE" ] && command -v python3 >/dev/null; then
  for p in "$RUN"/pcap/*.pcap; do
    if python3 "$ORACLE" "$p" >"$p.oracle" 2>&1; then log "oracle: $(basename "$p") ok"
    else log "oracle: $(basename "$p") FAILED (see $p.oracle)"; fail=1; fi
  done
fi
log "results in $RUN"
[ "$fail" = 0 ] && log "PASS" || log "FAIL"
exit "$fail"
