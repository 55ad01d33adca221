//! Disaster recovery: `--force-new-cluster` restarts this member from its own data as a
//! one-member cluster, keeping every key, revision, lease and its member and cluster
//! ids, as etcd's recovery guide uses it after a lost quorum. Other members are then
//! added back with MemberAdd and start with empty data dirs.
//!
//! This module runs before raft starts: it hands the state machine's applied state to
//! the raft crate's rewrite of the log (`quantykube_raft::force`) and logs what etcd
//! logs. It never writes the store itself: the new membership reaches the store, and
//! the members it leaves out are recorded as removed, when raft applies it.

use quantykube_raft::{force_new_cluster, LogStore, NodeId};

use super::MembershipError;
use crate::store::{self, RevisionStore};

/// Rewrites `log` so that raft starts as a cluster of member `id` alone.
pub async fn force_standalone(
    log: &mut LogStore,
    store: &RevisionStore,
    id: NodeId,
    cluster_id: u64,
) -> Result<(), MembershipError> {
    let applied = store::read_applied(store).map_err(|e| MembershipError::Store(e.to_string()))?;
    let forced = force_new_cluster(log, id, applied.last_applied, &applied.membership)
        .await
        .map_err(|e| MembershipError::ForceNewCluster(e.to_string()))?;
    let commit_index = forced.appended.map(|l| l.index).or(forced.commit_index);
    if forced.discarded > 0 {
        tracing::info!(
            "entry-index" = forced.commit_index.map_or(0, |c| c + 1),
            "commit-index-from-wal" = forced.stored_commit_index.unwrap_or(0),
            "number-of-discarded-entries" = forced.discarded,
            "discarding uncommitted WAL entries"
        );
    }
    if forced.appended.is_some() {
        let removed: Vec<String> = forced.removed.iter().map(|m| format!("{m:x}")).collect();
        tracing::warn!(
            "local-member-id" = %format!("{id:x}"),
            "removed-member-ids" = ?removed,
            "--force-new-cluster: this member now forms a cluster alone; add the others \
             back with `etcdctl member add` and empty data dirs, and restart it without \
             the flag"
        );
    }
    tracing::info!(
        "cluster-id" = %format!("{cluster_id:x}"),
        "local-member-id" = %format!("{id:x}"),
        "wal-commit-index" = forced.stored_commit_index.unwrap_or(0),
        "commit-index" = commit_index.unwrap_or(0),
        "forcing restart member"
    );
    Ok(())
}
