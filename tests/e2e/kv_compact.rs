//! KV.Compact: what compaction hides, `physical`, and its errors.

use etcd_client::{CompactionOptions, GetOptions, Txn, TxnOp};
use tonic::Code;

use crate::harness::*;

const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
const FUTURE: &str = "etcdserver: mvcc: required revision is a future revision";

#[tokio::test]
async fn compact_hides_older_revisions_and_keeps_the_current_state() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    for v in ["v1", "v2", "v3", "v4"] {
        client.put("k", v, None).await.unwrap(); // revs 2..=5
    }
    client.put("gone", "x", None).await.unwrap(); // 6
    client.delete("gone", None).await.unwrap(); // 7

    let resp = client.compact(4, None).await.unwrap();
    // Compaction is not a store change: the header shows the current revision.
    assert_eq!(header_rev(resp.header()), 7);
    assert_eq!(current_revision(&mut client).await, 7);

    assert_grpc_error(
        client
            .get("k", Some(GetOptions::new().with_revision(3)))
            .await,
        Code::OutOfRange,
        COMPACTED,
    );
    let at4 = client
        .get("k", Some(GetOptions::new().with_revision(4)))
        .await
        .unwrap();
    assert_eq!(pairs(&at4), vec![("k".into(), "v3".into())]);
    assert_eq!(revs(&at4.kvs()[0]), (2, 4, 3));

    // The latest state is untouched: versions and create revisions survive.
    let now = client.get("k", None).await.unwrap();
    assert_eq!(pairs(&now), vec![("k".into(), "v4".into())]);
    assert_eq!(revs(&now.kvs()[0]), (2, 5, 4));
    assert!(client.get("gone", None).await.unwrap().kvs().is_empty());

    // The next write continues from the current revision.
    let resp = client.put("k", "v5", None).await.unwrap();
    assert_eq!(header_rev(resp.header()), 8);
    let now = client.get("k", None).await.unwrap();
    assert_eq!(revs(&now.kvs()[0]), (2, 8, 5));
}

#[tokio::test]
async fn physical_compact_returns_with_old_revisions_gone() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    for i in 0..10 {
        client
            .put(format!("k{}", i % 3), format!("v{i}"), None)
            .await
            .unwrap();
    }
    // revs 2..=11

    let resp = client
        .compact(10, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    assert_eq!(header_rev(resp.header()), 11);
    assert_grpc_error(
        client
            .get("k0", Some(GetOptions::new().with_revision(9)))
            .await,
        Code::OutOfRange,
        COMPACTED,
    );
    let resp = client
        .get(
            "",
            Some(GetOptions::new().with_all_keys().with_revision(10)),
        )
        .await
        .unwrap();
    assert_eq!(
        pairs(&resp),
        vec![
            ("k0".into(), "v6".into()),
            ("k1".into(), "v7".into()),
            ("k2".into(), "v8".into()),
        ]
    );
}

#[tokio::test]
async fn compact_of_a_future_revision_fails_with_out_of_range() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    client.put("k", "v", None).await.unwrap(); // 2

    assert_grpc_error(client.compact(3, None).await, Code::OutOfRange, FUTURE);
    assert_grpc_error(
        client
            .compact(100, Some(CompactionOptions::new().with_physical()))
            .await,
        Code::OutOfRange,
        FUTURE,
    );
    // Compacting the current revision is allowed.
    client.compact(2, None).await.unwrap();
}

#[tokio::test]
async fn compact_of_an_already_compacted_revision_fails_with_out_of_range() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    for v in ["v1", "v2", "v3"] {
        client.put("k", v, None).await.unwrap(); // revs 2..=4
    }
    client.compact(3, None).await.unwrap();

    assert_grpc_error(client.compact(3, None).await, Code::OutOfRange, COMPACTED);
    assert_grpc_error(client.compact(2, None).await, Code::OutOfRange, COMPACTED);
    // A later revision can still be compacted.
    client.compact(4, None).await.unwrap();
    assert_grpc_error(client.compact(4, None).await, Code::OutOfRange, COMPACTED);
}

#[tokio::test]
async fn txn_range_below_the_compacted_revision_fails_the_whole_txn() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    for v in ["v1", "v2", "v3"] {
        client.put("k", v, None).await.unwrap(); // revs 2..=4
    }
    client.compact(3, None).await.unwrap();

    assert_grpc_error(
        client
            .txn(Txn::new().and_then([
                TxnOp::put("other", "x", None),
                TxnOp::get("k", Some(GetOptions::new().with_revision(2))),
            ]))
            .await,
        Code::OutOfRange,
        COMPACTED,
    );
    assert!(client.get("other", None).await.unwrap().kvs().is_empty());
    assert_eq!(current_revision(&mut client).await, 4);
}
