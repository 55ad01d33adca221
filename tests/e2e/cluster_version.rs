//! The cluster version as etcd 3.6 decides it: the lowest `major.minor` of the members'
//! server versions, reported by every member at `/version` (`etcdcluster`) and by
//! Downgrade's answers. Each member publishes its version through the log, so members
//! of one cluster agree; an upgraded member publishes again. etcd 3.4 runs one version
//! in a cluster (its oracle is kubeadm's `/version` test), so this runs against
//! QuantyKube, whose members can report different versions (`--etcd-version`).

use std::time::{Duration, Instant};

use crate::harness::{http_get, ClusterOptions, Target};

async fn etcdcluster(endpoint: &str) -> String {
    let answer = http_get(&format!("{endpoint}/version"), None).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let v: serde_json::Value = serde_json::from_str(&answer.body).expect("JSON");
    v["etcdcluster"].as_str().expect("etcdcluster").to_owned()
}

#[tokio::test]
async fn cluster_version_is_the_lowest_members_and_follows_an_upgrade() {
    if Target::from_env() == Target::Etcd {
        return;
    }
    // Member 2 runs an older server version than the others.
    let mut cluster = ClusterOptions::new(3).unstarted().start().await;
    cluster.set_member_flags(2, &["--etcd-version=3.6.9"]);
    cluster.start_all().await;
    for i in 0..3 {
        assert_eq!(
            etcdcluster(&cluster.endpoint(i)).await,
            "3.6.0",
            "member {i}"
        );
    }
    // Member 2 upgraded: once it has published its new version, every member reports
    // the higher cluster version.
    cluster.set_member_flags(2, &[]);
    cluster.restart(2).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..3 {
        loop {
            let version = etcdcluster(&cluster.endpoint(i)).await;
            if version == "3.7.0" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "member {i} still reports {version}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
