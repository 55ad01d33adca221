//! `--force-new-cluster`, as etcd's recovery guide uses it after a lost quorum: the
//! survivor restarts from its own data dir as a one-member cluster with every key,
//! revision and lease and its member id, serves and accepts writes, keeps doing so when
//! restarted with the flag still on, and takes members back through MemberAdd.

use std::time::Duration;

use etcd_client::{GetOptions, LeaseTimeToLiveOptions, PutOptions};

use crate::harness::*;

/// Every key with its value, revisions, version and lease, and the revision read at.
type Keys = (Vec<(String, String, i64, i64, i64, i64)>, i64);

async fn keys_on(cluster: &Cluster, i: usize, serializable: bool) -> Keys {
    let mut options = GetOptions::new().with_all_keys();
    if serializable {
        options = options.with_serializable();
    }
    let response = cluster
        .client(i)
        .await
        .get("", Some(options))
        .await
        .unwrap_or_else(|e| panic!("range on member {i}: {e}"));
    let keys = response
        .kvs()
        .iter()
        .map(|kv| {
            (
                lossy(kv.key()),
                lossy(kv.value()),
                kv.create_revision(),
                kv.mod_revision(),
                kv.version(),
                kv.lease(),
            )
        })
        .collect();
    (keys, header_rev(response.header()))
}

/// Member `i` is a cluster of itself alone, with `id`.
async fn assert_alone(cluster: &Cluster, i: usize, id: u64) {
    let mut client = cluster.client(i).await;
    let list = client.member_list().await.expect("member list");
    let members: Vec<(u64, String, Vec<String>)> = list
        .members()
        .iter()
        .map(|m| (m.id(), m.name().to_owned(), m.peer_urls().to_vec()))
        .collect();
    assert_eq!(
        members,
        [(id, cluster.name(i), vec![cluster.peer_url(i)])],
        "one member"
    );
    let status = client.status().await.expect("status");
    assert_eq!(status.header().map(|h| h.member_id()), Some(id));
    assert_eq!(status.leader(), id, "it leads itself");
}

async fn assert_lease_kept(cluster: &Cluster, i: usize, lease: i64) {
    let ttl = cluster
        .client(i)
        .await
        .lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .expect("lease ttl");
    assert_eq!(ttl.granted_ttl(), 600);
    assert!(ttl.ttl() > 0, "the lease lives: {}", ttl.ttl());
    let keys: Vec<String> = ttl.keys().iter().map(|k| lossy(k)).collect();
    assert_eq!(keys, ["leased"]);
}

#[tokio::test]
async fn the_survivor_of_a_lost_quorum_restarts_alone_with_its_data_and_takes_members_back() {
    let mut cluster = Cluster::start(3).await;
    let mut client = cluster.client_all().await;
    let lease = client.lease_grant(600, None).await.expect("grant").id();
    client
        .put("leased", "l", Some(PutOptions::new().with_lease(lease)))
        .await
        .expect("put");
    for i in 0..10 {
        client
            .put(format!("k{}", i % 4), format!("v{i}"), None)
            .await
            .expect("put");
    }
    client.delete("k3", None).await.expect("delete");
    let compact_at = current_revision(&mut client).await - 3;
    client.compact(compact_at, None).await.expect("compact");
    let cluster_id = client
        .status()
        .await
        .expect("status")
        .header()
        .map(|h| h.cluster_id());

    // The leader and one follower are lost for good; a follower survives.
    let leader = cluster.leader_index().await;
    let survivor = (0..3).find(|i| *i != leader).expect("a follower");
    let id = cluster.member_id(survivor);
    let before = keys_on(&cluster, survivor, false).await;
    for i in (0..3).filter(|i| *i != survivor) {
        cluster.kill9(i);
    }
    cluster.set_member_flags(survivor, &["--force-new-cluster"]);
    cluster.restart(survivor).await;

    assert_eq!(keys_on(&cluster, survivor, false).await, before);
    assert_alone(&cluster, survivor, id).await;
    assert_lease_kept(&cluster, survivor, lease).await;
    let mut client = cluster.client(survivor).await;
    let status = client.status().await.expect("status");
    assert_eq!(status.header().map(|h| h.cluster_id()), cluster_id);
    // Old revisions stay served until the compaction it had.
    let at = client
        .get("k0", Some(GetOptions::new().with_revision(compact_at)))
        .await
        .expect("get at the compacted revision");
    assert_eq!(at.kvs().len(), 1);
    assert_grpc_error(
        client
            .get("k0", Some(GetOptions::new().with_revision(compact_at - 1)))
            .await,
        tonic::Code::OutOfRange,
        "etcdserver: mvcc: required revision has been compacted",
    );
    // It accepts writes, at the next revision.
    let put = client.put("after", "x", None).await.expect("put after");
    assert_eq!(header_rev(put.header()), before.1 + 1);
    let after = keys_on(&cluster, survivor, false).await;

    // The flag left on: restarting again keeps everything as it is.
    cluster.restart(survivor).await;
    assert_eq!(keys_on(&cluster, survivor, false).await, after);
    assert_alone(&cluster, survivor, id).await;

    // Members come back through MemberAdd, with empty data dirs.
    cluster.set_member_flags(survivor, &[]);
    let added = cluster.add_member(survivor, false).await;
    cluster
        .wait_member_ready(added, Duration::from_secs(60))
        .await;
    let deadline = Deadline::after(
        Duration::from_secs(20),
        "the added member holds the survivor's data",
    );
    while keys_on(&cluster, added, true).await != after {
        deadline.tick().await;
    }
    assert_lease_kept(&cluster, added, lease).await;
    let list = cluster
        .client(added)
        .await
        .member_list()
        .await
        .expect("member list");
    let mut ids: Vec<u64> = list.members().iter().map(|m| m.id()).collect();
    ids.sort_unstable();
    let mut want = vec![id, cluster.member_id(added)];
    want.sort_unstable();
    assert_eq!(ids, want);
    // Both serve what either accepts.
    let put = cluster
        .client(added)
        .await
        .put("later", "y", None)
        .await
        .expect("put through the added member");
    let revision = header_rev(put.header());
    for i in [survivor, added] {
        let got = cluster
            .client(i)
            .await
            .get("later", None)
            .await
            .expect("get");
        assert_eq!(got.kvs().len(), 1, "member {i}");
        assert_eq!(got.kvs()[0].mod_revision(), revision);
    }
}
