//! The store's own metric: how long each applied batch's RocksDB write takes (etcd's
//! `etcd_disk_backend_commit_duration_seconds`, its bbolt commit).
//!
//! As the raft crate's metrics, this module owns the metric object and [`register`],
//! which the server's one registry (`metrics`) calls; it never formats or serves
//! metrics, and recording is one atomic operation on a handle built before the hot path.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, Registry};
use quantykube_raft::metrics::{disk_buckets, malformed};

static BACKEND_COMMIT: LazyLock<Histogram> = LazyLock::new(|| {
    let name = "etcd_disk_backend_commit_duration_seconds";
    Histogram::with_opts(
        HistogramOpts::new(
            name,
            "The latency distributions of commit called by backend.",
        )
        .buckets(disk_buckets()),
    )
    .unwrap_or_else(|e| malformed(name, e))
});

/// Adds the store's metrics to `registry` (the process's one, `metrics::registry`).
pub fn register(registry: &Registry) -> prometheus::Result<()> {
    registry.register(Box::new(BACKEND_COMMIT.clone()))
}

/// One write of an applied batch to the store took `elapsed` (etcd's bbolt commit).
pub fn backend_committed(elapsed: Duration) {
    BACKEND_COMMIT.observe(elapsed.as_secs_f64());
}
