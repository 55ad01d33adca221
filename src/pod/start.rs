//! `quantykube pod start`: the container's command. It looks at the data dir and the
//! other pods, takes the steps [`plan::decide`] names until one of them is "serve",
//! then runs the member in this process, and promotes it once it has caught up if it
//! joined as a learner.
//!
//! While its data dir is empty it answers on its peer port that it awaits a bootstrap
//! (the founders' handshake, see `plan`); it stops answering before the member binds
//! the same port.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{FutureExt, Shared};
use quantykube_raft::{AwaitingBootstrap, TcpDialer};

use super::cluster::{self, Reach};
use super::plan::{self, Local, Me, Step};
use super::replicas::DesiredReplicas;
use super::spec::PodSpec;
use super::PodError;
use crate::config::{self, Config, Invocation};
use crate::membership::join::{self, write_identity};
use crate::transport::{Listeners, Transport};

/// Between two looks at the cluster while nothing can be decided.
const RETRY: Duration = Duration::from_secs(2);

type Shutdown = Shared<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>;

/// Runs the pod until `shutdown` completes or the member stops.
pub async fn run(
    spec: PodSpec,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), PodError> {
    let shutdown: Shutdown =
        (Box::pin(shutdown) as std::pin::Pin<Box<dyn Future<Output = ()> + Send>>).shared();
    let desired = DesiredReplicas::from_env(env);
    let replicas = desired.get(&spec).await;
    // The member's own flags give the TLS every question to another pod uses.
    let probe_config = server_config(&spec, &spec.founders(replicas), "new", env)?;
    let transport = Transport::from_config(&probe_config, Arc::new(TcpDialer))?;
    let reach = Reach {
        peers: transport.peer_dialer.clone(),
        clients: transport.client_dialer.clone(),
    };
    let mut awaiting: Option<AwaitingAnswer> = None;
    let mut last_reason = String::new();
    loop {
        let replicas = desired.get(&spec).await;
        let local = read_local(&spec.data_dir);
        if local == Local::Empty && awaiting.is_none() {
            awaiting = Some(AwaitingAnswer::serve(&probe_config, &transport, &spec.token).await?);
        }
        let view = cluster::observe(&spec, &reach, replicas).await;
        let peer_url = spec.peer_url(spec.ordinal);
        let me = Me {
            name: &spec.name,
            ordinal: spec.ordinal,
            peer_url: &peer_url,
            replicas,
        };
        let step = plan::decide(&me, &local, &view);
        let serve = match step {
            Step::Restart | Step::Bootstrap => {
                Some(server_config(&spec, &spec.founders(replicas), "new", env)?)
            }
            Step::Join { members } => Some(server_config(&spec, &members, "existing", env)?),
            Step::AddLearner => {
                let added = reach.add_learner_any(&spec, replicas).await;
                match added {
                    Ok(id) => {
                        tracing::info!(member_id = %format!("{id:x}"), %peer_url, "added this pod as a learner")
                    }
                    Err(error) => tracing::warn!(%error, "cannot add this pod as a learner yet"),
                }
                None
            }
            Step::RemoveStale { id, reason } => {
                tracing::warn!(member_id = %format!("{id:x}"), %reason, "removing a stale member");
                let removed = reach.remove_any(&spec, replicas, id).await;
                if let Err(error) = removed {
                    tracing::warn!(%error, "cannot remove the stale member yet");
                }
                None
            }
            Step::Wipe { reason } => {
                tracing::warn!(data_dir = %spec.data_dir.display(), %reason, "deleting the data dir's contents");
                wipe(&spec.data_dir)?;
                None
            }
            Step::Adopt(identity) => {
                tracing::warn!(member_id = %format!("{:x}", identity.member_id), "recording the identity the cluster has for this pod");
                write_identity(&spec.data_dir, identity)?;
                None
            }
            Step::Wait { reason } => {
                if reason != last_reason {
                    tracing::info!(%reason, "waiting");
                    last_reason = reason;
                }
                None
            }
        };
        if let Some(config) = serve {
            if let Some(answer) = awaiting.take() {
                answer.stop().await;
            }
            return serve_member(spec, config, reach, desired, shutdown).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY) => {}
            _ = shutdown.clone() => return Ok(()),
        }
    }
}

/// The member's configuration: `pod`'s flags over the `ETCD_*` variables.
fn server_config(
    spec: &PodSpec,
    initial_cluster: &[(String, String)],
    state: &str,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Config, PodError> {
    match config::parse(spec.server_args(initial_cluster, state), env)? {
        Invocation::Run { config, warnings } => {
            for warning in warnings {
                tracing::warn!("{warning}");
            }
            Ok(*config)
        }
        Invocation::Help(_) | Invocation::Version(_) => Err(PodError::Spec(
            "ETCD_* variables asked for help or version".into(),
        )),
    }
}

/// What the data dir holds, from the files alone.
pub fn read_local(data_dir: &Path) -> Local {
    match join::read_identity(data_dir) {
        Ok(Some(identity)) => Local::Known(identity),
        Ok(None) if !data_dir.join("db").exists() => Local::Empty,
        Ok(None) => Local::Unknown("no member.json beside the store".into()),
        Err(error) => Local::Unknown(error.to_string()),
    }
}

/// Deletes everything in `data_dir` but a filesystem's `lost+found`: the data dir is
/// often a volume's root, which itself cannot go.
fn wipe(data_dir: &Path) -> Result<(), PodError> {
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        if entry.file_name() == "lost+found" {
            continue;
        }
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// The peer port's answer while this pod has no data: "awaiting a bootstrap".
struct AwaitingAnswer {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl AwaitingAnswer {
    async fn serve(
        config: &Config,
        transport: &Transport,
        token: &str,
    ) -> Result<AwaitingAnswer, PodError> {
        let listeners =
            Listeners::bind(&config.listen_peer_urls, transport.peer_tls.as_ref()).await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = AwaitingBootstrap {
            token: token.to_string(),
        }
        .into_service();
        let task = tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(listeners.incoming(), async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(error) = served {
                tracing::warn!(%error, "the awaiting-bootstrap answer stopped");
            }
        });
        Ok(AwaitingAnswer { stop, task })
    }

    /// Stops answering and releases the peer port.
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Runs the member until `shutdown`; a learner is promoted once it has caught up.
async fn serve_member(
    spec: PodSpec,
    config: Config,
    reach: Reach,
    desired: DesiredReplicas,
    shutdown: Shutdown,
) -> Result<(), PodError> {
    let promoter = tokio::spawn(promote_when_caught_up(spec, reach, desired));
    let served = crate::server::run(config, shutdown).await;
    promoter.abort();
    Ok(served?)
}

/// Promotes this member while it is a learner of a set that wants it; the leader
/// refuses until it has caught up, so this asks again until it is a voter. A learner
/// serves neither MemberList nor MemberPromote, so the other members are asked.
async fn promote_when_caught_up(spec: PodSpec, reach: Reach, desired: DesiredReplicas) {
    let peer_url = spec.peer_url(spec.ordinal);
    let mut last_error = String::new();
    loop {
        tokio::time::sleep(RETRY).await;
        let replicas = desired.get(&spec).await;
        let listed = reach.list_any(&spec, replicas).await;
        let Ok(members) = listed else { continue };
        let Some(me) = members.iter().find(|m| m.peer_urls.contains(&peer_url)) else {
            continue;
        };
        if !me.is_learner {
            return;
        }
        if !spec.wanted(replicas) {
            continue;
        }
        let id = me.id;
        let promoted = reach.promote_any(&spec, replicas, id).await;
        match promoted {
            Ok(()) => {
                tracing::info!(member_id = %format!("{id:x}"), "promoted this learner to a voter");
                return;
            }
            Err(error) if error != last_error => {
                tracing::info!(%error, "not promoted yet");
                last_error = error;
            }
            Err(_) => {}
        }
    }
}
