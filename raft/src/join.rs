//! The joining side of the peer API's `ClusterMembers`: a member started with
//! `--initial-cluster-state existing` and no data asks a peer which cluster it reached
//! and which members (with their ids) that cluster has, as etcd's
//! `GetClusterFromRemotePeers` does. It only asks; choosing this member's id from the
//! answer is the server crate's job.
//!
//! It also owns the other side of a founding handshake: [`AwaitingBootstrap`] answers
//! `ClusterMembers` for a process that has no data and is not a member yet, so that
//! founders can tell "a peer as new as I am" from "a peer that is down" (which may
//! hold data) before any of them bootstraps.

use std::time::Duration;

use tonic::transport::Endpoint;

use crate::channels::MAX_PEER_MESSAGE_BYTES;
use crate::dialer::Dialer;
use crate::pb;
use crate::pb::peer_client::PeerClient;
use crate::types::{Member, NodeId};

/// One member as a peer's applied membership has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteMember {
    pub id: NodeId,
    pub member: Member,
    pub is_learner: bool,
}

/// What a peer answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteCluster {
    pub cluster_id: u64,
    pub members: Vec<RemoteMember>,
    pub removed_ids: Vec<NodeId>,
    /// 0 while the cluster has never had a leader.
    pub last_log_index: u64,
}

/// What answers at a peer URL: a member of a cluster, or a process waiting to found one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerState {
    Member(RemoteCluster),
    /// No data and no cluster yet, founding with this `--initial-cluster-token`.
    AwaitingBootstrap {
        token: String,
    },
}

/// Asks the member at `peer_url` for its cluster, within `timeout`. A process still
/// awaiting its bootstrap is not a member: that is an error here.
pub async fn fetch_cluster_members(
    dialer: &dyn Dialer,
    peer_url: &str,
    timeout: Duration,
) -> Result<RemoteCluster, String> {
    match fetch_peer_state(dialer, peer_url, timeout).await? {
        PeerState::Member(cluster) => Ok(cluster),
        PeerState::AwaitingBootstrap { .. } => {
            Err(format!("{peer_url} has not joined a cluster yet"))
        }
    }
}

/// Asks whatever answers at `peer_url` what it is, within `timeout`.
pub async fn fetch_peer_state(
    dialer: &dyn Dialer,
    peer_url: &str,
    timeout: Duration,
) -> Result<PeerState, String> {
    let endpoint = Endpoint::from_shared(peer_url.to_string())
        .map_err(|e| format!("invalid peer URL {peer_url}: {e}"))?
        .connect_timeout(timeout);
    let ask = async {
        let channel = dialer.dial(endpoint).await.map_err(|e| e.to_string())?;
        let mut client = PeerClient::new(channel).max_decoding_message_size(MAX_PEER_MESSAGE_BYTES);
        client
            .cluster_members(pb::ClusterMembersRequest {})
            .await
            .map(|r| r.into_inner())
            .map_err(|s| format!("{}: {}", s.code(), s.message()))
    };
    let answer = tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| format!("no answer from {peer_url} within {timeout:?}"))??;
    if answer.awaiting_bootstrap {
        return Ok(PeerState::AwaitingBootstrap {
            token: answer.initial_cluster_token,
        });
    }
    Ok(PeerState::Member(RemoteCluster {
        cluster_id: answer.cluster_id,
        members: answer
            .members
            .into_iter()
            .map(|m| RemoteMember {
                id: m.id,
                member: m.member.map(Member::from).unwrap_or_default(),
                is_learner: m.is_learner,
            })
            .collect(),
        removed_ids: answer.removed_ids,
        last_log_index: answer.last_log_index,
    }))
}

/// The peer service of a process that is not a member yet: `ClusterMembers` says it
/// awaits its bootstrap (with its token); every other peer method is Unimplemented.
#[derive(Clone, Debug)]
pub struct AwaitingBootstrap {
    pub token: String,
}

impl AwaitingBootstrap {
    pub fn into_service(self) -> pb::peer_server::PeerServer<AwaitingBootstrap> {
        pb::peer_server::PeerServer::new(self)
    }
}

/// Every raft method: not a member yet, so nothing to answer.
fn not_a_member<T>() -> Result<tonic::Response<T>, tonic::Status> {
    Err(tonic::Status::unimplemented(
        "not a member yet: awaiting a bootstrap",
    ))
}

#[tonic::async_trait]
impl pb::peer_server::Peer for AwaitingBootstrap {
    type ProposeCommandsStream = crate::propose_stream::OutcomeStream;
    type AppendEntriesStreamStream = crate::peer_server::AppendAnswers;

    async fn append_entries(
        &self,
        _: tonic::Request<pb::AppendEntriesRequest>,
    ) -> Result<tonic::Response<pb::AppendEntriesResponse>, tonic::Status> {
        not_a_member()
    }

    async fn append_entries_stream(
        &self,
        _: tonic::Request<tonic::Streaming<pb::AppendEntriesStreamRequest>>,
    ) -> Result<tonic::Response<Self::AppendEntriesStreamStream>, tonic::Status> {
        not_a_member()
    }

    async fn request_vote(
        &self,
        _: tonic::Request<pb::RequestVoteRequest>,
    ) -> Result<tonic::Response<pb::RequestVoteResponse>, tonic::Status> {
        not_a_member()
    }

    async fn request_pre_vote(
        &self,
        _: tonic::Request<pb::RequestPreVoteRequest>,
    ) -> Result<tonic::Response<pb::RequestPreVoteResponse>, tonic::Status> {
        not_a_member()
    }

    async fn install_snapshot(
        &self,
        _: tonic::Request<tonic::Streaming<pb::InstallSnapshotRequest>>,
    ) -> Result<tonic::Response<pb::InstallSnapshotResponse>, tonic::Status> {
        not_a_member()
    }

    async fn transfer_leader(
        &self,
        _: tonic::Request<pb::TransferLeaderRequest>,
    ) -> Result<tonic::Response<pb::TransferLeaderResponse>, tonic::Status> {
        not_a_member()
    }

    async fn propose_commands(
        &self,
        _: tonic::Request<tonic::Streaming<pb::ProposeCommandsRequest>>,
    ) -> Result<tonic::Response<Self::ProposeCommandsStream>, tonic::Status> {
        not_a_member()
    }

    async fn read_index(
        &self,
        _: tonic::Request<pb::ReadIndexRequest>,
    ) -> Result<tonic::Response<pb::ReadIndexResponse>, tonic::Status> {
        not_a_member()
    }

    async fn cluster_members(
        &self,
        _request: tonic::Request<pb::ClusterMembersRequest>,
    ) -> Result<tonic::Response<pb::ClusterMembersResponse>, tonic::Status> {
        Ok(tonic::Response::new(pb::ClusterMembersResponse {
            awaiting_bootstrap: true,
            initial_cluster_token: self.token.clone(),
            ..Default::default()
        }))
    }
}
