//! The checkers bite: each bug planted in the server (`quantykube::planted`) is
//! reported as a violation within a bounded number of seeds.
//!
//! A test binary of its own, because the switches are process-wide: they must never
//! leak into the other simulation tests, which run in another process.

use quantykube::planted::{self, PlantedBug};
use quantykube_simulation::scenario::Scenario;

/// Seeds tried per bug before the checkers are declared blind to it.
const SEEDS: u64 = 20;

/// The first seed (of `1..=SEEDS`) whose run reports a violation with `bug` planted.
fn first_catching_seed(bug: PlantedBug) -> Option<(u64, String)> {
    planted::clear();
    planted::plant(bug);
    let caught = (1..=SEEDS).find_map(|seed| {
        let report = Scenario::from_seed(seed).run();
        (!report.passed()).then(|| (seed, report.summary()))
    });
    planted::clear();
    caught
}

#[test]
fn every_planted_bug_is_caught_within_a_bounded_number_of_seeds() {
    // The member `n2` of every simulated cluster, identified as the server does.
    let n2 =
        quantykube::identity::member_id(&["http://n2:2380".to_owned()], "quantykube-simulation");
    for bug in [
        PlantedBug::LocalLinearizableReads,
        PlantedBug::AckBeforeCommit,
        PlantedBug::DoubleApply { member: n2 },
        PlantedBug::WatchDropsEventOnRejoin,
        PlantedBug::LeaseExpiresEarly,
    ] {
        match first_catching_seed(bug) {
            Some((seed, summary)) => eprintln!("{bug:?}: caught by seed {seed}: {summary}"),
            None => panic!("{bug:?} went unnoticed over {SEEDS} seeds"),
        }
    }
}
