#!/usr/bin/env bash
# The JSON gateway's throughput, QuantyKube against etcd 3.4 in the same run: a fresh
# three-member cluster of each (members.sh), then wrk with C connections for DURATION
# per workload against the leader's gateway, one after the other:
#   put:   POST /v3/kv/put, a random key of 100 000, a 256-byte value
#   range: POST /v3/kv/range of one key (linearizable, etcd's default)
# Prints one line per (server, workload): requests/s, p50 and p99 in ms, errors; then
# QuantyKube's ratio to etcd.
#
# Usage: deploy/bench/gateway.sh          (release build; QK=/path/to/quantykube)
# Env:   QK, ETCD (default: etcd on PATH), DURATION (20s), CONNS (100), THREADS (2).
# Needs wrk (Debian's wrk package; installed here if missing and apt-get can).
set -euo pipefail
QK=${QK:-${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}/release/quantykube}
ETCD=${ETCD:-$(command -v etcd)}
DURATION=${DURATION:-20s}
CONNS=${CONNS:-100}
THREADS=${THREADS:-2}
command -v wrk >/dev/null || { apt-get install -y -qq wrk >/dev/null 2>&1 || sudo apt-get install -y -qq wrk >/dev/null; }
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/qk-gateway.XXXXXX")
# shellcheck source=deploy/bench/members.sh
. "$(dirname "$0")/members.sh"
pids=()
cleanup() { stop_members; finish_work; }
trap cleanup EXIT INT TERM

# wrk scripts: a random key per put; one key read by every range.
cat >"$WORK/put.lua" <<'LUA'
local value = string.rep("v", 256)
local b64chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
local function b64(data)
  return ((data:gsub('.', function(x)
    local r, b = '', x:byte()
    for i = 8, 1, -1 do r = r .. (b % 2 ^ i - b % 2 ^ (i - 1) > 0 and '1' or '0') end
    return r
  end) .. '0000'):gsub('%d%d%d?%d?%d?%d?', function(x)
    if #x < 6 then return '' end
    local c = 0
    for i = 1, 6 do c = c + (x:sub(i, i) == '1' and 2 ^ (6 - i) or 0) end
    return b64chars:sub(c + 1, c + 1)
  end) .. ({ '', '==', '=' })[#data % 3 + 1])
end
local encoded_value = b64(value)
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local key = b64(string.format("key%06d", math.random(0, 99999)))
  return wrk.format(nil, "/v3/kv/put", nil, '{"key":"' .. key .. '","value":"' .. encoded_value .. '"}')
end
LUA
cat >"$WORK/range.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.path = "/v3/kv/range"
wrk.body = '{"key":"a2V5MDAwMDAx"}'
LUA
cat >"$WORK/report.lua" <<'LUA'
done = function(summary, latency, requests)
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read
    + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT %.0f %.2f %.2f %d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, errors))
end
LUA

# The leader's client URL: Status of each member names it.
leader_url() {
  local i id leader
  for i in 1 2 3; do
    leader=$(curl -s -X POST "http://127.0.0.1:${i}2379/v3/maintenance/status" -d '{}' |
      sed -n 's/.*"leader":"\([0-9]*\)".*/\1/p')
    id=$(curl -s -X POST "http://127.0.0.1:${i}2379/v3/maintenance/status" -d '{}' |
      sed -n 's/.*"member_id":"\([0-9]*\)".*/\1/p')
    if [ -n "$leader" ] && [ "$leader" = "$id" ]; then echo "http://127.0.0.1:${i}2379"; return; fi
  done
  echo "http://127.0.0.1:12379"
}

declare -A results
for server in etcd quantykube; do
  bin=$QK
  [ $server = etcd ] && bin=$ETCD
  rm -rf "${WORK:?}/$server"
  pids=()
  start_members "$bin" "$WORK/$server" "gw-$server" --quota-backend-bytes 8589934592 ||
    { echo "$server did not start; logs in $WORK/$server" >&2; exit 1; }
  url=$(leader_url)
  curl -s -X POST "$url/v3/kv/put" -d '{"key":"a2V5MDAwMDAx","value":"dg=="}' >/dev/null
  for workload in put range; do
    # wrk runs one script: the workload's, then the report.
    cat "$WORK/$workload.lua" "$WORK/report.lua" >"$WORK/$workload-run.lua"
    line=$(wrk -t "$THREADS" -c "$CONNS" -d "$DURATION" -s "$WORK/$workload-run.lua" "$url" | grep '^RESULT')
    read -r _ rps p50 p99 errors <<<"$line"
    results[$server,$workload]=$rps
    printf '%-10s %-6s %8s req/s  p50 %6s ms  p99 %6s ms  errors %s\n' "$server" "$workload" "$rps" "$p50" "$p99" "$errors"
  done
  stop_members
done
for workload in put range; do
  awk -v q="${results[quantykube,$workload]}" -v e="${results[etcd,$workload]}" -v w="$workload" \
    'BEGIN { printf "ratio      %-6s %.2fx etcd 3.4\n", w, q / e }'
done
