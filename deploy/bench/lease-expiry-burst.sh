#!/usr/bin/env bash
# A burst of lease expiries against puts: on a fresh three-member QuantyKube cluster,
# measures put x10 for 10 s alone, then again while LEASES leases (granted and kept
# alive by `quantykube bench lease-keepalive`, which is then killed so that it cannot
# revoke them) all expire at once. The lessor revokes at most 1 000 expired leases per
# second, so the second run should look like the first.
#
# Usage: deploy/bench/lease-expiry-burst.sh        # 5 000 leases, release binary
#        LEASES=20000 QK=/path/to/quantykube deploy/bench/lease-expiry-burst.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
QK=${QK:-$(./deploy/bench/build-release.sh)}
LEASES=${LEASES:-5000}
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/qk-burst.XXXXXX")
pids=()
cleanup() { stop_members; finish_work; }
trap cleanup EXIT INT TERM
# shellcheck source=deploy/bench/members.sh
. deploy/bench/members.sh
start_members "$QK" "$WORK" burst || { echo "the cluster did not start" >&2; exit 1; }
puts() { # prints throughput, p50 and p99 of put x10 for 10 s
  "$QK" bench put --endpoints "$ENDPOINTS" --duration 10s --clients 10 --conns 10 --key-size 8 \
    --val-size 256 --key-space-size 10000 --output json 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); l=d["latency_ms"]; print("%.0f puts/s, p50 %s ms, p99 %s ms, max %s ms" % (d["throughput"], l["p50"], l["p99"], l["max"]))'
}
echo "put x10 alone:                $(puts)"
# Grant the leases (TTL 4 s), keep them alive a moment, then kill the bench so that
# nothing revokes them: they all expire about 4 s later.
"$QK" bench lease-keepalive --endpoints "$ENDPOINTS" --leases "$LEASES" --lease-ttl 4 \
  --duration 60s --clients 10 --conns 10 --output json >/dev/null 2>&1 &
bench=$!
for _ in $(seq 300); do
  # "found N leases"; awk reads everything, so etcdctl never dies of SIGPIPE.
  n=$(ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:12379 lease list 2>/dev/null | awk 'NR == 1 {print $2}' || true)
  [ "${n:-0}" -ge "$LEASES" ] && break
  sleep 0.2
done
kill -9 "$bench"; wait "$bench" 2>/dev/null || true
live() { ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:12379 lease list | awk 'NR == 1'; }
echo "leases live at the kill:      $(live)"
echo "put x10 while they expire:    $(puts)"
echo "leases live after:            $(live)"
