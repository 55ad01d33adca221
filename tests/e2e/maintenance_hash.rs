//! Maintenance.Hash and HashKV: members that hold the same history agree, a write or a
//! compaction changes what is hashed, and etcd's revision errors. The hash values
//! themselves are not compared with etcd's: QuantyKube hashes its own encoding.

use std::time::Duration;

use etcd_client::{CompactionOptions, Error};

use crate::harness::Cluster;

/// Member `i`'s HashKV at `revision`: (hash, compact revision, header revision).
async fn hash_kv(cluster: &Cluster, i: usize, revision: i64) -> Result<(u32, i64, i64), Error> {
    let response = cluster.client(i).await.hash_kv(revision).await?;
    let revision = response.header().map_or(0, |h| h.revision());
    Ok((response.hash(), response.compact_version(), revision))
}

/// Every member's HashKV at `revision`, once they all have applied up to `current`.
async fn agreed(cluster: &Cluster, revision: i64, current: i64) -> (u32, i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut answers = Vec::new();
        for i in 0..cluster.size() {
            answers.push(hash_kv(cluster, i, revision).await.expect("hashkv"));
        }
        let caught_up = answers.iter().all(|a| a.2 == current);
        if caught_up {
            let (hash, compacted, _) = answers[0];
            for (i, answer) in answers.iter().enumerate() {
                assert_eq!(
                    (answer.0, answer.1),
                    (hash, compacted),
                    "member {i} disagrees at revision {revision}: {answers:?}"
                );
            }
            return (hash, compacted);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "members never reached revision {current}: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn expect_out_of_range(result: Result<(u32, i64, i64), Error>, message: &str) {
    crate::harness::assert_grpc_error(result, tonic::Code::OutOfRange, message);
}

#[tokio::test]
async fn hash_kv_agrees_across_members_and_follows_writes_and_compaction() {
    let cluster = Cluster::start(3).await;
    let mut client = cluster.client(0).await;
    client.put("a", "1", None).await.expect("put"); // revision 2
    client.put("b", "2", None).await.expect("put"); // 3
    client.delete("a", None).await.expect("delete"); // 4
    client.put("c", "3", None).await.expect("put"); // 5
    let (at_5, compacted) = agreed(&cluster, 0, 5).await;
    assert_eq!(compacted, -1, "never compacted");
    let (at_3, _) = agreed(&cluster, 3, 5).await;
    assert_ne!(at_3, at_5, "revisions 4 and 5 changed what revision 5 sees");
    assert_eq!(
        agreed(&cluster, 5, 5).await.0,
        at_5,
        "0 means the current revision"
    );
    // A write changes the current hash, not that of an older revision.
    client.put("c", "4", None).await.expect("put"); // 6
    let (at_6, _) = agreed(&cluster, 0, 6).await;
    assert_ne!(at_6, at_5);
    assert_eq!(agreed(&cluster, 5, 6).await.0, at_5);
    // etcd's errors for revisions it cannot hash.
    expect_out_of_range(
        hash_kv(&cluster, 1, 7).await,
        "etcdserver: mvcc: required revision is a future revision",
    );
    client
        .compact(4, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");
    let (after, compacted) = agreed(&cluster, 0, 6).await;
    assert_eq!(compacted, 4);
    assert_ne!(after, 0);
    for revision in [3, 4] {
        // At the compacted revision too, as etcd (`rev <= compactRev`).
        expect_out_of_range(
            hash_kv(&cluster, 2, revision).await,
            "etcdserver: mvcc: required revision has been compacted",
        );
    }
    assert_eq!(agreed(&cluster, 6, 6).await.0, after);
    // Hash (the whole store, "for testing only" in etcd) answers on every member.
    for i in 0..cluster.size() {
        let response = cluster.client(i).await.hash().await.expect("hash");
        assert_ne!(response.hash(), 0, "member {i}");
    }
}
