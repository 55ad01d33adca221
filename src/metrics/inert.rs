//! etcd's metric families that mean nothing in QuantyKube, exported under etcd's
//! names, types, help texts and labels with the honest value: nothing happened.
//!
//! - `etcd_debugging_store_*`: etcd's v2 store, which QuantyKube does not have (the v2
//!   API is gone from etcd 3.6 too): every counter stays 0, the labelled ones have no
//!   series, as an idle etcd shows them.
//! - `etcd_grpc_proxy_*`: the gRPC proxy's cache and coalescing, which an etcd 3.4
//!   server process registers even when it runs no proxy; QuantyKube has no proxy.
//! - `etcd_server_go_version`: there is no Go runtime; the one series says so.
//!
//! This module owns only their registration; nothing records into them, and
//! docs/metrics.md lists each. A family here that gains a meaning moves to the module
//! that measures it.

use std::sync::LazyLock;

use prometheus::core::Collector;
use prometheus::{IntCounterVec, Registry};
use quantykube_raft::metrics::{counter, counter_vec, gauge, gauge_vec};

/// The label value of `etcd_server_go_version`'s one series.
pub const NO_GO_RUNTIME: &str = "none (QuantyKube is written in Rust)";

/// etcd's v2 store counters by action: never a series here (no v2 store).
static V2_BY_ACTION: LazyLock<[IntCounterVec; 4]> = LazyLock::new(|| {
    [
        counter_vec(
            "etcd_debugging_store_reads_total",
            "Total number of reads action by (get/getRecursive), local to this member.",
            &["action"],
        ),
        counter_vec(
            "etcd_debugging_store_reads_failed_total",
            "Failed read actions by (get/getRecursive), local to this member.",
            &["action"],
        ),
        counter_vec(
            "etcd_debugging_store_writes_total",
            "Total number of writes (e.g. set/compareAndDelete) seen by this member.",
            &["action"],
        ),
        counter_vec(
            "etcd_debugging_store_writes_failed_total",
            "Failed write actions (e.g. set/compareAndDelete), seen by this member.",
            &["action"],
        ),
    ]
});

pub(super) fn register(registry: &Registry) -> prometheus::Result<()> {
    let go_version = gauge_vec(
        "etcd_server_go_version",
        "Which Go version server is running with. 1 for 'server_go_version' label with current version.",
        &["server_go_version"],
    );
    go_version.with_label_values(&[NO_GO_RUNTIME]).set(1);
    let mut collectors: Vec<Box<dyn Collector>> = V2_BY_ACTION
        .iter()
        .map(|family| Box::new(family.clone()) as Box<dyn Collector>)
        .collect();
    collectors.extend::<[Box<dyn Collector>; 9]>([
        Box::new(go_version),
        Box::new(counter(
            "etcd_debugging_store_expires_total",
            "Total number of expired keys.",
        )),
        Box::new(counter(
            "etcd_debugging_store_watch_requests_total",
            "Total number of incoming watch requests (new or reestablished).",
        )),
        Box::new(gauge(
            "etcd_debugging_store_watchers",
            "Count of currently active watchers.",
        )),
        Box::new(gauge(
            "etcd_grpc_proxy_cache_hits_total",
            "Total number of cache hits",
        )),
        Box::new(gauge(
            "etcd_grpc_proxy_cache_keys_total",
            "Total number of keys/ranges cached",
        )),
        Box::new(gauge(
            "etcd_grpc_proxy_cache_misses_total",
            "Total number of cache misses",
        )),
        Box::new(counter(
            "etcd_grpc_proxy_events_coalescing_total",
            "Total number of events coalescing",
        )),
        Box::new(gauge(
            "etcd_grpc_proxy_watchers_coalescing_total",
            "Total number of current watchers coalescing",
        )),
    ]);
    for collector in collectors {
        registry.register(collector)?;
    }
    Ok(())
}

/// Gives each labelled family a series, so that a test can read its type and labels
/// (an exposition leaves out families without series).
#[cfg(test)]
pub(super) fn show_every_family() {
    for family in V2_BY_ACTION.iter() {
        family.with_label_values(&["get"]);
    }
}
