//! etcdserverpb.Maintenance: Status and Alarm (QuantyKube raises no alarms). The rest
//! (Defragment, Hash, HashKV, Snapshot, MoveLeader, Downgrade) answer Unimplemented.

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use tonic::{Request, Response, Status};

use super::status;
use crate::node::Node;
use crate::proto::etcdserverpb::alarm_request::AlarmAction;
use crate::proto::etcdserverpb::maintenance_server::Maintenance;
use crate::proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, ResponseHeader, StatusRequest, StatusResponse,
};

const STATUS_READ_INDEX_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

pub struct MaintenanceService {
    node: Arc<Node>,
}

impl MaintenanceService {
    pub fn new(node: Arc<Node>) -> Self {
        MaintenanceService { node }
    }

    fn header(&self) -> Result<ResponseHeader, Status> {
        let revision = self
            .node
            .store()
            .current_revision()
            .map_err(status::from_store)?;
        Ok(self.node.header_at(revision))
    }
}

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn status(&self, _: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        // Status must answer without a leader too, so the read index is best effort: with
        // one, every member reports the revision of everything committed so far.
        let _ = tokio::time::timeout(STATUS_READ_INDEX_WAIT, self.node.read_barrier()).await;
        let metrics = self.node.raft().metrics().borrow_watched().clone();
        let is_learner = metrics
            .membership_config
            .membership()
            .learner_ids()
            .any(|id| id == self.node.id());
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
