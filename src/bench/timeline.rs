//! A run seen over time: the operations that succeeded in each window of `--timeline`
//! (throughput, p50, p99 and errors per window), for charts of a long run that show
//! whether the server slows as its store fills.
//!
//! The clients share one [`Timeline`] behind a mutex, taken once per finished
//! operation: at the tens of thousands of operations per second a bench reaches, an
//! uncontended lock costs far less than the request. Windows are indexed by when an
//! operation finished, counted from the start of the run. This module must never
//! measure time itself: the driver passes both instants.

use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::error::BenchError;

/// Latencies of one window, in microseconds, two significant digits (enough for a
/// chart), up to an hour as the run's own histogram.
const MAX_MICROS: u64 = 3_600_000_000;
const SIGNIFICANT_DIGITS: u8 = 2;

/// One window as reported.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Window {
    /// End of the window, in seconds from the start of the run.
    pub end_seconds: f64,
    /// Operations that succeeded in the window, per second.
    pub throughput: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Operations that failed in the window.
    pub errors: u64,
}

struct WindowCounts {
    latency: Histogram<u64>,
    errors: u64,
}

/// Per-window measurements of a run, shared by its clients.
pub struct Timeline {
    interval: Duration,
    windows: Mutex<Vec<WindowCounts>>,
    template: Histogram<u64>,
}

impl Timeline {
    pub fn new(interval: Duration) -> Result<Timeline, BenchError> {
        let template = Histogram::new_with_bounds(1, MAX_MICROS, SIGNIFICANT_DIGITS)
            .map_err(|e| BenchError::Histogram(format!("{e:?}")))?;
        Ok(Timeline {
            interval,
            windows: Mutex::new(Vec::new()),
            template,
        })
    }

    /// An operation finished `at` after the start of the run: succeeded after
    /// `latency`, or failed (`None`).
    pub fn record(&self, at: Duration, latency: Option<Duration>) {
        let index = (at.as_nanos() / self.interval.as_nanos().max(1)) as usize;
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        while windows.len() <= index {
            windows.push(WindowCounts {
                latency: Histogram::new_from(&self.template),
                errors: 0,
            });
        }
        let window = &mut windows[index];
        match latency {
            Some(latency) => window
                .latency
                .saturating_record(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX)),
            None => window.errors += 1,
        }
    }

    /// Every window from the start to the last that saw an operation. The last window
    /// is cut at `elapsed` (the end of the run), so its throughput is not understated.
    pub fn windows(&self, elapsed: Duration) -> Vec<Window> {
        let windows = self
            .windows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let interval = self.interval.as_secs_f64();
        let ms = |micros: u64| micros as f64 / 1000.0;
        windows
            .iter()
            .enumerate()
            .map(|(index, counts)| {
                let start = index as f64 * interval;
                let end = ((index + 1) as f64 * interval).min(elapsed.as_secs_f64().max(start));
                let length = end - start;
                let succeeded = counts.latency.len();
                Window {
                    end_seconds: end,
                    throughput: if length > 0.0 {
                        succeeded as f64 / length
                    } else {
                        0.0
                    },
                    p50_ms: ms(counts.latency.value_at_quantile(0.5)),
                    p99_ms: ms(counts.latency.value_at_quantile(0.99)),
                    errors: counts.errors,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_land_in_the_window_they_finished_in() {
        let timeline = Timeline::new(Duration::from_secs(1)).unwrap();
        for i in 0..100 {
            timeline.record(
                Duration::from_millis(10 * i),
                Some(Duration::from_millis(2)),
            );
        }
        timeline.record(Duration::from_millis(2_500), None);
        timeline.record(
            Duration::from_millis(2_400),
            Some(Duration::from_millis(40)),
        );
        let windows = timeline.windows(Duration::from_millis(2_500));
        assert_eq!(windows.len(), 3);
        assert_eq!(windows[0].throughput, 100.0);
        assert!((windows[0].p99_ms - 2.0).abs() < 0.05, "{windows:?}");
        // Nothing finished in the second window: it is reported, empty.
        assert_eq!(windows[1].throughput, 0.0);
        assert_eq!(windows[1].errors, 0);
        // The last window is half long: one operation in it is two per second.
        assert_eq!(windows[2].end_seconds, 2.5);
        assert_eq!(windows[2].throughput, 2.0);
        assert_eq!(windows[2].errors, 1);
        assert!((windows[2].p50_ms - 40.0).abs() < 0.5, "{windows:?}");
    }
}
