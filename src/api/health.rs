//! grpc.health.v1: SERVING while this member can serve a linearizable read, that is,
//! while it knows a leader that still holds a quorum; NOT_SERVING otherwise.
//!
//! A follower's raft state keeps naming the last leader it heard from, even after that
//! leader died, so the member probes instead: one read index per period, the same check
//! `etcdctl endpoint health` makes with its linearizable read (`probes`). Alarms do not
//! change it, as they do not change etcd's: a member with NOSPACE still serves reads.

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use std::time::Duration;

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::node::Node;

/// Probes every `period` while healthy; while not, ten times as often and at once
/// whenever raft's state moves (a leader found, an entry applied), so that a member
/// that just found its leader reports it promptly.
pub async fn track(node: Arc<Node>, reporter: HealthReporter, period: Duration) {
    let mut last = None;
    let mut raft_state = node.raft().metrics();
    loop {
        let serving = matches!(
            tokio::time::timeout(period, crate::probes::linearizable_read(&node)).await,
            Ok(Ok(()))
        );
        crate::metrics::server::set_has_leader(crate::probes::has_leader(&node));
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        if last != Some(serving) {
            tracing::info!(serving, "health changed");
            last = Some(serving);
        }
        reporter.set_service_status("", status).await;
        if serving {
            tokio::time::sleep(period).await;
        } else {
            tokio::select! {
                () = tokio::time::sleep(period / 10) => {}
                changed = raft_state.changed() => {
                    if changed.is_err() {
                        // Raft stopped: nothing will change; keep the slow rhythm.
                        tokio::time::sleep(period / 10).await;
                    }
                }
            }
        }
    }
}
