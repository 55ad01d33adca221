//! Auto-compaction (`--auto-compaction-mode`, `--auto-compaction-retention`): etcd's
//! v3compactor, run by the leader through the log.
//!
//! Every member runs the compactor from its start, as every etcd member does; it
//! samples its own store's revision on each member (so a new leader already knows
//! which revision was current a retention ago), and proposes only while its member
//! leads (etcd's `Pause`/`Resume` on leadership changes). What it decides is an ordinary
//! `Compaction` command in the log, so every member compacts at the same revision, and
//! a compaction that a user's (or an earlier leader's) overtook, `required revision has
//! been compacted`, counts as done, as in etcd. [`periodic`] and [`revision`] hold
//! etcd's two schedules.
//!
//! This module owns when to compact and to which revision. It must never compact the
//! store itself, nor read the wall clock (tokio's clock, which the simulation drives).

mod periodic;
mod revision;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::config::AutoCompaction;
use crate::node::{Node, NodeError};
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_error::Kind;
use crate::proto::etcdserverpb::CompactionRequest;

/// What the compactor needs from its member: a narrow handle, so that the schedules
/// can be tested on tokio's paused clock without a cluster.
pub(crate) trait Compactable: Send + Sync {
    /// The revision of this member's store (etcd's `RevGetter`); `None` if it cannot
    /// be read just now.
    fn revision(&self) -> Option<i64>;
    /// True while this member leads.
    fn is_leader(&self) -> bool;
    /// Compacts the key-value store at `revision` through the log. A revision that was
    /// compacted already is a success.
    fn compact(&self, revision: i64) -> impl Future<Output = Result<(), NodeError>> + Send;
}

impl Compactable for Node {
    fn revision(&self) -> Option<i64> {
        match self.store().current_revision() {
            Ok(revision) => Some(revision),
            Err(error) => {
                tracing::warn!(%error, "auto compaction cannot read the current revision");
                None
            }
        }
    }

    fn is_leader(&self) -> bool {
        Node::is_leader(self)
    }

    async fn compact(&self, revision: i64) -> Result<(), NodeError> {
        let request = CommandRequest::Compaction(CompactionRequest {
            revision,
            physical: false,
        });
        match self.propose(request).await {
            Ok(_) => Ok(()),
            // A user's compaction, or this schedule's under an earlier leader, got there
            // first: etcd counts it as done.
            Err(NodeError::Command(Kind::Compacted)) => Ok(()),
            Err(error) => Err(error),
        }
    }
}

/// Runs `policy` for `node` until the task is dropped.
pub async fn run(node: Arc<Node>, policy: AutoCompaction) {
    match policy {
        AutoCompaction::Periodic { retention } => {
            tracing::info!(
                "auto-compaction-mode" = "periodic",
                "auto-compaction-retention" = %go_duration(retention),
                "auto compaction enabled"
            );
            periodic::run(&*node, retention).await;
        }
        AutoCompaction::Revision {
            retention,
            interval,
        } => {
            tracing::info!(
                "auto-compaction-mode" = "revision",
                "auto-compaction-retention" = retention,
                "auto-compaction-interval" = %go_duration(interval),
                "auto compaction enabled"
            );
            revision::run(&*node, retention, interval).await;
        }
    }
}

/// A duration as Go's `time.Duration.String` prints it (`2s`, `1h0m0s`, `200ms`), as
/// etcd's log fields show it.
pub(crate) fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    let fraction = |value: u128, unit: u128| -> String {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            return whole.to_string();
        }
        let width = unit.ilog10() as usize;
        let digits = format!("{rest:0width$}");
        format!("{whole}.{}", digits.trim_end_matches('0'))
    };
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", fraction(nanos, 1_000_000));
    }
    let secs = nanos / 1_000_000_000;
    let sub = nanos % 1_000_000_000;
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    let seconds = fraction(seconds * 1_000_000_000 + sub, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
    use std::sync::Mutex;

    use super::*;

    /// A member whose revision and leadership a test sets, and which records every
    /// compaction it is asked for, at tokio's (paused) time.
    #[derive(Default)]
    pub(crate) struct Fake {
        pub revision: AtomicI64,
        pub follower: AtomicBool,
        pub failing: AtomicBool,
        pub compacted: Mutex<Vec<(Duration, i64)>>,
        pub start: Mutex<Option<tokio::time::Instant>>,
    }

    impl Fake {
        pub fn new(revision: i64) -> Arc<Self> {
            let fake = Fake::default();
            fake.revision.store(revision, Ordering::SeqCst);
            *fake.start.lock().unwrap() = Some(tokio::time::Instant::now());
            Arc::new(fake)
        }

        pub fn compactions(&self) -> Vec<(Duration, i64)> {
            self.compacted.lock().unwrap().clone()
        }
    }

    impl Compactable for Fake {
        fn revision(&self) -> Option<i64> {
            Some(self.revision.load(Ordering::SeqCst))
        }

        fn is_leader(&self) -> bool {
            !self.follower.load(Ordering::SeqCst)
        }

        async fn compact(&self, revision: i64) -> Result<(), NodeError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(NodeError::NoLeader);
            }
            let start = self.start.lock().unwrap().unwrap();
            self.compacted
                .lock()
                .unwrap()
                .push((start.elapsed(), revision));
            Ok(())
        }
    }

    #[test]
    fn durations_print_as_go_prints_them() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(5), "5ns"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(2_500), "2.5µs"),
            (Duration::from_millis(200), "200ms"),
            (Duration::from_secs(2), "2s"),
            (Duration::from_millis(2500), "2.5s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(5400), "1h30m0s"),
            (Duration::from_secs(72 * 3600), "72h0m0s"),
        ];
        for (d, text) in cases {
            assert_eq!(go_duration(d), text, "{d:?}");
        }
    }
}
