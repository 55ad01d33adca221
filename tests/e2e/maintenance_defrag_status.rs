//! Defragment (space that compaction freed comes back, with reads and writes going on),
//! every Status field etcd 3.6 returns, and Downgrade as etcd 3.6 answers a cluster
//! with no older version to go to.
//!
//! Written against etcd 3.4 first: 3.4 has neither Status's 3.6 fields
//! (`storageVersion`, `dbSizeQuota`, `downgradeInfo`) nor the Downgrade RPC, so those
//! checks are QuantyKube's only and say so; on etcd 3.4 the test checks 3.4's answer.

use std::time::Duration;

use etcd_client::proto::{
    PbDefragmentRequest, PbDefragmentResponse, PbDowngradeRequest, PbDowngradeResponse,
    PbStatusResponse,
};
use etcd_client::CompactionOptions;
use tonic::Code;

use crate::harness::{current_revision, Cluster, ClusterOptions, Target};
use crate::maintenance_alarm::{noise, QUOTA};
use crate::support::grpc::unary_to;
use crate::support::status::assert_status;

async fn status(endpoint: &str) -> PbStatusResponse {
    unary_to(endpoint, "/etcdserverpb.Maintenance/Status", ())
        .await
        .expect("status")
}

async fn defragment(endpoint: &str) -> Result<PbDefragmentResponse, tonic::Status> {
    unary_to(
        endpoint,
        "/etcdserverpb.Maintenance/Defragment",
        PbDefragmentRequest {},
    )
    .await
}

async fn downgrade(
    endpoint: &str,
    action: i32,
    version: &str,
) -> Result<PbDowngradeResponse, tonic::Status> {
    unary_to(
        endpoint,
        "/etcdserverpb.Maintenance/Downgrade",
        PbDowngradeRequest {
            action,
            version: version.to_owned(),
        },
    )
    .await
}

#[tokio::test]
async fn defragment_gives_back_what_compaction_freed_while_writes_go_on() {
    let cluster = Cluster::start(1).await;
    let endpoint = cluster.endpoint(0);
    let mut client = cluster.client(0).await;
    // 40 versions of 4 keys, 64 KiB each: 10 MiB, of which compaction frees 9/10.
    for i in 0..160u64 {
        client
            .put(format!("k{}", i % 4), noise(i, 64 * 1024), None)
            .await
            .expect("put");
    }
    let revision = current_revision(&mut client).await;
    client
        .compact(revision, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");
    let compacted = status(&endpoint).await;
    assert!(
        compacted.db_size_in_use < compacted.db_size,
        "in use {} of {} after compaction",
        compacted.db_size_in_use,
        compacted.db_size
    );

    // Writes and reads go on while the member defragments.
    let writer = {
        let mut client = cluster.client(0).await;
        tokio::spawn(async move {
            for i in 0..20 {
                client
                    .put(format!("during/{i}"), "x", None)
                    .await
                    .expect("put during defrag");
                client.get("k0", None).await.expect("get during defrag");
            }
        })
    };
    let answer = defragment(&endpoint).await.expect("defragment");
    // etcd (3.4 and 3.6) answers Defragment with an empty response, no header.
    assert!(answer.header.is_none(), "{answer:?}");
    tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("writes finish")
        .expect("writer");
    let after = status(&endpoint).await;
    assert!(
        after.db_size < compacted.db_size / 2,
        "db size {} after defragmenting {}",
        after.db_size,
        compacted.db_size
    );
    assert!(after.db_size_in_use <= after.db_size, "{after:?}");
    // etcdctl's defrag, one member and every member.
    let out = cluster.etcdctl(&["defrag"]).await;
    assert!(
        out.assert_success()
            .stdout
            .contains(&format!("Finished defragmenting etcd member[{endpoint}]")),
        "{out:?}"
    );
    cluster
        .etcdctl(&["defrag", "--cluster"])
        .await
        .assert_success();
    let got = client.get("k3", None).await.expect("get");
    assert_eq!(got.kvs()[0].value(), noise(159, 64 * 1024).as_slice());
}

#[tokio::test]
async fn status_reports_every_field() {
    let cluster =
        Cluster::start_with(ClusterOptions::new(3).arg(format!("--quota-backend-bytes={QUOTA}")))
            .await;
    let leader = cluster.leader_index().await;
    let mut client = cluster.client(0).await;
    client.put("a", "1", None).await.expect("put");
    for i in 0..3 {
        let status = status(&cluster.endpoint(i)).await;
        let header = status.header.expect("header");
        assert_eq!(header.member_id, cluster.member_id(i));
        assert_eq!(status.leader, cluster.member_id(leader));
        assert!(
            status.db_size > 0 && status.db_size_in_use > 0,
            "{status:?}"
        );
        assert!(status.db_size_in_use <= status.db_size, "{status:?}");
        assert!(status.raft_index >= status.raft_applied_index && status.raft_applied_index > 0);
        assert!(status.raft_term > 0);
        assert!(status.errors.is_empty(), "{status:?}");
        assert!(!status.is_learner);
        match cluster.target() {
            // etcd 3.4 has no field 11-13.
            Target::Etcd => {
                assert!(status.version.starts_with("3.4."), "{status:?}");
                assert_eq!(status.storage_version, "");
                assert_eq!(status.db_size_quota, 0);
                assert!(status.downgrade_info.is_none());
            }
            // etcd 3.7: the storage format's version, the quota, no downgrade.
            Target::Quantykube => {
                assert_eq!(status.storage_version, "3.7.0", "{status:?}");
                assert_eq!(status.db_size_quota, QUOTA as i64);
                let info = status.downgrade_info.clone().expect("downgrade info");
                assert!(!info.enabled && info.target_version.is_empty(), "{info:?}");
            }
        }
    }
    // etcdctl prints the size and the alarm column.
    let table = cluster.etcdctl(&["endpoint", "status"]).await;
    assert_eq!(
        table.assert_success().stdout.lines().count(),
        3,
        "{table:?}"
    );
}

#[tokio::test]
async fn status_quota_is_the_quota_in_force() {
    if Target::from_env() == Target::Etcd {
        // etcd 3.4's Status has no dbSizeQuota.
        return;
    }
    const DEFAULT: i64 = 2 * 1024 * 1024 * 1024;
    for (flag, expected) in [(None, DEFAULT), (Some("0"), DEFAULT), (Some("-1"), -1)] {
        let mut options = ClusterOptions::new(1);
        if let Some(value) = flag {
            options = options.arg(format!("--quota-backend-bytes={value}"));
        }
        let cluster = Cluster::start_with(options).await;
        let status = status(&cluster.endpoint(0)).await;
        // etcd 3.7 reports the 2 GiB it enforces for 0 (3.6 reported the flag as given,
        // 0), and a negative flag as given.
        assert_eq!(
            status.db_size_quota, expected,
            "--quota-backend-bytes={flag:?}"
        );
    }
}

mod downgrade_action {
    pub const VALIDATE: i32 = 0;
    pub const ENABLE: i32 = 1;
    pub const CANCEL: i32 = 2;
}

#[tokio::test]
async fn downgrade_answers_as_etcd_36_with_no_older_version() {
    use downgrade_action::*;
    let cluster = Cluster::start(3).await;
    let endpoint = cluster.endpoint(1);
    if cluster.target() == Target::Etcd {
        // etcd 3.4 has no Downgrade RPC (it arrived in 3.5): gRPC's Unimplemented.
        for action in [VALIDATE, ENABLE, CANCEL] {
            let status = downgrade(&endpoint, action, "3.3")
                .await
                .expect_err("no rpc");
            assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
        }
        return;
    }
    let expect = |answer: Result<PbDowngradeResponse, tonic::Status>, code, message: &str| {
        assert_status(answer, code, message, "refused");
    };
    const INVALID: &str = "etcdserver: invalid downgrade target version";
    const FORMAT: &str = "etcdserver: wrong downgrade target version format";
    for action in [VALIDATE, ENABLE] {
        // 3.6 included: etcd 3.7 would downgrade to it, but no QuantyKube member can be
        // replaced by an etcd 3.6 one, so there is nothing to downgrade to.
        for target in ["3.5", "3.5.0", "3.6", "3.6.0", "3.7", "3.4.23", "2.3"] {
            expect(
                downgrade(&endpoint, action, target).await,
                Code::InvalidArgument,
                INVALID,
            );
        }
        for target in ["", "3", "v3.5", "three.five", "3.5.x"] {
            expect(
                downgrade(&endpoint, action, target).await,
                Code::InvalidArgument,
                FORMAT,
            );
        }
    }
    // CANCEL with nothing to cancel: etcd 3.6 logs `no inflight downgrade job` and
    // answers with the cluster version.
    let cancelled = downgrade(&endpoint, CANCEL, "").await.expect("cancel");
    assert_eq!(cancelled.version, "3.7");
    assert_eq!(
        cancelled.header.expect("header").member_id,
        cluster.member_id(1)
    );
    expect(
        downgrade(&endpoint, 7, "3.5").await,
        Code::Unknown,
        "etcdserver: unknown method",
    );
    // Nothing changed.
    let info = status(&endpoint).await.downgrade_info.expect("info");
    assert!(!info.enabled);
}
