//! What `pod` asks of the other pods, and the membership changes it requests: it finds
//! the cluster (or the founders awaiting one) through the peer port, reads the
//! members through etcd's MemberList, and adds, removes and promotes through etcd's
//! Cluster service like any client. It never changes the membership any other way.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use quantykube_raft::{fetch_peer_state, Dialer, PeerState};
use tonic::transport::Channel;

use super::plan::{Cluster, Listed, View};
use super::spec::PodSpec;
use crate::client::code_name;
use crate::proto::etcdserverpb::cluster_client::ClusterClient;
use crate::proto::etcdserverpb::{
    MemberAddRequest, MemberListRequest, MemberPromoteRequest, MemberRemoveRequest,
};

/// How long one question to one pod may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// The dialers `pod` reaches other pods with (TLS as the member's own flags say).
#[derive(Clone)]
pub struct Reach {
    pub peers: Arc<dyn Dialer>,
    pub clients: Arc<dyn Dialer>,
}

/// Asks every other pod of a set of `replicas` (and any pod below this one's ordinal)
/// what it is, and reads the members from one that serves a cluster.
pub async fn observe(spec: &PodSpec, reach: &Reach, replicas: u32) -> View {
    let others: Vec<u32> = (0..replicas.max(spec.ordinal + 1))
        .filter(|i| *i != spec.ordinal)
        .collect();
    let answers = join_all(others.iter().map(|&i| async move {
        let url = spec.peer_url(i);
        (
            i,
            fetch_peer_state(reach.peers.as_ref(), &url, ASK_TIMEOUT).await,
        )
    }))
    .await;
    let (founding_id, founding_cluster) = spec.founding_identity(replicas);
    let mut view = View::default();
    let mut serving = Vec::new();
    for (ordinal, answer) in answers {
        match answer {
            Ok(PeerState::AwaitingBootstrap { token }) if token == spec.token => {
                view.awaiting.push(ordinal)
            }
            Ok(PeerState::AwaitingBootstrap { token }) => view.foreign.push((ordinal, token)),
            Ok(PeerState::Member(cluster)) => {
                if ordinal < replicas
                    && cluster.cluster_id == founding_cluster
                    && cluster.last_log_index == 0
                    && cluster.members.iter().any(|m| m.id == founding_id)
                {
                    view.founded.push(ordinal);
                }
                serving.push((ordinal, cluster))
            }
            Err(error) => tracing::debug!(ordinal, %error, "no answer from pod"),
        }
    }
    // The first member whose MemberList answers (linearizably, so that a lagging
    // member's view never decides anything) gives the cluster.
    for (ordinal, remote) in serving {
        match list(reach, &spec.client_url(ordinal)).await {
            Ok(members) => {
                view.cluster = Some(Cluster {
                    cluster_id: remote.cluster_id,
                    members,
                    removed_ids: remote.removed_ids,
                });
                break;
            }
            Err(error) => {
                tracing::info!(ordinal, %error, "a member answered but cannot list the cluster yet")
            }
        }
    }
    view
}

async fn connect(reach: &Reach, client_url: &str) -> Result<ClusterClient<Channel>, String> {
    let endpoint = crate::client::endpoint(client_url, ASK_TIMEOUT)
        .map_err(|e| format!("invalid client URL {client_url}: {e}"))?
        .timeout(Duration::from_secs(15));
    let channel = tokio::time::timeout(ASK_TIMEOUT, reach.clients.dial(endpoint))
        .await
        .map_err(|_| format!("{client_url}: no connection within {ASK_TIMEOUT:?}"))?
        .map_err(|e| format!("{client_url}: {e}"))?;
    Ok(ClusterClient::new(channel))
}

fn status_text(status: tonic::Status) -> String {
    format!("{}: {}", code_name(status.code()), status.message())
}

/// The members, as the member at `client_url` lists them after a read barrier.
pub async fn list(reach: &Reach, client_url: &str) -> Result<Vec<Listed>, String> {
    let mut client = connect(reach, client_url).await?;
    // A cluster without a leader yet cannot answer a linearizable list: ask again soon
    // rather than wait for the call's own deadline.
    let response = tokio::time::timeout(
        ASK_TIMEOUT,
        client.member_list(MemberListRequest { linearizable: true }),
    )
    .await
    .map_err(|_| format!("{client_url}: no member list within {ASK_TIMEOUT:?}"))?
    .map_err(status_text)?;
    Ok(response
        .into_inner()
        .members
        .into_iter()
        .map(|m| Listed {
            id: m.id,
            name: m.name,
            peer_urls: m.peer_ur_ls,
            is_learner: m.is_learner,
        })
        .collect())
}

/// MemberAdd of `peer_url` as a learner, through the member at `client_url`.
async fn add_learner(reach: &Reach, client_url: &str, peer_url: &str) -> Result<u64, String> {
    let mut client = connect(reach, client_url).await?;
    let response = client
        .member_add(MemberAddRequest {
            peer_ur_ls: vec![peer_url.to_string()],
            is_learner: true,
        })
        .await
        .map_err(status_text)?;
    Ok(response.into_inner().member.map_or(0, |m| m.id))
}

async fn remove(reach: &Reach, client_url: &str, id: u64) -> Result<(), String> {
    let mut client = connect(reach, client_url).await?;
    client
        .member_remove(MemberRemoveRequest { id })
        .await
        .map(|_| ())
        .map_err(status_text)
}

async fn promote(reach: &Reach, client_url: &str, id: u64) -> Result<(), String> {
    let mut client = connect(reach, client_url).await?;
    client
        .member_promote(MemberPromoteRequest { id })
        .await
        .map(|_| ())
        .map_err(status_text)
}

/// The membership calls, asked of each other pod's member in turn until one answers
/// (a follower relays a change to the leader; a learner, this pod's own member
/// possibly, answers neither).
impl Reach {
    pub async fn list_any(&self, spec: &PodSpec, replicas: u32) -> Result<Vec<Listed>, String> {
        on_any(spec, replicas, |url| async move { list(self, &url).await }).await
    }

    pub async fn add_learner_any(&self, spec: &PodSpec, replicas: u32) -> Result<u64, String> {
        let peer_url = spec.peer_url(spec.ordinal);
        let peer_url = &peer_url;
        on_any(spec, replicas, |url| async move {
            add_learner(self, &url, peer_url).await
        })
        .await
    }

    pub async fn remove_any(&self, spec: &PodSpec, replicas: u32, id: u64) -> Result<(), String> {
        on_any(
            spec,
            replicas,
            |url| async move { remove(self, &url, id).await },
        )
        .await
    }

    pub async fn promote_any(&self, spec: &PodSpec, replicas: u32, id: u64) -> Result<(), String> {
        on_any(spec, replicas, |url| async move {
            promote(self, &url, id).await
        })
        .await
    }
}

/// Runs `op` against each other pod's client URL in turn until one succeeds.
async fn on_any<T, F, Fut>(spec: &PodSpec, replicas: u32, op: F) -> Result<T, String>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let mut errors = Vec::new();
    for ordinal in (0..replicas.max(spec.ordinal + 1)).filter(|i| *i != spec.ordinal) {
        match op(spec.client_url(ordinal)).await {
            Ok(value) => return Ok(value),
            Err(error) => errors.push(error),
        }
    }
    Err(errors.join("; "))
}
