#!/usr/bin/env bash
# The side-by-side report: the same `quantykube bench` runs against a three-member
# etcd 3.4 cluster (Debian's etcd-server) and then a three-member QuantyKube cluster,
# on loopback, one after the other, data dirs on the same filesystem; then the peak
# RSS of each after loading 1 000 000 keys, and a sustained run of 5 000 000 puts over
# 1 000 000 keys compacted every 10 000 revisions (throughput and p99 per 5 s window,
# drawn as charts into docs/img/benchmarks by charts.py). Writes the results as JSON under
# $OUT (default /var/tmp/qk-bench-results) and renders docs/benchmarks.md from them; a
# full run (no RUNS, QUICK, TLS, SYSTEMS or QK_SERVER) also appends its figures to
# deploy/bench/full-runs.jsonl, whose last three runs the page compares.
#
# Usage: deploy/bench/compare.sh            # everything (about 35 minutes)
#        QUICK=1 deploy/bench/compare.sh    # 3-second runs and 20 000 keys: a smoke run
#        SYSTEMS="quantykube" deploy/bench/compare.sh   # one system (keeps the other's JSON)
#        RUNS="put-1 put-100" deploy/bench/compare.sh   # only these runs ("rss" for the 1 M keys,
#                                           # "sustained" for the 5 M-put run, SUSTAINED_TOTAL)
#        QK_SERVER=/path/to/older/quantykube REPORT=0 OUT=/var/tmp/before SYSTEMS=quantykube \
#          RUNS=sustained deploy/bench/compare.sh   # another server build, today's client;
#                                           # REPORT=0 leaves docs/benchmarks.md alone
#        TLS=1 deploy/bench/compare.sh      # client and peer mTLS on both systems, the same
#                                           # certificates; results in $OUT (default
#                                           # /var/tmp/qk-bench-results-tls), docs not rendered
# Writes go to the leader (--target-leader) and reads to every member, as in etcd's
# performance documentation (op-guide/performance.md).
# Needs: etcd (deploy/local/install-deps.sh); builds the release binary itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
./deploy/local/install-deps.sh
QK=${QK:-$(./deploy/bench/build-release.sh)}
# A full run of this tree's build is recorded in deploy/bench/full-runs.jsonl under its
# commit ("+changes" when the code differs from it), for the variance table.
RECORD_AS=
if [ -z "${QK_SERVER:-}" ] && [ -z "${RUNS:-}${QUICK:-}${TLS:-}" ] && [ -z "${SYSTEMS:-}" ]; then
  RECORD_AS=$(git rev-parse --short HEAD)
  git diff --quiet HEAD -- . ':!docs' ':!deploy/bench/full-runs.jsonl' || RECORD_AS+="+changes"
fi
QK_SERVER=${QK_SERVER:-$QK}
if [ -n "${TLS:-}" ]; then OUT=${OUT:-/var/tmp/qk-bench-results-tls}; else OUT=${OUT:-/var/tmp/qk-bench-results}; fi
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/qk-compare.XXXXXX")
# With TLS=1, one CA and certificate for both systems (members.sh makes them once).
TLS_DIR=$WORK/tls
SYSTEMS=${SYSTEMS:-"etcd quantykube"}
if [ -n "${QUICK:-}" ]; then DURATION=3s; RSS_KEYS=20000; SUSTAINED_TOTAL=100000; SUSTAINED_KEYS=20000
else DURATION=${DURATION:-20s}; RSS_KEYS=1000000; SUSTAINED_TOTAL=${SUSTAINED_TOTAL:-5000000}; SUSTAINED_KEYS=1000000; fi
SUSTAINED_WINDOW=${SUSTAINED_WINDOW:-5s}
mkdir -p "$OUT"
pids=()
cleanup() { stop_members; finish_work; }
trap cleanup EXIT INT TERM
# shellcheck source=deploy/bench/members.sh
. deploy/bench/members.sh

start_cluster() { # $1 = system name, $2 = binary
  pids=()
  rm -rf "$WORK/$1"
  start_members "$2" "$WORK/$1" bench --quota-backend-bytes 8589934592 && return 0
  echo "$1 did not start; logs in $WORK/$1" >&2; trap - EXIT; return 1
}


wanted() { [ -z "${RUNS:-}" ] || [[ " $RUNS " == *" $1 "* ]]; }

# CPU time (user + system, in clock ticks) the cluster's members have used so far.
cpu_ticks() {
  local p total=0
  for p in "${pids[@]}"; do
    # Fields 14 and 15 of /proc/PID/stat, counted after the ")" that ends the name.
    total=$((total + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
  done
  echo "$total"
}

bench() { # $1 = system, $2 = run name, rest = bench arguments
  local system=$1 run=$2 before; shift 2
  wanted "$run" || [ "$run" = preload ] || return 0
  echo "  $run: quantykube bench $*" >&2
  before=$(cpu_ticks)
  "$QK" bench "$@" --endpoints "$ENDPOINTS" "${BENCH_TLS[@]}" --output json >"$OUT/$system-$run.json" \
    2>"$OUT/$system-$run.err" || echo "  ($run exited with $?; see $OUT/$system-$run.err)" >&2
  # The servers' CPU seconds during the run: with the cores saturated, CPU per
  # operation is what bounds throughput.
  echo "$(( $(cpu_ticks) - before )) $(getconf CLK_TCK)" | awk '{print $1 / $2}' >"$OUT/$system-$run.cpu"
  printf '%s\n' "$*" >"$OUT/$system-$run.cmd"
}

peak_rss_kib() { # the largest VmHWM (peak resident set) of this cluster's members
  local max=0 p v
  for p in "${pids[@]}"; do
    v=$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
    [ "${v:-0}" -gt "$max" ] && max=$v
  done
  echo "$max"
}

for system in $SYSTEMS; do
  case $system in
    etcd) bin=$(command -v etcd) ;;
    quantykube) bin=$QK_SERVER ;;
    *) echo "unknown system $system" >&2; exit 2 ;;
  esac
  echo "== $system: $("$bin" --version | sed -n 1p)" >&2
  "$bin" --version | sed -n 1p >"$OUT/$system-version.txt"

  start_cluster "$system" "$bin"
  common=(--duration "$DURATION" --key-size 8 --val-size 256)
  bench "$system" put-1 put "${common[@]}" --clients 1 --conns 1 --key-space-size 100000 --target-leader
  bench "$system" put-10 put "${common[@]}" --clients 10 --conns 10 --key-space-size 100000 --target-leader
  bench "$system" put-100 put "${common[@]}" --clients 100 --conns 10 --key-space-size 100000 --target-leader \
    --timeline 1s
  # Keys 00000000..00000999 exist from here on: single-key reads and the 1 000-key range use them.
  bench "$system" preload put --total 1000 --clients 10 --conns 10 --key-size 8 --val-size 256 \
    --key-space-size 1000 --sequential-keys
  bench "$system" range-l-100 range "${common[@]}" --clients 100 --conns 10 --key-space-size 1000 --consistency l
  bench "$system" range-s-100 range "${common[@]}" --clients 100 --conns 10 --key-space-size 1000 --consistency s
  bench "$system" txn-cas-100 txn-cas "${common[@]}" --clients 100 --conns 10 --key-space-size 1000
  bench "$system" range-1000 range 00000000 00001000 --limit 1000 --duration "$DURATION" --clients 10 --conns 10 --consistency l
  bench "$system" watch watch --duration "$DURATION" --watchers 1000 --streams 10 --put-rate 1000 \
    --clients 10 --conns 10 --key-size 8 --val-size 256
  bench "$system" lease-keepalive lease-keepalive --duration "$DURATION" --leases 1000 --clients 10 --conns 10
  stop_members

  # Sustained puts on a fresh cluster, compacted as the Kubernetes API server compacts:
  # does throughput hold as the store fills? Window by window, for the charts.
  if wanted sustained; then
    start_cluster "$system" "$bin"
    bench "$system" sustained put --total "$SUSTAINED_TOTAL" --key-space-size "$SUSTAINED_KEYS" \
      --compact-every 10000 --timeline "$SUSTAINED_WINDOW" --clients 100 --conns 10 \
      --key-size 8 --val-size 256 --target-leader
    stop_members
  fi

  # Peak RSS: a fresh cluster, RSS_KEYS distinct keys written once, then the members'
  # peak resident set.
  wanted rss || continue
  start_cluster "$system" "$bin"
  RUNS= bench "$system" load put --total "$RSS_KEYS" --clients 100 --conns 10 --key-size 8 --val-size 256 \
    --key-space-size "$RSS_KEYS" --sequential-keys
  peak_rss_kib >"$OUT/$system-rss-kib.txt"
  du -sk --exclude='*.log' "$WORK/$system" | awk '{print $1}' >"$OUT/$system-disk-kib.txt"
  stop_members
done

if [ "${REPORT:-1}" = 0 ]; then
  echo "results in $OUT; docs/benchmarks.md left alone (REPORT=0)" >&2
  exit 0
fi
if [ -n "${TLS:-}" ]; then
  # docs/benchmarks.md's tables are the plaintext runs; TLS results must not replace them.
  echo "TLS results in $OUT; docs/benchmarks.md left alone" >&2
  exit 0
fi
# The charts, drawn with matplotlib from a venv of its own (pinned in charts-requirements.txt).
CHARTS_VENV=${QK_CHARTS_VENV:-/var/tmp/qk-charts-venv}
if [ ! -x "$CHARTS_VENV/bin/python" ] || ! "$CHARTS_VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
  python3 -m venv "$CHARTS_VENV"
  "$CHARTS_VENV/bin/pip" install -q -r deploy/bench/charts-requirements.txt
fi
"$CHARTS_VENV/bin/python" deploy/bench/charts.py "$OUT" docs/img/benchmarks
python3 deploy/bench/render-report.py "$OUT" ${RECORD_AS:+--record "$RECORD_AS"} \
  <docs/benchmarks.md >docs/benchmarks.md.new
mv docs/benchmarks.md.new docs/benchmarks.md
echo "wrote docs/benchmarks.md (raw results in $OUT)" >&2
