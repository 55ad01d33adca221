//! A raft snapshot transfer file that reads back damaged (a disk that flips a bit) is
//! never installed: the member refuses it by name and catches up once its disk reads
//! true again, instead of serving what the damage made of its data.
//!
//! QuantyKube's transfer files are its own (etcd's `.snap` files are another format),
//! so against etcd there is nothing to check.

use std::time::{Duration, Instant};

use etcd_client::GetOptions;
use quantykube_crashfs::{FileMatch, Flip};

use crate::harness::{Cluster, Target, START_TIMEOUT};
use crate::rig::{Rig, Server};

/// Every key under `lag/` as member `i` holds it (after a linearizable read there).
async fn keys(cluster: &Cluster, i: usize) -> Vec<(Vec<u8>, Vec<u8>, i64)> {
    let mut client = cluster.client(i).await;
    let got = client
        .get("lag/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap_or_else(|e| panic!("read member {i}'s keys: {e}"));
    got.kvs()
        .iter()
        .map(|kv| (kv.key().to_vec(), kv.value().to_vec(), kv.mod_revision()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_file_that_reads_back_damaged_is_never_installed() {
    if Target::from_env() == Target::Etcd {
        eprintln!("QuantyKube's transfer files only: nothing to check against etcd");
        return;
    }
    damaged_snapshot_never_installed(Server::Shipped).await;
}

/// The scenario of the test above, for `server`; panics with what it found.
pub async fn damaged_snapshot_never_installed(server: Server) {
    let Some(mut rig) = Rig::start(3, server, |o| o.args(["--snapshot-count", "100"])).await else {
        return;
    };
    let leader = rig.cluster.leader_index().await;
    let lagger = (leader + 1) % 3;
    rig.cluster.kill9(lagger);
    let mut client = rig.cluster.client(leader).await;
    for i in 0..600 {
        client
            .put(format!("lag/{i:04}"), format!("value-{i:04}"), None)
            .await
            .expect("put");
    }
    // The lagger's disk flips the last byte of the last record of its snapshot files
    // (before the end marker and the 12-byte trailer): a value, not a length.
    rig.disks[lagger].set_faults(|f| {
        f.flips.push(Flip {
            files: FileMatch::new(|p| {
                p.starts_with("data/snapshots") && p.extension().is_some_and(|e| e == "snap")
            }),
            from_end: 13,
        })
    });
    rig.cluster.start_member(lagger);
    // Bound by the mechanism: the lagger received a snapshot and read it back damaged.
    let deadline = Instant::now() + START_TIMEOUT;
    while rig.disks[lagger].stats().faults_injected == 0 {
        assert!(
            Instant::now() < deadline,
            "member {lagger} never read a received snapshot"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A member that refuses the file stops, saying so (its raft cannot go on without
    // the snapshot); one that ignored the damage goes on with what it installed.
    let stopped = rig
        .cluster
        .wait_exit(lagger, Duration::from_secs(5))
        .await
        .is_some();
    rig.disks[lagger].clear_faults();
    if stopped {
        let log = std::fs::read_to_string(rig.cluster.log_path(lagger)).unwrap_or_default();
        assert!(
            log.contains("is damaged"),
            "member {lagger} stopped without naming the damaged file"
        );
        rig.cluster.start_member(lagger);
    }
    rig.cluster.wait_ready_all().await;
    let expected = keys(&rig.cluster, leader).await;
    let held = keys(&rig.cluster, lagger).await;
    assert_eq!(expected.len(), 600, "the leader lost keys");
    let differing: Vec<_> = expected
        .iter()
        .zip(&held)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| {
            format!(
                "{}: {} on the leader, {} on member {lagger}",
                String::from_utf8_lossy(&a.0),
                String::from_utf8_lossy(&a.1),
                String::from_utf8_lossy(&b.1)
            )
        })
        .collect();
    assert!(
        differing.is_empty() && held.len() == expected.len(),
        "member {lagger} installed a damaged snapshot: {} keys, differing {differing:?}",
        held.len()
    );
}
