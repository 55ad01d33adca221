//! etcd's revision rules: where a cluster starts, what bumps the revision, and
//! create_revision / mod_revision / version across delete and re-create.

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

use crate::harness::*;

#[tokio::test]
async fn new_cluster_starts_at_revision_one() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;

    let resp = client
        .get("", Some(GetOptions::new().with_all_keys()))
        .await
        .unwrap();
    assert_eq!(header_rev(resp.header()), 1);
    assert!(resp.kvs().is_empty());
    assert_eq!(resp.count(), 0);
}

#[tokio::test]
async fn every_mutating_request_adds_exactly_one_revision() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;

    let r = client.put("a", "1", None).await.unwrap();
    assert_eq!(header_rev(r.header()), 2);
    let r = client.put("a", "2", None).await.unwrap();
    assert_eq!(header_rev(r.header()), 3);
    let r = client
        .txn(Txn::new().and_then([
            TxnOp::put("b", "1", None),
            TxnOp::put("c", "1", None),
            TxnOp::delete("a", None),
        ]))
        .await
        .unwrap();
    assert_eq!(header_rev(r.header()), 4, "a txn is one revision");
    let r = client
        .delete("b", Some(etcd_client::DeleteOptions::new().with_range("d")))
        .await
        .unwrap();
    assert_eq!(r.deleted(), 2);
    assert_eq!(
        header_rev(r.header()),
        5,
        "a multi-key delete is one revision"
    );
    let r = client
        .txn(
            Txn::new()
                .when([Compare::version("zzz", CompareOp::Equal, 1)])
                .or_else([TxnOp::put("f", "1", None)]),
        )
        .await
        .unwrap();
    assert!(!r.succeeded());
    assert_eq!(header_rev(r.header()), 6, "failure branch writes count too");
    assert_eq!(current_revision(&mut client).await, 6);
}

#[tokio::test]
async fn requests_that_change_nothing_do_not_add_a_revision() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    client.put("a", "1", None).await.unwrap(); // 2

    let r = client.delete("missing", None).await.unwrap();
    assert_eq!(r.deleted(), 0);
    assert_eq!(header_rev(r.header()), 2);
    let _ = client
        .put("missing", "", Some(PutOptions::new().with_ignore_value()))
        .await
        .expect_err("ignore_value on a missing key fails");
    let _ = client
        .put("a", "x", Some(PutOptions::new().with_lease(99)))
        .await
        .expect_err("unknown lease fails");
    client.compact(2, None).await.unwrap();
    let r = client
        .txn(Txn::new().and_then([TxnOp::get("a", None)]))
        .await
        .unwrap();
    assert_eq!(header_rev(r.header()), 2);
    assert_eq!(current_revision(&mut client).await, 2);

    // Writing the same value again is still a change.
    let r = client.put("a", "1", None).await.unwrap();
    assert_eq!(header_rev(r.header()), 3);
}

#[tokio::test]
async fn delete_and_recreate_starts_a_new_generation_of_the_key() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;

    client.put("k", "v1", None).await.unwrap(); // 2
    client.put("k", "v2", None).await.unwrap(); // 3
    let kv = client.get("k", None).await.unwrap().kvs()[0].clone();
    assert_eq!(revs(&kv), (2, 3, 2), "(create, mod, version)");

    client.delete("k", None).await.unwrap(); // 4
    assert!(client.get("k", None).await.unwrap().kvs().is_empty());

    client.put("k", "v3", None).await.unwrap(); // 5
    let kv = client.get("k", None).await.unwrap().kvs()[0].clone();
    assert_eq!(revs(&kv), (5, 5, 1));

    client.put("k", "v4", None).await.unwrap(); // 6
    let kv = client.get("k", None).await.unwrap().kvs()[0].clone();
    assert_eq!(revs(&kv), (5, 6, 2));

    // History keeps the old generation.
    let old = client
        .get("k", Some(GetOptions::new().with_revision(3)))
        .await
        .unwrap();
    assert_eq!(revs(&old.kvs()[0]), (2, 3, 2));
    assert_eq!(lossy(old.kvs()[0].value()), "v2");
}
