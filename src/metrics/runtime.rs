//! The process and Go-runtime basics that etcd dashboards read, and promhttp's scrape
//! counters.
//!
//! `process_*` come from the prometheus crate's process collector (Linux only), with
//! the names and meanings of Go's. There is no Go runtime here, so the `go_*` series
//! dashboards use are given their nearest equivalents: `go_goroutines` is the number of
//! tokio tasks alive, `go_threads` the process's OS threads. Go's memory statistics
//! have no equivalent and are not exported. etcd's `os_fd_used` and `os_fd_limit` are
//! read from `/proc` when scraped.

use std::sync::{LazyLock, OnceLock};

use prometheus::{IntCounterVec, IntGauge, PullingGauge, Registry};
use quantykube_raft::metrics::{counter_vec, gauge};

/// promhttp's scrape counters, which etcd's `/metrics` handler exports: scrapes served
/// now, and scrapes answered by status code (series for 200, 500 and 503 from the
/// start, as promhttp makes them).
static SCRAPES_IN_FLIGHT: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "promhttp_metric_handler_requests_in_flight",
        "Current number of scrapes being served.",
    )
});
static SCRAPES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let family = counter_vec(
        "promhttp_metric_handler_requests_total",
        "Total number of scrapes by HTTP status code.",
        &["code"],
    );
    for code in ["200", "500", "503"] {
        family.with_label_values(&[code]);
    }
    family
});

/// One scrape: `render` runs counted as in flight (it sees itself, as promhttp's
/// scrape does), then the scrape counts as answered with 200.
pub fn scrape(render: impl FnOnce() -> String) -> String {
    SCRAPES_IN_FLIGHT.inc();
    let text = render();
    SCRAPES_IN_FLIGHT.dec();
    SCRAPES.with_label_values(&["200"]).inc();
    text
}

/// The tokio runtime the member runs on, whose tasks `go_goroutines` counts.
static RUNTIME: OnceLock<tokio::runtime::Handle> = OnceLock::new();

pub(super) fn register(registry: &Registry) -> prometheus::Result<()> {
    registry.register(Box::new(SCRAPES_IN_FLIGHT.clone()))?;
    registry.register(Box::new(SCRAPES.clone()))?;
    #[cfg(target_os = "linux")]
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    registry.register(Box::new(PullingGauge::new(
        "go_goroutines",
        "Number of goroutines that currently exist.",
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
    // etcd's own file descriptor gauges (the process collector's
    // process_open_fds and process_max_fds read the same numbers).
    registry.register(Box::new(PullingGauge::new(
        "os_fd_used",
        "The number of used file descriptors.",
        Box::new(|| open_fds().unwrap_or(0) as f64),
    )?))?;
    registry.register(Box::new(PullingGauge::new(
        "os_fd_limit",
        "The file descriptor limit.",
        Box::new(|| soft_limit("Max open files").unwrap_or(0) as f64),
    )?))?;
    // Go's process collector has it; the prometheus crate's does not.
    #[cfg(target_os = "linux")]
    registry.register(Box::new(PullingGauge::new(
        "process_virtual_memory_max_bytes",
        "Maximum amount of virtual memory available in bytes.",
        Box::new(|| soft_limit("Max address space").unwrap_or(0) as f64),
    )?))?;
    Ok(())
}

/// The entries of `/proc/self/fd`.
fn open_fds() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

/// A soft limit from `/proc/self/limits` (lines like "Max open files  <soft> <hard>
/// files"); `unlimited` reads as `u64::MAX`, as Go's procfs reads it.
fn soft_limit(limit: &str) -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with(limit))?;
    let soft = line.trim_start_matches(limit).split_whitespace().next()?;
    match soft {
        "unlimited" => Some(u64::MAX),
        number => number.parse().ok(),
    }
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

    #[cfg(target_os = "linux")]
    #[test]
    fn descriptors_in_use_and_their_limit_are_read_from_proc() {
        let used = super::open_fds().expect("/proc/self/fd");
        let limit = super::soft_limit("Max open files").expect("/proc/self/limits");
        assert!(super::soft_limit("Max address space").is_some());
        assert!(used >= 3 && limit >= used, "used {used}, limit {limit}");
    }
}
