//! `quantykube snapshot save`: etcdctl's online backup, as a client of the target's
//! Snapshot RPC (so it runs against etcd 3.4 too, with `QK_TEST_TARGET=etcd`). Its file
//! must be the one `etcdctl snapshot save` writes: the same revision, keys and hash as
//! etcdctl reports them; its refusals are etcdctl's, and a failed save leaves nothing.

use std::process::Command;

use crate::harness::{etcdctl_binary, Cluster, Target};
use crate::snapshot::etcdctl_status;

/// `quantykube snapshot save <args>` (QuantyKube's binary whatever the target).
fn quantykube_save(args: &[&str]) -> std::process::Output {
    Command::new(Target::Quantykube.require_binary())
        .arg("snapshot")
        .arg("save")
        .args(args)
        .env_remove("ETCDCTL_ENDPOINTS")
        .output()
        .expect("run quantykube snapshot save")
}

#[tokio::test]
async fn a_save_is_the_file_etcdctl_saves() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    for i in 0..200 {
        client
            .put(format!("key-{i:03}"), format!("value-{i}"), None)
            .await
            .expect("put");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ours = dir.path().join("ours.db");
    let endpoint = cluster.endpoint(0);
    let out = quantykube_save(&[&format!("--endpoints={endpoint}"), &ours.to_string_lossy()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("Snapshot saved at {}", ours.display())
    );
    let theirs = dir.path().join("theirs.db");
    cluster
        .etcdctl_on(0, &["snapshot", "save", &theirs.to_string_lossy()])
        .await
        .assert_success();
    let (a, b) = (etcdctl_status(&ours), etcdctl_status(&theirs));
    // The same store, read twice with nothing written between: etcdctl agrees on all.
    assert_eq!(a, b, "ours {a} etcdctl's {b}");
    assert!(a["revision"].as_i64() >= Some(201), "{a}");
    assert!(!dir.path().join("ours.db.part").exists());
}

#[tokio::test]
async fn a_directory_gets_timestamped_files_and_keeps_the_newest() {
    let cluster = Cluster::start(1).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let target = format!("{}/backups/", dir.path().display());
    let endpoint = format!("--endpoints={}", cluster.endpoint(0));
    for _ in 0..3 {
        let out = quantykube_save(&[&endpoint, "--keep=2", &target]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The names carry the second: two saves in one second would share a name.
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    let mut files: Vec<String> = std::fs::read_dir(dir.path().join("backups"))
        .expect("dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    for name in &files {
        assert!(
            name.starts_with("snapshot-") && name.ends_with("Z.db"),
            "{name}"
        );
        let status = etcdctl_status(&dir.path().join("backups").join(name));
        assert!(status["totalKey"].as_u64() > Some(0), "{status}");
    }
}

#[tokio::test]
async fn refusals_are_etcdctls_and_leave_nothing() {
    let cluster = Cluster::start(1).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.db");
    let two = format!(
        "--endpoints={},{}",
        cluster.endpoint(0),
        cluster.endpoint(0)
    );
    let out = quantykube_save(&[&two, &file.to_string_lossy()]);
    assert!(!out.status.success());
    let ours = String::from_utf8_lossy(&out.stderr).to_string();
    let theirs = Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "save", &two])
        .arg(&file)
        .output()
        .expect("etcdctl");
    assert!(!theirs.status.success());
    let theirs = String::from_utf8_lossy(&theirs.stderr).to_string();
    let words = "snapshot must be requested to one selected node, not multiple";
    assert!(
        ours.contains(words) && theirs.contains(words),
        "ours: {ours}\netcdctl: {theirs}"
    );

    // Nobody listens there: an error, and no file, not even a partial one.
    let out = quantykube_save(&[
        "--endpoints=127.0.0.1:1",
        "--dial-timeout=1s",
        &file.to_string_lossy(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("Error: "));
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}
