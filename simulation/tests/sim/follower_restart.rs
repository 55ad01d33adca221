//! A follower crashes in the middle of a stream of writes and restarts on its data:
//! no acknowledged write is lost and every member converges.

use std::time::Duration;

use quantykube_simulation::workload::Writer;
use quantykube_simulation::{sim_builder, History};

use crate::support::{self, check_cluster, step_for, step_until, three_nodes};

#[test]
fn a_follower_crashed_mid_writes_restarts_and_catches_up() {
    support::init_tracing();
    let seed = 3;
    let mut sim = sim_builder(seed).build();
    let cluster = three_nodes(&mut sim, seed);

    let (leader, followers) = support::leader_and_followers(&mut sim, &cluster);
    let (victim, survivor) = (&followers[0], &followers[1]);
    let url = |name: &str| cluster.endpoint(name).expect("member");

    let history = History::new();
    // One client writes through the survivor, one through the victim (it fails over
    // to the leader once the victim dies).
    let writers = [
        Writer {
            writes: 80,
            pause: Duration::from_millis(30),
            ..Writer::new("w1", vec![url(survivor), url(&leader)])
        },
        Writer {
            writes: 40,
            pause: Duration::from_millis(30),
            ..Writer::new("w2", vec![url(victim), url(&leader)])
        },
    ];
    for writer in writers {
        let history = history.clone();
        let name = writer.name.clone();
        sim.client(name, async move { Ok(writer.run(history).await?) });
    }

    step_until(&mut sim, Duration::from_secs(20), || {
        support::acknowledged(&history) >= 20
    });
    cluster.crash(&mut sim, victim).expect("crash");
    step_for(&mut sim, Duration::from_secs(2));
    let acknowledged_while_down = support::acknowledged(&history);
    cluster.restart(&mut sim, victim).expect("restart");
    sim.run().expect("writers");
    assert!(
        support::acknowledged(&history) > acknowledged_while_down,
        "writes continued after the restart"
    );

    let digests = check_cluster(&mut sim, "checker", &cluster, &history);
    sim.run().expect("checks");
    assert_eq!(digests.borrow().as_ref().map(Vec::len), Some(3));
}
