//! The checkers bite: each bug planted in the server (`quantykube::planted`) is
//! reported as a violation within a bounded number of seeds.
//!
//! A test binary of its own, because the switches are process-wide: they must never
//! leak into the other simulation tests, which run in another process.

use quantykube::planted::{self, PlantedBug};
use quantykube_simulation::scenario::Scenario;

/// Seeds tried per bug before the checkers are declared blind to it.
const SEEDS: u64 = 20;

/// Auth seeds tried for an auth bug: only a few seeds run the auth workload
/// (`scenario::AUTH_PERCENT`), so they are sought further than `SEEDS`.
const AUTH_SEEDS: usize = 8;

/// The first seed (of `1..=SEEDS`, or of the first [`AUTH_SEEDS`] auth seeds for a bug
/// only auth seeds show) whose run reports a violation with `bug` planted (of a
/// property `by` accepts), trying only the seeds whose scenario can show it (`shows`).
fn first_catching_seed(
    bug: PlantedBug,
    shows: fn(&Scenario) -> bool,
    by: fn(&str) -> bool,
) -> Option<(u64, String)> {
    planted::clear();
    planted::plant(bug);
    let scenarios: Vec<Scenario> = if bug == PlantedBug::StaleAuthRevision {
        (1..=1_000)
            .map(Scenario::from_seed)
            .filter(|s| s.auth.is_some())
            .take(AUTH_SEEDS)
            .collect()
    } else {
        (1..=SEEDS).map(Scenario::from_seed).collect()
    };
    let caught = scenarios.into_iter().find_map(|scenario| {
        let seed = scenario.seed;
        if !shows(&scenario) {
            return None;
        }
        let report = scenario.run();
        report.violations.iter().any(|v| by(v)).then(|| {
            (
                seed,
                format!("{}\n{}", report.summary(), report.violations.join("\n")),
            )
        })
    });
    planted::clear();
    caught
}

#[test]
fn every_planted_bug_is_caught_within_a_bounded_number_of_seeds() {
    // The member `n2` of every simulated cluster, identified as the server does.
    let n2 =
        quantykube::identity::member_id(&["http://n2:2380".to_owned()], "quantykube-simulation");
    let any: fn(&Scenario) -> bool = |_| true;
    // Only a seed whose membership client removes members can show a removed member
    // serving.
    let with_membership: fn(&Scenario) -> bool = |s| !s.membership.is_empty();
    // Any violation; or only the new checkers' own, for the bugs planted for them.
    let anything: fn(&str) -> bool = |_| true;
    let snapshot: fn(&str) -> bool = |v| v.starts_with("snapshot-");
    let hashkv: fn(&str) -> bool = |v| v.starts_with("hashkv-agreement");
    let with_auth: fn(&Scenario) -> bool = |s| s.auth.is_some();
    let auth: fn(&str) -> bool = |v| v.starts_with("auth-revoked-used");
    for (bug, shows, by) in [
        (PlantedBug::LocalLinearizableReads, any, anything),
        (PlantedBug::AckBeforeCommit, any, anything),
        (PlantedBug::DoubleApply { member: n2 }, any, anything),
        (PlantedBug::WatchDropsEventOnRejoin, any, anything),
        (PlantedBug::LeaseExpiresEarly, any, anything),
        (PlantedBug::RemovedMemberServes, with_membership, anything),
        (PlantedBug::SnapshotSkipsVersion, any, snapshot),
        (PlantedBug::MemberMisplacesPuts { member: n2 }, any, hashkv),
        (PlantedBug::StaleAuthRevision, with_auth, auth),
        (PlantedBug::CompactionOvershoots, any, anything),
    ] {
        match first_catching_seed(bug, shows, by) {
            Some((seed, summary)) => eprintln!("{bug:?}: caught by seed {seed}: {summary}"),
            None => panic!("{bug:?} went unnoticed over the seeds tried"),
        }
    }
}
