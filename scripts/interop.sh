#!/bin/bash
# Interoperability run against the Linux kernel's soft-RoCE (rdma_rxe).
#
#   scripts/interop.sh setup            build our tools (release), set up + boot the lab
#   scripts/interop.sh run [CASE...]    run the matrix (or the cases matching the globs)
#   scripts/interop.sh list             print the case names
#   scripts/interop.sh teardown         stop what an earlier run left (recorded PIDs only)
#
# Our device lives at 192.168.77.1 inside the lab's network namespace (rxelab), once
# over the UDP transport and once over the raw (AF_PACKET) transport on br0; the peers
# are rdma-core's tools on rxe in the lab's qemu guests (../shared/rxelab, lab.sh).
# Results (per case: our log, the guest's log, our pcap, the br0 pcap, oracle output)
# go to $INTEROP_RESULTS (default /var/tmp/roce-interop/RUN-<time>), never into the repo.
# See docs/interop.md.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
# ../shared next to the repository (a worktree under wt/ looks one level further up)
SHARED=$ROOT/../shared; [ -d "$SHARED" ] || SHARED=$ROOT/../../shared
LAB=${INTEROP_LAB:-$SHARED/rxelab}
ORACLE=${INTEROP_ORACLE:-$SHARED/oracles/oracle.py}
NS=${LAB_NS:-rxelab}
HOST=192.168.77.1
GUEST_SRV=a                  # the guest that serves when we are the client
GUEST_CLI=b                  # the guest that connects when we are the server
declare -A GUEST_IP=([a]=192.168.77.2 [b]=192.168.77.3)
ITERS=${INTEROP_ITERS:-20}
LOSS_ITERS=${INTEROP_LOSS_ITERS:-30}
LOSS=${INTEROP_LOSS:-10%}
TRANSPORTS=${INTEROP_TRANSPORTS:-udp raw}
CASE_TIMEOUT=${INTEROP_CASE_TIMEOUT:-60}
PT_ITERS=${INTEROP_PT_ITERS:-200}     # perftest cases: operations per run
PY_ITERS=${INTEROP_PY_ITERS:-100}     # pyverbs-peer cases: operations per run
PEER=$ROOT/scripts/interop/pyverbs_peer.py
FAULTS=${INTEROP_FAULTS:-loss=0.1,dir=both,seed=7}  # our fault injector (ROCE_EMU_FAULTS syntax)
BIN=$ROOT/target/release
STATE=/var/tmp/roce-interop
RUN=${INTEROP_RESULTS:-$STATE/RUN-$(date -u +%Y%m%dT%H%M%SZ)}
PORT=${INTEROP_PORT:-18600}  # TCP rendezvous port, one per case

die() { echo "interop: error: $*" >&2; exit 1; }
log() { echo "[interop $(date -u +%H:%M:%S)] $*" >&2; }
lab() { "$LAB/lab.sh" "$@"; }

# ------------------------------------------------------------ our own processes
PIDS=()
start_bg() { # OUTFILE CMD... : start a host process, record its PID
  local out=$1; shift
  "$@" >"$out" 2>&1 &
  PIDS+=("$!")
  echo "$!" >>"$STATE/pids"
  LAST_PID=$!
}
stop_ours() { # only PIDs this script started, and only if still ours
  local p
  for p in "${PIDS[@]}"; do
    if kill -0 "$p" 2>/dev/null; then kill -TERM "$p" 2>/dev/null || true; fi
  done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  PIDS=()
  : >"$STATE/pids"
}

# ------------------------------------------------------------ setup / teardown

cmd_setup() {
  [ "$(id -u)" = 0 ] || die "must run as root (network namespace, raw sockets, qemu)"
  [ -x "$LAB/lab.sh" ] || die "no lab at $LAB (set INTEROP_LAB)"
  mkdir -p "$STATE"
  log "building our tools (release)"
  (cd "$ROOT" && timeout 1800 cargo build --release -q -p roce-examples -p roce-cli -p roce-libibverbs) || die "cargo build failed"
  local st; st=$(timeout 30 "$LAB/lab.sh" status 2>/dev/null || true)
  if grep -q "vm a: running" <<<"$st" && grep -q "vm b: running" <<<"$st"; then
    log "lab already running (not ours to stop)"
  else
    log "lab setup + boot"
    timeout 1800 "$LAB/lab.sh" setup >&2 || die "lab.sh setup failed"
    timeout 600 "$LAB/lab.sh" boot >&2 || die "lab.sh boot failed"
    touch "$STATE/lab.booted-by-interop"
  fi
}

cmd_teardown() {
  mkdir -p "$STATE"
  if [ -s "$STATE/pids" ]; then
    local p
    while read -r p; do
      # only our binaries (rc_pingpong & co. under ip netns exec / timeout)
      if [ -r "/proc/$p/comm" ] && grep -qE '^(ip|timeout|rc_pingpong|uc_pingpong|ud_pingpong|srq_pingpong|roce|rdma_write|rdma_read|atomics|ibv_rc_pingpong|ib_write_bw)$' "/proc/$p/comm"; then
        kill -TERM "$p" 2>/dev/null || true
      fi
    done <"$STATE/pids"
    : >"$STATE/pids"
  fi
  if [ -e "$STATE/lab.booted-by-interop" ]; then
    log "lab teardown (we booted it)"
    # the qemu PIDs lab.sh recorded: wait until they are really gone
    local qpids=() f
    for f in "${LAB_DIR:-/var/tmp/rxelab}"/run/pids/vm-*.pid; do
      [ -e "$f" ] && qpids+=("$(cat "$f")")
    done
    timeout 120 "$LAB/lab.sh" teardown >&2 || true
    for _ in $(seq 1 100); do
      local alive=0
      for f in "${qpids[@]}"; do
        # alive = still qemu and not a zombie waiting to be reaped
        grep -qs qemu "/proc/$f/comm" && ! grep -qs ') Z ' "/proc/$f/stat" && alive=1
      done
      [ $alive = 0 ] && break
      sleep 0.2
    done
    rm -f "$STATE/lab.booted-by-interop"
  fi
}

# ------------------------------------------------------------ cases
# name: TRANSPORT-TOOL-ROLE-SIZE, ROLE = srv (we serve, rxe connects) | cli (rxe serves)
SIZES_RC="1 1023 1024 3079"
SIZES_UD="1 1023 1024"       # UD messages are limited to one MTU
all_cases() {
  local t k r s sizes
  for t in $TRANSPORTS; do
    for k in rc uc ud; do
      sizes=$SIZES_RC; [ $k = ud ] && sizes=$SIZES_UD
      for r in srv cli; do
        for s in $sizes; do echo "$t-$k-$r-$s"; done
      done
    done
    # recovery: 10 % loss (tc netem on the guest's eth0, both directions
    # affected through its egress), 4 KiB messages, retransmission must finish
    echo "$t-rc-srv-loss"; echo "$t-rc-cli-loss"
    # (our fault injector runs in the pt-*-faults cases below: rc_pingpong
    # cannot take ACK loss, see run_pingpong; INTEROP_PP_FAULTS=1 adds the
    # rc-*-faults cases anyway)
    if [ "${INTEROP_PP_FAULTS:-0}" = 1 ]; then echo "$t-rc-srv-faults"; echo "$t-rc-cli-faults"; fi
    # SRQ: 4 RC QPs sharing one SRQ on each side
    echo "$t-srq-srv-4096"; echo "$t-srq-cli-4096"
    # perftest on rxe against `roce perf`: RDMA WRITE, READ, SEND, FETCH_AND_ADD,
    # CMP_AND_SWAP, SEND latency; then RNR, bad R_Key, 8 QPs (-q 8), injected loss
    for r in srv cli; do
      for s in write read send atomic cas lat rnr badrkey q8; do echo "$t-pt-$r-$s"; done
    done
    echo "$t-pt-cli-faults"; echo "$t-pt-srv-faults"
    # pyverbs on rxe against `roce perf`, every byte checked on both sides:
    # RDMA WRITE, WRITE_WITH_IMM, READ, FETCH_AND_ADD, CMP_AND_SWAP
    for r in srv cli; do
      for s in write imm read faa cas; do echo "$t-py-$r-$s"; done
    done
    # RDMA CM (CM MADs over QP1): our rping / udaddy, and Debian's rping /
    # udaddy / ib_write_bw -R on the librdmacm drop-in (d*), against
    # rdmacm-utils' rping / udaddy and perftest -R on rxe, both roles
    for r in srv cli; do
      for s in rping udaddy drping dudaddy dmatose; do echo "$t-cm-$r-$s"; done
    done
    echo "$t-cm-srv-dwbw"; echo "$t-cm-srv-dslat"
    # UD multicast (rdmacm-utils' mckey, ours on the drop-ins; the UDP
    # transport only: a raw device does not join groups yet): we send to
    # both guests' receivers (snd), or guest a sends to us and guest b (rcv)
    if [ "$t" = udp ]; then echo "$t-mc-snd-mckey"; echo "$t-mc-rcv-mckey"; fi
    # perftest -R as the client makes a second connection 2-4 ms after its
    # exchange; a server on a qemu TCG guest often listens again only later
    # and answers REJ 8 (perftest's own race, docs/interop.md):
    # INTEROP_CM_RACY=1 adds the case anyway
    if [ "${INTEROP_CM_RACY:-0}" = 1 ]; then echo "$t-cm-cli-dwbw"; echo "$t-cm-cli-dslat"; fi
    # rsockets (rdmacm-utils' rstream, riostream and rcopy on our librdmacm
    # drop-in against rdma-core's rsockets on rxe), both roles
    for r in srv cli; do
      for s in rstream riostream rcopy; do echo "$t-rs-$r-$s"; done
      # datagram rsockets: rdma-core 44's own udpong fails between the two
      # rxe guests (rconnect: No such file or directory), so it has no peer
      # here; INTEROP_RS_UDPONG=1 adds the cases anyway
      if [ "${INTEROP_RS_UDPONG:-0}" = 1 ]; then echo "$t-rs-$r-udpong"; fi
    done
    # unmodified Debian tools on the host through the libibverbs drop-in
    # (LD_LIBRARY_PATH=target/release) against the same tools on rxe
    for r in srv cli; do
      for s in rc wbw; do echo "$t-dropin-$r-$s"; done
    done
  done
}

guest_wait_port() { # VM PORT
  lab shell -t 40 "$1" "lab-waitport $2 30" >/dev/null 2>&1
}

# our device spec for transport $1 (name roce0)
dev_env() {
  case $1 in
    udp) echo "roce0=udp:$HOST" ;;
    raw) echo "roce0=raw:br0:$HOST" ;;
    *) die "unknown transport $1" ;;
  esac
}

run_pingpong() { # CASE DIR -> 0 pass / 1 fail ; writes DIR/{ours,guest}.log
  local c=$1 d=$2 t k r s port=$PORT
  IFS=- read -r t k r s <<<"$c"
  PORT=$((PORT + 1))
  local iters=$ITERS size=$s extra=""
  [ "$s" = loss ] && { size=4096; iters=$LOSS_ITERS; }
  [ "$s" = faults ] && { size=4096; iters=$LOSS_ITERS; }
  [ "$k" = srq ] && extra="-q 4"
  # shellcheck disable=SC2206
  local ours=("$BIN/${k}_pingpong" -d roce0 -g 1 -s "$size" -n "$iters" -c -p "$port" $extra)
  # Our injector, in the directions that cannot drop the very last ACK of
  # the run (the peer that sent it exits at once, and rc_pingpong's other
  # side would retransmit its last SEND forever): when we serve, the last
  # message is ours and the guest ACKs it, so we drop only what we send;
  # when the guest serves, we drop only what we receive.
  if [ "$s" = faults ]; then
    if [ "$r" = srv ]; then ours+=(--faults "$FAULTS,dir=tx"); else ours+=(--faults "$FAULTS,dir=rx"); fi
  fi
  local theirs="timeout $((CASE_TIMEOUT - 10)) ibv_${k}_pingpong -d rxe0 -g \$(lab-gid) -s $size -n $iters -c -p $port $extra"
  if [ "$s" = loss ]; then # netem on, the tool, netem off (also when the tool fails)
    # rc_pingpong cannot take ACK loss: each side exits as soon as its own
    # last SEND is ACKed and its last receive is in, so a lost ACK for the
    # other side's last SEND leaves that side retransmitting to a QP that is
    # gone (rxe's and ours retry forever: hang until the case timeout; seen
    # in runs 1 and 5, both roles). RoCE ACKs (BTH opcode 0x11 right after
    # the UDP header) skip netem, every other RoCE packet goes through it.
    local qdisc="tc qdisc add dev eth0 root handle 1: prio; tc qdisc add dev eth0 parent 1:3 handle 30: netem loss $LOSS"
    qdisc="$qdisc; tc filter add dev eth0 parent 1:0 prio 1 protocol ip u32 match ip dport 4791 0xffff match u8 0x11 0xff at 28 flowid 1:1"
    qdisc="$qdisc; tc filter add dev eth0 parent 1:0 prio 2 protocol ip u32 match ip dport 4791 0xffff flowid 1:3"
    theirs="$qdisc; $theirs \"\$@\"; rc=\$?; tc -s qdisc show dev eth0; tc qdisc del dev eth0 root; exit \$rc"
    theirs="bash -c '$theirs' x"
  fi
  run_both "$t" "$r" "$d" "$port" "$theirs" - "${ours[@]}"
  local ours_rc=$OURS_RC guest_rc=$GUEST_RC
  # both sides must finish cleanly and report the exchange
  [ "$ours_rc" = 0 ] && [ "$guest_rc" = 0 ] \
    && grep -q "^$iters iters in" "$d/ours.log" && grep -q "^$iters iters in" "$d/guest.log" \
    || return 1
  if [ "$s" = faults ]; then # the injector must really have dropped datagrams
    grep -E "^roce faults.* (rx|tx)_dropped=[1-9]" "$d/ours.log" >"$d/expect.txt" || return 1
  fi
}

# One of our tools (host side) against one guest tool (theirs), roles by R:
# srv = we serve (with SERVE added to our command, `-` for nothing), guest b
# connects; cli = guest a serves, we connect (the guest's address added).
# Sets OURS_RC and GUEST_RC; writes DIR/ours.log, DIR/guest.log, DIR/status.
run_both() { # T R DIR PORT THEIRS SERVE OURS...
  local t=$1 r=$2 d=$3 port=$4 theirs=$5 serve=$6; shift 6
  local ours=("$@") job srv=()
  [ "$serve" = - ] || srv=("$serve")
  local env=(env ROCE_EMU_DEVICES="$(dev_env "$t")" ROCE_EMU_PCAP="$d")
  OURS_RC=0 GUEST_RC=0
  if [ "$r" = srv ]; then
    start_bg "$d/ours.log" ip netns exec "$NS" timeout "$CASE_TIMEOUT" "${env[@]}" "${ours[@]}" \
      ${srv[@]+"${srv[@]}"}
    local pid=$LAST_PID i
    for i in $(seq 1 100); do
      ip netns exec "$NS" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    echo "+ $theirs $HOST" >"$d/guest.log"
    lab shell -t "$CASE_TIMEOUT" "$GUEST_CLI" "$theirs $HOST" >>"$d/guest.log" 2>&1 || GUEST_RC=$?
    wait "$pid" || OURS_RC=$?
  else
    echo "+ $theirs" >"$d/guest.log"
    job=$(lab bg "$GUEST_SRV" "$theirs")
    guest_wait_port "$GUEST_SRV" "$port" || true
    ip netns exec "$NS" timeout "$CASE_TIMEOUT" "${env[@]}" "${ours[@]}" "${GUEST_IP[$GUEST_SRV]}" \
      >"$d/ours.log" 2>&1 || OURS_RC=$?
    lab wait "$GUEST_SRV" "$job" "$CASE_TIMEOUT" >>"$d/guest.log" 2>&1 || GUEST_RC=$?
  fi
  echo "ours_rc=$OURS_RC guest_rc=$GUEST_RC" >"$d/status"
}

# perftest (rxe, guest) against `roce perf` (us): CASE = T-pt-ROLE-OP
run_perftest() { # CASE DIR -> 0 pass / 1 fail
  local c=$1 d=$2 t k r s port=$PORT
  IFS=- read -r t k r s <<<"$c"
  PORT=$((PORT + 1))
  local n=$PT_ITERS tool ptargs oargs
  case $s in
    write|badrkey|faults) tool=ib_write_bw; ptargs="-s 4096 -n $n"; oargs=(write -s 4096 -n "$n") ;;
    q8) # perftest's multi-QP exchange, both roles (8 QPs, one destination each)
      tool=ib_write_bw; ptargs="-s 4096 -n $n -q 8"; oargs=(write -s 4096 -n "$n" -q 8) ;;
    read) tool=ib_read_bw; ptargs="-s 4096 -n $n"; oargs=(read -s 4096 -n "$n") ;;
    send) tool=ib_send_bw; ptargs="-s 4096 -n $n"; oargs=(send -s 4096 -n "$n") ;;
    atomic) tool=ib_atomic_bw; ptargs="-n $n"; oargs=(atomic -n "$n") ;;
    cas) tool=ib_atomic_bw; ptargs="-n $n -A CMP_AND_SWAP"; oargs=(atomic -n "$n" -A CMP_AND_SWAP) ;;
    lat) tool=ib_send_lat; ptargs="-s 8 -n $((n / 2))"; oargs=(lat send -s 8 -n "$((n / 2))") ;;
    rnr) # the receiver (rxe when we are the client, us when we serve) posts ONE receive
      tool=ib_send_bw; ptargs="-s 1024 -n 50"; oargs=(send -s 1024 -n 50)
      # (ours also re-posts 5 ms late: on this host it is otherwise faster than
      # rxe under qemu TCG, and the RNR NAKs would depend on luck)
      if [ "$r" = cli ]; then ptargs="$ptargs --rx-depth 1"; else oargs+=(-r 1 --recv-delay 5); fi ;;
    *) die "unknown perftest case $c" ;;
  esac
  [ "$s" = badrkey ] && oargs+=(--bad-rkey)
  [ "$s" = faults ] && oargs+=(--faults "$FAULTS")
  local ours=("$BIN/roce" perf "${oargs[@]}" -d roce0 -x 1 -p "$port")
  local theirs="timeout $((CASE_TIMEOUT - 10)) $tool -d rxe0 -x \$(lab-gid) -p $port $ptargs"
  run_both "$t" "$r" "$d" "$port" "$theirs" --server "${ours[@]}"
  local ours_rc=$OURS_RC guest_rc=$GUEST_RC
  local ok=1
  case $s in
    badrkey)
      if [ "$r" = cli ]; then
        # our WRITE completes with REM_ACCESS_ERR; perftest's server ends normally
        [ "$ours_rc" = 1 ] && [ "$guest_rc" = 0 ] \
          && grep -q "status 10 (remote access error)" "$d/ours.log" || ok=0
      else
        # rxe's WRITE completes with an error; we NAKed it (counter naks_sent)
        [ "$guest_rc" != 0 ] && grep -qi "status 10\|REM_ACCESS\|remote access" "$d/guest.log" \
          && grep -qE "counters:.* naks_sent=[1-9]" "$d/ours.log" || ok=0
      fi ;;
    *)
      [ "$ours_rc" = 0 ] && [ "$guest_rc" = 0 ] \
        && grep -qE "result: .*checks_ok=[1-9][0-9]* checks_failed=0 error=no" "$d/ours.log" || ok=0 ;;
  esac
  [ "$s" = faults ] && { grep -E "^roce faults.* (rx|tx)_dropped=[1-9]" "$d/ours.log" >"$d/expect.txt" || ok=0; }
  [ $ok = 1 ]
}

# the pyverbs peer (rxe, guest) against `roce perf` (us): CASE = T-py-ROLE-OP.
# Both sides recognise each other (the roce-emu mark in perftest's exchange)
# and check every byte: a case passes only when both report checks and none failed.
run_pyverbs() { # CASE DIR -> 0 pass / 1 fail
  local c=$1 d=$2 t k r s port=$PORT
  IFS=- read -r t k r s <<<"$c"
  PORT=$((PORT + 1))
  local n=$PY_ITERS size=4096 oargs
  case $s in
    write) oargs=(write -s 4096 -n "$n") ;;
    imm) oargs=(write -s 4096 -n "$n" --imm) ;;
    read) oargs=(read -s 4096 -n "$n") ;;
    faa) oargs=(atomic -n "$n"); size=8 ;;
    cas) oargs=(atomic -n "$n" -A CMP_AND_SWAP); size=8 ;;
    *) die "unknown pyverbs case $c" ;;
  esac
  # the guests see the lab's 9p share at /lab
  cp "$PEER" "${LAB_DIR:-/var/tmp/rxelab}/run/share/pyverbs_peer.py" || return 1
  local ours=("$BIN/roce" perf "${oargs[@]}" -d roce0 -x 1 -p "$port")
  local theirs="timeout $((CASE_TIMEOUT - 10)) python3 /lab/pyverbs_peer.py --op $s -d rxe0 -x \$(lab-gid) -p $port -s $size -n $n --timeout $((CASE_TIMEOUT - 15))"
  run_both "$t" "$r" "$d" "$port" "$theirs" --server "${ours[@]}"
  local ours_rc=$OURS_RC guest_rc=$GUEST_RC
  local good='result: .*peer=roce .*checks_ok=[1-9][0-9]* checks_failed=0 error=no'
  [ "$ours_rc" = 0 ] && [ "$guest_rc" = 0 ] && grep -qE "$good" "$d/ours.log" && grep -qE "$good" "$d/guest.log"
}

# facts the pcap of a case must show (after the oracle ran): RNR NAKs, access NAKs
check_expect() { # CASE DIR
  local c=$1 d=$2 f=$2/br0.oracle.jsonl n
  [ -s "$f" ] || f=$(ls "$d"/*.oracle.jsonl 2>/dev/null | head -1)
  case $c in
    *-py-*-imm) # WRITE_WITH_IMM on the wire (4 KiB messages: RDMA_WRITE_LAST_WITH_IMMEDIATE, opcode 9)
      n=$(grep -c '"opcode": 9,' "$f" || true)
      echo "RDMA WRITE LAST with immediate in $(basename "$f"): $n" >>"$d/expect.txt"; [ "$n" -gt 0 ] ;;
    *-pt-*-rnr)
      n=$(grep -c '"kind": "RNR_NAK"' "$f" || true)
      echo "RNR NAKs in $(basename "$f"): $n" >>"$d/expect.txt"; [ "$n" -gt 0 ] ;;
    *-pt-*-badrkey)
      n=$(grep -c '"nak": "REMOTE_ACCESS_ERROR"' "$f" || true)
      echo "REMOTE_ACCESS_ERROR NAKs in $(basename "$f"): $n" >>"$d/expect.txt"; [ "$n" -gt 0 ] ;;
    *) return 0 ;;
  esac
}

check_pcaps() { # DIR -> 0 if every pcap there passes the oracle and has RoCE packets
  local d=$1 f n ok=0 any=0
  for f in "$d"/*.pcap; do
    [ -e "$f" ] || continue
    any=1
    if timeout 120 python3 "$ORACLE" --no-tshark "$f" >"${f%.pcap}.oracle.jsonl" 2>"${f%.pcap}.oracle.err"; then
      n=$(wc -l <"${f%.pcap}.oracle.jsonl")
      echo "$(basename "$f"): oracle ok, $n RoCE packets" >>"$d/oracle.txt"
      [ "$n" -gt 0 ] || ok=1
    else
      echo "$(basename "$f"): ORACLE FAILED (see ${f##*/}.oracle.*)" >>"$d/oracle.txt"
      ok=1
    fi
  done
  [ $any = 1 ] || { echo "no pcap" >>"$d/oracle.txt"; ok=1; }
  return $ok
}

# Debian's ibv_rc_pingpong / ib_write_bw on the host, unmodified, through
# the drop-in, against the same tool on rxe: CASE = T-dropin-ROLE-TOOL
run_dropin() { # CASE DIR -> 0 pass / 1 fail
  local c=$1 d=$2 t k r s port=$PORT
  IFS=- read -r t k r s <<<"$c"
  PORT=$((PORT + 1))
  local ours theirs
  if [ "$s" = rc ]; then
    ours=(env LD_LIBRARY_PATH="$BIN" ibv_rc_pingpong -d roce0 -g 1 -s 4096 -n "$ITERS" -c -p "$port")
    theirs="timeout $((CASE_TIMEOUT - 10)) ibv_rc_pingpong -d rxe0 -g \$(lab-gid) -s 4096 -n $ITERS -c -p $port"
  else
    ours=(env LD_LIBRARY_PATH="$BIN" ib_write_bw -d roce0 -x 1 -s 4096 -n "$PT_ITERS" -p "$port")
    theirs="timeout $((CASE_TIMEOUT - 10)) ib_write_bw -d rxe0 -x \$(lab-gid) -s 4096 -n $PT_ITERS -p $port"
  fi
  run_both "$t" "$r" "$d" "$port" "$theirs" - "${ours[@]}"
  [ "$OURS_RC" = 0 ] && [ "$GUEST_RC" = 0 ] || return 1
  if [ "$s" = rc ]; then
    grep -q "^$ITERS iters in" "$d/ours.log" && grep -q "^$ITERS iters in" "$d/guest.log"
  else
    grep -qE '^ *4096 +[0-9]+ ' "$d/ours.log" && grep -qE '^ *4096 +[0-9]+ ' "$d/guest.log"
  fi
}

# UD multicast with rdmacm-utils' mckey: CASE = T-mc-snd|rcv-mckey. The
# group is 239.77.0.N (a case's own), every member joins with
# rdma_join_multicast (rxe: the kernel's CM, IGMP on eth0; ours: the
# group's socket on br0's address); 10 datagrams, every receiver must get
# all of them. snd: we send (send-only member), guests a and b receive;
# rcv: guest a sends, we and guest b receive.
guest_joined() { # VM GROUP: wait (30 s at most) until the guest's kernel joined GROUP
  # (/proc/net/igmp lists it as little-endian hex once the kernel CM's join is done)
  local hex; hex=$(python3 -c "import socket,struct;print('%08X'%struct.unpack('<I',socket.inet_aton('$2'))[0])")
  lab shell -t 40 "$1" "for i in \$(seq 150); do grep -qi $hex /proc/net/igmp && exit 0; sleep 0.2; done; exit 1" >/dev/null 2>&1
}
host_joined() { # GROUP: wait (30 s at most) until our device's group socket is bound in the netns
  local hex i; hex=$(python3 -c "import socket,struct;print('%08X'%struct.unpack('<I',socket.inet_aton('$1'))[0])")
  for i in $(seq 150); do
    ip netns exec "$NS" grep -qi "$hex:12B7" /proc/net/udp && return 0
    sleep 0.2
  done
  return 1
}

run_mcast() { # CASE DIR -> 0 pass / 1 fail
  local c=$1 d=$2 t k r s
  IFS=- read -r t k r s <<<"$c"
  PORT=$((PORT + 1))
  local grp=239.77.0.$((PORT % 250 + 1)) n=10
  local env=(env ROCE_EMU_DEVICES="$(dev_env "$t")" ROCE_EMU_PCAP="$d" LD_LIBRARY_PATH="$BIN")
  local rx="timeout $((CASE_TIMEOUT - 10)) mckey -m $grp -C $n"
  OURS_RC=0 GUEST_RC=0
  : >"$d/guest.log"
  if [ "$r" = snd ]; then
    local ja jb
    ja=$(lab bg a "$rx -b ${GUEST_IP[a]}"); jb=$(lab bg b "$rx -b ${GUEST_IP[b]}")
    # the guests' joins (qemu TCG: slow, and slower on a loaded host)
    guest_joined a "$grp" || echo "guest a did not join $grp in 30 s" >>"$d/guest.log"
    guest_joined b "$grp" || echo "guest b did not join $grp in 30 s" >>"$d/guest.log"
    ip netns exec "$NS" timeout "$CASE_TIMEOUT" "${env[@]}" mckey -m "$grp" -b "$HOST" -s -o -C "$n" >"$d/ours.log" 2>&1 || OURS_RC=$?
    lab wait a "$ja" "$CASE_TIMEOUT" >>"$d/guest.log" 2>&1 || GUEST_RC=$?
    lab wait b "$jb" "$CASE_TIMEOUT" >>"$d/guest.log" 2>&1 || GUEST_RC=$?
    echo "ours_rc=$OURS_RC guest_rc=$GUEST_RC" >"$d/status"
    [ "$OURS_RC" = 0 ] && [ "$GUEST_RC" = 0 ] || return 1
    [ "$(grep -c 'data transfers complete' "$d/guest.log")" = 2 ]
  else
    start_bg "$d/ours.log" ip netns exec "$NS" timeout "$CASE_TIMEOUT" "${env[@]}" mckey -m "$grp" -b "$HOST" -C "$n"
    local pid=$LAST_PID jb
    jb=$(lab bg b "$rx -b ${GUEST_IP[b]}")
    host_joined "$grp" || echo "we did not join $grp in 30 s" >>"$d/guest.log"
    guest_joined b "$grp" || echo "guest b did not join $grp in 30 s" >>"$d/guest.log"
    lab shell -t "$CASE_TIMEOUT" a "timeout $((CASE_TIMEOUT - 10)) mckey -m $grp -b ${GUEST_IP[a]} -s -C $n" >>"$d/guest.log" 2>&1 || GUEST_RC=$?
    lab wait b "$jb" "$CASE_TIMEOUT" >>"$d/guest.log" 2>&1 || GUEST_RC=$?
    wait "$pid" || OURS_RC=$?
    echo "ours_rc=$OURS_RC guest_rc=$GUEST_RC" >"$d/status"
    [ "$OURS_RC" = 0 ] && [ "$GUEST_RC" = 0 ] || return 1
    grep -q 'data transfers complete' "$d/ours.log" && [ "$(grep -c 'data transfers complete' "$d/guest.log")" = 2 ]
  fi
}

# Our rping/udaddy (RDMA CM over QP1) against rdmacm-utils on rxe: CASE =
# T-cm-ROLE-TOOL. No TCP side channel: the connection is the CM's REQ/REP/RTU
# (rping) or SIDR_REQ/SIDR_REP (udaddy), so the servers are waited for with a
# pause, not a port check.
run_cm() { # CASE DIR -> 0 pass / 1 fail
  local c=$1 d=$2 t k r s cport=$PORT
  IFS=- read -r t k r s <<<"$c"
  PORT=$((PORT + 1))
  local env=(env ROCE_EMU_DEVICES="$(dev_env "$t")" ROCE_EMU_PCAP="$d")
  local ours theirs srv_ip n=10
  OURS_RC=0 GUEST_RC=0
  if [ "$r" = srv ]; then srv_ip=$HOST; else srv_ip=${GUEST_IP[$GUEST_SRV]}; fi
  # d*: the Debian tool itself, on the drop-ins (libibverbs.so.1 and
  # librdmacm.so.1 from target/release)
  local tool=${s#d} dropin=()
  [ "$tool" != "$s" ] && dropin=(env LD_LIBRARY_PATH="$BIN")
  [ "$s" = dwbw ] && tool=wbw
  [ "$s" = dslat ] && tool=slat
  [ "$s" = dmatose ] && tool=ucmatose
  local rp=("$BIN/rping") ud=("$BIN/udaddy")
  if [ ${#dropin[@]} -gt 0 ]; then rp=("${dropin[@]}" rping); ud=("${dropin[@]}" udaddy); fi
  if [ "$tool" = wbw ]; then
    # perftest -R: the connection (and perftest's own exchange) through the CM
    if [ "$r" = srv ]; then
      ours=("${dropin[@]}" ib_write_bw -R -d roce0 -x 1 -s 4096 -n "$PT_ITERS" -p "$cport")
      theirs="timeout $((CASE_TIMEOUT - 10)) ib_write_bw -R -d rxe0 -x \$(lab-gid) -s 4096 -n $PT_ITERS -p $cport $HOST"
    else
      ours=("${dropin[@]}" ib_write_bw -R -d roce0 -x 1 -s 4096 -n "$PT_ITERS" -p "$cport" "$srv_ip")
      theirs="timeout $((CASE_TIMEOUT - 10)) ib_write_bw -R -d rxe0 -x \$(lab-gid) -s 4096 -n $PT_ITERS -p $cport"
    fi
  elif [ "$tool" = slat ]; then
    if [ "$r" = srv ]; then
      ours=("${dropin[@]}" ib_send_lat -R -d roce0 -x 1 -s 8 -n "$PT_ITERS" -p "$cport")
      theirs="timeout $((CASE_TIMEOUT - 10)) ib_send_lat -R -d rxe0 -x \$(lab-gid) -s 8 -n $PT_ITERS -p $cport $HOST"
    else
      ours=("${dropin[@]}" ib_send_lat -R -d roce0 -x 1 -s 8 -n "$PT_ITERS" -p "$cport" "$srv_ip")
      theirs="timeout $((CASE_TIMEOUT - 10)) ib_send_lat -R -d rxe0 -x \$(lab-gid) -s 8 -n $PT_ITERS -p $cport"
    fi
  elif [ "$tool" = ucmatose ]; then # 2 connections, 10 messages each way
    if [ "$r" = srv ]; then
      ours=("${dropin[@]}" ucmatose -b "$HOST" -p "$cport" -c 2 -C "$n")
      theirs="timeout $((CASE_TIMEOUT - 10)) ucmatose -s $HOST -p $cport -c 2 -C $n"
    else
      ours=("${dropin[@]}" ucmatose -s "$srv_ip" -p "$cport" -c 2 -C "$n")
      theirs="timeout $((CASE_TIMEOUT - 10)) ucmatose -b $srv_ip -p $cport -c 2 -C $n"
    fi
  elif [ "$tool" = rping ]; then
    if [ "$r" = srv ]; then
      ours=("${rp[@]}" -s -a "$HOST" -p "$cport" -v)
      theirs="timeout $((CASE_TIMEOUT - 10)) rping -c -a $HOST -p $cport -C $n -v -V"
    else
      ours=("${rp[@]}" -c -a "$srv_ip" -p "$cport" -C "$n" -v -V)
      theirs="timeout $((CASE_TIMEOUT - 10)) rping -s -a $srv_ip -p $cport -v"
    fi
  else
    if [ "$r" = srv ]; then
      # (rdmacm-utils' udaddy has no port option: 7174, ours' default)
      ours=("${ud[@]}" -b "$HOST" -C "$n")
      theirs="timeout $((CASE_TIMEOUT - 10)) udaddy -s $HOST -C $n"
    else
      ours=("${ud[@]}" -s "$srv_ip" -C "$n")
      theirs="timeout $((CASE_TIMEOUT - 10)) udaddy -b $srv_ip -C $n"
    fi
  fi
  if [ "$r" = srv ]; then
    start_bg "$d/ours.log" ip netns exec "$NS" timeout "$CASE_TIMEOUT" "${env[@]}" "${ours[@]}"
    local pid=$LAST_PID
    sleep 1
    echo "+ $theirs" >"$d/guest.log"
    lab shell -t "$CASE_TIMEOUT" "$GUEST_CLI" "$theirs" >>"$d/guest.log" 2>&1 || GUEST_RC=$?
    wait "$pid" || OURS_RC=$?
  else
    echo "+ $theirs" >"$d/guest.log"
    local job; job=$(lab bg "$GUEST_SRV" "$theirs")
    # until the guest's rdma_cm id listens (rdma resource show cm_id)
    lab shell -t 40 "$GUEST_SRV" "lab-wait-cm 30" >/dev/null 2>&1 || sleep 3
    ip netns exec "$NS" timeout "$CASE_TIMEOUT" "${env[@]}" "${ours[@]}" >"$d/ours.log" 2>&1 || OURS_RC=$?
    lab wait "$GUEST_SRV" "$job" "$CASE_TIMEOUT" >>"$d/guest.log" 2>&1 || GUEST_RC=$?
  fi
  echo "ours_rc=$OURS_RC guest_rc=$GUEST_RC" >"$d/status"
  [ "$OURS_RC" = 0 ] && [ "$GUEST_RC" = 0 ] || return 1
  if [ "$tool" = rping ]; then # the client printed every ping, checked (-V)
    local cl=$d/guest.log; [ "$r" = cli ] && cl=$d/ours.log
    [ "$(grep -c '^ping data: rdma-ping-' "$cl")" = "$n" ]
  elif [ "$tool" = wbw ]; then
    grep -qE '^ *4096 +[0-9]+ ' "$d/ours.log" && grep -qE '^ *4096 +[0-9]+ ' "$d/guest.log"
  elif [ "$tool" = slat ]; then
    grep -qE '^ *8 +[0-9]+ ' "$d/ours.log" && grep -qE '^ *8 +[0-9]+ ' "$d/guest.log"
  elif [ "$tool" = ucmatose ]; then
    grep -q 'test complete' "$d/ours.log" && grep -q 'test complete' "$d/guest.log"
  else
    grep -q 'data transfers complete' "$d/ours.log" && grep -q 'data transfers complete' "$d/guest.log"
  fi
}

# rsockets (issue 38) with rdmacm-utils' rstream / riostream / rcopy: the
# Debian tools on our drop-in (librdmacm.so.1 from target/release) against
# the same tools on rdma-core's rsockets over rxe. CASE = T-rs-ROLE-TOOL:
# rstream and riostream move 20 x 1 MiB with every byte verified (-T v);
# rcopy copies a 16 MiB random file, checked by its MD5 on both ends.
run_rs() { # CASE DIR -> 0 pass / 1 fail
  local c=$1 d=$2 t k r s cport=$PORT
  IFS=- read -r t k r s <<<"$c"
  PORT=$((PORT + 1))
  local env=(env ROCE_EMU_DEVICES="$(dev_env "$t")" ROCE_EMU_PCAP="$d" LD_LIBRARY_PATH="$BIN")
  local ours theirs srv_ip sum_src="" sum_dst=""
  OURS_RC=0 GUEST_RC=0
  if [ "$r" = srv ]; then srv_ip=$HOST; else srv_ip=${GUEST_IP[$GUEST_SRV]}; fi
  local to=$((CASE_TIMEOUT - 10))
  case $s in
    rstream | riostream)
      local opts="-S 65536 -C 50 -T v -p $cport"
      if [ "$r" = srv ]; then
        ours=("$s" -b "$HOST" $opts)
        theirs="timeout $to $s -s $HOST $opts"
      else
        ours=("$s" -s "$srv_ip" $opts)
        theirs="timeout $to $s -b $srv_ip $opts"
      fi
      ;;
    udpong) # datagram rsockets (UD): 50 echoed 256-byte datagrams
      if [ "$r" = srv ]; then
        ours=(udpong -b "$HOST" -p "$cport")
        theirs="timeout $to udpong -s $HOST -p $cport -T e -C 50 -S 256"
      else
        ours=(udpong -s "$srv_ip" -p "$cport" -T e -C 50 -S 256)
        theirs="timeout $to udpong -b $srv_ip -p $cport"
      fi
      ;;
    rcopy)
      if [ "$r" = srv ]; then
        ours=(rcopy -p "$cport")
        theirs="dd if=/dev/urandom of=/tmp/rs.src bs=1M count=4 2>/dev/null && timeout $to rcopy /tmp/rs.src $HOST:$d/rs.dst -p $cport && md5sum /tmp/rs.src"
      else
        dd if=/dev/urandom of="$d/rs.src" bs=1M count=4 2>/dev/null
        ours=(rcopy "$d/rs.src" "$srv_ip:/tmp/rs.dst" -p "$cport")
        theirs="rm -f /tmp/rs.dst; timeout $to rcopy -p $cport"
      fi
      ;;
  esac
  if [ "$r" = srv ]; then
    start_bg "$d/ours.log" ip netns exec "$NS" timeout "$CASE_TIMEOUT" "${env[@]}" "${ours[@]}"
    local pid=$LAST_PID
    sleep 1
    echo "+ $theirs" >"$d/guest.log"
    lab shell -t "$CASE_TIMEOUT" "$GUEST_CLI" "$theirs" >>"$d/guest.log" 2>&1 || GUEST_RC=$?
    if [ "$s" = rcopy ] || [ "$s" = udpong ]; then
      # (rcopy and udpong serve until killed: the client's result counts)
      kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    fi
    if [ "$s" = rcopy ]; then
      sum_src=$(awk '/rs.src$/ {h=$1} END {print h}' "$d/guest.log")
      sum_dst=$(md5sum <"$d/rs.dst" 2>/dev/null | awk '{print $1}')
    else
      wait "$pid" || OURS_RC=$?
    fi
  else
    echo "+ $theirs" >"$d/guest.log"
    local job; job=$(lab bg "$GUEST_SRV" "$theirs")
    lab shell -t 40 "$GUEST_SRV" "lab-wait-cm 30" >/dev/null 2>&1 || sleep 3
    ip netns exec "$NS" timeout "$CASE_TIMEOUT" "${env[@]}" "${ours[@]}" >"$d/ours.log" 2>&1 || OURS_RC=$?
    if [ "$s" = rcopy ]; then
      sum_src=$(md5sum <"$d/rs.src" | awk '{print $1}')
      sum_dst=$(lab shell -t 40 "$GUEST_SRV" "md5sum /tmp/rs.dst" 2>/dev/null | awk '/rs.dst$/ {h=$1} END {print h}')
      lab shell -t 20 "$GUEST_SRV" "pkill rcopy" >/dev/null 2>&1 || true
      lab wait "$GUEST_SRV" "$job" 20 >>"$d/guest.log" 2>&1 || true
    elif [ "$s" = udpong ]; then
      lab shell -t 20 "$GUEST_SRV" "pkill udpong" >/dev/null 2>&1 || true
      lab wait "$GUEST_SRV" "$job" 20 >>"$d/guest.log" 2>&1 || true
    else
      lab wait "$GUEST_SRV" "$job" "$CASE_TIMEOUT" >>"$d/guest.log" 2>&1 || GUEST_RC=$?
    fi
  fi
  echo "ours_rc=$OURS_RC guest_rc=$GUEST_RC src=$sum_src dst=$sum_dst" >"$d/status"
  [ "$OURS_RC" = 0 ] && [ "$GUEST_RC" = 0 ] || return 1
  if [ "$s" = rcopy ]; then
    [ -n "$sum_src" ] && [ "$sum_src" = "$sum_dst" ]
  elif [ "$s" = udpong ]; then
    # the client's result line: 256-byte datagrams, 100 transfers (echoed)
    local cl=$d/guest.log; [ "$r" = cli ] && cl=$d/ours.log
    grep -qE '^custom +256 +100 ' "$cl"
  else
    # rstream/riostream print one result line: name, size, transfers ("custom  64k  50 ...")
    grep -qE '^custom +64k +50 ' "$d/ours.log" && grep -qE '^custom +64k +50 ' "$d/guest.log"
  fi
}

CUR_CAPTURES=
stop_capture() { # the capture of the case under way, if any
  [ -n "$CUR_CAPTURES" ] || return 0
  LAB_CAPTURES=$CUR_CAPTURES lab capture-stop br0 >/dev/null 2>&1 || true
  CUR_CAPTURES=
}

RESULTS=()
run_case() { # CASE
  local c=$1 d=$RUN/$1 t0 res=PASS oracle=ok secs
  mkdir -p "$d"
  t0=$(date +%s.%N)
  CUR_CAPTURES=$d
  LAB_CAPTURES=$d lab capture-start br0 udp port 4791 or tcp port "$PORT" >/dev/null 2>&1 || true
  case $c in
    *-rc-*|*-uc-*|*-ud-*|*-srq-*) run_pingpong "$c" "$d" || res=FAIL ;;
    *-pt-*) run_perftest "$c" "$d" || res=FAIL ;;
    *-py-*) run_pyverbs "$c" "$d" || res=FAIL ;;
    *-dropin-*) run_dropin "$c" "$d" || res=FAIL ;;
    *-mc-*) run_mcast "$c" "$d" || res=FAIL ;;
    *-cm-*) run_cm "$c" "$d" || res=FAIL ;;
    *-rs-*) run_rs "$c" "$d" || res=FAIL ;;
    *) die "unknown case $c" ;;
  esac
  LAB_CAPTURES=$d lab capture-stop br0 >/dev/null 2>&1 || true
  CUR_CAPTURES=
  stop_ours
  check_pcaps "$d" || oracle=FAIL
  [ $oracle = ok ] || res=FAIL
  check_expect "$c" "$d" || res=FAIL
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  RESULTS+=("$(printf '%-22s %-5s oracle=%-4s %6ss  %s' "$c" "$res" "$oracle" "$secs" "$(cat "$d/status" 2>/dev/null)")")
  # progress on stderr: [k/N] case result
  printf '[%d/%d] %-22s %-5s oracle=%-4s %6ss\n' "$CASE_I" "$CASE_N" "$c" "$res" "$oracle" "$secs" >&2
  [ $res = PASS ]
}

cmd_run() {
  [ "$(id -u)" = 0 ] || die "must run as root"
  mkdir -p "$STATE" "$RUN"
  # (an interrupted run also stops the case's br0 capture, or its tcpdump
  # outlives the run)
  trap 'stop_capture; stop_ours' EXIT
  trap 'stop_capture; stop_ours; exit 130' INT TERM
  cmd_setup
  local cases=() c p
  if [ $# -eq 0 ]; then
    mapfile -t cases < <(all_cases)
  else
    for c in $(all_cases); do
      for p in "$@"; do
        # shellcheck disable=SC2053
        [[ $c == $p ]] && { cases+=("$c"); break; }
      done
    done
  fi
  [ ${#cases[@]} -gt 0 ] || die "no case matches: $*"
  log "results in $RUN (${#cases[@]} cases)"
  local pass=0 fail=0 t0=$SECONDS
  CASE_N=${#cases[@]} CASE_I=0
  for c in "${cases[@]}"; do
    CASE_I=$((CASE_I + 1))
    if run_case "$c"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
  done
  {
    echo "case                   result oracle       time  exit codes"
    printf '%s\n' "${RESULTS[@]}"
    echo "passed $pass / $((pass + fail)) in $((SECONDS - t0)) s; results: $RUN"
  } | tee "$RUN/summary.txt"
  [ "${INTEROP_KEEP_LAB:-0}" = 1 ] || cmd_teardown
  [ $fail = 0 ]
}

case ${1:-help} in
  setup) cmd_setup ;;
  run) shift; cmd_run "$@" ;;
  list) all_cases ;;
  teardown) cmd_teardown ;;
  *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
