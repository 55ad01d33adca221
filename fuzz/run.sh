#!/usr/bin/env bash
# Runs the fuzz targets: `fuzz/run.sh [SECONDS] [TARGET...]` (default 60 s each, every
# target). Built by cargo-fuzz on the stable toolchain (`--sanitizer none`: coverage-
# guided libFuzzer without a sanitizer; Rust code needs none to find panics, hangs and
# over-allocation). New inputs go to fuzz/work/<target>/ (not committed), findings to
# fuzz/artifacts/<target>/; a finding, once fixed, is copied to
# fuzz/regressions/<target>/, where `make test` replays it. Prints one line per target:
# wall and CPU seconds, executions, coverage (libFuzzer's cov and ft), corpus size and
# findings.
set -uo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
shift || true
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=($(ls fuzz_targets | sed 's/\.rs$//'))
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
# The vendored h2 turns `missing_docs` into an error under `--cfg fuzzing`; lints of
# path dependencies are not capped by cargo, so cap them all here.
RUSTFLAGS="--cap-lints=warn" cargo fuzz build --sanitizer none -O >build.log 2>&1 || {
  tail -30 build.log
  exit 1
}
bin_dir=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release
status=0
for target in "${targets[@]}"; do
  mkdir -p "work/$target" "artifacts/$target"
  log="work/$target.log"
  # -rss_limit_mb: an input that makes a target hold 2 GiB is a finding;
  # -timeout: one input running 10 s is a hang; -max_len: snapshot files need room.
  # CPU seconds as well as wall seconds: on a shared machine the two differ.
  TIMEFORMAT='%U %S'
  { time "$bin_dir/$target" "work/$target" "corpus/$target" \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
    -artifact_prefix="artifacts/$target/" -print_final_stats=1 >"$log" 2>&1; } 2>"$log.cpu"
  rc=$?
  cpu=$(awk '{printf "%d", $1 + $2}' "$log.cpu")
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -o 'cov: [0-9]* ft: [0-9]*')
  corpus=$(ls "work/$target" | wc -l)
  findings=$(ls "artifacts/$target" | wc -l)
  echo "$target: ${seconds}s (${cpu:-?} CPU s), ${execs:-?} executions, ${cov:-no coverage line}, corpus $corpus, findings $findings (exit $rc)"
  if [ "$rc" -ne 0 ] || [ "$findings" -ne 0 ]; then status=1; fi
done
exit $status
