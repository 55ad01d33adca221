//! A member started on another cluster's data dir never disturbs the cluster whose
//! peer URLs it took: peers refuse its cluster's requests (etcd's cluster ID check),
//! and the cluster goes on with the members it has. Also run against etcd 3.4
//! (`QK_TEST_TARGET=etcd`), which refuses by its `X-Etcd-Cluster-ID` header.

use std::time::Duration;

use etcd_client::{Client, GetOptions};

use crate::harness::{Cluster, Deadline, Target};

/// Copies a directory tree (a stopped member's data dir).
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("create copy");
    for entry in std::fs::read_dir(from).expect("read data dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// Writes `k0`..`k49` through `client`, one every 40 ms: a while of A's leader dialling
/// the member that holds one of its peer URLs, on A's two other members.
async fn write_fifty_keys(client: &mut Client) {
    for i in 0..50 {
        client
            .put(format!("k{i}"), "a", None)
            .await
            .expect("A serves writes while a foreign member holds one of its peer URLs");
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

#[tokio::test]
async fn a_member_on_another_clusters_data_dir_is_refused_and_harms_nothing() {
    let mut a = Cluster::start(3).await;
    let mut b = Cluster::start(1).await;
    let mut b_client = b.client(0).await;
    b_client.put("owner", "b", None).await.expect("put in B");
    b.kill9(0);

    // Member 2 of A comes back on B's data dir, with A's flags and ports.
    let leader = a.leader_index().await;
    let swapped = (leader + 1) % 3;
    a.kill9(swapped);
    let dir = a.data_dir(swapped);
    std::fs::remove_dir_all(&dir).expect("wipe A's member");
    copy_tree(&b.data_dir(0), &dir);
    a.start_member(swapped);

    // A keeps serving writes on its two members, for a while of A's leader dialling
    // the swapped member.
    let mut a_client = a.client(leader).await;
    write_fifty_keys(&mut a_client).await;
    let got = a_client
        .get("k", Some(GetOptions::new().with_prefix().with_count_only()))
        .await
        .expect("count on A");
    assert_eq!(got.count(), 50);

    // The swapped process is still B's member: its store has B's key, none of A's.
    let deadline = Deadline::after(Duration::from_secs(20), "the swapped member serves");
    let mut swapped_client = a.client(swapped).await;
    let (owner, a_keys) = loop {
        let owner = swapped_client
            .get("owner", Some(GetOptions::new().with_serializable()))
            .await;
        let a_keys = swapped_client
            .get(
                "k",
                Some(GetOptions::new().with_prefix().with_serializable()),
            )
            .await;
        match (owner, a_keys) {
            (Ok(owner), Ok(a_keys)) => break (owner, a_keys),
            _ => deadline.tick().await,
        }
    };
    assert_eq!(
        owner.kvs().first().map(|kv| kv.value().to_vec()),
        Some(b"b".to_vec()),
        "the foreign member keeps its own data"
    );
    assert_eq!(
        a_keys.count(),
        0,
        "the foreign member received none of A's writes"
    );

    if a.target() == Target::Quantykube {
        let log = std::fs::read_to_string(a.log_path(leader)).expect("leader log");
        assert!(
            log.contains("cluster ID mismatch"),
            "A's leader logs that its requests were refused"
        );
    }

    // Put back, A's member catches up on everything it missed.
    a.kill9(swapped);
    std::fs::remove_dir_all(&dir).expect("wipe the foreign data");
    let mut survivor_client = a.client(leader).await;
    let id = a.member_id(swapped);
    survivor_client
        .member_remove(id)
        .await
        .expect("remove the replaced member");
}

/// A member re-founded as a cluster of its own on the same peer URL and token keeps the
/// member id the cluster knows it by: only the cluster id tells its requests, and the
/// cluster's to it, apart. Without that check the cluster's leader would replicate into
/// the other cluster's log.
#[tokio::test]
async fn a_member_refounded_alone_with_the_same_member_id_is_refused_by_cluster_id() {
    let mut a = Cluster::start(3).await;
    let leader = a.leader_index().await;
    let refounded = (leader + 1) % 3;
    a.wipe(refounded);
    a.start_alone(refounded);
    let mut alone = a.client(refounded).await;
    let deadline = Deadline::after(Duration::from_secs(20), "the re-founded member serves");
    while alone.put("owner", "alone", None).await.is_err() {
        deadline.tick().await;
    }
    let status = alone
        .status()
        .await
        .expect("status of the re-founded member");
    let header = status.header().expect("header");
    assert_eq!(header.member_id(), a.member_id(refounded), "same member id");
    let mut a_client = a.client(leader).await;
    let a_status = a_client.status().await.expect("status of A");
    assert_ne!(
        header.cluster_id(),
        a_status.header().expect("header").cluster_id(),
        "another cluster"
    );

    // A's leader keeps dialling the member it knows at that URL while A takes writes.
    write_fifty_keys(&mut a_client).await;
    let a_keys = alone
        .get(
            "k",
            Some(GetOptions::new().with_prefix().with_serializable()),
        )
        .await
        .expect("read the re-founded member");
    assert_eq!(
        a_keys.count(),
        0,
        "the re-founded member received none of A's writes"
    );
    let owner = alone
        .get("owner", Some(GetOptions::new().with_serializable()))
        .await
        .expect("read the re-founded member");
    assert_eq!(
        owner.kvs().first().map(|kv| kv.value().to_vec()),
        Some(b"alone".to_vec()),
        "the re-founded member keeps its own data"
    );
    let members = alone.member_list().await.expect("member list");
    assert_eq!(members.members().len(), 1, "a cluster of its own");
    if a.target() == Target::Quantykube {
        let log = std::fs::read_to_string(a.log_path(leader)).expect("leader log");
        assert!(
            log.contains("cluster ID mismatch"),
            "A's leader logs that its requests were refused"
        );
    }
}
