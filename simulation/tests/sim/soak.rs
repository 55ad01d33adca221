//! Many seeds of mixed faults: the seed picks the fault, its timing and the clients'
//! members. Ignored by default (slow); run with
//! `QK_SIM_SEEDS=100 cargo test -p quantykube-simulation --test sim soak -- --ignored`.

use std::time::Duration;

use quantykube_simulation::workload::Writer;
use quantykube_simulation::{sim_builder, History};

use crate::support::{self, check_cluster, find_leader, step_for, step_until, three_nodes};

/// The faults a seed can pick.
#[derive(Clone, Copy, Debug)]
enum Fault {
    IsolateLeader,
    CrashFollower,
    CrashLeader,
    /// The leader loses one follower; it keeps a quorum with the other.
    CutLeaderFromOneFollower,
}

fn run_seed(seed: u64) {
    let fault = [
        Fault::IsolateLeader,
        Fault::CrashFollower,
        Fault::CrashLeader,
        Fault::CutLeaderFromOneFollower,
    ][(seed % 4) as usize];
    let mut sim = sim_builder(seed).build();
    let cluster = three_nodes(&mut sim, seed);
    let names = cluster.names();
    let leader = find_leader(&mut sim, "probe", cluster.endpoints()[0].clone());
    step_until(&mut sim, Duration::from_secs(20), || {
        leader.borrow().is_some()
    });
    let Some(leader) = leader.borrow().clone() else {
        unreachable!("step_until returned")
    };
    let followers: Vec<String> = names.iter().filter(|n| **n != leader).cloned().collect();

    let history = History::new();
    for (i, name) in ["w1", "w2"].into_iter().enumerate() {
        // Each client prefers a different member, rotated by the seed.
        let mut endpoints = cluster.endpoints();
        let shift = (seed as usize + i) % endpoints.len();
        endpoints.rotate_left(shift);
        let writer = Writer {
            writes: 40,
            pause: Duration::from_millis(20 + 10 * (seed % 3)),
            ..Writer::new(name, endpoints)
        };
        let history = history.clone();
        sim.client(name, async move { Ok(writer.run(history).await?) });
    }
    step_until(&mut sim, Duration::from_secs(30), || {
        support::acknowledged(&history) >= 5 + (seed % 10) as usize
    });
    let outage = Duration::from_millis(1000 + 500 * (seed % 8));
    match fault {
        Fault::IsolateLeader => cluster.isolate(&sim, &leader).expect("isolate"),
        Fault::CrashFollower => cluster.crash(&mut sim, &followers[0]).expect("crash"),
        Fault::CrashLeader => cluster.crash(&mut sim, &leader).expect("crash"),
        Fault::CutLeaderFromOneFollower => cluster
            .partition(&sim, &leader, &followers[1])
            .expect("partition"),
    }
    step_for(&mut sim, outage);
    match fault {
        Fault::CrashFollower => cluster.restart(&mut sim, &followers[0]).expect("restart"),
        Fault::CrashLeader => cluster.restart(&mut sim, &leader).expect("restart"),
        _ => cluster.heal(&sim),
    }
    sim.run()
        .unwrap_or_else(|e| panic!("seed {seed} ({fault:?}): writers: {e}"));
    let digests = check_cluster(&mut sim, "checker", &cluster, &history);
    if let Err(e) = sim.run() {
        panic!(
            "seed {seed} ({fault:?}, leader {leader}): {e}\n{}",
            history.trace().join("\n")
        );
    }
    assert_eq!(
        digests.borrow().as_ref().map(Vec::len),
        Some(3),
        "seed {seed}"
    );
}

#[test]
#[ignore = "slow: many seeds; set QK_SIM_SEEDS"]
fn mixed_faults_over_many_seeds() {
    support::init_tracing();
    let seeds: u64 = std::env::var("QK_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    for seed in 1..=seeds {
        run_seed(seed);
    }
}
