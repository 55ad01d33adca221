//! The leader is cut off from the other members while clients write; the majority
//! elects a new leader and keeps accepting writes; after healing, every member
//! converges and no acknowledged write is lost.

use std::time::Duration;

use quantykube_simulation::workload::Writer;
use quantykube_simulation::{sim_builder, History};

use crate::support::{self, check_cluster, step_for, three_nodes};

#[test]
fn an_isolated_leader_is_replaced_and_every_member_converges_after_healing() {
    support::init_tracing();
    let seed = 2;
    let mut sim = sim_builder(seed).build();
    let cluster = three_nodes(&mut sim, seed);

    let (leader, followers) = support::leader_and_followers(&mut sim, &cluster);
    let url = |name: &str| cluster.endpoint(name).expect("member");

    cluster.isolate(&sim, &leader).expect("isolate");
    let history = History::new();
    // One client writes through the majority; one starts on the isolated leader, sees
    // its writes time out, and fails over.
    let majority = Writer {
        writes: 60,
        pause: Duration::from_millis(50),
        ..Writer::new("w1", followers.iter().map(|n| url(n)).collect())
    };
    let mut via_leader = Writer::new("w2", vec![url(&leader), url(&followers[0])]);
    via_leader.writes = 30;
    via_leader.pause = Duration::from_millis(50);
    for writer in [majority, via_leader] {
        let history = history.clone();
        let name = writer.name.clone();
        sim.client(name, async move { Ok(writer.run(history).await?) });
    }

    step_for(&mut sim, Duration::from_secs(8));
    assert!(
        support::acknowledged(&history) >= 10,
        "the majority kept accepting writes while the leader was isolated:\n{}",
        history.trace().join("\n")
    );
    cluster.heal(&sim);
    sim.run().expect("writers");

    let digests = check_cluster(&mut sim, "checker", &cluster, &history);
    sim.run().expect("checks");
    let digests = digests.borrow().clone().expect("digests");
    assert_eq!(digests.len(), 3);
    assert!(
        history
            .operations()
            .iter()
            .any(|op| op.is_indefinite_write()),
        "the client of the isolated leader saw no timeout:\n{}",
        history.trace().join("\n")
    );
}
