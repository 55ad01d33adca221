//! The leader's side of a membership change: one at a time, checked by etcd's rules
//! against the applied membership, carried out through openraft's joint consensus.
//!
//! Every change holds [`MemberChanges`]'s lock from its check to its commit, and is
//! proposed with openraft's `LastMembershipLogId` precondition, so that a change is
//! always decided on the membership it replaces: two callers on one leader queue, and
//! a change racing one made by a previous leader is re-checked. Each change runs on a
//! task of its own, so that a client that gives up never leaves a joint configuration
//! half done; a joint configuration a crashed leader left behind is finished by the
//! next leader ([`steward`]). Only the leader runs this module; `api::cluster` relays
//! from followers.
//!
//! A voter added to a cluster is answered for as soon as the change is appended, as
//! etcd answers once its conf change is applied: the new voter counts in the quorum
//! from then on, and the joint configuration commits once enough of the new
//! configuration (perhaps the new member itself, when growing from one) runs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::ChangeMembers;
use quantykube_raft::{Member, NodeId, TypeConfig};
use tokio::sync::Mutex;

use super::rules::{self, Change, ClusterView, Policy};
use super::MembershipError;
use crate::node::Node;
use crate::store;

/// etcd counts a voter as connected once its connection has been up for 5 s and
/// until it drops. openraft tells the leader when each voter last acknowledged it, so a
/// voter counts as connected while it acknowledged within one election timeout: a
/// voter that stops answering stops counting well before anyone would elect without it.
/// How often a change refused because another one is in flight is tried again.
const IN_PROGRESS_RETRY: Duration = Duration::from_millis(100);
const IN_PROGRESS_ATTEMPTS: u32 = 50;

/// How long a change waits for the one before it.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// How long an added voter's request waits for the change to be appended.
const APPEND_WAIT: Duration = Duration::from_secs(5);

/// Serializes this member's membership changes and knows etcd's policy flags.
pub struct MemberChanges {
    lock: Arc<Mutex<()>>,
    policy: Policy,
}

/// Whether to go on here or somewhere else.
#[derive(Debug)]
pub enum Outcome {
    /// Done here, with the membership the change committed when it waited for the
    /// commit (raft's metrics may show it a moment later than the commit answers).
    Done(Option<openraft::Membership<NodeId, Member>>),
    /// This member handed leadership over (it is the member being removed): the
    /// request must be sent to the new leader.
    HandedOver,
}

impl MemberChanges {
    pub fn new(policy: Policy) -> Self {
        MemberChanges {
            lock: Arc::default(),
            policy,
        }
    }

    /// Checks `change` against what this member knows, before it is queued here or
    /// relayed to the leader (which checks again, knowing more): every rule on the
    /// leader, only the quorum protections elsewhere ([`rules::check_quorum`]).
    pub fn precheck(&self, node: &Node, change: &Change) -> Result<(), MembershipError> {
        let view = view(node)?;
        match view.leader {
            true => rules::check(&view, change, self.policy),
            false => rules::check_quorum(&view, change, self.policy),
        }
    }

    /// True when `--strict-reconfig-check` guards `change`'s effect on the quorum: a
    /// change the cluster must not take without an active quorum (any addition, a
    /// learner's too: etcd adds nothing while the member asked is cut off from a voter).
    pub fn guards_quorum(&self, node: &Node, change: &Change) -> bool {
        self.policy.strict
            && match change {
                Change::Add { .. } => true,
                Change::Remove { id } => is_voter(node, *id),
                _ => false,
            }
    }

    /// Carries out `change` on this member, which must lead, on a task of its own.
    pub async fn apply(
        &self,
        node: &Arc<Node>,
        change: Change,
    ) -> Result<Outcome, MembershipError> {
        let lock = self.lock.clone();
        let policy = self.policy;
        let task_node = node.clone();
        let task_change = change.clone();
        let mut task = tokio::spawn(async move {
            let Ok(_one_at_a_time) = tokio::time::timeout(LOCK_WAIT, lock.lock_owned()).await
            else {
                return Err(MembershipError::Timeout);
            };
            carry_out(&task_node, task_change, policy).await
        });
        let Change::Add {
            id,
            is_learner: false,
            ..
        } = change
        else {
            return task
                .await
                .map_err(|e| MembershipError::Raft(e.to_string()))?;
        };
        let mut metrics = node.raft_metrics();
        let appended = metrics.wait_until(|m| {
            m.membership_config
                .membership()
                .voter_ids()
                .any(|v| v == id)
        });
        tokio::select! {
            result = &mut task => result.map_err(|e| MembershipError::Raft(e.to_string()))?,
            seen = tokio::time::timeout(APPEND_WAIT, appended) => match seen {
                Ok(Ok(_)) => Ok(Outcome::Done(None)),
                _ => Err(MembershipError::Timeout),
            },
        }
    }

    /// etcd's MoveLeader, on the leader: hands leadership to the voter `target` and
    /// returns once it leads.
    pub async fn move_leader(
        &self,
        node: &Node,
        target: NodeId,
        timeout: Duration,
    ) -> Result<(), MembershipError> {
        if !is_voter(node, target) {
            return Err(MembershipError::BadLeaderTransferee);
        }
        if target == node.id() {
            return Ok(());
        }
        transfer(node, target, timeout).await
    }

    /// Finishes, while this member leads, any joint configuration that a previous
    /// leader left behind (it crashed, or lost leadership, between the two steps).
    pub async fn steward(&self, node: Arc<Node>) {
        let mut metrics = node.raft_metrics();
        loop {
            let joint_on_leader = |m: &openraft::RaftMetrics<TypeConfig>| {
                m.current_leader == Some(m.id)
                    && m.membership_config.membership().get_joint_config().len() > 1
            };
            if metrics.wait_until(joint_on_leader).await.is_err() {
                return;
            }
            if let Ok(_alone) = self.lock.clone().try_lock_owned() {
                if let Err(error) = finish_joint(&node).await {
                    tracing::warn!(%error, "could not finish a joint configuration yet");
                }
            }
            tokio::time::sleep(IN_PROGRESS_RETRY * 5).await;
        }
    }
}

/// One change, under the lock: check, propose, wait for the commit.
async fn carry_out(
    node: &Node,
    change: Change,
    policy: Policy,
) -> Result<Outcome, MembershipError> {
    if !node.is_leader() {
        return Err(MembershipError::LeaderChanged);
    }
    finish_joint(node).await?;
    if let Change::Remove { id } = change {
        if id == node.id() && view(node)?.voters.len() > 1 {
            hand_over(node, "removing this member").await?;
            return Ok(Outcome::HandedOver);
        }
    }
    for _ in 0..IN_PROGRESS_ATTEMPTS {
        let view = view(node)?;
        let promoting = matches!(change, Change::Promote { .. });
        if let Err(refused) = rules::check(&view, &change, policy) {
            if promoting {
                // etcd labels the failure with its error's text.
                crate::metrics::server::learner_promoted(Some(&refused.to_string()));
            }
            return Err(refused);
        }
        let observed = node
            .raft_metrics()
            .borrow_watched()
            .membership_config
            .log_id()
            .to_owned();
        let (changes, retain) = openraft_change(node, &view, &change)?;
        match node.change_membership_if(changes, retain, observed).await {
            Ok(response) => {
                tracing::info!(?change, "applied a configuration change through raft");
                // A joint configuration still lists a removed member: answer with the
                // settled one, as etcd answers with the membership after the change.
                let removed = match change {
                    Change::Remove { id } => Some(id),
                    _ => None,
                };
                let joint = response
                    .membership
                    .as_ref()
                    .is_some_and(|m| m.get_joint_config().len() > 1);
                let committed = if joint || removed.is_some() {
                    settled_membership(node, removed)
                        .await
                        .or(response.membership)
                } else {
                    response.membership
                };
                membership_published(node, &response.log_id).await;
                if promoting {
                    crate::metrics::server::learner_promoted(None);
                }
                return Ok(Outcome::Done(committed));
            }
            Err(error) if retry_later(&error) => {
                tracing::debug!(%error, "membership change must wait");
                tokio::time::sleep(IN_PROGRESS_RETRY).await;
            }
            Err(error) => return Err(from_raft(error)),
        }
    }
    Err(MembershipError::Timeout)
}

/// The membership once it is no longer joint (the change's second step commits right
/// after its first) and no longer has `removed` among its nodes, or None if that takes
/// longer than a few election timeouts.
async fn settled_membership(
    node: &Node,
    removed: Option<NodeId>,
) -> Option<openraft::Membership<NodeId, Member>> {
    let mut metrics = node.raft_metrics();
    let settled = metrics.wait_until(|m| {
        let membership = m.membership_config.membership();
        membership.get_joint_config().len() == 1
            && removed.is_none_or(|id| membership.get_node(&id).is_none())
    });
    match tokio::time::timeout(node.election_timeout() * 5, settled).await {
        Ok(Ok(metrics)) => Some(metrics.membership_config.membership().clone()),
        _ => None,
    }
}

/// Waits (a few election timeouts at most) until raft's metrics, which MemberList and
/// the next change read, show the membership of `log_id` or a later one: the write
/// returns once the entry applies, and the metrics may be published a moment after, so
/// without this a MemberList right after MemberAdd could miss the member just added.
async fn membership_published(node: &Node, log_id: &quantykube_raft::LogId) {
    let mut metrics = node.raft_metrics();
    let published = metrics.wait_until(|m| m.membership_config.log_id().as_ref() >= Some(log_id));
    let _ = tokio::time::timeout(node.election_timeout() * 5, published).await;
}

/// The openraft change that carries out `change`, and its `retain` flag.
fn openraft_change(
    node: &Node,
    view: &ClusterView,
    change: &Change,
) -> Result<(ChangeMembers<NodeId, Member>, bool), MembershipError> {
    let members = current_members(node);
    Ok(match change {
        Change::Add {
            id,
            peer_urls,
            is_learner,
            name,
        } => {
            let member = Member {
                name: name.clone(),
                peer_urls: peer_urls.clone(),
                client_urls: Vec::new(),
            };
            let nodes = BTreeMap::from([(*id, member)]);
            if *is_learner {
                (ChangeMembers::AddNodes(nodes), false)
            } else {
                (ChangeMembers::AddVoters(nodes), false)
            }
        }
        Change::Remove { id } if view.voters.contains(id) => {
            (ChangeMembers::RemoveVoters(BTreeSet::from([*id])), false)
        }
        Change::Remove { id } => (ChangeMembers::RemoveNodes(BTreeSet::from([*id])), false),
        Change::Update { id, peer_urls } => {
            let mut member = members.get(id).cloned().unwrap_or_default();
            member.peer_urls = peer_urls.clone();
            (
                ChangeMembers::SetNodes(BTreeMap::from([(*id, member)])),
                false,
            )
        }
        Change::Promote { id } => (ChangeMembers::AddVoterIds(BTreeSet::from([*id])), false),
    })
}

fn current_members(node: &Node) -> BTreeMap<NodeId, Member> {
    let metrics = node.raft_metrics().borrow_watched().clone();
    metrics
        .membership_config
        .membership()
        .nodes()
        .map(|(id, m)| (*id, m.clone()))
        .collect()
}

/// True while the newest membership has `id` as a voter.
fn is_voter(node: &Node, id: NodeId) -> bool {
    node.raft_metrics()
        .borrow_watched()
        .membership_config
        .membership()
        .voter_ids()
        .any(|voter| voter == id)
}

/// What the leader knows now, as etcd's rules need it.
pub fn view(node: &Node) -> Result<ClusterView, MembershipError> {
    let metrics = node.raft_metrics().borrow_watched().clone();
    let membership = metrics.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let learners: BTreeSet<NodeId> = membership.learner_ids().collect();
    let mut view = ClusterView {
        leader: node.is_leader(),
        peer_urls: membership
            .nodes()
            .map(|(id, m)| (*id, m.peer_urls.clone()))
            .collect(),
        removed: node.guard().removed_ids().into_iter().collect(),
        leader_index: metrics.last_log_index.unwrap_or(0),
        ..Default::default()
    };
    let store_error = |e: store::StoreError| MembershipError::Store(e.to_string());
    for id in voters.iter().chain(&learners) {
        let published = store::read_member_attributes(node.store(), *id).map_err(store_error)?;
        if let Some(published) = published.filter(|a| !a.name.is_empty()) {
            view.started.insert(*id);
            view.names.insert(published.name);
        }
    }
    view.names.extend(
        membership
            .nodes()
            .map(|(_, m)| m.name.clone())
            .filter(|name| !name.is_empty()),
    );
    let records = store::member_records::read_member_records(node.store()).map_err(store_error)?;
    view.names.extend(records.into_values().map(|r| r.name));
    view.connected.extend(node.connected_peers(&metrics));
    view.matched.insert(node.id(), view.leader_index);
    if let Some(replication) = &metrics.replication {
        for (id, matched) in replication {
            view.matched
                .insert(*id, matched.as_ref().map_or(0, |log_id| log_id.index));
        }
    }
    view.voters = voters;
    view.learners = learners;
    Ok(view)
}

/// Finishes a joint configuration a previous leader left behind: the cluster moves to
/// the configuration that change was heading for.
async fn finish_joint(node: &Node) -> Result<(), MembershipError> {
    let metrics = node.raft_metrics().borrow_watched().clone();
    let configs = metrics
        .membership_config
        .membership()
        .get_joint_config()
        .clone();
    if configs.len() < 2 {
        return Ok(());
    }
    let Some(target) = configs.last().cloned() else {
        return Ok(());
    };
    tracing::warn!(
        ?configs,
        "finishing a joint configuration a previous leader left"
    );
    for _ in 0..IN_PROGRESS_ATTEMPTS {
        match node
            .change_membership(ChangeMembers::ReplaceAllVoters(target.clone()))
            .await
        {
            Ok(_) => return Ok(()),
            Err(error) if retry_later(&error) => tokio::time::sleep(IN_PROGRESS_RETRY).await,
            Err(error) => return Err(from_raft(error)),
        }
    }
    Err(MembershipError::Timeout)
}

/// Hands leadership to the most caught-up other voter, before this member is removed
/// or stops (as etcd's leader does on a graceful stop, so that a rolling restart
/// costs no election timeout).
pub async fn hand_over(node: &Node, why: &str) -> Result<(), MembershipError> {
    let view = view(node)?;
    let target = view
        .voters
        .iter()
        .filter(|id| **id != node.id())
        .max_by_key(|id| (view.connected.contains(id), view.matched.get(id).copied()))
        .copied()
        .ok_or(MembershipError::NoLeader)?;
    tracing::info!(
        target = %format!("{target:x}"),
        "handing leadership over before {why}"
    );
    transfer(node, target, node.election_timeout() * 5).await
}

async fn transfer(node: &Node, target: NodeId, timeout: Duration) -> Result<(), MembershipError> {
    node.transfer_leader(target)
        .await
        .map_err(|e| MembershipError::Raft(e.to_string()))?;
    let mut metrics = node.raft_metrics();
    let moved = metrics.wait_until(|m| m.current_leader == Some(target) && m.vote.is_committed());
    tokio::time::timeout(timeout, moved)
        .await
        .map_err(|_| MembershipError::LeaderTransferTimeout)?
        .map_err(|_| MembershipError::LeaderTransferTimeout)?;
    Ok(())
}

fn retry_later(error: &RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> bool {
    use openraft::error::ChangeMembershipError;
    matches!(
        error,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(_)
        )) | RaftError::APIError(ClientWriteError::PreconditionFailed(_))
    )
}

fn from_raft(error: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> MembershipError {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_))
        | RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)) => {
            MembershipError::LeaderChanged
        }
        other => MembershipError::Raft(other.to_string()),
    }
}
