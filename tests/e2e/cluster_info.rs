//! Response headers, Cluster.MemberList, Maintenance.Status and grpc.health.v1.

use std::collections::HashSet;

use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::harness::*;
use crate::raw;

#[tokio::test]
async fn response_headers_carry_cluster_id_serving_member_revision_and_term() {
    let cluster = Cluster::start(3).await;
    let mut writer = cluster.client(0).await;
    writer.put("k", "v", None).await.unwrap();
    let members = writer.member_list().await.unwrap();

    let mut cluster_ids = HashSet::new();
    for i in 0..3 {
        let mut client = cluster.client(i).await;
        let status = client.status().await.unwrap();
        let resp = client.get("k", None).await.unwrap();
        let header = resp.header().expect("header");
        assert_ne!(header.cluster_id(), 0);
        cluster_ids.insert(header.cluster_id());
        let listed = members
            .members()
            .iter()
            .find(|m| m.name() == cluster.name(i))
            .expect("member in list");
        assert_eq!(
            header.member_id(),
            listed.id(),
            "member {i} serves the read"
        );
        assert_eq!(header.revision(), 2 + i as i64);
        assert!(header.raft_term() >= 1);
        assert_eq!(header.raft_term(), status.raft_term());

        let put = client.put(format!("k{i}"), "v", None).await.unwrap();
        let put_header = put.header().expect("header");
        assert_eq!(put_header.member_id(), listed.id());
        assert_eq!(put_header.revision(), 3 + i as i64);
    }
    assert_eq!(cluster_ids.len(), 1, "one cluster id across members");
}

#[tokio::test]
async fn member_list_reports_every_member_from_every_member() {
    let cluster = Cluster::start(3).await;

    let mut views = Vec::new();
    for i in 0..3 {
        let resp = cluster.client(i).await.member_list().await.unwrap();
        let header = resp.header().expect("header");
        assert_eq!(header.member_id(), cluster.member_id(i));
        assert_ne!(header.cluster_id(), 0);
        let mut members: Vec<_> = resp
            .members()
            .iter()
            .map(|m| {
                (
                    m.name().to_owned(),
                    m.id(),
                    m.peer_urls().to_vec(),
                    m.client_urls().to_vec(),
                    m.is_learner(),
                )
            })
            .collect();
        members.sort();
        views.push(members);
    }
    let expected: Vec<_> = (0..3)
        .map(|i| {
            (
                cluster.name(i),
                cluster.member_id(i),
                vec![cluster.peer_url(i)],
                vec![cluster.endpoint(i)],
                false,
            )
        })
        .collect();
    for view in &views {
        assert_eq!(view, &expected);
    }
    let ids: HashSet<u64> = expected.iter().map(|m| m.1).collect();
    assert_eq!(ids.len(), 3);
    assert!(!ids.contains(&0));
}

#[tokio::test]
async fn status_reports_version_leader_and_raft_progress() {
    let cluster = Cluster::start(3).await;
    let mut client = cluster.client(0).await;
    for i in 0..5 {
        client.put(format!("k{i}"), "v", None).await.unwrap();
    }
    let ids: HashSet<u64> = (0..3).map(|i| cluster.member_id(i)).collect();

    let mut leaders = HashSet::new();
    for i in 0..3 {
        let status = cluster.client(i).await.status().await.unwrap();
        // etcd 3.4 says "3.4.x"; QuantyKube reports the etcd version it implements.
        assert!(
            status.version().starts_with("3."),
            "version {:?}",
            status.version()
        );
        assert!(ids.contains(&status.leader()), "leader is a member");
        leaders.insert(status.leader());
        assert!(status.raft_term() >= 1);
        assert!(
            status.raft_index() >= 5,
            "raft_index {}",
            status.raft_index()
        );
        assert!(status.raft_applied_index() >= 5);
        assert!(status.raft_applied_index() <= status.raft_index());
        assert!(status.db_size() > 0);
        assert!(!status.is_learner());
        let header = status.header().expect("header");
        assert_eq!(header.member_id(), cluster.member_id(i));
        assert_eq!(header.revision(), 6);
        assert_eq!(header.raft_term(), status.raft_term());
    }
    assert_eq!(leaders.len(), 1, "all members agree on the leader");
    let leader = cluster.leader_index().await;
    assert!(leaders.contains(&cluster.member_id(leader)));
}

#[tokio::test]
async fn health_check_reports_serving_on_every_member() {
    let cluster = Cluster::start(3).await;

    // QuantyKube's health follows a probe that runs every tenth of an election timeout
    // while unhealthy, so a member that has just become ready may report it a moment
    // later; etcd flips at readiness. Either way, SERVING within a few seconds.
    for i in 0..3 {
        let mut health = HealthClient::new(raw::channel(&cluster.endpoint(i)).await);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        loop {
            let resp = health
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .unwrap_or_else(|e| panic!("health check on member {i}: {e}"))
                .into_inner();
            if resp.status() == ServingStatus::Serving {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "member {i}: {:?}",
                resp.status()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}
