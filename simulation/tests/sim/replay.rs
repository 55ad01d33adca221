//! Replays one seed of the CI set or the soak, with logs:
//!
//! ```sh
//! QK_SIM_SEED=123 RUST_LOG=info cargo test -p quantykube-simulation --test sim replay -- --nocapture
//! ```
//!
//! (`RUST_LOG=debug` shows every member's raft traffic too). Prints the seed's plan,
//! its faults as injected and every operation with its simulated times and outcome.
//! Without `QK_SIM_SEED` it does nothing.

use quantykube_simulation::Scenario;

use crate::support;

#[test]
fn replay() {
    let Some(seed) = std::env::var("QK_SIM_SEED")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    else {
        eprintln!("set QK_SIM_SEED to replay a seed");
        return;
    };
    support::init_tracing();
    let scenario = Scenario::from_seed(seed);
    println!("seed {seed}: {}", scenario.plan);
    let report = scenario.run();
    for line in &report.trace {
        println!("{line}");
    }
    println!("trace hash {:016x}", report.trace_hash);
    for finding in &report.known {
        println!("known server bug: {finding}");
    }
    assert!(report.passed(), "{report}");
    println!("{}", report.summary());
}
