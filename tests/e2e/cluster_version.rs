//! The cluster version as etcd 3.6 decides it: the lowest `major.minor` of the members'
//! server versions, reported by every member at `/version` (`etcdcluster`) and by
//! Downgrade's answers. Each member publishes its version through the log, so members
//! of one cluster agree; an upgraded member publishes again. etcd 3.4 runs one version
//! in a cluster (its oracle is kubeadm's `/version` test), so this runs against
//! QuantyKube, whose members can report different versions (`--etcd-version`).

use std::time::{Duration, Instant};

use crate::harness::{http_get, Cluster, ClusterOptions, Target};

async fn etcdcluster(endpoint: &str) -> String {
    let answer = http_get(&format!("{endpoint}/version"), None).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let v: serde_json::Value = serde_json::from_str(&answer.body).expect("JSON");
    v["etcdcluster"].as_str().expect("etcdcluster").to_owned()
}

/// The `cluster_version` label of the one `etcd_cluster_version` series a member
/// serves (its metrics are on the client URL too, as etcd's).
async fn gauge(endpoint: &str) -> String {
    let metrics = crate::metrics::scrape(endpoint).await;
    let series: Vec<String> = metrics
        .samples("etcd_cluster_version", &[])
        .filter(|s| s.value == 1.0)
        .filter_map(|s| s.labels.get("cluster_version").cloned())
        .collect();
    assert_eq!(
        series.len(),
        1,
        "one etcd_cluster_version series: {series:?}"
    );
    series[0].clone()
}

/// Waits until every member reports `cluster` (`major.minor`) at `/version` and in its
/// gauge: each applies the members' published versions from the log, a moment after
/// they were committed.
async fn assert_every_member_reports(cluster: &Cluster, version: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..3 {
        loop {
            let endpoint = cluster.endpoint(i);
            let reported = (etcdcluster(&endpoint).await, gauge(&endpoint).await);
            if reported == (format!("{version}.0"), version.to_owned()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "member {i} reports {reported:?}, not {version}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
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
    assert_every_member_reports(&cluster, "3.6").await;
    // Member 2 upgraded: once it has published its new version, every member reports
    // the higher cluster version.
    cluster.set_member_flags(2, &[]);
    cluster.restart(2).await;
    assert_every_member_reports(&cluster, "3.7").await;
}
