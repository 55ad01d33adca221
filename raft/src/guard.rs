//! Who belongs to this cluster: its id, the members it removed, and whether this member
//! learned that it was removed itself.
//!
//! The server crate fills it (from its store at start, and from every applied membership
//! change); the peer server reads it to refuse votes from removed members and to answer
//! a joining member's question "which cluster is this, and who am I in it"; the peer
//! network reads a peer's refusal and records that this member was removed. It never
//! decides membership: raft's applied membership does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use crate::types::{Member, NodeId};

/// What a peer answers to a removed member's request, and what etcd logs when it
/// learns that it was removed.
pub const MEMBER_REMOVED: &str = "the member has been permanently removed from the cluster";

/// How a peer refuses a request from a member of another cluster (etcd's rafthttp
/// answers 412 with the same words).
pub const CLUSTER_ID_MISMATCH: &str = "cluster ID mismatch";

/// How a peer refuses a request meant for another member id: the process at a peer
/// URL is not (or no longer) the member the sender dialled it as.
pub const MEMBER_ID_MISMATCH: &str = "member ID mismatch";

/// How a peer refuses a request in a peer protocol it does not speak (see
/// [`crate::channels::PEER_PROTOCOL`]).
pub const PEER_PROTOCOL_MISMATCH: &str = "peer protocol mismatch";

/// Shared by one member's peer server and peer network. Cheap to read.
#[derive(Debug)]
pub struct ClusterGuard {
    local_id: NodeId,
    cluster_id: AtomicU64,
    removed: RwLock<BTreeSet<NodeId>>,
    removed_self: watch::Sender<bool>,
    /// The newest membership's member records: where each peer listens now.
    members: RwLock<BTreeMap<NodeId, Arc<Member>>>,
    /// When this member last accepted an AppendEntries (a heartbeat at least) from a
    /// leader, as nanoseconds after `created` plus one; 0 for never.
    leader_contact: AtomicU64,
    created: tokio::time::Instant,
}

impl ClusterGuard {
    pub fn new(local_id: NodeId, cluster_id: u64) -> Self {
        ClusterGuard {
            local_id,
            cluster_id: AtomicU64::new(cluster_id),
            removed: RwLock::new(BTreeSet::new()),
            removed_self: watch::Sender::new(false),
            members: RwLock::new(BTreeMap::new()),
            leader_contact: AtomicU64::new(0),
            created: tokio::time::Instant::now(),
        }
    }

    /// Notes that a leader's AppendEntries was just accepted.
    pub fn heard_from_leader(&self) {
        let since = self.created.elapsed().as_nanos();
        let stamp = u64::try_from(since).unwrap_or(u64::MAX - 1) + 1;
        self.leader_contact.store(stamp, Ordering::Relaxed);
    }

    /// How long ago a leader's AppendEntries was last accepted; `None` if never. A
    /// follower's raft state goes on naming a dead leader (pre-vote does not change its
    /// vote), so this is how it tells, as etcd's follower forgets its leader once an
    /// election timeout passes without one.
    pub fn leader_contact_age(&self) -> Option<std::time::Duration> {
        match self.leader_contact.load(Ordering::Relaxed) {
            0 => None,
            stamp => Some(
                self.created
                    .elapsed()
                    .saturating_sub(std::time::Duration::from_nanos(stamp - 1)),
            ),
        }
    }

    pub fn local_id(&self) -> NodeId {
        self.local_id
    }

    pub fn cluster_id(&self) -> u64 {
        self.cluster_id.load(Ordering::Acquire)
    }

    /// Records ids the applied membership removed (at start, from the store; then as
    /// each removal applies). A removed id never comes back.
    pub fn add_removed(&self, ids: impl IntoIterator<Item = NodeId>) {
        let mut removed = self.removed.write().unwrap_or_else(|p| p.into_inner());
        removed.extend(ids);
        if removed.contains(&self.local_id) {
            self.removed_self.send_replace(true);
        }
    }

    pub fn is_removed(&self, id: NodeId) -> bool {
        self.removed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&id)
    }

    pub fn removed_ids(&self) -> Vec<NodeId> {
        self.removed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect()
    }

    /// A peer refused this member because the cluster removed it (this member may never
    /// have applied its own removal: the leader stops replicating to a removed member).
    pub fn note_removed_by_peer(&self) {
        if !self.removed_self.send_replace(true) {
            tracing::warn!(member_id = %format!("{:x}", self.local_id), "{MEMBER_REMOVED}");
        }
    }

    /// Records the newest membership's member records. openraft keeps a replication
    /// stream (and the peer URL it was opened with) across membership changes, so the
    /// network reads a peer's current URL here at every dial: a MemberUpdate takes
    /// effect on the next connection.
    pub fn set_members(&self, members: impl IntoIterator<Item = (NodeId, Member)>) {
        *self.members.write().unwrap_or_else(|p| p.into_inner()) = members
            .into_iter()
            .map(|(id, member)| (id, Arc::new(member)))
            .collect();
    }

    /// The newest record of member `id`, if the membership has it (shared: the peer
    /// network asks on every call).
    pub fn member(&self, id: NodeId) -> Option<Arc<Member>> {
        self.members
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    /// Turns true once this member knows it was removed.
    pub fn removed_self(&self) -> watch::Receiver<bool> {
        self.removed_self.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removing_this_member_raises_the_signal_once() {
        let guard = ClusterGuard::new(7, 1);
        let signal = guard.removed_self();
        guard.add_removed([3]);
        assert!(guard.is_removed(3) && !*signal.borrow());
        guard.add_removed([7]);
        assert!(*signal.borrow());
        assert_eq!(guard.removed_ids(), vec![3, 7]);
    }
}
