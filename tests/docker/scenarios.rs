//! The membership accidents of the bitnami etcd chart (docs/operations.md, "Kubernetes
//! and compose"), each replayed on the compose cluster with the start logic the chart
//! uses (`quantykube pod start|stop|check` with the pods' environment). Each asserts the
//! end state a user expects: every wanted member a started voter, no learner left, the
//! data kept, and a member that lost or gave up its data back under a new id.

use std::time::Instant;

use crate::cluster::{members_seen_by, wait_cluster};
use crate::harness::{bounded, connect, docker, docker_ok, secs, serial, skip, Project};

/// Writes `n` keys under `prefix` through the whole cluster.
async fn write_keys(project: &Project, members: &[usize], prefix: &str, n: usize) {
    let mut client = connect(&project.endpoints(members), project.connect_options()).await;
    for i in 0..n {
        client
            .put(format!("{prefix}/{i:03}"), format!("value {i}"), None)
            .await
            .expect("put");
    }
}

/// Every key under `prefix` is readable through member `ordinal`, linearizably.
async fn assert_keys(project: &Project, ordinal: usize, prefix: &str, n: usize) {
    let mut client = project.client(ordinal).await;
    let got = client
        .get(
            format!("{prefix}/"),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .expect("get");
    assert_eq!(
        got.kvs().len(),
        n,
        "keys under {prefix}/ read through qk-{ordinal}"
    );
}

fn id_of(list: &[(String, bool, u64)], name: &str) -> Option<u64> {
    list.iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, _, id)| *id)
}

/// `pod stop` as the preStop hook runs it when the set shrinks to `replicas`, with the
/// container kept from restarting (a terminating pod is never restarted).
async fn scale_away(project: &Project, ordinal: usize, replicas: usize) {
    let container = project.container(ordinal);
    docker_ok(&["update", "--restart=no", &container]).await;
    docker_ok(&[
        "exec",
        "-e",
        &format!("QK_REPLICAS={replicas}"),
        &container,
        "/quantykube",
        "pod",
        "stop",
    ])
    .await;
    // The removed member stops by itself once it applies its removal, as etcd does.
    let out = docker(&["wait", &container]).await;
    assert!(out.ok(), "docker wait {container}: {}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_scale_3_to_1_to_3_with_retained_volumes_bitnami_10009() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
        let started = Instant::now();
        let mut project = Project::new("scale313", None);
        project.up().await;
        wait_cluster(&project, &[0, 1, 2], secs(120)).await;
        write_keys(&project, &[0, 1, 2], "before", 50).await;
        let before = members_seen_by(&project, 0).await.expect("member list");

        // Down to one, highest ordinal first; the volumes stay (whenScaled: Retain).
        for gone in [2, 1] {
            scale_away(&project, gone, 1).await;
        }
        wait_cluster(&project, &[0], secs(60)).await;
        write_keys(&project, &[0], "alone", 20).await;

        // Back to three: the retained volumes hold removed members; their pods wipe them
        // and join as learners, one at a time, and are promoted.
        for back in [1, 2] {
            docker_ok(&[
                "update",
                "--restart=unless-stopped",
                &project.container(back),
            ])
            .await;
            docker_ok(&["start", &project.container(back)]).await;
        }
        wait_cluster(&project, &[0, 1, 2], secs(180)).await;
        let after = members_seen_by(&project, 0).await.expect("member list");
        for name in ["qk-1", "qk-2"] {
            assert_ne!(
                id_of(&before, name),
                id_of(&after, name),
                "{name} came back under its removed id"
            );
        }
        assert_eq!(id_of(&before, "qk-0"), id_of(&after, "qk-0"));
        for member in 0..3 {
            assert_keys(&project, member, "before", 50).await;
            assert_keys(&project, member, "alone", 20).await;
        }
        println!("scale 3 -> 1 -> 3: {after:?} in {:.1?}", started.elapsed());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_an_empty_member_id_file_is_recovered_bitnami_6251_7048() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
        let mut project = Project::new("emptyid", None);
        project.up().await;
        wait_cluster(&project, &[0, 1, 2], secs(120)).await;
        write_keys(&project, &[0, 1, 2], "kept", 30).await;
        let before = members_seen_by(&project, 0).await.expect("member list");

        // The file is emptied while the member is down (a disk that filled up mid-write).
        let container = project.container(1);
        docker_ok(&["stop", &container]).await;
        let empty = tempfile::NamedTempFile::new().expect("temp file");
        docker_ok(&[
            "cp",
            &empty.path().display().to_string(),
            &format!("{container}:/var/lib/quantykube/member.json"),
        ])
        .await;
        docker_ok(&["start", &container]).await;
        wait_cluster(&project, &[0, 1, 2], secs(120)).await;
        let after = members_seen_by(&project, 0).await.expect("member list");
        // It recovered its identity from the cluster: the same member, with its data.
        assert_eq!(id_of(&before, "qk-1"), id_of(&after, "qk-1"));
        assert_keys(&project, 1, "kept", 30).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_helm_test_pod_check_passes_on_a_healthy_cluster_only() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
        let mut project = Project::new("check", None);
        project.up().await;
        wait_cluster(&project, &[0, 1, 2], secs(120)).await;
        let endpoints = "http://qk-0:2379,http://qk-1:2379,http://qk-2:2379";
        let check = |replicas: &'static str| {
            let container = project.container(0);
            async move {
                docker(&[
                    "exec",
                    &container,
                    "/quantykube",
                    "pod",
                    "check",
                    &format!("--endpoints={endpoints}"),
                    &format!("--replicas={replicas}"),
                ])
                .await
            }
        };
        let out = check("3").await;
        assert!(out.ok(), "pod check: {}\n{}", out.stdout, out.stderr);
        assert_eq!(out.stdout.matches("ok: ").count(), 4, "{}", out.stdout);
        // Four voters wanted, three there: the check fails and says why.
        let out = check("4").await;
        assert!(
            !out.ok(),
            "pod check passed with a member missing: {}",
            out.stdout
        );
        assert!(out.stderr.contains("3 voters"), "{}", out.stderr);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_scale_1_to_3_joins_the_running_member_bitnami_14393() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
        let mut project = Project::new("scale13", None);
        project.set_env("QK_REPLICAS", "1");
        project.compose_ok(false, &["up", "-d", "qk-0"]).await;
        wait_cluster(&project, &[0], secs(60)).await;
        write_keys(&project, &[0], "first", 30).await;
        let before = members_seen_by(&project, 0).await.expect("member list");

        // Two new pods at once, as a StatefulSet with parallel pod management starts
        // them: neither founds a cluster of its own; both join the one that answers.
        project.set_env("QK_REPLICAS", "3");
        project
            .compose_ok(false, &["up", "-d", "--no-recreate", "qk-1", "qk-2"])
            .await;
        wait_cluster(&project, &[0, 1, 2], secs(120)).await;
        let after = members_seen_by(&project, 0).await.expect("member list");
        assert_eq!(id_of(&before, "qk-0"), id_of(&after, "qk-0"));
        for member in 0..3 {
            assert_keys(&project, member, "first", 30).await;
        }
    })
    .await;
}
