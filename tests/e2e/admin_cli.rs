//! `quantykube admin`, the admin API's CLI, against a real three-member cluster: scale
//! 3 → 4 → 3 (add, start, promote, hand over leadership, update, remove), table, JSON
//! and YAML output, the exit codes scripts branch on, and a snapshot created,
//! downloaded and restored into a new cluster. etcd has no such API, so against etcd
//! this test says so and passes.

use std::process::{Command, Output};
use std::time::Duration;

use crate::harness::{Cluster, Deadline, Target};

fn admin(cluster: &Cluster, args: &[&str]) -> Output {
    let endpoints: Vec<String> = cluster
        .running()
        .into_iter()
        .map(|i| cluster.endpoint(i))
        .collect();
    Command::new(Target::Quantykube.require_binary())
        .arg("admin")
        .args(args)
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .env_remove("ETCDCTL_ENDPOINTS")
        .output()
        .expect("run quantykube admin")
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_str(&ok(output)).expect("JSON output")
}

fn names(list: &serde_json::Value) -> Vec<String> {
    list["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| {
            m["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn the_cli_scales_the_cluster_and_restores_a_snapshot() {
    if Target::from_env() == Target::Etcd {
        eprintln!("skipped against etcd 3.4: quantykube admin drives QuantyKube's own API");
        return;
    }
    let mut cluster = Cluster::start(3).await;
    let mut kv = cluster.client(0).await;
    kv.put("before-scale", "kept", None).await.expect("put");

    let table = ok(&admin(&cluster, &["members", "list"]));
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("NAME") && header.contains("STATE") && header.contains("LEADER"),
        "{table}"
    );
    assert_eq!(table.lines().count(), 4, "{table}");
    assert!(table.contains("m0") && table.contains("voter"), "{table}");
    let yaml: serde_json::Value = serde_yaml_ng::from_str(&ok(&admin(
        &cluster,
        &["members", "list", "-o", "yaml", "--page-size", "1"],
    )))
    .expect("YAML output");
    assert_eq!(
        names(&yaml),
        ["m0", "m1", "m2"],
        "every page, one member each"
    );

    // Exit codes.
    assert_eq!(
        admin(&cluster, &["members", "get", "nope"]).status.code(),
        Some(3)
    );
    assert_eq!(
        admin(&cluster, &["members", "get", "Not_A_Name"])
            .status
            .code(),
        Some(9)
    );
    assert_eq!(
        admin(
            &cluster,
            &["members", "add", "m0", "--peer-urls", "http://127.0.0.1:1"]
        )
        .status
        .code(),
        Some(4)
    );
    let wrong_uid = uuid::Uuid::new_v4().to_string();
    assert_eq!(
        admin(&cluster, &["members", "remove", "m1", "--uid", &wrong_uid])
            .status
            .code(),
        Some(5)
    );
    assert_eq!(
        admin(&cluster, &["members", "list", "-o", "xml"])
            .status
            .code(),
        Some(2)
    );

    // 3 → 4: add, start, promote (exit 6 until it has caught up), lead.
    let slot = cluster.reserve_member();
    let peer = cluster.peer_url(slot);
    let added = json(&admin(
        &cluster,
        &["members", "add", "m3", "--peer-urls", &peer, "-o", "json"],
    ));
    assert_eq!(added["metadata"]["name"], "m3");
    assert_eq!(added["status"]["state"], "MEMBER_STATE_LEARNER");
    // protobuf's JSON mapping writes a uint64 as a decimal string.
    let id: u64 = added["status"]["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("id");
    cluster.set_member_id(slot, id);
    let initial_cluster = (0..=slot)
        .map(|i| format!("{}={}", cluster.name(i), cluster.peer_url(i)))
        .collect::<Vec<_>>()
        .join(",");
    cluster.start_joining(slot, &initial_cluster);
    let deadline = Deadline::after(Duration::from_secs(30), "m3 promoted");
    loop {
        let promoted = admin(&cluster, &["members", "promote", "m3"]);
        match promoted.status.code() {
            Some(0) => break,
            Some(6) => deadline.tick().await,
            other => panic!(
                "promote exited {other:?}: {}",
                String::from_utf8_lossy(&promoted.stderr)
            ),
        }
    }
    cluster
        .wait_member_ready(slot, Duration::from_secs(30))
        .await;
    ok(&admin(&cluster, &["members", "transfer-leadership", "m3"]));
    assert_eq!(cluster.leader_index().await, slot);
    let listed = json(&admin(&cluster, &["members", "list", "-o", "json"]));
    assert_eq!(names(&listed), ["m0", "m1", "m2", "m3"]);

    // update: the CLI reads, changes and writes back with the guards it read.
    let before = json(&admin(&cluster, &["members", "get", "m3", "-o", "json"]));
    let updated = json(&admin(
        &cluster,
        &[
            "members",
            "update",
            "m3",
            "--peer-urls",
            &peer,
            "-o",
            "json",
        ],
    ));
    let version = |v: &serde_json::Value| {
        v["metadata"]["version"]
            .as_str()
            .and_then(|s| s.parse::<i64>().ok())
    };
    assert!(version(&updated) > version(&before), "{updated}");

    // A snapshot of the 4-member cluster, held by whichever member served the CLI.
    kv.put("in-snapshot", "yes", None).await.expect("put");
    let created = json(&admin(
        &cluster,
        &["snapshots", "create", "backup-1", "-o", "json"],
    ));
    assert_eq!(
        created["status"]["state"], "SNAPSHOT_STATE_READY",
        "{created}"
    );
    let table = ok(&admin(&cluster, &["snapshots", "list"]));
    assert!(
        table.contains("backup-1") && table.contains("ready"),
        "{table}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("backup-1.db");
    ok(&admin(
        &cluster,
        &["snapshots", "download", "backup-1", &file.to_string_lossy()],
    ));
    assert!(!dir.path().join("backup-1.db.part").exists());

    // 4 → 3: remove the member that leads, guarded by its current uid and version.
    let current = json(&admin(&cluster, &["members", "get", "m3", "-o", "json"]));
    let uid = current["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    let version = version(&current).expect("version").to_string();
    ok(&admin(
        &cluster,
        &[
            "members",
            "remove",
            "m3",
            "--uid",
            &uid,
            "--version",
            &version,
        ],
    ));
    assert!(
        cluster
            .wait_exit(slot, Duration::from_secs(30))
            .await
            .is_some(),
        "m3 still runs"
    );
    let listed = json(&admin(&cluster, &["members", "list", "-o", "json"]));
    assert_eq!(names(&listed), ["m0", "m1", "m2"]);
    ok(&admin(&cluster, &["snapshots", "delete", "backup-1"]));
    drop(cluster);

    // The downloaded file restores into a new cluster with the data.
    let restored = crate::snapshot::restored_cluster(Target::Quantykube, 1, file).await;
    let mut client = restored.client(0).await;
    for (key, value) in [("before-scale", "kept"), ("in-snapshot", "yes")] {
        let got = client.get(key, None).await.expect("get");
        assert_eq!(
            got.kvs().first().map(|kv| kv.value()),
            Some(value.as_bytes()),
            "{key}"
        );
    }
}
