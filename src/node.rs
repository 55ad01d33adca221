//! One QuantyKube member: its database, raft, peer server and client server, wired.
//!
//! This module owns startup (open the store, start raft, bootstrap a new cluster from
//! etcd's `--initial-cluster` flags, publish this member's attributes), the listeners,
//! and the [`Node`] handle that API handlers share: propose a write, wait for a read
//! index, fill a response header. It holds no request semantics (those are in `api`
//! and `store`).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use openraft::async_runtime::WatchReceiver;
use prost::Message;
use quantykube_raft::{
    raft_config, ClusterGuard, Command as RaftCommand, DialOptions, Dialer, LogStore, Member,
    NodeId, PeerChannels, PeerNetworkFactory, PeerService, Raft, RaftClient, RaftClientOptions,
    TcpDialer, MEMBER_REMOVED,
};
use std::pin::Pin;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::service::Routes;
use tonic::transport::server::Connected;
use tonic::Status;
use url::Url;

use crate::api;
use crate::api::status;
use crate::config::Config;
use crate::http::{self, Surface};
use crate::identity;
use crate::lessor::Lessor;
use crate::membership::join::{self, Start};
use crate::membership::{MemberChanges, MembershipError, Policy};
use crate::offload::Offload;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_result::Result as Outcome;
use crate::proto::command::{Command, CommandResult, MemberAttributes};
use crate::proto::etcdserverpb::alarm_request::AlarmAction;
use crate::proto::etcdserverpb::{AlarmMember, AlarmRequest, AlarmType, ResponseHeader};
use crate::state_machine::StateMachine;
use crate::store::{self, RevisionStore};
use crate::transport::{Connection, Listeners, ServerTls, Transport, TransportError};

#[derive(Debug, Error)]
pub enum NodeError {
    #[error("store: {0}")]
    Store(#[from] store::StoreError),
    #[error("raft configuration: {0}")]
    RaftConfig(#[from] quantykube_raft::RaftConfigError),
    #[error("raft: {0}")]
    Raft(String),
    #[error("{0}")]
    Transport(#[from] TransportError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Membership(#[from] MembershipError),
    #[error("{0}")]
    Corruption(#[from] crate::corruption::CorruptionError),
    /// `--auth-token`'s keys cannot be used.
    #[error("auth: {0}")]
    Auth(String),
}

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

/// What API handlers share: this member's store, raft, identity and limits.
pub struct Node {
    id: NodeId,
    name: String,
    cluster_id: u64,
    client_urls: Vec<String>,
    store: Arc<RevisionStore>,
    /// Who may do what: every service asks it before reading or proposing.
    auth: crate::auth::Auth,
    raft: Raft<StateMachine>,
    client: RaftClient<StateMachine>,
    limits: Limits,
    etcd_version: String,
    offload: Offload,
    /// `--watch-progress-notify-interval`.
    watch_progress_interval: Duration,
    lessor: Arc<Lessor>,
    /// The hashes recorded at this member's latest compactions (the compaction-hash
    /// check's; empty while it is off).
    compaction_hashes: Arc<crate::corruption::compaction_hash::CompactionHashes>,
    /// How this member reaches others' client URLs (the leader, for lease requests).
    dialer: Arc<dyn Dialer>,
    election_timeout: Duration,
    /// The cluster id, the removed ids, and whether this member was removed.
    guard: Arc<ClusterGuard>,
    /// Membership changes this member carries out while it leads, one at a time.
    changes: MemberChanges,
    /// Seconds since the Unix epoch, for the ids MemberAdd computes as etcd does.
    wall_clock: fn() -> u64,
    /// Where the admin API keeps the snapshot files this member holds.
    admin_snapshot_dir: PathBuf,
}

impl Node {
    pub fn guard(&self) -> &Arc<ClusterGuard> {
        &self.guard
    }

    /// Where the admin API's snapshot files held by this member live.
    pub fn admin_snapshot_dir(&self) -> &std::path::Path {
        &self.admin_snapshot_dir
    }

    pub fn member_changes(&self) -> &MemberChanges {
        &self.changes
    }

    /// Seconds since the Unix epoch (simulated time in the simulation).
    pub fn unix_seconds(&self) -> u64 {
        (self.wall_clock)()
    }

    /// True while the newest membership has this member as a learner (a borrow of
    /// raft's metrics: no copy, and never behind them).
    pub fn is_learner(&self) -> bool {
        self.raft
            .metrics()
            .borrow_watched()
            .membership_config
            .membership()
            .learner_ids()
            .any(|id| id == self.id)
    }

    /// How this member runs blocking store work.
    pub fn offload(&self) -> Offload {
        self.offload
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    pub fn cluster_id(&self) -> u64 {
        self.cluster_id
    }

    pub fn store(&self) -> &Arc<RevisionStore> {
        &self.store
    }

    pub fn auth(&self) -> &crate::auth::Auth {
        &self.auth
    }

    pub fn raft(&self) -> &Raft<StateMachine> {
        &self.raft
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// How long a watcher that asked for progress notifications may go without hearing
    /// from its stream.
    pub fn watch_progress_interval(&self) -> Duration {
        self.watch_progress_interval
    }

    /// The lease timers, which act only while this member leads.
    pub fn lessor(&self) -> &Arc<Lessor> {
        &self.lessor
    }

    /// The hashes this member recorded at its latest compactions.
    pub fn compaction_hashes(&self) -> &Arc<crate::corruption::compaction_hash::CompactionHashes> {
        &self.compaction_hashes
    }

    /// `--election-timeout`: what etcd's shortest lease TTL derives from.
    pub fn election_timeout(&self) -> Duration {
        self.election_timeout
    }

    /// True while this member is the raft leader.
    pub fn is_leader(&self) -> bool {
        self.leader_term().is_some()
    }

    /// True if a quorum confirms, after this call began, that this member still leads
    /// (a read index round, answered here and never forwarded).
    pub async fn confirm_leadership(&self) -> bool {
        self.raft
            .get_read_linearizer(openraft::ReadPolicy::ReadIndex)
            .await
            .is_ok()
    }

    /// The term this member leads in, if it is the raft leader.
    pub fn leader_term(&self) -> Option<u64> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        (metrics.current_leader == Some(self.id) && metrics.state.is_leader())
            .then_some(metrics.current_term)
    }

    /// A channel to the current leader's first published TCP client URL (a unix socket
    /// is the leader host's own), if a leader is known and has published one.
    pub async fn leader_channel(&self) -> Result<tonic::transport::Channel, Status> {
        let leader = self
            .raft
            .metrics()
            .borrow_watched()
            .current_leader
            .ok_or_else(status::no_leader)?;
        self.member_channel(leader).await
    }

    /// A channel to `member_id`'s first published TCP client URL, if it published one;
    /// `no leader` otherwise, as the one caller that cannot do without it expects.
    pub async fn member_channel(
        &self,
        member_id: NodeId,
    ) -> Result<tonic::transport::Channel, Status> {
        let url = store::read_member_attributes(&self.store, member_id)
            .map_err(status::from_store)?
            .and_then(|attributes| {
                attributes
                    .client_urls
                    .into_iter()
                    .find(|u| u.starts_with("http://") || u.starts_with("https://"))
            })
            .ok_or_else(status::no_leader)?;
        let endpoint = tonic::transport::Endpoint::from_shared(url)
            .map_err(|e| status::internal("member client url", &e))?
            .connect_timeout(self.election_timeout);
        self.dialer
            .dial(endpoint)
            .await
            .map_err(|_| status::no_leader())
    }

    /// How this member reaches other members' client URLs.
    pub fn client_dialer(&self) -> &Arc<dyn Dialer> {
        &self.dialer
    }

    pub fn etcd_version(&self) -> &str {
        &self.etcd_version
    }

    /// The cluster's and the storage format's version as etcd 3.6 reports them
    /// (`/version`, `Status.storageVersion`, the Snapshot RPC's `version`): this
    /// member's `major.minor.0`.
    pub fn storage_version(&self) -> String {
        let mut parts = self.etcd_version.split('.');
        match (parts.next(), parts.next()) {
            (Some(major), Some(minor)) => format!("{major}.{minor}.0"),
            _ => self.etcd_version.clone(),
        }
    }

    /// A full response header: the store revision the handler got, and this member's
    /// cluster id, member id and raft term.
    pub fn header_from(&self, partial: Option<ResponseHeader>) -> ResponseHeader {
        ResponseHeader {
            cluster_id: self.cluster_id,
            member_id: self.id,
            revision: partial.map_or(0, |h| h.revision),
            raft_term: self.raft.metrics().borrow_watched().current_term,
        }
    }

    /// A full response header at `revision`.
    pub fn header_at(&self, revision: i64) -> ResponseHeader {
        self.header_from(Some(ResponseHeader {
            revision,
            ..Default::default()
        }))
    }

    /// Replicates one write through raft and returns what applying it produced.
    pub async fn propose(&self, request: CommandRequest) -> Result<Option<Outcome>, Status> {
        self.propose_command(&Command {
            auth_revision: 0,
            auth_checked: false,
            request: Some(request),
        })
        .await
    }

    /// Replicates one command (a client's, stamped with the auth revision it was
    /// authorised at: see `api::authorized`) and returns what applying it produced.
    pub async fn propose_command(&self, command: &Command) -> Result<Option<Outcome>, Status> {
        let encoded = command.encode_to_vec();
        if encoded.len() > self.limits.max_request_bytes {
            return Err(status::request_too_large());
        }
        if let Some(request) = &command.request {
            crate::quota::check(self, request).await?;
        }
        #[cfg(feature = "planted-bugs")]
        if let Some(acknowledged) = self.planted_early_ack(command, &encoded) {
            return Ok(Some(acknowledged));
        }
        self.replicate(encoded).await
    }

    /// Proposes ACTIVATE of `alarm` for this member, unless it is already active. Its
    /// failure is only logged: the alarm is the cluster's memory of a refusal that
    /// stands anyway.
    pub(crate) async fn raise_alarm(&self, alarm: AlarmType) {
        self.raise_alarm_for(self.id, alarm).await;
    }

    /// Raises `alarm` for `member_id` through the log (the leader's corruption check
    /// names the member it blames), unless that member already has it.
    pub(crate) async fn raise_alarm_for(&self, member_id: NodeId, alarm: AlarmType) {
        let wanted = AlarmMember {
            member_id,
            alarm: alarm.into(),
        };
        if self.store.alarms().contains(&wanted) {
            return;
        }
        let raise = Command {
            auth_revision: 0,
            auth_checked: false,
            request: Some(CommandRequest::Alarm(AlarmRequest {
                action: AlarmAction::Activate.into(),
                member_id,
                alarm: alarm.into(),
            })),
        };
        if let Err(error) = self.replicate(raise.encode_to_vec()).await {
            tracing::warn!(alarm = alarm.as_str_name(), member_id = %format!("{member_id:x}"), error = %error.message(), "failed to raise an alarm");
        }
    }

    /// Writes one encoded command through raft and returns what applying it produced.
    async fn replicate(&self, encoded: Vec<u8>) -> Result<Option<Outcome>, Status> {
        let outcome = self
            .client
            .write(RaftCommand(encoded.into()))
            .await
            .map_err(status::from_write)?;
        let result =
            CommandResult::decode(outcome.0).map_err(|e| status::internal("decode outcome", &e))?;
        match result.result {
            Some(Outcome::Error(error)) => Err(status::from_command_error(error.kind())),
            other => Ok(other),
        }
    }

    /// The planted `AckBeforeCommit` bug: a Put is proposed in the background and
    /// acknowledged at once with the revision it would get if nothing intervened.
    #[cfg(feature = "planted-bugs")]
    fn planted_early_ack(&self, command: &Command, encoded: &[u8]) -> Option<Outcome> {
        use crate::planted::{is_planted, PlantedBug};
        let Some(CommandRequest::Put(_)) = &command.request else {
            return None;
        };
        if !is_planted(PlantedBug::AckBeforeCommit) {
            return None;
        }
        let guessed = self.store.current_revision().ok()? + 1;
        let client = self.client.clone();
        let entry = RaftCommand(encoded.to_vec().into());
        tokio::spawn(async move {
            let _ = client.write(entry).await;
        });
        Some(Outcome::Put(crate::proto::etcdserverpb::PutResponse {
            header: Some(ResponseHeader {
                revision: guessed,
                ..Default::default()
            }),
            prev_kv: None,
        }))
    }

    /// Waits until this member's store reflects every write committed before the call:
    /// the read index of a linearizable read.
    pub async fn read_barrier(&self) -> Result<(), Status> {
        #[cfg(feature = "planted-bugs")]
        if crate::planted::is_planted(crate::planted::PlantedBug::LocalLinearizableReads) {
            return Ok(());
        }
        #[cfg(feature = "planted-bugs")]
        if crate::planted::is_planted(crate::planted::PlantedBug::RemovedMemberServes)
            && self.guard.is_removed(self.id)
        {
            return Ok(());
        }
        self.client.read_barrier().await.map_err(status::from_read)
    }

    /// Publishes this member's name and client URLs through the log, as etcd does once
    /// a member starts, retrying until it is applied. Either way, once this returns the
    /// member has applied everything committed before it started: its store syncs
    /// nothing itself and may reopen behind after a power cut, and a member that then
    /// answered reads at once could answer below a revision it answered before.
    async fn publish_attributes(self: Arc<Self>) {
        let attributes = MemberAttributes {
            member_id: self.id,
            name: self.name.clone(),
            client_urls: self.client_urls.clone(),
        };
        loop {
            let current = store::read_member_attributes(&self.store, self.id);
            if matches!(current, Ok(Some(ref a)) if *a == attributes) {
                // Published before (a restart): a read barrier does what applying the
                // publish would, without a write.
                if crate::planted_bug!(ServesBeforeCatchingUp) {
                    return;
                }
                match self.read_barrier().await {
                    Ok(()) => return,
                    Err(error) => {
                        tracing::debug!(%error, "catching up before serving; will retry");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                }
            }
            match self
                .propose(CommandRequest::PublishMember(attributes.clone()))
                .await
            {
                Ok(_) => return,
                Err(error) => {
                    tracing::debug!(%error, "publishing member attributes; will retry");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

/// Incoming connections of one role (peers or clients), from however many listeners.
pub type Incoming<IO> = Pin<Box<dyn Stream<Item = std::io::Result<IO>> + Send>>;

/// The connections a member serves, by role.
pub struct Incomings<IO> {
    pub peers: Incoming<IO>,
    /// gRPC and, unless `client_http` is given, HTTP too.
    pub clients: Incoming<IO>,
    /// `--listen-client-http-urls`: HTTP only.
    pub client_http: Option<Incoming<IO>>,
    /// `--listen-metrics-urls`: metrics and the health endpoints.
    pub metrics: Option<Incoming<IO>>,
}

impl<IO> Incomings<IO> {
    /// Peers and clients only, as the simulation serves them.
    pub fn new(peers: Incoming<IO>, clients: Incoming<IO>) -> Self {
        Incomings {
            peers,
            clients,
            client_http: None,
            metrics: None,
        }
    }
}

/// What a member is built from besides its configuration: how it reaches peers, how
/// it runs blocking work and how it makes its raft log durable. Production uses real
/// TCP and threads; the simulation swaps in turmoil's network and inline work.
pub struct Environment {
    /// Reaches other members' peer URLs.
    pub dialer: Arc<dyn Dialer>,
    /// Reaches other members' client URLs (requests relayed to the leader).
    pub client_dialer: Arc<dyn Dialer>,
    pub offload: Offload,
    /// Whether the raft log is written and synced on its own thread (production) or
    /// on raft's task (simulation).
    pub threaded_log_writes: bool,
    /// Seconds since the Unix epoch.
    pub wall_clock: fn() -> u64,
}

impl Environment {
    pub fn production() -> Self {
        Environment {
            dialer: Arc::new(TcpDialer),
            client_dialer: Arc::new(TcpDialer),
            offload: Offload::BlockingPool,
            threaded_log_writes: true,
            wall_clock: system_unix_seconds,
        }
    }
}

fn system_unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs a member on the host's network until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), NodeError> {
    // Read every certificate and bind every listener first, so that a bad file or a port
    // conflict stops startup at once, with a message naming it.
    let transport = Transport::from_config(&config, Arc::new(TcpDialer))?;
    let incomings = Incomings {
        peers: listen(&config.listen_peer_urls, transport.peer_tls.as_ref()).await?,
        clients: listen(&config.listen_client_urls, transport.client_tls.as_ref()).await?,
        client_http: listen_optional(&config.listen_client_http_urls, &transport).await?,
        metrics: listen_optional(&config.listen_metrics_urls, &transport).await?,
    };
    let environment = Environment {
        dialer: transport.peer_dialer,
        client_dialer: transport.client_dialer,
        ..Environment::production()
    };
    serve(config, environment, incomings, shutdown).await
}

/// Binds `urls` (https ones with `tls`) into one stream of ready connections.
async fn listen(urls: &[Url], tls: Option<&ServerTls>) -> Result<Incoming<Connection>, NodeError> {
    Ok(Box::pin(Listeners::bind(urls, tls).await?.incoming()))
}

/// A listener flag with no default: no URLs, no listener. Its https URLs use the
/// client side's TLS, as etcd's metrics and HTTP-only listeners do.
async fn listen_optional(
    urls: &[Url],
    transport: &Transport,
) -> Result<Option<Incoming<Connection>>, NodeError> {
    if urls.is_empty() {
        return Ok(None);
    }
    Ok(Some(listen(urls, transport.client_tls.as_ref()).await?))
}

/// Runs a member in `environment`, serving peers and clients on the given incoming
/// connections, until `shutdown` completes.
pub async fn serve<IO>(
    config: Config,
    environment: Environment,
    incomings: Incomings<IO>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NodeError>
where
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
{
    // Every metric is built now: a malformed one (a programming error) stops startup,
    // never a request that would have recorded it.
    crate::metrics::registry();
    let node = match start_member(&config, &environment).await {
        Ok(node) => node,
        Err(NodeError::Membership(MembershipError::Removed)) => {
            // etcd stops, and exits cleanly, once it learns it was removed.
            tracing::warn!("{MEMBER_REMOVED}");
            return Ok(());
        }
        Err(error) => return Err(error),
    };
    let raft = node.raft.clone();
    let snapshot_dir = config.data_dir.join("snapshots");

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    let mut servers = tokio::task::JoinSet::new();
    let peer_service = PeerService::new(
        raft.clone(),
        node.guard.clone(),
        snapshot_dir.join("incoming"),
    )?;
    let mut removed = node.guard.removed_self();
    #[cfg(feature = "planted-bugs")]
    if crate::planted::is_planted(crate::planted::PlantedBug::RemovedMemberServes) {
        // Never told: the member goes on serving after its removal.
        removed = tokio::sync::watch::Sender::new(false).subscribe();
    }
    // etcd's peer port answers `/version` over HTTP too (version checks between members
    // and operators' curl); raft itself is gRPC.
    let peer_routes = Routes::from(
        Routes::new(peer_service.into_service())
            .into_axum_router()
            .merge(http::router(node.clone(), Surface::Peer, None))
            .fallback(http::fallback),
    );
    let stop = stopped();
    let Incomings {
        peers,
        clients,
        client_http,
        metrics,
    } = incomings;
    servers.spawn(async move {
        tonic::transport::Server::builder()
            .accept_http1(true)
            .serve_with_incoming_shutdown(peer_routes, peers, stop)
            .await
    });
    if let Some(metrics) = metrics {
        // Probes reach the metrics port from the start: a member that cannot publish
        // (no quorum) still answers them, with 503.
        let routes = Routes::from(
            http::router(node.clone(), Surface::Metrics, None).fallback(http::fallback),
        );
        let stop = stopped();
        servers.spawn(async move {
            tonic::transport::Server::builder()
                .accept_http1(true)
                .serve_with_incoming_shutdown(routes, metrics, stop)
                .await
        });
    }
    tokio::spawn(crate::metrics::follow(node.clone()));
    let (health, health_service) = tonic_health::server::health_reporter();
    tokio::spawn(api::health::track(
        node.clone(),
        health,
        config.election_timeout,
    ));

    // Like etcd, serve clients only once this member has published its name and client
    // URLs to the cluster, so that MemberList never shows a serving member as unstarted.
    tokio::pin!(shutdown);
    // As etcd exits when it cannot write its WAL: a member whose raft stopped on a
    // storage error (a full or failing disk) can serve nothing true, so it stops, and
    // says why. It starts again once the disk is fixed.
    let raft_stopped = raft_stopped(node.clone());
    tokio::pin!(raft_stopped);
    let mut storage_failure = None;
    let published = tokio::select! {
        () = &mut shutdown => false,
        Ok(_) = removed.wait_for(|removed| *removed) => false,
        () = node.clone().publish_attributes() => true,
        fatal = &mut raft_stopped => {
            storage_failure = Some(fatal);
            false
        }
    };
    let directory = tokio::spawn(follow_membership(node.clone()));
    let steward = {
        let node = node.clone();
        tokio::spawn(async move { node.member_changes().steward(node.clone()).await })
    };
    let lessor = tokio::spawn(crate::lessor::run(
        node.clone(),
        config.lease_checkpoint_interval,
    ));
    let compactor = config
        .auto_compaction
        .map(|policy| tokio::spawn(crate::compactor::run(node.clone(), policy)));
    let quota_watch = tokio::spawn(crate::quota::watch(node.clone()));
    let physical_compaction = tokio::spawn(store::run_physical_compaction(
        node.store().clone(),
        node.offload(),
    ));
    let latest_upkeep = tokio::spawn(store::run_latest_upkeep(
        node.store().clone(),
        node.offload(),
    ));
    let corruption_check = tokio::spawn(crate::corruption::run_periodic(
        node.clone(),
        config.corrupt_check_time,
    ));
    let compaction_hash_check = config.compact_hash_check.map(|period| {
        use crate::corruption::compaction_hash;
        let recorder = tokio::spawn(compaction_hash::record(node.clone()));
        let checker = tokio::spawn(compaction_hash::run_check(node.clone(), period));
        (recorder, checker)
    });
    if published {
        tracing::info!("serving clients");
        // As etcd: HTTP shares the client URLs unless it has URLs of its own.
        let http_on_clients = client_http.is_none();
        let mut routes = api::client_routes(node.clone(), health_service);
        // The gateway calls the gRPC routes in process, through the same layers.
        let gateway = config.enable_grpc_gateway.then(|| {
            Arc::new(http::gateway::Gateway::new(
                api::client_service(node.clone(), routes.clone()),
                node.limits().max_request_bytes,
            ))
        });
        let client_surface = http::ClientHttp {
            gateway,
            access: Arc::new(http::Access {
                policy: config.http_access.clone(),
                refuse_gateway_common_names: config.auth.client_cert_auth
                    && config.enable_grpc_gateway,
                node: node.clone(),
            }),
        };
        if http_on_clients {
            routes = Routes::from(
                routes
                    .into_axum_router()
                    .merge(http::router(
                        node.clone(),
                        Surface::Client,
                        Some(client_surface.clone()),
                    ))
                    .fallback(http::fallback),
            );
        }
        let server = api::client_server(node.clone(), http_on_clients);
        let stop = stopped();
        servers.spawn(async move {
            server
                .serve_with_incoming_shutdown(routes.prepare(), clients, stop)
                .await
        });
        if let Some(client_http) = client_http {
            let routes = Routes::from(
                http::router(node.clone(), Surface::Client, Some(client_surface))
                    .fallback(http::fallback),
            );
            let stop = stopped();
            servers.spawn(async move {
                tonic::transport::Server::builder()
                    .accept_http1(true)
                    .serve_with_incoming_shutdown(routes, client_http, stop)
                    .await
            });
        }
        tokio::select! {
            () = &mut shutdown => {
                tracing::info!("shutting down");
                if node.is_leader() && node.raft().metrics().borrow_watched().membership_config.membership().voter_ids().count() > 1 {
                    if let Err(error) = crate::membership::change::hand_over(&node, "stopping").await {
                        tracing::warn!(%error, "stopping without handing leadership over");
                    }
                }
            }
            Ok(_) = removed.wait_for(|removed| *removed) => {}
            Some(result) = servers.join_next() => {
                tracing::error!(?result, "a server stopped unexpectedly");
            }
            fatal = &mut raft_stopped => storage_failure = Some(fatal),
        }
    }
    if *removed.borrow() {
        // As etcd: the member stops for good, and its process exits cleanly.
        tracing::warn!(member_id = %format!("{:x}", node.id), "{MEMBER_REMOVED}");
        tracing::warn!("the data-dir used by this member must be removed.");
    }
    let _ = stop_tx.send(true);
    lessor.abort();
    if let Some(compactor) = compactor {
        compactor.abort();
    }
    quota_watch.abort();
    physical_compaction.abort();
    latest_upkeep.abort();
    corruption_check.abort();
    if let Some((recorder, checker)) = compaction_hash_check {
        recorder.abort();
        checker.abort();
    }
    steward.abort();
    directory.abort();
    if let Err(error) = raft.shutdown().await {
        tracing::warn!(%error, "raft shutdown");
    }
    servers.shutdown().await;
    match storage_failure {
        Some(fatal) => Err(NodeError::Raft(format!(
            "stopped: the raft log or the store could not be written or read ({fatal}); \
             start the member again once its disk is fixed (see docs/durability.md)"
        ))),
        None => Ok(()),
    }
}

/// Resolves with the reason once raft's core stops on its own: a storage error, from a
/// full or failing disk. The core owns the senders of its metrics: when it ends they
/// close, after it published why. Waits on the server metrics, which change only with
/// the vote, the leader or the membership (the full metrics change at every write).
async fn raft_stopped(node: Arc<Node>) -> String {
    let mut server = node.raft.server_metrics();
    while server.changed().await.is_ok() {}
    match &node.raft.metrics().borrow_watched().running_state {
        Err(fatal) if !matches!(fatal, openraft::error::Fatal::Stopped) => fatal.to_string(),
        // Stopped on purpose (the member is shutting down): nothing to report.
        _ => std::future::pending().await,
    }
}

/// Keeps the peer network's record of where each member listens in step with the
/// newest membership (see `ClusterGuard::set_members`).
async fn follow_membership(node: Arc<Node>) {
    // The server metrics change only with the vote, the leader or the membership; the
    // full metrics, several times per write.
    let mut metrics = node.raft.server_metrics();
    let mut followed = None;
    loop {
        let membership = metrics.borrow_watched().membership_config.clone();
        // A new vote or leader wakes this too; the membership changes rarely.
        if followed != Some(*membership.log_id()) {
            followed = Some(*membership.log_id());
            let members = membership
                .membership()
                .nodes()
                .map(|(id, member)| (*id, member.clone()));
            node.guard.set_members(members);
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Opens this member's store, decides who it is (restart, bootstrap or join: see
/// `membership::join`), starts its raft and, for a new cluster, bootstraps the
/// membership from `--initial-cluster`, as etcd's static bootstrap does.
async fn start_member(config: &Config, environment: &Environment) -> Result<Arc<Node>, NodeError> {
    // The data dir's own name must survive a power cut: without the sync of its parent
    // a member's first writes could be acknowledged into a directory that a power cut
    // then takes away whole.
    quantykube_raft::durable::create_dir_all(&config.data_dir)?;
    let databases = crate::disk::open(&config.data_dir, config.wal_dir.as_deref())?;
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
    let members: BTreeMap<NodeId, Member> = match &restored {
        Some(members) => members.clone(),
        None => config
            .initial_cluster
            .iter()
            .map(|m| {
                let member = Member {
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
        .map_err(|error| NodeError::Auth(error.to_string()))?;
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
        .map_err(|e| NodeError::Raft(e.to_string()))?;
    snapshot_exports.store(true, std::sync::atomic::Ordering::Release);

    let fresh = raft
        .is_initialized()
        .await
        .map(|initialized| !initialized)
        .map_err(|e| NodeError::Raft(e.to_string()))?;
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
    let node = Arc::new(Node {
        id,
        name: config.name.clone(),
        cluster_id,
        client_urls: config
            .advertise_client_urls
            .iter()
            .map(|u| u.to_string())
            .collect(),
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
        lessor: Arc::default(),
        compaction_hashes: Arc::default(),
        dialer: environment.client_dialer.clone(),
        election_timeout: config.election_timeout,
        guard,
        changes: MemberChanges::new(Policy {
            strict: config.strict_reconfig_check,
            max_learners: config.max_learners,
        }),
        wall_clock: environment.wall_clock,
        admin_snapshot_dir: config.data_dir.join("admin-snapshots"),
    });
    tracing::info!(
        name = %config.name,
        member_id = %format!("{id:x}"),
        cluster_id = %format!("{cluster_id:x}"),
        "member starting"
    );
    Ok(node)
}
