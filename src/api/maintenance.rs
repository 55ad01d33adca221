//! etcdserverpb.Maintenance: Status, Alarm (QuantyKube raises no alarms), MoveLeader
//! (on the leader; a follower relays it there, where etcd would answer `not leader`),
//! Hash and HashKV of this member's store (`store::hash`), as etcd answers them
//! locally, and Snapshot (`snapshot`). The rest (Defragment, Downgrade) answer
//! Unimplemented.

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use tonic::{Request, Response, Status};

use super::status;
use crate::node::Node;
use crate::proto::etcdserverpb::alarm_request::AlarmAction;
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::maintenance_server::Maintenance;
use crate::proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, HashKvRequest, HashKvResponse, HashRequest, HashResponse,
    MoveLeaderRequest, MoveLeaderResponse, ResponseHeader, SnapshotRequest, StatusRequest,
    StatusResponse,
};

/// How long a leader transfer may take before etcd's timeout error.
const MOVE_LEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

const STATUS_READ_INDEX_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

pub struct MaintenanceService {
    node: Arc<Node>,
}

impl MaintenanceService {
    pub fn new(node: Arc<Node>) -> Self {
        MaintenanceService { node }
    }

    fn header(&self) -> Result<ResponseHeader, Status> {
        super::current_header(&self.node)
    }
}

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn snapshot(
        &self,
        _: Request<SnapshotRequest>,
    ) -> Result<Response<super::snapshot::SnapshotStream>, Status> {
        // A backup is taken to be restored: it must hold every write acknowledged
        // before it was asked for, as a linearizable read would, so a member cut off
        // from the leader refuses rather than hand out its stale store.
        self.node.read_barrier().await?;
        Ok(Response::new(
            super::snapshot::stream(&self.node, self.header()?).await,
        ))
    }

    async fn status(&self, _: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        // Status must answer without a leader too, so the read index is best effort: with
        // one, every member reports the revision of everything committed so far.
        let _ = tokio::time::timeout(STATUS_READ_INDEX_WAIT, self.node.read_barrier()).await;
        let metrics = self.node.raft().metrics().borrow_watched().clone();
        let is_learner = self.node.is_learner();
        let db_size = i64::try_from(self.node.store().approximate_size()).unwrap_or(i64::MAX);
        Ok(Response::new(StatusResponse {
            header: Some(self.header()?),
            version: self.node.etcd_version().to_string(),
            db_size,
            leader: metrics.current_leader.unwrap_or(0),
            raft_index: metrics.last_log_index.unwrap_or(0),
            raft_term: metrics.current_term,
            raft_applied_index: metrics.last_applied.map_or(0, |l| l.index),
            errors: Vec::new(),
            db_size_in_use: db_size,
            is_learner,
            ..Default::default()
        }))
    }

    async fn hash(&self, _: Request<HashRequest>) -> Result<Response<HashResponse>, Status> {
        let (hash, revision) = super::read_store(&self.node, |store| store.hash_all()).await?;
        Ok(Response::new(HashResponse {
            header: Some(self.node.header_at(revision)),
            hash,
        }))
    }

    async fn hash_kv(
        &self,
        request: Request<HashKvRequest>,
    ) -> Result<Response<HashKvResponse>, Status> {
        let revision = request.get_ref().revision;
        let hashed = super::read_store(&self.node, move |store| store.hash_kv(revision)).await?;
        Ok(Response::new(HashKvResponse {
            header: Some(self.node.header_at(hashed.current)),
            hash: hashed.hash,
            compact_revision: hashed.compacted,
            hash_revision: hashed.revision,
        }))
    }

    async fn move_leader(
        &self,
        request: Request<MoveLeaderRequest>,
    ) -> Result<Response<MoveLeaderResponse>, Status> {
        let relayed = super::cluster::relayed(&request);
        let target = request.get_ref().target_id;
        if self.node.is_leader() {
            self.node
                .member_changes()
                .move_leader(&self.node, target, MOVE_LEADER_TIMEOUT)
                .await
                .map_err(status::from_membership)?;
        } else if relayed {
            return Err(status::not_leader());
        } else {
            MaintenanceClient::new(self.node.leader_channel().await?)
                .move_leader(super::cluster::mark(request.into_inner()))
                .await?;
        }
        Ok(Response::new(MoveLeaderResponse {
            header: Some(self.header()?),
        }))
    }

    async fn alarm(
        &self,
        request: Request<AlarmRequest>,
    ) -> Result<Response<AlarmResponse>, Status> {
        match request.get_ref().action() {
            AlarmAction::Get => Ok(Response::new(AlarmResponse {
                header: Some(self.header()?),
                alarms: Vec::new(),
            })),
            action => Err(Status::unimplemented(format!(
                "etcdserverpb.Maintenance/Alarm {} is not implemented by QuantyKube yet",
                action.as_str_name()
            ))),
        }
    }
}
