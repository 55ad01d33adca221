//! etcd's `etcd_server_request_duration_seconds`: how long a request took this member
//! from its arrival to its answer, per request type, as etcd's server times each
//! request it proposes through raft and each Range and read-only Txn it serves.
//!
//! It owns the family and [`register`], which the server's one registry (`metrics`)
//! calls, as the store's and the raft crate's metrics are registered; recording is an
//! index into series resolved once. It never formats or serves metrics.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{Histogram, HistogramVec, Registry};
use quantykube_raft::metrics::{exponential, histogram_vec};

use crate::store::metrics::success_label;
use crate::store::{PerRequestType, RequestType};

static REQUEST_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram_vec(
        "etcd_server_request_duration_seconds",
        "Response latency distribution in seconds for each type.",
        &["type", "success"],
        exponential(0.001, 2.0, 14),
    )
});
static REQUEST_SERIES: LazyLock<PerRequestType<Histogram>> = LazyLock::new(|| {
    PerRequestType::new(|kind, success| {
        REQUEST_DURATION.with_label_values(&[kind.name(), success_label(success)])
    })
});

/// Adds the node's metrics to `registry` (the process's one, `metrics::registry`).
pub fn register(registry: &Registry) -> prometheus::Result<()> {
    registry.register(Box::new(REQUEST_DURATION.clone()))
}

/// A request of type `kind` was answered after `elapsed`, successfully or not.
pub fn request_finished(kind: RequestType, success: bool, elapsed: Duration) {
    if let Some(series) = REQUEST_SERIES.get(kind, success) {
        series.observe(elapsed.as_secs_f64());
    }
}
