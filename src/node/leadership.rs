//! Raft's view of the cluster as services need it: whether a leader is known (the one
//! source of "has a leader"), reaching the leader's client and peer URLs, membership changes and
//! leadership transfer (for `membership::change` alone), and raft stopping.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{ChangeMembers, Instant};
use quantykube_raft::{LogId, Member, NodeId, StampedChannel, TypeConfig};

use super::{Node, NodeError, RaftMetrics};
use crate::store;

impl Node {
    /// True while this member knows a leader, in etcd's sense: a follower that heard
    /// from its leader within an election timeout, or a leader that heard from a quorum
    /// within one (etcd's check-quorum makes such a leader step down). The one source
    /// of "has a leader": the probes, gRPC health and `etcd_server_has_leader` read it.
    pub fn has_leader(&self) -> bool {
        let metrics = self.parts.raft.metrics();
        let metrics = metrics.borrow_watched();
        let Some(leader) = metrics.current_leader else {
            return false;
        };
        if leader != self.parts.id {
            return self
                .parts
                .guard
                .leader_contact_age()
                .is_some_and(|age| age < self.parts.election_timeout);
        }
        let mut voters = metrics.membership_config.membership().voter_ids();
        if voters.next() == Some(self.parts.id) && voters.next().is_none() {
            // A cluster of one is its own quorum; nothing ever acknowledges it.
            return true;
        }
        self.heard_within_election_timeout(metrics.last_quorum_acked.as_deref())
    }

    /// The peers this member, as leader, heard a heartbeat answer from within an
    /// election timeout (etcd's "active" peers), itself included.
    pub fn connected_peers(&self, metrics: &RaftMetrics) -> Vec<NodeId> {
        let mut connected = vec![self.parts.id];
        if let Some(heartbeats) = &metrics.heartbeat {
            connected.extend(
                heartbeats
                    .iter()
                    .filter(|(_, acked)| self.heard_within_election_timeout(acked.as_deref()))
                    .map(|(id, _)| *id),
            );
        }
        connected
    }

    fn heard_within_election_timeout(&self, heard: Option<&impl Instant>) -> bool {
        heard.is_some_and(|at| Instant::elapsed(at) < self.parts.election_timeout)
    }

    /// Waits up to `within` until some leader is known.
    pub async fn wait_for_leader(&self, within: Duration) {
        let mut metrics = self.parts.raft.metrics();
        let known = metrics.wait_until(|m| m.current_leader.is_some());
        let _ = tokio::time::timeout(within, known).await;
    }

    /// A connection to the leader's peer URL, once a leader with a known address is
    /// (within `within`), for the calls this member relays after authorizing their
    /// caller itself (`relay::to_leader_peer`); `no leader` otherwise, or if this member
    /// leads.
    pub async fn leader_peer_channel(&self, within: Duration) -> Result<StampedChannel, NodeError> {
        self.parts
            .client
            .dial_leader(within)
            .await
            .ok_or(NodeError::NoLeader)
    }

    /// A channel to the current leader's first published TCP client URL (a unix socket
    /// is the leader host's own), if a leader is known and has published one.
    pub async fn leader_channel(&self) -> Result<tonic::transport::Channel, NodeError> {
        let leader = self
            .parts
            .raft
            .metrics()
            .borrow_watched()
            .current_leader
            .ok_or(NodeError::NoLeader)?;
        self.member_channel(leader).await
    }

    /// A channel to `member_id`'s first published TCP client URL, if it published one;
    /// `no leader` otherwise, as the one caller that cannot do without it expects.
    pub async fn member_channel(
        &self,
        member_id: NodeId,
    ) -> Result<tonic::transport::Channel, NodeError> {
        let url = store::read_member_attributes(&self.parts.store, member_id)?
            .and_then(|attributes| {
                attributes
                    .client_urls
                    .into_iter()
                    .find(|u| u.starts_with("http://") || u.starts_with("https://"))
            })
            .ok_or(NodeError::NoLeader)?;
        let endpoint = tonic::transport::Endpoint::from_shared(url)
            .map_err(|e| NodeError::internal("member client url", &e))?
            .connect_timeout(self.parts.election_timeout);
        self.parts
            .client_dialer
            .dial(endpoint)
            .await
            .map_err(|_| NodeError::NoLeader)
    }

    /// Proposes a membership change unless the newest membership moved on from the one
    /// the change was computed against (`membership::change` is the one caller).
    pub async fn change_membership_if(
        &self,
        changes: ChangeMembers<NodeId, Member>,
        retain: bool,
        observed: Option<LogId>,
    ) -> Result<
        openraft::raft::ClientWriteResponse<TypeConfig>,
        RaftError<TypeConfig, ClientWriteError<TypeConfig>>,
    > {
        let precondition = openraft::raft::Precondition::LastMembershipLogId {
            last_membership_log_id: observed,
        };
        self.parts
            .raft
            .change_membership_if(changes, retain, [precondition])
            .await
    }

    /// Proposes a membership change as it is.
    pub async fn change_membership(
        &self,
        changes: ChangeMembers<NodeId, Member>,
    ) -> Result<
        openraft::raft::ClientWriteResponse<TypeConfig>,
        RaftError<TypeConfig, ClientWriteError<TypeConfig>>,
    > {
        self.parts.raft.change_membership(changes, false).await
    }

    /// Asks raft to hand leadership to `target`; whether it moved shows in the metrics.
    pub async fn transfer_leader(&self, target: NodeId) -> Result<(), NodeError> {
        self.parts
            .raft
            .trigger()
            .transfer_leader(target)
            .await
            .map_err(|e| NodeError::internal("transfer leader", &e))
    }

    /// Stops raft (the member is stopping).
    pub async fn shutdown_raft(&self) {
        if let Err(error) = self.parts.raft.shutdown().await {
            tracing::warn!(%error, "raft shutdown");
        }
    }

    /// Resolves with the reason once raft's core stops on its own: a storage error,
    /// from a full or failing disk. The core owns the senders of its metrics: when it
    /// ends they close, after it published why.
    pub async fn raft_stopped(&self) -> String {
        let mut server = self.parts.raft.server_metrics();
        while server.changed().await.is_ok() {}
        match &self.parts.raft.metrics().borrow_watched().running_state {
            Err(fatal) if !matches!(fatal, openraft::error::Fatal::Stopped) => fatal.to_string(),
            // Stopped on purpose (the member is shutting down): nothing to report.
            _ => std::future::pending().await,
        }
    }
}
