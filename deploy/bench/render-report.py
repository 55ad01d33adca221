#!/usr/bin/env python3
"""Renders the side-by-side tables of docs/benchmarks.md from compare.sh's JSON.

Usage: render-report.py RESULTS_DIR [--record BUILD] < docs/benchmarks.md > new.md

Replaces what lies between the `<!-- compare.sh:begin -->` and `<!-- compare.sh:end -->`
markers with the tables (appending them if the markers are missing) and leaves the
hand-written findings around them alone. With --record (compare.sh passes it after a
full run), the run's figures are first appended to deploy/bench/full-runs.jsonl, whose
last three runs the page's variance table shows (full_runs.py).
"""
import datetime
import json
import os
import platform
import subprocess
import sys

import full_runs

BEGIN, END = "<!-- compare.sh:begin -->", "<!-- compare.sh:end -->"
# Where charts.py draws the charts this page embeds (relative to the repository root).
IMAGES = os.path.join("docs", "img", "benchmarks")
FULL_RUNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "full-runs.jsonl")
RUNS = [
    ("put-1", "put, 1 client, 1 connection"),
    ("put-10", "put, 10 clients, 10 connections"),
    ("put-100", "put, 100 clients, 10 connections"),
    ("range-l-100", "linearizable single-key range, 100 clients"),
    ("range-s-100", "serializable single-key range, 100 clients"),
    ("txn-cas-100", "txn-cas (range + compare-and-swap), 100 clients"),
    ("range-1000", "linearizable range of 1 000 keys, 10 clients"),
    ("watch", "watch: 1 000 watchers on 10 streams, puts at 1 000/s"),
    ("lease-keepalive", "lease keep-alive, 1 000 leases, 10 clients"),
]


def load(results, system, run):
    path = os.path.join(results, f"{system}-{run}.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read(results, name):
    try:
        with open(os.path.join(results, name)) as f:
            return f.read().strip()
    except OSError:
        return ""


def errors(r):
    if r is None:
        return "no result"
    if not r.get("errors_total"):
        return "0"
    kinds = sorted(r.get("errors", {}).items(), key=lambda kv: -kv[1])
    return f"{r['errors_total']} ({'; '.join(f'{k}: {n}' for k, n in kinds[:2])})"


def num(value, digits=1):
    return "-" if value is None else f"{value:,.{digits}f}"


def ratio(qk, etcd, higher_is_better=True):
    if not qk or not etcd:
        return "-"
    r = qk / etcd if higher_is_better else etcd / qk
    return f"{r:.2f}x"


def cpu_per_op_us(results, system, run, r):
    """The three members' CPU time over the run (compare.sh's .cpu file) per operation."""
    try:
        seconds = float(read(results, f"{system}-{run}.cpu"))
    except ValueError:
        return None
    return seconds * 1e6 / r["operations"] if usable(r) else None


def usable(r):
    return r is not None and r.get("operations", 0) > 0


def table(results, run):
    e, q = load(results, "etcd", run), load(results, "quantykube", run)
    rows = ["| | etcd 3.4 | QuantyKube | QuantyKube vs etcd |", "|---|---|---|---|"]

    def metric(label, get, higher_is_better, digits=1):
        ev = get(e) if usable(e) else None
        qv = get(q) if usable(q) else None
        rows.append(
            f"| {label} | {num(ev, digits)} | {num(qv, digits)} | "
            f"{ratio(qv, ev, higher_is_better)} |"
        )

    if run == "watch":
        metric("events delivered/s", lambda r: r.get("events_per_second"), True)
        for p in ("p50", "p99", "max"):
            metric(f"delivery latency {p}, ms",
                   lambda r, p=p: r.get("delivery_latency_ms", {}).get(p), False, 2)
    else:
        metric("throughput, ops/s", lambda r: r.get("throughput"), True)
        for p in ("p50", "p90", "p99", "p99_9", "max"):
            metric(f"latency {p.replace('_', '.')}, ms",
                   lambda r, p=p: r["latency_ms"].get(p), False, 2)
    if run == "txn-cas-100":
        metric("conflicts (failed compares)", lambda r: r.get("conflicts"), False, 0)
    if run != "watch":
        ev, qv = cpu_per_op_us(results, "etcd", run, e), cpu_per_op_us(results, "quantykube", run, q)
        rows.append(f"| server CPU per op (3 members), µs | {num(ev, 0)} | {num(qv, 0)} | "
                    f"{ratio(qv, ev, False)} |")
    rows.append(f"| errors | {errors(e)} | {errors(q)} | |")
    cmd = read(results, f"quantykube-{run}.cmd") or read(results, f"etcd-{run}.cmd")
    return rows, cmd


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Linux {platform.release()}"


def render(results):
    out = [BEGIN, ""]
    out.append(f"Machine: {machine()}. Servers: {read(results, 'etcd-version.txt')} "
               f"and {read(results, 'quantykube-version.txt')}, three members each on "
               "127.0.0.1, data dirs on the same filesystem, one system at a time; the "
               "client is `quantykube bench` (release build) for both. Ratios: higher is "
               "better for QuantyKube (throughput QuantyKube/etcd, latency etcd/QuantyKube).")
    out.append("")
    for run, title in RUNS:
        rows, cmd = table(results, run)
        out.append(f"### {title}")
        out.append("")
        if cmd:
            out.append(f"`quantykube bench {cmd} --endpoints <the three members> --output json`")
            out.append("")
        out.extend(rows)
        out.append("")
    e_rss, q_rss = read(results, "etcd-rss-kib.txt"), read(results, "quantykube-rss-kib.txt")
    e_disk, q_disk = read(results, "etcd-disk-kib.txt"), read(results, "quantykube-disk-kib.txt")
    load_cmd = read(results, "quantykube-load.cmd") or read(results, "etcd-load.cmd")
    out.append("### Memory and disk after loading distinct keys")
    out.append("")
    if load_cmd:
        out.append(f"`quantykube bench {load_cmd}` on a fresh cluster; peak RSS is the largest "
                   "VmHWM of the three members; disk is `du` of all three data dirs.")
        out.append("")
    out.append("| | etcd 3.4 | QuantyKube | QuantyKube vs etcd |")
    out.append("|---|---|---|---|")

    def mib(v):
        return float(v) / 1024 if v else None

    out.append(f"| peak RSS, MiB | {num(mib(e_rss))} | {num(mib(q_rss))} | "
               f"{ratio(mib(q_rss), mib(e_rss), False)} |")
    out.append(f"| disk, MiB (3 members) | {num(mib(e_disk))} | {num(mib(q_disk))} | "
               f"{ratio(mib(q_disk), mib(e_disk), False)} |")
    out.extend(sustained(results))
    out.extend(full_runs.table(full_runs.load(FULL_RUNS)))
    out.extend(["", END])
    return "\n".join(out)


def tenths(windows):
    """Mean throughput of the first and of the last tenth of a run's time."""
    if not windows:
        return None, None
    end = windows[-1]["end_seconds"]
    # A run shorter than ten windows still has a first window.
    first = [w["throughput"] for w in windows if w["end_seconds"] <= end * 0.1 + 1e-9]
    first = first or [windows[0]["throughput"]]
    last = [w["throughput"] for w in windows if w["end_seconds"] > end * 0.9]
    return sum(first) / len(first), sum(last) / len(last)


def sustained(results):
    """The sustained run's table and the charts charts.py drew (if it did)."""
    e, q = load(results, "etcd", "sustained"), load(results, "quantykube", "sustained")
    if not usable(e) and not usable(q):
        return []
    cmd = read(results, "quantykube-sustained.cmd") or read(results, "etcd-sustained.cmd")
    out = ["", "### Sustained puts: does the store slow as it fills?", ""]
    if cmd:
        out += [f"`quantykube bench {cmd} --endpoints <the three members> --output json` on a "
                "fresh cluster. Tenths are of the run's time, from its timeline.", ""]
    out += ["| | etcd 3.4 | QuantyKube | QuantyKube vs etcd |", "|---|---|---|---|"]
    et, qt = tenths((e or {}).get("timeline")), tenths((q or {}).get("timeline"))

    def row(label, ev, qv, higher_is_better=True, digits=1):
        out.append(f"| {label} | {num(ev, digits)} | {num(qv, digits)} | "
                   f"{ratio(qv, ev, higher_is_better)} |")

    get = lambda r, f: f(r) if usable(r) else None  # noqa: E731
    row("throughput, whole run, ops/s", get(e, lambda r: r["throughput"]),
        get(q, lambda r: r["throughput"]))
    row("throughput, first tenth, ops/s", et[0], qt[0])
    row("throughput, last tenth, ops/s", et[1], qt[1])
    keep = lambda t: 100.0 * t[1] / t[0] if t[0] and t[1] else None  # noqa: E731
    out.append(f"| last tenth / first tenth, % | {num(keep(et))} | {num(keep(qt))} | |")
    row("latency p99, whole run, ms", get(e, lambda r: r["latency_ms"]["p99"]),
        get(q, lambda r: r["latency_ms"]["p99"]), False, 2)
    out.append(f"| compactions | {num(get(e, lambda r: r.get('compactions')), 0)} | "
               f"{num(get(q, lambda r: r.get('compactions')), 0)} | |")
    out.append(f"| errors | {errors(e)} | {errors(q)} | |")
    for image, alt in (("sustained-throughput.png", "throughput over the sustained run"),
                       ("sustained-p99.png", "p99 latency over the sustained run"),
                       ("put-100-latency.png", "latency distribution of put x100")):
        if os.path.exists(os.path.join(IMAGES, image)):
            out += ["", f"![{alt}](img/benchmarks/{image})"]
    return out


def figures(results):
    """What full-runs.jsonl keeps of one run: each system's figures per workload."""
    workloads = {}
    for run, _ in RUNS:
        for system in ("etcd", "quantykube"):
            r = load(results, system, run)
            if not usable(r):
                continue
            if run == "watch":
                latency = r.get("delivery_latency_ms", {})
                got = {"throughput": r.get("events_per_second")}
            else:
                latency = r.get("latency_ms", {})
                got = {"throughput": r.get("throughput"),
                       "cpu_us": cpu_per_op_us(results, system, run, r)}
            got.update(p50=latency.get("p50"), p99=latency.get("p99"))
            workloads.setdefault(run, {})[system] = got
    for system in ("etcd", "quantykube"):
        r = load(results, system, "sustained")
        if usable(r):
            first, last = tenths(r.get("timeline"))
            workloads.setdefault("sustained", {})[system] = {
                "throughput": r["throughput"], "p99": r["latency_ms"]["p99"],
                "first_tenth": first, "last_tenth": last}
        for kind in ("rss", "disk"):
            kib = read(results, f"{system}-{kind}-kib.txt")
            if kib:
                workloads.setdefault(kind, {})[system] = {"mib": float(kib) / 1024}
    return workloads


def main():
    results = sys.argv[1]
    if sys.argv[2:3] == ["--record"]:
        full_runs.append(FULL_RUNS, {"build": sys.argv[3],
                                     "date": datetime.date.today().isoformat(),
                                     "workloads": figures(results)})
    page = sys.stdin.read()
    generated = render(results)
    if BEGIN in page and END in page:
        head, rest = page.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        page = head + generated + tail
    else:
        page = page.rstrip("\n") + "\n\n" + generated + "\n"
    sys.stdout.write(page)


if __name__ == "__main__":
    main()
