//! etcd's data corruption checks (server/etcdserver/corrupt.go, 3.4 to 3.6): the
//! initial check a restarting member runs before it serves clients
//! (`--experimental-initial-corrupt-check`, 3.6's `InitialCorruptCheck` gate), and the
//! leader's periodic check (`--corrupt-check-time`) that raises a CORRUPT alarm, through
//! the log, for a member whose store disagrees with its own; and the compaction-hash
//! check (`compaction_hash`).
//!
//! Both compare `HashKV` (store/hash.rs: a function of the logical history, so members
//! at one revision and one compacted revision agree whatever physical compaction did).
//! etcd asks its peers over the peer port; QuantyKube asks Maintenance.HashKV at each
//! peer's published client URLs, through the member's client dialer (TLS and the
//! simulation's network alike). A peer that has published none, or does not serve yet,
//! is skipped as etcd skips a peer that does not answer.
//!
//! This module owns the checks' decisions and etcd's log lines and error. It never
//! writes the store itself: an alarm goes through the log like any client's, and a
//! failed initial check only returns an error that stops startup.

pub mod compaction_hash;

use std::sync::Arc;
use std::time::Duration;

use quantykube_raft::{Dialer, NodeId};
use thiserror::Error;
use tonic::Status;

use crate::node::{Node, NodeError};
use crate::offload::Offload;
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::{AlarmType, HashKvRequest, HashKvResponse};
use crate::rpctypes::Recognised;
use crate::store::{self, KvHash, RevisionStore, StoreError};

#[derive(Debug, Error)]
pub enum CorruptionError {
    /// etcd's error, which stops the member (`etcdmain` logs it and exits 1).
    #[error("{member_id:x} found data inconsistency with peers")]
    Inconsistent { member_id: NodeId },
    /// etcd: `%s failed to fetch hash (%v)`.
    #[error("{member_id:x} failed to fetch hash ({source})")]
    LocalHash {
        member_id: NodeId,
        source: StoreError,
    },
    #[error("{0}")]
    Offload(#[from] crate::offload::OffloadError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Read(#[from] NodeError),
}

/// etcd's `ReqTimeout()`: 5 s plus twice the election timeout, the bound on one peer's
/// answer.
pub fn request_timeout(election_timeout: Duration) -> Duration {
    Duration::from_secs(5) + 2 * election_timeout
}

/// One peer's answer to HashKV at the revision asked (etcd's `peerHashKVResp`).
#[derive(Debug)]
pub struct PeerHash {
    pub id: NodeId,
    pub endpoints: Vec<String>,
    /// The last endpoint's error when none answered.
    pub answer: Result<HashKvResponse, Status>,
}

/// Asks every member but `own_id` in the applied membership for HashKV at `revision`,
/// each published client URL in turn until one answers (etcd's `getPeerHashKVs`).
pub async fn peer_hashes(
    store: &RevisionStore,
    own_id: NodeId,
    dialer: &Arc<dyn Dialer>,
    timeout: Duration,
    revision: i64,
) -> Result<Vec<PeerHash>, StoreError> {
    let membership = store::read_applied(store)?.membership;
    let mut peers = Vec::new();
    for (&id, _) in membership.membership().nodes() {
        if id == own_id {
            continue;
        }
        let endpoints = store::read_member_attributes(store, id)?
            .map(|attributes| attributes.client_urls)
            .unwrap_or_default();
        peers.push((id, endpoints));
    }
    let mut answers = Vec::with_capacity(peers.len());
    for (id, endpoints) in peers {
        if endpoints.is_empty() {
            // etcd skips a peer with no URLs; here, one that never published any.
            tracing::warn!(
                local_member_id = %format!("{own_id:x}"),
                remote_peer_id = %format!("{id:x}"),
                "skipping hash kv request: the peer has published no client URLs"
            );
            continue;
        }
        let mut answer = Err(Status::unavailable("no endpoint"));
        for endpoint in &endpoints {
            answer = ask(dialer, endpoint, timeout, revision).await;
            match &answer {
                Ok(_) => break,
                Err(error) => tracing::warn!(
                    local_member_id = %format!("{own_id:x}"),
                    requested_revision = revision,
                    remote_peer_endpoint = %endpoint,
                    error = %error.message(),
                    "failed hash kv request"
                ),
            }
        }
        answers.push(PeerHash {
            id,
            endpoints,
            answer,
        });
    }
    Ok(answers)
}

async fn ask(
    dialer: &Arc<dyn Dialer>,
    endpoint: &str,
    timeout: Duration,
    revision: i64,
) -> Result<HashKvResponse, Status> {
    let request = async {
        let endpoint = tonic::transport::Endpoint::from_shared(endpoint.to_string())
            .map_err(|e| Status::invalid_argument(e.to_string()))?
            .connect_timeout(timeout);
        let channel = dialer
            .dial(endpoint)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        MaintenanceClient::new(channel)
            .hash_kv(HashKvRequest { revision })
            .await
            .map(tonic::Response::into_inner)
    };
    tokio::time::timeout(timeout, request)
        .await
        .unwrap_or_else(|_| Err(Status::deadline_exceeded("context deadline exceeded")))
}

/// What the initial check makes of one peer's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitialVerdict {
    Consistent,
    /// Same compacted revision, different hash: the data differ.
    HashMismatch,
    /// Different hash under a different compacted revision: not comparable.
    CompactMismatch,
    /// The peer has not reached the revision yet.
    PeerBehind,
    /// The peer compacted past the revision: this member is behind.
    LocalBehind,
    /// No answer (down, not serving yet, or another error).
    Unanswered,
}

/// etcd's `InitialCheck` judgement of one peer.
pub fn judge_initial(local: &KvHash, answer: &Result<HashKvResponse, Status>) -> InitialVerdict {
    match answer {
        Ok(peer) if peer.hash == local.hash => InitialVerdict::Consistent,
        Ok(peer) if peer.compact_revision == local.compacted => InitialVerdict::HashMismatch,
        Ok(_) => InitialVerdict::CompactMismatch,
        Err(status) => match Recognised::of(status) {
            Some(Recognised::FutureRevision) => InitialVerdict::PeerBehind,
            Some(Recognised::Compacted) => InitialVerdict::LocalBehind,
            _ => InitialVerdict::Unanswered,
        },
    }
}

/// etcd's `InitialCheck`: this member's HashKV at its current revision against every
/// peer's at that revision; any peer with the same compacted revision and another hash
/// stops the member. Run before raft starts, on a member that has data.
pub async fn initial_check(
    store: Arc<RevisionStore>,
    member_id: NodeId,
    dialer: &Arc<dyn Dialer>,
    offload: Offload,
    timeout: Duration,
) -> Result<(), CorruptionError> {
    tracing::info!(
        local_member_id = %format!("{member_id:x}"),
        timeout = ?timeout,
        "starting initial corruption check"
    );
    let hashing = store.clone();
    let local = offload
        .run(move || hashing.hash_kv(0))
        .await?
        .map_err(|source| CorruptionError::LocalHash { member_id, source })?;
    let peers = peer_hashes(&store, member_id, dialer, timeout, local.revision).await?;
    let mut mismatches = 0;
    for peer in &peers {
        let verdict = judge_initial(&local, &peer.answer);
        let (remote_revision, remote_compact_revision, remote_hash) = match &peer.answer {
            Ok(r) => (
                r.header.as_ref().map_or(0, |h| h.revision),
                r.compact_revision,
                r.hash,
            ),
            Err(_) => (0, 0, 0),
        };
        let error = peer.answer.as_ref().err().map(|s| s.message().to_string());
        macro_rules! warn_peer {
            ($message:literal) => {
                tracing::warn!(
                    local_member_id = %format!("{member_id:x}"),
                    local_member_revision = local.revision,
                    local_member_compact_revision = local.compacted,
                    local_member_hash = local.hash,
                    remote_peer_id = %format!("{:x}", peer.id),
                    remote_peer_endpoints = ?peer.endpoints,
                    remote_peer_revision = remote_revision,
                    remote_peer_compact_revision = remote_compact_revision,
                    remote_peer_hash = remote_hash,
                    error = ?error,
                    $message
                )
            };
        }
        match verdict {
            InitialVerdict::Consistent | InitialVerdict::Unanswered => {}
            InitialVerdict::HashMismatch => {
                warn_peer!("found different hash values from remote peer");
                mismatches += 1;
            }
            InitialVerdict::CompactMismatch => {
                warn_peer!("found different compact revision values from remote peer")
            }
            InitialVerdict::PeerBehind => warn_peer!("cannot fetch hash from slow remote peer"),
            InitialVerdict::LocalBehind => {
                warn_peer!("cannot fetch hash from remote peer; local member is behind")
            }
        }
    }
    if mismatches > 0 {
        return Err(CorruptionError::Inconsistent { member_id });
    }
    tracing::info!(
        local_member_id = %format!("{member_id:x}"),
        "initial corruption checking passed; no corruption"
    );
    Ok(())
}

/// One reason the periodic check blames a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// The leader's own hash changed at the same revision and compacted revision.
    LeaderHashChanged,
    FollowerRevisionAhead {
        follower: NodeId,
        revision: i64,
    },
    FollowerCompactAhead {
        follower: NodeId,
        compacted: i64,
    },
    FollowerHashDiffers {
        follower: NodeId,
        hash: u32,
    },
}

impl Finding {
    /// The member the alarm names.
    pub fn member(&self, leader: NodeId) -> NodeId {
        match self {
            Finding::LeaderHashChanged => leader,
            Finding::FollowerRevisionAhead { follower, .. }
            | Finding::FollowerCompactAhead { follower, .. }
            | Finding::FollowerHashDiffers { follower, .. } => *follower,
        }
    }
}

/// etcd's `PeriodicCheck` judgement: `before` is the leader's hash when the peers were
/// asked (at `before.revision`), `after` its hash after a linearizable read; peers
/// that did not answer are left out by the caller.
pub fn judge_periodic(
    before: &KvHash,
    after: &KvHash,
    peers: &[(NodeId, &HashKvResponse)],
) -> Vec<Finding> {
    let mut findings = Vec::new();
    if after.hash != before.hash
        && after.revision == before.revision
        && after.compacted == before.compacted
    {
        findings.push(Finding::LeaderHashChanged);
    }
    for &(follower, answer) in peers {
        let revision = answer.header.as_ref().map_or(0, |h| h.revision);
        // A follower's store is never ahead of what the leader has applied since.
        if revision > after.current {
            findings.push(Finding::FollowerRevisionAhead { follower, revision });
        }
        if answer.compact_revision > after.compacted {
            findings.push(Finding::FollowerCompactAhead {
                follower,
                compacted: answer.compact_revision,
            });
        }
        if answer.compact_revision == before.compacted && answer.hash != before.hash {
            findings.push(Finding::FollowerHashDiffers {
                follower,
                hash: answer.hash,
            });
        }
    }
    findings
}

/// The leader's periodic check every `interval` (0: never, etcd's default), on every
/// member; it acts only while its member leads.
pub async fn run_periodic(node: Arc<Node>, interval: Duration) {
    if interval.is_zero() {
        return;
    }
    tracing::info!(
        local_member_id = %format!("{:x}", node.id()),
        interval = ?interval,
        "enabled corruption checking"
    );
    loop {
        tokio::time::sleep(interval).await;
        if !node.is_leader() {
            continue;
        }
        if let Err(error) = periodic_check(&node).await {
            tracing::warn!(%error, "failed to check hash KV");
        }
    }
}

async fn leader_hash(node: &Node) -> Result<KvHash, CorruptionError> {
    let store = node.store().clone();
    Ok(node.offload().run(move || store.hash_kv(0)).await??)
}

/// One round of etcd's `PeriodicCheck`; raises at most one CORRUPT alarm, as etcd.
async fn periodic_check(node: &Node) -> Result<(), CorruptionError> {
    let timeout = request_timeout(node.election_timeout());
    let before = leader_hash(node).await?;
    let peers = peer_hashes(
        node.store(),
        node.id(),
        node.client_dialer(),
        timeout,
        before.revision,
    )
    .await?;
    tokio::time::timeout(timeout, node.read_barrier())
        .await
        .map_err(|_| CorruptionError::Read(NodeError::Timeout))??;
    let after = leader_hash(node).await?;
    let answered: Vec<(NodeId, &HashKvResponse)> = peers
        .iter()
        .filter_map(|p| p.answer.as_ref().ok().map(|a| (p.id, a)))
        .collect();
    let findings = judge_periodic(&before, &after, &answered);
    for finding in &findings {
        log_finding(finding, &before, &after);
    }
    if let Some(first) = findings.first() {
        node.raise_alarm_for(first.member(node.id()), AlarmType::Corrupt)
            .await;
    }
    tracing::info!(
        number_of_peers_checked = answered.len(),
        "finished peer corruption check"
    );
    Ok(())
}

fn log_finding(finding: &Finding, before: &KvHash, after: &KvHash) {
    match *finding {
        Finding::LeaderHashChanged => tracing::warn!(
            revision_1 = before.revision,
            compact_revision_1 = before.compacted,
            hash_1 = before.hash,
            revision_2 = after.revision,
            compact_revision_2 = after.compacted,
            hash_2 = after.hash,
            "found hash mismatch"
        ),
        Finding::FollowerRevisionAhead { follower, revision } => tracing::warn!(
            leader_revision = after.current,
            follower_revision = revision,
            follower_peer_id = %format!("{follower:x}"),
            "revision from follower must be less than or equal to leader's"
        ),
        Finding::FollowerCompactAhead {
            follower,
            compacted,
        } => tracing::warn!(
            leader_compact_revision = after.compacted,
            follower_compact_revision = compacted,
            follower_peer_id = %format!("{follower:x}"),
            "compact revision from follower must be less than or equal to leader's"
        ),
        Finding::FollowerHashDiffers { follower, hash } => tracing::warn!(
            leader_compact_revision = after.compacted,
            leader_hash = before.hash,
            follower_compact_revision = before.compacted,
            follower_hash = hash,
            follower_peer_id = %format!("{follower:x}"),
            "same compact revision then hashes must match"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::etcdserverpb::ResponseHeader;

    fn local(hash: u32, revision: i64, compacted: i64) -> KvHash {
        KvHash {
            hash,
            revision,
            compacted,
            current: revision,
        }
    }

    fn answer(hash: u32, revision: i64, compacted: i64) -> HashKvResponse {
        HashKvResponse {
            header: Some(ResponseHeader {
                revision,
                ..Default::default()
            }),
            hash,
            compact_revision: compacted,
            hash_revision: revision,
        }
    }

    #[test]
    fn initial_check_blames_only_a_hash_under_the_same_compaction() {
        let me = local(7, 10, 4);
        assert_eq!(
            judge_initial(&me, &Ok(answer(7, 12, 4))),
            InitialVerdict::Consistent
        );
        assert_eq!(
            judge_initial(&me, &Ok(answer(8, 12, 4))),
            InitialVerdict::HashMismatch
        );
        assert_eq!(
            judge_initial(&me, &Ok(answer(8, 12, 6))),
            InitialVerdict::CompactMismatch
        );
        assert_eq!(
            judge_initial(
                &me,
                &Err(Status::out_of_range(crate::rpctypes::FUTURE_REVISION))
            ),
            InitialVerdict::PeerBehind
        );
        assert_eq!(
            judge_initial(&me, &Err(Status::out_of_range(crate::rpctypes::COMPACTED))),
            InitialVerdict::LocalBehind
        );
        assert_eq!(
            judge_initial(&me, &Err(Status::unavailable("connection refused"))),
            InitialVerdict::Unanswered
        );
    }

    #[test]
    fn periodic_check_passes_agreeing_followers() {
        let before = local(7, 10, 4);
        let after = local(9, 12, 4);
        let same = answer(7, 11, 4);
        let differs_under_same_compaction = answer(3, 12, 4);
        assert!(judge_periodic(&before, &after, &[(2, &same)]).is_empty());
        // Compacted later than `before` yet not past `after`: not comparable, no blame.
        let later = answer(3, 12, 6);
        let after_compacted = local(9, 12, 6);
        assert!(judge_periodic(&before, &after_compacted, &[(2, &later)]).is_empty());
        assert_eq!(
            judge_periodic(&before, &after, &[(2, &differs_under_same_compaction)]),
            vec![Finding::FollowerHashDiffers {
                follower: 2,
                hash: 3
            }]
        );
    }

    #[test]
    fn periodic_check_blames_followers_ahead_of_the_leader() {
        let before = local(7, 10, 4);
        let after = local(7, 12, 4);
        assert_eq!(
            judge_periodic(&before, &after, &[(3, &answer(7, 13, 4))]),
            vec![Finding::FollowerRevisionAhead {
                follower: 3,
                revision: 13
            }]
        );
        assert_eq!(
            judge_periodic(&before, &after, &[(3, &answer(1, 12, 5))]),
            vec![Finding::FollowerCompactAhead {
                follower: 3,
                compacted: 5
            }]
        );
    }

    #[test]
    fn periodic_check_blames_the_leader_whose_own_hash_changed() {
        let findings = judge_periodic(&local(7, 10, 4), &local(8, 10, 4), &[]);
        assert_eq!(findings, vec![Finding::LeaderHashChanged]);
        assert_eq!(findings[0].member(1), 1);
    }

    #[test]
    fn the_error_names_the_member_as_etcd_does() {
        let error = CorruptionError::Inconsistent {
            member_id: 0x8e9e05c52164694d,
        };
        assert_eq!(
            error.to_string(),
            "8e9e05c52164694d found data inconsistency with peers"
        );
    }
}
