//! What a run measured: a latency histogram of the operations that succeeded, the
//! number that failed, a count of errors per kind (failed operations, and failures
//! outside any operation such as a watch stream that broke), and tagged sub-counts
//! (conflicts, reads, writes) each with its own histogram.
//!
//! Each client owns a [`Recorder`] (no lock on the hot path); the driver merges them at
//! the end. Latencies are kept in microseconds in an HDR histogram (3 significant
//! digits, up to an hour), so percentiles cost no memory per operation. This module
//! must never measure time itself: callers pass the latency they measured.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::error::{BenchError, OpError};

/// Largest latency the histograms track, in microseconds (one hour); longer ones are
/// recorded as one hour.
const MAX_MICROS: u64 = 3_600_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// A label an operation may return to be counted apart, e.g. `"conflict"`.
pub type Tag = Option<&'static str>;

/// Measurements of one client, or of a whole run once merged.
#[derive(Clone, Debug)]
pub struct Recorder {
    latency: Histogram<u64>,
    succeeded: u64,
    failed: u64,
    errors: BTreeMap<String, u64>,
    tagged: BTreeMap<&'static str, Histogram<u64>>,
    /// Open loop: how late operations were sent after their scheduled instant.
    send_lag: Option<Histogram<u64>>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Result<Recorder, BenchError> {
        Ok(Recorder {
            latency: histogram()?,
            succeeded: 0,
            failed: 0,
            errors: BTreeMap::new(),
            tagged: BTreeMap::new(),
            send_lag: None,
        })
    }

    /// An operation succeeded after `latency`.
    pub fn success(&mut self, latency: Duration, tag: Tag) {
        let micros = micros(latency);
        self.latency.saturating_record(micros);
        self.succeeded += 1;
        if let Some(tag) = tag {
            let histogram = match self.tagged.entry(tag) {
                std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::btree_map::Entry::Vacant(entry) => {
                    // Same bounds as `latency`, which was created with them.
                    entry.insert(Histogram::new_from(&self.latency))
                }
            };
            histogram.saturating_record(micros);
        }
    }

    /// An open-loop operation was sent `lag` after its scheduled instant.
    pub fn send_lag(&mut self, lag: Duration) {
        let latency = &self.latency;
        self.send_lag
            .get_or_insert_with(|| Histogram::new_from(latency))
            .saturating_record(micros(lag));
    }

    /// How late open-loop operations were sent, if any were.
    pub fn send_lag_summary(&self) -> Option<LatencySummary> {
        self.send_lag.as_ref().map(LatencySummary::of)
    }

    /// An operation failed.
    pub fn error(&mut self, error: &OpError) {
        self.failed += 1;
        self.error_kind(error.kind(), 1);
    }

    /// `count` errors of a kind the caller names, outside any operation (setup, streams).
    pub fn error_kind(&mut self, kind: String, count: u64) {
        if count > 0 {
            *self.errors.entry(kind).or_insert(0) += count;
        }
    }

    /// Adds everything `other` measured.
    pub fn merge(&mut self, other: &Recorder) {
        add(&mut self.latency, &other.latency);
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.merge_errors(other);
        if let Some(lag) = &other.send_lag {
            match &mut self.send_lag {
                Some(mine) => add(mine, lag),
                None => self.send_lag = Some(lag.clone()),
            }
        }
        for (tag, histogram) in &other.tagged {
            match self.tagged.get_mut(tag) {
                Some(mine) => add(mine, histogram),
                None => {
                    self.tagged.insert(tag, histogram.clone());
                }
            }
        }
    }

    /// Adds `other`'s errors as errors outside any operation.
    pub fn merge_errors(&mut self, other: &Recorder) {
        for (kind, count) in &other.errors {
            *self.errors.entry(kind.clone()).or_insert(0) += count;
        }
    }

    /// Operations that failed.
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// Operations that succeeded.
    pub fn succeeded(&self) -> u64 {
        self.succeeded
    }

    /// Errors of all kinds together (failed operations and others).
    pub fn errors_total(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Failures per kind.
    pub fn errors(&self) -> &BTreeMap<String, u64> {
        &self.errors
    }

    /// Latency of the operations that succeeded.
    pub fn latency(&self) -> LatencySummary {
        LatencySummary::of(&self.latency)
    }

    /// Successful operations returned with `tag`.
    pub fn tagged_count(&self, tag: &str) -> u64 {
        self.tagged.get(tag).map_or(0, Histogram::len)
    }

    /// The latency distribution, for a chart with a logarithmic tail axis: the
    /// percentiles 0, 10, ... 90, then 99, 99.9, ... in the style of HdrHistogram's
    /// percentile plots, down to one operation in a million, and the maximum.
    pub fn latency_distribution(&self) -> Vec<Percentile> {
        if self.latency.is_empty() {
            return Vec::new();
        }
        let mut percentiles: Vec<f64> = (0..10).map(|tenth| f64::from(tenth) * 10.0).collect();
        for tail in [1.0, 0.1, 0.01, 0.001, 0.0001] {
            for step in [5.0, 2.0, 1.0] {
                percentiles.push(100.0 - tail * step);
            }
        }
        percentiles.push(100.0);
        percentiles.dedup();
        percentiles
            .into_iter()
            .map(|percentile| Percentile {
                percentile,
                ms: self.latency.value_at_quantile(percentile / 100.0) as f64 / 1000.0,
            })
            .collect()
    }

    /// Latency of the successful operations returned with `tag`.
    pub fn tagged_latency(&self, tag: &str) -> LatencySummary {
        self.tagged
            .get(tag)
            .map_or_else(LatencySummary::default, LatencySummary::of)
    }
}

/// One point of a latency distribution: `percentile` (0 to 100) of the successful
/// operations took at most `ms`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Percentile {
    pub percentile: f64,
    pub ms: f64,
}

/// Mean, percentiles and maximum of a latency histogram, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
}

impl LatencySummary {
    fn of(histogram: &Histogram<u64>) -> LatencySummary {
        if histogram.is_empty() {
            return LatencySummary::default();
        }
        let ms = |micros: u64| micros as f64 / 1000.0;
        LatencySummary {
            // Microsecond resolution, like the percentiles.
            mean: histogram.mean().round() / 1000.0,
            p50: ms(histogram.value_at_quantile(0.5)),
            p90: ms(histogram.value_at_quantile(0.9)),
            p99: ms(histogram.value_at_quantile(0.99)),
            p99_9: ms(histogram.value_at_quantile(0.999)),
            max: ms(histogram.max()),
        }
    }
}

fn histogram() -> Result<Histogram<u64>, BenchError> {
    Histogram::new_with_bounds(1, MAX_MICROS, SIGNIFICANT_DIGITS)
        .map_err(|e| BenchError::Histogram(format!("{e:?}")))
}

fn micros(latency: Duration) -> u64 {
    u64::try_from(latency.as_micros()).unwrap_or(u64::MAX)
}

fn add(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    // Both have the same bounds, so adding cannot fail; if it did, the loss is logged.
    if let Err(error) = into.add(from) {
        tracing::warn!(?error, "latency histograms could not be merged");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_and_summarises() {
        let mut a = Recorder::new().unwrap();
        let mut b = Recorder::new().unwrap();
        for ms in 1..=100 {
            a.success(Duration::from_millis(ms), None);
        }
        b.success(Duration::from_millis(500), Some("conflict"));
        b.error(&OpError::Rpc(tonic::Status::unavailable(
            "etcdserver: leader changed",
        )));
        a.merge(&b);
        assert_eq!(a.succeeded(), 101);
        assert_eq!(a.failed(), 1);
        assert_eq!(a.errors_total(), 1);
        a.error_kind("watch stream closed".into(), 2);
        assert_eq!(a.failed(), 1);
        assert_eq!(a.errors_total(), 3);
        assert_eq!(
            a.errors().get("Unavailable: etcdserver: leader changed"),
            Some(&1)
        );
        assert_eq!(a.tagged_count("conflict"), 1);
        let l = a.latency();
        assert!(l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.p99_9 && l.p99_9 <= l.max);
        assert!((l.p50 - 51.0).abs() < 0.1, "{l:?}");
        assert!((l.max - 500.0).abs() < 1.0, "{l:?}");
    }

    #[test]
    fn zero_latency_is_recorded() {
        let mut r = Recorder::new().unwrap();
        r.success(Duration::ZERO, None);
        assert_eq!(r.succeeded(), 1);
        assert_eq!(r.latency().max, 0.0);
    }
}
