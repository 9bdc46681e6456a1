#!/usr/bin/env bash
# The RDMA middleware, unmodified, on roce-emu devices: UCX, Open MPI,
# libfabric, qperf, fio, rdma-core's CM tools and pyverbs, each under
# `roce run` (which shows the devices where this software looks for them
# and puts the drop-in first on the library path), two processes on one
# host, every result checked. See docs/middleware.md.
#
#   scripts/middleware.sh [ROW ...]      rows: ucx mpi fabric qperf fio cmtools pyverbs perf stress
#                                        (default: all but perf and stress)
#
# Needs `cargo build --release` (the drop-in, libroce_preload.so, roce).
# Installs what it needs (ucx-utils openmpi-bin libopenmpi-dev libfabric-bin
# qperf fio rdmacm-utils python3-pyverbs) when run as root with apt-get;
# otherwise a row whose tools are missing prints SKIPPED. Every process runs
# under `timeout`. Devices: roce0=udp:127.0.97.2, roce1=udp:127.0.97.3 (pyverbs
# uses roce0=udp:127.0.0.1, see scripts/pyverbs-tests.sh), TCP ports
# 19100..19199. Logs: $MIDDLEWARE_LOGS (default a new directory under /tmp).
# Prints one line per case (PASS / FAIL / SKIPPED / N/A with why) and a total;
# exits 1 if a case failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/target/release"
roce="$bin/roce"
[ -x "$roce" ] && [ -e "$bin/libroce_preload.so" ] && [ -e "$bin/libibverbs.so.1" ] ||
  { echo "middleware: build first: cargo build --release" >&2; exit 2; }
logs="${MIDDLEWARE_LOGS:-$(mktemp -d /tmp/roce-middleware.XXXXXX)}"
mkdir -p "$logs"
export ROCE_EMU_DEVICES="${MIDDLEWARE_DEVICES:-roce0=udp:127.0.97.2,roce1=udp:127.0.97.3}"
export ROCE_EMU_STATS=0
# UCX prefers shared memory between processes of one host: the rows name
# their transport (UCX_TLS) as a user of a kernel device would.
unset UCX_NET_DEVICES UCX_UD_VERBS_ETH_DGID_CHECK

pass=0; fail=0; skip=0; na=0
result() { # STATUS NAME [WHY]
  printf '%-8s %-44s %s\n' "$1" "$2" "${3:-}"
  case "$1" in PASS) pass=$((pass + 1)) ;; FAIL) fail=$((fail + 1)) ;; SKIPPED) skip=$((skip + 1)) ;; N/A) na=$((na + 1)) ;; esac
}
have() { command -v "$1" >/dev/null 2>&1; }
install() { # PACKAGE... (root with apt-get only)
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && have apt-get; then
    echo "middleware: installing ${missing[*]}"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >"$logs/apt.log" 2>&1 ||
      echo "middleware: apt-get install failed (see $logs/apt.log)"
  fi
}
run() { "$roce" run -- "$@"; }

# pair NAME SECS SERVER-CMD... -- CLIENT-CMD...: the server in the
# background, the client after 1 s; both must exit 0. Logs NAME.{s,c}.log.
pair() {
  local name=$1 secs=$2; shift 2
  local srv=() ; while [ "$1" != "--" ]; do srv+=("$1"); shift; done; shift
  timeout "$secs" "$roce" run -- "${srv[@]}" >"$logs/$name.s.log" 2>&1 &
  local spid=$!
  sleep 1
  timeout "$secs" "$roce" run -- "$@" >"$logs/$name.c.log" 2>&1
  local crc=$?
  wait "$spid"; local src=$?
  [ "$crc" = 0 ] && [ "$src" = 0 ]
}

row_ucx() {
  install ucx-utils
  have ucx_info && have ucx_perftest || { result SKIPPED "ucx" "ucx-utils not installed"; return; }
  run ucx_info -d >"$logs/ucx_info.log" 2>&1
  local want=("rc_verbs roce0:1" "ud_verbs roce0:1" "rc_verbs roce1:1" "ud_verbs roce1:1") got
  got=$(awk '/Transport:/ {t=$3} /Device:/ {print t, $3}' "$logs/ucx_info.log")
  local ok=1; for w in "${want[@]}"; do grep -qx "$w" <<<"$got" || ok=0; done
  [ $ok = 1 ] && result PASS "ucx_info -d: rc_verbs, ud_verbs on roce0, roce1" ||
    result FAIL "ucx_info -d" "see $logs/ucx_info.log"
  local port=19100 tls t size
  for tls in rc ud; do
    for t in tag_lat tag_bw ucp_put_bw ucp_get ucp_am_lat ucp_add; do
      port=$((port + 1)); size=65536
      case $t in *lat | ucp_add) size=8 ;; esac
      if UCX_TLS=$tls pair "ucx-$tls-$t" 90 ucx_perftest -p $port -- \
        ucx_perftest 127.0.0.1 -p $port -t $t -s $size -n 2000 -w 100 &&
        grep -q '^Final:' "$logs/ucx-$tls-$t.c.log"; then
        result PASS "ucx_perftest UCX_TLS=$tls -t $t -s $size" "$(awk '/^Final:/ {print "typ/avg lat " $3 "/" $4 " us, bw " $6 " MB/s"}' "$logs/ucx-$tls-$t.c.log")"
      else
        result FAIL "ucx_perftest UCX_TLS=$tls -t $t" "see $logs/ucx-$tls-$t.{s,c}.log"
      fi
    done
  done
}

row_mpi() {
  install openmpi-bin libopenmpi-dev ucx-utils
  have mpicc && have mpirun || { result SKIPPED "mpi" "openmpi-bin/libopenmpi-dev not installed"; return; }
  local prog="$logs/mpi_check"
  mpicc -O2 -o "$prog" "$root/scripts/middleware/mpi_check.c" >"$logs/mpicc.log" 2>&1 ||
    { result FAIL "mpi: mpicc mpi_check.c" "see $logs/mpicc.log"; return; }
  local mpirun=(mpirun --allow-run-as-root --oversubscribe -np 4)
  # One-sided operations over UCX too (osc ucx): left to itself Open MPI
  # takes osc/rdma (priority 101) over btl/ofi, whose libfabric provider is
  # tcp on a host address, so MPI_Put/MPI_Get would never touch the device
  # (and that path lost puts, 2 runs in 5: not ours to test here).
  if UCX_TLS=rc,self timeout 300 "$roce" run -- "${mpirun[@]}" --mca pml ucx --mca osc ucx --mca btl self \
      "$prog" >"$logs/mpi-ucx.log" 2>&1 && grep -q "mpi_check: OK (4 ranks)" "$logs/mpi-ucx.log"; then
    result PASS "mpirun -np 4 --mca pml ucx --mca osc ucx" "(UCX_TLS=rc,self) ping-pong 1 B..4 MiB, allreduce, alltoall, put/get"
  else
    result FAIL "mpirun -np 4 --mca pml ucx" "see $logs/mpi-ucx.log"
  fi
  timeout 300 "$roce" run -- "${mpirun[@]}" --mca pml ob1 --mca btl openib,self \
    --mca btl_openib_cpc_include rdmacm "$prog" >"$logs/mpi-openib.log" 2>&1
  if grep -q "mpi_check: OK (4 ranks)" "$logs/mpi-openib.log"; then
    result PASS "mpirun -np 4 --mca btl openib,self"
  elif grep -q "Invalid name: *rdmacm" "$logs/mpi-openib.log"; then
    # RoCE ports need the rdmacm CPC; this build of the openib BTL has only
    # udcm, which takes InfiniBand ports alone: the same on kernel rxe.
    result N/A "mpirun -np 4 --mca btl openib,self" "this Open MPI's openib BTL has no rdmacm CPC (RoCE needs it; rxe alike)"
  else
    result FAIL "mpirun -np 4 --mca btl openib,self" "see $logs/mpi-openib.log"
  fi
}

row_fabric() {
  install libfabric-bin
  have fi_info && have fi_pingpong || { result SKIPPED "libfabric" "libfabric-bin not installed"; return; }
  run fi_info -p verbs >"$logs/fi_info.log" 2>&1
  if grep -q "domain: roce0-dgram$" "$logs/fi_info.log" && grep -q "domain: roce1-dgram$" "$logs/fi_info.log" &&
    grep -q "FI_EP_MSG" "$logs/fi_info.log" && grep -q "FI_EP_RDM" "$logs/fi_info.log"; then
    result PASS "fi_info -p verbs: MSG, RDM, DGRAM endpoints"
  else
    result FAIL "fi_info -p verbs" "see $logs/fi_info.log"
  fi
  local ep port=19140
  for ep in msg rdm dgram; do
    port=$((port + 1))
    # (datagrams stop at the MTU: dgram's largest size is 1k)
    local last=1m; [ $ep = dgram ] && last=1k
    if pair "fi-$ep" 90 fi_pingpong -p verbs -e $ep -B $port -I 200 -- \
      fi_pingpong -p verbs -e $ep -P $port -I 200 127.0.0.1 &&
      grep -qE "^$last +200 +=200" "$logs/fi-$ep.c.log"; then
      result PASS "fi_pingpong -p verbs -e $ep" "$(awk -v l=$last '$1 == l {print l ": " $6 " MB/s"}' "$logs/fi-$ep.c.log")"
    else
      result FAIL "fi_pingpong -p verbs -e $ep" "see $logs/fi-$ep.{s,c}.log"
    fi
  done
}

row_qperf() {
  install qperf
  have qperf || { result SKIPPED "qperf" "qperf not installed"; return; }
  local t port=19160
  for t in rc_lat rc_bw rc_rdma_write_bw rc_rdma_read_lat; do
    port=$((port + 1))
    timeout 60 "$roce" run -- qperf -lp $port >"$logs/qperf-$t.s.log" 2>&1 &
    local spid=$!
    sleep 1
    if timeout 50 "$roce" run -- qperf -lp $port -cm1 127.0.0.1 -t 2 $t >"$logs/qperf-$t.c.log" 2>&1 &&
      grep -qE '(latency|bw) += ' "$logs/qperf-$t.c.log"; then
      result PASS "qperf -cm1 $t" "$(grep -E '(latency|bw) +=' "$logs/qperf-$t.c.log" | tr -s ' ')"
    else
      result FAIL "qperf -cm1 $t" "see $logs/qperf-$t.{s,c}.log"
    fi
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  done
  # qperf's UD tests use no CM and an address handle without a GRH, which
  # RoCE refuses (EINVAL from ibv_create_ah, kernel rxe alike)
  result N/A "qperf -cm1 ud_lat" "qperf's UD tests build no GRH: every RoCE device refuses the AH"
}

row_fio() {
  install fio
  have fio && fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*rdma' ||
    { result SKIPPED "fio rdma" "fio with the rdma engine not installed"; return; }
  local port=19181
  if pair fio 120 fio --name=recv --ioengine=rdma --port=$port --rw=read --bs=64k --size=256m --iodepth=16 -- \
    fio --name=send --ioengine=rdma --hostname=127.0.0.1 --port=$port --verb=write --rw=write \
    --bs=64k --size=256m --iodepth=16 &&
    grep -q "WRITE: bw=" "$logs/fio.c.log"; then
    result PASS "fio --ioengine=rdma (WRITE, 64 KiB, 256 MiB)" "$(grep -o 'WRITE: bw=[^ ]* ([^)]*)' "$logs/fio.c.log")"
  else
    result FAIL "fio --ioengine=rdma" "see $logs/fio.{s,c}.log"
  fi
}

row_cmtools() {
  install rdmacm-utils
  have rdma_xserver && have rdma_xclient || { result SKIPPED "rdma_xserver/xclient" "rdmacm-utils not installed"; return; }
  if pair rdma_x 30 rdma_xserver -p 19185 -- rdma_xclient -s 127.0.97.2 -p 19185; then
    result PASS "rdma_xserver / rdma_xclient"
  else
    result FAIL "rdma_xserver / rdma_xclient" "see $logs/rdma_x.{s,c}.log"
  fi
  # cmtime's rdma-core 44 server never ends by itself (its event loop stops
  # only on an error): the client must end 0 with every step done
  timeout 60 "$roce" run -- cmtime -b 127.0.97.2 -p 19186 >"$logs/cmtime.s.log" 2>&1 &
  local spid=$!
  sleep 1
  if timeout 50 "$roce" run -- cmtime -s 127.0.97.2 -p 19186 -c 100 >"$logs/cmtime.c.log" 2>&1 &&
    grep -q "disconnect" "$logs/cmtime.c.log"; then
    result PASS "cmtime -c 100 (client)" "server ended by its PID (rdma-core 44's never exits)"
  else
    result FAIL "cmtime" "see $logs/cmtime.{s,c}.log"
  fi
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
}

row_pyverbs() {
  install python3-pyverbs rdma-core
  local out
  out=$(ROCE_EMU_DEVICES=roce0=udp:127.0.0.1 "$root/scripts/pyverbs-tests.sh" 2>&1 | tee "$logs/pyverbs.log" | tail -1)
  case "$out" in
    SKIPPED*) result SKIPPED "pyverbs" "$out" ;;
    pyverbs:*)
      local p; p=$(sed -n 's/^pyverbs: \([0-9]*\) passed.*/\1/p' <<<"$out")
      local rdmacm; rdmacm=$(grep '^test_rdmacm ' "$logs/pyverbs.log")
      if [ "${p:-0}" -ge 89 ] && grep -q " 7 passed" <<<"$rdmacm"; then
        result PASS "pyverbs suite ($out)" "test_rdmacm: $(tr -s ' ' <<<"$rdmacm")"
      else
        result FAIL "pyverbs suite ($out)" "see $logs/pyverbs.log"
      fi ;;
    *) result FAIL "pyverbs" "see $logs/pyverbs.log" ;;
  esac
}

# perf: fio's rdma engine and UCX's put_bw/tag_bw at 64 KiB against
# ib_write_bw between the same two processes' device, measured in one run,
# alternated, PERF_ROUNDS rounds (default 5); prints each ratio's
# min/median/max. Like for like: ib_write_bw names its device (-d roce0),
# so UCX gets the same one (UCX_NET_DEVICES=roce0:1, what a user of a
# two-NIC host sets; with both devices UCX stripes its rendezvous over two
# rails, which on one host's cores adds threads, not bandwidth), and fio
# is measured in steady state like `ib_write_bw -D` (time_based with a
# 1 s ramp: fio's rdma engine sleeps 500 ms inside its connect, which a
# fixed-size job counts in its run time).
row_perf() {
  install perftest ucx-utils fio
  have ib_write_bw && have ucx_perftest && have fio ||
    { result SKIPPED "perf" "perftest/ucx-utils/fio not installed"; return; }
  local r port=19190 ref=() put=() tag=() fiob=()
  for r in $(seq "${PERF_ROUNDS:-5}"); do
    port=$((port + 1))
    pair "perf-ib-$r" 60 ib_write_bw -d roce0 -x 1 -s 65536 -D 3 -p $port -- \
      ib_write_bw -d roce0 -x 1 -s 65536 -D 3 -p $port 127.0.0.1 &&
      ref+=("$(awk '/^ 65536/ {print $4}' "$logs/perf-ib-$r.c.log")")
    port=$((port + 1))
    UCX_NET_DEVICES=roce0:1 UCX_TLS=rc pair "perf-put-$r" 60 ucx_perftest -p $port -- \
      ucx_perftest 127.0.0.1 -p $port -t ucp_put_bw -s 65536 -n 20000 -w 1000 &&
      put+=("$(awk '/^Final:/ {print $6 * 1.048576}' "$logs/perf-put-$r.c.log")")
    port=$((port + 1))
    UCX_NET_DEVICES=roce0:1 UCX_TLS=rc pair "perf-tag-$r" 60 ucx_perftest -p $port -- \
      ucx_perftest 127.0.0.1 -p $port -t tag_bw -s 65536 -n 20000 -w 1000 &&
      tag+=("$(awk '/^Final:/ {print $6 * 1.048576}' "$logs/perf-tag-$r.c.log")")
    port=$((port + 1))
    pair "perf-fio-$r" 60 fio --name=recv --ioengine=rdma --port=$port --rw=read --bs=64k --size=1g --iodepth=16 -- \
      fio --name=send --ioengine=rdma --hostname=127.0.0.1 --port=$port --verb=write --rw=write --bs=64k \
      --size=1g --iodepth=16 --time_based --runtime=3 --ramp_time=1 &&
      fiob+=("$(grep -o 'WRITE: bw=[^ ]* (\([0-9.]*\)MB/s)' "$logs/perf-fio-$r.c.log" | sed 's/.*(\([0-9.]*\)MB\/s)/\1/')")
    echo "perf round $r: ib_write_bw ${ref[-1]:-?} put ${put[-1]:-?} tag ${tag[-1]:-?} fio ${fiob[-1]:-?} MB/s"
  done
  python3 - "${ref[*]:-}" "${put[*]:-}" "${tag[*]:-}" "${fiob[*]:-}" <<'EOF'
import statistics, sys
ref, put, tag, fio = ([float(x) for x in a.split()] for a in sys.argv[1:5])
print(f"ib_write_bw 64 KiB MB/s (reference): {ref}")
for name, v in (("UCX ucp_put_bw", put), ("UCX tag_bw", tag), ("fio rdma write", fio)):
    rs = [a / b for a, b in zip(v, ref) if b > 0]
    if not rs:
        print(f"{name}: no result"); continue
    print(f"{name} MB/s: {v}; ratio to ib_write_bw min/median/max "
          f"{min(rs):.2f}/{statistics.median(rs):.2f}/{max(rs):.2f} (target >= 0.8)")
EOF
}

# stress: Open MPI, 4 ranks on roce0 (UCX rc), MPI_Allreduce/Alltoall/Sendrecv
# 1 B..1 MiB for STRESS_SECONDS (60) twice: without the host's credits
# (ROCE_EMU_CREDITS=0, the build before issue 41's step) and with them. For
# each: the host's UDP receive-buffer errors (/proc/net/snmp) and the
# device's retransmit timeouts during the run, and the time per call (mean
# and max). PASS when the run with credits has neither.
udp_rcvbuf_errors() { awk '/^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) if ($i == "RcvbufErrors") c = i; h = 1 } else print $c }' /proc/net/snmp; }
row_stress() {
  install openmpi-bin libopenmpi-dev ucx-utils
  have mpicc && have mpirun || { result SKIPPED "stress" "openmpi-bin/libopenmpi-dev not installed"; return; }
  local prog="$logs/mpi_stress" secs="${STRESS_SECONDS:-60}" mode
  mpicc -O2 -o "$prog" "$root/scripts/middleware/mpi_stress.c" >"$logs/mpicc-stress.log" 2>&1 ||
    { result FAIL "stress: mpicc mpi_stress.c" "see $logs/mpicc-stress.log"; return; }
  for mode in 0 1; do
    local run_dir="$logs/run-stress-$mode"
    mkdir -p "$run_dir"
    local e0; e0=$(udp_rcvbuf_errors)
    ROCE_EMU_RUN_DIR="$run_dir" ROCE_EMU_RUNTIME_DIR="$run_dir" ROCE_EMU_STATS=1 ROCE_EMU_CREDITS=$mode UCX_TLS=rc,self \
      timeout $((secs * 3 + 120)) "$roce" run -- mpirun --allow-run-as-root --oversubscribe -np 4 \
      --mca pml ucx --mca osc ucx --mca btl self "$prog" "$secs" >"$logs/stress-$mode.log" 2>&1
    local rc=$? e1; e1=$(udp_rcvbuf_errors)
    local rto; rto=$(ROCE_EMU_RUNTIME_DIR="$run_dir" "$roce" stats roce0 2>/dev/null | awk '$1 == "retransmit_timeouts:" {print $2; exit}')
    local what="credits on"
    [ "$mode" = 0 ] && what="credits off (ROCE_EMU_CREDITS=0)"
    echo "stress, $what: UDP receive-buffer errors $((e1 - e0)), retransmit timeouts ${rto:-?}"
    grep -E "^(allreduce|alltoall|sendrecv) " "$logs/stress-$mode.log"
    if [ "$rc" != 0 ] || ! grep -q "mpi_stress: OK" "$logs/stress-$mode.log"; then
      result FAIL "stress ($what)" "see $logs/stress-$mode.log"
    elif [ "$mode" = 1 ] && { [ $((e1 - e0)) != 0 ] || [ "${rto:-x}" != 0 ]; }; then
      result FAIL "stress ($what)" "$((e1 - e0)) receive-buffer errors, ${rto:-?} retransmit timeouts"
    else
      result PASS "stress ($what)" "$(grep -o 'mpi_stress: OK.*' "$logs/stress-$mode.log")"
    fi
  done
}

rows=("$@")
[ ${#rows[@]} -eq 0 ] && rows=(ucx mpi fabric qperf fio cmtools pyverbs)
echo "middleware: devices $ROCE_EMU_DEVICES, logs in $logs"
for r in "${rows[@]}"; do
  case "$r" in
    ucx | mpi | fabric | qperf | fio | cmtools | pyverbs | perf | stress) "row_$r" ;;
    *) echo "middleware: unknown row $r (ucx mpi fabric qperf fio cmtools pyverbs perf stress)" >&2; exit 2 ;;
  esac
done
echo "middleware: $pass passed, $fail failed, $skip skipped, $na not applicable"
[ "$fail" = 0 ]
