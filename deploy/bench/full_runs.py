"""The record of full compare.sh runs, and how much their ratios vary between runs.

Each full run (both systems, every workload, not QUICK, not TLS) appends one line to
deploy/bench/full-runs.jsonl: the build it measured and each system's figures per
workload. A single run's ratios have moved by a quarter between runs on a shared
machine, so docs/benchmarks.md shows the last three runs' ratios side by side with
their mean and spread. Only figures are kept, never ratios: a ratio is always computed
from the two systems' figures of one run.

This module owns the file's format and the table; render-report.py gathers the figures.
"""
import json
import statistics

# (label, workload, metric, higher is better). Ratios are QuantyKube against etcd,
# turned so that higher is better for QuantyKube, as in the tables above them.
RATIO_ROWS = [
    ("put ×1, throughput", "put-1", "throughput", True),
    ("put ×1, p50", "put-1", "p50", False),
    ("put ×1, p99", "put-1", "p99", False),
    ("put ×10, throughput", "put-10", "throughput", True),
    ("put ×100, throughput", "put-100", "throughput", True),
    ("put ×100, p99", "put-100", "p99", False),
    ("linearizable range ×100, throughput", "range-l-100", "throughput", True),
    ("serializable range ×100, throughput", "range-s-100", "throughput", True),
    ("txn-cas ×100, throughput", "txn-cas-100", "throughput", True),
    ("range of 1 000 keys, throughput", "range-1000", "throughput", True),
    ("watch, delivery p99", "watch", "p99", False),
    ("lease keep-alive, throughput", "lease-keepalive", "throughput", True),
    ("sustained, whole-run throughput", "sustained", "throughput", True),
    ("sustained, p99", "sustained", "p99", False),
    ("peak RSS at 1 000 000 keys", "rss", "mib", False),
    ("disk at 1 000 000 keys", "disk", "mib", False),
]
SHOWN = 3


def load(path):
    """Every recorded run, oldest first; a missing file is an empty record."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def append(path, run):
    with open(path, "a") as f:
        f.write(json.dumps(run, sort_keys=True, ensure_ascii=False) + "\n")


def ratio(run, workload, metric, higher_is_better):
    figures = run.get("workloads", {}).get(workload, {})
    etcd = figures.get("etcd", {}).get(metric)
    qk = figures.get("quantykube", {}).get(metric)
    if not etcd or not qk:
        return None
    return qk / etcd if higher_is_better else etcd / qk


def keep(run, system):
    """A system's last tenth of the sustained run as a share of its first tenth, in %."""
    figures = run.get("workloads", {}).get("sustained", {}).get(system, {})
    first, last = figures.get("first_tenth"), figures.get("last_tenth")
    return 100.0 * last / first if first and last else None


def cells(values, digits, unit):
    """Each run's value, then the mean, sample standard deviation and coefficient of
    variation of the values known (a run without the workload has none)."""
    shown = ["-" if v is None else f"{v:.{digits}f}{unit}" for v in values]
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return shown + ["-", "-", "-"]
    mean, sd = statistics.mean(known), statistics.stdev(known)
    return shown + [f"{mean:.{digits}f}{unit}", f"{sd:.{digits}f}", f"{100 * sd / mean:.0f}%"]


def table(runs):
    """The last SHOWN runs' ratios with their mean and spread, as markdown lines."""
    shown = runs[-SHOWN:]
    if len(shown) < 2:
        return []
    heads = [f"{r['build']} ({r['date']})" for r in shown]
    out = ["", f"### The ratios over the last {len(shown)} full runs", "",
           "Each column is one full `compare.sh` run (deploy/bench/full-runs.jsonl keeps "
           "every run's figures); builds differ between runs, so the spread is the "
           "machine's and the builds' together. Ratios are QuantyKube against etcd, "
           "higher is better for QuantyKube (for latency, RSS and disk: etcd's figure "
           "over ours). sd is the sample standard deviation, cv the sd over the mean.", "",
           "| ratio | " + " | ".join(heads) + " | mean | sd | cv |",
           "|---|" + "---|" * (len(shown) + 3)]
    for label, workload, metric, higher in RATIO_ROWS:
        values = [ratio(r, workload, metric, higher) for r in shown]
        out.append(f"| {label} | " + " | ".join(cells(values, 2, "x")) + " |")
    for system, name in (("quantykube", "QuantyKube"), ("etcd", "etcd")):
        values = [keep(r, system) for r in shown]
        out.append(f"| sustained, {name}'s last tenth / first tenth | "
                   + " | ".join(cells(values, 1, "%")) + " |")
    return out
