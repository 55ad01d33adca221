//! The CI seed set: seeds 1 to 64, each a 3- or 5-member cluster under its own mix
//! of partitions (leader isolated, minority/majority split, one-way cuts, a deafened
//! member), crashes (of a follower, of the leader, of the leader in the middle of a
//! write, of a majority), restarts, slow members, delay and loss, with two to four
//! concurrent clients doing Put, Range, Txn compare-and-swap, DeleteRange and Compact,
//! one or two watchers over their keys, a lease client, in a quarter of the seeds a
//! membership client (members added, promoted, removed and replaced, the leadership
//! moved, peer URLs updated), a snapshot client taking backups throughout, and every
//! checker at the end (HashKV agreement and the snapshot files' among them). A few seeds
//! run etcd auth instead: an administrator revoking and re-granting permissions, roles
//! and users while its users read and write, judged by the auth checker too. Split into four tests so
//! that the harness runs them side by side.
//!
//! A failing seed is printed with its fault plan, its faults as injected, its
//! violations and the command that replays it with logs. With `--nocapture` every
//! seed prints a summary line and each part its totals.

use std::collections::BTreeSet;

use quantykube_simulation::faults::Fault;
use quantykube_simulation::workload::MembershipOp;
use quantykube_simulation::{FaultPlan, Scenario, SeedReport};

use crate::support;

/// The CI set is seeds `1..=CI_SEEDS`.
const CI_SEEDS: u64 = 64;
/// Tests the set is split into; seed `s` runs in part `s % PARTS`.
const PARTS: u64 = 4;

fn run_part(part: u64) {
    support::init_tracing();
    let reports: Vec<SeedReport> = (1..=CI_SEEDS)
        .filter(|seed| seed % PARTS == part)
        .map(|seed| {
            let report = Scenario::from_seed(seed).run();
            eprintln!("{}", report.summary());
            report
        })
        .collect();
    let operations: usize = reports.iter().map(|r| r.operations).sum();
    let unknown: usize = reports.iter().map(|r| r.unknown).sum();
    let faults: usize = reports.iter().map(|r| r.injected).sum();
    let changes: usize = reports.iter().map(|r| r.membership_changes).sum();
    let known: usize = reports.iter().map(|r| r.known.len()).sum();
    let snapshots: usize = reports.iter().map(|r| r.snapshots).sum();
    let snapshots_failed: usize = reports.iter().map(|r| r.snapshots_failed).sum();
    let simulated: f64 = reports.iter().map(|r| r.simulated.as_secs_f64()).sum();
    let real: f64 = reports.iter().map(|r| r.real.as_secs_f64()).sum();
    eprintln!(
        "CI seeds part {part}: {} seeds, {operations} operations ({unknown} unknown), \
         {faults} faults, {changes} membership changes ({known} findings of known server \
         bugs), {snapshots} snapshots checked ({snapshots_failed} calls failed), \
         {simulated:.0}s simulated in {real:.0}s",
        reports.len()
    );
    // The snapshot checker must have had files to judge, not only failed calls (auth
    // seeds run no snapshot client).
    let with_snapshots = reports
        .iter()
        .filter(|r| Scenario::from_seed(r.seed).auth.is_none())
        .count();
    assert!(
        snapshots >= with_snapshots,
        "only {snapshots} complete snapshots over {with_snapshots} seeds"
    );
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(ToString::to_string)
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} seeds failed:\n{}",
        failed.len(),
        reports.len(),
        failed.join("\n")
    );
}

#[test]
fn ci_seeds_part_0() {
    run_part(0);
}

#[test]
fn ci_seeds_part_1() {
    run_part(1);
}

#[test]
fn ci_seeds_part_2() {
    run_part(2);
}

#[test]
fn ci_seeds_part_3() {
    run_part(3);
}

/// The set is only as good as its mix: both cluster sizes and every kind of fault.
#[test]
fn ci_set_covers_both_sizes_and_every_fault_kind() {
    let plans: Vec<FaultPlan> = (1..=CI_SEEDS).map(FaultPlan::from_seed).collect();
    let sizes: BTreeSet<usize> = plans.iter().map(|p| p.nodes).collect();
    assert_eq!(sizes, BTreeSet::from([3, 5]));
    let kinds: BTreeSet<&'static str> = plans
        .iter()
        .flat_map(|p| p.episodes.iter().flat_map(|e| e.faults.iter()))
        .map(|fault| match fault {
            Fault::IsolateLeader => "isolate-leader",
            Fault::Split => "split",
            Fault::OneWayFromLeader => "one-way",
            Fault::Deafen(_) => "deafen",
            Fault::Crash(_) => "crash",
            Fault::CrashLeaderMidWrite => "crash-mid-write",
            // Never drawn by a plan; a scenario puts it in place of a crash mid-write.
            Fault::RestartLeaderMidWrite => "restart-mid-write",
            Fault::IsolateLeaderAfterRenewal => "isolate-after-renewal",
            Fault::IsolateLeaderButOne => "isolate-but-one",
            Fault::Restart(_) => "restart",
            Fault::CrashMajority => "crash-majority",
            Fault::Slow { .. } => "slow",
            Fault::Delay { .. } => "delay",
            Fault::Loss { .. } => "loss",
        })
        .collect();
    assert_eq!(kinds.len(), 11, "{kinds:?}");
}

/// A few seeds of the set (not all: they replace the other clients) run auth.
#[test]
fn ci_set_runs_auth_in_a_few_seeds() {
    let with: Vec<u64> = (1..=CI_SEEDS)
        .filter(|seed| Scenario::from_seed(*seed).auth.is_some())
        .collect();
    assert!((2..=10).contains(&with.len()), "auth seeds: {with:?}");
}

/// Some seeds of the set take raft snapshots every few dozen entries, with and without
/// a membership client, so that members behind the purged log catch up by snapshot.
#[test]
fn ci_set_takes_raft_snapshots_in_some_seeds() {
    let with: Vec<Scenario> = (1..=CI_SEEDS)
        .map(Scenario::from_seed)
        .filter(|s| s.raft_snapshot_count.is_some())
        .collect();
    assert!((10..=30).contains(&with.len()), "{} seeds", with.len());
    assert!(with.iter().any(|s| !s.membership.is_empty()));
    assert!(with.iter().any(|s| s.membership.is_empty()));
}

/// Some seeds of the set keep their leases on the leader, with lease checkpoints often
/// and with none within the seed, so that a leader the faults cut off answers
/// keepalives while it may already be deposed, and a new leader times the leases from
/// a checkpoint or from its election; some cut the leader off right after a renewal.
#[test]
fn ci_set_keeps_leases_on_the_leader_in_some_seeds() {
    let scenarios: Vec<Scenario> = (1..=CI_SEEDS)
        .map(Scenario::from_seed)
        .filter(|s| s.auth.is_none() && s.leases_on_leader)
        .collect();
    let long = |s: &&Scenario| s.lease_checkpoint_interval > std::time::Duration::from_secs(60);
    let without_checkpoints = scenarios.iter().filter(long).count();
    assert!(
        (5..=25).contains(&without_checkpoints),
        "{without_checkpoints} seeds"
    );
    let with_checkpoints = scenarios.len() - without_checkpoints;
    assert!(
        (5..=30).contains(&with_checkpoints),
        "{with_checkpoints} seeds"
    );
    let after_renewal = scenarios
        .iter()
        .filter(|s| s.plan.has(&Fault::IsolateLeaderAfterRenewal))
        .count();
    assert!((2..=20).contains(&after_renewal), "{after_renewal} seeds");
}

/// Some seeds of the set restart the leader at once mid-write, breaking the followers'
/// forwarding streams with writes in flight.
#[test]
fn ci_set_restarts_the_leader_mid_write_in_some_seeds() {
    let with = (1..=CI_SEEDS)
        .map(Scenario::from_seed)
        .filter(|s| s.plan.has(&Fault::RestartLeaderMidWrite))
        .count();
    assert!((3..=20).contains(&with), "{with} seeds");
}

/// Some seeds of the set change the membership, planning every kind of change.
#[test]
fn ci_set_changes_the_membership_in_every_way() {
    let scenarios: Vec<Scenario> = (1..=CI_SEEDS).map(Scenario::from_seed).collect();
    let with = scenarios
        .iter()
        .filter(|s| !s.membership.is_empty())
        .count();
    assert!(
        (8..=24).contains(&with),
        "{with} seeds with a membership client"
    );
    let kinds: BTreeSet<MembershipOp> = scenarios
        .iter()
        .flat_map(|s| s.membership.iter().map(|step| step.op))
        .collect();
    assert_eq!(kinds.len(), 7, "{kinds:?}");
}
