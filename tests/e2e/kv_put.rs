//! KV.Put: prev_kv, ignore_value, ignore_lease, lease, and their errors.

use etcd_client::PutOptions;
use tonic::Code;

use crate::harness::*;

#[tokio::test]
async fn put_creates_then_overwrites_a_key_one_revision_each() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;

    let resp = client.put("k", "v1", None).await.unwrap();
    assert_eq!(header_rev(resp.header()), 2);
    assert!(resp.prev_key().is_none(), "prev_kv only when asked for");
    let resp = client.put("k", "v2", None).await.unwrap();
    assert_eq!(header_rev(resp.header()), 3);

    let got = client.get("k", None).await.unwrap();
    assert_eq!(pairs(&got), vec![("k".into(), "v2".into())]);
    assert_eq!(revs(&got.kvs()[0]), (2, 3, 2));
}

#[tokio::test]
async fn put_with_prev_kv_returns_the_previous_pair_only_if_the_key_existed() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    let prev = || Some(PutOptions::new().with_prev_key());

    let resp = client.put("k", "v1", prev()).await.unwrap();
    assert!(resp.prev_key().is_none());

    let resp = client.put("k", "v2", prev()).await.unwrap();
    let kv = resp.prev_key().expect("prev_kv");
    assert_eq!(
        (lossy(kv.key()), lossy(kv.value())),
        ("k".into(), "v1".into())
    );
    assert_eq!(revs(kv), (2, 2, 1));
    assert_eq!(header_rev(resp.header()), 3);
}

#[tokio::test]
async fn put_with_ignore_value_keeps_the_value_and_bumps_version() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    client.put("k", "original", None).await.unwrap();

    let resp = client
        .put(
            "k",
            "",
            Some(PutOptions::new().with_ignore_value().with_prev_key()),
        )
        .await
        .unwrap();
    assert_eq!(header_rev(resp.header()), 3);
    assert_eq!(lossy(resp.prev_key().expect("prev_kv").value()), "original");

    let got = client.get("k", None).await.unwrap();
    assert_eq!(pairs(&got), vec![("k".into(), "original".into())]);
    assert_eq!(revs(&got.kvs()[0]), (2, 3, 2));
}

#[tokio::test]
async fn put_with_ignore_value_and_a_value_fails_value_is_provided() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    client.put("k", "v", None).await.unwrap();

    assert_grpc_error(
        client
            .put("k", "new", Some(PutOptions::new().with_ignore_value()))
            .await,
        Code::InvalidArgument,
        "etcdserver: value is provided",
    );
    assert_eq!(current_revision(&mut client).await, 2);
}

#[tokio::test]
async fn put_with_ignore_value_on_missing_key_fails_key_not_found_without_new_revision() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;

    assert_grpc_error(
        client
            .put("missing", "", Some(PutOptions::new().with_ignore_value()))
            .await,
        Code::InvalidArgument,
        "etcdserver: key not found",
    );
    assert_eq!(current_revision(&mut client).await, 1);
    assert!(client.get("missing", None).await.unwrap().kvs().is_empty());
}

#[tokio::test]
async fn put_with_ignore_lease_keeps_the_lease_and_sets_the_value() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    client.put("k", "v1", None).await.unwrap();

    let resp = client
        .put("k", "v2", Some(PutOptions::new().with_ignore_lease()))
        .await
        .unwrap();
    assert_eq!(header_rev(resp.header()), 3);
    let got = client.get("k", None).await.unwrap();
    assert_eq!(pairs(&got), vec![("k".into(), "v2".into())]);
    assert_eq!(got.kvs()[0].lease(), 0);
    assert_eq!(revs(&got.kvs()[0]), (2, 3, 2));
}

#[tokio::test]
async fn put_with_ignore_lease_and_a_lease_fails_lease_is_provided() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    client.put("k", "v", None).await.unwrap();

    assert_grpc_error(
        client
            .put(
                "k",
                "v2",
                Some(PutOptions::new().with_ignore_lease().with_lease(12345)),
            )
            .await,
        Code::InvalidArgument,
        "etcdserver: lease is provided",
    );
    assert_eq!(current_revision(&mut client).await, 2);
}

#[tokio::test]
async fn put_with_ignore_lease_on_missing_key_fails_key_not_found() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;

    assert_grpc_error(
        client
            .put("missing", "v", Some(PutOptions::new().with_ignore_lease()))
            .await,
        Code::InvalidArgument,
        "etcdserver: key not found",
    );
    assert_eq!(current_revision(&mut client).await, 1);
}

#[tokio::test]
async fn put_with_unknown_lease_fails_lease_not_found() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;

    assert_grpc_error(
        client
            .put("k", "v", Some(PutOptions::new().with_lease(0x1234)))
            .await,
        Code::NotFound,
        "etcdserver: requested lease not found",
    );
    assert_eq!(current_revision(&mut client).await, 1);
    assert!(client.get("k", None).await.unwrap().kvs().is_empty());
}

#[tokio::test]
async fn put_with_empty_key_fails_key_is_not_provided() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;

    assert_grpc_error(
        client.put("", "v", None).await,
        Code::InvalidArgument,
        "etcdserver: key is not provided",
    );
}
