//! The checkers bite: each bug planted in the server (`quantykube::planted`) is
//! reported as a violation within a bounded number of seeds.
//!
//! A test binary of its own, because the switches are process-wide: they must never
//! leak into the other simulation tests, which run in another process.

use quantykube::planted::{self, PlantedBug};
use quantykube_simulation::scenario::Scenario;

/// Seeds tried per bug before the checkers are declared blind to it.
const SEEDS: u64 = 20;

/// The first seed (of `1..=SEEDS`) whose run reports a violation with `bug` planted,
/// trying only the seeds whose scenario can show it (`shows`).
fn first_catching_seed(bug: PlantedBug, shows: fn(&Scenario) -> bool) -> Option<(u64, String)> {
    planted::clear();
    planted::plant(bug);
    let caught = (1..=SEEDS).find_map(|seed| {
        let scenario = Scenario::from_seed(seed);
        if !shows(&scenario) {
            return None;
        }
        let report = scenario.run();
        (!report.passed()).then(|| {
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
    for (bug, shows) in [
        (PlantedBug::LocalLinearizableReads, any),
        (PlantedBug::AckBeforeCommit, any),
        (PlantedBug::DoubleApply { member: n2 }, any),
        (PlantedBug::WatchDropsEventOnRejoin, any),
        (PlantedBug::LeaseExpiresEarly, any),
        (PlantedBug::RemovedMemberServes, with_membership),
    ] {
        match first_catching_seed(bug, shows) {
            Some((seed, summary)) => eprintln!("{bug:?}: caught by seed {seed}: {summary}"),
            None => panic!("{bug:?} went unnoticed over {SEEDS} seeds"),
        }
    }
}
