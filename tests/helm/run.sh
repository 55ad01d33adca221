#!/usr/bin/env bash
# Renders deploy/helm/quantykube with real Helm (the Go SDK bundled in PyPI's
# helm-python-sdk: no helm binary is packaged for Debian or PyPI) and validates every
# object against Kubernetes' OpenAPI schemas (kubernetes-validate). The venv lives
# outside the tree and is reused; packages are installed only when missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${QK_HELM_VENV:-/var/tmp/quantykube-helm-venv}"
py="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import helm_python, kubernetes_validate, pytest, jsonschema, yaml, cryptography' 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    helm-python-sdk==0.2.2 kubernetes-validate==1.37.0 pytest jsonschema pyyaml cryptography
fi

cd "$here"
set +e
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$here" "$@"
exit $?
