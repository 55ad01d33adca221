//! What QuantyKube adds around etcd's API: its command line (etcd's flags, refusals),
//! RPCs no service has, and health without a leader. These run against QuantyKube only;
//! against etcd they return early, since they assert QuantyKube's own wording.

use std::process::Stdio;
use std::time::Duration;

use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::harness::{Cluster, Deadline, Target};
use crate::raw;
use crate::support::grpc::unary;

fn quantykube() -> Option<std::path::PathBuf> {
    match Target::from_env() {
        Target::Quantykube => Target::Quantykube.binary(),
        Target::Etcd => None,
    }
}

async fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let binary = quantykube().expect("quantykube binary");
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(binary);
    cmd.args(args)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(20), cmd.output())
        .await
        .expect("quantykube exits by itself")
        .expect("run quantykube");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn help_and_version_print_and_exit_zero() {
    if quantykube().is_none() {
        return;
    }
    let (code, stdout, _) = run(&["--help"], &[]).await;
    assert_eq!(code, 0);
    for flag in [
        "--initial-cluster",
        "--data-dir",
        "--max-txn-ops",
        "ETCD_NAME",
    ] {
        assert!(stdout.contains(flag), "--help mentions {flag}:\n{stdout}");
    }
    let (code, stdout, _) = run(&["--version"], &[]).await;
    assert_eq!(code, 0);
    assert!(stdout.to_lowercase().contains("quantykube"), "{stdout}");
    assert!(
        stdout.contains("3.7"),
        "names the etcd API version: {stdout}"
    );
}

#[tokio::test]
async fn an_etcd_flag_not_implemented_yet_is_refused_by_name() {
    if quantykube().is_none() {
        return;
    }
    let (code, _, stderr) = run(&["--discovery-proxy", "http://proxy:8080"], &[]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("--discovery-proxy"), "{stderr}");
    assert!(stderr.contains("not implement"), "{stderr}");
    let (code, _, stderr) = run(&[], &[("ETCD_DISCOVERY_PROXY", "http://proxy:8080")]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("ETCD_DISCOVERY_PROXY"), "{stderr}");
    // A flag that is not etcd's at all is a usage error.
    let (code, _, stderr) = run(&["--no-such-flag"], &[]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("no-such-flag"), "{stderr}");
}

/// Every etcd service is served, Lock and Election included (issue 18); a method that
/// no service has answers Unimplemented at once.
#[tokio::test]
async fn every_etcd_service_is_served_and_unknown_methods_answer_unimplemented() {
    if quantykube().is_none() {
        return;
    }
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    let locked = client.lock("a-lock", None).await.expect("lock");
    assert!(locked.key().starts_with(b"a-lock/"), "{locked:?}");
    let mut grpc = tonic::client::Grpc::new(raw::channel(&cluster.endpoint(0)).await);
    for path in ["/v3lockpb.Lock/TryLock", "/v3lockpb.NoSuchService/Lock"] {
        let answer =
            unary::<etcd_client::proto::PbRangeRequest, etcd_client::proto::PbRangeResponse>(
                &mut grpc,
                path,
                Default::default(),
                None,
            )
            .await;
        let status = answer.expect_err("no such method");
        assert_eq!(status.code(), Code::Unimplemented, "{path}: {status:?}");
    }
}

#[tokio::test]
async fn health_is_not_serving_once_the_member_has_no_leader() {
    if quantykube().is_none() {
        return;
    }
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader_index().await;
    let survivor = (leader + 1) % 3;
    for i in 0..3 {
        if i != survivor {
            cluster.kill9(i);
        }
    }
    let mut health = HealthClient::new(raw::channel(&cluster.endpoint(survivor)).await);
    let deadline = Deadline::after(Duration::from_secs(20), "health turns NOT_SERVING");
    loop {
        let status = health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map(|r| r.into_inner().status());
        if status
            .as_ref()
            .is_ok_and(|s| *s == ServingStatus::NotServing)
        {
            break;
        }
        deadline.tick().await;
    }
}
