#!/usr/bin/env bash
# The CI recipe of docs/ci.md, end to end, from a fresh clone of this
# checkout's HEAD (commit first: uncommitted changes are not in the clone):
#
#   scripts/install-check.sh            # cargo install --git file://CLONE (as the recipe)
#   scripts/install-check.sh --path     # cargo install --path CLONE/cli instead
#   scripts/install-check.sh --keep     # keep the scratch directory (printed)
#
# Steps, each printed with its time:
#   1. git clone of this checkout into a scratch directory
#   2. cargo install --locked --git file://CLONE roce-cli --root SCRATCH/prefix
#   3. SCRATCH/prefix/bin/roce install  (builds the libraries from the source
#      cargo install used, in XDG_CACHE_HOME=SCRATCH/cache: a cold build)
#   4. roce run -- ibv_devinfo -d roce0               (SKIPPED without ibverbs-utils)
#   5. roce run -- ibv_rc_pingpong, a server on roce0 and a client on roce1
#      over 127.0.0.1                                  (SKIPPED without ibverbs-utils)
# with LD_LIBRARY_PATH, LD_PRELOAD and ROCE_EMU_LIB_DIR unset: roce run must
# find what roce install installed by itself.
#
# Two cold release builds: about 10-15 minutes on 2 cores. Uses the user's
# CARGO_HOME (registry, and with --git the checkout cargo keeps in
# CARGO_HOME/git/checkouts, as the recipe does: each run leaves one,
# CARGO_HOME/git/{checkouts,db}/src-HASH, to delete when done). Exits 1 if a
# step failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=git keep=0
for a in "$@"; do
  case $a in
    --path) mode=path ;;
    --keep) keep=1 ;;
    *) echo "usage: scripts/install-check.sh [--path] [--keep]" >&2; exit 2 ;;
  esac
done
command -v cargo >/dev/null || { echo "install-check: cargo is not on PATH" >&2; exit 2; }
rev=$(git -C "$root" rev-parse HEAD)
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
  echo "install-check: note: uncommitted changes in $root are not tested (the clone is HEAD $rev)"
fi
scratch=$(mktemp -d "${TMPDIR:-/tmp}/roce-install-check.XXXXXX")
prefix=$scratch/prefix
roce=$prefix/bin/roce
cleanup() {
  [ -n "${spid:-}" ] && kill "$spid" 2>/dev/null
  if [ "$keep" = 1 ]; then echo "kept $scratch"; else rm -rf "$scratch"; fi
}
trap cleanup EXIT
unset LD_LIBRARY_PATH LD_PRELOAD ROCE_EMU_LIB_DIR CARGO_TARGET_DIR
export XDG_CACHE_HOME=$scratch/cache
# own devices (addresses no test uses), shared by both ends as on a host
export ROCE_EMU_DEVICES=roce0=udp:127.0.122.2,roce1=udp:127.0.122.3 ROCE_EMU_STATS=0

failed=0 total_start=$(date +%s)
declare -a summary
# step NAME CMD...: run CMD (output to the terminal), record its time and verdict
step() {
  local name=$1; shift
  echo "=== $name: $*"
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$@"; rc=$?
  t1=$(date +%s.%N)
  local dt
  dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if [ $rc -eq 0 ]; then v=ok; else v="FAILED (exit $rc)"; failed=1; fi
  echo "=== $name: $v in ${dt} s"
  summary+=("$(printf '%-22s %-18s %8s s' "$name" "$v" "$dt")")
  return $rc
}
skipped() {
  echo "=== $1: SKIPPED ($2)"
  summary+=("$(printf '%-22s SKIPPED (%s)' "$1" "$2")")
}

# the drop-in was linked with its version script (rdma-core's symbol versions)
versioned() {
  if ! command -v objdump >/dev/null; then echo "(no objdump: not checked)"; return 0; fi
  objdump -T "$1" | grep -E 'IBVERBS_1\.1 +ibv_open_device$' || {
    echo "$1 has no ibv_open_device@@IBVERBS_1.1"; return 1; }
}

pingpong() {
  local port=18931 out=$scratch/pp
  "$roce" run -- ibv_rc_pingpong -d roce0 -g 1 -p $port -n 200 >"$out.s" 2>&1 & spid=$!
  sleep 1
  timeout 60 "$roce" run -- ibv_rc_pingpong -d roce1 -g 1 -p $port -n 200 127.0.0.1 >"$out.c" 2>&1
  local crc=$?
  local waited=0
  while kill -0 "$spid" 2>/dev/null && [ $waited -lt 30 ]; do sleep 1; waited=$((waited + 1)); done
  kill "$spid" 2>/dev/null
  wait "$spid"; local src=$?
  spid=
  echo "--- server"; cat "$out.s"; echo "--- client"; cat "$out.c"
  [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -q "200 iters" "$out.c" && grep -q "200 iters" "$out.s"
}

run_all() {
  step clone git clone -q "$root" "$scratch/src" || return
  git -C "$scratch/src" checkout -q --detach "$rev" || return
  if [ $mode = git ]; then
    step "cargo install" cargo install --locked --root "$prefix" --git "file://$scratch/src" roce-cli || return
  else
    step "cargo install" cargo install --locked --root "$prefix" --path "$scratch/src/cli" || return
  fi
  step "roce install" "$roce" install || return
  ls -l "$prefix/lib/roce-emu"
  step "symbol versions" versioned "$prefix/lib/roce-emu/libibverbs.so.1" || return
  if command -v ibv_devinfo >/dev/null; then
    step "ibv_devinfo" "$roce" run -- ibv_devinfo -d roce0
  else
    skipped ibv_devinfo "no ibv_devinfo: apt-get install ibverbs-utils"
  fi
  if command -v ibv_rc_pingpong >/dev/null; then
    step "ibv_rc_pingpong pair" pingpong
  else
    skipped "ibv_rc_pingpong pair" "no ibv_rc_pingpong: apt-get install ibverbs-utils"
  fi
}

# from a directory outside the clone, as a user's CI runs it: roce install
# must find roce-emu's cargo configuration (the drop-in's linker wrapper)
# from the source tree, not from the working directory
cd "$scratch" || exit 2
run_all || failed=1
echo
echo "install-check ($mode, HEAD $rev) on $(nproc) cores:"
printf '  %s\n' "${summary[@]}"
echo "  total $(( $(date +%s) - total_start )) s: $([ $failed = 0 ] && echo ok || echo FAILED)"
exit $failed
