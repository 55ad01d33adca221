#!/usr/bin/env bash
# Builds the optimised `quantykube` binary the benchmarks run, and prints its path.
#
# RocksDB's C++ takes 15-30 minutes to build on 2 cores. When the test build (the dev
# profile, RocksDB at -O2) already compiled it in the shared target dir, the release
# build links that library (ROCKSDB_LIB_DIR) instead of compiling it again; our Rust
# code and its dependencies are still built at opt-level 3. Otherwise it builds
# everything. Set QK_RELEASE_FULL=1 to force the full build.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}
# `quantykube --version` names the commit a release binary was built from.
QK_GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  QK_GIT_COMMIT="$QK_GIT_COMMIT-dirty"
fi
export QK_GIT_COMMIT
lib=""
if [ -z "${QK_RELEASE_FULL:-}" ]; then
  lib=$(ls -t "$CARGO_TARGET_DIR"/debug/build/librocksdb-sys-*/out/librocksdb.a 2>/dev/null | head -n1 || true)
fi
if [ -n "$lib" ]; then
  echo "linking the RocksDB built by the test build: $lib" >&2
  ROCKSDB_LIB_DIR=$(dirname "$lib") ROCKSDB_STATIC=1 cargo build --release --bin quantykube >&2
else
  cargo build --release --bin quantykube >&2
fi
echo "$CARGO_TARGET_DIR/release/quantykube"
