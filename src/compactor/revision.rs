//! Revision mode: keep the newest `retention` revisions, as etcd's `v3compactor.Revision`.
//!
//! Every `interval` (etcd: always 5 minutes; `--auto-compaction-revision-interval` here)
//! the leader compacts at its current revision minus `retention`, unless that is not
//! positive or was the last revision it compacted at; a failure is tried again at the
//! next interval.
//!
//! This module owns that schedule; the proposal is the caller's.

use std::time::Duration;

use tokio::time::Instant;

use super::{go_duration, Compactable};

/// The revision to compact at, if any: `current - retention`, when positive and new.
fn target(current: i64, retention: u64, last: i64) -> Option<i64> {
    let retention = i64::try_from(retention).unwrap_or(i64::MAX);
    let revision = current.saturating_sub(retention);
    (revision > 0 && revision != last).then_some(revision)
}

/// Compacts for `member` until the task is dropped.
pub(super) async fn run(member: &impl Compactable, retention: u64, interval: Duration) {
    let mut last = 0;
    loop {
        tokio::time::sleep(interval).await;
        if !member.is_leader() {
            continue;
        }
        let Some(current) = member.revision() else {
            continue;
        };
        let Some(revision) = target(current, retention, last) else {
            continue;
        };
        tracing::info!(
            revision,
            "revision-compaction-retention" = retention,
            "starting auto revision compaction"
        );
        let started = Instant::now();
        match member.compact(revision).await {
            Ok(()) => {
                last = revision;
                tracing::info!(
                    revision,
                    "revision-compaction-retention" = retention,
                    took = ?started.elapsed(),
                    "completed auto revision compaction"
                );
            }
            Err(error) => tracing::warn!(
                revision,
                "revision-compaction-retention" = retention,
                "retry-interval" = %go_duration(interval),
                %error,
                "failed auto revision compaction"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::super::tests::Fake;
    use super::*;

    #[test]
    fn the_target_keeps_the_newest_revisions() {
        assert_eq!(target(100, 10, 0), Some(90));
        assert_eq!(target(100, 10, 90), None, "compacted there already");
        assert_eq!(target(10, 10, 0), None, "nothing old enough");
        assert_eq!(target(5, 10, 0), None);
        assert_eq!(target(100, u64::MAX, 0), None);
        assert_eq!(target(11, 10, 0), Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_leader_compacts_every_interval_to_the_revision_retention_back() {
        let fake = Fake::new(3);
        let member = fake.clone();
        let every = Duration::from_secs(300);
        let compactor = tokio::spawn(async move { run(&*member, 5, every).await });
        // At 5 min the revision is 3: nothing to compact yet.
        tokio::time::sleep(Duration::from_secs(301)).await;
        assert!(fake.compactions().is_empty());
        fake.revision.store(20, Ordering::SeqCst);
        tokio::time::sleep(every).await;
        // No new revision by the next interval: no second compaction at 15.
        tokio::time::sleep(every).await;
        // A follower does not compact.
        fake.follower.store(true, Ordering::SeqCst);
        fake.revision.store(40, Ordering::SeqCst);
        tokio::time::sleep(every).await;
        fake.follower.store(false, Ordering::SeqCst);
        tokio::time::sleep(every).await;
        compactor.abort();
        assert_eq!(
            fake.compactions(),
            [(2 * every, 15), (5 * every, 35)],
            "at 10 min and at 25 min"
        );
    }
}
