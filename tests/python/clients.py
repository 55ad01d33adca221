"""OpenStack's etcd gateway clients, tested with their own test suites against etcd 3.4
and against QuantyKube, and the results compared test by test.

Each suite runs against a cluster of its own, started here on free 127.0.0.1 ports with a
fresh data dir: a one-member etcd 3.4 (the oracle), a one-member QuantyKube, and, for the
suites whose clients are QuantyKube's usual users, a three-member QuantyKube whose client
talks to a follower (so that every write and linearizable read of the gateway crosses
members). The suites run at once, under pytest (in parallel within a suite, as upstream's
stestr runs them), each bounded per test and as a whole.

A test that passes against etcd 3.4 must pass against every QuantyKube cluster: anything
else exits 1. Tests that fail on both and tests that pass only on QuantyKube are listed
with the failure each target gave. The driver never leaves a server behind: every process
it starts is in a process group of its own, killed on exit, on a signal, and (through
PR_SET_PDEATHSIG) when the driver itself dies.

Usage: clients.py --qk BIN --etcd BIN --venv NAME=DIR ... (run by tests/python/run.sh).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
BASELINE = "etcd 3.4"


@dataclass(frozen=True)
class Suite:
    name: str
    venv: str
    pytest_args: tuple[str, ...]
    env: Callable[[int], dict[str, str]]
    workers: int
    # The slowest test takes ~33 s on either server (tooz's
    # test_watch_join_group_disappear waits for a 30 s lease to expire).
    per_test_timeout: int = 90


SUITES = [
    Suite(
        "etcd3gw-2.7.0",
        "main",
        ("--pyargs", "etcd3gw.tests.test_etcd3gw"),
        lambda port: {
            "TOOZ_TEST_HTTP_URL": f"http://localhost:{port}",
            "TOOZ_TEST_ETCD_PORT": str(port),
        },
        workers=2,
    ),
    Suite(
        "tooz-9.1.0",
        "main",
        ("--pyargs", "tooz.tests.test_coordination"),
        # tooz/tests/__init__.py turns this into etcd3+http://...?api_version=v3beta
        lambda port: {
            "TOOZ_TEST_URL": f"etcd://localhost:{port}",
            "TOOZ_TEST_ETCD3GW": "1",
        },
        workers=4,
    ),
    Suite(
        "etcd3gw-2.0.0",
        "debian",
        ("-p", "etcd3gw_port", "--pyargs", "etcd3gw.tests.test_etcd3gw"),
        lambda port: {"QK_ETCD3GW_PORT": str(port), "PYTHONPATH": str(HERE)},
        workers=2,
        # its watch tests wait for an answer that etcd 3.4 never sends (404)
        per_test_timeout=30,
    ),
]


@dataclass(frozen=True)
class Target:
    name: str
    server: str  # "etcd" or "qk"
    members: int
    suites: tuple[str, ...]


TARGETS = [
    Target(BASELINE, "etcd", 1, tuple(s.name for s in SUITES)),
    Target("QuantyKube", "qk", 1, tuple(s.name for s in SUITES)),
    Target("QuantyKube x3", "qk", 3, ("etcd3gw-2.7.0", "tooz-9.1.0")),
]

# Every process started here, by process group, killed whatever happens.
CHILDREN: list[subprocess.Popen] = []


def die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL when the driver dies (PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)


def spawn(cmd: list[str], log: Path, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    # Always from the main thread: PR_SET_PDEATHSIG fires when the spawning thread ends.
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    CHILDREN.append(proc)
    return proc


def kill(proc: subprocess.Popen, grace: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def kill_all(grace: float = 5.0) -> None:
    """SIGTERM to every group at once, then SIGKILL to what is left after `grace`."""
    alive = [p for p in CHILDREN if p.poll() is None]
    for proc in alive:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    until = time.monotonic() + grace
    for proc in alive:
        try:
            proc.wait(timeout=max(0.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def free_ports(n: int) -> list[int]:
    """n distinct free ports on 127.0.0.1 (all held open until all are chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        # etcd refuses flags shadowed by ETCD_*; the suites read TOOZ_* and ETCD3GW_*
        if not k.startswith(("ETCD_", "TOOZ_", "ETCD3GW_", "QK_ETCD3GW_"))
        and k not in ("PYTHONPATH", "PYTEST_ADDOPTS")
    }
    env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1"
    env.update(extra)
    return env


def http(port: int, path: str, body: dict | None = None, timeout: float = 2.0) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=timeout) as resp:
        return json.loads(resp.read())


class Cluster:
    def __init__(self, target: Target, binary: str, workdir: Path, tag: str):
        self.target = target
        self.binary = binary
        self.dir = workdir / tag
        self.dir.mkdir()
        ports = free_ports(2 * target.members)
        self.client_ports = ports[: target.members]
        self.peer_ports = ports[target.members :]
        self.names = [f"m{i}" for i in range(target.members)]
        self.logs = [self.dir / f"{name}.log" for name in self.names]
        self.initial_cluster = ",".join(
            f"{n}=http://127.0.0.1:{p}" for n, p in zip(self.names, self.peer_ports)
        )
        self.token = f"qk-pyclients-{tag}"
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        for i, name in enumerate(self.names):
            client = f"http://127.0.0.1:{self.client_ports[i]}"
            peer = f"http://127.0.0.1:{self.peer_ports[i]}"
            cmd = [
                self.binary,
                f"--name={name}",
                f"--data-dir={self.dir / (name + '.data')}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={self.initial_cluster}",
                f"--initial-cluster-token={self.token}",
                "--initial-cluster-state=new",
            ]
            self.procs.append(spawn(cmd, self.logs[i], self.dir, clean_env({})))

    def exited(self) -> str:
        """Why the cluster cannot become healthy: a member that has exited, or ""."""
        for name, proc in zip(self.names, self.procs):
            if proc.poll() is not None:
                return f"member {name} exited with {proc.returncode}"
        return ""

    def ready(self) -> bool:
        for port in self.client_ports:
            try:
                if http(port, "/health").get("health") != "true":
                    return False
            except (OSError, ValueError):
                return False
        return True

    def client_port(self) -> int:
        """The member the suite's client talks to: a follower, where there is one."""
        if len(self.client_ports) == 1:
            return self.client_ports[0]
        for port in self.client_ports:
            status = http(port, "/v3/maintenance/status", {})
            if status["header"]["member_id"] != status["leader"]:
                return port
        raise RuntimeError("no follower in a three-member cluster")

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for log in self.logs:
            if log.exists():
                text = log.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {log}\n" + "\n".join(line[:300] for line in text))
        return "\n".join(out)


@dataclass
class Result:
    outcome: str  # passed, failed, skipped, missing
    message: str = ""


@dataclass
class Run:
    target: Target
    suite: Suite
    cluster: Cluster
    xml: Path
    log: Path
    proc: subprocess.Popen | None = None
    started: float = 0.0
    elapsed: float = 0.0
    problem: str = ""  # why the run says nothing (no results, crashed, timed out)
    results: dict[str, Result] = field(default_factory=dict)


def failure_message(elem: ET.Element) -> str:
    """The line of a junit failure that names the exception."""
    lines = [line for line in (elem.text or "").splitlines() if line.strip()]
    # testtools' tracebacks end with the exception; pytest's own with "file:line: Type"
    # after the "E   ..." lines that say it.
    last = next((line for line in reversed(lines) if not line[0].isspace()), "")
    if re.match(r"^\S+:\d+: \w", last) or not last:
        last = next((line for line in reversed(lines) if line.startswith("E   ")), last)
    if last.startswith("E   "):
        last = last[4:]
    return (last or (elem.get("message") or "").split("\n")[0]).strip()[:200]


def read_results(xml: Path) -> dict[str, Result]:
    results: dict[str, Result] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("classname", "").rsplit(".", 1)[-1] + "." + case.get("name", "")
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skipped = case.find("skipped")
        if bad is not None:
            results[name] = Result("failed", failure_message(bad))
        elif skipped is not None:
            results[name] = Result("skipped", (skipped.get("message") or "")[:200])
        else:
            results[name] = Result("passed")
    return results


def start_suite(run: Run, venvs: dict[str, Path], workdir: Path) -> None:
    port = run.cluster.client_port()
    python = venvs[run.suite.venv] / "bin" / "python"
    cmd = [
        str(python),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfE",
        f"--rootdir={workdir}",
        f"--timeout={run.suite.per_test_timeout}",
        f"--junitxml={run.xml}",
        "-o",
        "junit_family=xunit2",
    ]
    if run.suite.workers > 1:
        cmd += ["-n", str(run.suite.workers), "--dist", "worksteal"]
    cmd += list(run.suite.pytest_args)
    run.started = time.monotonic()
    run.proc = spawn(cmd, run.log, workdir, clean_env(run.suite.env(port)))


def finish_suite(run: Run) -> None:
    assert run.proc is not None
    run.elapsed = time.monotonic() - run.started
    code = run.proc.returncode
    if code not in (0, 1) or not run.xml.exists():
        run.problem = f"pytest exited {code} (log: {run.log})"
        return
    run.results = read_results(run.xml)
    if not run.results:
        run.problem = f"no test ran (log: {run.log})"
    unreachable = [r for r in run.results.values() if "not available" in r.message]
    if unreachable:
        run.problem = f"the suite did not reach its server: {unreachable[0].message}"


def compare(runs: list[Run]) -> tuple[list[str], list[str], list[str]]:
    """(regressions, failing on both, passing only on QuantyKube), one line each."""
    regressions: list[str] = []
    both: list[str] = []
    only_qk: dict[tuple[str, str, str], list[str]] = {}
    baseline = {r.suite.name: r for r in runs if r.target.name == BASELINE}
    for run in runs:
        if run.target.name == BASELINE:
            continue
        base = baseline[run.suite.name]
        for test in sorted(set(base.results) | set(run.results)):
            ours = run.results.get(test, Result("missing"))
            theirs = base.results.get(test, Result("missing"))
            where = f"{run.target.name}: {run.suite.name} {test}"
            if theirs.outcome == "passed" and ours.outcome != "passed":
                regressions.append(f"{where}: {ours.outcome} {ours.message}".rstrip())
            elif theirs.outcome == "failed" and ours.outcome == "failed":
                both.append(f"{where}\n      etcd: {theirs.message}\n      ours: {ours.message}")
            elif theirs.outcome in ("failed", "missing") and ours.outcome == "passed":
                why = theirs.message or theirs.outcome
                only_qk.setdefault((run.target.name, run.suite.name, why), []).append(test)
    grouped = [
        f"{target}: {suite}, {len(tests)} tests, on etcd 3.4: {why}\n      "
        + ", ".join(t.rsplit(".", 1)[-1] for t in tests)
        for (target, suite, why), tests in only_qk.items()
    ]
    return regressions, both, grouped


def counts(results: dict[str, Result]) -> tuple[int, int, int]:
    outcomes = [r.outcome for r in results.values()]
    return outcomes.count("passed"), outcomes.count("failed"), outcomes.count("skipped")


def on_signal(signum, _frame):
    raise SystemExit(f"tests/python: stopped by signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--qk", required=True)
    parser.add_argument("--etcd", required=True)
    parser.add_argument("--venv", action="append", required=True, help="NAME=DIR")
    parser.add_argument("--deadline", type=float, default=240.0, help="seconds in all")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    args = parser.parse_args()
    venvs = {k: Path(v) for k, v in (item.split("=", 1) for item in args.venv)}
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    began = time.monotonic()
    deadline = began + args.deadline
    workdir = Path(tempfile.mkdtemp(prefix="qk-pyclients-"))
    suites = {s.name: s for s in SUITES}
    ok = False
    try:
        runs: list[Run] = []
        for target in TARGETS:
            binary = args.etcd if target.server == "etcd" else args.qk
            for name in target.suites:
                tag = re.sub(r"[^a-z0-9]+", "-", f"{target.name}-{name}".lower())
                cluster = Cluster(target, binary, workdir, tag)
                runs.append(
                    Run(target, suites[name], cluster, cluster.dir / "junit.xml",
                        cluster.dir / "pytest.log")
                )
        for run in runs:
            run.cluster.start()
        pending = list(runs)
        ready_by = min(deadline, time.monotonic() + 60)
        while pending:
            late = time.monotonic() > ready_by
            for run in pending:
                why = run.cluster.exited() or ("not healthy within 60 s" if late else "")
                if why:
                    print(f"tests/python: {run.target.name} ({run.suite.name}): {why}\n"
                          f"{run.cluster.log_tail()}")
                    return 1
            for run in [r for r in pending if r.cluster.ready()]:
                pending.remove(run)
                start_suite(run, venvs, workdir)
            time.sleep(0.2)
        versions: dict[str, str] = {}
        for run in runs:
            if run.target.name not in versions:
                about = http(run.cluster.client_ports[0], "/version")
                versions[run.target.name] = about.get("etcdserver", "?")

        running = list(runs)
        while running:
            for run in [r for r in running if r.proc.poll() is not None]:
                running.remove(run)
                finish_suite(run)
            if time.monotonic() > deadline:
                for run in running:
                    kill(run.proc)
                    run.elapsed = time.monotonic() - run.started
                    run.problem = f"still running at the {args.deadline:.0f} s deadline"
                break
            time.sleep(0.2)

        print("tests/python: OpenStack's gateway clients (own test suites) against "
              + ", ".join(f"{t} ({v})" for t, v in versions.items()))
        print(f"  {'suite':<15} {'target':<15} {'passed':>6} {'failed':>6} {'skipped':>7} {'time':>6}")
        for run in runs:
            p, f, s = counts(run.results)
            print(f"  {run.suite.name:<15} {run.target.name:<15} {p:>6} {f:>6} {s:>7} "
                  f"{run.elapsed:>5.0f}s" + (f"  ERROR: {run.problem}" if run.problem else ""))
        regressions, both, only_qk = compare(runs)
        if both:
            print(f"failing on etcd 3.4 and on QuantyKube ({len(both)}):")
            for line in both:
                print(f"  {line}")
        if only_qk:
            print("passing on QuantyKube only:")
            for line in only_qk:
                print(f"  {line}")
        problems = [r for r in runs if r.problem]
        if regressions:
            print(f"REGRESSIONS: passing on etcd 3.4, not on QuantyKube ({len(regressions)}):")
            for line in regressions:
                print(f"  {line}")
        for run in runs:
            regressed = any(line.startswith(f"{run.target.name}: {run.suite.name} ")
                            for line in regressions)
            if (run.problem or regressed) and run.log.exists():
                # cut to the width of a screen: some tests print their 10 kB values
                tail = run.log.read_text(errors="replace").splitlines()[-30:]
                print(f"--- {run.target.name} / {run.suite.name}: tail of {run.log}")
                print("\n".join(line[:300] for line in tail))
                print(run.cluster.log_tail())

        ours = [r for r in runs if r.target.name != BASELINE]
        p, f, s = (sum(c) for c in zip(*(counts(r.results) for r in ours)))
        kill_all()
        ok = not regressions and not problems
        kept = "" if ok and not args.keep else f"; logs kept in {workdir}"
        print(f"wall time {time.monotonic() - began:.0f} s{kept}")
        # QuantyKube's own outcomes, as the closing line CI reads
        print(f"pyclients: {p} passed, {f} failed, {s} skipped")
        return 0 if ok else 1
    finally:
        kill_all()
        if ok and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
