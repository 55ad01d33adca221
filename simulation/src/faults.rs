//! Faults a seed chooses, and their injection into a running simulation.
//!
//! This module owns [`FaultPlan`] (what one seed does to a cluster: its size and a few
//! episodes, each a quiet gap, one or two [`Fault`]s, an outage, then healing) and
//! [`Injector`] (turns an
//! episode into [`SimCluster`] calls between simulation steps and logs each one with
//! its simulated time and its resolved target). It must never check results and never
//! run a workload; which member a role names is decided when the fault is injected,
//! by the seed and what the leader watch (`leaders::LeaderWatch`) saw, so a replay of the seed resolves it the same
//! way.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use crate::cluster::SimCluster;
use crate::error::SimError;
use crate::leaders::{LeaderWatch, PartialIsolation};
use crate::rng::SimRng;
use crate::workload::{Renewals, WritesInFlight};

/// Which member a fault aims at, resolved when it is injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The leader as the watch last saw it (any running member while none is known).
    Leader,
    /// A running member other than the leader, chosen by the seed.
    Follower,
    /// Any running member, chosen by the seed.
    Any,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Any => "member",
        })
    }
}

/// One fault; it lasts until the end of its episode unless it says otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Cut the leader off from every other member (its clients still reach it).
    IsolateLeader,
    /// Split the members in two: a seed-chosen minority (1 of 3, 2 of 5) against the
    /// rest. The leader may be on either side.
    Split,
    /// Drop the leader's messages to one follower; the follower's still arrive.
    OneWayFromLeader,
    /// The member hears no other member; they all still hear it.
    Deafen(Role),
    /// Crash the member (its in-memory state is lost, its data kept); it restarts at
    /// the end of the episode.
    Crash(Role),
    /// Crash the leader while a client write is in flight, a seed-chosen number of
    /// milliseconds after the watch saw one start; it restarts at the end of the
    /// episode.
    CrashLeaderMidWrite,
    /// Restart the leader at once while a client write is in flight (as
    /// `CrashLeaderMidWrite` times it): its connections reset, so a follower's
    /// forwarding stream breaks with writes sent and unanswered. Never drawn by
    /// [`FaultPlan::from_seed`]; a scenario puts it in place of a crash mid-write.
    RestartLeaderMidWrite,
    /// Cut the leader off (as `IsolateLeader`) right after a lease keepalive is answered
    /// (within three seconds of the fault's turn): what the leader just promised
    /// outlives its leadership. Never drawn by [`FaultPlan::from_seed`]; a scenario
    /// puts it in place of an isolation of the leader.
    IsolateLeaderAfterRenewal,
    /// Cut the leader off from every member but one seed-chosen follower (a partial
    /// partition): the others elect a successor, whose first message to the spared
    /// follower deposes the old leader there, and the old leader keeps what it appended
    /// alone. Never drawn by [`FaultPlan::from_seed`]; a scenario puts it in place of
    /// an isolation, and then also piles writes on the leader it cuts off and replaces
    /// the follower it spares, learning who they are from [`PartialIsolation`].
    IsolateLeaderButOne,
    /// Restart the member at once: in-memory state lost, no outage.
    Restart(Role),
    /// Crash the fewest members that take the quorum away (2 of 3, 3 of 5, 1 of a
    /// cluster shrunk to 2), the leader among them: no quorum until they
    /// restart at the end of the episode.
    CrashMajority,
    /// Every message to or from the member takes `latency`: a slow machine.
    Slow { role: Role, latency: Duration },
    /// Messages between members take up to `max` and overtake one another.
    Delay { max: Duration },
    /// The member's links lose each message with probability `per_mille` / 1000.
    Loss { role: Role, per_mille: u32 },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::IsolateLeader => write!(f, "isolate leader"),
            Fault::Split => write!(f, "split minority/majority"),
            Fault::OneWayFromLeader => write!(f, "one-way cut leader->follower"),
            Fault::Deafen(role) => write!(f, "deafen {role}"),
            Fault::Crash(role) => write!(f, "crash {role}"),
            Fault::CrashLeaderMidWrite => write!(f, "crash leader mid-write"),
            Fault::RestartLeaderMidWrite => write!(f, "restart leader mid-write"),
            Fault::IsolateLeaderAfterRenewal => write!(f, "isolate leader after a renewal"),
            Fault::IsolateLeaderButOne => write!(f, "isolate leader but from one follower"),
            Fault::Restart(role) => write!(f, "restart {role}"),
            Fault::CrashMajority => write!(f, "crash majority"),
            Fault::Slow { role, latency } => write!(f, "slow {role} {}ms", latency.as_millis()),
            Fault::Delay { max } => write!(f, "delay members up to {}ms", max.as_millis()),
            Fault::Loss { role, per_mille } => {
                write!(f, "loss {}.{}% on {role}", per_mille / 10, per_mille % 10)
            }
        }
    }
}

/// A quiet `gap`, then `faults` at once, which last `outage`, then healing: every cut
/// repaired, every latency and loss back to normal, every crashed member restarted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Episode {
    pub gap: Duration,
    pub faults: Vec<Fault>,
    pub outage: Duration,
}

/// What one seed does to a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultPlan {
    /// Cluster size: 3 or 5.
    pub nodes: usize,
    pub episodes: Vec<Episode>,
}

impl FaultPlan {
    /// The plan of `seed`: 3 or 5 members, two to four episodes of mixed faults.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = SimRng::new(seed, 0xfa17);
        let nodes = if rng.percent(50) { 3 } else { 5 };
        let episodes = (0..rng.below(2..5))
            .map(|_| {
                let gap = rng.millis(300, 1500);
                let mut faults = vec![any_fault(&mut rng)];
                if rng.percent(25) {
                    faults.push(network_fault(&mut rng));
                }
                let outage = rng.millis(1000, 4000);
                Episode {
                    gap,
                    faults,
                    outage,
                }
            })
            .collect();
        FaultPlan { nodes, episodes }
    }

    /// True if some episode of the plan has `fault`.
    pub fn has(&self, fault: &Fault) -> bool {
        self.episodes.iter().any(|e| e.faults.contains(fault))
    }

    /// Puts `with` in place of the first `fault` of the plan; false if it has none.
    pub fn replace(&mut self, fault: &Fault, with: Fault) -> bool {
        let first = self
            .episodes
            .iter_mut()
            .flat_map(|e| e.faults.iter_mut())
            .find(|f| *f == fault);
        match first {
            Some(found) => {
                *found = with;
                true
            }
            None => false,
        }
    }

    /// Makes the first episode that has `fault` last `outage`; false if none has it.
    pub fn lengthen(&mut self, fault: &Fault, outage: Duration) -> bool {
        match self.episodes.iter_mut().find(|e| e.faults.contains(fault)) {
            Some(episode) => {
                episode.outage = outage;
                true
            }
            None => false,
        }
    }

    /// When the first episode with `fault` injects it, counted from the plan's start
    /// (before the injector resolves its target); `None` if no episode has it.
    pub fn starts_at(&self, fault: &Fault) -> Option<Duration> {
        let mut at = Duration::ZERO;
        for episode in &self.episodes {
            if episode.faults.contains(fault) {
                return Some(at + episode.gap);
            }
            at += episode.gap + episode.outage;
        }
        None
    }

    /// How many faults the plan injects.
    pub fn faults(&self) -> usize {
        self.episodes.iter().map(|e| e.faults.len()).sum()
    }

    /// Simulated time from the first gap to the last healing.
    pub fn duration(&self) -> Duration {
        self.episodes.iter().map(|e| e.gap + e.outage).sum()
    }
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} members", self.nodes)?;
        for episode in &self.episodes {
            let faults: Vec<String> = episode.faults.iter().map(ToString::to_string).collect();
            write!(
                f,
                "; after {}ms: {} for {}ms",
                episode.gap.as_millis(),
                faults.join(" + "),
                episode.outage.as_millis()
            )?;
        }
        Ok(())
    }
}

fn any_fault(rng: &mut SimRng) -> Fault {
    match rng.weighted(&[12, 10, 8, 6, 8, 8, 12, 6, 4, 30]) {
        0 => Fault::IsolateLeader,
        1 => Fault::Split,
        2 => Fault::OneWayFromLeader,
        3 => Fault::Deafen(Role::Follower),
        4 => Fault::Crash(Role::Leader),
        5 => Fault::Crash(Role::Follower),
        6 => Fault::CrashLeaderMidWrite,
        7 => Fault::Restart(Role::Any),
        8 => Fault::CrashMajority,
        _ => network_fault(rng),
    }
}

/// A fault of the network's quality rather than its shape.
fn network_fault(rng: &mut SimRng) -> Fault {
    let role = if rng.percent(40) {
        Role::Leader
    } else {
        Role::Follower
    };
    match rng.weighted(&[4, 3, 3]) {
        0 => Fault::Slow {
            role,
            latency: rng.millis(20, 150),
        },
        1 => Fault::Delay {
            max: rng.millis(30, 150),
        },
        _ => Fault::Loss {
            role,
            per_mille: rng.below(1..11) as u32,
        },
    }
}

/// Steps `sim` for `duration` of simulated time.
pub fn step_for(sim: &mut turmoil::Sim<'_>, duration: Duration) -> Result<(), SimError> {
    step_for_by(sim, duration, step)
}

fn step_for_by(
    sim: &mut turmoil::Sim<'_>,
    duration: Duration,
    mut step: impl FnMut(&mut turmoil::Sim<'_>) -> Result<(), SimError>,
) -> Result<(), SimError> {
    let until = sim.elapsed() + duration;
    while sim.elapsed() < until {
        step(sim)?;
    }
    Ok(())
}

/// Steps `sim` until `done` holds or `limit` of simulated time passes; returns
/// whether `done` held.
pub fn step_until(
    sim: &mut turmoil::Sim<'_>,
    limit: Duration,
    done: impl FnMut() -> bool,
) -> Result<bool, SimError> {
    step_until_by(sim, limit, done, step)
}

fn step_until_by(
    sim: &mut turmoil::Sim<'_>,
    limit: Duration,
    mut done: impl FnMut() -> bool,
    mut step: impl FnMut(&mut turmoil::Sim<'_>) -> Result<(), SimError>,
) -> Result<bool, SimError> {
    let until = sim.elapsed() + limit;
    while !done() {
        if sim.elapsed() >= until {
            return Ok(false);
        }
        step(sim)?;
    }
    Ok(true)
}

fn step(sim: &mut turmoil::Sim<'_>) -> Result<(), SimError> {
    sim.step()
        .map(|_| ())
        .map_err(|e| SimError::Simulation(e.to_string()))
}

/// Injects a [`FaultPlan`]'s episodes into a simulation, one at a time, between
/// steps, and logs what it did.
pub struct Injector<'c> {
    cluster: &'c SimCluster,
    watch: LeaderWatch,
    writes: WritesInFlight,
    renewals: Renewals,
    partial: PartialIsolation,
    rng: SimRng,
    /// Members crashed and not yet restarted.
    down: BTreeSet<String>,
    log: Vec<String>,
    injected: usize,
}

impl<'c> Injector<'c> {
    /// An injector for `cluster`, aiming with `watch`, timing mid-write crashes with
    /// `writes`, choosing targets with `seed`.
    pub fn new(
        cluster: &'c SimCluster,
        watch: LeaderWatch,
        writes: WritesInFlight,
        seed: u64,
    ) -> Self {
        Injector {
            cluster,
            watch,
            writes,
            renewals: Renewals::new(),
            partial: PartialIsolation::new(),
            rng: SimRng::new(seed, 0x1a7e),
            down: BTreeSet::new(),
            log: Vec::new(),
            injected: 0,
        }
    }

    /// Times isolations after a renewal with the lease client's `renewals`.
    pub fn with_renewals(mut self, renewals: Renewals) -> Self {
        self.renewals = renewals;
        self
    }

    /// Tells `partial` whom each [`Fault::IsolateLeaderButOne`] cut off and spared.
    pub fn with_partial_isolation(mut self, partial: PartialIsolation) -> Self {
        self.partial = partial;
        self
    }

    /// Runs `episode`: steps through its gap, injects its faults, steps through its
    /// outage, heals.
    pub fn run_episode(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        episode: &Episode,
    ) -> Result<(), SimError> {
        self.step_for(sim, episode.gap)?;
        for fault in &episode.faults {
            self.inject(sim, fault)?;
        }
        self.step_for(sim, episode.outage)?;
        self.heal(sim)
    }

    /// [`step_for`], serving the cluster's host requests (members joining, data
    /// wiped) after every step.
    pub fn step_for(&self, sim: &mut turmoil::Sim<'_>, duration: Duration) -> Result<(), SimError> {
        step_for_by(sim, duration, |sim| self.step(sim))
    }

    /// [`step_until`], serving the cluster's host requests after every step.
    pub fn step_until(
        &self,
        sim: &mut turmoil::Sim<'_>,
        limit: Duration,
        done: impl FnMut() -> bool,
    ) -> Result<bool, SimError> {
        step_until_by(sim, limit, done, |sim| self.step(sim))
    }

    fn step(&self, sim: &mut turmoil::Sim<'_>) -> Result<(), SimError> {
        step(sim)?;
        self.cluster.serve_requests(sim);
        Ok(())
    }

    /// Undoes every fault: repairs cuts, restores latency and loss, restarts crashed
    /// members (a removed one too: it must find out, and stop; one whose data was
    /// wiped only joins again as a new member).
    pub fn heal(&mut self, sim: &mut turmoil::Sim<'_>) -> Result<(), SimError> {
        self.cluster.heal_all(sim);
        self.note(sim, "heal network".to_owned());
        for name in std::mem::take(&mut self.down) {
            if self.cluster.is_wiped(&name) {
                continue;
            }
            self.cluster.restart(sim, &name)?;
            self.note(sim, format!("restart {name}"));
        }
        Ok(())
    }

    /// What the injector did, one line per action, stamped with simulated time.
    pub fn log(&self) -> &[String] {
        &self.log
    }

    /// Faults injected so far.
    pub fn injected(&self) -> usize {
        self.injected
    }

    /// Injects one fault now (a mid-write crash first waits for a write).
    pub fn inject(&mut self, sim: &mut turmoil::Sim<'_>, fault: &Fault) -> Result<(), SimError> {
        match self.inject_one(sim, fault) {
            // Membership changes may have left a single member, or every member may
            // be down (a one-member cluster's crash): nothing to aim at.
            Err(SimError::Invalid(why)) if why == NO_FOLLOWER || why == ALL_DOWN => {
                self.injected -= 1;
                self.note(sim, format!("skip {fault}: {why}"));
                Ok(())
            }
            other => other,
        }
    }

    fn inject_one(&mut self, sim: &mut turmoil::Sim<'_>, fault: &Fault) -> Result<(), SimError> {
        self.injected += 1;
        let cluster = self.cluster;
        match fault {
            Fault::IsolateLeader => {
                let leader = self.resolve(sim, Role::Leader)?;
                cluster.isolate(sim, &leader)?;
                self.note(sim, format!("isolate {leader} (leader)"));
            }
            Fault::IsolateLeaderAfterRenewal => {
                let leader = self.resolve(sim, Role::Leader)?;
                let renewals = self.renewals.clone();
                let seen = renewals.get();
                let renewed =
                    self.step_until(sim, Duration::from_secs(3), || renewals.get() > seen)?;
                cluster.isolate(sim, &leader)?;
                let note = match renewed {
                    true => format!("isolate {leader} (leader) right after a renewal"),
                    false => format!("isolate {leader} (leader), no renewal within 3s"),
                };
                self.note(sim, note);
            }
            Fault::IsolateLeaderButOne => {
                let leader = self.resolve(sim, Role::Leader)?;
                let spared = self.follower_of(&leader)?;
                for other in cluster.names() {
                    if other != leader && other != spared {
                        cluster.partition(sim, &leader, &other)?;
                    }
                }
                self.partial.note(&leader, &spared);
                self.note(sim, format!("isolate {leader} (leader) but from {spared}"));
            }
            Fault::Split => {
                let mut members = self.running();
                self.rng.shuffle(&mut members);
                let side: Vec<String> = members
                    .into_iter()
                    .take(cluster.names().len() / 2)
                    .collect();
                cluster.split(sim, &side)?;
                let leader = self.watch.leader().unwrap_or_default();
                self.note(
                    sim,
                    format!("split {side:?} from the rest (leader {leader})"),
                );
            }
            Fault::OneWayFromLeader => {
                let leader = self.resolve(sim, Role::Leader)?;
                let follower = self.follower_of(&leader)?;
                cluster.partition_oneway(sim, &leader, &follower)?;
                self.note(sim, format!("cut {leader} (leader) -> {follower} one way"));
            }
            Fault::Deafen(role) => {
                let deaf = self.resolve(sim, *role)?;
                for other in cluster.names().iter().filter(|n| **n != deaf) {
                    cluster.partition_oneway(sim, other, &deaf)?;
                }
                self.note(sim, format!("deafen {deaf} ({role})"));
            }
            Fault::Crash(role) => {
                let victim = self.resolve(sim, *role)?;
                cluster.crash(sim, &victim)?;
                self.down.insert(victim.clone());
                self.note(sim, format!("crash {victim} ({role})"));
            }
            Fault::CrashLeaderMidWrite | Fault::RestartLeaderMidWrite => {
                let leader = self.resolve(sim, Role::Leader)?;
                let writes = self.writes.clone();
                let started = self.step_until(sim, Duration::from_secs(3), || writes.get() > 0)?;
                let extra = self.rng.below(0..16);
                let mut waited = 0;
                while waited < extra && writes.get() > 0 {
                    self.step(sim)?;
                    waited += 1;
                }
                let act = if *fault == Fault::RestartLeaderMidWrite {
                    cluster.restart(sim, &leader)?;
                    "restart at once"
                } else {
                    cluster.crash(sim, &leader)?;
                    self.down.insert(leader.clone());
                    "crash"
                };
                let note = if started {
                    format!(
                        "{act} {leader} (leader) {waited} ticks into a write, {} in flight",
                        writes.get()
                    )
                } else {
                    format!("{act} {leader} (leader), no write started within 3s")
                };
                self.note(sim, note);
            }
            Fault::CrashMajority => {
                let leader = self.resolve(sim, Role::Leader)?;
                let mut others: Vec<String> = self
                    .running()
                    .into_iter()
                    .filter(|n| *n != leader)
                    .collect();
                self.rng.shuffle(&mut others);
                // The fewest crashes that leave no quorum: 2 of 3, 3 of 5, and 1 of a
                // cluster that membership changes shrank to 2 (crashing both would
                // leave nothing running for the faults that follow).
                let members = cluster.names().len();
                let quorum = members / 2 + 1;
                let mut victims = vec![leader];
                victims.extend(others.into_iter().take(members - quorum));
                for victim in &victims {
                    cluster.crash(sim, victim)?;
                    self.down.insert(victim.clone());
                }
                self.note(sim, format!("crash {victims:?} (leader first)"));
            }
            Fault::Restart(role) => {
                let member = self.resolve(sim, *role)?;
                cluster.restart(sim, &member)?;
                self.note(sim, format!("restart {member} ({role}) at once"));
            }
            Fault::Slow { role, latency } => {
                let member = self.resolve(sim, *role)?;
                cluster.slow(sim, &member, *latency)?;
                self.note(
                    sim,
                    format!("slow {member} ({role}) to {}ms", latency.as_millis()),
                );
            }
            Fault::Delay { max } => {
                cluster.delay(sim, *max);
                self.note(sim, format!("delay members up to {}ms", max.as_millis()));
            }
            Fault::Loss { role, per_mille } => {
                let member = self.resolve(sim, *role)?;
                cluster.lossy(sim, &member, f64::from(*per_mille) / 1000.0)?;
                self.note(sim, format!("loss {per_mille}/1000 on {member} ({role})"));
            }
        }
        Ok(())
    }

    /// The member `role` names now. For the leader, waits (up to three seconds) for a
    /// fresh poll of the watch first.
    fn resolve(&mut self, sim: &mut turmoil::Sim<'_>, role: Role) -> Result<String, SimError> {
        let leader = if role == Role::Any {
            None
        } else {
            let polls = self.watch.polls();
            let watch = self.watch.clone();
            self.step_until(sim, Duration::from_secs(3), || watch.polls() > polls)?;
            let members = self.cluster.names();
            self.watch
                .leader()
                .filter(|l| !self.down.contains(l) && members.contains(l))
        };
        match (role, leader) {
            (Role::Leader, Some(leader)) => Ok(leader),
            (Role::Follower, Some(leader)) => self.follower_of(&leader),
            _ => {
                let running = self.running();
                self.rng
                    .pick(&running)
                    .cloned()
                    .ok_or_else(|| SimError::Invalid(ALL_DOWN.into()))
            }
        }
    }

    /// A seed-chosen running member other than `leader`.
    fn follower_of(&mut self, leader: &str) -> Result<String, SimError> {
        let followers: Vec<String> = self.running().into_iter().filter(|n| n != leader).collect();
        self.rng
            .pick(&followers)
            .cloned()
            .ok_or_else(|| SimError::Invalid(NO_FOLLOWER.into()))
    }

    fn running(&self) -> Vec<String> {
        self.cluster
            .names()
            .into_iter()
            .filter(|n| !self.down.contains(n))
            .collect()
    }

    fn note(&mut self, sim: &turmoil::Sim<'_>, what: String) {
        let line = format!("[{:>8.3}s] {what}", sim.elapsed().as_secs_f64());
        tracing::info!("fault: {line}");
        self.log.push(line);
    }
}

/// Why a fault aimed at a follower found none (a cluster shrunk to one member).
const NO_FOLLOWER: &str = "no running follower";

/// Why a fault aimed at any member found none running.
const ALL_DOWN: &str = "every member is down";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_repeat_and_vary() {
        assert_eq!(FaultPlan::from_seed(5), FaultPlan::from_seed(5));
        let plans: Vec<FaultPlan> = (0..200).map(FaultPlan::from_seed).collect();
        assert!(plans.iter().any(|p| p.nodes == 3) && plans.iter().any(|p| p.nodes == 5));
        let kinds: BTreeSet<String> = plans
            .iter()
            .flat_map(|p| p.episodes.iter().flat_map(|e| e.faults.iter()))
            .map(|f| {
                f.to_string()
                    .split(' ')
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        assert!(kinds.len() >= 10, "{kinds:?}");
        for plan in &plans {
            assert!((2..=4).contains(&plan.episodes.len()));
            assert!(plan.duration() <= Duration::from_secs(4 * 6));
        }
    }
}
