//! etcd 3.5.5+'s compaction-hash check (`--experimental-compact-hash-check-enabled`,
//! 3.6's `CompactHashCheck` gate): every member records the hash of what each
//! compaction left (`RevisionStore::compaction_hash`), keeps the last ten, and answers
//! HashKV at a recorded revision with it (`api::maintenance`); the leader, every
//! `--compact-hash-check-time`, asks the other members for its newest records it has not
//! checked yet and raises CORRUPT, through the log, for the members outside a majority
//! that agrees, or for member 0 (the whole cluster) when no majority agrees, as etcd's
//! `checkPeerHashes` does.
//!
//! etcd hashes as it compacts; a QuantyKube member hashes its store once more after each
//! compaction it applied, off the apply path (a read of the whole key space per
//! compaction). Records live in memory, as etcd's do: a restarted member starts with
//! none. This module never writes the store.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quantykube_raft::NodeId;

use super::{peer_hashes, request_timeout};
use crate::node::Node;
use crate::proto::etcdserverpb::AlarmType;
use crate::store::KvHash;

/// etcd's `hashStorageMaxSize`.
const KEPT: usize = 10;
/// How often a member looks for a compaction it has not hashed yet.
const RECORD_POLL: Duration = Duration::from_millis(500);

/// The hashes this member recorded at its latest compactions, newest last.
#[derive(Debug, Default)]
pub struct CompactionHashes {
    recorded: Mutex<VecDeque<KvHash>>,
    /// The newest compaction revision the leader found the whole cluster agree on.
    checked: AtomicI64,
}

impl CompactionHashes {
    /// The hash recorded at compaction revision `revision`, if any.
    pub fn get(&self, revision: i64) -> Option<KvHash> {
        let recorded = self.recorded.lock().ok()?;
        recorded.iter().find(|h| h.revision == revision).copied()
    }

    fn newest(&self) -> Option<i64> {
        let recorded = self.recorded.lock().ok()?;
        recorded.back().map(|h| h.revision)
    }

    fn record(&self, hash: KvHash) {
        if let Ok(mut recorded) = self.recorded.lock() {
            if recorded.back().is_some_and(|h| h.revision >= hash.revision) {
                return;
            }
            recorded.push_back(hash);
            while recorded.len() > KEPT {
                recorded.pop_front();
            }
        }
    }

    /// The records not yet checked, newest first.
    fn unchecked(&self) -> Vec<KvHash> {
        let checked = self.checked.load(Ordering::Acquire);
        self.recorded.lock().map_or_else(
            |_| Vec::new(),
            |recorded| {
                recorded
                    .iter()
                    .rev()
                    .filter(|h| h.revision > checked)
                    .copied()
                    .collect()
            },
        )
    }
}

/// Records the hash of every compaction this member applies, for as long as it runs.
pub async fn record(node: Arc<Node>, hashes: Arc<CompactionHashes>) {
    loop {
        tokio::time::sleep(RECORD_POLL).await;
        let compacted = match node.store().compacted_revision() {
            Ok(compacted) => compacted,
            Err(error) => {
                tracing::warn!(%error, "cannot read the compacted revision");
                continue;
            }
        };
        if compacted < 1 || hashes.newest().is_some_and(|newest| newest >= compacted) {
            continue;
        }
        let store = node.store().clone();
        match node.offload().run(move || store.compaction_hash()).await {
            // Another compaction may have come first: its hash is the one taken.
            Ok(Ok(Some(hash))) => {
                tracing::info!(
                    compact_revision = hash.revision,
                    hash = hash.hash,
                    "stored hash of compaction"
                );
                hashes.record(hash);
            }
            Ok(Ok(None)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "cannot hash the compaction"),
            Err(error) => tracing::warn!(%error, "cannot hash the compaction"),
        }
    }
}

/// The leader's check, every `period`, for as long as the member runs.
pub async fn run_check(node: Arc<Node>, hashes: Arc<CompactionHashes>, period: Duration) {
    tracing::info!(
        local_member_id = %format!("{:x}", node.id()),
        interval = ?period,
        "enabled compaction hash check"
    );
    loop {
        tokio::time::sleep(period).await;
        if node.is_leader() {
            check(&node, &hashes).await;
        }
    }
}

/// What one record's comparison found.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every other member answered at this compaction, and all agree.
    Consistent { peers_checked: usize },
    /// Those that answered at this compaction agree, but some members did not answer
    /// at it (down, or not yet past the compaction): the record stays unchecked, so a
    /// member that lags is compared at a later round, as etcd's `handleConsistentHash`.
    Incomplete { peers_checked: usize },
    /// Raise CORRUPT for these members (0: the whole cluster, when no majority agrees).
    Corrupt(Vec<NodeId>),
}

/// etcd's `checkPeerHashes`: groups the members by hash (peers whose compact revision
/// differs from the leader's are skipped) and blames those outside a majority.
pub fn judge(
    leader: NodeId,
    hash: &KvHash,
    members: usize,
    answers: &[(NodeId, u32, i64)],
) -> Verdict {
    let mut by_hash: BTreeMap<u32, Vec<NodeId>> = BTreeMap::new();
    by_hash.entry(hash.hash).or_default().push(leader);
    let mut checked = 0;
    for &(id, peer_hash, compacted) in answers {
        if compacted != hash.compacted {
            continue;
        }
        checked += 1;
        by_hash.entry(peer_hash).or_default().push(id);
    }
    if by_hash.len() == 1 {
        return if checked + 1 == members {
            Verdict::Consistent {
                peers_checked: checked,
            }
        } else {
            Verdict::Incomplete {
                peers_checked: checked,
            }
        };
    }
    let quorum = members / 2 + 1;
    let majority = by_hash
        .iter()
        .find(|(_, ids)| ids.len() >= quorum)
        .map(|(h, _)| *h);
    match majority {
        Some(agreed) => Verdict::Corrupt(
            by_hash
                .into_iter()
                .filter(|(h, _)| *h != agreed)
                .flat_map(|(_, ids)| ids)
                .collect(),
        ),
        None => Verdict::Corrupt(vec![0]),
    }
}

/// One round of etcd's `CompactHashCheck`: the newest unchecked record that some peer
/// answered decides the round.
async fn check(node: &Node, hashes: &CompactionHashes) {
    let timeout = request_timeout(node.election_timeout());
    for hash in hashes.unchecked() {
        let peers = match peer_hashes(
            node.store(),
            node.id(),
            node.client_dialer(),
            timeout,
            hash.revision,
        )
        .await
        {
            Ok(peers) => peers,
            Err(error) => {
                tracing::warn!(%error, "failed to check compaction hashes");
                return;
            }
        };
        let members = peers.len() + 1;
        let answers: Vec<(NodeId, u32, i64)> = peers
            .iter()
            .filter_map(|p| {
                let answer = p.answer.as_ref().ok()?;
                (answer.hash_revision == hash.revision).then_some((
                    p.id,
                    answer.hash,
                    answer.compact_revision,
                ))
            })
            .collect();
        match judge(node.id(), &hash, members, &answers) {
            Verdict::Incomplete { peers_checked } => {
                tracing::warn!(
                    number_of_peers_checked = peers_checked,
                    number_of_peers = members - 1,
                    revision = hash.revision,
                    "skipped revision in compaction hash check; was not able to check all peers"
                );
                continue;
            }
            Verdict::Consistent { peers_checked } => {
                hashes.checked.store(hash.revision, Ordering::Release);
                tracing::info!(
                    number_of_peers_checked = peers_checked,
                    compact_revision = hash.revision,
                    hash = hash.hash,
                    "successfully checked hash on whole cluster"
                );
                return;
            }
            Verdict::Corrupt(members) => {
                for member in members {
                    tracing::error!(
                        compact_revision = hash.revision,
                        leader_hash = hash.hash,
                        member_id = %format!("{member:x}"),
                        "Detected compaction hash mismatch"
                    );
                    node.raise_alarm_for(member, AlarmType::Corrupt).await;
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(value: u32) -> KvHash {
        KvHash {
            hash: value,
            revision: 10,
            compacted: 10,
            current: 12,
        }
    }

    #[test]
    fn the_members_outside_an_agreeing_majority_are_blamed() {
        let leader = hash(7);
        assert_eq!(
            judge(1, &leader, 3, &[]),
            Verdict::Incomplete { peers_checked: 0 }
        );
        // One follower agrees, the other has not answered at this compaction yet: the
        // record is not settled (it was, before, and a lagging altered member was
        // never compared).
        assert_eq!(
            judge(1, &leader, 3, &[(2, 7, 10)]),
            Verdict::Incomplete { peers_checked: 1 }
        );
        assert_eq!(
            judge(1, &leader, 3, &[(2, 7, 10), (3, 7, 10)]),
            Verdict::Consistent { peers_checked: 2 }
        );
        assert_eq!(
            judge(1, &leader, 3, &[(2, 7, 10), (3, 8, 10)]),
            Verdict::Corrupt(vec![3])
        );
        // The leader itself may be the odd one out.
        assert_eq!(
            judge(1, &leader, 3, &[(2, 8, 10), (3, 8, 10)]),
            Verdict::Corrupt(vec![1])
        );
        // No majority: the whole cluster.
        assert_eq!(
            judge(1, &leader, 3, &[(2, 8, 10), (3, 9, 10)]),
            Verdict::Corrupt(vec![0])
        );
        // A peer at another compaction is skipped.
        assert_eq!(
            judge(1, &leader, 3, &[(2, 9, 11)]),
            Verdict::Incomplete { peers_checked: 0 }
        );
    }

    #[test]
    fn ten_records_are_kept_newest_last() {
        let hashes = CompactionHashes::default();
        for revision in 1..=12 {
            hashes.record(KvHash {
                revision,
                ..hash(revision as u32)
            });
        }
        assert!(hashes.get(2).is_none());
        assert_eq!(hashes.get(3).map(|h| h.hash), Some(3));
        assert_eq!(hashes.newest(), Some(12));
        hashes.checked.store(10, Ordering::Release);
        let unchecked: Vec<i64> = hashes.unchecked().iter().map(|h| h.revision).collect();
        assert_eq!(unchecked, vec![12, 11]);
    }
}
