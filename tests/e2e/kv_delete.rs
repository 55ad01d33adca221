//! KV.DeleteRange: single key, ranges, prefixes, from-key, prev_kv and counts.

use etcd_client::{Client, DeleteOptions, GetOptions};
use tonic::Code;

use crate::harness::*;

async fn seed(client: &mut Client) {
    for k in ["a", "b", "b/1", "b/2", "c", "d"] {
        client.put(k, format!("v-{k}"), None).await.unwrap(); // revs 2..=7
    }
}

async fn all_keys(client: &mut Client) -> Vec<String> {
    let resp = client
        .get("", Some(GetOptions::new().with_all_keys()))
        .await
        .unwrap();
    keys(&resp)
}

#[tokio::test]
async fn delete_single_key_removes_only_that_key() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed(&mut client).await;

    let resp = client.delete("b", None).await.unwrap();
    assert_eq!(resp.deleted(), 1);
    assert!(resp.prev_kvs().is_empty(), "prev_kvs only when asked for");
    assert_eq!(header_rev(resp.header()), 8);
    assert_eq!(all_keys(&mut client).await, ["a", "b/1", "b/2", "c", "d"]);
}

#[tokio::test]
async fn delete_of_missing_key_deletes_nothing_and_keeps_the_revision() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed(&mut client).await;

    let resp = client.delete("zzz", None).await.unwrap();
    assert_eq!(resp.deleted(), 0);
    assert_eq!(header_rev(resp.header()), 7);
    let resp = client
        .delete("x", Some(DeleteOptions::new().with_range("z")))
        .await
        .unwrap();
    assert_eq!(resp.deleted(), 0);
    assert_eq!(header_rev(resp.header()), 7);
    assert_eq!(current_revision(&mut client).await, 7);
}

#[tokio::test]
async fn delete_range_removes_the_half_open_interval_and_counts_it() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed(&mut client).await;

    let resp = client
        .delete("b", Some(DeleteOptions::new().with_range("c")))
        .await
        .unwrap();
    assert_eq!(resp.deleted(), 3);
    assert_eq!(header_rev(resp.header()), 8);
    assert_eq!(all_keys(&mut client).await, ["a", "c", "d"]);
}

#[tokio::test]
async fn delete_prefix_removes_exactly_the_prefixed_keys() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed(&mut client).await;

    let resp = client
        .delete("b/", Some(DeleteOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(resp.deleted(), 2);
    assert_eq!(all_keys(&mut client).await, ["a", "b", "c", "d"]);
}

#[tokio::test]
async fn delete_from_key_removes_every_key_at_or_after_it() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed(&mut client).await;

    let resp = client
        .delete("b/1", Some(DeleteOptions::new().with_from_key()))
        .await
        .unwrap();
    assert_eq!(resp.deleted(), 4);
    assert_eq!(all_keys(&mut client).await, ["a", "b"]);

    let resp = client
        .delete("", Some(DeleteOptions::new().with_all_keys()))
        .await
        .unwrap();
    assert_eq!(resp.deleted(), 2);
    assert!(all_keys(&mut client).await.is_empty());
}

#[tokio::test]
async fn delete_with_prev_kv_returns_every_deleted_pair_in_key_order() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed(&mut client).await;
    client.put("b/1", "v-b/1-new", None).await.unwrap(); // rev 8

    let resp = client
        .delete(
            "b",
            Some(DeleteOptions::new().with_prefix().with_prev_key()),
        )
        .await
        .unwrap();
    assert_eq!(resp.deleted(), 3);
    let prev: Vec<_> = resp
        .prev_kvs()
        .iter()
        .map(|kv| (lossy(kv.key()), lossy(kv.value()), revs(kv)))
        .collect();
    assert_eq!(
        prev,
        vec![
            ("b".into(), "v-b".into(), (3, 3, 1)),
            ("b/1".into(), "v-b/1-new".into(), (4, 8, 2)),
            ("b/2".into(), "v-b/2".into(), (5, 5, 1)),
        ]
    );
    assert_eq!(header_rev(resp.header()), 9);
}

#[tokio::test]
async fn delete_with_empty_key_fails_key_is_not_provided() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;

    assert_grpc_error(
        client.delete("", None).await,
        Code::InvalidArgument,
        "etcdserver: key is not provided",
    );
}
