//! The composition root: builds one member (its node and the services beside it),
//! starts and owns every background task, serves the listeners, and stops it all.
//!
//! Nothing below imports this module; `main`, `pod` and the simulation call [`run`] or
//! [`serve`]. It holds no request semantics and no rule of etcd's: those live in the
//! layers it wires (see docs/architecture.md, "Layers").

mod from_etcd;
mod listeners;
mod publish;
mod start;
mod tasks;

use std::future::Future;
use std::sync::Arc;

use quantykube_raft::{Dialer, TcpDialer, MEMBER_REMOVED};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::transport::server::Connected;

use crate::config::Config;
use crate::membership::MembershipError;
use crate::offload::Offload;
use crate::store;
use crate::transport::{Transport, TransportError};

pub use listeners::Incoming;

/// Why a member could not start, or stopped on its own.
#[derive(Debug, Error)]
pub enum ServerError {
    #[error("store: {0}")]
    Store(#[from] store::StoreError),
    /// The data dir cannot be opened: a store error, or a format this build must not
    /// touch.
    #[error("data dir: {0}")]
    Disk(#[from] crate::disk::DiskError),
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
    /// An etcd member's data dir could not be converted (`from_etcd`).
    #[error("{0}")]
    FromEtcd(#[from] crate::backup::BackupError),
    /// `--auth-token`'s keys cannot be used (the text starts with etcd's `auth: `).
    #[error("{0}")]
    Auth(String),
}

/// The exit code of a member that stopped on a data dir a newer build wrote (1 for
/// every other failure, as etcd's): a supervisor can tell "roll the binary forward"
/// from a crash.
pub const EXIT_NEWER_FORMAT: u8 = 3;

impl ServerError {
    /// The process's exit code when the member stops on this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            ServerError::Disk(crate::disk::DiskError::Format(
                crate::format::FormatError::Newer { .. },
            )) => EXIT_NEWER_FORMAT,
            _ => 1,
        }
    }
}

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
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
    // Read every certificate and bind every listener first, so that a bad file or a port
    // conflict stops startup at once, with a message naming it.
    let transport = Transport::from_config(&config, Arc::new(TcpDialer))?;
    let incomings = listeners::bind(&config, &transport).await?;
    let environment = Environment {
        dialer: transport.peer_dialer,
        client_dialer: transport.client_dialer,
        ..Environment::production()
    };
    serve(config, environment, incomings, shutdown).await
}

/// How a member's run ended.
enum Ending {
    Shutdown,
    Removed,
    /// Raft stopped on a storage error (a full or failing disk).
    StorageFailure(String),
    /// A listener's server ended on its own.
    ServerStopped,
}

/// Runs a member in `environment`, serving peers and clients on the given incoming
/// connections, until `shutdown` completes.
pub async fn serve<IO>(
    config: Config,
    environment: Environment,
    incomings: Incomings<IO>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError>
where
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
{
    // Every metric is built now: a malformed one (a programming error) stops startup,
    // never a request that would have recorded it.
    crate::metrics::registry();
    let member = match start::start_member(&config, &environment).await {
        Ok(member) => member,
        Err(ServerError::Membership(MembershipError::Removed)) => {
            // etcd stops, and exits cleanly, once it learns it was removed.
            tracing::warn!("{MEMBER_REMOVED}");
            return Ok(());
        }
        Err(error) => return Err(error),
    };
    let node = member.node.clone();
    let mut removed = node.guard().removed_self();
    #[cfg(feature = "planted-bugs")]
    if crate::planted::is_planted(crate::planted::PlantedBug::RemovedMemberServes) {
        // Never told: the member goes on serving after its removal.
        removed = tokio::sync::watch::Sender::new(false).subscribe();
    }
    let Incomings {
        peers,
        clients,
        client_http,
        metrics,
    } = incomings;
    let mut servers = listeners::Servers::new();
    servers.serve_peers(&member, &config, peers)?;
    if let Some(metrics) = metrics {
        // Probes reach the metrics port from the start: a member that cannot publish
        // (no quorum) still answers them, with 503.
        servers.serve_metrics(&node, metrics);
    }
    let mut tasks = tasks::Tasks::new();
    let health = tasks.start_observers(&node, &config);

    // Like etcd, serve clients only once this member has published its name and client
    // URLs to the cluster, so that MemberList never shows a serving member as unstarted.
    tokio::pin!(shutdown);
    // As etcd exits when it cannot write its WAL: a member whose raft stopped on a
    // storage error (a full or failing disk) can serve nothing true, so it stops, and
    // says why. It starts again once the disk is fixed.
    let raft_stopped = node.raft_stopped();
    tokio::pin!(raft_stopped);
    let published = tokio::select! {
        () = &mut shutdown => Err(Ending::Shutdown),
        Ok(_) = removed.wait_for(|removed| *removed) => Err(Ending::Removed),
        () = publish::publish_attributes(&node, &config) => Ok(()),
        fatal = &mut raft_stopped => Err(Ending::StorageFailure(fatal)),
    };
    tasks.start_background(&member, &config);
    let ending = match published {
        Err(ending) => ending,
        Ok(()) => {
            tracing::info!("serving clients");
            servers.serve_clients(&member, &config, health, clients, client_http);
            tokio::select! {
                () = &mut shutdown => {
                    tracing::info!("shutting down");
                    publish::hand_over_before_stopping(&node).await;
                    Ending::Shutdown
                }
                Ok(_) = removed.wait_for(|removed| *removed) => Ending::Removed,
                result = servers.stopped() => {
                    tracing::error!(?result, "a server stopped unexpectedly");
                    Ending::ServerStopped
                }
                fatal = &mut raft_stopped => Ending::StorageFailure(fatal),
            }
        }
    };
    if *removed.borrow() {
        // As etcd: the member stops for good, and its process exits cleanly.
        tracing::warn!(member_id = %format!("{:x}", node.id()), "{MEMBER_REMOVED}");
        tracing::warn!("the data-dir used by this member must be removed.");
    }
    servers.stop_accepting();
    tasks.stop().await;
    node.shutdown_raft().await;
    servers.shutdown().await;
    match ending {
        Ending::StorageFailure(fatal) => Err(ServerError::Raft(format!(
            "stopped: the raft log or the store could not be written, read or applied \
             ({fatal}); a failing or full disk: start the member again once it is fixed \
             (see docs/durability.md)"
        ))),
        Ending::Shutdown | Ending::Removed | Ending::ServerStopped => Ok(()),
    }
}
