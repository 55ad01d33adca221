//! grpc.health.v1: SERVING while this member knows a leader, NOT_SERVING otherwise.

use openraft::async_runtime::WatchReceiver;
use quantykube_raft::Raft;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::state_machine::StateMachine;

/// Follows raft's view of the leader for as long as raft runs.
pub async fn track_leader(raft: Raft<StateMachine>, reporter: HealthReporter) {
    let mut metrics = raft.metrics();
    loop {
        let has_leader = metrics.borrow_watched().current_leader.is_some();
        let status = if has_leader {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        reporter.set_service_status("", status).await;
        if metrics.changed().await.is_err() {
            reporter
                .set_service_status("", ServingStatus::NotServing)
                .await;
            return;
        }
    }
}
