//! Maps etcd's raft knobs onto an openraft [`Config`].
//!
//! This module owns the translation from `--heartbeat-interval`, `--election-timeout`
//! and `--snapshot-count` to openraft's settings, and the few settings etcd has no flag
//! for. It must never read flags or the environment itself: the server passes values in.

use std::time::Duration;

use openraft::{Config, ConfigError, SnapshotPolicy};

/// Entries kept in the log after a snapshot so that a slightly slow follower catches
/// up from the log instead of receiving a whole snapshot (etcd's
/// `SnapshotCatchUpEntries`).
pub const SNAPSHOT_CATCH_UP_ENTRIES: u64 = 5000;

/// Most entries per AppendEntries message. etcd's requests are at most 1.5 MiB by
/// default, so one message stays under 96 MiB, below the peer API's message limit.
pub const MAX_PAYLOAD_ENTRIES: u64 = 64;

/// The knobs could not make a valid openraft configuration.
#[derive(Debug, thiserror::Error)]
pub enum RaftConfigError {
    #[error("heartbeat interval must be at least 1ms")]
    ZeroHeartbeat,
    #[error("snapshot count must be at least 1")]
    ZeroSnapshotCount,
    #[error("{what} of {value:?} does not fit in milliseconds")]
    TooLong { what: &'static str, value: Duration },
    #[error("invalid raft configuration: {0}")]
    Invalid(#[from] ConfigError),
}

/// Builds the openraft configuration from etcd's knobs.
///
/// - `heartbeat` is etcd's `--heartbeat-interval` (default 100 ms).
/// - `election_timeout` is etcd's `--election-timeout` (default 1000 ms). In etcd a
///   member refuses votes while it heard from a leader within one election timeout
///   (check-quorum) and campaigns after a random `[t, 2t)`, so a dead leader is
///   replaced within `[t, 2t)`. openraft's leader lease is its maximum election
///   timeout, so the same window comes from a lease of `t` and timers in `[t/2, t)`:
///   no member votes for a newcomer before `t` of silence, and a new leader follows
///   within about `2t`.
/// - `snapshot_count` is etcd's `--snapshot-count`: a snapshot is taken every that
///   many applied entries, and up to [`SNAPSHOT_CATCH_UP_ENTRIES`] older entries stay in
///   the log for followers that lag a little.
pub fn raft_config(
    heartbeat: Duration,
    election_timeout: Duration,
    snapshot_count: u64,
) -> Result<Config, RaftConfigError> {
    let heartbeat_ms = millis("heartbeat interval", heartbeat)?;
    let election_ms = millis("election timeout", election_timeout)?;
    if heartbeat_ms == 0 {
        return Err(RaftConfigError::ZeroHeartbeat);
    }
    if snapshot_count == 0 {
        return Err(RaftConfigError::ZeroSnapshotCount);
    }
    let election_max_ms = election_ms;
    let election_min_ms = (election_ms / 2).max(heartbeat_ms.saturating_add(1));

    let config = Config {
        cluster_name: "quantykube".to_owned(),
        heartbeat_interval: heartbeat_ms,
        election_timeout_min: election_min_ms,
        election_timeout_max: election_max_ms,
        // A node that cannot win (partitioned, restarted, stale log) must not bump its
        // term and depose a healthy leader when it comes back: etcd's --pre-vote (on by
        // default since 3.5).
        enable_pre_vote: Some(true),
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_count),
        max_in_snapshot_log_to_keep: snapshot_count.min(SNAPSHOT_CATCH_UP_ENTRIES),
        // Purge in batches rather than after every applied entry: one RocksDB range
        // delete per batch.
        purge_batch_size: (snapshot_count / 2).clamp(1, 1024),
        max_payload_entries: MAX_PAYLOAD_ENTRIES,
        // The peer network uses this as the no-progress deadline of one snapshot chunk
        // and of the receiver's install step, not as a bound on the whole transfer, which
        // may be gigabytes. Installing on the receiver can take seconds, so keep it well
        // above an election timeout.
        install_snapshot_timeout: election_ms.saturating_mul(10).max(10_000),
        // After a restart a former leader runs an election like etcd does, rather than
        // resuming leadership from its persisted vote: the committed log id is saved
        // without fsync, so a resumed leader could serve from a state machine that is
        // behind what it had acknowledged.
        enable_leader_restore: Some(false),
        ..Config::default()
    };
    Ok(config.validate()?)
}

fn millis(what: &'static str, value: Duration) -> Result<u64, RaftConfigError> {
    u64::try_from(value.as_millis()).map_err(|_| RaftConfigError::TooLong { what, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_etcd_defaults() {
        let c = raft_config(
            Duration::from_millis(100),
            Duration::from_millis(1000),
            10_000,
        )
        .unwrap();
        assert_eq!(c.heartbeat_interval, 100);
        assert_eq!(c.election_timeout_min, 500);
        assert_eq!(c.election_timeout_max, 1000);
        assert_eq!(c.snapshot_policy, SnapshotPolicy::LogsSinceLast(10_000));
        assert_eq!(c.max_in_snapshot_log_to_keep, SNAPSHOT_CATCH_UP_ENTRIES);
        assert_eq!(c.enable_pre_vote, Some(true));
    }

    #[test]
    fn small_snapshot_count_keeps_few_entries() {
        let c = raft_config(Duration::from_millis(50), Duration::from_millis(300), 10).unwrap();
        assert_eq!(c.max_in_snapshot_log_to_keep, 10);
        assert_eq!(c.purge_batch_size, 5);
    }

    #[test]
    fn rejects_election_not_above_heartbeat() {
        let e =
            raft_config(Duration::from_millis(100), Duration::from_millis(100), 10).unwrap_err();
        assert!(matches!(e, RaftConfigError::Invalid(_)), "{e}");
        let e = raft_config(Duration::ZERO, Duration::from_millis(100), 10).unwrap_err();
        assert!(matches!(e, RaftConfigError::ZeroHeartbeat), "{e}");
    }
}
