//! One seed from start to verdict: a 3- or 5-member cluster, concurrent [`Mixed`]
//! clients, one or two [`WatchClient`]s watching their keys, one [`LeaseClient`] with
//! keys of its own, one [`SnapshotClient`] taking backups, in some seeds a [`MembershipClient`] adding, removing and
//! replacing members meanwhile, the seed's [`FaultPlan`], healing, and every checker.
//! A few seeds (see [`AUTH_PERCENT`]) run etcd auth instead: an [`AuthClient`](crate::workload::AuthClient)
//! administrator taking permissions, roles and users away and giving them back while
//! its users read and write (the other clients would need tokens), under the same
//! faults, judged by the auth checker and the key-value checkers.
//!
//! This module owns [`Scenario`] (what a seed runs) and [`SeedReport`] (what came of
//! it: counts, the faults as injected, violations, and a hash of every event; in
//! `report`), with the auth seeds' part of a run in `auth` and the scenarios aimed at
//! one check in `targeted`. The CI
//! seed set, the replay test, the determinism test and the soak command all run seeds
//! through here, so a seed means the same run everywhere. It never panics on a failing
//! seed: a violation, a member that stops, a cluster that elects no leader or clients
//! that never finish all end up in the report's violations.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use crate::checker;
use crate::cluster::SimCluster;
use crate::error::SimError;
use crate::faults::{step_until, Fault, FaultPlan, Injector};
use crate::fnv::Fnv;
use crate::history::{
    History, MembershipEntry, MembershipLog, Op, Operation, Outcome, SnapshotLog, WatchLog,
};
use crate::leaders::{LeaderWatch, PartialIsolation};
use crate::rng::{mix, SimRng};
use crate::workload::{
    Lapse, LeaseClient, MembershipClient, MembershipOp, MembershipStep, Mixed, Pileup, Renewals,
    SnapshotClient, WatchClient, WatchTarget, WritesInFlight,
};

mod auth;
mod report;
mod targeted;

pub use auth::AuthPlan;
pub use report::SeedReport;

/// How long watch clients may take, once the writers are done, to deliver the last
/// acknowledged write; more is a liveness violation.
const WATCH_DRAIN: Duration = Duration::from_secs(30);

/// How long the lease client may keep reading keys whose leases should have gone, once
/// the run is over: far past any lease's TTL and the liveness bound.
const LEASE_DRAIN: Duration = Duration::from_secs(30);

/// The members' `--experimental-lease-checkpoint-interval` in most seeds: short, so
/// that a new leader resumes leases from checkpoints (and keepalives reset them through
/// the log) within a seed, rather than from their whole TTL.
const LEASE_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(2);

/// The interval in the other seeds: etcd's default, longer than any seed, so that no
/// lease has a checkpoint and a new leader times every lease from its election (and a
/// keepalive on the leader has nothing to reset before it answers).
const LEASE_CHECKPOINT_INTERVAL_LONG: Duration = Duration::from_secs(300);

/// Seeds (in a hundred) whose members checkpoint leases only every
/// [`LEASE_CHECKPOINT_INTERVAL_LONG`].
const LONG_LEASE_CHECKPOINTS_PERCENT: u64 = 40;

/// Seeds (in a hundred) whose lease client keeps its leases on the leader
/// ([`LeaseClient::pin_to_leader`]): when the faults cut that leader off, its keepalive
/// streams stay on a leader that may be deposed without knowing it.
const LEASES_ON_LEADER_PERCENT: u64 = 50;

/// Seeds (in a hundred) whose first crash of the leader mid-write is a restart at once.
const RESTART_MID_WRITE_PERCENT: u64 = 50;

/// Seeds (in a hundred, of those that keep leases on the leader) whose first isolation
/// of the leader comes right after a renewal.
const ISOLATE_AFTER_RENEWAL_PERCENT: u64 = 70;

/// Seeds (in a hundred, of those that keep leases on the leader) whose first isolation
/// of the leader lasts 6-9 s: longer than an election and the longest lease's TTL.
const LONG_ISOLATION_PERCENT: u64 = 60;

/// Seeds (in a hundred) whose scenario has a membership client.
const MEMBERSHIP_PERCENT: u64 = 25;

/// Seeds (in a hundred, of those with a membership client and an isolation of the
/// leader) whose first isolation of the leader spares one follower, with writes piled
/// on the cut-off leader and a replacement aimed at the spared follower: a new member
/// may ask a deposed leader with the longest log who it is.
const PARTIAL_ISOLATION_PERCENT: u64 = 50;

/// Seeds (in a hundred, of those with a partial isolation) whose members run without
/// `--strict-reconfig-check`, so that a replacement may add its member while the old
/// leader is out of reach (etcd's check refuses any addition then).
const LAX_RECONFIG_PERCENT: u64 = 50;

/// How long a partial isolation of the leader lasts: the successor's election, a
/// replacement (a removal, the old process stopping, an addition) and the new process's
/// questions to its peers.
const PARTIAL_ISOLATION: (u64, u64) = (12_000, 16_000);

/// When the replacement aimed at the spared follower starts, after the isolation: once
/// a successor is elected and has deposed the old leader at the spared follower.
const REPLACE_AFTER_ISOLATION: Duration = Duration::from_secs(3);

/// Txns piled on a leader a partial isolation cut off: more entries than its successor
/// appends in the seconds after (a blank entry, membership changes, the clients'
/// writes), so that the old leader's log is the longest.
const PILEUP_WRITES: usize = 1500;

/// Seeds (in a hundred, of those without a membership client) that run the auth
/// workload instead of the others.
pub const AUTH_PERCENT: u64 = 12;

/// Seeds (in a hundred) whose members take a raft snapshot every few dozen entries, so
/// that a member cut off or restarted falls behind the purged log and catches up by a
/// snapshot sent while the clients read and watch.
const RAFT_SNAPSHOT_PERCENT: u64 = 30;

/// The members' `--bcrypt-cost` in auth seeds: etcd's minimum, so that logins cost
/// little real time.
const BCRYPT_COST: &str = "4";

/// How long a removed member may take, once everything else is done, to stop.
const REMOVED_STOP: Duration = Duration::from_secs(20);

/// Server bugs this simulation found that the server does not fix yet, and how a seed
/// steps around each meanwhile (docs/simulation.md, "What it has caught", has both).
/// Each switch goes once its bug is fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownIssues {
    /// A member that knows its leader but not the leader's address yet (one that just
    /// joined, before the membership reaches it) spins in the raft client's
    /// `wait_for_leader` without ever yielding: its simulated host never runs again,
    /// and the seed hangs. While set, membership clients add no members (an add or a
    /// replacement becomes a removal).
    pub joining_member_spins: bool,
    /// A removed member that has not learned of its removal yet forwards writes to
    /// the leader and acknowledges them. While set, `removed-member-acked` findings
    /// go into [`SeedReport::known`] instead of its violations.
    pub removed_member_acks_writes: bool,
}

impl KnownIssues {
    /// As if every bug were fixed: for a patched server.
    pub const NONE: KnownIssues = KnownIssues {
        joining_member_spins: false,
        removed_member_acks_writes: false,
    };

    /// The server's known bugs: none (both are fixed), unless `QK_SIM_KNOWN_ISSUES=all`
    /// says the server under test is one from before the fixes.
    pub fn of_this_server() -> Self {
        // Both were fixed in the server (24ba4cf, 80868b7): a seed steps around them
        // only when asked to, for an older server.
        match std::env::var("QK_SIM_KNOWN_ISSUES") {
            Ok(value) if value.trim() == "all" => KnownIssues {
                joining_member_spins: true,
                removed_member_acks_writes: true,
            },
            _ => KnownIssues::NONE,
        }
    }

    /// True if `property` is a finding of a known bug, not a violation.
    fn excuses(&self, property: &str) -> bool {
        self.removed_member_acks_writes && property == "removed-member-acked"
    }
}
/// How to replay one seed with logs: the command a failing seed prints.
pub fn replay_command(seed: u64) -> String {
    format!(
        "QK_SIM_SEED={seed} RUST_LOG=info cargo test -p quantykube-simulation --test sim \
         replay -- --nocapture"
    )
}

/// What one seed runs.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub plan: FaultPlan,
    /// Concurrent [`Mixed`] clients.
    pub clients: usize,
    /// Keys the clients share.
    pub keys: usize,
    /// Watch clients over those keys.
    pub watchers: Vec<WatcherPlan>,
    /// Leases the seed's lease client grants, each with keys of its own.
    pub leases: usize,
    /// What the seed's membership client does, in order; empty: no membership client
    /// (the cluster keeps its founding members).
    pub membership: Vec<MembershipStep>,
    /// If set, the seed runs the auth workload instead of the other clients.
    pub auth: Option<AuthPlan>,
    /// If set, the members' `--snapshot-count` (etcd's default otherwise).
    pub raft_snapshot_count: Option<u64>,
    /// The members' `--experimental-lease-checkpoint-interval`.
    pub lease_checkpoint_interval: Duration,
    /// The lease client opens its keepalive streams on the leader.
    pub leases_on_leader: bool,
    /// The lease client renews every this many thirds of a TTL.
    pub renew_every_thirds: u64,
    /// The TTLs the lease client asks for, in seconds, from `.0` to `.1`.
    pub lease_ttl: (i64, i64),
    /// If set, the lease client's keepalives stop for a while (none in a seed's own
    /// scenario; see [`Scenario::deposed_leaders_expiry`]).
    pub lease_lapse: Option<Lapse>,
    /// How long the members hold an expiry between deciding and proposing it: zero,
    /// unless a targeted scenario's run plants that pause (the planted-bug registry
    /// does), when the lease checker's liveness bound must allow for it.
    pub expiry_pause: Duration,
    /// The members' `--strict-reconfig-check` (etcd's default, true, unless the seed
    /// must change the membership while a voter is out of reach).
    pub strict_reconfig_check: bool,
    /// The server bugs the run steps around (see [`KnownIssues`]).
    pub known: KnownIssues,
    /// Where members keep their data (default: `/dev/shm` if it exists, so fsyncs
    /// cost nothing, else the system's temporary directory).
    pub data_root: Option<PathBuf>,
}

impl Scenario {
    /// The scenario of `seed`: its fault plan, two to four clients, three to five keys,
    /// one or two watchers, four to seven leases, and in a quarter of the seeds two to
    /// four membership changes. In half the seeds the lease client keeps its leases on
    /// the leader (renewing every one or two thirds of a TTL), and in most of those the
    /// first isolation of the leader lasts 6-9 s; in 40% the members checkpoint leases
    /// only every 5 minutes (none within the seed). In half the seeds with a membership
    /// client, the first isolation of the leader spares one follower, which a
    /// replacement then takes, while writes pile on the cut-off leader.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = SimRng::new(seed, 0x5ce);
        let plan = FaultPlan::from_seed(seed);
        let clients = rng.below(2..5) as usize;
        let keys = rng.below(3..6) as usize;
        // Drawn after the older choices, so that a seed keeps its clients and keys.
        let half_run = run_for(&plan).as_millis() as u64 / 2;
        let watchers = (0..rng.below(1..3))
            .map(|_| WatcherPlan {
                start_after: rng.millis(0, half_run),
                // Mostly the whole history: a watch opened late from revision 1 (or
                // from the compacted revision it is sent to) catches up while the
                // clients write, then joins the live feed.
                start_revision: if rng.percent(75) { 1 } else { 0 },
            })
            .collect();
        // Drawn after the older choices again.
        let leases = rng.below(4..8) as usize;
        // And again.
        let membership = if rng.percent(MEMBERSHIP_PERCENT) {
            membership_steps(&mut rng, run_for(&plan))
        } else {
            Vec::new()
        };
        // And again, only in seeds without a membership client: the others keep theirs.
        let auth = (membership.is_empty() && rng.percent(AUTH_PERCENT)).then(|| AuthPlan {
            users: rng.below(2..4) as usize,
            episodes: rng.below(3..6) as usize,
        });
        // And again.
        let raft_snapshot_count = rng.percent(RAFT_SNAPSHOT_PERCENT).then(|| rng.below(5..30));
        // And again.
        let lease_checkpoint_interval = if rng.percent(LONG_LEASE_CHECKPOINTS_PERCENT) {
            LEASE_CHECKPOINT_INTERVAL_LONG
        } else {
            LEASE_CHECKPOINT_INTERVAL
        };
        let leases_on_leader = rng.percent(LEASES_ON_LEADER_PERCENT);
        // And again, only in those seeds: a client that renews late, and a first
        // isolation of the leader that outlasts an election and the longest lease, so
        // that what a deposed leader promised outlives its successor's timers.
        let mut plan = plan;
        let mut renew_every_thirds = 1;
        if leases_on_leader {
            renew_every_thirds = rng.below(1..3);
            if rng.percent(LONG_ISOLATION_PERCENT) {
                plan.lengthen(&Fault::IsolateLeader, rng.millis(6_000, 9_000));
            }
        }
        // And again: in some seeds the first crash of the leader mid-write is a restart
        // at once, whose reset connections break the followers' forwarding streams with
        // writes sent and unanswered.
        if rng.percent(RESTART_MID_WRITE_PERCENT) {
            plan.replace(&Fault::CrashLeaderMidWrite, Fault::RestartLeaderMidWrite);
        }
        // And again: in most seeds that keep leases on the leader, the first isolation
        // of the leader comes right after a renewal, while the leader's last checkpoint
        // may still say less than it just promised.
        if leases_on_leader && rng.percent(ISOLATE_AFTER_RENEWAL_PERCENT) {
            plan.replace(&Fault::IsolateLeader, Fault::IsolateLeaderAfterRenewal);
        }
        // And again, only in seeds with a membership client: the first isolation of the
        // leader may spare one follower and last long, with writes piled on the cut-off
        // leader and, first of the client's steps, a replacement of the spared follower.
        let partial = !membership.is_empty()
            && plan.has(&Fault::IsolateLeader)
            && rng.percent(PARTIAL_ISOLATION_PERCENT);
        let mut membership = membership;
        if partial {
            plan.replace(&Fault::IsolateLeader, Fault::IsolateLeaderButOne);
            let (shortest, longest) = PARTIAL_ISOLATION;
            plan.lengthen(&Fault::IsolateLeaderButOne, rng.millis(shortest, longest));
            if let Some(at) = plan.starts_at(&Fault::IsolateLeaderButOne) {
                // First of the client's steps: the next one's pause counts from its end.
                membership.insert(
                    0,
                    MembershipStep {
                        after: at + REPLACE_AFTER_ISOLATION,
                        op: MembershipOp::Replace,
                    },
                );
            }
        }
        let strict_reconfig_check = !(partial && rng.percent(LAX_RECONFIG_PERCENT));
        Scenario {
            seed,
            plan,
            clients,
            keys,
            watchers,
            leases,
            membership,
            auth,
            raft_snapshot_count,
            lease_checkpoint_interval,
            leases_on_leader,
            renew_every_thirds,
            // A client that renews late keeps longer leases, as such clients do: the
            // gap between a renewal and the checkpoint before it can then exceed what
            // a new leader's election and a checkpoint's rounding up take.
            lease_ttl: if renew_every_thirds == 2 {
                (6, 10)
            } else {
                (3, 5)
            },
            lease_lapse: None,
            expiry_pause: Duration::ZERO,
            strict_reconfig_check,
            known: KnownIssues::of_this_server(),
            data_root: default_data_root(),
        }
    }

    /// Runs the seed to its verdict. Must not run inside a simulation.
    pub fn run(&self) -> SeedReport {
        let started = std::time::Instant::now();
        let mut report = SeedReport {
            seed: self.seed,
            plan: self.plan.clone(),
            membership: self.membership.clone(),
            clients: self.clients,
            watchers: self.watchers.len(),
            leases: 0,
            membership_changes: 0,
            auth_changes: 0,
            known: Vec::new(),
            faults: Vec::new(),
            injected: 0,
            operations: 0,
            unknown: 0,
            watch_events: 0,
            snapshots: 0,
            snapshots_failed: 0,
            violations: Vec::new(),
            trace: Vec::new(),
            trace_hash: 0,
            simulated: Duration::ZERO,
            real: Duration::ZERO,
        };
        let mut sim = crate::sim_builder(self.seed).build();
        let history = History::new();
        // A panic in a member (an assertion of the server's) fails the seed, not the
        // caller.
        let driven = panic::catch_unwind(AssertUnwindSafe(|| {
            self.drive(&mut sim, &history, &mut report)
        }));
        match driven {
            Ok(Ok(())) => {}
            Ok(Err(error)) => report
                .violations
                .push(format!("simulation failed: {error}")),
            Err(panicked) => {
                let message = panicked
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panicked.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                report.violations.push(format!("panicked: {message}"));
            }
        }
        let operations = history.operations();
        report.operations = operations.len();
        report.unknown = operations
            .iter()
            .filter(|op| matches!(op.outcome, Outcome::Unknown(_)))
            .count();
        let mut trace = history.trace();
        trace.extend(report.faults.iter().cloned());
        trace.append(&mut report.trace);
        trace.push(format!("ended at {:?}", sim.elapsed()));
        let mut hash = Fnv::new();
        for line in &trace {
            hash.bytes(line.as_bytes());
        }
        report.trace = trace;
        report.trace_hash = hash.finish();
        report.simulated = sim.elapsed();
        report.real = started.elapsed();
        report
    }

    /// Runs the seed's fault episodes through `injector`; `report` gets the faults as
    /// injected even when an episode fails.
    fn inject_faults(
        &self,
        sim: &mut turmoil::Sim<'_>,
        injector: &mut Injector<'_>,
        report: &mut SeedReport,
    ) -> Result<(), SimError> {
        let outcome = self
            .plan
            .episodes
            .iter()
            .try_for_each(|episode| injector.run_episode(sim, episode));
        report.faults = injector.log().to_vec();
        report.injected = injector.injected();
        outcome
    }

    /// Everything up to the verdict; digests go into `report.trace`, violations into
    /// `report.violations`. An error is a failure of the run itself.
    fn drive(
        &self,
        sim: &mut turmoil::Sim<'_>,
        history: &History,
        report: &mut SeedReport,
    ) -> Result<(), SimError> {
        let mut builder = SimCluster::builder()
            .nodes(self.plan.nodes)
            .seed(self.seed)
            .flag(format!(
                "--experimental-lease-checkpoint-interval={}s",
                self.lease_checkpoint_interval.as_secs()
            ));
        if self.auth.is_some() {
            builder = builder.flag(format!("--bcrypt-cost={BCRYPT_COST}"));
        }
        if let Some(count) = self.raft_snapshot_count {
            builder = builder.flag(format!("--snapshot-count={count}"));
        }
        if !self.strict_reconfig_check {
            builder = builder.flag("--strict-reconfig-check=false");
        }
        if let Some(root) = &self.data_root {
            builder = builder.data_root(root);
        }
        let cluster = builder.build(sim)?;
        // Every client takes its members from the directory: members added later are
        // reached too, and removed ones stay in the lists (as in a real client's).
        let directory = cluster.directory();
        let watch =
            LeaderWatch::start_in(sim, "watch", directory.clone(), Duration::from_millis(250));
        let leader = watch.clone();
        if !step_until(sim, Duration::from_secs(20), || leader.leader().is_some())? {
            return Err(SimError::Timeout("no leader within 20 s".into()));
        }
        if let Some(auth) = &self.auth {
            return self.drive_auth(sim, history, report, &cluster, watch, auth);
        }

        let writes = WritesInFlight::new();
        let finished = Rc::new(Cell::new(0usize));
        let run_for = run_for(&self.plan);
        for i in 0..self.clients {
            let name = format!("c{}", i + 1);
            let mixed = Mixed {
                keys: (0..self.keys).map(|k| format!("k{k}")).collect(),
                run_for,
                in_flight: writes.clone(),
                directory: Some(directory.clone()),
                ..Mixed::new(&name, cluster.endpoints(), mix(self.seed, 100 + i as u64))
            };
            let (history, finished) = (history.clone(), finished.clone());
            sim.client(name, async move {
                mixed.run(history).await?;
                finished.set(finished.get() + 1);
                Ok(())
            });
        }
        let watch_target = WatchTarget::new();
        let watchers_finished = Rc::new(Cell::new(0usize));
        let mut watch_logs = Vec::with_capacity(self.watchers.len());
        for (i, plan) in self.watchers.iter().enumerate() {
            let name = format!("watcher{}", i + 1);
            let watcher = WatchClient {
                prefix: "k".to_owned(),
                start_after: plan.start_after,
                start_revision: plan.start_revision,
                run_for,
                target: Some(watch_target.clone()),
                drain_for: WATCH_DRAIN,
                directory: Some(directory.clone()),
                ..WatchClient::new(&name, cluster.members(), mix(self.seed, 200 + i as u64))
            };
            let log = WatchLog::new(&name, &watcher.prefix);
            watch_logs.push(log.clone());
            let finished = watchers_finished.clone();
            sim.client(name, async move {
                watcher.run(log).await?;
                finished.set(finished.get() + 1);
                Ok(())
            });
        }

        let renewals = Renewals::new();
        let lease_client = LeaseClient {
            leases: self.leases,
            run_for,
            drain_for: LEASE_DRAIN,
            directory: Some(directory.clone()),
            pin_to_leader: self.leases_on_leader,
            renew_every_thirds: self.renew_every_thirds,
            renewals: renewals.clone(),
            ttl: self.lease_ttl,
            lapse: self.lease_lapse,
            ..LeaseClient::new("lease1", cluster.endpoints(), mix(self.seed, 300))
        };
        let lease_finished = Rc::new(Cell::new(false));
        let done = lease_finished.clone();
        let lease_history = history.clone();
        sim.client("lease1", async move {
            lease_client.run(lease_history).await?;
            done.set(true);
            Ok(())
        });

        let snapshot_log = SnapshotLog::new();
        let snapshot_finished = Rc::new(Cell::new(false));
        let snapshots = SnapshotClient {
            run_for,
            ..SnapshotClient::new("snap1", directory.clone(), mix(self.seed, 500))
        };
        let (log, done) = (snapshot_log.clone(), snapshot_finished.clone());
        sim.client("snap1", async move {
            snapshots.run(log).await?;
            done.set(true);
            Ok(())
        });

        // A partial isolation of the leader comes with writes piled on the leader it
        // cuts off and a replacement of the follower it spares (see
        // `Scenario::replacement_beside_a_deposed_leader`).
        let partial = PartialIsolation::new();
        let partially_isolated = self.plan.has(&Fault::IsolateLeaderButOne);
        if partially_isolated {
            let pileup = Pileup::new("pileup", directory.clone(), partial.clone(), PILEUP_WRITES);
            sim.client("pileup", async move {
                pileup.run().await?;
                Ok(())
            });
        }

        let membership_log = MembershipLog::new("membership");
        let membership_finished = Rc::new(Cell::new(self.membership.is_empty()));
        if !self.membership.is_empty() {
            let client = MembershipClient {
                steps: self.membership.clone(),
                joins: !self.known.joining_member_spins,
                replace_spared: partially_isolated.then(|| partial.clone()),
                ..MembershipClient::new(
                    "membership",
                    directory.clone(),
                    cluster.requests(),
                    mix(self.seed, 400),
                )
            };
            let (log, done) = (membership_log.clone(), membership_finished.clone());
            sim.client("membership", async move {
                client.run(log).await?;
                done.set(true);
                Ok(())
            });
        }

        let mut injector = Injector::new(&cluster, watch.clone(), writes, self.seed)
            .with_renewals(renewals)
            .with_partial_isolation(partial);
        self.inject_faults(sim, &mut injector, report)?;
        let healed_at = sim.elapsed();

        let clients = self.clients;
        let limit = run_for + Duration::from_secs(30);
        if !injector.step_until(sim, limit, || finished.get() == clients)? {
            return Err(SimError::Timeout(format!(
                "clients still running {limit:?} after the faults"
            )));
        }
        let snapshot_limit = Duration::from_secs(30);
        if !injector.step_until(sim, snapshot_limit, || snapshot_finished.get())? {
            return Err(SimError::Timeout(format!(
                "the snapshot client still running {snapshot_limit:?} after the writers"
            )));
        }
        let membership_limit = Duration::from_secs(90);
        if !injector.step_until(sim, membership_limit, || membership_finished.get())? {
            return Err(SimError::Timeout(format!(
                "the membership client still running {membership_limit:?} after the writers"
            )));
        }
        // The writers are done: each watcher stops once it delivered the last
        // acknowledged write (or after the drain, which the watch checker reports).
        let last_written = history
            .operations()
            .iter()
            .filter_map(Operation::written_revision)
            .max()
            .unwrap_or(0);
        watch_target.set(last_written);
        let watchers = self.watchers.len();
        let drain_limit = WATCH_DRAIN + Duration::from_secs(10);
        if !injector.step_until(sim, drain_limit, || watchers_finished.get() == watchers)? {
            return Err(SimError::Timeout(format!(
                "watch clients still running {drain_limit:?} after the writers"
            )));
        }
        // The lease client reads its keys until they are gone: leases kept alive to the
        // end, and any a leader change restarted, take their TTL after the faults.
        let lease_limit = LEASE_DRAIN + Duration::from_secs(10);
        if !injector.step_until(sim, lease_limit, || lease_finished.get())? {
            return Err(SimError::Timeout(format!(
                "the lease client still running {lease_limit:?} after the writers"
            )));
        }
        // Removed members stop on their own; give the last ones a moment.
        let removed_running = || directory.entries().iter().any(|e| !e.current && e.running);
        injector.step_until(sim, REMOVED_STOP, || !removed_running())?;
        // A removal whose answer was lost may be carried out after the membership
        // client's last look (a joint configuration a restarted leader left, finished by
        // its successor): a member that stopped on its own after its removal was asked
        // is taken as removed. Should the cluster still list it, membership-settled
        // says so (the list then names a member the cluster does not count).
        for entry in directory.entries() {
            if entry.current && !entry.running && entry.exit_expected && entry.exited_at.is_some() {
                directory.retire(&entry.name);
                membership_log.record(MembershipEntry::Note {
                    at: sim.elapsed(),
                    what: format!(
                        "{} stopped on its own after its removal was asked: removed after all",
                        entry.name
                    ),
                });
            }
        }
        let mut still_running: Vec<String> = directory
            .entries()
            .iter()
            .filter(|e| !e.current && e.running)
            .map(|e| format!("{}, a removed member, still runs at the end", e.name))
            .collect();
        still_running.extend(cluster.wiped_while_running().iter().map(|(name, at)| {
            format!(
                "{name}, a removed member, still ran at {:.3}s when its replacement wiped it",
                at.as_secs_f64()
            )
        }));
        // From here on no fault, and the leader the watch saw last has led since.
        let stable_since = healed_at.max(watch.last_change());
        watch.stop();

        let verdict = Rc::new(RefCell::new(None));
        let out = verdict.clone();
        let members = cluster.members();
        let operations = history.operations();
        let with_membership = !self.membership.is_empty();
        sim.client("checker", async move {
            let checked =
                checker::check_all(&members, &operations, 1, Duration::from_secs(30)).await;
            let lists = if with_membership {
                checker::await_member_lists(&members, Duration::from_secs(30)).await
            } else {
                Vec::new()
            };
            *out.borrow_mut() = Some((checked, lists));
            Ok(())
        });
        sim.run().map_err(|e| SimError::Simulation(e.to_string()))?;
        let Some(((digests, violations), lists)) = verdict.take() else {
            return Err(SimError::Simulation("the checker did not finish".into()));
        };
        report.trace.extend(digests.iter().map(ToString::to_string));
        report
            .violations
            .extend(violations.iter().map(ToString::to_string));
        report.trace.extend(watch_logs.iter().map(WatchLog::digest));
        report.watch_events = watch_logs.iter().map(WatchLog::events).sum();
        report.violations.extend(
            checker::check_watches(&watch_logs, &history.operations())
                .iter()
                .map(ToString::to_string),
        );
        let operations = history.operations();
        let fetched = snapshot_log.records();
        report.snapshots = fetched.iter().filter(|r| r.result.is_ok()).count();
        report.snapshots_failed = fetched.len() - report.snapshots;
        report.trace.extend(snapshot_log.trace());
        report.violations.extend(
            checker::check_snapshots(&fetched, &operations)
                .iter()
                .map(ToString::to_string),
        );
        report.trace.push(lease_digest("lease1", &operations));
        report.leases = operations
            .iter()
            .filter(|op| matches!(op.outcome, Outcome::Granted { .. }))
            .count();
        report.violations.extend(
            checker::check_leases(&operations, stable_since, self.expiry_pause)
                .iter()
                .map(ToString::to_string),
        );
        report
            .trace
            .push(format!("leases stable since {stable_since:?}"));
        if with_membership {
            report.trace.extend(membership_log.trace());
            report.trace.push(membership_log.digest());
            report.membership_changes = membership_log.changes().len();
            let facts = checker::MembershipFacts {
                lists,
                still_running,
            };
            for violation in checker::check_membership(&membership_log, &operations, &facts) {
                if self.known.excuses(violation.property) {
                    report.known.push(violation.to_string());
                } else {
                    report.violations.push(violation.to_string());
                }
            }
        }
        Ok(())
    }
}

/// One line for a seed's trace: what the lease client `name` did, by kind and answer.
fn lease_digest(name: &str, operations: &[Operation]) -> String {
    let mine = || operations.iter().filter(|op| op.client == name);
    let count = |f: &dyn Fn(&Operation) -> bool| mine().filter(|op| f(op)).count();
    let mut hash = Fnv::new();
    for op in mine() {
        hash.bytes(op.to_string().as_bytes());
    }
    format!(
        "{name}: {} leases granted, {} keepalives ({} alive, {} gone), {} revokes, {} reads \
         ({} found gone), hash {:016x}",
        count(&|op| matches!(op.outcome, Outcome::Granted { .. })),
        count(&|op| matches!(op.op, Op::LeaseKeepAlive { .. })),
        count(&|op| matches!(op.outcome, Outcome::KeptAlive { ttl } if ttl > 0)),
        count(&|op| matches!(op.outcome, Outcome::KeptAlive { ttl: 0 })),
        count(&|op| matches!(op.op, Op::LeaseRevoke { .. })),
        count(&|op| matches!(op.op, Op::Get { .. })),
        count(&|op| matches!(op.outcome, Outcome::Read { value: None, .. })),
        hash.finish()
    )
}

/// One watch client of a seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatcherPlan {
    /// When it opens its watch, after the clients start.
    pub start_after: Duration,
    /// Where its first watch starts: 1 (the whole history) or 0 ("now").
    pub start_revision: i64,
}

/// A membership client's plan: two to four operations spread over the run, at least
/// one of them a removal (a removed member is what most can go wrong with).
fn membership_steps(rng: &mut SimRng, run_for: Duration) -> Vec<MembershipStep> {
    use MembershipOp as Op;
    let kinds = [
        Op::AddLearner,
        Op::AddVoter,
        Op::RemoveFollower,
        Op::RemoveLeader,
        Op::Replace,
        Op::MoveLeader,
        Op::UpdatePeerUrl,
    ];
    let count = rng.below(2..5) as usize;
    let spread = run_for.as_millis() as u64 / (count as u64 + 1);
    let mut steps: Vec<MembershipStep> = (0..count)
        .map(|_| MembershipStep {
            after: rng.millis(spread / 2, spread.max(spread / 2 + 1)),
            op: kinds[rng.weighted(&[20, 15, 15, 12, 15, 13, 10])],
        })
        .collect();
    let removes = |op: &Op| matches!(op, Op::RemoveFollower | Op::RemoveLeader | Op::Replace);
    if !steps.iter().any(|s| removes(&s.op)) {
        let last = steps.len() - 1;
        steps[last].op = [Op::RemoveFollower, Op::RemoveLeader, Op::Replace][rng.index(3)];
    }
    steps
}

/// How long a seed's clients run: through its faults, and a second more.
fn run_for(plan: &FaultPlan) -> Duration {
    plan.duration() + Duration::from_secs(1)
}

/// tmpfs when there is one: members fsync on every append.
pub fn default_data_root() -> Option<PathBuf> {
    let shm = PathBuf::from("/dev/shm");
    shm.is_dir().then_some(shm)
}
