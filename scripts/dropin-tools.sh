#!/usr/bin/env bash
# Every Debian rdma-core tool and perftest program in two processes on the
# libibverbs drop-in (server on roce0, client on roce1), each run recorded
# (ROCE_EMU_PCAP) and every capture checked by the independent oracle
# (../shared/oracles/oracle.py: its own decoder and ICRC, and tshark's when
# installed). Prints one line per tool and "N passed, N failed".
#
#   scripts/dropin-tools.sh            (after cargo build --release)
#   CM_ONLY=1 scripts/dropin-tools.sh  (only the RDMA CM tools)
#
# Not part of CI (the test suite runs the same tools without the oracle:
# libibverbs/tests/dropin.rs and rdmacm.rs). Needs ibverbs-utils and
# perftest; the RDMA CM runs (rping, ucmatose, udaddy, perftest -R) need
# rdmacm-utils and librdmacm.so.1 next to libibverbs.so.1.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rel="$root/target/release"
oracle="${ORACLE:-$root/../shared/oracles/oracle.py}"
[ -e "$rel/libibverbs.so.1" ] || { echo "run cargo build --release first" >&2; exit 2; }
[ -f "$oracle" ] || { echo "note: no oracle at $oracle: captures not checked"; oracle=""; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
export LD_LIBRARY_PATH="$rel" ROCE_EMU_DEVICES="roce0=udp:127.0.50.2,roce1=udp:127.0.50.3" ROCE_EMU_STATS=0
pass=0; fail=0; port=19300
run() { # NAME SERVER-ARGS... -- CLIENT-EXTRA...
  local name=$1; shift
  local tool=$1; shift
  command -v "$tool" >/dev/null || { echo "$name: SKIPPED ($tool not installed)"; return; }
  port=$((port + 1))
  local d="$work/$name"; mkdir -p "$d"
  ROCE_EMU_PCAP="$d" timeout 60 "$tool" -d roce0 -p $port "$@" >"$d/server.log" 2>&1 &
  local spid=$!
  sleep 0.4
  ROCE_EMU_PCAP="$d" timeout 60 "$tool" -d roce1 -p $port "$@" 127.0.0.1 >"$d/client.log" 2>&1
  local crc=$?
  wait $spid; local src=$?
  verdict "$name" "$d" $crc $src
}
verdict() { # NAME DIR CLIENT-RC SERVER-RC
  local name=$1 d=$2 crc=$3 src=$4
  local verdict=ok pk=0
  if [ -n "$oracle" ]; then
    for f in "$d"/*.pcap; do
      if python3 "$oracle" --no-tshark "$f" >"$f.jsonl" 2>"$f.err"; then
        pk=$((pk + $(wc -l <"$f.jsonl")))
      else
        verdict=FAIL
      fi
    done
  fi
  if [ $crc = 0 ] && [ $src = 0 ] && [ $verdict = ok ]; then
    pass=$((pass + 1)); printf '%-28s PASS  oracle=%s (%d packets)\n' "$name" "$verdict" "$pk"
  else
    fail=$((fail + 1)); printf '%-28s FAIL  client=%s server=%s oracle=%s\n' "$name" "$crc" "$src" "$verdict"
    tail -n 3 "$d/client.log" "$d/server.log" | sed "s/^/    /"
  fi
}
# RDMA CM tools (librdmacm.so.1 drop-in): the server binds roce0's address,
# the client reaches it through roce1; the CM MADs (QP1) are in the captures.
run_cm() { # NAME TOOL[:CLIENT-TOOL] "SERVER-ARGS" "CLIENT-ARGS"
  local name=$1 tool=${2%%:*} ctool=${2#*:} sargs=$3 cargs=$4
  command -v "$tool" >/dev/null || { echo "$name: SKIPPED ($tool not installed)"; return; }
  local d="$work/$name"; mkdir -p "$d"
  # shellcheck disable=SC2086
  ROCE_EMU_PCAP="$d" timeout 60 "$tool" $sargs >"$d/server.log" 2>&1 &
  local spid=$!
  sleep 0.5
  # shellcheck disable=SC2086
  ROCE_EMU_PCAP="$d" timeout 60 "$ctool" $cargs >"$d/client.log" 2>&1
  local crc=$?
  wait $spid; local src=$?
  verdict "$name" "$d" $crc $src
}
if [ -z "${CM_ONLY:-}" ]; then
for s in 1 1024 3079; do
  run "rc_pingpong-s$s" ibv_rc_pingpong -g 1 -n 100 -c -s $s
  run "uc_pingpong-s$s" ibv_uc_pingpong -g 1 -n 100 -c -s $s
  run "srq_pingpong-s$s" ibv_srq_pingpong -g 1 -n 100 -c -s $s
done
run rc_pingpong-events ibv_rc_pingpong -g 1 -n 100 -e
run srq_pingpong-events ibv_srq_pingpong -g 1 -n 100 -e
for s in 1 984; do run "ud_pingpong-s$s" ibv_ud_pingpong -g 1 -n 100 -s $s; done
run ud_pingpong-events ibv_ud_pingpong -g 1 -n 100 -e
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_send_lat ib_read_lat ib_atomic_lat; do
  run "$t" $t -x 1 -n 500
done
fi
srv=127.0.50.2
run_cm rping rping "-s -a $srv -p 7550 -C 10 -v" "-c -a $srv -p 7550 -C 10 -v"
run_cm rping-validate-4000 rping "-s -a $srv -p 7551 -C 50 -S 4000 -V" "-c -a $srv -p 7551 -C 50 -S 4000 -V"
run_cm ucmatose ucmatose "-b $srv -p 7552" "-s $srv -p 7552"
run_cm ucmatose-c3-migrate ucmatose "-b $srv -p 7553 -c 3 -C 20 -m" "-s $srv -p 7553 -c 3 -C 20 -m"
run_cm udaddy udaddy "-b $srv -c 2 -C 5" "-s $srv -c 2 -C 5"
run_cm rdma_server-client rdma_server:rdma_client "-s $srv -p 7554" "-s $srv -p 7554"
for t in ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_send_lat ib_read_lat; do
  port=$((port + 1))
  run_cm "$t-R" $t "-R -x 1 -d roce0 -p $port -n 500" "-R -x 1 -d roce1 -p $port -n 500 $srv"
done
echo "drop-in tools: $pass passed, $fail failed"
[ $fail = 0 ]
