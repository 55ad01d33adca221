//! grpc.health.v1: SERVING while this member can serve a linearizable read, that is,
//! while it knows a leader that still holds a quorum; NOT_SERVING otherwise. What that
//! means is `probes::track`'s (the health source); this only reports it.

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// Reports each verdict of the health source as gRPC health's overall status (`""`),
/// until the source stops.
pub async fn report(
    mut serving: tokio::sync::watch::Receiver<Option<bool>>,
    reporter: HealthReporter,
) {
    loop {
        let verdict = *serving.borrow_and_update();
        if let Some(serving) = verdict {
            let status = if serving {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            reporter.set_service_status("", status).await;
        }
        if serving.changed().await.is_err() {
            return;
        }
    }
}
