#!/usr/bin/env bash
# Every Debian rdma-core tool and perftest program in two processes on the
# libibverbs drop-in (server on roce0, client on roce1), each run recorded
# (ROCE_EMU_PCAP) and every capture checked by the independent oracle
# (../shared/oracles/oracle.py: its own decoder and ICRC, and tshark's when
# installed). Prints one line per tool and "N passed, N failed".
#
#   scripts/dropin-tools.sh            (after cargo build --release)
#
# Not part of CI (the test suite runs the same tools without the oracle:
# libibverbs/tests/dropin.rs). Needs ibverbs-utils and perftest.
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
echo "drop-in tools: $pass passed, $fail failed"
[ $fail = 0 ]
