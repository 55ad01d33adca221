//! Watchers follow the clients' writes through a crash of the member they watch on:
//! one from revision 1, one from "now"; each resumes on another member after the
//! crash, and the watch checker finds nothing wrong with what they saw.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use quantykube_simulation::checker;
use quantykube_simulation::history::{Operation, WatchEntry, WatchLog};
use quantykube_simulation::workload::{Mixed, WatchClient, WatchTarget};
use quantykube_simulation::{sim_builder, History};

use crate::support::{self, leader_and_followers, step_for, step_until, three_nodes};

#[test]
fn watchers_see_every_write_through_a_crash_of_their_member() {
    support::init_tracing();
    let seed = 4;
    let mut sim = sim_builder(seed).build();
    let cluster = three_nodes(&mut sim, seed);
    leader_and_followers(&mut sim, &cluster);
    let run_for = Duration::from_secs(8);

    let history = History::new();
    let writers_done = Rc::new(Cell::new(0));
    for i in 0..2u64 {
        let name = format!("c{}", i + 1);
        let mixed = Mixed {
            run_for,
            ..Mixed::new(&name, cluster.endpoints(), seed * 10 + i)
        };
        let (history, done) = (history.clone(), writers_done.clone());
        sim.client(name, async move {
            mixed.run(history).await?;
            done.set(done.get() + 1);
            Ok(())
        });
    }
    let target = WatchTarget::new();
    let logs: Vec<WatchLog> = [("watcher1", 1), ("watcher2", 0)]
        .into_iter()
        .enumerate()
        .map(|(i, (name, start_revision))| {
            let watcher = WatchClient {
                start_revision,
                start_after: Duration::from_millis(500 * i as u64),
                run_for,
                target: Some(target.clone()),
                ..WatchClient::new(name, cluster.members(), seed * 100 + i as u64)
            };
            let log = WatchLog::new(name, &watcher.prefix);
            let recorded = log.clone();
            sim.client(name, async move { Ok(watcher.run(recorded).await?) });
            log
        })
        .collect();

    // Crash the member the first watcher watches on, once it has seen some events.
    step_until(&mut sim, Duration::from_secs(10), || logs[0].events() >= 20);
    let member = logs[0]
        .entries()
        .iter()
        .rev()
        .find_map(|entry| match entry {
            WatchEntry::Started { member, .. } => Some(member.clone()),
            _ => None,
        })
        .expect("a started watch");
    cluster.crash(&mut sim, &member).expect("crash");
    step_for(&mut sim, Duration::from_secs(2));
    cluster.restart(&mut sim, &member).expect("restart");

    step_until(&mut sim, Duration::from_secs(20), || {
        writers_done.get() == 2
    });
    let operations = history.operations();
    target.set(
        operations
            .iter()
            .filter_map(Operation::written_revision)
            .max()
            .unwrap_or(0),
    );
    sim.run().expect("watchers");

    for log in &logs {
        for entry in log.entries() {
            tracing::info!(watcher = log.watcher(), %entry, "watch");
        }
    }
    let violations = checker::check_watches(&logs, &operations);
    assert!(violations.is_empty(), "{violations:#?}");
    let written = operations
        .iter()
        .filter(|op| op.written_revision().is_some())
        .count();
    for log in &logs {
        assert!(log.events() >= written / 2, "{}", log.digest());
    }
    let resumed = logs[0]
        .entries()
        .iter()
        .filter(|entry| matches!(entry, WatchEntry::Started { .. }))
        .count();
    assert!(resumed >= 2, "the first watcher resumed after the crash");
}
