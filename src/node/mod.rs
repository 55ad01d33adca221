//! The context every service shares: one member's store, raft, identity and limits.
//!
//! [`Node`] offers the operations services need (propose a write, wait for a read
//! index, read the store off the async workers, fill a response header, reach the
//! leader, watch raft's view of the cluster) and fails with its own [`NodeError`].
//!
//! It must never know gRPC status codes, HTTP, a service or a background task: the edges
//! (`api`, `admin`, `http`) map its errors once, and `server` builds it, the services
//! beside it (membership changes, the lessor, the compaction hashes) and every task.

mod error;
mod leadership;
pub mod metrics;
mod propose;
mod versions;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::type_config::alias::WatchReceiverOf;
use quantykube_raft::{ClusterGuard, Dialer, NodeId, Raft, RaftClient, TypeConfig};

pub use error::NodeError;
pub use versions::major_minor;

use crate::offload::Offload;
use crate::proto::etcdserverpb::ResponseHeader;
use crate::state_machine::StateMachine;
use crate::store::{RevisionStore, StoreError};

/// Raft's view of the cluster: leader, term, membership, replication.
pub type RaftMetrics = openraft::RaftMetrics<TypeConfig>;
/// [`RaftMetrics`] as they change.
pub type RaftMetricsWatch = WatchReceiverOf<TypeConfig, RaftMetrics>;
/// The part of raft's view that changes only with the vote, the leader or the membership.
pub type RaftServerMetricsWatch =
    WatchReceiverOf<TypeConfig, openraft::metrics::RaftServerMetrics<TypeConfig>>;

/// Limits a request is checked against, from etcd's flags.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_request_bytes: usize,
    pub max_txn_ops: usize,
    /// `--quota-backend-bytes`; `None` when the quota is disabled.
    pub quota_backend_bytes: Option<u64>,
    /// `--quota-backend-bytes` as given (0 when unset), for `Status.dbSizeQuota`.
    pub quota_backend_bytes_flag: i64,
}

/// What a [`Node`] is made of; `server` gathers it at startup.
pub struct NodeParts {
    pub id: NodeId,
    pub cluster_id: u64,
    pub store: Arc<RevisionStore>,
    pub auth: crate::auth::Auth,
    pub raft: Raft<StateMachine>,
    pub client: RaftClient<StateMachine>,
    pub limits: Limits,
    pub etcd_version: String,
    pub offload: Offload,
    /// `--watch-progress-notify-interval`.
    pub watch_progress_interval: Duration,
    /// How this member reaches others' client URLs (the leader, for relayed requests).
    pub client_dialer: Arc<dyn Dialer>,
    pub election_timeout: Duration,
    /// The cluster id, the removed ids, and whether this member was removed.
    pub guard: Arc<ClusterGuard>,
    /// Seconds since the Unix epoch, for the ids MemberAdd computes as etcd does.
    pub wall_clock: fn() -> u64,
    /// Where the admin API keeps the snapshot files this member holds.
    pub admin_snapshot_dir: PathBuf,
}

/// What services share: this member's store, raft, identity and limits (its parts, as
/// the server gathered them).
pub struct Node {
    parts: NodeParts,
}

impl Node {
    pub fn new(parts: NodeParts) -> Self {
        Node { parts }
    }

    pub fn id(&self) -> NodeId {
        self.parts.id
    }

    pub fn cluster_id(&self) -> u64 {
        self.parts.cluster_id
    }

    pub fn guard(&self) -> &Arc<ClusterGuard> {
        &self.parts.guard
    }

    pub fn store(&self) -> &Arc<RevisionStore> {
        &self.parts.store
    }

    pub fn auth(&self) -> &crate::auth::Auth {
        &self.parts.auth
    }

    pub fn limits(&self) -> &Limits {
        &self.parts.limits
    }

    /// How this member runs blocking store work.
    pub fn offload(&self) -> Offload {
        self.parts.offload
    }

    /// Where the admin API's snapshot files held by this member live.
    pub fn admin_snapshot_dir(&self) -> &std::path::Path {
        &self.parts.admin_snapshot_dir
    }

    /// Seconds since the Unix epoch (simulated time in the simulation).
    pub fn unix_seconds(&self) -> u64 {
        (self.parts.wall_clock)()
    }

    /// How long a watcher that asked for progress notifications may go without hearing
    /// from its stream.
    pub fn watch_progress_interval(&self) -> Duration {
        self.parts.watch_progress_interval
    }

    /// `--election-timeout`: what etcd's shortest lease TTL derives from.
    pub fn election_timeout(&self) -> Duration {
        self.parts.election_timeout
    }

    pub fn etcd_version(&self) -> &str {
        &self.parts.etcd_version
    }

    /// Raft's view of the cluster, to read now or to wait on (it changes several times
    /// per write).
    pub fn raft_metrics(&self) -> RaftMetricsWatch {
        self.parts.raft.metrics()
    }

    /// Raft's view as it changes with the vote, the leader or the membership only.
    pub fn raft_server_metrics(&self) -> RaftServerMetricsWatch {
        self.parts.raft.server_metrics()
    }

    /// A copy of raft's view now.
    pub fn raft_snapshot(&self) -> RaftMetrics {
        self.parts.raft.metrics().borrow_watched().clone()
    }

    /// True while the newest membership has this member as a learner (a borrow of
    /// raft's metrics: no copy, and never behind them).
    pub fn is_learner(&self) -> bool {
        self.parts
            .raft
            .metrics()
            .borrow_watched()
            .membership_config
            .membership()
            .learner_ids()
            .any(|id| id == self.parts.id)
    }

    /// True while this member is the raft leader.
    pub fn is_leader(&self) -> bool {
        self.leader_term().is_some()
    }

    /// The term this member leads in, if it is the raft leader.
    pub fn leader_term(&self) -> Option<u64> {
        let metrics = self.parts.raft.metrics();
        let metrics = metrics.borrow_watched();
        (metrics.current_leader == Some(self.parts.id) && metrics.state.is_leader())
            .then_some(metrics.current_term)
    }

    /// True if a quorum confirms, after this call began, that this member still leads
    /// (a read index round, answered here and never forwarded).
    pub async fn confirm_leadership(&self) -> bool {
        self.parts
            .raft
            .get_read_linearizer(openraft::ReadPolicy::ReadIndex)
            .await
            .is_ok()
    }

    /// How this member reaches other members' client URLs.
    pub fn client_dialer(&self) -> &Arc<dyn Dialer> {
        &self.parts.client_dialer
    }

    /// A full response header: the store revision the handler got, and this member's
    /// cluster id, member id and raft term.
    pub fn header_from(&self, partial: Option<ResponseHeader>) -> ResponseHeader {
        ResponseHeader {
            cluster_id: self.parts.cluster_id,
            member_id: self.parts.id,
            revision: partial.map_or(0, |h| h.revision),
            raft_term: self.parts.raft.metrics().borrow_watched().current_term,
        }
    }

    /// A full response header at `revision`.
    pub fn header_at(&self, revision: i64) -> ResponseHeader {
        self.header_from(Some(ResponseHeader {
            revision,
            ..Default::default()
        }))
    }

    /// A response header at this member's current revision, for answers that carry no
    /// revision of their own (Cluster, Maintenance).
    pub fn current_header(&self) -> Result<ResponseHeader, NodeError> {
        Ok(self.header_at(self.parts.store.current_revision()?))
    }

    /// Reads this member's store off the async workers (a large range or a hash walks a
    /// lot of it), never while a snapshot install rewrites the store.
    pub async fn read_store<T: Send + 'static>(
        &self,
        read: impl FnOnce(&RevisionStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, NodeError> {
        let store = self.parts.store.clone();
        let _readable = store.readable().await;
        Ok(self
            .parts
            .offload
            .run(move || read(&store))
            .await
            .map_err(|e| NodeError::internal("read", &e))??)
    }

    /// Waits until this member's store reflects every write committed before the call:
    /// the read index of a linearizable read.
    pub async fn read_barrier(&self) -> Result<(), NodeError> {
        #[cfg(feature = "planted-bugs")]
        if crate::planted::is_planted(crate::planted::PlantedBug::LocalLinearizableReads) {
            return Ok(());
        }
        #[cfg(feature = "planted-bugs")]
        if crate::planted::is_planted(crate::planted::PlantedBug::RemovedMemberServes)
            && self.parts.guard.is_removed(self.parts.id)
        {
            return Ok(());
        }
        Ok(self.parts.client.read_barrier().await?)
    }
}
