#!/usr/bin/env bash
# Builds the previous release's `quantykube` (the last line of releases.tsv) from its
# commit, for the rolling upgrade test (tests/e2e/rolling_upgrade.rs), and prints its
# path: <target>/previous/<tag>/quantykube.
#
# The release's sources are checked out in a detached worktree under the target dir
# (this clone's history holds the commit even when it carries no tags). It builds in a
# target dir of its own beside ours (the shared one would overwrite our binary), and
# links the RocksDB our own build compiled (ROCKSDB_LIB_DIR) instead of compiling its
# C++ again: only Rust crates are built. Nothing is rebuilt when the binary is there.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}
release=$(grep -v '^#' releases.tsv | awk -F'\t' 'NF >= 2 { tag = $1; commit = $2 } END { print tag " " commit }')
tag=${release% *}
commit=${release#* }
out="$CARGO_TARGET_DIR/previous/$tag/quantykube"
if [ -x "$out" ]; then
  echo "$out"
  exit 0
fi
src="$CARGO_TARGET_DIR/previous/$tag/src"
rm -rf "$src"
git worktree prune
git worktree add --detach "$src" "$commit" >&2
lib=$(ls -t "$CARGO_TARGET_DIR"/debug/build/librocksdb-sys-*/out/librocksdb.a 2>/dev/null | head -n1 || true)
(
  cd "$src"
  export CARGO_TARGET_DIR="$CARGO_TARGET_DIR/previous/target"
  export QK_GIT_COMMIT="$commit"
  if [ -n "$lib" ]; then
    echo "building $tag ($commit), linking the RocksDB built by our build: $lib" >&2
    ROCKSDB_LIB_DIR=$(dirname "$lib") ROCKSDB_STATIC=1 cargo build --bin quantykube >&2
  else
    cargo build --bin quantykube >&2
  fi
  cp "$CARGO_TARGET_DIR/debug/quantykube" "$out.tmp"
)
mv "$out.tmp" "$out"
git worktree remove --force "$src" >&2
echo "$out"
