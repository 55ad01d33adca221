#!/usr/bin/env bash
# One workload against a fresh three-member QuantyKube (or etcd) cluster on loopback,
# optionally profiled: the quick loop for trying a change (build both binaries, run each
# in turn). Prints one line: workload, throughput, p50 and p99 in ms, errors, and the
# members' CPU time per operation (all three together).
#
# Usage: deploy/bench/one-run.sh                       # put x100 for 20 s, release binary
#        QK=/path/to/quantykube WORKLOAD=txn-cas deploy/bench/one-run.sh
#        PERF=1 deploy/bench/one-run.sh                # + perf record of all members
#        PERF=1 COST_MODEL=1 deploy/bench/one-run.sh   # + CPU per put per stage (cost-model.py)
#        TOTAL=400000 deploy/bench/one-run.sh          # load that many distinct keys instead
#        SERVER=$(command -v etcd) deploy/bench/one-run.sh   # the same against etcd
#        CLIENTS=1 CONNS=1 deploy/bench/one-run.sh    # put x1 (default 100 clients, 10 conns)
#        TLS=1 deploy/bench/one-run.sh                # client and peer mTLS (members.sh)
#        AUTH=1 deploy/bench/one-run.sh               # auth on; the load runs as a non-root
#                                                     # user holding readwrite on every key
# Env: QK (bench client and, unless SERVER is set, the server; default the release
#      build), SERVER, WORKLOAD (put | txn-cas | range-l | range-1000; set
#      CLIENTS=10 for compare.sh's range-1000), DURATION (20s),
#      BENCHFLAGS (extra bench flags), PREWRITE (e.g. 40s of put x10 first), TOTAL, PERF (writes $PERF_DATA, default /var/tmp/qk-perf.data; PERF_FREQ, and
#      PERF_CALL_GRAPH=dwarf for stacks through code built without frame pointers), QKFLAGS (extra
#      server flags), TLS (1: mutual TLS everywhere, certificates made in the run's dir).
#      Writes go to the leader, as in compare.sh.
set -euo pipefail
QK=${QK:-${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}/release/quantykube}
DURATION=${DURATION:-20s}
WORKLOAD=${WORKLOAD:-put}
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/qk-one-run.XXXXXX")
# shellcheck source=deploy/bench/members.sh
. "$(dirname "$0")/members.sh"
pids=()
cleanup() { stop_members; finish_work; }
trap cleanup EXIT INT TERM

# shellcheck disable=SC2086 # QKFLAGS is a list of flags
start_members "${SERVER:-$QK}" "$WORK" one-run --quota-backend-bytes 8589934592 ${QKFLAGS:-} ||
  { echo "the cluster did not start; logs in $WORK" >&2; exit 1; }

AUTH_FLAGS=()
if [ -n "${AUTH:-}" ]; then
  # A non-root user, so that every request pays for a permission check (root skips it).
  ctl() { ETCDCTL_API=3 etcdctl --endpoints "${ENDPOINTS%%,*}" "${BENCH_TLS[@]}" "$@" >/dev/null; }
  ctl user add root:bench-root
  ctl role add root
  ctl user grant-role root root
  ctl role add bench
  ctl role grant-permission bench --prefix readwrite ''
  ctl user add bench:bench-pw
  ctl user grant-role bench bench
  ctl auth enable
  AUTH_FLAGS=(--user bench:bench-pw)
fi

# shellcheck disable=SC2206 # BENCHFLAGS is a list of flags
common=(--key-size 8 --val-size 256 --clients "${CLIENTS:-100}" --conns "${CONNS:-10}" --endpoints "$ENDPOINTS" "${BENCH_TLS[@]}" "${AUTH_FLAGS[@]}" --output json ${BENCHFLAGS:-})
case $WORKLOAD in
  put)
    if [ -n "${TOTAL:-}" ]; then amount=(--total "$TOTAL" --sequential-keys --key-space-size "$TOTAL")
    else amount=(--duration "$DURATION" --key-space-size 100000); fi
    args=(put "${amount[@]}" ${TARGET_LEADER---target-leader}) ;;
  txn-cas)
    "$QK" bench put --total 1000 --key-space-size 1000 --sequential-keys "${common[@]}" >/dev/null
    args=(txn-cas --duration "$DURATION" --key-space-size 1000) ;;
  range-l)
    # compare.sh's range-l-100: linearizable single-key reads of 1 000 existing keys.
    "$QK" bench put --total 1000 --key-space-size 1000 --sequential-keys "${common[@]}" >/dev/null
    args=(range --duration "$DURATION" --key-space-size 1000 --consistency l) ;;
  range-1000)
    # compare.sh's range-1000: linearizable ranges of the same 1 000 keys, 10 clients.
    "$QK" bench put --total 1000 --key-space-size 1000 --sequential-keys "${common[@]}" >/dev/null
    # VERSIONS=1: first give each key the ~100 versions compare.sh's txn-cas run leaves.
    if [ -n "${VERSIONS:-}" ]; then
      "$QK" bench put --total 100000 --key-space-size 1000 --sequential-keys "${common[@]}" >/dev/null
    fi
    args=(range 00000000 00001000 --limit 1000 --duration "$DURATION" --consistency l) ;;
  *) echo "unknown WORKLOAD $WORKLOAD" >&2; exit 2 ;;
esac

if [ -n "${PREWRITE:-}" ]; then
  # The store as compare.sh's put x100 finds it: written for a while by fewer clients.
  "$QK" bench put --duration "$PREWRITE" --key-space-size 100000 --target-leader --clients 10 \
    --key-size 8 --val-size 256 --conns 10 --endpoints "$ENDPOINTS" "${BENCH_TLS[@]}" "${AUTH_FLAGS[@]}" --output json >/dev/null
fi

perf_pid=""
if [ -n "${PERF:-}" ]; then
  perf record -e cpu-clock -F "${PERF_FREQ:-499}" --call-graph "${PERF_CALL_GRAPH:-fp}" -o "${PERF_DATA:-/var/tmp/qk-perf.data}" \
    -p "$(IFS=,; echo "${pids[*]}")" -- sleep 12 >/dev/null 2>&1 &
  perf_pid=$!
fi
cpu_ticks() { # "user system" clock ticks of the members so far (fields 14, 15 of stat)
  local p
  for p in "${pids[@]}"; do sed 's/.*) //' "/proc/$p/stat"; done | awk '{u += $12; s += $13} END {print u, s}'
}
# User + system seconds of the waited-for children (the bench clients), from the
# `times` builtin, which must run in this shell (not in a $(...) subshell).
children_cpu_s() {
  tail -n1 "$1" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); s += t[1] * 60 + t[2] } print s }'
}
before=$(cpu_ticks)
times >"$WORK/times.before"
"$QK" bench "${args[@]}" "${common[@]}" >"$WORK/result.json"
times >"$WORK/times.after"
SERVER_S=$(echo "$(cpu_ticks) $before $(getconf CLK_TCK)" | awk '{print ($1 - $3) / $5, ($2 - $4) / $5}') \
CLIENT_S=$(echo "$(children_cpu_s "$WORK/times.after") $(children_cpu_s "$WORK/times.before")" | awk '{print $1 - $2}') python3 -c '
import json, os, sys
d = json.load(sys.stdin)
per_op = lambda s: round(s * 1e6 / max(d["operations"], 1))
user, system = map(float, os.environ["SERVER_S"].split())
print(d["workload"], round(d["throughput"]), "ops/s  p50", d["latency_ms"]["p50"],
      "ms  p99", d["latency_ms"]["p99"], "ms  errors", d["errors_total"],
      " CPU/op: servers", per_op(user + system), "us (kernel", per_op(system), "us), client",
      per_op(float(os.environ["CLIENT_S"])), "us")' <"$WORK/result.json"
if [ -n "$perf_pid" ]; then wait "$perf_pid"; fi
if [ -n "${COST_MODEL:-}" ] && [ -n "$perf_pid" ]; then
  # The leader is the member whose own id is the leader etcdctl's status reports; the
  # pids are in the order of $ENDPOINTS. Operations in perf's 12 s window: throughput x 12.
  leader_pid=""; follower_pids=(); i=0
  for endpoint in ${ENDPOINTS//,/ }; do
    if ETCDCTL_API=3 etcdctl --endpoints "$endpoint" "${BENCH_TLS[@]}" endpoint status -w json |
      python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["Status"]; sys.exit(s["header"]["member_id"] != s["leader"])'; then
      leader_pid=${pids[$i]}
    else
      follower_pids+=("${pids[$i]}")
    fi
    i=$((i + 1))
  done
  ops=$(python3 -c 'import json,sys; print(round(json.load(sys.stdin)["throughput"] * 12))' <"$WORK/result.json")
  python3 "$(dirname "$0")/cost-model.py" "${PERF_DATA:-/var/tmp/qk-perf.data}" "$ops" "$leader_pid" "${follower_pids[@]}"
fi
