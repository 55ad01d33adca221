//! `quantykube pod start|stop|check`: a member's life in a StatefulSet (or in compose,
//! which reproduces a StatefulSet's environment), decided from the cluster and the
//! data dir, never from a flag the user must flip.
//!
//! - [`spec`]: who this pod is, from its environment;
//! - [`plan`]: the decision, a pure function of the data dir and the other pods'
//!   answers, with the invariant that keeps an empty volume from voting as a member
//!   that held data;
//! - [`cluster`]: the questions to other pods and etcd's membership calls;
//! - [`replicas`]: the desired member count (the StatefulSet's, or `QK_REPLICAS`);
//! - [`start`], [`stop`], [`check`]: the container's command, the preStop hook and
//!   `helm test`.
//!
//! This module is a client of the member like any other: it changes the membership
//! only through etcd's Cluster service and never touches a running member's store.
//! Its client endpoints come from the client library ([`crate::client`]); it dials them
//! through the member's own transport dialers (TLS from the member's `ETCD_*` flags),
//! not with etcdctl's TLS flags.

pub mod check;
pub mod cluster;
pub mod plan;
pub mod replicas;
pub mod spec;
pub mod start;
pub mod stop;

use std::ffi::OsString;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use quantykube_raft::TcpDialer;
use thiserror::Error;

use crate::config::{self, Invocation};
use crate::membership::MembershipError;
use crate::server::ServerError;
use crate::transport::{Transport, TransportError};
use cluster::Reach;
use replicas::DesiredReplicas;
use spec::PodSpec;

#[derive(Debug, Error)]
pub enum PodError {
    #[error("{0}")]
    Spec(String),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Membership(#[from] MembershipError),
    #[error(transparent)]
    Node(#[from] ServerError),
    #[error("data dir: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Timeout(String),
    #[error("check failed: {0}")]
    Check(String),
}

/// `quantykube pod`: a member's start logic and hooks in a StatefulSet or compose.
#[derive(Debug, Parser)]
#[command(name = "quantykube pod", disable_version_flag = true)]
struct PodCli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start this pod's member: bootstrap, restart, join or replace it as the cluster
    /// and the data dir require (reads QK_* and ETCD_* variables)
    Start,
    /// The preStop hook: leave the cluster if this pod is being scaled away
    Stop {
        /// Give up after this many seconds (keep it below the pod's grace period)
        #[arg(long, default_value_t = 45)]
        timeout: u64,
    },
    /// helm test: write and read through every member, check the member list
    Check {
        /// Client URLs to check, comma-separated (default: every pod's, from QK_*)
        #[arg(long, env = "QK_ENDPOINTS", value_delimiter = ',')]
        endpoints: Vec<String>,
        /// Voters the cluster must have (default: QK_REPLICAS)
        #[arg(long, env = "QK_REPLICAS")]
        replicas: u32,
    },
}

/// Runs `quantykube pod <args>` until `shutdown` (for `start`) or the command is done.
pub fn main<I: IntoIterator<Item = OsString>>(
    args: I,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> ExitCode {
    let argv = std::iter::once(OsString::from("quantykube pod")).chain(args);
    let cli = match PodCli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
    };
    let env = |key: &str| std::env::var(key).ok();
    let level = env("ETCD_LOG_LEVEL").unwrap_or_else(|| "info".into());
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("QUANTYKUBE_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(format!("{level},openraft=warn"))
            }),
        )
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = writeln!(
                std::io::stderr(),
                "quantykube pod: cannot start the async runtime: {error}"
            );
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Start => {
                let spec = PodSpec::from_env(&env)?;
                start::run(spec, &env, shutdown).await
            }
            Command::Stop { timeout } => {
                let spec = PodSpec::from_env(&env)?;
                let reach = reach_for(&spec, &env)?;
                let desired = DesiredReplicas::from_env(&env);
                stop::run(&spec, &reach, &desired, Duration::from_secs(timeout)).await
            }
            Command::Check {
                endpoints,
                replicas,
            } => {
                let endpoints = if endpoints.is_empty() {
                    let spec = PodSpec::from_env(&env)?;
                    (0..replicas).map(|i| spec.client_url(i)).collect()
                } else {
                    endpoints
                };
                let reach = client_reach(&env)?;
                check::run(&reach, &endpoints, replicas).await
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "quantykube pod failed");
            ExitCode::FAILURE
        }
    }
}

/// The dialers a pod's member would use: TLS from its own `ETCD_*` flags.
fn reach_for(spec: &PodSpec, env: &dyn Fn(&str) -> Option<String>) -> Result<Reach, PodError> {
    let args = spec.server_args(&spec.founders(1), "new");
    reach_from(args, env)
}

/// The client-side dialer of a process that is no member (`helm test`): TLS from
/// `ETCD_CERT_FILE`, `ETCD_KEY_FILE` and `ETCD_TRUSTED_CA_FILE`.
fn client_reach(env: &dyn Fn(&str) -> Option<String>) -> Result<Reach, PodError> {
    let scheme = if env("ETCD_CERT_FILE").is_some() {
        "https"
    } else {
        "http"
    };
    let args = vec![
        "quantykube".to_string(),
        format!("--listen-client-urls={scheme}://127.0.0.1:2379"),
        format!("--advertise-client-urls={scheme}://127.0.0.1:2379"),
    ];
    reach_from(args, env)
}

fn reach_from(args: Vec<String>, env: &dyn Fn(&str) -> Option<String>) -> Result<Reach, PodError> {
    let config = match config::parse(args, env)? {
        Invocation::Run { config, .. } => config,
        Invocation::Help(_) | Invocation::Version(_) => {
            return Err(PodError::Spec(
                "ETCD_* variables asked for help or version".into(),
            ))
        }
    };
    let transport = Transport::from_config(&config, Arc::new(TcpDialer))?;
    Ok(Reach {
        peers: transport.peer_dialer,
        clients: transport.client_dialer,
    })
}
