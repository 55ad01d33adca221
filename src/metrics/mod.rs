//! Prometheus metrics with etcd's names, types, help texts and labels, so that etcd's
//! dashboards and alerts (the etcd mixin, the public Grafana dashboard) work unchanged.
//! `docs/metrics.md` lists every metric and how it is computed.
//!
//! This module owns the one registry of the process (the raft crate's metrics are
//! registered into it by [`quantykube_raft::metrics::register`], the store's by
//! `store::metrics::register`) and [`render`], the
//! only code that formats metrics: the HTTP layer serves `render()` with
//! [`CONTENT_TYPE`] at `/metrics`. Code that counts calls the small recording functions
//! of the submodules; they touch pre-resolved handles with atomic operations only, so
//! recording on a hot path costs no lock, no lookup and no allocation. Values that are
//! state (sizes, key counts) are read when scraped, not pushed.
//!
//! It must never decide anything: no code path may read a metric back to act on it.
//! Metrics are process-wide, as etcd's are; several members in one process (tests,
//! the simulation) add up into the same series.

pub mod grpc;
mod inert;
pub mod runtime;
pub mod server;
pub mod storage;

#[cfg(test)]
mod tests;

use std::sync::{Arc, LazyLock};

use prometheus::{Encoder, Registry, TextEncoder};

use crate::node::Node;

/// The content type of [`render`]'s output: Prometheus text format 0.0.4, as etcd
/// serves it.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

static REGISTRY: LazyLock<Registry> = LazyLock::new(|| {
    let registry = Registry::new();
    if let Err(error) = register_all(&registry) {
        // Only a programming error (two metrics of one name) gets here; the unit tests
        // render every metric, so it cannot ship.
        tracing::error!(%error, "metrics registry incomplete");
    }
    registry
});

fn register_all(registry: &Registry) -> prometheus::Result<()> {
    server::register(registry)?;
    storage::register(registry)?;
    grpc::register(registry)?;
    runtime::register(registry)?;
    inert::register(registry)?;
    crate::store::metrics::register(registry)?;
    crate::node::metrics::register(registry)?;
    quantykube_raft::metrics::register(registry)
}

/// The process's one registry (created, with every metric in it, on first use;
/// `node::serve` forces it before anything else runs).
pub fn registry() -> &'static Registry {
    &REGISTRY
}

/// Every metric, in Prometheus text exposition format 0.0.4 (see [`CONTENT_TYPE`]).
pub fn render() -> String {
    let families = REGISTRY.gather();
    let mut buffer = Vec::new();
    if let Err(error) = TextEncoder::new().encode(&families, &mut buffer) {
        tracing::warn!(%error, "rendering metrics");
    }
    String::from_utf8(buffer).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Points the state metrics at `node` (its id, version, quota and store) and keeps the
/// raft-derived gauges in step with raft's metrics until raft stops. Spawned once per
/// member by `node::serve`.
pub async fn follow(node: Arc<Node>) {
    LazyLock::force(&REGISTRY);
    runtime::remember_runtime();
    let quota = match node.limits().quota_backend_bytes_flag {
        0 => i64::try_from(crate::config::DEFAULT_QUOTA_BACKEND_BYTES).unwrap_or(i64::MAX),
        flag => flag,
    };
    server::describe(node.id(), node.etcd_version(), quota);
    server::observe_cluster_version(&node);
    storage::observe_store(node.store());
    let id = node.id();
    let metrics = node.raft_metrics();
    // Only the watch channel is kept: holding the node would keep it alive after stop.
    drop(node);
    server::follow_raft(id, metrics).await;
}
