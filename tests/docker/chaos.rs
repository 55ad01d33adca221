//! Faults on the compose cluster under a continuous write load and a watcher
//! (load.rs): no acknowledged write lost, the watch gap-free, every member converged.

use std::time::{Duration, Instant};

use crate::cluster::{leader, members_seen_by, wait_cluster, wait_ready};
use crate::harness::{bounded, docker_ok, eventually, secs, serial, skip, Project};
use crate::load::Load;

const ALL: [usize; 3] = [0, 1, 2];

/// A healthy three-member project.
async fn start(scenario: &str) -> (Project, Instant) {
    let started = Instant::now();
    let mut project = Project::new(scenario, None);
    project.up().await;
    wait_cluster(&project, &ALL, secs(120)).await;
    (project, started)
}

/// The load, its writer and watcher first on `first` (the member about to be hit), so
/// that the fault also exercises their failover and the watch's resumption.
async fn load_on(scenario: &str, project: &Project, first: usize, started: Instant) -> Load {
    let mut order = vec![first];
    order.extend(others(first));
    let load = Load::start(project, &order).await;
    load.wait_progress(50, secs(30)).await;
    println!(
        "{scenario}: cluster formed and under load (first on qk-{first}) after {:.1?}",
        started.elapsed()
    );
    load
}

/// After the fault: writes flow, the cluster is whole again, then the load's checks.
async fn end(scenario: &str, project: &Project, load: Load, members: &[usize], started: Instant) {
    // A few seconds of load on the healed cluster.
    load.wait_progress(150, secs(60)).await;
    wait_cluster(project, members, secs(120)).await;
    let summary = load.finish(project, members).await;
    println!("{scenario}: {summary}; {:.1?} in all", started.elapsed());
}

fn others(than: usize) -> Vec<usize> {
    ALL.iter().copied().filter(|&m| m != than).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_kill_the_leader() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
        let (project, started) = start("kill").await;
        let old = leader(&project, &ALL).await;
        let load = load_on("kill", &project, old, started).await;
        docker_ok(&["kill", "-s", "KILL", &project.container(old)]).await;
        let killed = Instant::now();
        let new = leader(&project, &others(old)).await;
        load.wait_progress(30, secs(60)).await;
        println!(
            "kill: qk-{old} killed, qk-{new} leads, writes again after {:.1?}",
            killed.elapsed()
        );
        docker_ok(&["start", &project.container(old)]).await;
        wait_ready(&project, old, secs(90)).await;
        end("kill", &project, load, &ALL, started).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_pause_the_leader() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
        let (project, started) = start("pause").await;
        let old = leader(&project, &ALL).await;
        let load = load_on("pause", &project, old, started).await;
        docker_ok(&["pause", &project.container(old)]).await;
        let paused = Instant::now();
        let new = leader(&project, &others(old)).await;
        load.wait_progress(30, secs(60)).await;
        // Stay paused well past an election timeout.
        tokio::time::sleep(Duration::from_secs(5).saturating_sub(paused.elapsed())).await;
        println!(
            "pause: qk-{old} paused, qk-{new} leads, writes go on ({:.1?})",
            paused.elapsed()
        );
        docker_ok(&["unpause", &project.container(old)]).await;
        wait_ready(&project, old, secs(60)).await;
        end("pause", &project, load, &ALL, started).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_disconnect_the_leader() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
        let (project, started) = start("partition").await;
        let old = leader(&project, &ALL).await;
        let load = load_on("partition", &project, old, started).await;
        let network = project.network();
        let container = project.container(old);
        docker_ok(&["network", "disconnect", &network, &container]).await;
        let cut = Instant::now();
        let new = leader(&project, &others(old)).await;
        load.wait_progress(30, secs(60)).await;
        tokio::time::sleep(Duration::from_secs(5).saturating_sub(cut.elapsed())).await;
        println!(
            "partition: qk-{old} cut off, qk-{new} leads, writes go on ({:.1?})",
            cut.elapsed()
        );
        // Back on the network under its service name, as compose attached it.
        docker_ok(&[
            "network",
            "connect",
            "--alias",
            &Project::service(old),
            &network,
            &container,
        ])
        .await;
        wait_ready(&project, old, secs(90)).await;
        end("partition", &project, load, &ALL, started).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_rolling_restart() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
        let (project, started) = start("rolling").await;
        let load = load_on("rolling", &project, 0, started).await;
        for member in ALL {
            let restart = Instant::now();
            docker_ok(&["restart", "-t", "30", &project.container(member)]).await;
            wait_ready(&project, member, secs(90)).await;
            // The next one only once all three are voters under one leader again.
            wait_cluster(&project, &ALL, secs(90)).await;
            println!(
                "rolling: qk-{member} restarted and ready in {:.1?}",
                restart.elapsed()
            );
        }
        end("rolling", &project, load, &ALL, started).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_member_loses_its_volume() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
        let (mut project, started) = start("volume").await;
        let lead = leader(&project, &ALL).await;
        let victim = others(lead)[0];
        let load = load_on("volume", &project, victim, started).await;
        let service = Project::service(victim);
        let old_id = members_seen_by(&project, lead)
            .await
            .expect("member list")
            .into_iter()
            .find(|(name, _, _)| *name == service)
            .map(|(_, _, id)| id)
            .expect("the victim is listed");
        project
            .compose_ok(false, &["stop", "-t", "30", &service])
            .await;
        project.compose_ok(false, &["rm", "-f", &service]).await;
        docker_ok(&["volume", "rm", &project.volume(victim)]).await;
        load.wait_progress(30, secs(60)).await;
        let lost = Instant::now();
        project
            .compose_ok(false, &["up", "-d", "--no-deps", &service])
            .await;
        wait_cluster(&project, &ALL, secs(150)).await;
        let new_id = members_seen_by(&project, lead)
            .await
            .expect("member list")
            .into_iter()
            .find(|(name, _, _)| *name == service)
            .map(|(_, _, id)| id)
            .expect("the victim is listed again");
        assert_ne!(
            old_id, new_id,
            "{service} came back with its old member id after losing its data"
        );
        println!(
            "volume: {service} (id {old_id:x}) lost its volume, rejoined as {new_id:x} in {:.1?}",
            lost.elapsed()
        );
        end("volume", &project, load, &ALL, started).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_scale_3_to_5_to_3() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
        let (mut project, started) = start("scale").await;
        let load = load_on("scale", &project, 0, started).await;
        // Up, one at a time, as the StatefulSet does: learner, caught up, promoted.
        for (new, members) in [(3usize, vec![0, 1, 2, 3]), (4, vec![0, 1, 2, 3, 4])] {
            let joined = Instant::now();
            project
                .compose_ok(true, &["up", "-d", "--no-deps", &Project::service(new)])
                .await;
            wait_cluster(&project, &members, secs(120)).await;
            println!(
                "scale: qk-{new} joined as a voter in {:.1?}",
                joined.elapsed()
            );
        }
        load.wait_progress(30, secs(60)).await;
        // Down, highest first: the preStop hook with the new replica count, then the
        // container and its volume go. The container must not restart in between (a
        // terminating pod never does): a removed member that starts again with its own
        // QK_REPLICAS=5 is wanted, and rejoins.
        for gone in [4usize, 3] {
            let left = Instant::now();
            let container = project.container(gone);
            docker_ok(&["update", "--restart=no", &container]).await;
            docker_ok(&[
                "exec",
                "-e",
                "QK_REPLICAS=3",
                &container,
                "/quantykube",
                "pod",
                "stop",
            ])
            .await;
            let service = Project::service(gone);
            eventually(
                &format!("{service} removed from the cluster"),
                secs(60),
                || async {
                    let list = members_seen_by(&project, 0).await?;
                    if list.iter().any(|(name, _, _)| *name == service) {
                        Err(format!("{list:?}"))
                    } else {
                        Ok(())
                    }
                },
            )
            .await;
            project
                .compose_ok(true, &["rm", "-s", "-f", &service])
                .await;
            docker_ok(&["volume", "rm", &project.volume(gone)]).await;
            println!("scale: qk-{gone} removed in {:.1?}", left.elapsed());
        }
        end("scale", &project, load, &ALL, started).await;
    })
    .await;
}
