#!/usr/bin/env python3
"""Lists the Prometheus metric families an etcd source tree declares, as source.tsv.

Usage: extract_source.py ETCD_CHECKOUT > source.tsv

source.tsv was made from etcd-io/etcd at c34dc7ee0048fd2bcc44d50beff002e5e8069b69
(2026-08-20, version 3.8.0-alpha.0: every family of 3.6 and 3.7 is still declared).

Reads every `prometheus.New{Counter,Gauge,Histogram,Summary}[Vec|Func](...Opts{...})`
under server/ (the grpc proxy's and the v2 store's included, as etcd registers them
in the server process) and prints one line per family: name, type, label names
(comma-separated), help, a histogram's buckets (`exp(start,factor,count)`, Go's
`ExponentialBuckets`; empty for the default buckets) and the file that declares it. The gRPC server metrics
(`grpc_server_*`, go-grpc-prometheus) and Go's runtime and process collectors are not
declared there; the 3.4 live list (v3.4.23.tsv) has them.
"""
import glob
import os
import re
import sys

DECLARATION = re.compile(
    r"prometheus\.New(Counter|Gauge|Histogram|Summary)(Vec|Func)?\(\s*"
    r"(?:prometheus\.)?(?:Counter|Gauge|Histogram|Summary)?Opts\{(.*?)\n\s*\}",
    re.S,
)


def field(body, key):
    """A string field of the Opts literal, its `+`-joined pieces concatenated."""
    match = re.search(key + r':\s*((?:"(?:[^"\\]|\\.)*"\s*\+?\s*)+)', body)
    if not match:
        return ""
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(1)))


def main(root):
    rows = []
    for path in sorted(glob.glob(os.path.join(root, "server/**/*.go"), recursive=True)):
        if path.endswith("_test.go"):
            continue
        source = open(path, encoding="utf-8").read()
        for match in DECLARATION.finditer(source):
            kind, variant, body = match.group(1).lower(), match.group(2), match.group(3)
            name = "_".join(
                part for part in (field(body, "Namespace"), field(body, "Subsystem"), field(body, "Name")) if part
            )
            labels = []
            if variant == "Vec":
                rest = source[match.end() : match.end() + 200]
                found = re.match(r"[^\[]*?\[\]string\{([^}]*)\}", rest, re.S)
                if found:
                    labels = re.findall(r'"([^"]+)"', found.group(1))
            buckets = re.search(r"Buckets:\s*prometheus\.ExponentialBuckets\(([^)]*)\)", body)
            buckets = "exp(" + re.sub(r"\s", "", buckets.group(1)) + ")" if buckets else ""
            rows.append(
                (name, kind, ",".join(labels), field(body, "Help"), buckets, os.path.relpath(path, root))
            )
    print("# name\ttype\tlabels\thelp\tbuckets (start,factor,count)\tdeclared in")
    for row in sorted(set(rows)):
        print("\t".join(row))


if __name__ == "__main__":
    main(sys.argv[1])
