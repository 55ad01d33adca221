//! `quantykube pod stop`: the preStop hook. A pod stops for many reasons (a restart,
//! a node drain, a rolling upgrade) and only one of them, a scale down, means its
//! member must leave; so it leaves only when its ordinal is beyond the desired
//! replicas. Leaving is etcd's MemberRemove, asked until the member is gone: safe to
//! run twice, and refused by the cluster's own strict reconfiguration check whenever
//! it would leave fewer started members than a quorum.

use std::time::Duration;

use super::cluster::Reach;
use super::replicas::DesiredReplicas;
use super::spec::PodSpec;
use super::PodError;

const RETRY: Duration = Duration::from_secs(2);

/// Leaves the cluster if this pod is being scaled away, within `deadline`.
pub async fn run(
    spec: &PodSpec,
    reach: &Reach,
    desired: &DesiredReplicas,
    deadline: Duration,
) -> Result<(), PodError> {
    let replicas = desired.get(spec).await;
    if spec.wanted(replicas) {
        tracing::info!(
            ordinal = spec.ordinal,
            replicas,
            "a stop, not a scale down: the member stays"
        );
        return Ok(());
    }
    let peer_url = spec.peer_url(spec.ordinal);
    let leave = async {
        loop {
            // The pod's own member may be the only one it can reach; a removed member
            // still answers until it applies its removal, and the others after.
            let listed = reach.list_any(spec, replicas).await;
            let last_error = match listed {
                Ok(members) => {
                    let Some(me) = members.iter().find(|m| m.peer_urls.contains(&peer_url)) else {
                        tracing::info!(%peer_url, "this member is not in the cluster (any more)");
                        return;
                    };
                    let id = me.id;
                    let removed = reach.remove_any(spec, replicas, id).await;
                    match removed {
                        Ok(()) => {
                            tracing::info!(member_id = %format!("{id:x}"), "removed this member: scaled down");
                            return;
                        }
                        Err(error) => error,
                    }
                }
                Err(error) => error,
            };
            tracing::warn!(error = %last_error, "cannot leave the cluster yet");
            tokio::time::sleep(RETRY).await;
        }
    };
    tokio::time::timeout(deadline, leave)
        .await
        .map_err(|_| PodError::Timeout(format!("the member did not leave within {deadline:?}")))
}
