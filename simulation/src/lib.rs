//! `quantykube-simulation`: real QuantyKube clusters inside a turmoil simulation.
//!
//! Each member is a turmoil host running the production server (`quantykube::server::serve`:
//! gRPC services, openraft, the peer network, RocksDB in a per-member temporary
//! directory) over turmoil's simulated TCP, with blocking work and WAL syncs inline and
//! openraft's randomness seeded. Clients are turmoil hosts that speak etcd's gRPC API
//! with the `etcd-client` crate.
//!
//! The crate is for our own fault tests and for anyone who tests a control plane with
//! turmoil and wants an etcd-compatible store inside the simulation:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use quantykube_simulation::{client, SimCluster};
//!
//! let seed = 42;
//! let mut sim = quantykube_simulation::sim_builder(seed).build();
//! let cluster = SimCluster::builder().nodes(3).seed(seed).build(&mut sim)?;
//! let endpoints = cluster.endpoints();
//! sim.client("app", async move {
//!     let mut etcd = client::connect(&endpoints[0]).await?;
//!     etcd.put("leader", "app", None).await?;
//!     Ok(())
//! });
//! sim.run()?;
//! # Ok(())
//! # }
//! ```
//!
//! Modules: [`cluster`] (members as hosts, faults by name), [`client`] (connecting
//! etcd clients over turmoil), [`net`] (the transport seams), [`node`] (one member's
//! host software), [`workload`] (client programs, watchers and a lease client among
//! them), [`history`] (what clients and watchers saw), [`checker`] (convergence,
//! revision, durability, watch and lease checks), [`linearizability`]
//! (the KV history against a sequential etcd model), [`violation`] (what every check
//! reports), [`faults`] (seeded
//! fault plans and their injection), [`scenario`] (one seed from start to verdict, as
//! the CI seed set and the soak run it), [`rng`] (the harness's seeded choices).
//!
//! Determinism: a seed fixes turmoil's network and scheduling choices and openraft's
//! election timeouts. tokio seeds its own `select!` randomness only in builds with
//! `--cfg tokio_unstable`; in such a build a seed replays exactly, otherwise runs of a
//! seed interleave differently. This workspace sets the flag in `.cargo/config.toml`;
//! a workspace of your own needs it too (`[build] rustflags`).

pub mod checker;
pub mod client;
pub mod cluster;
pub mod error;
pub mod faults;
mod fnv;
pub mod history;
pub mod leaders;
pub mod linearizability;
pub mod net;
pub mod node;
pub mod rng;
pub mod scenario;
pub mod violation;
pub mod workload;

use std::time::Duration;

pub use cluster::{SimCluster, SimClusterBuilder};
pub use error::SimError;
pub use faults::{Fault, FaultPlan};
pub use history::History;
pub use scenario::{Scenario, SeedReport};
pub use violation::Violation;

/// TCP segments a simulated socket buffers. turmoil's default (64) stalls HTTP/2
/// under load; openraft's own turmoil tests use this value.
pub const TCP_CAPACITY: usize = 65_536;

/// A turmoil builder seeded with `seed` and fit for QuantyKube: a large TCP buffer, a
/// LAN's message latency (1 to 10 ms; turmoil's default of up to 100 ms one way is a
/// WAN, where etcd's 100 ms heartbeat needs retuning) and five simulated minutes
/// before turmoil gives up. Adjust it before `build()`.
pub fn sim_builder(seed: u64) -> turmoil::Builder {
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(seed)
        .tcp_capacity(TCP_CAPACITY)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(10))
        .simulation_duration(Duration::from_secs(300));
    builder
}

/// Log lines stamped with simulated time (seconds since the simulation started; `-`
/// outside one).
pub struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        match turmoil::sim_elapsed() {
            Some(t) => write!(w, "{:>9.3}s", t.as_secs_f64()),
            None => write!(w, "{:>10}", "-"),
        }
    }
}

/// When `RUST_LOG` is set (e.g. `RUST_LOG=info`), logs what members and clients do,
/// stamped with [`SimTime`]: to the test harness's captured output if `captured`, else
/// to standard error. Later calls do nothing.
pub fn init_logging(captured: bool) {
    if std::env::var_os("RUST_LOG").is_none() {
        return;
    }
    let logs = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_timer(SimTime);
    let _ = match captured {
        true => logs.with_test_writer().try_init(),
        false => logs.with_writer(std::io::stderr).try_init(),
    };
}

/// Steps `sim` until `at` (simulated time since it started) or until every client
/// host has finished, whichever comes first: the place to inject the next fault.
pub fn run_until(sim: &mut turmoil::Sim<'_>, at: Duration) -> Result<(), SimError> {
    while sim.elapsed() < at {
        if sim
            .step()
            .map_err(|e| SimError::Simulation(e.to_string()))?
        {
            break;
        }
    }
    Ok(())
}
