//! A QuantyKube cluster inside the caller's `turmoil::Sim`, and its faults by name.
//!
//! This module owns [`SimCluster`] and its builder: it adds one turmoil host per member
//! (named `n1`, `n2`, ...), keeps each member's data directory outside the host so that
//! a crashed member restarts on its data, seeds each start of each member from the
//! cluster seed, and turns faults named by member (crash, restart, partition both ways
//! or one way, isolate, split, slow links, delay, message loss, heal) into turmoil's.
//! Members also come and go: [`SimCluster::add_member`] starts a member that
//! MemberAdd admitted on a host of its own (`n4`, `n5`, ...), joining with
//! `--initial-cluster-state existing`; [`SimCluster::remove_member`] stops counting a
//! removed member (its host is left to stop on its own, as etcd's removed members do);
//! [`SimCluster::wipe`] deletes a removed member's data so that its host can join again
//! (etcd's "replace a member"). The [`Directory`] shares who the members are with
//! client hosts, and [`HostRequests`] lets a client host ask for those changes between
//! steps. It must never drive the simulation itself (the caller steps or runs the
//! `Sim`) and never talk to the members: clients do that, as in production.

mod directory;
mod requests;

pub use directory::{Directory, DirectoryEntry};
pub use requests::{HostRequest, HostRequests};

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;

use crate::error::SimError;
use crate::node::{self, NodeSpec, CLIENT_PORT, PEER_PORT};
use crate::rng::mix;

/// Configures a [`SimCluster`]; start from [`SimCluster::builder`].
#[derive(Clone, Debug)]
pub struct SimClusterBuilder {
    nodes: usize,
    seed: u64,
    heartbeat: Duration,
    election_timeout: Duration,
    data_root: Option<PathBuf>,
    extra_flags: Vec<String>,
    latency: (Duration, Duration),
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
            latency: (Duration::from_millis(1), Duration::from_millis(10)),
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

    /// The message latency (min, max) of a healthy link, which [`SimCluster::heal`]
    /// restores on links this cluster slowed down. Default 1 to 10 ms, as
    /// [`crate::sim_builder`] configures turmoil.
    pub fn link_latency(mut self, min: Duration, max: Duration) -> Self {
        self.latency = (min, max.max(min));
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
        let cluster = SimCluster {
            hosts: RefCell::new(Vec::with_capacity(names.len())),
            directory: Directory::new(),
            requests: HostRequests::new(),
            wiped_running: RefCell::new(Vec::new()),
            cut: RefCell::new(BTreeSet::new()),
            cut_oneway: RefCell::new(BTreeSet::new()),
            slowed: RefCell::new(BTreeSet::new()),
            delayed: RefCell::new(BTreeSet::new()),
            lossy: RefCell::new(BTreeSet::new()),
            latency: self.latency,
            settings: self,
        };
        for name in &names {
            cluster.add_host(sim, name, names.clone(), false)?;
        }
        Ok(cluster)
    }
}

/// Registers the host; each start (the first, and one per bounce) gets its own seed
/// and the host's spec as it is then (a replaced member's host joins anew). A member
/// whose removal was asked for may stop on its own: its host then finishes quietly.
fn register_host(
    sim: &mut turmoil::Sim<'_>,
    spec: Rc<RefCell<NodeSpec>>,
    seed: u64,
    dir: Arc<TempDir>,
    directory: Directory,
) {
    let starts = Rc::new(Cell::new(0u64));
    let name = spec.borrow().name.clone();
    sim.host(name.clone(), move || {
        // The closure owns the directory too, so it lives as long as the host does.
        let _keep = &dir;
        let start = starts.get();
        starts.set(start + 1);
        let spec = Arc::new(NodeSpec {
            seed: mix(seed, start),
            ..spec.borrow().clone()
        });
        let (directory, name) = (directory.clone(), name.clone());
        async move {
            directory.set_running(&name, true);
            let result = node::run(spec).await;
            directory.set_running(&name, false);
            match result {
                Err(SimError::Stopped(_)) if directory.exit_expected(&name) => {
                    tracing::info!(name, "member stopped on its own after its removal");
                    directory.note_exit(&name, crate::history::now());
                    Ok(())
                }
                other => other.map_err(|e| Box::new(e) as Box<dyn std::error::Error>),
            }
        }
    });
}

/// The seed of member `index` derived from the cluster's seed.
fn member_seed(seed: u64, index: usize) -> u64 {
    mix(seed, index as u64 + 1)
}

/// One host of the cluster, a member now or once.
struct Host {
    name: String,
    /// How it starts; a replaced member's host gets a joining member's spec.
    spec: Rc<RefCell<NodeSpec>>,
    /// Its data directory was deleted (it may only join again as a new member).
    wiped: Cell<bool>,
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
    /// Every host, founding members first, in the order they were added.
    hosts: RefCell<Vec<Host>>,
    /// Who the members are, shared with client hosts.
    directory: Directory,
    /// What client hosts asked for, carried out by [`SimCluster::serve_requests`].
    requests: HostRequests,
    /// Removed members still running when [`SimCluster::wipe`] had to stop them, and
    /// when.
    wiped_running: RefCell<Vec<(String, Duration)>>,
    /// How the founding members were configured; joining members get the same.
    settings: SimClusterBuilder,
    /// Links this cluster cut (host name pairs, in order), for [`SimCluster::heal`].
    cut: RefCell<BTreeSet<(String, String)>>,
    /// Directions this cluster cut, `(from, to)`.
    cut_oneway: RefCell<BTreeSet<(String, String)>>,
    /// Links (host name pairs, in order) whose latency [`SimCluster::slow`] fixed.
    slowed: RefCell<BTreeSet<(String, String)>>,
    /// Links (host name pairs, in order) whose maximum latency [`SimCluster::delay`]
    /// raised.
    delayed: RefCell<BTreeSet<(String, String)>>,
    /// Links (host name pairs, in order) this cluster made drop messages.
    lossy: RefCell<BTreeSet<(String, String)>>,
    /// A healthy link's latency (min, max).
    latency: (Duration, Duration),
}

impl SimCluster {
    pub fn builder() -> SimClusterBuilder {
        SimClusterBuilder::default()
    }

    /// The members' names (also their turmoil host names), `n1` first: the founding
    /// members and the ones added since, less the ones removed.
    pub fn names(&self) -> Vec<String> {
        self.directory
            .current()
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    }

    /// The client URL of member `name`, e.g. `http://n1:2379` (removed members
    /// included: a client may still hold it).
    pub fn endpoint(&self, name: &str) -> Result<String, SimError> {
        self.host(name)?;
        Ok(format!("http://{name}:{CLIENT_PORT}"))
    }

    /// Every member's client URL, `n1` first.
    pub fn endpoints(&self) -> Vec<String> {
        self.members().into_iter().map(|(_, url)| url).collect()
    }

    /// Every member's name and client URL, `n1` first: what the checkers take.
    pub fn members(&self) -> Vec<(String, String)> {
        self.directory.current()
    }

    /// Who the members are, were and will be, shared with client hosts: a client
    /// that takes its endpoints from here also reaches members added later (and keeps
    /// the endpoints of removed ones, as a real client with a stale list does).
    pub fn directory(&self) -> Directory {
        self.directory.clone()
    }

    /// The mailbox through which a client host asks for [`SimCluster::add_member`] and
    /// [`SimCluster::wipe`]; whoever steps the simulation must call
    /// [`SimCluster::serve_requests`] between steps.
    pub fn requests(&self) -> HostRequests {
        self.requests.clone()
    }

    /// Carries out what client hosts asked for since the last call. Call it after
    /// every step while a client may ask (the fault injector does).
    pub fn serve_requests(&self, sim: &mut turmoil::Sim<'_>) {
        for (ticket, request) in self.requests.take() {
            let answer = match &request {
                HostRequest::Join { name } => self
                    .add_member(sim, name)
                    .map(|()| format!("{name} started with --initial-cluster-state existing")),
                HostRequest::Wipe { name } => self.wipe(sim, name),
            };
            tracing::info!(%request, ?answer, "host request");
            self.requests
                .answer(ticket, answer.map_err(|e| e.to_string()));
        }
    }

    /// Starts `name` as a new member of the running cluster, once MemberAdd admitted
    /// its peer URL `http://{name}:2380`: with `--initial-cluster-state existing` and
    /// `--initial-cluster` naming the current members and itself (as `etcdctl member
    /// add` prints it), on a new host with a new data directory, or on the host of a
    /// removed member whose data was wiped (etcd's "replace a member"). It asks a peer
    /// for its member id and catches up by log or snapshot.
    pub fn add_member(&self, sim: &mut turmoil::Sim<'_>, name: &str) -> Result<(), SimError> {
        if self.directory.entry(name).is_some_and(|e| e.current) {
            return Err(SimError::Invalid(format!("{name} is a member already")));
        }
        let mut cluster = self.names();
        cluster.push(name.to_owned());
        tracing::info!(name, ?cluster, "member joins");
        let rejoining = match self.host(name) {
            Ok(host) if !host.wiped.get() => {
                return Err(SimError::Invalid(format!(
                    "{name} must be wiped before it joins again"
                )))
            }
            Ok(host) => {
                let mut spec = host.spec.borrow_mut();
                spec.cluster = cluster.clone();
                spec.existing = true;
                host.wiped.set(false);
                true
            }
            Err(_) => false,
        };
        if rejoining {
            self.directory.join(self.entry_of(sim, name));
            self.silently(sim, name, |sim| sim.bounce(name));
            return Ok(());
        }
        self.add_host(sim, name, cluster, true)
    }

    /// Stops counting member `name`, whose removal (MemberRemove) is known: faults and
    /// checkers leave it alone from now on. Its host is left running, to stop on its
    /// own as a removed etcd member does (the membership checker holds it to that);
    /// its endpoint stays in the [`Directory`], as it stays in a client's list.
    pub fn remove_member(&self, name: &str) -> Result<(), SimError> {
        self.host(name)?;
        tracing::info!(name, "member removed");
        self.directory.retire(name);
        Ok(())
    }

    /// Deletes the data directory of `name`, a removed member, so that its host can
    /// join again as a new member ([`SimCluster::add_member`]); stops the host first
    /// if it still runs (which a removed member should not: that is recorded, see
    /// [`SimCluster::wiped_while_running`]). Returns what it did.
    pub fn wipe(&self, sim: &mut turmoil::Sim<'_>, name: &str) -> Result<String, SimError> {
        let host = self.host(name)?;
        if self.directory.entry(name).is_some_and(|e| e.current) {
            return Err(SimError::Invalid(format!(
                "{name} is a member: remove it before wiping its data"
            )));
        }
        let mut did = String::new();
        if self.directory.is_running(name) {
            let now = sim.elapsed();
            self.wiped_running.borrow_mut().push((name.to_owned(), now));
            self.silently(sim, name, |sim| sim.crash(name));
            self.directory.set_running(name, false);
            did.push_str("stopped its still running process, ");
        }
        let data = host.spec.borrow().data_dir.clone();
        if data.exists() {
            std::fs::remove_dir_all(&data)?;
        }
        host.wiped.set(true);
        did.push_str("deleted its data directory");
        tracing::info!(name, did, "wipe");
        Ok(did)
    }

    /// Removed members that [`SimCluster::wipe`] found still running, and when.
    pub fn wiped_while_running(&self) -> Vec<(String, Duration)> {
        self.wiped_running.borrow().clone()
    }

    /// True if `name`'s data was wiped and it has not joined since: it must not be
    /// restarted on its old flags.
    pub fn is_wiped(&self, name: &str) -> bool {
        self.host(name).is_ok_and(|h| h.wiped.get())
    }

    /// Adds a host for member `name` (founding, or joining an existing cluster whose
    /// members are `cluster`).
    fn add_host(
        &self,
        sim: &mut turmoil::Sim<'_>,
        name: &str,
        cluster: Vec<String>,
        existing: bool,
    ) -> Result<(), SimError> {
        let settings = &self.settings;
        let prefix = format!("quantykube-sim-{name}-");
        let mut dir = tempfile::Builder::new();
        dir.prefix(&prefix);
        let dir = Arc::new(match &settings.data_root {
            Some(root) => dir.tempdir_in(root)?,
            None => dir.tempdir()?,
        });
        let spec = Rc::new(RefCell::new(NodeSpec {
            name: name.to_owned(),
            data_dir: dir.path().join("data"),
            cluster,
            existing,
            heartbeat: settings.heartbeat,
            election_timeout: settings.election_timeout,
            extra_flags: settings.extra_flags.clone(),
            seed: 0,
        }));
        let index = self.hosts.borrow().len();
        register_host(
            sim,
            spec.clone(),
            member_seed(settings.seed, index),
            dir.clone(),
            self.directory.clone(),
        );
        self.hosts.borrow_mut().push(Host {
            name: name.to_owned(),
            spec,
            wiped: Cell::new(false),
            _dir: dir,
        });
        self.directory.join(self.entry_of(sim, name));
        Ok(())
    }

    /// A directory entry for the registered host `name`, a member from now on.
    fn entry_of(&self, sim: &turmoil::Sim<'_>, name: &str) -> DirectoryEntry {
        let address = sim.lookup(name);
        DirectoryEntry {
            name: name.to_owned(),
            client_url: format!("http://{name}:{CLIENT_PORT}"),
            peer_url: format!("http://{name}:{PEER_PORT}"),
            peer_url_by_address: format!("http://{address}:{PEER_PORT}"),
            current: true,
            exit_expected: false,
            running: false,
            exited_at: None,
        }
    }

    /// Kills member `name` at once, as a power cut does: its in-memory state is lost,
    /// its disk is kept, and nothing it would send while dying (TCP FINs of its open
    /// connections) reaches anyone, so peers and clients notice through their deadlines.
    pub fn crash(&self, sim: &mut turmoil::Sim<'_>, name: &str) -> Result<(), SimError> {
        self.host(name)?;
        tracing::info!(name, "crash");
        self.silently(sim, name, |sim| sim.crash(name));
        self.directory.set_running(name, false);
        Ok(())
    }

    /// Starts member `name` again on its data; if it is running, kills it first, as
    /// [`SimCluster::crash`] does.
    pub fn restart(&self, sim: &mut turmoil::Sim<'_>, name: &str) -> Result<(), SimError> {
        if self.host(name)?.wiped.get() {
            return Err(SimError::Invalid(format!(
                "{name}'s data was wiped: it may only join again (add_member)"
            )));
        }
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
        let links = links_of(sim, name);
        for &(a, b) in &links {
            sim.partition(a, b);
        }
        act(sim);
        let cut = self.cut.borrow();
        let cut_oneway = self.cut_oneway.borrow();
        for (a, b) in links {
            let (Some(a_name), Some(b_name)) = (sim.reverse_lookup(a), sim.reverse_lookup(b))
            else {
                sim.repair(a, b);
                continue;
            };
            if cut.contains(&ordered(&a_name, &b_name)) {
                continue;
            }
            sim.repair(a, b);
            for (from, to) in [(&a_name, &b_name), (&b_name, &a_name)] {
                if cut_oneway.contains(&(from.clone(), to.clone())) {
                    sim.partition_oneway(from.as_str(), to.as_str());
                }
            }
        }
    }

    /// Cuts the link between hosts `a` and `b` both ways. Either may be a client host
    /// of the caller's; at least one must be a member. Cut links through this method,
    /// not `Sim::partition`: crashing or restarting a member briefly cuts all of its
    /// links and then repairs every one this cluster did not cut.
    pub fn partition(&self, sim: &turmoil::Sim<'_>, a: &str, b: &str) -> Result<(), SimError> {
        self.some_member(a, b)?;
        tracing::info!(a, b, "partition");
        sim.partition(a, b);
        self.cut.borrow_mut().insert(ordered(a, b));
        Ok(())
    }

    /// Drops every message from host `from` to host `to`, while messages from `to` to
    /// `from` still arrive (turmoil's one-way partition). At least one must be a member.
    /// Simulated TCP needs both directions, so connections across the cut stall; what
    /// gets through is what a fresh, one-way conversation can carry.
    pub fn partition_oneway(
        &self,
        sim: &turmoil::Sim<'_>,
        from: &str,
        to: &str,
    ) -> Result<(), SimError> {
        self.some_member(from, to)?;
        tracing::info!(from, to, "partition one way");
        sim.partition_oneway(from, to);
        self.cut_oneway
            .borrow_mut()
            .insert((from.to_owned(), to.to_owned()));
        Ok(())
    }

    /// Cuts member `name` off from every other member (its clients still reach it).
    pub fn isolate(&self, sim: &turmoil::Sim<'_>, name: &str) -> Result<(), SimError> {
        self.host(name)?;
        for other in self.names().iter().filter(|m| *m != name) {
            self.partition(sim, name, other)?;
        }
        Ok(())
    }

    /// Cuts every link between a member of `side` and a member not in it: a network
    /// split (e.g. two members against three). Clients still reach every member.
    pub fn split(&self, sim: &turmoil::Sim<'_>, side: &[String]) -> Result<(), SimError> {
        for name in side {
            self.host(name)?;
        }
        let names = self.names();
        for a in side {
            for b in names.iter().filter(|m| !side.contains(m)) {
                self.partition(sim, a, b)?;
            }
        }
        Ok(())
    }

    /// Makes every message to or from member `name` (from peers and clients alike)
    /// take exactly `latency`: a slow or overloaded member.
    pub fn slow(
        &self,
        sim: &turmoil::Sim<'_>,
        name: &str,
        latency: Duration,
    ) -> Result<(), SimError> {
        self.host(name)?;
        tracing::info!(name, ?latency, "slow member");
        let mut slowed = self.slowed.borrow_mut();
        for (a, b) in links_of(sim, name) {
            sim.set_link_latency(a, b, latency);
            if let (Some(a), Some(b)) = (sim.reverse_lookup(a), sim.reverse_lookup(b)) {
                slowed.insert(ordered(&a, &b));
            }
        }
        Ok(())
    }

    /// Lets messages between members take up to `max` (at least the healthy minimum):
    /// a congested network, where messages also overtake one another. Links of a
    /// member slowed with [`SimCluster::slow`] keep their latency.
    pub fn delay(&self, sim: &turmoil::Sim<'_>, max: Duration) {
        tracing::info!(?max, "delay between members");
        let max = max.max(self.latency.0);
        let slowed = self.slowed.borrow();
        let mut delayed = self.delayed.borrow_mut();
        let names = self.names();
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                let pair = ordered(a, b);
                // turmoil needs min <= max; a slowed link has min = its latency.
                if !slowed.contains(&pair) {
                    sim.set_link_max_message_latency(a.as_str(), b.as_str(), max);
                    delayed.insert(pair);
                }
            }
        }
    }

    /// Makes every link of member `name` (to peers and clients) lose each message with
    /// probability `rate`, as turmoil does: the link drops that message and every one
    /// in flight on it. Simulated TCP does not retransmit, so a loss stalls the
    /// connection until a keepalive or deadline notices and the sender re-dials.
    /// [`SimCluster::heal_all`] stops the loss (turmoil's setter needs `&mut Sim`).
    pub fn lossy(&self, sim: &mut turmoil::Sim<'_>, name: &str, rate: f64) -> Result<(), SimError> {
        self.host(name)?;
        tracing::info!(name, rate, "lossy member");
        let mut lossy = self.lossy.borrow_mut();
        for (a, b) in links_of(sim, name) {
            sim.set_link_fail_rate(a, b, rate);
            if let (Some(a), Some(b)) = (sim.reverse_lookup(a), sim.reverse_lookup(b)) {
                lossy.insert(ordered(&a, &b));
            }
        }
        Ok(())
    }

    /// Repairs every link this cluster cut (both ways or one way) and gives every link
    /// it slowed its healthy latency back. Message loss set with
    /// [`SimCluster::lossy`] stays; [`SimCluster::heal_all`] stops it too.
    pub fn heal(&self, sim: &turmoil::Sim<'_>) {
        for (a, b) in std::mem::take(&mut *self.cut.borrow_mut()) {
            tracing::info!(a, b, "repair");
            sim.repair(a.as_str(), b.as_str());
        }
        for (from, to) in std::mem::take(&mut *self.cut_oneway.borrow_mut()) {
            tracing::info!(from, to, "repair one way");
            sim.repair_oneway(from.as_str(), to.as_str());
        }
        let (min, max) = self.latency;
        let mut slowed = std::mem::take(&mut *self.slowed.borrow_mut());
        slowed.append(&mut self.delayed.borrow_mut());
        for (a, b) in slowed {
            // Sets min and max to `min`, then raises max.
            sim.set_link_latency(a.as_str(), b.as_str(), min);
            sim.set_link_max_message_latency(a.as_str(), b.as_str(), max);
        }
    }

    /// [`SimCluster::heal`], and every link this cluster made lossy loses nothing more.
    pub fn heal_all(&self, sim: &mut turmoil::Sim<'_>) {
        self.heal(sim);
        for (a, b) in std::mem::take(&mut *self.lossy.borrow_mut()) {
            // A link that just lost a message comes back with the next one it carries.
            sim.set_link_fail_rate(a.as_str(), b.as_str(), 0.0);
        }
    }

    /// Errs unless `a` or `b` is a member's host.
    fn some_member(&self, a: &str, b: &str) -> Result<(), SimError> {
        if self.host(a).is_err() {
            self.host(b)?;
        }
        Ok(())
    }

    /// The host of `name`, a member now or once.
    fn host(&self, name: &str) -> Result<std::cell::Ref<'_, Host>, SimError> {
        std::cell::Ref::filter_map(self.hosts.borrow(), |hosts| {
            hosts.iter().find(|h| h.name == name)
        })
        .map_err(|_| SimError::UnknownNode(name.to_owned()))
    }
}

/// Every link of host `name`, as turmoil's address pairs.
fn links_of(sim: &turmoil::Sim<'_>, name: &str) -> Vec<(std::net::IpAddr, std::net::IpAddr)> {
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
    links
}

fn ordered(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_owned(), b.to_owned())
    } else {
        (b.to_owned(), a.to_owned())
    }
}
