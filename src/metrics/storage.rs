//! etcd's mvcc metrics read from the store or counted by the watch streams: database
//! sizes, open read transactions, key count, revisions, the auth revision, the watch
//! gauges and event count, and etcd 3.6's `etcd_debugging_server_alarms`, plus
//! QuantyKube's watch catch-up count. (What the store counts itself, operations,
//! compactions, hashes, commits, is in `store::metrics`.)
//!
//! Sizes, key count, revisions, snapshots and alarms are read from the store when
//! scraped (RocksDB properties, the `meta` counters and the in-memory alarm set, no
//! scan), from the store of the member that started last in this process.

use std::sync::{Arc, LazyLock, RwLock, Weak};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntGauge, IntGaugeVec, Opts, PullingGauge, Registry};

use prometheus::Histogram;
use quantykube_raft::metrics::{counter, disk_buckets, gauge, histogram};

use crate::store::RevisionStore;

static WATCH_STREAMS: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_debugging_mvcc_watch_stream_total",
        "Total number of watch streams.",
    )
});

static WATCHERS: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_debugging_mvcc_watcher_total",
        "Total number of watchers.",
    )
});

/// Events handed to a watch stream's queue and not yet taken by the gRPC stream that
/// sends them (etcd's: handed to a watcher's channel, not yet received by its send
/// loop).
static PENDING_EVENTS: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_debugging_mvcc_pending_events_total",
        "Total number of pending events to be sent.",
    )
});

static EVENTS_SENT: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_debugging_mvcc_events_total",
        "Total number of events sent by this member.",
    )
});

static SLOW_WATCHERS: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_debugging_mvcc_slow_watcher_total",
        "Total number of unsynced slow watchers.",
    )
});

/// etcd's watch send loop timings (v3rpc), 1 ms to 8.192 s doubling: [events,
/// events per event, control, progress].
static WATCH_SEND_LOOP: LazyLock<[Histogram; 4]> = LazyLock::new(|| {
    let name = |what: &str| format!("etcd_debugging_server_watch_send_loop_{what}");
    [
        histogram(
            &name("watch_stream_duration_seconds"),
            "The total duration in seconds of running through the send loop watch stream response all events.",
            disk_buckets(),
        ),
        histogram(
            &name("watch_stream_duration_per_event_seconds"),
            "The average duration in seconds of running through the send loop watch stream response, per event.",
            disk_buckets(),
        ),
        histogram(
            &name("control_stream_duration_seconds"),
            "The total duration in seconds of running through the send loop control stream response.",
            disk_buckets(),
        ),
        histogram(
            &name("progress_duration_seconds"),
            "The total duration in seconds of running through the progress loop control stream response.",
            disk_buckets(),
        ),
    ]
});

/// What a watch stream sent, for its send loop timings.
#[derive(Clone, Copy, Debug)]
pub enum WatchSend {
    /// A response with this many events.
    Events(usize),
    /// A watcher created or canceled.
    Control,
    /// A progress notification (or any other response without events).
    Progress,
}

static WATCH_CATCH_UPS: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "quantykube_watch_catch_up_pages_total",
        "Pages of history read for watchers behind the live feed (new watches from a past revision, and slow watchers moved back to catching up).",
    )
});

/// The store the scrape-time gauges read; weak, so that a stopped member's store closes.
static STORE: RwLock<Option<Weak<RevisionStore>>> = RwLock::new(None);

/// Reads `value` from the observed store at scrape time; 0 while there is none.
fn from_store(value: fn(&RevisionStore) -> u64) -> Box<dyn Fn() -> f64 + Send + Sync> {
    Box::new(move || {
        let store = STORE
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(Weak::upgrade);
        store.map_or(0.0, |store| value(&store) as f64)
    })
}

fn pulled(
    name: &str,
    help: &str,
    value: fn(&RevisionStore) -> u64,
) -> prometheus::Result<PullingGauge> {
    PullingGauge::new(name, help, from_store(value))
}

/// etcd 3.6's `etcd_debugging_server_alarms{server_id, alarm_type}`: 1 for every
/// active alarm of the cluster (etcd counts activations up and deactivations down, and
/// keeps a disarmed alarm's series at 0; here it leaves).
struct AlarmGauges(IntGaugeVec);

impl AlarmGauges {
    fn new() -> prometheus::Result<Self> {
        IntGaugeVec::new(
            Opts::new(
                "etcd_debugging_server_alarms",
                "Alarms for every member in cluster. 1 for 'server_id' label with current ID. 2 for 'alarm_type' label with type of this alarm",
            ),
            &["server_id", "alarm_type"],
        )
        .map(AlarmGauges)
    }
}

impl Collector for AlarmGauges {
    fn desc(&self) -> Vec<&Desc> {
        self.0.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.0.reset();
        let store = STORE
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(Weak::upgrade);
        for alarm in store.map(|s| s.alarms()).unwrap_or_default() {
            self.0
                .with_label_values(&[
                    &format!("{:x}", alarm.member_id),
                    &crate::store::alarm_name(alarm.alarm),
                ])
                .set(1);
        }
        self.0.collect()
    }
}

fn revision(value: Result<i64, crate::store::StoreError>) -> u64 {
    value.ok().and_then(|r| u64::try_from(r).ok()).unwrap_or(0)
}

pub(super) fn register(registry: &Registry) -> prometheus::Result<()> {
    let collectors: Vec<Box<dyn Collector>> = vec![
        Box::new(WATCH_STREAMS.clone()),
        Box::new(WATCHERS.clone()),
        Box::new(PENDING_EVENTS.clone()),
        Box::new(WATCH_CATCH_UPS.clone()),
        Box::new(EVENTS_SENT.clone()),
        Box::new(WATCH_SEND_LOOP[0].clone()),
        Box::new(WATCH_SEND_LOOP[1].clone()),
        Box::new(WATCH_SEND_LOOP[2].clone()),
        Box::new(WATCH_SEND_LOOP[3].clone()),
        Box::new(SLOW_WATCHERS.clone()),
        Box::new(pulled(
            "etcd_debugging_mvcc_db_total_size_in_bytes",
            "Total size of the underlying database physically allocated in bytes.",
            RevisionStore::approximate_size,
        )?),
        Box::new(pulled(
            "etcd_mvcc_db_open_read_transactions",
            "The number of currently open read transactions",
            RevisionStore::open_snapshots,
        )?),
        Box::new(pulled(
            "etcd_debugging_auth_revision",
            "The current revision of auth store.",
            |store| store.auth().revision(),
        )?),
        Box::new(pulled(
            "etcd_mvcc_db_total_size_in_bytes",
            "Total size of the underlying database physically allocated in bytes.",
            RevisionStore::approximate_size,
        )?),
        Box::new(pulled(
            "etcd_mvcc_db_total_size_in_use_in_bytes",
            "Total size of the underlying database logically in use in bytes.",
            RevisionStore::approximate_size_in_use,
        )?),
        Box::new(pulled(
            "etcd_debugging_mvcc_keys_total",
            "Total number of keys.",
            RevisionStore::estimated_key_count,
        )?),
        Box::new(pulled(
            "etcd_debugging_mvcc_current_revision",
            "The current revision of store.",
            |store| revision(store.current_revision()),
        )?),
        Box::new(pulled(
            "etcd_debugging_mvcc_compact_revision",
            "The revision of the last compaction in store.",
            |store| revision(store.compacted_revision()),
        )?),
        Box::new(AlarmGauges::new()?),
    ];
    for collector in collectors {
        registry.register(collector)?;
    }
    Ok(())
}

/// The store scrape-time gauges read from now on.
pub(super) fn observe_store(store: &Arc<RevisionStore>) {
    *STORE.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::downgrade(store));
}

/// Counts one watch stream while it is served.
pub struct WatchStreamGauge(());

impl WatchStreamGauge {
    pub fn open() -> Self {
        WATCH_STREAMS.inc();
        WatchStreamGauge(())
    }
}

impl Drop for WatchStreamGauge {
    fn drop(&mut self) {
        WATCH_STREAMS.dec();
    }
}

/// `n` watchers were created (positive) or ended (negative).
pub fn watchers_changed(n: i64) {
    WATCHERS.add(n);
}

/// A watch stream handed a response to its client's stream in `elapsed`.
pub fn watch_sent(kind: WatchSend, elapsed: std::time::Duration) {
    let seconds = elapsed.as_secs_f64();
    match kind {
        WatchSend::Events(events) => {
            WATCH_SEND_LOOP[0].observe(seconds);
            WATCH_SEND_LOOP[1].observe(seconds / events.max(1) as f64);
        }
        WatchSend::Control => WATCH_SEND_LOOP[2].observe(seconds),
        WatchSend::Progress => WATCH_SEND_LOOP[3].observe(seconds),
    }
}

/// `n` events were queued for a watch stream's client (they count as pending until
/// [`events_taken`]).
pub fn events_queued(n: usize) {
    PENDING_EVENTS.add(i64::try_from(n).unwrap_or(i64::MAX));
}

/// `n` queued events were taken off a stream's queue: sent, or dropped with the stream.
pub fn events_taken(n: usize) {
    PENDING_EVENTS.sub(i64::try_from(n).unwrap_or(i64::MAX));
}

/// `n` events went out to watchers.
pub fn events_sent(n: usize) {
    EVENTS_SENT.inc_by(n as u64);
}

/// Watchers behind the feed (catching up from history) went up or down by `delta`.
pub fn slow_watchers_changed(delta: i64) {
    SLOW_WATCHERS.add(delta);
}

/// One page of history was read for watchers catching up.
pub fn watch_caught_up() {
    WATCH_CATCH_UPS.inc();
}
