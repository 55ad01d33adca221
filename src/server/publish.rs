//! A member's part in the cluster's view of it: publishing its name and client URLs once
//! it starts, keeping the peer network's map of members current, and handing
//! leadership over when it stops.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use crate::config::Config;
use crate::node::Node;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::MemberAttributes;
use crate::store;

/// How long a failed publish or catch-up waits before it tries again.
const RETRY: Duration = Duration::from_millis(500);

/// Publishes this member's name, client URLs and versions through the log, as etcd does once a
/// member starts, retrying until it is applied. Either way, once this returns the member
/// has applied everything committed before it started: its store syncs nothing itself
/// and may reopen behind after a power cut, and a member that then answered reads at
/// once could answer below a revision it answered before.
pub(super) async fn publish_attributes(node: &Node, config: &Config) {
    let attributes = MemberAttributes {
        member_id: node.id(),
        name: config.name.clone(),
        client_urls: config
            .advertise_client_urls
            .iter()
            .map(|u| u.to_string())
            .collect(),
        // An upgraded member's versions differ from those it published: it publishes
        // again, and the cluster version follows.
        etcd_version: node.etcd_version().to_owned(),
        server_version: env!("CARGO_PKG_VERSION").to_owned(),
    };
    loop {
        let current = store::read_member_attributes(node.store(), node.id());
        if matches!(current, Ok(Some(ref a)) if *a == attributes) {
            // Published before (a restart): a read barrier does what applying the
            // publish would, without a write.
            if crate::planted_bug!(ServesBeforeCatchingUp) {
                return;
            }
            match node.read_barrier().await {
                Ok(()) => return,
                Err(error) => {
                    tracing::debug!(%error, "catching up before serving; will retry");
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            }
        }
        match node
            .propose(CommandRequest::PublishMember(attributes.clone()))
            .await
        {
            Ok(_) => return,
            Err(error) => {
                tracing::debug!(%error, "publishing member attributes; will retry");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Keeps the peer network's record of where each member listens in step with the
/// newest membership (see `ClusterGuard::set_members`).
pub(super) async fn follow_membership(node: std::sync::Arc<Node>) {
    // The server metrics change only with the vote, the leader or the membership; the
    // full metrics, several times per write.
    let mut metrics = node.raft_server_metrics();
    let mut followed = None;
    loop {
        let membership = metrics.borrow_watched().membership_config.clone();
        // A new vote or leader wakes this too; the membership changes rarely.
        if followed != Some(*membership.log_id()) {
            followed = Some(*membership.log_id());
            let members = membership
                .membership()
                .nodes()
                .map(|(id, member)| (*id, member.clone()));
            node.guard().set_members(members);
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// As etcd's leader on a graceful stop: hands leadership to another voter first, so
/// that a rolling restart costs no election timeout.
pub(super) async fn hand_over_before_stopping(node: &Node) {
    let voters = node
        .raft_snapshot()
        .membership_config
        .membership()
        .voter_ids()
        .count();
    if node.is_leader() && voters > 1 {
        if let Err(error) = crate::membership::change::hand_over(node, "stopping").await {
            tracing::warn!(%error, "stopping without handing leadership over");
        }
    }
}
