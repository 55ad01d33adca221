//! The store's own metrics, with etcd's names, help texts and buckets: its `mvcc`
//! operation counters (every Range, Put and DeleteRange the store runs, a transaction
//! when one command ran more than one), its `lease` counters, compaction, hash,
//! defragmentation and snapshot timings, and its backend commits (etcd's bbolt commit
//! is one RocksDB write of an applied batch here).
//!
//! As the raft crate's metrics, this module owns the metric objects and [`register`],
//! which the server's one registry (`metrics`) calls; it never formats or serves
//! metrics, and recording is a few atomic operations on handles built before the hot
//! path. Counts are this member's, as etcd's: every member counts the writes it
//! applies and the reads it serves.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::core::Collector;
use prometheus::{Histogram, HistogramVec, IntCounter, IntGauge, Registry};
use quantykube_raft::metrics::{
    counter, disk_buckets, exponential, gauge, histogram, histogram_vec,
};

use super::request_type::{PerRequestType, RequestType};

static BACKEND_COMMIT: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_disk_backend_commit_duration_seconds",
        "The latency distributions of commit called by backend.",
        disk_buckets(),
    )
});

// bbolt's commit has three phases; a RocksDB write has only the write. The other two
// are exported for etcd's dashboards and never observed.
static BACKEND_COMMIT_WRITE: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_debugging_disk_backend_commit_write_duration_seconds",
        "The latency distributions of commit.write called by bboltdb backend.",
        disk_buckets(),
    )
});
static BACKEND_COMMIT_REBALANCE: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_debugging_disk_backend_commit_rebalance_duration_seconds",
        "The latency distributions of commit.rebalance called by bboltdb backend.",
        disk_buckets(),
    )
});
static BACKEND_COMMIT_SPILL: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_debugging_disk_backend_commit_spill_duration_seconds",
        "The latency distributions of commit.spill called by bboltdb backend.",
        disk_buckets(),
    )
});

static DEFRAG_DURATION: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_disk_backend_defrag_duration_seconds",
        "The latency distribution of backend defragmentation.",
        exponential(0.1, 2.0, 13),
    )
});
static DEFRAG_INFLIGHT: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_disk_defrag_inflight",
        "Whether or not defrag is active on the member. 1 means active, 0 means not.",
    )
});
static SNAPSHOT_DURATION: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_disk_backend_snapshot_duration_seconds",
        "The latency distribution of backend snapshots.",
        exponential(0.01, 2.0, 17),
    )
});

/// One mvcc operation counter under etcd 3.5+'s name and etcd 3.4's (which exports
/// both, with the same help text).
struct Operation {
    current: IntCounter,
    debugging: IntCounter,
}

impl Operation {
    fn new(what: &str, help: &str) -> Operation {
        Operation {
            current: counter(&format!("etcd_mvcc_{what}_total"), help),
            debugging: counter(&format!("etcd_debugging_mvcc_{what}_total"), help),
        }
    }

    fn add(&self, n: u64) {
        if n > 0 {
            self.current.inc_by(n);
            self.debugging.inc_by(n);
        }
    }
}

static RANGES: LazyLock<Operation> =
    LazyLock::new(|| Operation::new("range", "Total number of ranges seen by this member."));
static PUTS: LazyLock<Operation> =
    LazyLock::new(|| Operation::new("put", "Total number of puts seen by this member."));
static DELETES: LazyLock<Operation> =
    LazyLock::new(|| Operation::new("delete", "Total number of deletes seen by this member."));
static TXNS: LazyLock<Operation> =
    LazyLock::new(|| Operation::new("txn", "Total number of txns seen by this member."));
static PUT_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_debugging_mvcc_total_put_size_in_bytes",
        "The total size of put kv pairs seen by this member.",
    )
});

static LEASES_GRANTED: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_debugging_lease_granted_total",
        "The total number of granted leases.",
    )
});
static LEASES_REVOKED: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_debugging_lease_revoked_total",
        "The total number of revoked leases.",
    )
});
static LEASES_RENEWED: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_debugging_lease_renewed_total",
        "The number of renewed leases seen by the leader.",
    )
});
static LEASE_TTLS: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_debugging_lease_ttl_total",
        "Bucketed histogram of lease TTLs.",
        exponential(1.0, 2.0, 24),
    )
});

// etcd keeps an in-memory key index that compaction prunes under a pause; the store
// has none (its `latest` column family is on disk), so this is never observed.
static INDEX_COMPACTION_PAUSE: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_debugging_mvcc_index_compaction_pause_duration_milliseconds",
        "Bucketed histogram of index compaction pause duration.",
        exponential(0.5, 2.0, 14),
    )
});
static DB_COMPACTION_PAUSE: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds",
        "Bucketed histogram of db compaction pause duration.",
        exponential(1.0, 2.0, 13),
    )
});
static DB_COMPACTION_TOTAL: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds",
        "Bucketed histogram of db compaction total duration.",
        exponential(100.0, 2.0, 14),
    )
});
static DB_COMPACTION_KEYS: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_debugging_mvcc_db_compaction_keys_total",
        "Total number of db keys compacted.",
    )
});
static DB_COMPACTION_LAST: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_debugging_mvcc_db_compaction_last",
        "The unix time of the last db compaction. Resets to 0 on start.",
    )
});

static HASH_DURATION: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_mvcc_hash_duration_seconds",
        "The latency distribution of storage hash operation.",
        exponential(0.01, 2.0, 15),
    )
});
static HASH_REV_DURATION: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_mvcc_hash_rev_duration_seconds",
        "The latency distribution of storage hash by revision operation.",
        exponential(0.01, 2.0, 15),
    )
});

static APPLY_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram_vec(
        "etcd_server_apply_duration_seconds",
        "The latency distributions of v2 apply called by backend.",
        &["version", "op", "success"],
        exponential(0.0001, 2.0, 20),
    )
});
/// [`APPLY_DURATION`]'s series, resolved once: applying records by index.
static APPLY_SERIES: LazyLock<PerRequestType<Histogram>> = LazyLock::new(|| {
    PerRequestType::new(|kind, success| {
        APPLY_DURATION.with_label_values(&["v3", kind.name(), success_label(success)])
    })
});
static RANGE_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram_vec(
        "etcd_server_range_duration_seconds",
        "The latency distributions of txn.Range",
        &["success"],
        exponential(0.0001, 2.0, 20),
    )
});
static RANGE_SERIES: LazyLock<[Histogram; 2]> = LazyLock::new(|| {
    [false, true].map(|success| RANGE_DURATION.with_label_values(&[success_label(success)]))
});
static SLOW_APPLIES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_server_slow_apply_total",
        "The total number of slow apply requests (likely overloaded from slow disk).",
    )
});

static SNAPSHOT_APPLYING: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_server_snapshot_apply_in_progress_total",
        "1 if the server is applying the incoming snapshot. 0 if none.",
    )
});
static SNAPSHOT_SAVE: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_debugging_snap_save_total_duration_seconds",
        "The total latency distributions of save called by snapshot.",
        disk_buckets(),
    )
});

// etcd's snapshotter marshals the raft snapshot and fsyncs its file; here the store's
// snapshot file is written (the marshalling) and then synced.
static SNAPSHOT_MARSHALLING: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_debugging_snap_save_marshalling_duration_seconds",
        "The marshalling cost distributions of save called by snapshot.",
        disk_buckets(),
    )
});
static SNAPSHOT_FSYNC: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_snap_fsync_duration_seconds",
        "The latency distributions of fsync called by snap.",
        disk_buckets(),
    )
});

/// etcd's `warningApplyDuration`: an apply slower than this is counted as slow.
const SLOW_APPLY: Duration = Duration::from_millis(100);

/// Adds the store's metrics to `registry` (the process's one, `metrics::registry`).
pub fn register(registry: &Registry) -> prometheus::Result<()> {
    let operations = [&*RANGES, &*PUTS, &*DELETES, &*TXNS];
    let mut collectors: Vec<Box<dyn Collector>> = operations
        .iter()
        .flat_map(|o| -> [Box<dyn Collector>; 2] {
            [Box::new(o.current.clone()), Box::new(o.debugging.clone())]
        })
        .collect();
    collectors.extend::<[Box<dyn Collector>; 26]>([
        Box::new(SNAPSHOT_APPLYING.clone()),
        Box::new(SNAPSHOT_SAVE.clone()),
        Box::new(APPLY_DURATION.clone()),
        Box::new(RANGE_DURATION.clone()),
        Box::new(SNAPSHOT_MARSHALLING.clone()),
        Box::new(SNAPSHOT_FSYNC.clone()),
        Box::new(SLOW_APPLIES.clone()),
        Box::new(BACKEND_COMMIT.clone()),
        Box::new(BACKEND_COMMIT_WRITE.clone()),
        Box::new(BACKEND_COMMIT_REBALANCE.clone()),
        Box::new(BACKEND_COMMIT_SPILL.clone()),
        Box::new(DEFRAG_DURATION.clone()),
        Box::new(DEFRAG_INFLIGHT.clone()),
        Box::new(SNAPSHOT_DURATION.clone()),
        Box::new(PUT_BYTES.clone()),
        Box::new(LEASES_GRANTED.clone()),
        Box::new(LEASES_REVOKED.clone()),
        Box::new(LEASES_RENEWED.clone()),
        Box::new(LEASE_TTLS.clone()),
        Box::new(INDEX_COMPACTION_PAUSE.clone()),
        Box::new(DB_COMPACTION_PAUSE.clone()),
        Box::new(DB_COMPACTION_TOTAL.clone()),
        Box::new(DB_COMPACTION_KEYS.clone()),
        Box::new(DB_COMPACTION_LAST.clone()),
        Box::new(HASH_DURATION.clone()),
        Box::new(HASH_REV_DURATION.clone()),
    ]);
    for collector in collectors {
        registry.register(collector)?;
    }
    Ok(())
}

/// One write of an applied batch to the store took `elapsed` (etcd's bbolt commit, and
/// its write phase).
pub fn backend_committed(elapsed: Duration) {
    BACKEND_COMMIT.observe(elapsed.as_secs_f64());
    BACKEND_COMMIT_WRITE.observe(elapsed.as_secs_f64());
}

/// One command was applied in `elapsed`: `kind` is etcd's name of its request
/// (`Put`, `Txn`, `AuthUserAdd`...), `success` whether it changed the store or failed
/// only as etcd counts a success too (a compacted revision).
pub fn applied(kind: RequestType, success: bool, elapsed: Duration) {
    if let Some(series) = APPLY_SERIES.get(kind, success) {
        series.observe(elapsed.as_secs_f64());
    }
    if elapsed > SLOW_APPLY {
        SLOW_APPLIES.inc();
    }
}

/// One Range ran against the store in `elapsed` (etcd's `txn.Range`: the read alone,
/// without the wait for a read index).
pub fn ranged(success: bool, elapsed: Duration) {
    RANGE_SERIES[usize::from(success)].observe(elapsed.as_secs_f64());
}

/// etcd's spelling of a `success` label.
pub fn success_label(success: bool) -> &'static str {
    if success {
        "true"
    } else {
        "false"
    }
}

/// What one command (or one read) did to the keyspace, counted as etcd's mvcc does.
#[derive(Clone, Copy, Debug, Default)]
pub struct OperationCounts {
    pub ranges: u64,
    pub puts: u64,
    pub deletes: u64,
    /// Keys and values of the puts, in bytes.
    pub put_bytes: u64,
}

impl OperationCounts {
    /// Adds the counts; a command of more than one operation is a transaction too.
    pub fn record(&self) {
        RANGES.add(self.ranges);
        PUTS.add(self.puts);
        DELETES.add(self.deletes);
        if self.ranges + self.puts + self.deletes > 1 {
            TXNS.add(1);
        }
        PUT_BYTES.add(i64::try_from(self.put_bytes).unwrap_or(i64::MAX));
    }
}

/// A lease of `ttl` seconds was granted (applied on this member).
pub fn lease_granted(ttl: i64) {
    LEASES_GRANTED.inc();
    LEASE_TTLS.observe(ttl as f64);
}

/// A lease was revoked or expired (applied on this member).
pub fn lease_revoked() {
    LEASES_REVOKED.inc();
}

/// The leader renewed a lease (a keepalive).
pub fn lease_renewed() {
    LEASES_RENEWED.inc();
}

/// One compaction step removed `keys` versions in `elapsed` (etcd's batch under the
/// backend lock: a pause for writers there, a RocksDB write here).
pub fn compaction_step(keys: u64, elapsed: Duration) {
    DB_COMPACTION_PAUSE.observe(elapsed.as_secs_f64() * 1000.0);
    DB_COMPACTION_KEYS.inc_by(keys);
}

/// A whole compaction finished after `elapsed`.
pub fn compaction_finished(elapsed: Duration) {
    DB_COMPACTION_TOTAL.observe(elapsed.as_secs_f64() * 1000.0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    DB_COMPACTION_LAST.set(now);
}

/// A Hash (whole store) or a HashKV (by revision) took `elapsed`.
pub fn hashed(by_revision: bool, elapsed: Duration) {
    let histogram = if by_revision {
        &HASH_REV_DURATION
    } else {
        &HASH_DURATION
    };
    histogram.observe(elapsed.as_secs_f64());
}

/// Marks a defragmentation in flight until dropped, then records its duration.
pub struct DefragInFlight(std::time::Instant);

impl DefragInFlight {
    pub fn start() -> Self {
        DEFRAG_INFLIGHT.set(1);
        DefragInFlight(std::time::Instant::now())
    }
}

impl Drop for DefragInFlight {
    fn drop(&mut self) {
        DEFRAG_INFLIGHT.set(0);
        DEFRAG_DURATION.observe(self.0.elapsed().as_secs_f64());
    }
}

/// Marks a received raft snapshot being installed into the store until dropped.
pub struct SnapshotApplying(());

impl SnapshotApplying {
    pub fn start() -> Self {
        SNAPSHOT_APPLYING.inc();
        SnapshotApplying(())
    }
}

impl Drop for SnapshotApplying {
    fn drop(&mut self) {
        SNAPSHOT_APPLYING.dec();
    }
}

/// A raft snapshot of the store was built (its file written and synced) in
/// `elapsed`: etcd's snapshotter save.
pub fn snapshot_saved(elapsed: Duration) {
    SNAPSHOT_SAVE.observe(elapsed.as_secs_f64());
}

/// The store's snapshot file was written in `writing` and synced in `syncing`.
pub fn snapshot_written(writing: Duration, syncing: Duration) {
    SNAPSHOT_MARSHALLING.observe(writing.as_secs_f64());
    SNAPSHOT_FSYNC.observe(syncing.as_secs_f64());
}

/// A snapshot of the store was streamed out in `elapsed`.
pub fn snapshot_sent(elapsed: Duration) {
    SNAPSHOT_DURATION.observe(elapsed.as_secs_f64());
}
