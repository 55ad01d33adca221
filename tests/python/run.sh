#!/usr/bin/env bash
# OpenStack's etcd gateway clients, etcd3gw 2.7.0 and tooz 9.1.0 (its etcd3gw driver:
# locks, groups, membership), and Debian's etcd3gw 2.0.0 (/v3alpha/), each tested with
# its own test suite against etcd 3.4 and against QuantyKube (clients.py compares them
# test by test). The pinned packages come from PyPI into venvs outside the tree, one per
# requirements file and keyed by its hash, made once and reused.
#
# The whole run is bounded by QK_PYCLIENTS_BUDGET seconds (default 280): installing may
# take what is left once 150 s are kept for the suites (which take about 70 s), and the
# suites get the rest.
#
# Env: QK_BIN (default $CARGO_TARGET_DIR/debug/quantykube), ETCD_BIN (default etcd on
# PATH), QK_PYCLIENTS_VENVS (where the venvs live, default /var/tmp), PYTHON.
set -euo pipefail
budget="${QK_PYCLIENTS_BUDGET:-280}"
suites_need=150

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
venvs_dir="${QK_PYCLIENTS_VENVS:-/var/tmp}"
qk="${QK_BIN:-${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}/debug/quantykube}"
etcd="${ETCD_BIN:-$(command -v etcd || true)}"

fail() { echo "tests/python: $*" >&2; exit 1; }
[ -x "$qk" ] || fail "no QuantyKube binary at $qk (cargo build --bin quantykube, or set QK_BIN)"
[ -n "$etcd" ] && [ -x "$etcd" ] || fail "no etcd 3.4 binary (make deps installs etcd-server, or set ETCD_BIN)"
"$py" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
  || fail "$py must be Python 3.11 or newer with venv and ensurepip (tooz 9.1.0 needs 3.11)"

# The venv for a requirements file: made in full or not at all (a marker is written
# last), so that a run cut short is redone rather than trusted.
venv_for() {
  local req="$1" name="$2"
  local key dir
  key="$(sha256sum "$req" | cut -c1-12)"
  dir="$venvs_dir/quantykube-pyclients-$name-$key"
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    "$py" -m venv "$dir" >&2
    local left=$((budget - SECONDS - suites_need))
    [ "$left" -gt 0 ] || fail "no time left to install $req within ${budget} s"
    if ! timeout "$left" "$dir/bin/python" -m pip install -q --disable-pip-version-check \
        --no-input --timeout 30 --retries 3 -r "$req" >&2; then
      rm -rf "$dir"
      fail "could not install $req from PyPI (is PyPI reachable?)"
    fi
    touch "$dir/.complete"
  fi
  echo "$dir"
}

main_venv="$(venv_for "$here/requirements.txt" main)"
debian_venv="$(venv_for "$here/requirements-etcd3gw-2.0.txt" etcd3gw-2.0)"

# clients.py stops its suites at its deadline and kills its servers itself on any exit
# or signal; the timeout only bounds a driver that hangs, and --kill-after one that
# ignores SIGTERM.
deadline=$((budget - SECONDS - 20))
exec timeout --kill-after=5 $((deadline + 10)) "$main_venv/bin/python" "$here/clients.py" \
  --qk "$qk" --etcd "$etcd" --venv "main=$main_venv" --venv "debian=$debian_venv" \
  --deadline "$deadline" "$@"
