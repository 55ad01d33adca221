//! etcdserverpb.Maintenance: Status with every field etcd 3.6 fills, Alarm (through the
//! log, as etcd's; alarms live in `store::alarm`), Defragment of this member's store,
//! Downgrade (`downgrade`), MoveLeader (on the leader; a follower relays it there,
//! where etcd would answer `not leader`), Hash and HashKV of this member's store
//! (`store::hash`), as etcd answers them locally, and Snapshot (`snapshot`).

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use tonic::{Request, Response, Status};

use super::{authorized, status};
use crate::auth::{Action, Caller};
use crate::node::{Node, NodeError};
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_result::Result as Outcome;
use crate::proto::etcdserverpb::alarm_request::AlarmAction;
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::maintenance_server::Maintenance;
use crate::proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, DefragmentRequest, DefragmentResponse, DowngradeInfo,
    DowngradeRequest, DowngradeResponse, HashKvRequest, HashKvResponse, HashRequest, HashResponse,
    MoveLeaderRequest, MoveLeaderResponse, ResponseHeader, SnapshotRequest, StatusRequest,
    StatusResponse,
};
use crate::store::StoreError;

/// How long a leader transfer may take before etcd's timeout error.
const MOVE_LEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

const STATUS_READ_INDEX_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

pub struct MaintenanceService {
    node: Arc<Node>,
    beside: super::Beside,
}

impl MaintenanceService {
    pub fn new(node: Arc<Node>, beside: super::Beside) -> Self {
        MaintenanceService { node, beside }
    }

    fn header(&self) -> Result<ResponseHeader, Status> {
        Ok(self.node.current_header()?)
    }

    /// Root only once auth is on (etcd 3.6's MoveLeader and Downgrade).
    async fn admin<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let caller = Caller::of(request);
        authorized::check(&self.node, &caller, &[Action::Admin]).await?;
        Ok(caller)
    }

    /// etcd's `authMaintenanceServer` (Defragment, Hash, HashKV, Snapshot): root only
    /// once auth is on, refused in the auth package's own words.
    async fn maintainer<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let caller = Caller::of(request);
        authorized::check_unconverted(&self.node, &caller, &[Action::Admin]).await?;
        Ok(())
    }
}

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn snapshot(
        &self,
        request: Request<SnapshotRequest>,
    ) -> Result<Response<super::snapshot::SnapshotStream>, Status> {
        self.maintainer(&request).await?;
        super::snapshot::await_read_index(&self.node).await;
        Ok(Response::new(
            super::snapshot::stream(&self.node, self.header()?).await,
        ))
    }

    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        // etcd 3.7: any user may ask, but with auth on someone must.
        authorized::check(&self.node, &Caller::of(&request), &[Action::LoggedIn]).await?;
        // Status must answer without a leader too, so the read index is best effort: with
        // one, every member reports the revision of everything committed so far.
        let _ = tokio::time::timeout(STATUS_READ_INDEX_WAIT, self.node.read_barrier()).await;
        let metrics = self.node.raft_metrics().borrow_watched().clone();
        let is_learner = self.node.is_learner();
        let store = self.node.store();
        let size = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
        let leader = metrics.current_leader.unwrap_or(0);
        let applied_index = metrics.last_applied.map_or(0, |l| l.index);
        let mut errors = Vec::new();
        if leader == 0 {
            errors.push(NodeError::NoLeader.to_string());
        }
        // etcd lists every member's alarms, each as Go prints an AlarmMember.
        errors.extend(store.alarms().iter().map(crate::store::alarm_text));
        Ok(Response::new(StatusResponse {
            header: Some(self.header()?),
            version: self.node.etcd_version().to_string(),
            db_size: size(store.approximate_size()),
            leader,
            // etcd's CommittedIndex; never below what this member applied (openraft
            // learns its commit index anew after a restart).
            raft_index: metrics
                .local_committed
                .map_or(0, |l| l.index)
                .max(applied_index),
            raft_term: metrics.current_term,
            raft_applied_index: applied_index,
            errors,
            db_size_in_use: size(store.approximate_size_in_use()),
            is_learner,
            storage_version: self.node.storage_version(),
            // etcd 3.7 reports the quota in force: its 2 GiB default when the flag is
            // unset or 0 (3.6 reported the flag as given), a negative flag as given.
            db_size_quota: match self.node.limits().quota_backend_bytes_flag {
                0 => i64::try_from(crate::config::DEFAULT_QUOTA_BACKEND_BYTES).unwrap_or(i64::MAX),
                flag => flag,
            },
            downgrade_info: Some(DowngradeInfo {
                enabled: false,
                target_version: String::new(),
            }),
        }))
    }

    async fn hash(&self, request: Request<HashRequest>) -> Result<Response<HashResponse>, Status> {
        self.maintainer(&request).await?;
        let (hash, revision) = self.node.read_store(|store| store.hash_all()).await?;
        Ok(Response::new(HashResponse {
            header: Some(self.node.header_at(revision)),
            hash,
        }))
    }

    async fn hash_kv(
        &self,
        request: Request<HashKvRequest>,
    ) -> Result<Response<HashKvResponse>, Status> {
        self.maintainer(&request).await?;
        let revision = request.get_ref().revision;
        let hashed = match self
            .node
            .read_store(move |store| store.hash_kv(revision))
            .await
        {
            // etcd 3.6 answers a compacted revision with the hash it recorded at that
            // compaction, when it has one (the compaction-hash check's).
            Err(NodeError::Store(StoreError::Compacted)) => {
                match self.beside.compaction_hashes.get(revision) {
                    Some(recorded) => crate::store::KvHash {
                        current: self
                            .node
                            .store()
                            .current_revision()
                            .map_err(super::status::from_store)?,
                        ..recorded
                    },
                    None => return Err(status::compacted()),
                }
            }
            other => other?,
        };
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
        let caller = self.admin(&request).await?;
        let relayed = crate::relay::is_relayed(&request);
        let target = request.get_ref().target_id;
        if self.node.is_leader() {
            self.beside
                .changes
                .move_leader(&self.node, target, MOVE_LEADER_TIMEOUT)
                .await
                .map_err(status::from_membership)?;
        } else if relayed {
            return Err(status::not_leader());
        } else {
            MaintenanceClient::new(crate::relay::to_leader(&self.node).await?)
                .move_leader(crate::relay::request(request.into_inner(), &caller))
                .await?;
        }
        // etcd answers every MoveLeader, to itself included, with an empty response and
        // no header (v3rpc's maintenanceServer.MoveLeader); clients check for it.
        Ok(Response::new(MoveLeaderResponse { header: None }))
    }

    async fn alarm(
        &self,
        request: Request<AlarmRequest>,
    ) -> Result<Response<AlarmResponse>, Status> {
        let caller = Caller::of(&request);
        let request = request.into_inner();
        tracing::debug!(
            action = request.action,
            member_id = %format!("{:x}", request.member_id),
            alarm = request.alarm,
            "alarm request"
        );
        // etcd 3.7: any user may list alarms; only root may raise or clear one.
        let needs = if request.action == AlarmAction::Get as i32 {
            Action::LoggedIn
        } else {
            Action::Admin
        };
        let alarm = CommandRequest::Alarm(request);
        match authorized::propose(&self.node, &caller, alarm, &[needs]).await? {
            Some(Outcome::Alarm(mut response)) => {
                // Filled once applied, as etcd does, so the revision is current.
                response.header = Some(self.header()?);
                Ok(Response::new(response))
            }
            other => Err(status::internal("alarm", &format!("{other:?}"))),
        }
    }

    async fn defragment(
        &self,
        request: Request<DefragmentRequest>,
    ) -> Result<Response<DefragmentResponse>, Status> {
        self.maintainer(&request).await?;
        tracing::info!("starting defragment");
        // On a blocking thread: reads and writes go on meanwhile. Not behind the
        // snapshot install gate, which would hold raft's apply for the whole run:
        // RocksDB compacts files while an install rewrites them just as well.
        let store = self.node.store().clone();
        self.node
            .offload()
            .run(move || store.defragment())
            .await
            .map_err(|e| status::internal("defragment", &e))?
            .map_err(status::from_store)
            .inspect_err(
                |error| tracing::warn!(error = %error.message(), "failed to defragment"),
            )?;
        tracing::info!("finished defragment");
        Ok(Response::new(DefragmentResponse { header: None }))
    }

    async fn downgrade(
        &self,
        request: Request<DowngradeRequest>,
    ) -> Result<Response<DowngradeResponse>, Status> {
        self.admin(&request).await?;
        let mut response = super::downgrade::downgrade(&self.node, request.get_ref()).await?;
        response.header = Some(self.header()?);
        Ok(Response::new(response))
    }
}
