//! Startup: open the store, decide who this member is (restart, bootstrap or join: see
//! `membership::join`), check it against its peers, start raft and, for a new cluster,
//! bootstrap the membership from `--initial-cluster`, as etcd's static bootstrap does.
//! Then build the node and the services beside it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use quantykube_raft::{
    raft_config, ClusterGuard, DialOptions, LogStore, Member as RaftMember, NodeId, PeerChannels,
    PeerNetworkFactory, Raft, RaftClient, RaftClientOptions,
};

use super::{Environment, ServerError};
use crate::api::Beside;
use crate::config::Config;
use crate::identity;
use crate::membership::join::{self, Start};
use crate::membership::{MemberChanges, MembershipError, Policy};
use crate::node::{Limits, Node, NodeParts};
use crate::state_machine::StateMachine;
use crate::store::{self, RevisionStore};

/// A started member: its node, the services built beside it, and raft's handle for the
/// peer service.
pub(super) struct Member {
    pub(super) node: Arc<Node>,
    pub(super) beside: Beside,
    pub(super) raft: Raft<StateMachine>,
}

pub(super) async fn start_member(
    config: &Config,
    environment: &Environment,
) -> Result<Member, ServerError> {
    // The data dir's own name must survive a power cut: without the sync of its parent
    // a member's first writes could be acknowledged into a directory that a power cut
    // then takes away whole.
    quantykube_raft::durable::create_dir_all(&config.data_dir)?;
    super::from_etcd::convert_if_etcd(config)?;
    let databases = crate::disk::open(&config.data_dir, config.wal_dir.as_deref())?;
    join::migrate_identity(&config.data_dir, crate::format::CURRENT)?;
    let revision_store = Arc::new(RevisionStore::new(databases.store)?);
    revision_store.ensure_latest_index()?;
    let has_data = store::read_applied(&revision_store)?.last_applied.is_some();
    // With --discovery-srv, a member with no data takes its initial cluster from DNS.
    let discovered = crate::membership::discovery::bootstrap_config(config, has_data).await?;
    let config = &*discovered;
    let start = join::decide(config, has_data, environment.dialer.as_ref()).await?;
    let join::Identity {
        member_id: id,
        cluster_id,
    } = start.identity();
    let guard = Arc::new(ClusterGuard::new(id, cluster_id));
    guard.add_removed(store::read_removed_members(&revision_store)?);
    if guard.is_removed(id) {
        return Err(MembershipError::Removed.into());
    }
    // As etcd: only a member with data checks, before its raft starts, so a member
    // that disagrees with its peers never serves nor votes.
    if config.initial_corrupt_check && has_data {
        crate::corruption::initial_check(
            revision_store.clone(),
            id,
            &environment.client_dialer,
            environment.offload,
            crate::corruption::request_timeout(config.election_timeout),
        )
        .await?;
    }
    let token = config.initial_cluster_token.clone();
    let restored = join::read_restored_cluster(&config.data_dir)?;
    let members: BTreeMap<NodeId, RaftMember> = match &restored {
        Some(members) => members.clone(),
        None => config
            .initial_cluster
            .iter()
            .map(|m| {
                let member = RaftMember {
                    name: m.name.clone(),
                    peer_urls: m.peer_urls.iter().map(|u| u.to_string()).collect(),
                    client_urls: Vec::new(),
                };
                (identity::member_id(&member.peer_urls, &token), member)
            })
            .collect(),
    };

    let raft_config = Arc::new(raft_config(
        config.heartbeat_interval,
        config.election_timeout,
        config.snapshot_count,
    )?);
    let snapshot_dir: PathBuf = config.data_dir.join("snapshots");
    let simple_tokens = Arc::new(crate::auth::SimpleTokens::new(config.auth.token_ttl));
    let auth = crate::auth::Auth::new(revision_store.clone(), simple_tokens.clone(), &config.auth)
        .map_err(|error| ServerError::Auth(error.to_string()))?;
    let state_machine = StateMachine::new(
        id,
        revision_store.clone(),
        snapshot_dir.clone(),
        environment.offload,
        guard.clone(),
        simple_tokens,
    );
    let mut log_store = if environment.threaded_log_writes {
        LogStore::new(databases.log)?
    } else {
        LogStore::inline(databases.log)?
    };
    if config.force_new_cluster {
        crate::membership::recovery::force_standalone(
            &mut log_store,
            &revision_store,
            id,
            cluster_id,
        )
        .await?;
    }
    let channels = PeerChannels::with_identity(
        environment.dialer.clone(),
        DialOptions::default(),
        cluster_id,
        id,
    );
    let network = PeerNetworkFactory::new(guard.clone(), channels.clone());
    let snapshot_exports = state_machine.snapshot_exports();
    let raft = Raft::new(id, raft_config.clone(), network, log_store, state_machine)
        .await
        .map_err(|e| ServerError::Raft(e.to_string()))?;
    snapshot_exports.store(true, std::sync::atomic::Ordering::Release);

    let fresh = raft
        .is_initialized()
        .await
        .map(|initialized| !initialized)
        .map_err(|e| ServerError::Raft(e.to_string()))?;
    // A member that joins waits for the leader to replicate to it; only founding members
    // (also one restarted before its first initialize) write the initial membership.
    let founding = matches!(start, Start::Bootstrap(_))
        || restored.is_some()
        || config.initial_cluster_state == crate::config::ClusterState::New;
    if fresh && founding && !matches!(start, Start::Join(_)) {
        // Every founding member writes the same initial membership, as every etcd member
        // of a static bootstrap does; raft then elects one leader.
        if let Err(error) = raft.initialize(members.clone()).await {
            tracing::debug!(%error, "cluster already initialized by another member");
        }
    }

    let client = RaftClient::new(
        raft.clone(),
        channels.clone(),
        RaftClientOptions::for_config(&raft_config),
    );
    let node = Arc::new(Node::new(NodeParts {
        id,
        cluster_id,
        store: revision_store,
        auth,
        raft: raft.clone(),
        client,
        limits: Limits {
            max_request_bytes: config.max_request_bytes,
            max_txn_ops: config.max_txn_ops,
            quota_backend_bytes: config.quota_backend_bytes,
            quota_backend_bytes_flag: config.quota_backend_bytes_flag,
        },
        etcd_version: config.etcd_version.clone(),
        offload: environment.offload,
        watch_progress_interval: config.watch_progress_notify_interval,
        client_dialer: environment.client_dialer.clone(),
        election_timeout: config.election_timeout,
        guard,
        wall_clock: environment.wall_clock,
        admin_snapshot_dir: config.data_dir.join("admin-snapshots"),
    }));
    // Built beside the node, as they call back into it.
    let beside = Beside {
        changes: Arc::new(MemberChanges::new(Policy {
            strict: config.strict_reconfig_check,
            max_learners: config.max_learners,
        })),
        lessor: Arc::default(),
        compaction_hashes: Arc::default(),
    };
    tracing::info!(
        name = %config.name,
        member_id = %format!("{id:x}"),
        cluster_id = %format!("{cluster_id:x}"),
        "member starting"
    );
    Ok(Member { node, beside, raft })
}
