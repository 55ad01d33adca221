//! Periodic mode: keep `retention` of history, as etcd's `v3compactor.Periodic` (3.6).
//!
//! The revision is sampled every `min(retention, 1h) / 10`, and the samples of the last
//! `retention` are kept, so the oldest one is the revision of `retention` ago. The first
//! compaction comes once `retention` has passed since the start, to that oldest sample;
//! later ones every `min(retention, 1h)` after the last success (so a 24-hour retention
//! compacts hourly, each time to the revision of 24 hours before), never twice to the
//! same revision, and a failure is tried again at the next sample. A retention of `2s`
//! samples every 200 ms and compacts every 2 s.
//!
//! This module owns that schedule; the proposal is the caller's.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::{go_duration, Compactable};

const HOUR: Duration = Duration::from_secs(3600);
/// etcd's `retryDivisor`.
const SAMPLES_PER_INTERVAL: u32 = 10;

/// The sliding window of sampled revisions and when to compact.
#[derive(Debug)]
pub(super) struct Window {
    /// How often the revision is sampled (and a failure retried).
    sample_every: Duration,
    /// How long after a success the next compaction is due.
    compact_every: Duration,
    /// How many samples cover the retention (etcd's `getRetentions`).
    capacity: usize,
    /// Oldest first; the front is the revision of `retention` ago once the window is full.
    revisions: VecDeque<i64>,
    /// `retention` until the first compaction, then `compact_every` (etcd's `baseInterval`).
    wait: Duration,
    last_success: Instant,
    last_revision: i64,
}

impl Window {
    /// A window for `retention`, which must be at least 10 ns (the configuration checks).
    pub(super) fn new(retention: Duration, now: Instant) -> Self {
        let compact_every = retention.min(HOUR);
        let sample_every = (compact_every / SAMPLES_PER_INTERVAL).max(Duration::from_nanos(1));
        let capacity = usize::try_from(retention.as_nanos() / sample_every.as_nanos())
            .unwrap_or(usize::MAX)
            .saturating_add(1);
        Window {
            sample_every,
            compact_every,
            capacity,
            revisions: VecDeque::with_capacity(capacity.min(1024)),
            wait: retention,
            last_success: now,
            last_revision: 0,
        }
    }

    pub(super) fn sample_every(&self) -> Duration {
        self.sample_every
    }

    /// Records the revision just sampled, dropping the one older than the retention.
    pub(super) fn record(&mut self, revision: i64) {
        self.revisions.push_back(revision);
        if self.revisions.len() > self.capacity {
            self.revisions.pop_front();
        }
    }

    /// The revision to compact at now, if a compaction is due.
    pub(super) fn due(&mut self, now: Instant) -> Option<i64> {
        let revision = *self.revisions.front()?;
        if now.saturating_duration_since(self.last_success) < self.wait
            || revision == self.last_revision
        {
            return None;
        }
        // As etcd: from the first attempt on, compactions are `compact_every` apart.
        self.wait = self.compact_every;
        Some(revision)
    }

    pub(super) fn succeeded(&mut self, revision: i64, now: Instant) {
        self.last_revision = revision;
        self.last_success = now;
    }
}

/// Samples and compacts for `member` until the task is dropped.
pub(super) async fn run(member: &impl Compactable, retention: Duration) {
    let mut window = Window::new(retention, Instant::now());
    let period = go_duration(retention);
    loop {
        // Every member samples, so that a new leader knows the revision of a retention ago.
        if let Some(revision) = member.revision() {
            window.record(revision);
        }
        tokio::time::sleep(window.sample_every()).await;
        if !member.is_leader() {
            continue;
        }
        let Some(revision) = window.due(Instant::now()) else {
            continue;
        };
        tracing::info!(revision, "compact-period" = %period, "starting auto periodic compaction");
        let started = Instant::now();
        match member.compact(revision).await {
            Ok(()) => {
                tracing::info!(
                    revision,
                    "compact-period" = %period,
                    took = ?started.elapsed(),
                    "completed auto periodic compaction"
                );
                window.succeeded(revision, Instant::now());
            }
            Err(error) => tracing::warn!(
                revision,
                "compact-period" = %period,
                "retry-interval" = %go_duration(window.sample_every()),
                %error,
                "failed auto periodic compaction"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::super::tests::Fake;
    use super::*;

    /// Runs the schedule on tokio's paused clock for `span`, with the revision growing by
    /// one every `write_every`, half a period off the samples; returns the (time,
    /// revision) of every compaction.
    async fn schedule(
        retention: Duration,
        write_every: Duration,
        span: Duration,
    ) -> Vec<(Duration, i64)> {
        let fake = Fake::new(1);
        let member = fake.clone();
        let compactor = tokio::spawn(async move { run(&*member, retention).await });
        let writer = {
            let fake = fake.clone();
            tokio::spawn(async move {
                tokio::time::sleep(write_every / 2).await;
                loop {
                    fake.revision.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(write_every).await;
                }
            })
        };
        tokio::time::sleep(span).await;
        compactor.abort();
        writer.abort();
        fake.compactions()
    }

    /// The revision `schedule` has at `t`.
    fn revision_at(t: Duration, write_every: Duration) -> i64 {
        let half = write_every / 2;
        if t < half {
            return 1;
        }
        2 + ((t - half).as_nanos() / write_every.as_nanos()) as i64
    }

    #[test]
    fn the_intervals_are_etcds() {
        let now = Instant::now();
        let short = Window::new(Duration::from_secs(2), now);
        assert_eq!(short.sample_every, Duration::from_millis(200));
        assert_eq!(short.compact_every, Duration::from_secs(2));
        assert_eq!(short.capacity, 11);
        let hour = Window::new(HOUR, now);
        assert_eq!(hour.sample_every, Duration::from_secs(360));
        assert_eq!(hour.capacity, 11);
        let day = Window::new(24 * HOUR, now);
        // Sampled every 6 minutes, compacted hourly to the revision of a day ago.
        assert_eq!(day.sample_every, Duration::from_secs(360));
        assert_eq!(day.compact_every, HOUR);
        assert_eq!(day.capacity, 241);
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_retention_compacts_every_retention_to_the_revision_of_a_retention_ago() {
        let second = Duration::from_secs(1);
        let compactions =
            schedule(Duration::from_secs(2), second, Duration::from_millis(8_100)).await;
        let times: Vec<u128> = compactions.iter().map(|(t, _)| t.as_millis()).collect();
        assert_eq!(times, [2_000, 4_000, 6_000, 8_000], "{compactions:?}");
        // The first goes to the first sample; then the oldest of the 11 samples kept,
        // taken 2.2 s before: every revision of the last 2 s stays.
        assert_eq!(compactions[0].1, 1);
        for (at, revision) in &compactions[1..] {
            let sampled = *at - Duration::from_millis(2_200);
            assert_eq!(*revision, revision_at(sampled, second), "at {at:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_retention_compacts_hourly_once_the_retention_has_passed() {
        let minute = Duration::from_secs(60);
        let compactions = schedule(2 * HOUR, minute, 5 * HOUR + Duration::from_secs(1)).await;
        let minutes: Vec<u64> = compactions.iter().map(|(t, _)| t.as_secs() / 60).collect();
        assert_eq!(minutes, [120, 180, 240, 300], "{compactions:?}");
        assert_eq!(compactions[0].1, 1);
        // Then the oldest of 21 samples six minutes apart: 2 h 6 min before.
        for (at, revision) in &compactions[1..] {
            let sampled = *at - 2 * HOUR - 6 * minute;
            assert_eq!(*revision, revision_at(sampled, minute), "at {at:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_new_to_compact_means_no_compaction() {
        // No writes at all: one compaction to revision 1, then none at the same revision.
        let compactions = schedule(
            Duration::from_secs(2),
            Duration::from_secs(3600),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(compactions, [(Duration::from_secs(2), 1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_leader_compacts_and_a_new_leader_knows_the_past() {
        let fake: Arc<Fake> = Fake::new(1);
        fake.follower.store(true, Ordering::SeqCst);
        let member = fake.clone();
        let compactor = tokio::spawn(async move { run(&*member, Duration::from_secs(2)).await });
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            fake.revision.fetch_add(1, Ordering::SeqCst);
        }
        assert!(fake.compactions().is_empty(), "a follower never compacts");
        // Leading from 5 s on: it compacts at once, to what it sampled 2 s before.
        fake.follower.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(250)).await;
        compactor.abort();
        let compactions = fake.compactions();
        assert_eq!(compactions.len(), 1, "{compactions:?}");
        let (at, revision) = compactions[0];
        assert!(at <= Duration::from_millis(5_200), "{at:?}");
        // Sampled about 2 s before then, when the revision was about 31.
        assert!((29..=33).contains(&revision), "{revision}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_compaction_is_tried_again_at_the_next_sample() {
        let fake = Fake::new(7);
        fake.failing.store(true, Ordering::SeqCst);
        let member = fake.clone();
        let compactor = tokio::spawn(async move { run(&*member, Duration::from_secs(2)).await });
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        fake.failing.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(250)).await;
        compactor.abort();
        let compactions = fake.compactions();
        assert_eq!(compactions.len(), 1, "{compactions:?}");
        assert!(compactions[0].0 <= Duration::from_millis(2_700));
        assert_eq!(compactions[0].1, 7);
    }
}
