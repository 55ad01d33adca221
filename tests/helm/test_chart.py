"""The Helm chart deploy/helm/quantykube, rendered by real Helm (the Go SDK inside
helm-python-sdk) and validated against Kubernetes' OpenAPI schemas (kubernetes-validate).

Kinds that come from CRDs (ServiceMonitor, PodMonitor, PrometheusRule, cert-manager's
Certificate) have no schema in kubernetes-validate; they are checked against the
minimal schemas below, written from the fields the CRDs require or this chart relies on.
"""

from __future__ import annotations

import base64
import functools
import itertools
import ipaddress
import os
from pathlib import Path
from typing import Any, Iterator

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "quantykube"
RELEASE = "rel"
NAMESPACE = "ns"
FULLNAME = "rel-quantykube"
HEADLESS = "rel-quantykube-headless"
PEER_DOMAIN = f"{HEADLESS}.{NAMESPACE}.svc.cluster.local"
# Old enough to catch a field newer clusters added; the chart's kubeVersion is >=1.27,
# but kubernetes-validate's oldest strict schemas that carry every field we use are 1.30.
KUBE_VERSION = os.environ.get("QK_KUBE_VERSION", "1.30.0")
BINARY = "/quantykube"
SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "ash", "/bin/ash", "dash", "-c"}

MIXIN_ALERTS = {
    "etcdMembersDown",
    "etcdInsufficientMembers",
    "etcdNoLeader",
    "etcdHighNumberOfLeaderChanges",
    "etcdGRPCRequestsSlow",
    "etcdMemberCommunicationSlow",
    "etcdHighNumberOfFailedProposals",
    "etcdHighFsyncDurations",
    "etcdHighCommitDurations",
    "etcdDatabaseQuotaLowSpace",
    "etcdExcessiveDatabaseGrowth",
    "etcdDatabaseHighFragmentationRatio",
}

_META = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string", "minLength": 1}, "namespace": {"type": "string"}},
}
_SELECTOR = {
    "type": "object",
    "required": ["matchLabels"],
    "properties": {"matchLabels": {"type": "object", "minProperties": 1}},
}
_RELABEL = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "action": {"enum": ["replace", "keep", "drop", "labelmap", "labeldrop", "labelkeep"]},
            "targetLabel": {"type": "string"},
            "replacement": {"type": "string"},
        },
    },
}
_ENDPOINT = {
    "type": "object",
    "required": ["port"],
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string"},
        "scheme": {"enum": ["http", "https"]},
        "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
        "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
        "relabelings": _RELABEL,
    },
}


def _crd(spec: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": _META,
            "spec": spec,
        },
    }


CRD_SCHEMAS = {
    "ServiceMonitor": _crd(
        {
            "type": "object",
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": _SELECTOR,
                "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
                "namespaceSelector": {"type": "object"},
            },
        },
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
    ),
    "PodMonitor": _crd(
        {
            "type": "object",
            "required": ["selector", "podMetricsEndpoints"],
            "properties": {
                "selector": _SELECTOR,
                "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
            },
        },
        "monitoring.coreos.com/v1",
        "PodMonitor",
    ),
    "PrometheusRule": _crd(
        {
            "type": "object",
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["alert", "expr"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": {"type": "string", "pattern": "^[0-9]+(s|m|h)$"},
                                        "labels": {
                                            "type": "object",
                                            "additionalProperties": {"type": "string"},
                                        },
                                        "annotations": {
                                            "type": "object",
                                            "additionalProperties": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
        "monitoring.coreos.com/v1",
        "PrometheusRule",
    ),
    "Certificate": _crd(
        {
            "type": "object",
            "required": ["secretName", "issuerRef"],
            "properties": {
                "secretName": {"type": "string", "minLength": 1},
                "issuerRef": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "kind": {"type": "string"},
                        "group": {"type": "string"},
                    },
                },
                "dnsNames": {"type": "array", "items": {"type": "string"}},
                "ipAddresses": {"type": "array", "items": {"type": "string"}},
                "usages": {
                    "type": "array",
                    "items": {
                        "enum": [
                            "digital signature",
                            "key encipherment",
                            "server auth",
                            "client auth",
                        ]
                    },
                },
                "duration": {"type": "string"},
                "renewBefore": {"type": "string"},
                "privateKey": {"type": "object"},
            },
        },
        "cert-manager.io/v1",
        "Certificate",
    ),
}


# --- rendering ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded


_CHART: helm_python.Chart | None = None


def _chart() -> helm_python.Chart:
    global _CHART
    if _CHART is None:
        _CHART = helm_python.Chart.load(CHART)
    return _CHART


def render_raw(values: dict[str, Any], release: str = RELEASE) -> dict[str, str]:
    return _chart().render(values, name=release, namespace=NAMESPACE, is_install=True)


def render(values: dict[str, Any], release: str = RELEASE) -> list[dict[str, Any]]:
    objects = []
    for path, text in render_raw(values, release).items():
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append(doc)
    return objects


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} named {name}"
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for o in objects:
        if o["kind"] == "StatefulSet":
            yield "StatefulSet", o["spec"]["template"]["spec"]
        elif o["kind"] == "CronJob":
            yield "CronJob", o["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif o["kind"] == "Pod":
            yield "Pod", o["spec"]


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)


TLS_MODES = ["off", "generate", "existingSecret", "certManager"]
COMBOS = list(itertools.product(TLS_MODES, [1, 3, 5], [True, False], [True, False]))


def combo_values(tls: str, replicas: int, persistence: bool, extras: bool) -> dict[str, Any]:
    values: dict[str, Any] = {
        "replicaCount": replicas,
        "persistence": {"enabled": persistence},
        "metrics": {
            "serviceMonitor": {"enabled": extras},
            "podMonitor": {"enabled": extras},
            "prometheusRule": {"enabled": extras},
        },
        "snapshots": {"enabled": extras},
    }
    if tls == "off":
        values["tls"] = {"enabled": False}
    elif tls == "existingSecret":
        values["tls"] = {
            "source": "existingSecret",
            "existingSecret": {"client": "my-client-tls", "peer": "my-peer-tls"},
        }
    elif tls == "certManager":
        values["tls"] = {
            "source": "certManager",
            "certManager": {"issuerRef": {"name": "etcd-ca", "kind": "ClusterIssuer"}},
        }
    return values


@functools.lru_cache(maxsize=None)
def rendered(tls: str, replicas: int, persistence: bool, extras: bool) -> list[dict[str, Any]]:
    return render(combo_values(tls, replicas, persistence, extras))


def combo_id(c: tuple[str, int, bool, bool]) -> str:
    tls, replicas, persistence, extras = c
    return f"tls-{tls}-r{replicas}-{'pvc' if persistence else 'emptydir'}-{'metrics' if extras else 'plain'}"


combos = pytest.mark.parametrize("combo", COMBOS, ids=[combo_id(c) for c in COMBOS])


# --- lint and schema ----------------------------------------------------------------


def test_lint_has_no_warnings_or_errors() -> None:
    for values in [None, combo_values("certManager", 5, True, True), combo_values("off", 1, False, False)]:
        report = helm_python.lint(CHART, values, strict=True, kube_version=f"v{KUBE_VERSION}")
        assert report["errors"] == [], report
        # Severity 1 is informational (e.g. "icon is recommended").
        assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


def test_schema_accepts_defaults_and_every_combination(chart: helm_python.Chart) -> None:
    chart.validate_schema({})
    for c in COMBOS:
        chart.validate_schema(combo_values(*c))


@pytest.mark.parametrize(
    "bad",
    [
        {"replicaCount": "three"},
        {"replicaCount": -1},
        {"replicaCount": 0},
        {"replicaCount": 3.5},
        {"replicas": 3},
        {"tls": {"enabled": "yes"}},
        {"tls": {"source": "selfSigned"}},
        {"tls": {"bogus": True}},
        {"ports": {"client": 70000}},
        {"ports": {"client": "2379"}},
        {"persistence": {"retentionPolicy": {"whenScaled": "Keep"}}},
        {"podAntiAffinity": "always"},
        {"etcd": {"logLevel": "verbose"}},
        {"etcd": {"quotaBackendBytes": "8G"}},
        {"snapshots": {"keep": 0}},
        {"extraEnv": {"ETCD_FOO": "1"}},
        {"dataDir": "/data"},
    ],
    ids=lambda b: str(b),
)
def test_schema_rejects(chart: helm_python.Chart, bad: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        chart.validate_schema(bad)
    # And an install with them fails before anything renders.
    with pytest.raises(helm_python.HelmValuesError):
        render_raw(bad)


# --- every combination ----------------------------------------------------------------


@combos
def test_objects_are_valid_kubernetes(combo: tuple[str, int, bool, bool]) -> None:
    for obj in rendered(*combo):
        kind = obj["kind"]
        if kind in CRD_SCHEMAS:
            jsonschema.validate(obj, CRD_SCHEMAS[kind])
        else:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        assert obj["metadata"]["namespace"] == NAMESPACE, kind


@combos
def test_statefulset(combo: tuple[str, int, bool, bool]) -> None:
    tls, replicas, persistence, _ = combo
    objects = rendered(*combo)
    sts = one(objects, "StatefulSet", FULLNAME)
    spec = sts["spec"]
    assert spec["replicas"] == replicas
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    assert spec["serviceName"] == HEADLESS
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == FULLNAME
    assert pod["terminationGracePeriodSeconds"] == 60
    assert "preferredDuringSchedulingIgnoredDuringExecution" in pod["affinity"]["podAntiAffinity"]
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    (c,) = pod["containers"]
    assert c["command"] == [BINARY, "pod", "start"]
    assert "args" not in c
    assert c["lifecycle"]["preStop"] == {"exec": {"command": [BINARY, "pod", "stop"]}}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {
        "client": 2379,
        "peer": 2380,
        "metrics": 2381,
    }
    for probe, path in [("startupProbe", "/livez"), ("livenessProbe", "/livez"), ("readinessProbe", "/readyz")]:
        assert set(c[probe]) - {"periodSeconds", "timeoutSeconds", "failureThreshold"} == {"httpGet"}, probe
        assert c[probe]["httpGet"] == {"path": path, "port": 2381}, probe
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 600

    env = env_of(c)
    assert env["QK_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["QK_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["QK_STATEFULSET"] == FULLNAME
    assert env["QK_PEER_SERVICE"] == PEER_DOMAIN
    assert env["QK_REPLICAS"] == str(replicas)
    assert env["QK_CLUSTER_TOKEN"] == f"{RELEASE}-{NAMESPACE}"
    assert (env["QK_CLIENT_PORT"], env["QK_PEER_PORT"], env["QK_METRICS_PORT"]) == ("2379", "2380", "2381")
    assert env["ETCD_DATA_DIR"] == "/var/lib/quantykube"
    assert env["ETCD_LISTEN_METRICS_URLS"] == "http://0.0.0.0:2381"
    assert env["ETCD_QUOTA_BACKEND_BYTES"] == "2147483648"
    for name in [
        "ETCD_SNAPSHOT_COUNT",
        "ETCD_HEARTBEAT_INTERVAL",
        "ETCD_ELECTION_TIMEOUT",
        "ETCD_AUTO_COMPACTION_MODE",
        "ETCD_AUTO_COMPACTION_RETENTION",
        "ETCD_LOG_LEVEL",
    ]:
        assert isinstance(env[name], str) and env[name], name
    # The binary computes these itself; a value here would fight it.
    for name in ["ETCD_NAME", "ETCD_INITIAL_CLUSTER", "ETCD_INITIAL_CLUSTER_STATE"]:
        assert name not in env

    tls_vars = {
        "ETCD_CERT_FILE": "/etc/quantykube/tls/client/tls.crt",
        "ETCD_KEY_FILE": "/etc/quantykube/tls/client/tls.key",
        "ETCD_TRUSTED_CA_FILE": "/etc/quantykube/tls/client/ca.crt",
        "ETCD_CLIENT_CERT_AUTH": "true",
        "ETCD_PEER_CERT_FILE": "/etc/quantykube/tls/peer/tls.crt",
        "ETCD_PEER_KEY_FILE": "/etc/quantykube/tls/peer/tls.key",
        "ETCD_PEER_TRUSTED_CA_FILE": "/etc/quantykube/tls/peer/ca.crt",
        "ETCD_PEER_CLIENT_CERT_AUTH": "true",
    }
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["data"] == "/var/lib/quantykube"
    if tls == "off":
        assert not set(tls_vars) & set(env)
        assert "client-tls" not in volumes and "peer-tls" not in volumes
    else:
        assert {k: env.get(k) for k in tls_vars} == tls_vars
        assert mounts["client-tls"] == "/etc/quantykube/tls/client"
        assert mounts["peer-tls"] == "/etc/quantykube/tls/peer"
        expected = {
            "existingSecret": ("my-client-tls", "my-peer-tls"),
        }.get(tls, (f"{FULLNAME}-client-tls", f"{FULLNAME}-peer-tls"))
        assert (
            volumes["client-tls"]["secret"]["secretName"],
            volumes["peer-tls"]["secret"]["secretName"],
        ) == expected
        for side in ["client-tls", "peer-tls"]:
            assert {i["key"] for i in volumes[side]["secret"]["items"]} == {"ca.crt", "tls.crt", "tls.key"}

    if persistence:
        (claim,) = spec["volumeClaimTemplates"]
        assert claim["metadata"]["name"] == "data"
        assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
        assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
        assert "data" not in volumes
    else:
        assert "volumeClaimTemplates" not in spec
        assert "persistentVolumeClaimRetentionPolicy" not in spec
        assert volumes["data"] == {"name": "data", "emptyDir": {}}


@combos
def test_services(combo: tuple[str, int, bool, bool]) -> None:
    objects = rendered(*combo)
    sts = one(objects, "StatefulSet")
    member_labels = sts["spec"]["template"]["metadata"]["labels"]
    headless = one(objects, "Service", HEADLESS)["spec"]
    assert headless["clusterIP"] == "None"
    assert headless["publishNotReadyAddresses"] is True
    assert {p["name"]: p["port"] for p in headless["ports"]} == {
        "client": 2379,
        "etcd-server": 2380,
        "metrics": 2381,
    }
    client = one(objects, "Service", FULLNAME)["spec"]
    assert [p["port"] for p in client["ports"]] == [2379]
    assert not client.get("publishNotReadyAddresses")
    metrics = one(objects, "Service", f"{FULLNAME}-metrics")["spec"]
    assert [p["port"] for p in metrics["ports"]] == [2381]
    for svc in by_kind(objects, "Service"):
        assert svc["spec"]["selector"].items() <= member_labels.items()
    # Snapshot and test pods must not become endpoints.
    for kind, pod in pod_specs(objects):
        if kind != "StatefulSet":
            labels = (
                one(objects, "Pod")["metadata"]["labels"]
                if kind == "Pod"
                else one(objects, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
            )
            assert not headless["selector"].items() <= labels.items(), kind


@combos
def test_pod_disruption_budget_keeps_quorum(combo: tuple[str, int, bool, bool]) -> None:
    _, replicas, _, _ = combo
    objects = rendered(*combo)
    quorum = replicas // 2 + 1
    pdbs = by_kind(objects, "PodDisruptionBudget")
    if replicas - quorum < 1:
        assert pdbs == []
        return
    (pdb,) = pdbs
    assert pdb["spec"]["maxUnavailable"] == replicas - quorum
    assert "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"] == one(objects, "StatefulSet")["spec"]["selector"]["matchLabels"]
    assert {3: 1, 5: 2}[replicas] == pdb["spec"]["maxUnavailable"]


@combos
def test_no_shell_and_binary_commands_only(combo: tuple[str, int, bool, bool]) -> None:
    objects = rendered(*combo)
    for kind, pod in pod_specs(objects):
        for c in pod.get("initContainers", []) + pod["containers"]:
            commands = [c.get("command", []), c.get("args", [])]
            hook = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
            if hook:
                commands.append(hook)
            for probe in ["startupProbe", "livenessProbe", "readinessProbe"]:
                assert "exec" not in c.get(probe, {}), (kind, probe)
            for command in commands:
                assert not SHELLS & set(command), (kind, command)
                assert not any(w.startswith(("sh ", "bash ")) for w in command), (kind, command)
            assert c["command"][0] == BINARY, kind


@combos
def test_security_context(combo: tuple[str, int, bool, bool]) -> None:
    objects = rendered(*combo)
    kinds = set()
    for kind, pod in pod_specs(objects):
        kinds.add(kind)
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 65532 and psc["fsGroup"] == 65532
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        if kind != "StatefulSet":
            assert pod["automountServiceAccountToken"] is False
    assert {"StatefulSet", "Pod"} <= kinds


@combos
def test_https_only_with_tls(combo: tuple[str, int, bool, bool]) -> None:
    tls, replicas, _, extras = combo
    objects = rendered(*combo)
    # The alerts' runbook links are documentation, not endpoints.
    urls = [s for o in objects if o["kind"] != "PrometheusRule" for s in strings(o) if "://" in s]
    https = [u for u in urls if "https://" in u]
    if tls == "off":
        assert https == []
    else:
        assert https
        # Plain HTTP only where it is meant: the metrics listener.
        for u in urls:
            if "http://" in u:
                assert u == "http://0.0.0.0:2381", u

    scheme = "http" if tls == "off" else "https"
    test_pod = one(objects, "Pod", f"{FULLNAME}-check")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (c,) = test_pod["spec"]["containers"]
    assert c["command"] == [BINARY, "pod", "check"]
    env = env_of(c)
    assert env["QK_ENDPOINTS"].split(",") == [
        f"{scheme}://{FULLNAME}-{i}.{PEER_DOMAIN}:2379" for i in range(replicas)
    ]
    assert env["QK_REPLICAS"] == str(replicas)
    assert ("ETCD_CERT_FILE" in env) == (tls != "off")

    cronjobs = by_kind(objects, "CronJob")
    if not extras:
        assert cronjobs == []
        return
    (cron,) = cronjobs
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    (sc,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    cmd = sc["command"]
    assert cmd[:3] == [BINARY, "snapshot", "save"]
    assert f"--endpoints={scheme}://{FULLNAME}.{NAMESPACE}.svc.cluster.local:2379" in cmd
    assert "--keep=7" in cmd
    assert cmd[-1] == "/snapshots/"
    tls_flags = {a.split("=")[0] for a in cmd if a.startswith(("--cacert", "--cert", "--key"))}
    assert tls_flags == (set() if tls == "off" else {"--cacert", "--cert", "--key"})


@combos
def test_monitoring_only_when_enabled(combo: tuple[str, int, bool, bool]) -> None:
    _, _, _, extras = combo
    objects = rendered(*combo)
    for kind in ["ServiceMonitor", "PodMonitor", "PrometheusRule"]:
        assert len(by_kind(objects, kind)) == (1 if extras else 0), kind
    if not extras:
        return
    sm = one(objects, "ServiceMonitor")
    metrics_svc = one(objects, "Service", f"{FULLNAME}-metrics")
    assert sm["spec"]["selector"]["matchLabels"].items() <= metrics_svc["metadata"]["labels"].items()
    for svc in by_kind(objects, "Service"):
        if svc is not metrics_svc:
            assert not sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    for monitor, endpoints in [(sm, "endpoints"), (one(objects, "PodMonitor"), "podMetricsEndpoints")]:
        (ep,) = monitor["spec"][endpoints]
        assert (ep["port"], ep["path"], ep["scheme"]) == ("metrics", "/metrics", "http")
        assert {"action": "replace", "targetLabel": "job", "replacement": FULLNAME} in ep["relabelings"]
    rules = [r for g in one(objects, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    assert MIXIN_ALERTS <= {r["alert"] for r in rules}
    for r in rules:
        assert f'job="{FULLNAME}"' in r["expr"], r["alert"]
        assert "etcd.*" not in r["expr"], r["alert"]
        # Prometheus' own templates survive Helm's.
        assert "{{ $labels." in r["annotations"]["description"], r["alert"]


@combos
def test_rbac_is_limited_to_the_statefulset(combo: tuple[str, int, bool, bool]) -> None:
    objects = rendered(*combo)
    sa = one(objects, "ServiceAccount")
    role = one(objects, "Role")
    assert role["rules"] == [
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "resourceNames": [FULLNAME], "verbs": ["get"]}
    ]
    binding = one(objects, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]
    assert by_kind(objects, "ClusterRole") == [] and by_kind(objects, "ClusterRoleBinding") == []


@combos
def test_tls_sources(combo: tuple[str, int, bool, bool]) -> None:
    tls, _, _, _ = combo
    objects = rendered(*combo)
    secrets = by_kind(objects, "Secret")
    certs = by_kind(objects, "Certificate")
    if tls == "generate":
        assert {s["metadata"]["name"] for s in secrets} == {f"{FULLNAME}-client-tls", f"{FULLNAME}-peer-tls"}
        assert certs == []
    elif tls == "certManager":
        assert secrets == []
        assert {c["spec"]["secretName"] for c in certs} == {f"{FULLNAME}-client-tls", f"{FULLNAME}-peer-tls"}
        for c in certs:
            assert {"server auth", "client auth"} <= set(c["spec"]["usages"])
            assert set(expected_dns_names()) <= set(c["spec"]["dnsNames"])
            assert c["spec"]["ipAddresses"] == ["127.0.0.1"]
            assert c["spec"]["issuerRef"] == {"name": "etcd-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    else:
        assert secrets == [] and certs == []


# --- generated certificates ------------------------------------------------------------


def expected_dns_names() -> list[str]:
    return [
        f"*.{HEADLESS}.{NAMESPACE}.svc.cluster.local",
        f"{HEADLESS}.{NAMESPACE}.svc.cluster.local",
        f"{FULLNAME}.{NAMESPACE}.svc.cluster.local",
        f"{FULLNAME}.{NAMESPACE}.svc",
        f"{FULLNAME}.{NAMESPACE}",
        FULLNAME,
        "localhost",
    ]


def _pem(secret: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def test_generated_certificates() -> None:
    objects = rendered("generate", 3, True, False)
    secrets = {s["metadata"]["name"]: s for s in by_kind(objects, "Secret")}
    cas = set()
    for side in ["client", "peer"]:
        secret = secrets[f"{FULLNAME}-{side}-tls"]
        assert secret["type"] == "kubernetes.io/tls"
        ca = x509.load_pem_x509_certificate(_pem(secret, "ca.crt"))
        cert = x509.load_pem_x509_certificate(_pem(secret, "tls.crt"))
        cas.add(ca.fingerprint(ca.signature_hash_algorithm))
        assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True

        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = set(san.get_values_for_type(x509.DNSName))
        assert set(expected_dns_names()) <= dns, dns
        assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)

        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert ExtendedKeyUsageOID.SERVER_AUTH in eku and ExtendedKeyUsageOID.CLIENT_AUTH in eku

        assert cert.issuer == ca.subject
        public = ca.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            public.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm)
        else:
            assert isinstance(public, ec.EllipticCurvePublicKey)
            public.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))

        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        key = load_pem_private_key(_pem(secret, "tls.key"), password=None)
        assert key.public_key().public_numbers() == cert.public_key().public_numbers()
    # One CA for both sides: a member's client certificate is also what it dials peers'
    # client URLs with.
    assert len(cas) == 1


# --- values that change the output ------------------------------------------------------


def test_custom_ports_domain_token_and_env() -> None:
    objects = render(
        {
            "ports": {"client": 12379, "peer": 12380, "metrics": 12381},
            "clusterDomain": "example.internal",
            "clusterToken": "keep-me",
            "extraEnv": [{"name": "ETCD_EXPERIMENTAL_X", "value": "1"}],
            "podAntiAffinity": "hard",
            "persistence": {"retentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"}},
            "etcd": {"quotaBackendBytes": 8589934592, "autoCompactionRetention": "1h"},
        }
    )
    sts = one(objects, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = env_of(c)
    assert env["QK_PEER_SERVICE"] == f"{HEADLESS}.{NAMESPACE}.svc.example.internal"
    assert env["QK_CLUSTER_TOKEN"] == "keep-me"
    assert (env["QK_CLIENT_PORT"], env["QK_PEER_PORT"], env["QK_METRICS_PORT"]) == ("12379", "12380", "12381")
    assert env["ETCD_LISTEN_METRICS_URLS"] == "http://0.0.0.0:12381"
    assert env["ETCD_EXPERIMENTAL_X"] == "1"
    assert env["ETCD_QUOTA_BACKEND_BYTES"] == "8589934592"
    assert env["ETCD_AUTO_COMPACTION_RETENTION"] == "1h"
    assert c["readinessProbe"]["httpGet"]["port"] == 12381
    assert "requiredDuringSchedulingIgnoredDuringExecution" in pod["affinity"]["podAntiAffinity"]
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete", "whenScaled": "Delete"}
    headless = one(objects, "Service", HEADLESS)
    assert {p["name"]: p["port"] for p in headless["spec"]["ports"]}["etcd-server"] == 12380
    test_env = env_of(one(objects, "Pod")["spec"]["containers"][0])
    assert test_env["QK_ENDPOINTS"].startswith(f"https://{FULLNAME}-0.{HEADLESS}.{NAMESPACE}.svc.example.internal:12379")
    secret = one(objects, "Secret", f"{FULLNAME}-peer-tls")
    cert = x509.load_pem_x509_certificate(_pem(secret, "tls.crt"))
    dns = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"*.{HEADLESS}.{NAMESPACE}.svc.example.internal" in dns
    for obj in objects:
        if obj["kind"] not in CRD_SCHEMAS:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_long_release_name_keeps_dns_labels_short() -> None:
    release = "r" * 53  # Helm's longest release name
    objects = render({"replicaCount": 5}, release=release)
    sts = one(objects, "StatefulSet")
    name = sts["metadata"]["name"]
    assert len(f"{name}-4") <= 63
    headless = sts["spec"]["serviceName"]
    assert len(headless) <= 63
    # The StatefulSet controller adds a controller-revision-hash label of name + 11 chars.
    assert len(name) + 11 <= 63
    for obj in objects:
        if obj["kind"] not in CRD_SCHEMAS:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_snapshot_existing_claim_makes_no_claim() -> None:
    objects = render({"snapshots": {"enabled": True, "keep": 30, "persistence": {"existingClaim": "backups"}}})
    assert by_kind(objects, "PersistentVolumeClaim") == []
    cron = one(objects, "CronJob")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert {v["name"]: v for v in pod["volumes"]}["snapshots"]["persistentVolumeClaim"]["claimName"] == "backups"
    assert "--keep=30" in pod["containers"][0]["command"]


def test_snapshot_claim_outlives_the_release() -> None:
    objects = render({"snapshots": {"enabled": True}})
    pvc = one(objects, "PersistentVolumeClaim")
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_pdb_can_be_disabled() -> None:
    assert by_kind(render({"podDisruptionBudget": {"enabled": False}}), "PodDisruptionBudget") == []


@pytest.mark.parametrize("replicas,expected", [(2, None), (4, 1), (6, 2), (7, 3), (9, 4)])
def test_pdb_even_and_large(replicas: int, expected: int | None) -> None:
    pdbs = by_kind(render({"replicaCount": replicas}), "PodDisruptionBudget")
    assert [p["spec"]["maxUnavailable"] for p in pdbs] == ([] if expected is None else [expected])


@pytest.mark.parametrize(
    "values,message",
    [
        ({"tls": {"source": "existingSecret"}}, "tls.existingSecret.client is required"),
        ({"tls": {"source": "existingSecret", "existingSecret": {"client": "c"}}}, "tls.existingSecret.peer is required"),
        ({"tls": {"source": "certManager"}}, "tls.certManager.issuerRef.name is required"),
    ],
)
def test_missing_tls_inputs_fail_the_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmRenderError, match=message):
        render_raw(values)


def test_rbac_and_service_account_can_be_external() -> None:
    objects = render({"serviceAccount": {"create": False, "name": "etcd-sa"}, "rbac": {"create": False}})
    assert by_kind(objects, "ServiceAccount") == [] and by_kind(objects, "Role") == []
    assert one(objects, "StatefulSet")["spec"]["template"]["spec"]["serviceAccountName"] == "etcd-sa"


def test_notes_render() -> None:
    notes = render_raw({"persistence": {"enabled": False}})["quantykube/templates/NOTES.txt"]
    assert f"https://{FULLNAME}.{NAMESPACE}.svc.cluster.local:2379" in notes
    assert "persistence is off" in notes
    assert f"helm test {RELEASE}" in notes


def test_readme_lists_every_value() -> None:
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    defaults = _chart().values

    def leaves(node: Any, prefix: str = "") -> Iterator[str]:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                yield from leaves(v, f"{prefix}{k}.")
        else:
            yield prefix.rstrip(".")

    # Free-form maps are listed by their own name.
    free = ("resources.", "podSecurityContext.", "containerSecurityContext.")
    missing = [k for k in leaves(defaults) if not k.startswith(free) and f"`{k}`" not in readme]
    assert missing == []
