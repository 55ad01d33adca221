"""Tests of the full-run record: render-report.py's figures from compare.sh's files, the
record's round trip, and the variance table's arithmetic and orientation."""
import importlib.util
import json
import os
import tempfile
import unittest

import full_runs

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("render_report", os.path.join(HERE, "render-report.py"))
render_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render_report)


def run(build, put_100_qk, put_100_etcd, p99_qk=10.0, p99_etcd=20.0):
    return {"build": build, "date": "2026-12-05", "workloads": {
        "put-100": {"etcd": {"throughput": put_100_etcd, "p99": p99_etcd},
                    "quantykube": {"throughput": put_100_qk, "p99": p99_qk}},
        "sustained": {"etcd": {"first_tenth": 100.0, "last_tenth": 80.0},
                      "quantykube": {"first_tenth": 200.0, "last_tenth": 190.0}}}}


def row(lines, label):
    found = [line for line in lines if line.startswith(f"| {label} |")]
    assert len(found) == 1, (label, lines)
    return [c.strip() for c in found[0].strip("|").split("|")][1:]


class TableTest(unittest.TestCase):
    def test_ratios_are_turned_so_higher_is_better_for_quantykube(self):
        lines = full_runs.table([run("a", 200.0, 100.0, p99_qk=10.0, p99_etcd=30.0)] * 2)
        self.assertEqual(row(lines, "put ×100, throughput")[0], "2.00x")
        self.assertEqual(row(lines, "put ×100, p99")[0], "3.00x")

    def test_mean_sd_and_cv_of_the_last_three_runs_only(self):
        runs = [run("old", 900.0, 100.0), run("a", 100.0, 100.0), run("b", 200.0, 100.0),
                run("c", 300.0, 100.0)]
        lines = full_runs.table(runs)
        self.assertIn("| ratio | a (2026-12-05) | b (2026-12-05) | c (2026-12-05) | mean | sd | cv |",
                      lines)
        self.assertEqual(row(lines, "put ×100, throughput"),
                         ["1.00x", "2.00x", "3.00x", "2.00x", "1.00", "50%"])
        self.assertEqual(row(lines, "sustained, QuantyKube's last tenth / first tenth")[:3],
                         ["95.0%", "95.0%", "95.0%"])

    def test_a_workload_a_run_lacks_is_a_dash_and_left_out_of_the_spread(self):
        runs = [run("a", 100.0, 100.0), run("b", 200.0, 100.0), run("c", 300.0, 100.0)]
        del runs[0]["workloads"]["put-100"]["etcd"]
        cells = row(full_runs.table(runs), "put ×100, throughput")
        self.assertEqual(cells, ["-", "2.00x", "3.00x", "2.50x", "0.71", "28%"])
        cells = row(full_runs.table(runs), "range of 1 000 keys, throughput")
        self.assertEqual(cells, ["-"] * 6)

    def test_one_run_has_no_spread_to_show(self):
        self.assertEqual(full_runs.table([run("a", 1.0, 1.0)]), [])


class RecordTest(unittest.TestCase):
    def test_figures_from_compare_sh_files_round_trip_through_the_record(self):
        with tempfile.TemporaryDirectory() as results:
            def write(name, content):
                with open(os.path.join(results, name), "w") as f:
                    f.write(content)
            put = {"operations": 1000, "throughput": 500.0, "latency_ms": {"p50": 1.0, "p99": 4.0}}
            write("etcd-put-100.json", json.dumps(put))
            write("quantykube-put-100.json", json.dumps(dict(put, throughput=1000.0)))
            write("quantykube-put-100.cpu", "0.25")
            write("quantykube-watch.json", json.dumps(
                {"operations": 5, "events_per_second": 9.0, "delivery_latency_ms": {"p99": 2.0}}))
            write("etcd-rss-kib.txt", "2048\n")
            # A run that failed (no operations) is not a figure.
            write("etcd-watch.json", json.dumps({"operations": 0}))
            got = render_report.figures(results)
            record = os.path.join(results, "full-runs.jsonl")
            full_runs.append(record, {"build": "x", "date": "d", "workloads": got})
            full_runs.append(record, {"build": "y", "date": "d", "workloads": got})
            self.assertEqual([r["workloads"] for r in full_runs.load(record)], [got, got])
        self.assertEqual(got["put-100"]["quantykube"],
                         {"throughput": 1000.0, "cpu_us": 250.0, "p50": 1.0, "p99": 4.0})
        self.assertEqual(got["watch"], {"quantykube": {"throughput": 9.0, "p50": None, "p99": 2.0}})
        self.assertEqual(got["rss"], {"etcd": {"mib": 2.0}})
        self.assertNotIn("sustained", got)

    def test_the_committed_record_parses_and_renders(self):
        runs = full_runs.load(os.path.join(HERE, "full-runs.jsonl"))
        self.assertGreaterEqual(len(runs), 3)
        lines = full_runs.table(runs)
        self.assertEqual(len(row(lines, "put ×100, throughput")), 3 + 3)


if __name__ == "__main__":
    unittest.main()
