//! `--wal-dir`: the raft log (etcd's WAL) lives in a directory of its own, apart from
//! the data dir, and a member killed with SIGKILL restarts from both with every
//! acknowledged write. Run against etcd 3.4 too, which keeps its `*.wal` files there.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{Cluster, ClusterOptions};

fn wal_dir(member_dir: &Path) -> PathBuf {
    member_dir.join("wal-elsewhere")
}

/// Every directory named `wal` under `dir`, at any depth.
fn wal_dirs_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == "wal") {
                    found.push(path.clone());
                }
                pending.push(path);
            }
        }
    }
    found
}

fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                bytes_under(&path)
            } else {
                entry.metadata().map(|m| m.len()).unwrap_or(0)
            }
        })
        .sum()
}

#[tokio::test]
async fn the_log_lives_in_wal_dir_and_survives_kill_9_of_every_member() {
    let mut cluster = Cluster::start_with(
        ClusterOptions::new(3)
            .member_args(|spec| vec![format!("--wal-dir={}", wal_dir(&spec.dir).display())]),
    )
    .await;
    let mut client = cluster.client(cluster.leader_index().await).await;
    let value = "v".repeat(1024);
    for i in 0..300 {
        client
            .put(format!("wal/{i:03}"), value.as_str(), None)
            .await
            .expect("put");
    }
    for i in 0..cluster.size() {
        let member_dir = cluster.member_spec(i).dir;
        let wal = wal_dir(&member_dir);
        // 300 KiB of values went through the log of every member.
        assert!(
            bytes_under(&wal) > 300 * 1024,
            "member {i}'s --wal-dir {} holds the log: {} bytes",
            wal.display(),
            bytes_under(&wal)
        );
        assert_eq!(
            wal_dirs_under(&cluster.data_dir(i)),
            Vec::<PathBuf>::new(),
            "no log of member {i} in its data dir"
        );
    }

    // Every member at once: nothing acknowledged may be lost.
    cluster.restart_all().await;
    let leader = cluster.wait_leader(Duration::from_secs(30)).await;
    for i in [leader, (leader + 1) % 3] {
        let mut client = cluster.client(i).await;
        let got = client
            .get("wal/", Some(etcd_client::GetOptions::new().with_prefix()))
            .await
            .expect("range after restart");
        assert_eq!(got.kvs().len(), 300, "member {i} after kill -9");
        assert!(got.kvs().iter().all(|kv| kv.value() == value.as_bytes()));
    }
    // And it goes on taking writes.
    let mut client = cluster.client(leader).await;
    client
        .put("wal/after", "restart", None)
        .await
        .expect("put after the restart");
}
