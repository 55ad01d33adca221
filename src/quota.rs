//! `--quota-backend-bytes` after writes are applied (etcd's apply-time
//! `quotaApplierV3`), raising a NOSPACE alarm for this member when the quota is
//! reached. Where a write is proposed (etcd's `v3rpc/quota.go`), the node checks what
//! it would cost (`store::quota_cost`) itself (`Node::propose_command`). What an
//! active alarm refuses is the store's business (`store::alarm`).
//!
//! Both weigh the store's size as sampled at most 100 ms ago
//! (`RevisionStore::recent_size`), as etcd weighs a bbolt file that grows only when its
//! batch commits.
//!
//! This module owns only the decision to raise; it never disarms.

use tokio::sync::broadcast::error::RecvError;

use crate::node::Node;
use crate::proto::etcdserverpb::AlarmType;
use crate::proto::mvccpb::event::EventType;

/// etcd's apply-time check (`quotaApplierV3`): a member whose own store reached the
/// quota through puts it applied (proposed elsewhere, or admitted just below the quota)
/// raises NOSPACE for itself, unless some member's NOSPACE is already active. Only
/// applied puts count, as in etcd: a delete applied while the store is still over the
/// quota (RocksDB frees space later) never re-raises a disarmed alarm.
pub async fn watch(node: std::sync::Arc<Node>) {
    let Some(quota) = node.limits().quota_backend_bytes else {
        return;
    };
    let mut changes = node.store().subscribe();
    loop {
        let grew = match changes.recv().await {
            Ok(batch) => batch
                .events
                .iter()
                .any(|event| event.r#type == EventType::Put as i32),
            // Missed batches may have held puts.
            Err(RecvError::Lagged(_)) => true,
            Err(RecvError::Closed) => return,
        };
        if !grew || node.store().has_alarm(AlarmType::Nospace) {
            continue;
        }
        let size = node.store().recent_size();
        if size >= quota {
            tracing::warn!(
                quota_size_bytes = quota,
                size_bytes = size,
                "applied writes exceeded backend quota; raising alarm"
            );
            node.raise_alarm(AlarmType::Nospace).await;
        }
    }
}
