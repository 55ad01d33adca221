#!/usr/bin/env bash
# `make test`: every suite runs, even after another failed, and the failures are listed
# at the end (the exit status is non-zero if any failed).
#   1. the server with its planted bugs compiled in (the crash tests' planted runs), and
#      the previous release's server (the rolling upgrade test; Rust crates only)
#   2. every Rust test of the workspace (unit, e2e, crash, docker, simulation), all of
#      them even after a failure (--no-fail-fast)
#   3. the Helm chart, the Python gateway clients, the benchmark report's scripts
set -uo pipefail
cd "$(dirname "$0")/.."
failed=()
suite() {
  local name=$1
  shift
  echo "=== $name: $*"
  if ! "$@"; then
    failed+=("$name")
  fi
}
suite planted-binary cargo build --bin quantykube-planted --features planted-bugs
suite previous-release ./deploy/local/build-previous-release.sh
suite rust cargo test --workspace --all-targets --no-fail-fast -- --test-threads=2
suite helm ./tests/helm/run.sh
suite python ./tests/python/run.sh
suite bench-scripts python3 -m unittest discover -s deploy/bench -p '*_test.py'
if [ ${#failed[@]} -gt 0 ]; then
  echo "=== failed: ${failed[*]}"
  exit 1
fi
echo "=== every suite passed"
