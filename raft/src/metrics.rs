//! The metrics only this crate sees: WAL fsyncs, peer traffic and round trips,
//! proposals as the raft client handles them, forwarded writes and read-index rounds.
//!
//! Names, types, help texts, labels and buckets are etcd's (its `wal`, `rafthttp` and
//! `etcdserver` packages) where etcd has the metric, `quantykube_` otherwise. This
//! module owns the metric objects and [`register`], which the server crate's one
//! registry calls; it must never format or serve metrics, and recording must stay an
//! atomic operation on a handle resolved before the hot path (no lookup, lock or
//! allocation per call).
//!
//! Metrics are process-wide, as etcd's are: several members in one process (tests, the
//! simulation) add up into the same series.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{
    exponential_buckets, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, Opts, Registry,
};

use crate::types::NodeId;

/// etcd's buckets for disk latencies: 1 ms to 8.192 s, doubling.
pub fn disk_buckets() -> Vec<f64> {
    exponential_buckets(0.001, 2.0, 14).unwrap_or_default()
}

fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::with_opts(Opts::new(name, help)).unwrap_or_else(|e| malformed(name, e))
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| malformed(name, e))
}

/// Metric options are constants, checked by the unit tests: an invalid one is a
/// programming error found before any release, never a runtime condition. Every metric
/// is built when the registry is (`quantykube::metrics::registry`, forced before a
/// member starts), so this can only ever stop startup, never a request.
pub fn malformed(name: &str, e: prometheus::Error) -> ! {
    panic!("metric {name} is malformed: {e}")
}

pub(crate) static WAL_FSYNC: LazyLock<Histogram> = LazyLock::new(|| {
    Histogram::with_opts(
        HistogramOpts::new(
            "etcd_disk_wal_fsync_duration_seconds",
            "The latency distributions of fsync called by WAL.",
        )
        .buckets(disk_buckets()),
    )
    .unwrap_or_else(|e| malformed("etcd_disk_wal_fsync_duration_seconds", e))
});

static PEER_RTT: LazyLock<HistogramVec> = LazyLock::new(|| {
    HistogramVec::new(
        HistogramOpts::new(
            "etcd_network_peer_round_trip_time_seconds",
            "Round-Trip-Time histogram between peers",
        )
        // 0.1 ms to 3.2768 s, doubling, as etcd.
        .buckets(exponential_buckets(0.0001, 2.0, 16).unwrap_or_default()),
        &["To"],
    )
    .unwrap_or_else(|e| malformed("etcd_network_peer_round_trip_time_seconds", e))
});

static PEER_SENT_FAILURES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "etcd_network_peer_sent_failures_total",
        "The total number of send failures from peers.",
        &["To"],
    )
});

static PEER_SENT_BYTES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "etcd_network_peer_sent_bytes_total",
        "The total number of bytes sent to peers.",
        &["To"],
    )
});

static PEER_RECEIVED_BYTES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "etcd_network_peer_received_bytes_total",
        "The total number of bytes received from peers.",
        &["From"],
    )
});

pub(crate) static PROPOSALS_PENDING: LazyLock<IntGauge> = LazyLock::new(|| {
    IntGauge::with_opts(Opts::new(
        "etcd_server_proposals_pending",
        "The current number of pending proposals to commit.",
    ))
    .unwrap_or_else(|e| malformed("etcd_server_proposals_pending", e))
});

pub(crate) static PROPOSALS_FAILED: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_server_proposals_failed_total",
        "The total number of failed proposals seen.",
    )
});

static FORWARDED_WRITES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "quantykube_forwarded_writes_total",
        "Writes this member forwarded to the leader (a follower's proposals).",
    )
});

static READ_INDEXES_FAILED: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_server_read_indexes_failed_total",
        "The total number of failed read indexes seen.",
    )
});

static READ_INDEX_ROUNDS: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "quantykube_read_index_rounds_total",
        "Read-index requests this follower sent to its leader (one per round).",
    )
});

static READ_INDEX_ROUND_READS: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "quantykube_read_index_round_reads_total",
        "Linearizable reads answered by this follower's read-index rounds (reads per round = this / rounds).",
    )
});

static LOCAL_READ_INDEXES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "quantykube_read_index_local_total",
        "Read indexes this member obtained as the leader (a quorum round of its own).",
    )
});

/// Adds every metric of this crate to `registry` (the server crate's one registry).
pub fn register(registry: &Registry) -> prometheus::Result<()> {
    let collectors: [Box<dyn Collector>; 12] = [
        Box::new(WAL_FSYNC.clone()),
        Box::new(PEER_RTT.clone()),
        Box::new(PEER_SENT_FAILURES.clone()),
        Box::new(PEER_SENT_BYTES.clone()),
        Box::new(PEER_RECEIVED_BYTES.clone()),
        Box::new(PROPOSALS_PENDING.clone()),
        Box::new(PROPOSALS_FAILED.clone()),
        Box::new(FORWARDED_WRITES.clone()),
        Box::new(READ_INDEXES_FAILED.clone()),
        Box::new(READ_INDEX_ROUNDS.clone()),
        Box::new(READ_INDEX_ROUND_READS.clone()),
        Box::new(LOCAL_READ_INDEXES.clone()),
    ];
    for collector in collectors {
        registry.register(collector)?;
    }
    Ok(())
}

/// One fsync of the raft log (a group commit) took `elapsed`.
pub fn wal_fsynced(elapsed: Duration) {
    WAL_FSYNC.observe(elapsed.as_secs_f64());
}

/// Counts one proposal while it is in flight; dropping it (answered, failed or given
/// up by its caller) ends it.
pub(crate) struct PendingProposal(());

impl PendingProposal {
    pub(crate) fn start() -> Self {
        PROPOSALS_PENDING.inc();
        PendingProposal(())
    }
}

impl Drop for PendingProposal {
    fn drop(&mut self) {
        PROPOSALS_PENDING.dec();
    }
}

pub(crate) fn proposal_failed() {
    PROPOSALS_FAILED.inc();
}

pub(crate) fn write_forwarded() {
    FORWARDED_WRITES.inc();
}

pub(crate) fn read_index_failed() {
    READ_INDEXES_FAILED.inc();
}

pub(crate) fn read_index_local() {
    LOCAL_READ_INDEXES.inc();
}

pub(crate) fn read_index_round(reads: usize) {
    READ_INDEX_ROUNDS.inc();
    READ_INDEX_ROUND_READS.inc_by(reads as u64);
}

/// etcd's peer label value: the member id in lowercase hex, as `types.ID` prints it.
pub fn peer_label(id: NodeId) -> String {
    format!("{id:x}")
}

/// Bytes of a peer request received from the member its metadata names (its hex id,
/// which is etcd's `From` and `To` label value as it is), and of the answer sent back.
/// etcd counts every message both ways, answers included.
pub fn peer_exchanged(peer_hex: &str, received: usize, sent: usize) {
    if let Ok(counter) = PEER_RECEIVED_BYTES.get_metric_with_label_values(&[peer_hex]) {
        counter.inc_by(received as u64);
    }
    if let Ok(counter) = PEER_SENT_BYTES.get_metric_with_label_values(&[peer_hex]) {
        counter.inc_by(sent as u64);
    }
}

/// The series of one peer, resolved once per connection openraft opens to it.
#[derive(Clone, Debug)]
pub(crate) struct PeerMetrics {
    rtt: Histogram,
    sent_failures: IntCounter,
    sent_bytes: IntCounter,
    received_bytes: IntCounter,
}

impl PeerMetrics {
    pub(crate) fn to(target: NodeId) -> Self {
        let to = peer_label(target);
        PeerMetrics {
            rtt: PEER_RTT.with_label_values(&[&to]),
            sent_failures: PEER_SENT_FAILURES.with_label_values(&[&to]),
            sent_bytes: PEER_SENT_BYTES.with_label_values(&[&to]),
            received_bytes: PEER_RECEIVED_BYTES.with_label_values(&[&to]),
        }
    }

    pub(crate) fn round_trip(&self, elapsed: Duration) {
        self.rtt.observe(elapsed.as_secs_f64());
    }

    pub(crate) fn send_failed(&self) {
        self.sent_failures.inc();
    }

    pub(crate) fn sent(&self, bytes: usize) {
        self.sent_bytes.inc_by(bytes as u64);
    }

    /// An answer from this peer.
    pub(crate) fn received(&self, bytes: usize) {
        self.received_bytes.inc_by(bytes as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_registers_once_and_records() {
        let registry = Registry::new();
        register(&registry).expect("register");
        let peer = PeerMetrics::to(0xbdae9bbc11dd390d);
        peer.send_failed();
        peer.sent(10);
        peer.round_trip(Duration::from_millis(1));
        wal_fsynced(Duration::from_millis(2));
        let names: Vec<String> = registry
            .gather()
            .iter()
            .map(|f| f.name().to_owned())
            .collect();
        assert!(names.contains(&"etcd_network_peer_sent_failures_total".to_owned()));
        assert!(names.contains(&"etcd_disk_wal_fsync_duration_seconds".to_owned()));
        assert_eq!(
            PEER_SENT_FAILURES
                .with_label_values(&["bdae9bbc11dd390d"])
                .get(),
            peer.sent_failures.get()
        );
        assert_eq!(disk_buckets().len(), 14);
        assert!((disk_buckets()[13] - 8.192).abs() < 1e-9);
    }
}
