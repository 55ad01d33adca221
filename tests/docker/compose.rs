//! deploy/docker-compose.yml as users run it: three members started by `pod start`,
//! reached from the host on loopback, keeping their data across `down` and `up`; and
//! the same with deploy/compose/tls.yml.

use std::time::Instant;

use etcd_client::GetOptions;

use crate::cluster::{members_seen_by, wait_cluster};
use crate::harness::{
    bounded, connect, docker_ok, repo, run_blocking, secs, serial, skip, Project, Tls,
};

/// etcdctl 3.x on the host, if installed.
fn etcdctl() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("etcdctl"))
            .find(|candidate| candidate.is_file())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_cluster_keeps_its_data_across_down_and_up() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
    let started = Instant::now();
    let mut project = Project::new("compose", None);
    project.up().await;
    wait_cluster(&project, &[0, 1, 2], secs(120)).await;
    let formed = started.elapsed();

    // Host name, member name and (but for the tests' prefix) container name agree.
    for ordinal in 0..3 {
        let hostname = docker_ok(&[
            "inspect",
            "--format",
            "{{.Config.Hostname}}",
            &project.container(ordinal),
        ])
        .await;
        assert_eq!(hostname.trim(), format!("qk-{ordinal}"));
    }
    let members = members_seen_by(&project, 0).await.expect("member list");
    println!("members: {members:?}");

    if let Some(etcdctl) = etcdctl() {
        let endpoints = (0..3)
            .map(|m| format!("127.0.0.1:{}", project.client_port(m)))
            .collect::<Vec<_>>()
            .join(",");
        let out = run_blocking(
            &etcdctl.display().to_string(),
            &[
                format!("--endpoints={endpoints}"),
                "member".into(),
                "list".into(),
            ],
            &[("ETCDCTL_API".into(), "3".into())],
            &repo(),
            secs(30),
        );
        assert!(out.ok(), "etcdctl member list: {}", out.stderr);
        println!(
            "etcdctl --endpoints={endpoints} member list:\n{}",
            out.stdout.trim()
        );
        for ordinal in 0..3 {
            assert!(
                out.stdout.contains(&format!("qk-{ordinal}")),
                "etcdctl does not list qk-{ordinal}"
            );
        }
    }

    let mut client = connect(&project.endpoints(&[0, 1, 2]), project.connect_options()).await;
    for i in 0..100 {
        client
            .put(format!("kept/{i:03}"), format!("value {i}"), None)
            .await
            .expect("put");
    }
    drop(client);

    // down keeps the named volumes; up finds the data.
    project.compose_ok(false, &["down", "-t", "30"]).await;
    project.up().await;
    wait_cluster(&project, &[0, 1, 2], secs(120)).await;
    let after = members_seen_by(&project, 0).await.expect("member list");
    let ids = |list: &[(String, bool, u64)]| {
        let mut ids: Vec<(String, u64)> = list.iter().map(|(n, _, id)| (n.clone(), *id)).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&members), ids(&after), "the members changed identity");
    for ordinal in 0..3 {
        let mut client = project.client(ordinal).await;
        let got = client
            .get("kept/", Some(GetOptions::new().with_prefix()))
            .await
            .expect("get");
        assert_eq!(
            got.kvs().len(),
            100,
            "qk-{ordinal} lost keys across down/up"
        );
        assert_eq!(got.kvs()[42].value(), b"value 42");
    }
    println!(
        "compose: formed in {formed:.1?}, down and up kept 100 keys and the member ids: {:.1?} in all",
        started.elapsed()
    );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_cluster_with_tls() {
    let _serial = serial();
    if skip(true) {
        return;
    }
    bounded(async {
        let started = Instant::now();
        let dir = tempfile::tempdir().expect("temp dir");
        let out = run_blocking(
            "deploy/compose/make-certs.sh",
            &["3".into()],
            &[("CERTS_DIR".into(), dir.path().display().to_string())],
            &repo(),
            secs(60),
        );
        assert!(out.ok(), "make-certs.sh: {}", out.stderr);
        let tls = Tls {
            dir: dir.path().to_owned(),
        };
        let mut project = Project::new("tls", Some(tls));
        project.up().await;
        wait_cluster(&project, &[0, 1, 2], secs(120)).await;

        let mut client = connect(&project.endpoints(&[0, 1, 2]), project.connect_options()).await;
        client.put("tls/key", "over mTLS", None).await.expect("put");
        let got = client.get("tls/key", None).await.expect("get");
        assert_eq!(got.kvs()[0].value(), b"over mTLS");
        let list = client.member_list().await.expect("member list");
        for member in list.members() {
            assert!(
                member.peer_urls().iter().all(|u| u.starts_with("https://")),
                "{} advertises {:?}",
                member.name(),
                member.peer_urls()
            );
            assert!(
                member
                    .client_urls()
                    .iter()
                    .all(|u| u.starts_with("https://")),
                "{} advertises {:?}",
                member.name(),
                member.client_urls()
            );
        }
        // Without a client certificate the member refuses.
        let plain = crate::harness::client_options().with_tls(
            etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(
                    std::fs::read(dir.path().join("ca.crt")).unwrap(),
                ))
                .domain_name("localhost"),
        );
        let mut anonymous = connect(&project.endpoints(&[0]), plain).await;
        let refused = tokio::time::timeout(secs(10), anonymous.get("tls/key", None)).await;
        assert!(
            !matches!(refused, Ok(Ok(_))),
            "a client without a certificate was served"
        );
        println!(
            "compose with tls.yml: mTLS on client and peer ports: {:.1?}",
            started.elapsed()
        );
    })
    .await;
}
