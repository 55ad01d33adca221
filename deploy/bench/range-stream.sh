#!/usr/bin/env bash
# etcd 3.7's RangeStream against a plain Range of the same keys, on a one-member
# QuantyKube on loopback: time to the first chunk (the whole answer, for Range), total
# time, and the member's peak RSS during the read. Loads KEYS keys once, then reads all
# of them RUNS times in each mode, alternating; before each read the member is
# restarted (so that every read starts from the same cold process) and its peak RSS
# counter is reset (`echo 5 > /proc/PID/clear_refs`), so that the peak is the read's.
# Prints one line per read and a summary table (medians) in Markdown.
#
# Usage: deploy/bench/range-stream.sh                     # 1 000 000 keys of 256 bytes
#        KEYS=100000 VAL_SIZE=1024 RUNS=1 deploy/bench/range-stream.sh
# Env: QK (server and bench client; default the release build in $CARGO_TARGET_DIR),
#      KEYS (1000000), VAL_SIZE (256), RUNS (3), QKFLAGS (extra server flags),
#      KEEP (keep the work dir).
# Takes about 5 minutes at the defaults on 2 cores (3 of them loading); every step has a
# time limit.
set -euo pipefail
QK=${QK:-${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}/release/quantykube}
KEYS=${KEYS:-1000000}
VAL_SIZE=${VAL_SIZE:-256}
RUNS=${RUNS:-3}
CLIENT=127.0.0.1:42379
PEER=127.0.0.1:42380
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/qk-range-stream.XXXXXX")
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "${KEEP:-}" ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT INT TERM

start_member() {
  # shellcheck disable=SC2086 # QKFLAGS is a list of flags
  "$QK" --name rs --data-dir "$WORK/data" \
    --listen-client-urls "http://$CLIENT" --advertise-client-urls "http://$CLIENT" \
    --listen-peer-urls "http://$PEER" --initial-advertise-peer-urls "http://$PEER" \
    --initial-cluster "rs=http://$PEER" --initial-cluster-state new \
    --quota-backend-bytes 8589934592 ${QKFLAGS:-} >>"$WORK/member.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    "$QK" bench range 00000000 --endpoints "$CLIENT" --total 1 --output json >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "the member did not start; log in $WORK/member.log" >&2
  exit 1
}

stop_member() {
  kill -TERM "$pid" 2>/dev/null || true
  timeout 30 tail --pid="$pid" -f /dev/null || kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}

kib() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$pid/status"; }

start_member
echo "loading $KEYS keys of $VAL_SIZE bytes" >&2
timeout 1200 "$QK" bench put --endpoints "$CLIENT" --total "$KEYS" --key-space-size "$KEYS" \
  --sequential-keys --key-size 8 --val-size "$VAL_SIZE" --clients 100 --conns 10 \
  --output json >"$WORK/load.json"
python3 -c 'import json,sys; d=json.load(sys.stdin); print("loaded:", d["operations"], "puts,", d["errors_total"], "errors,", round(d["throughput"]), "puts/s", file=sys.stderr)' <"$WORK/load.json"

# Every key: they are zero-padded decimal, "00000000" to "00999999", all in ["0", "1").
for run in $(seq "$RUNS"); do
  for mode in range stream; do
    stop_member
    start_member
    before=$(kib VmRSS)
    echo 5 >"/proc/$pid/clear_refs"
    flags=()
    [ "$mode" = stream ] && flags=(--stream)
    timeout 900 "$QK" bench range 0 1 "${flags[@]}" --endpoints "$CLIENT" --total 1 --clients 1 \
      --conns 1 --request-timeout 10m --output json >"$WORK/$mode-$run.json"
    peak=$(kib VmHWM)
    MODE=$mode BEFORE=$before PEAK=$peak python3 -c '
import json, os, sys
d = json.load(sys.stdin)
total = d["latency_ms"]["max"]
first = d.get("first_chunk_ms_median", total)
print(os.environ["MODE"], "keys", d["keys_returned"], "first_ms", round(first, 1),
      "total_ms", round(total, 1), "chunks", d.get("chunks", 1),
      "rss_before_mib", round(int(os.environ["BEFORE"]) / 1024, 1),
      "peak_rss_mib", round(int(os.environ["PEAK"]) / 1024, 1), "errors", d["errors_total"])' \
      <"$WORK/$mode-$run.json" | tee -a "$WORK/lines.txt"
  done
done

python3 - "$WORK/lines.txt" "$KEYS" "$VAL_SIZE" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    words = line.split()
    fields = dict(zip(words[1::2], words[2::2]))
    rows.setdefault(words[0], []).append({k: float(v) for k, v in fields.items()})
print(f"\n{int(sys.argv[2]):,} keys of {sys.argv[3]} bytes, medians of {len(rows['range'])} runs each\n")
print("| | Range | RangeStream |")
print("|---|---|---|")
def med(mode, field):
    return statistics.median(r[field] for r in rows[mode])
for label, field, fmt in [
    ("keys returned", "keys", "{:,.0f}"),
    ("time to first chunk, ms", "first_ms", "{:,.1f}"),
    ("total time, ms", "total_ms", "{:,.1f}"),
    ("chunks", "chunks", "{:,.0f}"),
    ("member RSS before the read, MiB", "rss_before_mib", "{:,.1f}"),
    ("member peak RSS during the read, MiB", "peak_rss_mib", "{:,.1f}"),
]:
    print(f"| {label} | {fmt.format(med('range', field))} | {fmt.format(med('stream', field))} |")
EOF
