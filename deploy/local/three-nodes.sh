#!/usr/bin/env bash
# Starts a three-member QuantyKube cluster on loopback, with the same flags as etcd's
# documentation for a static three-member cluster: clients on 127.0.0.1:2379, 22379 and
# 32379; peers on 12380, 22380, 32380. Data goes under ${DATA:-./three-nodes.data}.
# Stops all three on Ctrl-C.
set -euo pipefail

BIN=${BIN:-"${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}/debug/quantykube"}
DATA=${DATA:-./three-nodes.data}
CLUSTER="infra1=http://127.0.0.1:12380,infra2=http://127.0.0.1:22380,infra3=http://127.0.0.1:32380"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' EXIT INT TERM

for i in 1 2 3; do
  case $i in
    1) client="http://127.0.0.1:2379" ;;
    *) client="http://127.0.0.1:${i}2379" ;;
  esac
  peer="http://127.0.0.1:${i}2380"
  mkdir -p "$DATA"
  "$BIN" --name "infra$i" --data-dir "$DATA/infra$i" \
    --listen-client-urls "$client" --advertise-client-urls "$client" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
    --initial-cluster "$CLUSTER" --initial-cluster-token tkn \
    --initial-cluster-state new 2>"$DATA/infra$i.log" &
  pids+=($!)
done
echo "three members running; logs in $DATA/*.log"
echo "try: etcdctl --endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379 member list"
wait
