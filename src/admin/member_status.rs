//! What `MemberStatus` reports: roles and leadership from this member's raft metrics,
//! alarms from the store (the cluster's, applied everywhere), and what only a member
//! knows of itself (term, applied index, db size, version) from its own
//! Maintenance.Status, asked over its client URL with the caller's credentials. A
//! member that does not answer in time is reported unreachable, never waited for.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use crate::auth::Caller;
use crate::node::Node;
use crate::proto::admin_v1::{MemberAlarm, MemberState, MemberStatus};
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::{AlarmType, StatusRequest, StatusResponse};

use super::records::CurrentMember;

/// How long a member's own status may take.
const STATUS_WAIT: Duration = Duration::from_secs(2);

/// The status of each of `members`, asked of them all at once.
pub async fn statuses(
    node: &Node,
    caller: &Caller,
    members: &[CurrentMember],
) -> Vec<MemberStatus> {
    let metrics = node.raft_metrics().borrow_watched().clone();
    let leader = metrics.current_leader;
    let committed = metrics
        .local_committed
        .map_or(0, |l| l.index)
        .max(metrics.last_applied.map_or(0, |l| l.index));
    let alarms = &node.store().alarms();
    let asked = members.iter().map(|member| async move {
        let id = member.described.member_id;
        let own = own_status(node, caller, id).await;
        let mut status = MemberStatus {
            id,
            state: if member.described.learner {
                MemberState::Learner
            } else {
                MemberState::Voter
            }
            .into(),
            started: member.record.started,
            leader: leader == Some(id),
            reachable: own.is_some(),
            alarms: alarms
                .iter()
                .filter(|a| a.member_id == id)
                .filter_map(|a| match AlarmType::try_from(a.alarm) {
                    Ok(AlarmType::Nospace) => Some(MemberAlarm::Nospace.into()),
                    Ok(AlarmType::Corrupt) => Some(MemberAlarm::Corrupt.into()),
                    _ => None,
                })
                .collect(),
            ..Default::default()
        };
        if let Some(own) = own {
            status.raft_term = own.raft_term;
            status.applied_index = own.raft_applied_index;
            status.lag = committed.saturating_sub(own.raft_applied_index);
            status.db_size = own.db_size;
            status.version = own.version;
        }
        status
    });
    futures::future::join_all(asked).await
}

/// `id`'s answer to Maintenance.Status, or None if it gave none in time.
async fn own_status(node: &Node, caller: &Caller, id: u64) -> Option<StatusResponse> {
    let ask = async {
        if id == node.id() {
            return local_status(node);
        }
        let channel = crate::relay::to_member(node, id).await.ok()?;
        let mut client = MaintenanceClient::new(channel);
        client
            .status(crate::relay::request(StatusRequest {}, caller))
            .await
            .ok()
            .map(|r| r.into_inner())
    };
    tokio::time::timeout(STATUS_WAIT, ask).await.ok().flatten()
}

/// This member's own status, read in process.
fn local_status(node: &Node) -> Option<StatusResponse> {
    let metrics = node.raft_metrics().borrow_watched().clone();
    Some(StatusResponse {
        version: node.etcd_version().to_string(),
        db_size: i64::try_from(node.store().approximate_size()).unwrap_or(i64::MAX),
        raft_term: metrics.current_term,
        raft_applied_index: metrics.last_applied.map_or(0, |l| l.index),
        ..Default::default()
    })
}
