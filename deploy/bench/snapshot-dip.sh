#!/usr/bin/env bash
# What a backup costs the cluster: put x100 throughput before and while `etcdctl snapshot
# save` streams a store of KEYS keys from one member (the leader, as a CronJob pointed at
# the client Service may well hit), and the snapshot's size and rate. Run it once with
# QuantyKube and once with etcd (SERVER=$(command -v etcd)) for the side by side.
#
# Usage: deploy/bench/snapshot-dip.sh                # QuantyKube release build, 1 000 000 keys
#        SERVER=$(command -v etcd) deploy/bench/snapshot-dip.sh
# Env: QK (bench client and, unless SERVER is set, the server), SERVER, KEYS (1000000),
#      DURATION of each put window (10s). Prints one line.
set -euo pipefail
QK=${QK:-${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}/release/quantykube}
KEYS=${KEYS:-1000000}
DURATION=${DURATION:-10s}
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/qk-snapshot-dip.XXXXXX")
# shellcheck source=deploy/bench/members.sh
. "$(dirname "$0")/members.sh"
pids=()
cleanup() { stop_members; finish_work; }
trap cleanup EXIT INT TERM

start_members "${SERVER:-$QK}" "$WORK" snapshot-dip --quota-backend-bytes 8589934592 ||
  { echo "the cluster did not start; logs in $WORK" >&2; exit 1; }
common=(--key-size 8 --val-size 256 --clients 100 --conns 10 --endpoints "$ENDPOINTS" --output json)
"$QK" bench put --total "$KEYS" --sequential-keys --key-space-size "$KEYS" "${common[@]}" >/dev/null
put_window() { "$QK" bench put --duration "$DURATION" --key-space-size "$KEYS" --target-leader "${common[@]}"; }
throughput() { python3 -c 'import json,sys; print(round(json.load(sys.stdin)["throughput"]))' <"$1"; }

put_window >"$WORK/before.json"
leader=$(ETCDCTL_API=3 etcdctl --endpoints "$ENDPOINTS" endpoint status -w json |
  python3 -c 'import json,sys; s=json.load(sys.stdin); print(next(e["Endpoint"] for e in s if e["Status"]["leader"] == e["Status"]["header"]["member_id"]))')
save() { # seconds a snapshot of the leader takes
  local start end
  start=$(date +%s.%N)
  ETCDCTL_API=3 etcdctl --endpoints "$leader" snapshot save "$WORK/backup.db" >/dev/null 2>&1
  end=$(date +%s.%N)
  rm -f "$WORK/backup.db.part"
  echo "$end $start" | awk '{printf "%.2f", $1 - $2}'
}
idle=$(save)
size=$(stat -c %s "$WORK/backup.db")
rm -f "$WORK/backup.db"
# The put window lasts as long as the snapshot took on the idle cluster, so that its
# throughput is the throughput while the snapshot streams.
window_s=$(echo "$idle" | awk '{w = int($1 + 0.999); print (w < 2 ? 2 : w)}')
DURATION=${window_s}s put_window >"$WORK/during.json" &
window=$!
loaded=$(save)
wait "$window"
echo "$(basename "${SERVER:-quantykube}") keys $KEYS: put x100 $(throughput "$WORK/before.json") ops/s before," \
  "$(throughput "$WORK/during.json") ops/s during a snapshot (${window_s} s window);" \
  "snapshot $((size / 1000000)) MB in ${idle} s idle ($(echo "$size $idle" | awk '{printf "%.0f", $1 / 1e6 / $2}') MB/s)," \
  "${loaded} s under load"
