//! The joining side of the peer API's `ClusterMembers`: a member started with
//! `--initial-cluster-state existing` and no data asks a peer which cluster it reached
//! and which members (with their ids) that cluster has, as etcd's
//! `GetClusterFromRemotePeers` does. It only asks; choosing this member's id from the
//! answer is the server crate's job.

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
}

/// Asks the member at `peer_url` for its cluster, within `timeout`.
pub async fn fetch_cluster_members(
    dialer: &dyn Dialer,
    peer_url: &str,
    timeout: Duration,
) -> Result<RemoteCluster, String> {
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
    Ok(RemoteCluster {
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
    })
}
