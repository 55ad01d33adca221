//! `--force-new-cluster`: a member's raft log rewritten, before raft starts, into the log
//! of a one-member cluster made of this member alone, as etcd's
//! `restartAsStandaloneNode` rewrites its WAL after a lost quorum.
//!
//! As etcd: the entries after the commit point (the later of the committed log id and
//! what the state machine applied, etcd's `max(HardState.Commit, consistent_index)`)
//! are discarded, and a membership change that keeps this member alone is appended
//! and committed. Its leader id is one term above any vote this member cast, with a
//! committed vote for it, so the log stays in leader order; openraft applies it as it
//! starts, and a one-voter membership elects this member at once. A member that is
//! alone in its newest membership already is left as it is, so the flag can stay on
//! across restarts (etcd appends nothing then either) until members are added back,
//! when it forces the cluster down to this member again, as etcd does.
//!
//! This module decides the rewrite from what the log store and the state machine hold;
//! the bytes are [`LogStore`]'s. It must never run while raft runs on the same log.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use openraft::entry::RaftEntry;
use openraft::storage::RaftLogStorage;
use openraft::type_config::alias::LeaderIdOf;
use openraft::vote::RaftLeaderId;
use openraft::{LogIdOptionExt, Membership, RaftLogReader};

use crate::log_store::LogStore;
use crate::types::{Entry, LogId, Member, NodeId, StoredMembership, TypeConfig, Vote};

/// Why the log could not be rewritten.
#[derive(Debug, thiserror::Error)]
pub enum ForceNewClusterError {
    #[error("raft log: {0}")]
    Log(#[from] io::Error),
    /// Without its own record (peer URLs) the member cannot form a membership alone.
    #[error("member {0:x} is not in its cluster's membership")]
    NotAMember(NodeId),
    #[error("one-member membership: {0}")]
    Membership(String),
}

/// What the rewrite did, for the log line etcd prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForcedRestart {
    /// The committed index the log store had recorded (etcd's `wal-commit-index`).
    pub stored_commit_index: Option<u64>,
    /// The index the kept log ends at, before the new membership entry.
    pub commit_index: Option<u64>,
    /// Entries after the commit point that were discarded.
    pub discarded: u64,
    /// The members the new membership leaves out.
    pub removed: Vec<NodeId>,
    /// The membership entry appended and committed; `None` when this member was alone
    /// in its membership already.
    pub appended: Option<LogId>,
}

/// Rewrites `log` for member `id` (see the module docs). `applied` and
/// `applied_membership` are the state machine's: its last applied log id and the
/// membership it applied last.
pub async fn force_new_cluster(
    log: &mut LogStore,
    id: NodeId,
    applied: Option<LogId>,
    applied_membership: &StoredMembership,
) -> Result<ForcedRestart, ForceNewClusterError> {
    let state = log.get_log_state().await?;
    let stored_commit = log.read_committed().await?;
    let vote = log.read_vote().await?;
    let commit = stored_commit.max(applied);
    let first_unapplied = applied
        .next_index()
        .max(state.last_purged_log_id.next_index());

    let newest = newest_membership(log, first_unapplied, state.last_log_id.next_index()).await?;
    let newest = newest.as_ref().unwrap_or(applied_membership.membership());
    let mut forced = ForcedRestart {
        stored_commit_index: stored_commit.map(|c| c.index()),
        commit_index: state.last_log_id.map(|l| l.index()),
        discarded: 0,
        removed: Vec::new(),
        appended: None,
    };
    if is_alone(newest, id) {
        return Ok(forced);
    }

    let keep_through = commit.next_index().saturating_sub(1);
    forced.commit_index = commit.map(|c| c.index());
    forced.discarded = state
        .last_log_id
        .next_index()
        .saturating_sub(commit.next_index());
    let committed = newest_membership(log, first_unapplied, commit.next_index()).await?;
    let committed = committed
        .as_ref()
        .unwrap_or(applied_membership.membership());
    if is_alone(committed, id) {
        // Only the uncommitted entries added others: dropping them is enough.
        log.rewrite_before_start(keep_through, None, None, None)?;
        return Ok(forced);
    }
    let own = committed
        .get_node(&id)
        .or_else(|| newest.get_node(&id))
        .cloned()
        .ok_or(ForceNewClusterError::NotAMember(id))?;
    forced.removed = committed
        .nodes()
        .map(|(node, _)| *node)
        .filter(|node| *node != id)
        .collect();
    let alone = Membership::new(
        vec![BTreeSet::from([id])],
        BTreeMap::<NodeId, Member>::from([(id, own)]),
    )
    .map_err(|e| ForceNewClusterError::Membership(e.to_string()))?;
    let term = vote
        .as_ref()
        .map_or(0, |v| v.leader_id().term())
        .max(commit.map_or(0, |c| c.committed_leader_id().term()))
        .saturating_add(1);
    let leader = <LeaderIdOf<TypeConfig> as RaftLeaderId>::new(term, id).to_committed();
    let log_id = LogId::new(leader, commit.next_index());
    let entry = Entry::new_membership(log_id, alone);
    let vote = Vote::new_committed(term, id);
    log.rewrite_before_start(keep_through, Some(&entry), Some(&vote), Some(&log_id))?;
    forced.appended = Some(log_id);
    Ok(forced)
}

/// The newest membership among the entries `[from, to)`, if any has one.
async fn newest_membership(
    log: &mut LogStore,
    from: u64,
    to: u64,
) -> Result<Option<Membership<NodeId, Member>>, io::Error> {
    const STEP: u64 = 256;
    let mut end = to;
    while end > from {
        let start = end.saturating_sub(STEP).max(from);
        let entries = log.try_get_log_entries(start..end).await?;
        if let Some(found) = entries.iter().rev().find_map(|e| e.get_membership()) {
            return Ok(Some(found));
        }
        end = start;
    }
    Ok(None)
}

/// True if `membership` is this member alone, as a voter, in one configuration.
fn is_alone(membership: &Membership<NodeId, Member>, id: NodeId) -> bool {
    membership.get_joint_config().len() == 1
        && membership.voter_ids().eq([id])
        && membership.nodes().map(|(node, _)| *node).eq([id])
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use openraft::storage::IOFlushed;
    use openraft::testing::log_id;
    use openraft::type_config::TypeConfigExt;
    use rocksdb::{Options, DB};
    use std::sync::Arc;

    use super::*;
    use crate::log_store::LOG_COLUMN_FAMILIES;
    use crate::types::Command;

    fn open(dir: &std::path::Path) -> LogStore {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let db = Arc::new(DB::open_cf(&opts, dir, LOG_COLUMN_FAMILIES).unwrap());
        LogStore::new(db).unwrap()
    }

    fn member(name: &str) -> Member {
        Member {
            name: name.into(),
            peer_urls: vec![format!("http://{name}:2380")],
            client_urls: Vec::new(),
        }
    }

    fn three() -> Membership<NodeId, Member> {
        Membership::new(
            vec![BTreeSet::from([1, 2, 3])],
            BTreeMap::from([(1, member("a")), (2, member("b")), (3, member("c"))]),
        )
        .unwrap()
    }

    async fn append(store: &mut LogStore, entries: Vec<Entry>) {
        let (tx, rx) = TypeConfig::oneshot();
        store.append(entries, IOFlushed::signal(tx)).await.unwrap();
        rx.await.unwrap().unwrap();
    }

    fn normal(term: u64, index: u64) -> Entry {
        Entry::new_normal(
            log_id::<TypeConfig>(term, 2, index),
            Command(Bytes::from_static(b"x")),
        )
    }

    /// A log of a three-member cluster led by 2 in term 3: membership at 1, normal
    /// entries 2..=6, committed through 4, member 1 applied through 3.
    async fn three_member_log(store: &mut LogStore) -> (Option<LogId>, StoredMembership) {
        let mut entries = vec![Entry::new_membership(
            log_id::<TypeConfig>(1, 1, 1),
            three(),
        )];
        entries.extend((2..=6).map(|i| normal(3, i)));
        append(store, entries).await;
        store.save_vote(&Vote::new_committed(3, 2)).await.unwrap();
        store
            .save_committed(Some(log_id::<TypeConfig>(3, 2, 4)))
            .await
            .unwrap();
        let applied = Some(log_id::<TypeConfig>(3, 2, 3));
        let membership = StoredMembership::new(Some(log_id::<TypeConfig>(1, 1, 1)), three());
        (applied, membership)
    }

    #[tokio::test]
    async fn a_lost_quorum_becomes_a_committed_membership_of_this_member_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let (applied, membership) = three_member_log(&mut store).await;

        let forced = force_new_cluster(&mut store, 1, applied, &membership)
            .await
            .unwrap();
        let appended = log_id::<TypeConfig>(4, 1, 5);
        assert_eq!(
            forced,
            ForcedRestart {
                stored_commit_index: Some(4),
                commit_index: Some(4),
                discarded: 2,
                removed: vec![2, 3],
                appended: Some(appended),
            }
        );
        let entries = store.try_get_log_entries(..).await.unwrap();
        assert_eq!(entries.len(), 5, "entries 5 and 6 were never committed");
        let alone = entries[4].get_membership().unwrap();
        assert!(is_alone(&alone, 1));
        assert_eq!(alone.get_node(&1), Some(&member("a")));
        assert_eq!(entries[4].log_id(), appended);
        assert_eq!(store.read_committed().await.unwrap(), Some(appended));
        assert_eq!(
            store.read_vote().await.unwrap(),
            Some(Vote::new_committed(4, 1))
        );
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(appended));
    }

    #[tokio::test]
    async fn a_second_forced_restart_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let (applied, membership) = three_member_log(&mut store).await;
        force_new_cluster(&mut store, 1, applied, &membership)
            .await
            .unwrap();
        // Raft applied the new membership and appended more as the only voter.
        append(
            &mut store,
            vec![Entry::new_blank(log_id::<TypeConfig>(5, 1, 6))],
        )
        .await;
        let before = store.try_get_log_entries(..).await.unwrap();
        let again = force_new_cluster(&mut store, 1, applied, &membership)
            .await
            .unwrap();
        assert_eq!(again.appended, None);
        assert_eq!(again.discarded, 0);
        assert_eq!(store.try_get_log_entries(..).await.unwrap(), before);
    }

    #[tokio::test]
    async fn what_the_state_machine_applied_counts_as_committed() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let (_, membership) = three_member_log(&mut store).await;
        // The committed id is written unsynced and may lag what was applied.
        let applied = Some(log_id::<TypeConfig>(3, 2, 6));
        let forced = force_new_cluster(&mut store, 3, applied, &membership)
            .await
            .unwrap();
        assert_eq!(forced.discarded, 0);
        assert_eq!(forced.appended, Some(log_id::<TypeConfig>(4, 3, 7)));
        assert_eq!(forced.removed, vec![1, 2]);
    }

    #[tokio::test]
    async fn a_member_missing_from_the_membership_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let (applied, membership) = three_member_log(&mut store).await;
        let error = force_new_cluster(&mut store, 9, applied, &membership)
            .await
            .unwrap_err();
        assert!(
            matches!(error, ForceNewClusterError::NotAMember(9)),
            "{error}"
        );
    }
}
