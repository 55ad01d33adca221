//! A QuantyKube cluster inside the caller's `turmoil::Sim`, and its faults by name.
//!
//! This module owns [`SimCluster`] and its builder: it adds one turmoil host per member
//! (named `n1`, `n2`, ...), keeps each member's data directory outside the host so that
//! a crashed member restarts on its data, seeds each start of each member from the
//! cluster seed, and turns faults named by member (crash, restart, partition, isolate,
//! heal) into turmoil's. It must never drive the simulation itself (the caller steps or
//! runs the `Sim`) and never talk to the members: clients do that, as in production.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;

use crate::error::SimError;
use crate::node::{self, NodeSpec, CLIENT_PORT};

/// Configures a [`SimCluster`]; start from [`SimCluster::builder`].
#[derive(Clone, Debug)]
pub struct SimClusterBuilder {
    nodes: usize,
    seed: u64,
    heartbeat: Duration,
    election_timeout: Duration,
    data_root: Option<PathBuf>,
    extra_flags: Vec<String>,
}

impl Default for SimClusterBuilder {
    fn default() -> Self {
        SimClusterBuilder {
            nodes: 3,
            seed: 0,
            heartbeat: Duration::from_millis(100),
            election_timeout: Duration::from_millis(1000),
            data_root: None,
            extra_flags: Vec::new(),
        }
    }
}

impl SimClusterBuilder {
    /// How many members (1 to 7; default 3).
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.nodes = nodes;
        self
    }

    /// The seed of the members' own randomness (raft election timeouts). Use the seed
    /// you give turmoil's `Builder::rng_seed`.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// etcd's `--heartbeat-interval` and `--election-timeout` (default 100 ms, 1 s).
    pub fn timing(mut self, heartbeat: Duration, election_timeout: Duration) -> Self {
        self.heartbeat = heartbeat;
        self.election_timeout = election_timeout;
        self
    }

    /// Where the members' data directories are created (default: the system's
    /// temporary directory). A tmpfs such as `/dev/shm` makes fsyncs free.
    pub fn data_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.data_root = Some(root.into());
        self
    }

    /// One more etcd flag for every member, e.g. `--snapshot-count=100`.
    pub fn flag(mut self, flag: impl Into<String>) -> Self {
        self.extra_flags.push(flag.into());
        self
    }

    /// Adds the members to `sim` as hosts `n1..nN`; they start at the next step.
    pub fn build(self, sim: &mut turmoil::Sim<'_>) -> Result<SimCluster, SimError> {
        if !(1..=7).contains(&self.nodes) {
            return Err(SimError::Invalid(format!(
                "{} members; a cluster has 1 to 7",
                self.nodes
            )));
        }
        let names: Vec<String> = (1..=self.nodes).map(|i| format!("n{i}")).collect();
        let mut members = Vec::with_capacity(names.len());
        for (index, name) in names.iter().enumerate() {
            let prefix = format!("quantykube-sim-{name}-");
            let mut dir = tempfile::Builder::new();
            dir.prefix(&prefix);
            let dir = Arc::new(match &self.data_root {
                Some(root) => dir.tempdir_in(root)?,
                None => dir.tempdir()?,
            });
            let spec = NodeSpec {
                name: name.clone(),
                data_dir: dir.path().join("data"),
                cluster: names.clone(),
                heartbeat: self.heartbeat,
                election_timeout: self.election_timeout,
                extra_flags: self.extra_flags.clone(),
                seed: 0,
            };
            add_host(sim, spec, member_seed(self.seed, index), dir.clone());
            members.push(Member {
                name: name.clone(),
                _dir: dir,
            });
        }
        Ok(SimCluster {
            members,
            cut: RefCell::new(BTreeSet::new()),
        })
    }
}

/// Registers the host; each start (the first, and one per bounce) gets its own seed.
fn add_host(sim: &mut turmoil::Sim<'_>, spec: NodeSpec, seed: u64, dir: Arc<TempDir>) {
    let starts = Rc::new(Cell::new(0u64));
    let name = spec.name.clone();
    sim.host(name, move || {
        // The closure owns the directory too, so it lives as long as the host does.
        let _keep = &dir;
        let start = starts.get();
        starts.set(start + 1);
        let spec = Arc::new(NodeSpec {
            seed: mix(seed, start),
            ..spec.clone()
        });
        async move {
            node::run(spec)
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error>)
        }
    });
}

/// The seed of member `index` derived from the cluster's seed.
fn member_seed(seed: u64, index: usize) -> u64 {
    mix(seed, index as u64 + 1)
}

/// SplitMix64 of `a` and `b`: distinct inputs give unrelated seeds.
fn mix(a: u64, b: u64) -> u64 {
    let z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Member {
    name: String,
    /// Kept for the cluster's lifetime (the host closure holds it too).
    _dir: Arc<TempDir>,
}

/// A QuantyKube cluster running as hosts of a `turmoil::Sim`.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use quantykube_simulation::{client, SimCluster};
///
/// let mut sim = quantykube_simulation::sim_builder(7).build();
/// let cluster = SimCluster::builder().nodes(3).seed(7).build(&mut sim)?;
/// let endpoint = cluster.endpoint("n1")?;
/// sim.client("app", async move {
///     let mut etcd = client::connect(&endpoint).await?;
///     etcd.put("greeting", "hello", None).await?;
///     Ok(())
/// });
/// sim.run()?;
/// # Ok(())
/// # }
/// ```
pub struct SimCluster {
    members: Vec<Member>,
    /// Links this cluster cut (host name pairs, in order), for [`SimCluster::heal`].
    cut: RefCell<BTreeSet<(String, String)>>,
}

impl SimCluster {
    pub fn builder() -> SimClusterBuilder {
        SimClusterBuilder::default()
    }

    /// The members' names (also their turmoil host names), `n1` first.
    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// The client URL of member `name`, e.g. `http://n1:2379`.
    pub fn endpoint(&self, name: &str) -> Result<String, SimError> {
        self.member(name)?;
        Ok(format!("http://{name}:{CLIENT_PORT}"))
    }

    /// Every member's client URL, `n1` first.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://{}:{CLIENT_PORT}", m.name))
            .collect()
    }

    /// Every member's name and client URL, `n1` first: what the checkers take.
    pub fn members(&self) -> Vec<(String, String)> {
        self.names().into_iter().zip(self.endpoints()).collect()
    }

    /// Kills member `name` at once, as a power cut does: its in-memory state is lost,
    /// its disk is kept, and nothing it would send while dying (TCP FINs of its open
    /// connections) reaches anyone, so peers and clients notice through their deadlines.
    pub fn crash(&self, sim: &mut turmoil::Sim<'_>, name: &str) -> Result<(), SimError> {
        self.member(name)?;
        tracing::info!(name, "crash");
        self.silently(sim, name, |sim| sim.crash(name));
        Ok(())
    }

    /// Starts member `name` again on its data; if it is running, kills it first, as
    /// [`SimCluster::crash`] does.
    pub fn restart(&self, sim: &mut turmoil::Sim<'_>, name: &str) -> Result<(), SimError> {
        self.member(name)?;
        tracing::info!(name, "restart");
        self.silently(sim, name, |sim| sim.bounce(name));
        Ok(())
    }

    /// Runs `act` (which stops the software of host `name`) with every link of the host
    /// cut, then restores the links this cluster has not cut itself.
    ///
    /// turmoil stops a host by dropping its tokio runtime, whose tasks drop in an order
    /// that follows tokio's process-wide task ids; every socket they close sends a FIN
    /// that draws a latency from the simulation's RNG. Dropping those FINs on cut links
    /// keeps the RNG, and so the run, independent of that order (and models a machine
    /// that vanishes rather than a process the kernel cleans up after).
    fn silently(
        &self,
        sim: &mut turmoil::Sim<'_>,
        name: &str,
        act: impl FnOnce(&mut turmoil::Sim<'_>),
    ) {
        let host = sim.lookup(name);
        let mut links = Vec::new();
        sim.links(|all| {
            for link in all {
                let (a, b) = link.pair();
                if a == host || b == host {
                    links.push((a, b));
                }
            }
        });
        for &(a, b) in &links {
            sim.partition(a, b);
        }
        act(sim);
        let cut = self.cut.borrow();
        for (a, b) in links {
            let cut_by_us = match (sim.reverse_lookup(a), sim.reverse_lookup(b)) {
                (Some(a), Some(b)) => cut.contains(&ordered(&a, &b)),
                _ => false,
            };
            if !cut_by_us {
                sim.repair(a, b);
            }
        }
    }

    /// Cuts the link between hosts `a` and `b` both ways. Either may be a client host
    /// of the caller's; at least one must be a member. Cut links through this method,
    /// not `Sim::partition`: crashing or restarting a member briefly cuts all of its
    /// links and then repairs every one this cluster did not cut.
    pub fn partition(&self, sim: &turmoil::Sim<'_>, a: &str, b: &str) -> Result<(), SimError> {
        if self.member(a).is_err() {
            self.member(b)?;
        }
        tracing::info!(a, b, "partition");
        sim.partition(a, b);
        self.cut.borrow_mut().insert(ordered(a, b));
        Ok(())
    }

    /// Cuts member `name` off from every other member (its clients still reach it).
    pub fn isolate(&self, sim: &turmoil::Sim<'_>, name: &str) -> Result<(), SimError> {
        self.member(name)?;
        for other in self.members.iter().filter(|m| m.name != name) {
            self.partition(sim, name, &other.name)?;
        }
        Ok(())
    }

    /// Repairs every link this cluster cut.
    pub fn heal(&self, sim: &turmoil::Sim<'_>) {
        for (a, b) in std::mem::take(&mut *self.cut.borrow_mut()) {
            tracing::info!(a, b, "repair");
            sim.repair(a.as_str(), b.as_str());
        }
    }

    fn member(&self, name: &str) -> Result<&Member, SimError> {
        self.members
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| SimError::UnknownNode(name.to_owned()))
    }
}

fn ordered(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_owned(), b.to_owned())
    } else {
        (b.to_owned(), a.to_owned())
    }
}
