//! What a member can tell of its own health, in one place: whether it knows a leader
//! that still holds a quorum, whether it can serve a serializable and a linearizable
//! read, whether it is a learner, and its active alarms. gRPC health
//! (`api::health`), `/health`, `/livez` and `/readyz` (`http::health`) all read these.
//!
//! This module owns the checks' meaning and their errors' text (etcd's). It never
//! formats a response: the endpoints do.

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::Instant;

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

/// True while this member knows a leader, in etcd's sense: a follower that heard from
/// its leader within an election timeout, or a leader that heard from a quorum within
/// one (etcd's check-quorum makes such a leader step down).
pub fn has_leader(node: &Node) -> bool {
    let metrics = node.raft().metrics();
    let metrics = metrics.borrow_watched();
    let Some(leader) = metrics.current_leader else {
        return false;
    };
    if leader != node.id() {
        return node
            .guard()
            .leader_contact_age()
            .is_some_and(|age| age < node.election_timeout());
    }
    let mut voters = metrics.membership_config.membership().voter_ids();
    if voters.next() == Some(node.id()) && voters.next().is_none() {
        // A cluster of one is its own quorum; nothing ever acknowledges it.
        return true;
    }
    metrics
        .last_quorum_acked
        .as_ref()
        .is_some_and(|acked| Instant::elapsed(&**acked) < node.election_timeout())
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
        Ok(Err(status)) => Err(status.message().to_string()),
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
