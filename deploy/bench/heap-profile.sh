#!/usr/bin/env bash
# Where a member's memory goes: loads TOTAL distinct keys into a fresh three-member
# cluster with member m1 running under heaptrack, samples every member's resident set
# once a second, then prints each member's peak RSS and heaptrack's biggest allocation
# sites at m1's heap peak. This is how issue 20's fourth step found the log's 64 MiB
# memtable and base2histogram's tables (docs/benchmarks.md).
#
# Usage: deploy/bench/heap-profile.sh                    # 1 000 000 keys, release build
#        QK=/path/to/quantykube TOTAL=200000 deploy/bench/heap-profile.sh
#        HEAPTRACK=0 deploy/bench/heap-profile.sh       # RSS only, no profiler
# Env: QK (server and bench client), TOTAL (keys, 256-byte values), PEAKS (allocation
#      sites to print, 15), QKFLAGS (extra server flags), KEEP (keep the run's dir).
# heaptrack slows m1 by a third or so; the peaks of m2 and m3 are the undisturbed
# figures. Needs `heaptrack` (Debian: apt-get install heaptrack) unless HEAPTRACK=0.
set -euo pipefail
QK=${QK:-${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}/release/quantykube}
TOTAL=${TOTAL:-1000000}
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/qk-heap.XXXXXX")
# shellcheck source=deploy/bench/members.sh
. "$(dirname "$0")/members.sh"
pids=()
sampler=""
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  # SIGTERM, not SIGKILL: heaptrack writes its file out when m1 exits.
  stop_members TERM
  finish_work
}
trap cleanup EXIT INT TERM

server=$QK
if [ "${HEAPTRACK:-1}" != 0 ]; then
  command -v heaptrack >/dev/null || { echo "heaptrack not found (apt-get install heaptrack, or HEAPTRACK=0)" >&2; exit 2; }
  # members.sh starts one binary for all three; this wrapper profiles only m1.
  server=$WORK/member.sh
  cat >"$server" <<EOF
#!/bin/sh
case " \$* " in
  *" --name m1 "*) exec heaptrack -o "$WORK/m1-heap" "$QK" "\$@" ;;
  *) exec "$QK" "\$@" ;;
esac
EOF
  chmod +x "$server"
fi

# shellcheck disable=SC2086 # QKFLAGS is a list of flags
start_members "$server" "$WORK" heap-profile --quota-backend-bytes 8589934592 ${QKFLAGS:-} ||
  { echo "the cluster did not start; logs in $WORK" >&2; exit 1; }

# heaptrack runs the server as its child: find each member's own pid by its data dir.
member_pids=()
for i in 1 2 3; do member_pids+=("$(pgrep -f -- "--data-dir $WORK/m$i( |$)" | tail -n1)"); done
(
  while sleep 1; do
    for i in 1 2 3; do
      awk -v m="m$i" -v t="$(date +%s)" '/^VmRSS:/ {print t, m, $2}' "/proc/${member_pids[$((i - 1))]}/status" 2>/dev/null || true
    done
  done >"$WORK/rss.txt"
) &
sampler=$!

echo "loading $TOTAL keys into $WORK (m1 under heaptrack: ${HEAPTRACK:-1})" >&2
"$QK" bench put --total "$TOTAL" --sequential-keys --key-space-size "$TOTAL" --key-size 8 --val-size 256 \
  --clients 100 --conns 10 --endpoints "$ENDPOINTS" "${BENCH_TLS[@]}" --output json >"$WORK/load.json"
sleep 2

for i in 1 2 3; do
  peak=$(awk -v m="m$i" '$2 == m && $3 > max {max = $3} END {print max + 0}' "$WORK/rss.txt")
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/${member_pids[$((i - 1))]}/status" 2>/dev/null || echo "?")
  echo "m$i: peak RSS sampled $((peak / 1024)) MiB, VmHWM $((${hwm/\?/0} / 1024)) MiB"
done

if [ "${HEAPTRACK:-1}" != 0 ]; then
  kill "${member_pids[0]}"
  for _ in $(seq 100); do
    file=$(ls "$WORK"/m1-heap*.zst 2>/dev/null | head -n1 || true)
    [ -n "$file" ] && ! pgrep -f -- "heaptrack -o $WORK/m1-heap" >/dev/null && break
    sleep 0.2
  done
  [ -n "$file" ] || { echo "heaptrack wrote no file; see $WORK/m1.log" >&2; exit 1; }
  heaptrack_print -f "$file" --print-peaks 1 --print-leaks 0 --print-temporary 0 \
    --print-allocators 0 --peak-limit "${PEAKS:-15}" 2>/dev/null |
    awk '/ peak memory consumed over / {getline site; sub(/^ +/, "", site); print $1 "  " site}
         /^peak heap memory consumption/ {print}' || true
  echo "full profile: heaptrack_print -f $file (KEEP=1 keeps it)" >&2
fi
