//! The metrics only this crate sees: WAL writes and fsyncs, peer traffic, round trips
//! and failed heartbeats,
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{
    exponential_buckets, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::types::NodeId;

/// etcd's buckets for disk latencies: 1 ms to 8.192 s, doubling.
pub fn disk_buckets() -> Vec<f64> {
    exponential_buckets(0.001, 2.0, 14).unwrap_or_default()
}

/// Go's `prometheus.ExponentialBuckets(start, factor, count)`, as etcd declares its
/// histograms' buckets.
pub fn exponential(start: f64, factor: f64, count: usize) -> Vec<f64> {
    exponential_buckets(start, factor, count).unwrap_or_default()
}

// The builders every crate's metrics use: one place that turns a constant's error
// into `malformed`.

pub fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::with_opts(Opts::new(name, help)).unwrap_or_else(|e| malformed(name, e))
}

pub fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| malformed(name, e))
}

pub fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::with_opts(Opts::new(name, help)).unwrap_or_else(|e| malformed(name, e))
}

pub fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| malformed(name, e))
}

pub fn histogram(name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
        .unwrap_or_else(|e| malformed(name, e))
}

pub fn histogram_vec(name: &str, help: &str, labels: &[&str], buckets: Vec<f64>) -> HistogramVec {
    HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .unwrap_or_else(|e| malformed(name, e))
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

static WAL_WRITE: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_disk_wal_write_duration_seconds",
        "The latency distributions of write called by WAL.",
        disk_buckets(),
    )
});

// A gauge in etcd despite its name (it adds each write's size).
static WAL_WRITE_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_disk_wal_write_bytes_total",
        "Total number of bytes written in WAL.",
    )
});

static HEARTBEAT_SEND_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_server_heartbeat_send_failures_total",
        "The total number of leader heartbeat send failures (likely overloaded from slow disk).",
    )
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

static PEER_RECEIVED_FAILURES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "etcd_network_peer_received_failures_total",
        "The total number of receive failures from peers.",
        &["From"],
    )
});

static SLOW_READ_INDEXES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_server_slow_read_indexes_total",
        "The total number of pending read indexes not in sync with leader's or timed out read index requests.",
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
    let mut collectors: Vec<Box<dyn Collector>> = Vec::new();
    for families in [&*SNAPSHOTS_SENT, &*SNAPSHOTS_RECEIVED] {
        collectors.push(Box::new(families.success.clone()));
        collectors.push(Box::new(families.failures.clone()));
        collectors.push(Box::new(families.inflight.clone()));
        collectors.push(Box::new(families.duration.clone()));
    }
    collectors.extend::<[Box<dyn Collector>; 21]>([
        Box::new(PEER_RECEIVED_FAILURES.clone()),
        Box::new(SLOW_READ_INDEXES.clone()),
        Box::new(SNAP_DB_FSYNC.clone()),
        Box::new(SNAP_DB_SAVE.clone()),
        Box::new(ACTIVE_PEERS.clone()),
        Box::new(DISCONNECTED_PEERS.clone()),
        Box::new(WAL_FSYNC.clone()),
        Box::new(WAL_WRITE.clone()),
        Box::new(WAL_WRITE_BYTES.clone()),
        Box::new(HEARTBEAT_SEND_FAILURES.clone()),
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
    ]);
    for collector in collectors {
        registry.register(collector)?;
    }
    Ok(())
}

/// One fsync of the raft log (a group commit) took `elapsed`.
/// One group of raft log writes (before its fsync): `bytes` in RocksDB's write
/// batches, written in `elapsed` (etcd's WAL write of a Ready's entries).
pub(crate) fn wal_written(bytes: usize, elapsed: Duration) {
    WAL_WRITE.observe(elapsed.as_secs_f64());
    WAL_WRITE_BYTES.add(i64::try_from(bytes).unwrap_or(i64::MAX));
}

/// A heartbeat (an AppendEntries without entries) could not be sent or went
/// unanswered.
pub(crate) fn heartbeat_send_failed() {
    HEARTBEAT_SEND_FAILURES.inc();
}

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

/// A read index did not come before the request timeout (etcd counts its timed-out
/// read index requests, and the answers it drops as out of date, which a read here
/// never gets: each waits for its own round's answer).
pub(crate) fn read_index_slow() {
    SLOW_READ_INDEXES.inc();
}

/// A message from a peer could not be received: its stream broke, or it did not
/// decode. `from` is the sender's hex id, or its address when it sent none (etcd
/// labels its HTTP handlers' failures with the remote address too).
pub(crate) fn peer_receive_failed(from: &str) {
    if let Ok(counter) = PEER_RECEIVED_FAILURES.get_metric_with_label_values(&[from]) {
        counter.inc();
    }
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

static ACTIVE_PEERS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "etcd_network_active_peers",
        "The current number of active peer connections.",
        &["Local", "Remote"],
    )
});

static DISCONNECTED_PEERS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "etcd_network_disconnected_peers_total",
        "The total number of disconnected peers.",
        &["Local", "Remote"],
    )
});

/// etcd's snapshot transfer families of one direction (`To` when sending, `From` when
/// receiving): successes, failures, transfers in flight, durations.
struct SnapshotFamilies {
    success: IntCounterVec,
    failures: IntCounterVec,
    inflight: IntGaugeVec,
    duration: HistogramVec,
}

impl SnapshotFamilies {
    fn new(direction: &str, peer: &str, verb: &str) -> Self {
        let name = |what: &str| format!("etcd_network_snapshot_{direction}_{what}");
        SnapshotFamilies {
            success: counter_vec(
                &name("success"),
                &format!("Total number of successful snapshot {verb}"),
                &[peer],
            ),
            failures: counter_vec(
                &name("failures"),
                &format!("Total number of snapshot {verb} failures"),
                &[peer],
            ),
            inflight: gauge_vec(
                &name("inflights_total"),
                &format!("Total number of inflight snapshot {verb}"),
                &[peer],
            ),
            duration: histogram_vec(
                &name("total_duration_seconds"),
                &format!("Total latency distributions of v3 snapshot {verb}"),
                &[peer],
                exponential(0.1, 2.0, 10),
            ),
        }
    }
}

static SNAPSHOTS_SENT: LazyLock<SnapshotFamilies> =
    LazyLock::new(|| SnapshotFamilies::new("send", "To", "sends"));
static SNAPSHOTS_RECEIVED: LazyLock<SnapshotFamilies> =
    LazyLock::new(|| SnapshotFamilies::new("receive", "From", "receives"));

static SNAP_DB_FSYNC: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_snap_db_fsync_duration_seconds",
        "The latency distributions of fsyncing .snap.db file",
        disk_buckets(),
    )
});
static SNAP_DB_SAVE: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_snap_db_save_total_duration_seconds",
        "The total latency distributions of v3 snapshot save",
        exponential(0.1, 2.0, 10),
    )
});

/// One snapshot transfer to or from a peer, in flight until dropped: a success if
/// [`SnapshotTransfer::succeeded`] was called, a failure otherwise.
pub(crate) struct SnapshotTransfer {
    success: IntCounter,
    failures: IntCounter,
    inflight: IntGauge,
    duration: Histogram,
    started: std::time::Instant,
    succeeded: bool,
}

impl SnapshotTransfer {
    fn start(families: &SnapshotFamilies, peer: NodeId) -> Self {
        let label = [peer_label(peer)];
        let transfer = SnapshotTransfer {
            success: families.success.with_label_values(&label),
            failures: families.failures.with_label_values(&label),
            inflight: families.inflight.with_label_values(&label),
            duration: families.duration.with_label_values(&label),
            started: std::time::Instant::now(),
            succeeded: false,
        };
        transfer.inflight.inc();
        transfer
    }

    /// This member starts sending a snapshot to `to`.
    pub(crate) fn send(to: NodeId) -> Self {
        Self::start(&SNAPSHOTS_SENT, to)
    }

    /// This member starts receiving a snapshot from `from` (the leader).
    pub(crate) fn receive(from: NodeId) -> Self {
        Self::start(&SNAPSHOTS_RECEIVED, from)
    }

    pub(crate) fn succeeded(mut self) {
        self.succeeded = true;
    }
}

impl Drop for SnapshotTransfer {
    fn drop(&mut self) {
        self.inflight.dec();
        if self.succeeded {
            self.success.inc();
            self.duration.observe(self.started.elapsed().as_secs_f64());
        } else {
            self.failures.inc();
        }
    }
}

/// A received snapshot file was fsynced in `fsync`, after `total` since its first
/// byte (etcd's `.snap.db` save).
pub(crate) fn snapshot_saved(fsync: Duration, total: Duration) {
    SNAP_DB_FSYNC.observe(fsync.as_secs_f64());
    SNAP_DB_SAVE.observe(total.as_secs_f64());
}

/// Whether each (local, remote) pair is active now: one flag per pair, whichever of
/// openraft's connections to the peer saw the last answer or failure (etcd's
/// `peerStatus`). Looked up once per connection, never per message.
static PEER_ACTIVE: LazyLock<std::sync::Mutex<ActiveFlags>> = LazyLock::new(Default::default);

/// One "active" flag per (local, remote) pair.
type ActiveFlags = HashMap<(NodeId, NodeId), Arc<AtomicBool>>;

/// The series of one peer, resolved once per connection openraft opens to it.
#[derive(Clone, Debug)]
pub(crate) struct PeerMetrics {
    rtt: Histogram,
    sent_failures: IntCounter,
    sent_bytes: IntCounter,
    received_bytes: IntCounter,
    active: Arc<AtomicBool>,
    active_gauge: IntGauge,
    disconnected: IntCounter,
}

impl PeerMetrics {
    pub(crate) fn to(local: NodeId, target: NodeId) -> Self {
        let to = peer_label(target);
        let pair = [peer_label(local), to.clone()];
        let active = PEER_ACTIVE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry((local, target))
            .or_default()
            .clone();
        PeerMetrics {
            rtt: PEER_RTT.with_label_values(&[&to]),
            sent_failures: PEER_SENT_FAILURES.with_label_values(&[&to]),
            sent_bytes: PEER_SENT_BYTES.with_label_values(&[&to]),
            received_bytes: PEER_RECEIVED_BYTES.with_label_values(&[&to]),
            active,
            active_gauge: ACTIVE_PEERS.with_label_values(&pair),
            disconnected: DISCONNECTED_PEERS.with_label_values(&pair),
        }
    }

    pub(crate) fn round_trip(&self, elapsed: Duration) {
        self.rtt.observe(elapsed.as_secs_f64());
    }

    /// A message to this peer failed: an active peer becomes inactive (disconnected).
    pub(crate) fn send_failed(&self) {
        self.sent_failures.inc();
        if self.active.swap(false, Ordering::AcqRel) {
            self.active_gauge.dec();
            self.disconnected.inc();
        }
    }

    pub(crate) fn sent(&self, bytes: usize) {
        self.sent_bytes.inc_by(bytes as u64);
    }

    /// An answer from this peer: it is active.
    pub(crate) fn received(&self, bytes: usize) {
        self.received_bytes.inc_by(bytes as u64);
        if !self.active.swap(true, Ordering::AcqRel) {
            self.active_gauge.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_registers_once_and_records() {
        let registry = Registry::new();
        register(&registry).expect("register");
        let peer = PeerMetrics::to(1, 0xbdae9bbc11dd390d);
        peer.received(10);
        assert_eq!(
            peer.active_gauge.get(),
            1,
            "an answer makes the peer active"
        );
        peer.send_failed();
        assert_eq!(peer.active_gauge.get(), 0, "a failure makes it inactive");
        assert_eq!(peer.disconnected.get(), 1, "and counts a disconnection");
        peer.send_failed();
        assert_eq!(peer.disconnected.get(), 1, "once per disconnection");
        peer.sent(10);
        peer.round_trip(Duration::from_millis(1));
        wal_fsynced(Duration::from_millis(2));
        peer_receive_failed("bdae9bbc11dd390d");
        let names: Vec<String> = registry
            .gather()
            .iter()
            .map(|f| f.name().to_owned())
            .collect();
        assert!(names.contains(&"etcd_network_peer_sent_failures_total".to_owned()));
        assert!(names.contains(&"etcd_disk_wal_fsync_duration_seconds".to_owned()));
        assert!(names.contains(&"etcd_network_peer_received_failures_total".to_owned()));
        assert_eq!(
            PEER_SENT_FAILURES
                .with_label_values(&["bdae9bbc11dd390d"])
                .get(),
            peer.sent_failures.get()
        );
        SnapshotTransfer::send(2).succeeded();
        drop(SnapshotTransfer::receive(3));
        let sent = SNAPSHOTS_SENT.success.with_label_values(&["2"]);
        let failed = SNAPSHOTS_RECEIVED.failures.with_label_values(&["3"]);
        assert!(
            sent.get() >= 1 && failed.get() >= 1,
            "a success and a failure counted"
        );
        assert_eq!(SNAPSHOTS_SENT.inflight.with_label_values(&["2"]).get(), 0);
        assert_eq!(disk_buckets().len(), 14);
        assert!((disk_buckets()[13] - 8.192).abs() < 1e-9);
    }
}
