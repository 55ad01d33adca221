#!/usr/bin/env python3
"""Draws the charts of docs/benchmarks.md from compare.sh's JSON, both systems on each.

Usage: charts.py RESULTS_DIR IMAGE_DIR

- sustained-throughput.png and sustained-p99.png: throughput and p99 window by window
  during the sustained run (`<system>-sustained.json`, its `timeline`);
- put-100-latency.png: the latency distribution of put x100 (`<system>-put-100.json`,
  its `latency_distribution`), on HdrHistogram's axis: percentiles spread so that the
  tail (99, 99.9, 99.99 ...) is as wide as the body.

A chart whose data is missing for both systems is not drawn. Needs matplotlib
(deploy/bench/charts-requirements.txt; compare.sh installs it into a venv).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

SYSTEMS = [("etcd", "etcd 3.4", "#4477aa"), ("quantykube", "QuantyKube", "#ee6677")]


def load(results, system, run):
    try:
        with open(os.path.join(results, f"{system}-{run}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def timeline_chart(results, field, ylabel, title, path):
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=100)
    drawn = False
    for system, label, colour in SYSTEMS:
        r = load(results, system, "sustained")
        windows = (r or {}).get("timeline") or []
        if not windows:
            continue
        xs = [w["end_seconds"] for w in windows]
        ax.plot(xs, [w[field] for w in windows], label=label, color=colour, linewidth=1)
        drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def tail_axis(percentile):
    """HdrHistogram's x axis: 1 / (1 - p), so 90, 99 and 99.9 are evenly spaced."""
    return 1.0 / max(1.0 - percentile / 100.0, 1e-7)


def distribution_chart(results, path):
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=100)
    drawn = False
    for system, label, colour in SYSTEMS:
        r = load(results, system, "put-100")
        points = (r or {}).get("latency_distribution") or []
        # The maximum (100) has no place on a 1 / (1 - p) axis.
        points = [p for p in points if p["percentile"] < 100.0]
        if not points:
            continue
        ax.plot([tail_axis(p["percentile"]) for p in points], [p["ms"] for p in points],
                label=label, color=colour, marker=".", linewidth=1)
        drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xscale("log")
    ticks = [0, 90, 99, 99.9, 99.99, 99.999]
    ax.set_xticks([tail_axis(t) for t in ticks])
    ax.set_xticklabels([f"{t:g}%" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency, ms")
    ax.set_title("put, 100 clients: latency by percentile")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main():
    results, images = sys.argv[1], sys.argv[2]
    os.makedirs(images, exist_ok=True)
    drawn = []
    if timeline_chart(results, "throughput", "puts per second", "Sustained puts: throughput",
                      os.path.join(images, "sustained-throughput.png")):
        drawn.append("sustained-throughput.png")
    if timeline_chart(results, "p99_ms", "p99 latency, ms", "Sustained puts: p99 latency",
                      os.path.join(images, "sustained-p99.png")):
        drawn.append("sustained-p99.png")
    if distribution_chart(results, os.path.join(images, "put-100-latency.png")):
        drawn.append("put-100-latency.png")
    print(" ".join(drawn) if drawn else "no chart: no data", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
