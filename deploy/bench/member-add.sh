#!/usr/bin/env bash
# Writes while a member is added and catches up: a three-member cluster (QuantyKube, or
# etcd with SERVER=$(command -v etcd)) holding PRELOAD keys, a steady put load in
# one-second windows, and at window ADD_AT a fourth member added with MemberAdd and
# started with --initial-cluster-state existing. Prints one line per window
# (puts/s, p99 ms) and a summary: the windows before the add against those after it,
# and how long the new member took to serve a linearizable read.
#
# Usage: deploy/bench/member-add.sh
# Env: QK (bench client, and the server unless SERVER is set; default the release build),
#      SERVER, PRELOAD (keys, default 200000), WINDOWS (30), ADD_AT (10), RATE (put/s,
#      open loop, default 3000), LEARNER (1: add as learner then promote; default voter).
set -euo pipefail
QK=${QK:-${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}/release/quantykube}
BIN=${SERVER:-$QK}
PRELOAD=${PRELOAD:-200000}
WINDOWS=${WINDOWS:-30}
ADD_AT=${ADD_AT:-10}
RATE=${RATE:-3000}
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/qk-member-add.XXXXXX")
# shellcheck source=deploy/bench/members.sh
. "$(dirname "$0")/members.sh"
pids=()
cleanup() { stop_members; finish_work; }
trap cleanup EXIT INT TERM
ctl() { ETCDCTL_API=3 etcdctl --endpoints "$ENDPOINTS" "$@"; }

start_members "$BIN" "$WORK" member-add --quota-backend-bytes 8589934592 --snapshot-count 10000 ||
  { echo "the cluster did not start; logs in $WORK" >&2; exit 1; }
"$QK" bench put --total "$PRELOAD" --sequential-keys --key-space-size "$PRELOAD" --key-size 16 \
  --val-size 256 --clients 50 --conns 10 --endpoints "$ENDPOINTS" --output json >/dev/null

joined_ms=""
add_member() {
  local flag=()
  [ -n "${LEARNER:-}" ] && flag=(--learner)
  local out cluster
  out=$(ctl member add m4 --peer-urls=http://127.0.0.1:42380 "${flag[@]}")
  cluster=$(echo "$out" | sed -n 's/^ETCD_INITIAL_CLUSTER="\(.*\)"$/\1/p')
  local start=$(date +%s%N)
  "$BIN" --name m4 --data-dir "$WORK/m4" \
    --listen-client-urls http://127.0.0.1:42379 --advertise-client-urls http://127.0.0.1:42379 \
    --listen-peer-urls http://127.0.0.1:42380 --initial-advertise-peer-urls http://127.0.0.1:42380 \
    --initial-cluster "$cluster" --initial-cluster-state existing --initial-cluster-token member-add \
    --quota-backend-bytes 8589934592 >"$WORK/m4.log" 2>&1 &
  pids+=($!)
  ( # bounded: gives up after 120 s
    for _ in $(seq 1200); do
      if ETCDCTL_API=3 etcdctl --endpoints 127.0.0.1:42379 --command-timeout=1s get /probe \
        >/dev/null 2>&1; then
        echo $(( ($(date +%s%N) - start) / 1000000 )) >"$WORK/joined_ms"
        break
      fi
      sleep 0.1
    done
    if [ -n "${LEARNER:-}" ]; then
      id=$(ctl member list | awk -F', ' '$3 == "m4" {print $1}')
      for _ in $(seq 300); do ctl member promote "$id" >/dev/null 2>&1 && break; sleep 0.2; done
    fi
  ) &
  pids+=($!)
}

before=() after=()
for w in $(seq "$WINDOWS"); do
  [ "$w" -eq "$ADD_AT" ] && add_member
  line=$("$QK" bench put --duration 1s --rate "$RATE" --key-space-size "$PRELOAD" --key-size 16 \
    --val-size 256 --clients 100 --conns 10 --endpoints "$ENDPOINTS" --output json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f %.2f %d" % (r["throughput"], r["latency_ms"]["p99"], r.get("errors_total", 0)))')
  read -r tput p99 errors <<<"$line"
  echo "window $w: $tput puts/s, p99 $p99 ms, $errors errors"
  if [ "$w" -lt "$ADD_AT" ]; then before+=("$tput"); else after+=("$tput"); fi
done
wait_joined=0
while [ ! -s "$WORK/joined_ms" ] && [ $wait_joined -lt 300 ]; do sleep 0.1; wait_joined=$((wait_joined + 1)); done
joined_ms=$(cat "$WORK/joined_ms" 2>/dev/null || echo "not within the run")
min_after=$(printf '%s\n' "${after[@]}" | sort -n | head -1)
mean_before=$(printf '%s\n' "${before[@]}" | awk '{s+=$1} END {printf "%.0f", s/NR}')
echo "$(basename "$BIN"): before the add $mean_before puts/s; lowest window after it $min_after puts/s;" \
  "new member served a linearizable read after $joined_ms ms"
