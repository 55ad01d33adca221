//! The planted-bug (mutation) coverage of the simulation: for every bug that
//! `quantykube::planted` can plant, the safety check it removes or weakens, the checkers
//! that must report it, and the fixed seeds it runs on: the fewest that catch it.
//!
//! [`run`] plants one bug, runs its seeds in order until a named checker reports it and
//! says which one at which seed, or that none did; [`search`] tries a range of seeds
//! instead, to find the seed to list for a new bug. `tests/planted/main.rs` fails on any
//! bug missed and `examples/mutants.rs` prints the report. Both share this file, since
//! only the test and example builds enable the `planted-bugs` switches. Nothing here may
//! leave a bug planted once it returns: the switches are process-wide.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use quantykube::planted::{self, PlantedBug};
use quantykube_raft::planted::RaftBug;
use quantykube_simulation::scenario::Scenario;
use quantykube_simulation::Fault;

/// One planted bug and how the simulation must catch it.
pub struct Mutant {
    pub bug: PlantedBug,
    /// The safety check the bug removes or weakens, as docs/simulation.md's inventory
    /// names it.
    pub check: &'static str,
    /// The properties whose violation counts as catching it: the checkers meant to.
    pub caught_by: &'static [&'static str],
    /// The seeds it runs on, in order, until one catches it.
    pub seeds: &'static [u64],
    /// Which seeds can show it at all (for [`search`]).
    pub shows: fn(&Scenario) -> bool,
    /// If set, its seeds run this scenario aimed at the check instead of their own.
    pub targeted: Option<Targeted>,
}

/// A scenario aimed at one check (`Scenario`'s targeted constructors), and the
/// conditions it needs planted: with the bug, and alone when its seed runs clean.
pub struct Targeted {
    pub scenario: fn(u64) -> Scenario,
    pub with: &'static [PlantedBug],
}

impl Mutant {
    /// What `seed` runs for this mutant: its own scenario, or the targeted one.
    pub fn scenario(&self, seed: u64) -> Scenario {
        match &self.targeted {
            Some(targeted) => (targeted.scenario)(seed),
            None => Scenario::from_seed(seed),
        }
    }

    /// The conditions planted with the bug, and without it in a clean run.
    fn conditions(&self) -> &'static [PlantedBug] {
        self.targeted.as_ref().map_or(&[], |targeted| targeted.with)
    }
}

/// What running a mutant's seeds came to.
pub struct Verdict {
    /// The seed and the violation (`property violated: detail`) that caught it.
    pub caught: Option<(u64, String)>,
    /// Seeds run.
    pub seeds_run: usize,
    /// Other properties violated on the way, each with the first seed that did.
    pub others: BTreeMap<String, u64>,
    pub real: Duration,
}

/// The member `n2` of every simulated cluster, as the server identifies it.
fn n2() -> u64 {
    quantykube::identity::member_id(&["http://n2:2380".to_owned()], "quantykube-simulation")
}

fn any(_: &Scenario) -> bool {
    true
}

fn with_membership(s: &Scenario) -> bool {
    !s.membership.is_empty()
}

fn with_auth(s: &Scenario) -> bool {
    s.auth.is_some()
}

/// A lease client that keeps its leases on the leader, timed from the leader's
/// election (no checkpoint within the seed): a deposed leader's promise outlives its
/// successor's timer.
fn leases_on_leader_without_checkpoints(s: &Scenario) -> bool {
    s.auth.is_none() && s.leases_on_leader && s.lease_checkpoint_interval.as_secs() > 60
}

/// A lease client that keeps its leases on the leader while the leader checkpoints
/// them often, and an isolation of the leader right after a renewal: a new leader
/// resumes from what the last checkpoint says is left.
fn leases_on_leader_with_checkpoints(s: &Scenario) -> bool {
    s.auth.is_none()
        && s.leases_on_leader
        && s.lease_checkpoint_interval.as_secs() <= 60
        && s.plan.has(&Fault::IsolateLeaderAfterRenewal)
}

/// A restart of the leader at once mid-write: followers' forwarding streams break with
/// writes sent and unanswered.
fn restarts_leader_mid_write(s: &Scenario) -> bool {
    s.plan.has(&Fault::RestartLeaderMidWrite)
}

/// `seed`'s scenario with an expiry decided by a leader deposed before it proposes it;
/// the expiry pause it needs is planted with the bug.
fn deposed_leaders_expiry(seed: u64) -> Scenario {
    Scenario::deposed_leaders_expiry(seed, planted::EXPIRY_PAUSE)
}

/// Members that take raft snapshots often, so that one behind installs one while the
/// clients read, watch and take backups.
fn with_raft_snapshots(s: &Scenario) -> bool {
    s.raft_snapshot_count.is_some()
}

/// What the linearizability checker reports.
const LINEARIZABLE: &[&str] = &["linearizability"];

/// Every planted bug that a seed catches, with the check it stands for and those seeds.
pub fn all() -> Vec<Mutant> {
    vec![
        Mutant {
            bug: PlantedBug::LocalLinearizableReads,
            check: "linearizable reads wait for a read index",
            caught_by: LINEARIZABLE,
            seeds: &[1],
            shows: any,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::AckBeforeCommit,
            check: "a write is acknowledged only once committed and applied",
            caught_by: LINEARIZABLE,
            seeds: &[1],
            shows: any,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::DoubleApply { member: n2() },
            check: "each entry is applied once (its data and applied log id in one WriteBatch)",
            caught_by: &["convergence"],
            seeds: &[1],
            shows: any,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::WatchDropsEventOnRejoin,
            check: "the watch feed's gap detection and the history rejoin",
            caught_by: &["watch-reliable"],
            seeds: &[1],
            shows: any,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::LeaseExpiresEarly,
            check: "the lessor times a lease for its whole TTL",
            caught_by: &["lease-safety"],
            seeds: &[1],
            shows: any,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::RemovedMemberServes,
            check: "a removed member stops serving",
            caught_by: &["removed-member-stops"],
            seeds: &[7],
            shows: with_membership,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::SnapshotSkipsVersion,
            check: "the snapshot export writes every version",
            caught_by: &["snapshot-history"],
            seeds: &[1],
            shows: any,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::MemberMisplacesPuts { member: n2() },
            check: "every member applies a command the same way",
            caught_by: &["hashkv-agreement"],
            seeds: &[1],
            shows: any,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::StaleAuthRevision,
            check: "a command authorised at an older auth revision is authorised again",
            caught_by: &["auth-revoked-used"],
            // 21 until issue 51's refactor moved the server's tasks and relays, which
            // changed every seed's schedule; `mutants --search` found 24 next.
            seeds: &[24],
            shows: with_auth,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::CompactionOvershoots,
            check: "compaction keeps the compacted revision's history",
            caught_by: &["durability"],
            seeds: &[1],
            shows: any,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::KeepaliveWithoutQuorum,
            check: "a keepalive's quorum confirmation",
            caught_by: &["lease-safety"],
            seeds: &[152],
            shows: leases_on_leader_without_checkpoints,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::KeepaliveKeepsCheckpoint,
            check: "the checkpoint reset before a whole-TTL promise",
            caught_by: &["lease-safety"],
            seeds: &[90],
            shows: leases_on_leader_with_checkpoints,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::Raft(RaftBug::ReadSkipsApplyWait),
            check: "a member waits for apply to reach the read index",
            caught_by: LINEARIZABLE,
            seeds: &[3],
            shows: any,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::Raft(RaftBug::ReadTakesEarlierRound),
            check: "read-index rounds start after the reads they serve",
            caught_by: LINEARIZABLE,
            seeds: &[1],
            shows: any,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::Raft(RaftBug::ForwarderRetriesLostWrites),
            check: "the forwarder retries a write only when certainly not sent",
            caught_by: LINEARIZABLE,
            seeds: &[44],
            shows: restarts_leader_mid_write,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::Raft(RaftBug::LeaderServesRemovedSenders),
            check: "the leader refuses a removed member's read indexes and forwarded writes",
            caught_by: &["removed-member-acked"],
            seeds: &[7],
            shows: with_membership,
            targeted: None,
        },
        Mutant {
            bug: PlantedBug::InstallWithoutGate,
            check: "snapshot install is atomic for readers",
            caught_by: &["member-monotonic"],
            // 19 until issue 51's refactor changed the schedules; `mutants --search`
            // found 54 next, which passes with the pause and without the bug.
            seeds: &[54],
            shows: with_raft_snapshots,
            // The seed's own scenario; the install pauses with the store emptied, as
            // the real server's install on the blocking pool lets readers in.
            targeted: Some(Targeted {
                scenario: Scenario::from_seed,
                with: &[PlantedBug::PausedSnapshotInstall],
            }),
        },
        Mutant {
            bug: PlantedBug::ExpiryIgnoresTerm,
            check: "an expiry applies only in its leader's term",
            caught_by: &["lease-safety"],
            seeds: &[1],
            shows: any,
            targeted: Some(Targeted {
                scenario: deposed_leaders_expiry,
                with: &[PlantedBug::PausedExpiryProposals],
            }),
        },
        Mutant {
            bug: PlantedBug::JoinerIgnoresRemovals,
            check: "a joiner never takes an id any peer reports removed",
            // Under the removed id no member talks to the joiner: it never publishes,
            // so it answers no MemberList and the list keeps a member never started.
            caught_by: &["member-list-agreement", "membership-settled"],
            seeds: &[1],
            shows: any,
            targeted: Some(Targeted {
                scenario: Scenario::replacement_beside_a_deposed_leader,
                with: &[],
            }),
        },
    ]
}

/// The property a violation line names (`property violated: detail`), or the whole
/// line for a run that failed otherwise (`panicked: ...`, `simulation failed: ...`).
pub fn property(violation: &str) -> &str {
    violation
        .split_once(" violated: ")
        .map_or(violation, |(property, _)| property)
}

fn counts(mutant: &Mutant, violation: &str) -> bool {
    mutant.caught_by.contains(&property(violation))
}

/// Runs `mutant`'s seeds with its bug planted until one catches it.
pub fn run(mutant: &Mutant) -> Verdict {
    run_seeds(
        mutant,
        mutant.seeds.iter().map(|seed| mutant.scenario(*seed)),
    )
}

/// Runs `seed` as `mutant` runs it, but without the bug (its conditions still planted):
/// a catch shows something only if this passes.
pub fn run_clean(mutant: &Mutant, seed: u64) -> quantykube_simulation::SeedReport {
    planted::clear();
    for condition in mutant.conditions() {
        planted::plant(*condition);
    }
    let report = mutant.scenario(seed).run();
    planted::clear();
    report
}

/// Tries the seeds from `first` on that can show `mutant`'s bug, at most `limit` of
/// them, until one catches it: how a new mutant's seed is found.
#[cfg_attr(test, allow(dead_code))] // the example's `--search`
pub fn search(mutant: &Mutant, first: u64, limit: usize) -> Verdict {
    let scenarios = (first..)
        .map(|seed| mutant.scenario(seed))
        .filter(|s| (mutant.shows)(s))
        .take(limit);
    run_seeds(mutant, scenarios)
}

fn run_seeds(mutant: &Mutant, scenarios: impl Iterator<Item = Scenario>) -> Verdict {
    let started = Instant::now();
    let mut verdict = Verdict {
        caught: None,
        seeds_run: 0,
        others: BTreeMap::new(),
        real: Duration::ZERO,
    };
    planted::clear();
    planted::plant(mutant.bug);
    for condition in mutant.conditions() {
        planted::plant(*condition);
    }
    for scenario in scenarios {
        let seed = scenario.seed;
        let report = scenario.run();
        verdict.seeds_run += 1;
        let (catching, others): (Vec<String>, Vec<String>) = report
            .violations
            .into_iter()
            .partition(|v| counts(mutant, v));
        for other in &others {
            verdict
                .others
                .entry(property(other).to_owned())
                .or_insert(seed);
        }
        if let Some(violation) = catching.into_iter().next() {
            verdict.caught = Some((seed, violation));
            break;
        }
    }
    planted::clear();
    verdict.real = started.elapsed();
    verdict
}

/// One line of the report for `mutant`.
pub fn report_line(mutant: &Mutant, verdict: &Verdict) -> String {
    let outcome = match &verdict.caught {
        Some((seed, violation)) => {
            let first_line = violation.lines().next().unwrap_or_default();
            let mut detail: String = first_line.chars().take(160).collect();
            if detail.len() < violation.len() {
                detail.push('…');
            }
            format!("caught by {} at seed {seed}: {detail}", property(violation))
        }
        None => format!("MISSED by {}", mutant.caught_by.join(", ")),
    };
    let also: Vec<String> = verdict
        .others
        .iter()
        .map(|(property, seed)| format!("{property} (seed {seed})"))
        .collect();
    let also = match also.is_empty() {
        true => String::new(),
        false => format!("\n    also reported: {}", also.join(", ")),
    };
    format!(
        "{:?} ({}): {} seed(s) run in {:.1}s, {outcome}{also}",
        mutant.bug,
        mutant.check,
        verdict.seeds_run,
        verdict.real.as_secs_f64()
    )
}
