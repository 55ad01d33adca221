//! What a member can tell of its own health, in one place: whether it knows a leader
//! that still holds a quorum, whether it can serve a serializable and a linearizable
//! read, whether it is a learner, and its active alarms. gRPC health
//! (`api::health`), `/health`, `/livez` and `/readyz` (`http::health`) all read these.
//!
//! This module owns the checks' meaning and their errors' text (etcd's). It never
//! formats a response: the endpoints do.

use std::collections::BTreeSet;
use std::time::Duration;

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;

use crate::node::Node;
use crate::proto::etcdserverpb::{AlarmMember, AlarmType};

/// The cluster's active alarms (every member's, as etcd's `Alarms()`), in member id
/// then type order.
pub fn alarms(node: &Node) -> Vec<AlarmMember> {
    node.store().alarms()
}

/// etcd's `checkAlarms`: the `/health` reason for the first active alarm whose type
/// `excluded` does not name (as Go prints the type: `NOSPACE`, or its number).
pub fn alarm_failure(node: &Node, excluded: &BTreeSet<String>) -> Option<&'static str> {
    let alarm = alarms(node)
        .into_iter()
        .find(|a| !excluded.contains(&crate::store::alarm_name(a.alarm)))?;
    tracing::warn!(
        alarm = %crate::store::alarm_text(&alarm),
        "serving /health false due to an alarm"
    );
    Some(match AlarmType::try_from(alarm.alarm) {
        Ok(AlarmType::Nospace) => "ALARM NOSPACE",
        Ok(AlarmType::Corrupt) => "ALARM CORRUPT",
        _ => "ALARM UNKNOWN",
    })
}

/// etcd's `ReqTimeout()`: how long a probe's read may take.
pub fn request_timeout(node: &Node) -> Duration {
    Duration::from_secs(5) + 2 * node.election_timeout()
}

/// A read of this member's own store (etcd's serializable `Range` of one key).
pub fn serializable_read(node: &Node) -> Result<(), String> {
    node.store()
        .current_revision()
        .map(|_| ())
        .map_err(|e| format!("etcdserver: {e}"))
}

/// A linearizable read: a read index round through the leader, then the local read.
pub async fn linearizable_read(node: &Node) -> Result<(), String> {
    match tokio::time::timeout(request_timeout(node), node.read_barrier()).await {
        Ok(Ok(())) => serializable_read(node),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("etcdserver: request timed out".into()),
    }
}

/// A read with the consistency asked for.
pub async fn read(node: &Node, serializable: bool) -> Result<(), String> {
    if serializable {
        serializable_read(node)
    } else {
        linearizable_read(node).await
    }
}

/// etcd's `learnerCheck`.
pub fn non_learner(node: &Node) -> Result<(), String> {
    if node.is_learner() {
        Err("not supported for learner".into())
    } else {
        Ok(())
    }
}

/// etcd's `activeAlarmCheck`: fails while any member has raised `alarm`.
pub fn no_alarm(node: &Node, alarm: AlarmType) -> Result<(), String> {
    if node.store().has_alarm(alarm) {
        Err(format!("alarm activated: {}", alarm.as_str_name()))
    } else {
        Ok(())
    }
}

/// The health source: probes every `period` while healthy; while not, ten times as often
/// and at once whenever raft's state moves (a leader found, an entry applied), so that a
/// member that just found its leader reports it promptly. Publishes whether this member
/// can serve a linearizable read (what gRPC health serves) and sets
/// `etcd_server_has_leader`.
///
/// A follower's raft state keeps naming the last leader it heard from, even after that
/// leader died, so the member probes instead: one read index per period, the same check
/// `etcdctl endpoint health` makes with its linearizable read. Alarms do not change it,
/// as they do not change etcd's: a member with NOSPACE still serves reads.
pub async fn track(
    node: Arc<Node>,
    period: Duration,
    serving: tokio::sync::watch::Sender<Option<bool>>,
) {
    let mut raft_state = node.raft_metrics();
    loop {
        let now_serving = matches!(
            tokio::time::timeout(period, linearizable_read(&node)).await,
            Ok(Ok(()))
        );
        crate::metrics::server::set_has_leader(node.has_leader());
        if *serving.borrow() != Some(now_serving) {
            tracing::info!(serving = now_serving, "health changed");
        }
        // Sent every round, as the first one must be: a reader takes the newest.
        serving.send_replace(Some(now_serving));
        if now_serving {
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
