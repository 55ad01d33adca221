//! The software of one simulated QuantyKube host: the real server, started from etcd's
//! flags, on turmoil's network.
//!
//! This module owns [`NodeSpec`] (everything a host needs to start, or start again
//! after a crash, on the same data directory) and [`run`], which parses the flags with
//! the production parser and runs `quantykube::server::serve` with the simulation's
//! environment: turmoil listeners and dialer, blocking work inline, the raft WAL synced
//! inline, and openraft's randomness seeded. It must never model the server: whatever
//! runs here is the code production runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use quantykube::config::{self, Invocation};
use quantykube::offload::Offload;
use quantykube::server::{self, Environment, Incomings};

use crate::error::SimError;
use crate::net::{self, SimDialer};

/// Port every simulated node serves clients on.
pub const CLIENT_PORT: u16 = 2379;
/// Port every simulated node serves peers on.
pub const PEER_PORT: u16 = 2380;

/// How to start one member of a simulated cluster.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// The member's `--name`, which is also its turmoil host name.
    pub name: String,
    /// Where its RocksDB lives; it outlives crashes.
    pub data_dir: PathBuf,
    /// `--initial-cluster`'s members by name (peer URL `http://{name}:2380`), this one
    /// included: the founding members, or, for a member joining a running cluster,
    /// the members it joins.
    pub cluster: Vec<String>,
    /// `--initial-cluster-state existing` (a member added to a running cluster)
    /// rather than `new`.
    pub existing: bool,
    pub heartbeat: Duration,
    pub election_timeout: Duration,
    /// More etcd flags, e.g. `--snapshot-count=100`.
    pub extra_flags: Vec<String>,
    /// Seeds openraft's randomness (election timeouts) for this start of the host.
    pub seed: u64,
}

impl NodeSpec {
    /// The command line this member is started with, as an operator would write it.
    pub fn args(&self) -> Vec<String> {
        let initial_cluster = self
            .cluster
            .iter()
            .map(|name| format!("{name}=http://{name}:{PEER_PORT}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut args = vec![
            "quantykube".to_owned(),
            format!("--name={}", self.name),
            format!("--data-dir={}", self.data_dir.display()),
            format!("--listen-peer-urls=http://0.0.0.0:{PEER_PORT}"),
            format!(
                "--initial-advertise-peer-urls=http://{}:{PEER_PORT}",
                self.name
            ),
            format!("--listen-client-urls=http://0.0.0.0:{CLIENT_PORT}"),
            format!("--advertise-client-urls=http://{}:{CLIENT_PORT}", self.name),
            format!("--initial-cluster={initial_cluster}"),
            format!(
                "--initial-cluster-state={}",
                if self.existing { "existing" } else { "new" }
            ),
            "--initial-cluster-token=quantykube-simulation".to_owned(),
            format!("--heartbeat-interval={}", self.heartbeat.as_millis()),
            format!("--election-timeout={}", self.election_timeout.as_millis()),
        ];
        args.extend(self.extra_flags.iter().cloned());
        args
    }
}

/// Runs the member described by `spec` until the host is crashed; returns only if the
/// member fails. Must run inside a turmoil host.
pub async fn run(spec: Arc<NodeSpec>) -> Result<(), SimError> {
    let config = match config::parse(spec.args(), &|_| None) {
        Ok(Invocation::Run { config, .. }) => *config,
        Ok(_) => {
            return Err(SimError::Config(
                "the flags asked for help or version".into(),
            ))
        }
        Err(error) => return Err(SimError::Config(error.to_string())),
    };
    let peers = net::listen(PEER_PORT).await?;
    let clients = net::listen(CLIENT_PORT).await?;
    let environment = Environment {
        dialer: Arc::new(SimDialer),
        client_dialer: Arc::new(SimDialer),
        offload: Offload::Inline,
        threaded_log_writes: false,
        wall_clock: simulated_unix_seconds,
    };
    tracing::info!(name = %spec.name, seed = spec.seed, "starting simulated member");
    // A simulated member runs until turmoil crashes it; serving stops on its own only
    // when a server failed, and that must fail the simulation.
    let never = std::future::pending();
    quantykube_raft::with_seed(
        spec.seed,
        server::serve(config, environment, Incomings::new(peers, clients), never),
    )
    .await?;
    Err(SimError::Stopped(spec.name.clone()))
}

/// The simulation's wall clock: a fixed epoch plus simulated time, so that ids computed
/// from the time (MemberAdd's) replay exactly.
fn simulated_unix_seconds() -> u64 {
    const EPOCH: u64 = 1_800_000_000;
    EPOCH + turmoil::sim_elapsed().map_or(0, |elapsed| elapsed.as_secs())
}
