//! The process and Go-runtime basics that etcd dashboards read.
//!
//! `process_*` come from the prometheus crate's process collector (Linux only), with
//! the names and meanings of Go's. There is no Go runtime here, so the `go_*` series
//! dashboards use are given their nearest equivalents: `go_goroutines` is the number of
//! tokio tasks alive, `go_threads` the process's OS threads. Go's memory statistics
//! have no equivalent and are not exported.

use std::sync::{LazyLock, OnceLock};

use prometheus::{PullingGauge, Registry};

/// The tokio runtime the member runs on, whose tasks `go_goroutines` counts.
static RUNTIME: OnceLock<tokio::runtime::Handle> = OnceLock::new();

pub(super) fn register(registry: &Registry) -> prometheus::Result<()> {
    #[cfg(target_os = "linux")]
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    registry.register(Box::new(PullingGauge::new(
        "go_goroutines",
        "Number of goroutines that currently exist. (QuantyKube: tokio tasks alive.)",
        Box::new(|| {
            RUNTIME
                .get()
                .map_or(0.0, |handle| handle.metrics().num_alive_tasks() as f64)
        }),
    )?))?;
    registry.register(Box::new(PullingGauge::new(
        "go_threads",
        "Number of OS threads created.",
        Box::new(|| os_threads().unwrap_or(0) as f64),
    )?))?;
    Ok(())
}

/// Remembers the runtime of the calling task (the first member's, in a process that
/// runs several).
pub(super) fn remember_runtime() {
    LazyLock::force(&super::REGISTRY);
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        let _ = RUNTIME.set(handle);
    }
}

/// The process's thread count: field 20 of `/proc/self/stat` (after the command name,
/// which is parenthesised and may itself contain spaces).
fn os_threads() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, after_name) = stat.rsplit_once(')')?;
    // Fields after the name start at field 3 (state); threads is field 20.
    after_name.split_whitespace().nth(17)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[cfg(target_os = "linux")]
    #[test]
    fn the_thread_count_is_read_from_proc() {
        assert!(super::os_threads().is_some_and(|n| n >= 1));
    }
}
