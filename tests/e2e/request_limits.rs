//! `--max-request-bytes` and `--quota-backend-bytes`: writes over the limits are refused.

use etcd_client::{GetOptions, Txn, TxnOp};
use tonic::Code;

use crate::harness::*;
use crate::support::status::assert_code_message;

#[tokio::test]
async fn write_larger_than_max_request_bytes_fails_request_is_too_large() {
    let cluster = ClusterOptions::new(1)
        .args(["--max-request-bytes", "4096"])
        .start()
        .await;
    let mut client = cluster.client(0).await;

    // Comfortably under the limit.
    client.put("small", "x".repeat(3000), None).await.unwrap(); // 2

    for size in [4096, 5000, 100_000] {
        assert_grpc_error(
            client.put("big", "x".repeat(size), None).await,
            Code::InvalidArgument,
            "etcdserver: request is too large",
        );
    }
    assert_grpc_error(
        client
            .txn(Txn::new().and_then([
                TxnOp::put("t1", "x".repeat(2500), None),
                TxnOp::put("t2", "x".repeat(2500), None),
            ]))
            .await,
        Code::InvalidArgument,
        "etcdserver: request is too large",
    );
    assert!(client.get("big", None).await.unwrap().kvs().is_empty());
    assert_eq!(current_revision(&mut client).await, 2);

    // Reads are not proposals: a Range with a key over the limit is served.
    let resp = client
        .get("k".repeat(5000), Some(GetOptions::new()))
        .await
        .unwrap();
    assert!(resp.kvs().is_empty());
}

/// etcd sets the gRPC receive limit to max-request-bytes + 512 KiB; a message over
/// that is refused by the gRPC layer itself with RESOURCE_EXHAUSTED (the message text
/// is the gRPC library's own, so only the code is asserted).
#[tokio::test]
async fn write_beyond_the_grpc_receive_limit_fails_resource_exhausted() {
    let cluster = ClusterOptions::new(1)
        .args(["--max-request-bytes", "4096"])
        .start()
        .await;
    let mut client = cluster.client(0).await;

    let status = grpc_status(
        client
            .put("huge", "x".repeat(4096 + 512 * 1024 + 1024), None)
            .await,
    );
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(current_revision(&mut client).await, 1);
}

#[tokio::test]
async fn puts_beyond_the_backend_quota_fail_with_no_space_while_deletes_pass() {
    let cluster = ClusterOptions::new(1)
        .args(["--quota-backend-bytes", &(8 * 1024 * 1024).to_string()])
        .start()
        .await;
    let mut client = cluster.client(0).await;
    let value = "q".repeat(1024 * 1024);
    let mut refused = None;
    for i in 0..64 {
        match client.put(format!("big/{i:02}"), value.clone(), None).await {
            Ok(_) => continue,
            Err(e) => {
                refused = Some(grpc_status(Err::<(), _>(e)));
                break;
            }
        }
    }
    let status = refused.expect("a put beyond an 8 MiB quota is refused");
    assert_code_message(
        &status,
        Code::ResourceExhausted,
        "etcdserver: mvcc: database space exceeded",
        "a put beyond the quota",
    );
    // A delete frees space and is never refused for it.
    let deleted = client
        .delete(
            "big/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .expect("delete under a full quota");
    assert!(deleted.deleted() > 0);
}
