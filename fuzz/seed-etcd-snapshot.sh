#!/usr/bin/env bash
# Seeds of the bbolt_file, snapshot_import and etcd_wal fuzz targets: a snapshot file etcd 3.4
# itself writes (keys with history, a deleted key, a lease with a key, a user and a
# role, a compaction), saved by `etcdctl snapshot save`. Needs etcd and etcdctl
# (`make deps`). Uses ports 23790/23800 on loopback; stops etcd when done.
set -euo pipefail
cd "$(dirname "$0")"
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
etcd --name seed --data-dir "$work/data" \
  --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
  --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
  --initial-cluster seed=http://127.0.0.1:23800 >"$work/etcd.log" 2>&1 &
pid=$!
ctl() { ETCDCTL_API=3 etcdctl --endpoints http://127.0.0.1:23790 "$@"; }
for _ in $(seq 100); do ctl endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
ctl put a 1 >/dev/null
ctl put a 2 >/dev/null
ctl put b "$(head -c 3000 /dev/zero | tr '\0' x)" >/dev/null
ctl del b >/dev/null
lease=$(ctl lease grant 600 | awk '{print $2}')
ctl put leased v --lease="$lease" >/dev/null
ctl role add reader >/dev/null
ctl role grant-permission reader read a >/dev/null
ctl user add alice:pw >/dev/null
ctl user grant-role alice reader >/dev/null
rev=$(ctl put c 3 -w json | sed 's/.*"revision":\([0-9]*\).*/\1/')
ctl compact "$((rev - 1))" >/dev/null
ctl snapshot save "$work/etcd-3.4.snap" >/dev/null
mkdir -p corpus/bbolt_file corpus/snapshot_import
cp "$work/etcd-3.4.snap" corpus/bbolt_file/etcd-3.4.snap
cp "$work/etcd-3.4.snap" corpus/snapshot_import/etcd-3.4.snap
echo "seeded: corpus/{bbolt_file,snapshot_import}/etcd-3.4.snap ($(stat -c %s "$work/etcd-3.4.snap") bytes)"
# The etcd_wal target's seed: the WAL etcd wrote meanwhile, its preallocated zeros cut
# off (records are padded to 8 bytes, so rounding up keeps the last one whole).
mkdir -p corpus/etcd_wal
python3 - "$work"/data/member/wal/0000000000000000-0000000000000000.wal corpus/etcd_wal/etcd-3.4.wal <<'EOF'
import sys
data = open(sys.argv[1], "rb").read()
used = (len(data.rstrip(b"\0")) + 7) // 8 * 8
open(sys.argv[2], "wb").write(data[:used])
EOF
echo "seeded: corpus/etcd_wal/etcd-3.4.wal ($(stat -c %s corpus/etcd_wal/etcd-3.4.wal) bytes)"
