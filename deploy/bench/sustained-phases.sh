#!/usr/bin/env bash
# Where a sustained run's throughput goes as the store fills: the members' CPU per put
# in each window of the run, and a perf profile of an early and a late window, so the
# two can be compared stage by stage (the question behind issue 20's sustained target).
#
# Usage: deploy/bench/sustained-phases.sh                      # 2 000 000 puts, release binary
#        QK=/path/to/quantykube TOTAL=5000000 deploy/bench/sustained-phases.sh
#        SERVER=$(command -v etcd) deploy/bench/sustained-phases.sh   # etcd, the same way
# Env: QK (bench client and, unless SERVER is set, the server), SERVER, TOTAL (puts,
#      2 000 000), KEYS (key space, 1 000 000), WINDOW (seconds per line, 10), PERF
#      (1: perf record all members for PERF_SECONDS, 15, at EARLY, 20 s, and once
#      LATE_FRACTION, 0.85, of the puts are done; data in $PERF_DIR, /var/tmp),
#      QKFLAGS (extra server flags), KEEP (1: keep the members' data dirs and logs; their
#      RocksDB LOG files say which column family's compactions took the time).
# Prints one line per window: seconds, revision, puts/s, members' CPU per put (µs,
# user+kernel, all three members), and the kernel's part; then the perf files' paths.
set -euo pipefail
QK=${QK:-${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}/release/quantykube}
TOTAL=${TOTAL:-2000000}
KEYS=${KEYS:-1000000}
WINDOW=${WINDOW:-10}
PERF_SECONDS=${PERF_SECONDS:-15}
PERF_DIR=${PERF_DIR:-/var/tmp}
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/qk-phases.XXXXXX")
# shellcheck source=deploy/bench/members.sh
. "$(dirname "$0")/members.sh"
pids=()
bench_pid=""
cleanup() {
  [ -n "$bench_pid" ] && kill "$bench_pid" 2>/dev/null
  stop_members
  finish_work
}
trap cleanup EXIT INT TERM

# shellcheck disable=SC2086 # QKFLAGS is a list of flags
start_members "${SERVER:-$QK}" "$WORK" phases --quota-backend-bytes 8589934592 ${QKFLAGS:-} ||
  { echo "the cluster did not start; logs in $WORK" >&2; exit 1; }

cpu_ticks() { # "user system" clock ticks of the members so far (fields 14, 15 of stat)
  local p
  for p in "${pids[@]}"; do sed 's/.*) //' "/proc/$p/stat"; done | awk '{u += $12; s += $13} END {print u, s}'
}
revision() {
  ETCDCTL_API=3 etcdctl --endpoints "${ENDPOINTS%%,*}" "${BENCH_TLS[@]}" endpoint status -w json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["Status"]["header"]["revision"])'
}
perf_pids=()
profile() { # profile NAME: perf record of all members for PERF_SECONDS, in the background
  perf record -e cpu-clock -F 299 --call-graph dwarf,32768 -o "$PERF_DIR/qk-phase-$1.data" \
    -p "$(IFS=,; echo "${pids[*]}")" -- sleep "$PERF_SECONDS" >/dev/null 2>&1 &
  perf_pids+=($!)
}

"$QK" bench put --total "$TOTAL" --key-space-size "$KEYS" --compact-every 10000 --clients 100 \
  --conns 10 --key-size 8 --val-size 256 --target-leader --endpoints "$ENDPOINTS" "${BENCH_TLS[@]}" \
  --output json >"$WORK/result.json" &
bench_pid=$!
hz=$(getconf CLK_TCK)
start=$SECONDS
last_rev=$(revision)
last_cpu=$(cpu_ticks)
early_done="" late_done=""
echo "seconds revision puts/s cpu_us_per_put kernel_us_per_put"
while kill -0 "$bench_pid" 2>/dev/null; do
  sleep "$WINDOW"
  kill -0 "$bench_pid" 2>/dev/null || break
  rev=$(revision)
  cpu=$(cpu_ticks)
  echo "$((SECONDS - start)) $rev $last_rev $cpu $last_cpu $hz $WINDOW" | awk '{
    puts = $2 - $3; if (puts < 1) puts = 1
    printf "%d %d %.0f %.0f %.0f\n", $1, $2, puts / $9, (($4 + $5) - ($6 + $7)) / $8 * 1e6 / puts, ($5 - $7) / $8 * 1e6 / puts }'
  last_rev=$rev
  last_cpu=$cpu
  if [ -n "${PERF:-}" ] && [ -z "$early_done" ] && [ $((SECONDS - start)) -ge "${EARLY:-20}" ]; then
    profile early; early_done=1
  fi
  if [ -n "${PERF:-}" ] && [ -z "$late_done" ] &&
    [ "$rev" -ge "$(awk -v t="$TOTAL" -v f="${LATE_FRACTION:-0.85}" 'BEGIN {printf "%d", t * f}')" ]; then
    profile late; late_done=1
  fi
done
wait "$bench_pid"
bench_pid=""
python3 -c 'import json,sys; d=json.load(sys.stdin); print("whole run:", round(d["throughput"]), "puts/s, p99", d["latency_ms"]["p99"], "ms, errors", d["errors_total"])' <"$WORK/result.json"
# Only perf: a bare `wait` would wait for the members too.
for p in "${perf_pids[@]}"; do wait "$p"; done
if [ -n "${PERF:-}" ]; then echo "profiles: $PERF_DIR/qk-phase-early.data $PERF_DIR/qk-phase-late.data"; fi
