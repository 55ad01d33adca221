#!/usr/bin/env bash
# Failover time, side by side: for etcd 3.4 and then QuantyKube, start three members on
# loopback, kill -9 the leader, and time until a put through a surviving member
# succeeds. Repeats ROUNDS times (default 5) per system and prints each time in ms.
# Usage: deploy/bench/failover.sh   Needs: etcd, etcdctl, a built quantykube.
set -euo pipefail
ROUNDS=${ROUNDS:-5}
QK=${QK:-"${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}/debug/quantykube"}
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/qk-failover.XXXXXX")
declare -A pid
cleanup() { kill -9 "${pid[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM
ctl() { ETCDCTL_API=3 etcdctl --dial-timeout=1s --command-timeout=300ms "$@"; }

for bin in "$(command -v etcd)" "$QK"; do
  name=$(basename "$bin")
  times=()
  for round in $(seq "$ROUNDS"); do
    cluster="m1=http://127.0.0.1:12380,m2=http://127.0.0.1:22380,m3=http://127.0.0.1:32380"
    for i in 1 2 3; do
      "$bin" --name "m$i" --data-dir "$WORK/$name-$round-m$i" \
        --listen-client-urls "http://127.0.0.1:${i}2379" --advertise-client-urls "http://127.0.0.1:${i}2379" \
        --listen-peer-urls "http://127.0.0.1:${i}2380" --initial-advertise-peer-urls "http://127.0.0.1:${i}2380" \
        --initial-cluster "$cluster" --initial-cluster-token "fo$round" --initial-cluster-state new \
        >"$WORK/$name-$round-m$i.log" 2>&1 &
      pid[$i]=$!
    done
    until ctl --endpoints=127.0.0.1:12379 put /ready x >/dev/null 2>&1; do sleep 0.1; done
    sleep 1
    leader=""
    for i in 1 2 3; do
      if ctl --endpoints="127.0.0.1:${i}2379" endpoint status 2>/dev/null | grep -q ', true, '; then leader=$i; fi
    done
    survivor=$(( leader % 3 + 1 ))
    start=$(date +%s%N)
    kill -9 "${pid[$leader]}"
    until ctl --endpoints="127.0.0.1:${survivor}2379" put /after x >/dev/null 2>&1; do sleep 0.02; done
    times+=($(( ($(date +%s%N) - start) / 1000000 )))
    kill -9 "${pid[@]}" 2>/dev/null || true; wait 2>/dev/null || true
  done
  echo "$name failover ms: ${times[*]}"
done
