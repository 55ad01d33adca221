#!/usr/bin/env bash
# Side-by-side smoke benchmark: etcdctl's own `check perf` (etcdctl 3.4, 60 s of puts
# from many clients) against a three-member etcd 3.4 cluster and then a three-member
# QuantyKube cluster, on loopback, one after the other, with data under the same
# filesystem. Prints each system's result. Usage: deploy/bench/check-perf.sh [s|m|l]
# Needs: etcd and etcdctl (deploy/local/install-deps.sh), a built quantykube.
set -euo pipefail
LOAD=${1:-s}
QK=${QK:-"${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}/debug/quantykube"}
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/qk-check-perf.XXXXXX")
pids=()
cleanup() { kill -9 "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM

start_cluster() { # $1 = binary
  local bin=$1 cluster="" i
  pids=()
  for i in 1 2 3; do cluster+="m$i=http://127.0.0.1:${i}2380,"; done
  cluster=${cluster%,}
  for i in 1 2 3; do
    "$bin" --name "m$i" --data-dir "$WORK/$(basename "$bin")-m$i" \
      --listen-client-urls "http://127.0.0.1:${i}2379" --advertise-client-urls "http://127.0.0.1:${i}2379" \
      --listen-peer-urls "http://127.0.0.1:${i}2380" --initial-advertise-peer-urls "http://127.0.0.1:${i}2380" \
      --initial-cluster "$cluster" --initial-cluster-token perf --initial-cluster-state new \
      >"$WORK/$(basename "$bin")-m$i.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:12379 put /ready x >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "cluster did not start" >&2; return 1
}

for bin in "$(command -v etcd)" "$QK"; do
  echo "== $("$bin" --version | head -n1)"
  start_cluster "$bin"
  ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:12379,127.0.0.1:22379,127.0.0.1:32379 \
    check perf --load="$LOAD" 2>&1 | tr '\r' '\n' | grep -E '^(PASS|FAIL|WARN)' || true
  kill -9 "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true
done
