#!/usr/bin/env python3
"""CPU per operation per stage of the write path, from `perf record --call-graph dwarf`
of all three members (one-run.sh with PERF=1 COST_MODEL=1 runs it).

Usage: cost-model.py PERF_DATA OPERATIONS LEADER_PID FOLLOWER_PID...

Every sample is charged to one stage (see STAGES and GENERIC below for the rule), so
malloc, memcpy, RocksDB and the kernel are charged to the stage that called them.
Stacks need `--call-graph dwarf,65528`: with perf's default 8 KiB stack copy most async
stacks end in [unknown]. That copy slows the members down (CPU per put rises by about a
half), so read the shares, and scale them by CPU per put measured without perf.
Prints, for each stage, microseconds of CPU per operation on the leader and on each
follower (perf's cpu-clock period is nanoseconds), and the share of all samples.
"""
import collections
import re
import subprocess
import sys

# Each sample goes to the innermost frame of its stack that a STAGES pattern claims: our
# own functions and openraft's, wherever they are on the stack, so that RocksDB, malloc
# or the kernel under them are charged to them. Only a stack with none of those goes to
# the innermost frame a GENERIC pattern claims (connection, runtime and kernel work that
# serves every stage), and then to its thread, or to "other".
STAGES = [
    ("raft log: append (WriteBatch to RocksDB's WAL)", r"quantykube_raft::log_store::.*(append|write)"),
    ("raft log: fsync (the WAL-sync thread)", r"quantykube_raft::wal_sync::"),
    ("raft log: purge, reads and encoding", r"quantykube_raft::log_store::|quantykube_raft::codec::|postcard::"),
    ("replication: receive AppendEntries (follower)", r"quantykube_raft::peer_server::"),
    ("replication: send AppendEntries (leader)", r"quantykube_raft::network::|openraft::replication::"),
    ("apply: state machine and revision store", r"quantykube::state_machine::|quantykube::store::"),
    ("watch: notify watchers", r"quantykube::watch::"),
    ("openraft core: commit, metrics, waking waiters", r"^openraft::|^<openraft::|openraft::core::"),
    ("request: decode", r"prost::.*decode|tonic::codec::decode|Message>::merge|::decode_"),
    ("request: encode response", r"prost::.*encode|tonic::codec::encode|Message>::encode"),
    ("request: KV handler (auth, quota, propose, wait)", r"quantykube::api::|quantykube::auth::|quantykube::quota::|quantykube::node::|quantykube_raft::client"),
]
GENERIC = [
    ("thread switches and wake-ups (kernel scheduler)", r"^__schedule$|finish_task_switch|try_to_wake_up|futex_wake|futex_wait|^schedule$|reschedule_ipi"),
    ("HTTP/2 and TCP (client and peer connections)", r"^h2::|^<h2::|^hyper::|^<hyper::|hyper_util::|tonic::transport|tcp_sendmsg|tcp_recvmsg|tcp_v4_rcv|__sys_sendto|__sys_recvfrom|do_writev|do_readv|sock_"),
    ("disk I/O completion (interrupts)", r"blk_mq|end_bio|flush_end_io|end_buffer"),
    ("tokio: task polling, channels, timers, epoll", r"tokio::|futures_|parking_lot|epoll"),
]
THREADS = [
    ("raft log: fsync (the WAL-sync thread)", r"raft-wal-sync"),
    ("RocksDB background: flush and compaction", r"rocksdb"),
]
COMPILED = [(name, re.compile(p)) for name, p in STAGES]
GENERIC_COMPILED = [(name, re.compile(p)) for name, p in GENERIC]
THREADS_COMPILED = [(name, re.compile(p)) for name, p in THREADS]
OTHER = "other (unattributed: allocator, kernel entry, libc)"


def samples(data):
    """(pid, comm, period_ns, [symbol, ...innermost first]) for each sample."""
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", "comm,pid,period,ip,sym", "--no-inline"],
        check=True, capture_output=True, text=True, errors="replace",
    ).stdout
    header = re.compile(r"^(\S.*?)\s+(\d+)\s+(\d+)\s*$")
    sample = None
    for line in out.splitlines():
        if not line.strip():
            if sample:
                yield sample
            sample = None
            continue
        if not line.startswith((" ", "\t")):
            m = header.match(line.split(":")[0] if ":" in line else line) or header.match(line)
            if m:
                sample = (int(m.group(2)), m.group(1).strip(), int(m.group(3)), [])
            continue
        if sample:
            parts = line.strip().split(None, 1)
            sample[3].append(parts[1] if len(parts) > 1 else "")
    if sample:
        yield sample


def stage_of(comm, frames):
    for table in (COMPILED, GENERIC_COMPILED):
        for frame in frames:
            for name, pattern in table:
                if pattern.search(frame):
                    return name
    for name, pattern in THREADS_COMPILED:
        if pattern.search(comm):
            return name
    return OTHER


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    data, operations = sys.argv[1], int(sys.argv[2])
    leader, followers = int(sys.argv[3]), [int(p) for p in sys.argv[4:]]
    members = [leader] + followers
    cost = collections.defaultdict(lambda: collections.Counter())
    for pid, comm, period, frames in samples(data):
        if pid in members:
            cost[stage_of(comm, frames)][pid] += period
    names = [n for n, _ in STAGES + GENERIC + THREADS] + [OTHER]
    total = sum(sum(c.values()) for c in cost.values()) or 1
    heads = ["stage", "leader µs/op"] + [f"follower {i + 1} µs/op" for i in range(len(followers))]
    print("| " + " | ".join(heads + ["all µs/op", "share"]) + " |")
    print("|" + "---|" * (len(heads) + 2))
    per_op = lambda ns: ns / 1000 / max(operations, 1)
    sums = collections.Counter()
    for name in dict.fromkeys(names):
        row = cost.get(name)
        if not row:
            continue
        cells = [f"{per_op(row[p]):.1f}" for p in members]
        for p in members:
            sums[p] += row[p]
        all_ns = sum(row.values())
        print(f"| {name} | " + " | ".join(cells) + f" | {per_op(all_ns):.1f} | {100 * all_ns / total:.0f}% |")
    print("| **all** | " + " | ".join(f"**{per_op(sums[p]):.1f}**" for p in members)
          + f" | **{per_op(total):.1f}** | 100% |")


if __name__ == "__main__":
    main()
