//! kubeadm's stacked-etcd manifest: its exact flag set (getEtcdCommand in kubeadm's
//! `cmd/kubeadm/app/phases/etcd/local.go`, as of the etcd 3.5 era; Kubernetes 1.34+
//! writes `--feature-gates=InitialCorruptCheck=true` and `--watch-progress-notify-interval`
//! for etcd 3.6 instead of the `--experimental-` flags), kubeadm's file layout under a
//! temp dir, and the probes kubeadm configures: `GET /health?exclude=NOSPACE&serializable=true`
//! (older kubeadm), `/livez` and `/readyz` (Kubernetes 1.31+) on the metrics port.
//!
//! The expected bodies follow the server's generation:
//! - etcd 3.4 (`QK_TEST_TARGET=etcd` with Debian's 3.4.23): `/health` answers
//!   `{"health":"true"}` / 503 `{"health":"false"}` and ignores `serializable`; there is
//!   no `/livez` or `/readyz` (404), so those parts are asserted as absent.
//! - QuantyKube answers as etcd 3.6 (`server/etcdserver/api/etcdhttp/health.go`):
//!   `{"health":"true","reason":""}`, 503 `{"health":"false","reason":"RAFT NO LEADER"}`,
//!   `/health?serializable=true` without the leader check, and the named checks of
//!   `/livez` and `/readyz`.
//!
//! Ports come from the harness (each member its own client, peer and metrics port), not
//! kubeadm's 2379/2380/2381; the harness also passes `--initial-cluster-token` and
//! `--initial-cluster-state=new` (kubeadm relies on the defaults).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::certs::Pki;
use crate::harness::{
    http_get, http_request, loopback_ip, ClientTls, Cluster, ClusterOptions, HttpAnswer,
};

/// Which etcd's HTTP answers the target gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavor {
    /// etcd 3.4: `{"health":...}` only, no `/livez`, `/readyz`, no `serializable`.
    Etcd34,
    /// etcd 3.6 (QuantyKube's model).
    Etcd36,
}

/// kubeadm's flags beyond the URLs, name and data dir the harness gives, for `pki`.
fn kubeadm_flags(pki: &Pki) -> Vec<String> {
    let f = |name: &str| pki.etcd(name).display().to_string();
    vec![
        format!("--cert-file={}", f("server.crt")),
        "--client-cert-auth=true".to_owned(),
        "--experimental-initial-corrupt-check=true".to_owned(),
        "--experimental-watch-progress-notify-interval=5s".to_owned(),
        format!("--key-file={}", f("server.key")),
        format!("--peer-cert-file={}", f("peer.crt")),
        "--peer-client-cert-auth=true".to_owned(),
        format!("--peer-key-file={}", f("peer.key")),
        format!("--peer-trusted-ca-file={}", f("ca.crt")),
        "--snapshot-count=10000".to_owned(),
        format!("--trusted-ca-file={}", f("ca.crt")),
    ]
}

/// The cluster options of kubeadm's manifest with `count` members: https client URLs
/// on the member's IP and on 127.0.0.1, https peers, the metrics URL on
/// `http://127.0.0.1:<own port>`.
fn kubeadm_cluster(pki: &Pki, count: usize) -> ClusterOptions {
    let tls = ClientTls::new(pki.ca_cert()).identity(
        pki.pki("apiserver-etcd-client.crt"),
        pki.pki("apiserver-etcd-client.key"),
    );
    ClusterOptions::new(count)
        .https_clients(tls)
        .https_peers()
        .args(kubeadm_flags(pki))
        .extra_client_urls(|m| vec![format!("https://127.0.0.1:{}", m.client_port)])
        .member_args(|m| {
            vec![format!(
                "--listen-metrics-urls={}",
                metrics_url_of(m.spare_ports[0])
            )]
        })
}

fn metrics_url_of(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

fn metrics_url(cluster: &Cluster, i: usize) -> String {
    metrics_url_of(cluster.member_spec(i).spare_ports[0])
}

/// The flavor, from `/version` on member 0's client URL (QuantyKube: 3.6's shape, as
/// 3.7's).
async fn flavor(cluster: &Cluster) -> Flavor {
    match cluster.target() {
        crate::harness::Target::Quantykube => Flavor::Etcd36,
        crate::harness::Target::Etcd => {
            let v = version(cluster, 0).await;
            if v["etcdserver"].as_str().unwrap_or("").starts_with("3.4.") {
                Flavor::Etcd34
            } else {
                Flavor::Etcd36
            }
        }
    }
}

/// `/version` of member `i` (client URL, https with the client certificate), once the
/// cluster version is decided.
async fn version(cluster: &Cluster, i: usize) -> serde_json::Value {
    let url = format!("{}/version", cluster.endpoint(i));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let answer = http_get(&url, cluster.client_tls()).await;
        assert_eq!(answer.status, 200, "{url}: {answer:?}");
        let v: serde_json::Value = serde_json::from_str(&answer.body)
            .unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {:?}", answer.body));
        if v["etcdcluster"] != "not_decided" || Instant::now() >= deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[track_caller]
fn assert_answer(answer: &HttpAnswer, status: u16, body: &str, what: &str) {
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (status, body),
        "{what}: {answer:?}"
    );
}

/// The lines of a verbose `/livez` or `/readyz` answer: etcd runs the checks in Go map
/// order, so the check lines are compared as a set, and the answer ends with `ok`.
fn verbose_lines(body: &str) -> (BTreeSet<String>, Option<String>) {
    let mut lines: Vec<String> = body.lines().map(str::to_owned).collect();
    let last = lines.pop();
    (lines.into_iter().collect(), last)
}

fn set(lines: &[&str]) -> BTreeSet<String> {
    lines.iter().map(|s| s.to_string()).collect()
}

/// GET `path` on member `i`'s metrics URL.
async fn probe(cluster: &Cluster, i: usize, path: &str) -> HttpAnswer {
    http_get(&format!("{}{path}", metrics_url(cluster, i)), None).await
}

#[tokio::test]
async fn kubeadm_manifest_three_members_probes_and_quorum_loss() {
    let pki = Pki::new(loopback_ip());
    let mut cluster = kubeadm_cluster(&pki, 3).start().await;
    let flavor = flavor(&cluster).await;

    // The API server's view: TLS on the member IP and on 127.0.0.1.
    let mut client = cluster.client_all().await;
    client.put("kubeadm/a", "1", None).await.expect("put");
    let local = format!("https://127.0.0.1:{}", cluster.member_spec(1).client_port);
    let mut local_client =
        crate::harness::connect_tls(std::slice::from_ref(&local), cluster.client_tls()).await;
    let resp = local_client
        .get("kubeadm/a", None)
        .await
        .expect("get on 127.0.0.1");
    assert_eq!(resp.kvs().len(), 1);

    let healthy = match flavor {
        Flavor::Etcd34 => r#"{"health":"true"}"#,
        Flavor::Etcd36 => r#"{"health":"true","reason":""}"#,
    };
    for i in 0..3 {
        for path in [
            "/health?exclude=NOSPACE&serializable=true",
            "/health",
            "/health?exclude=NOSPACE",
            "/health?serializable=true",
        ] {
            assert_answer(&probe(&cluster, i, path).await, 200, healthy, path);
        }
    }
    // /health on the client URL too (https, client certificate).
    let answer = http_get(
        &format!("{}/health", cluster.endpoint(0)),
        cluster.client_tls(),
    )
    .await;
    assert_answer(&answer, 200, healthy, "/health on the client URL");

    // Go's ServeMux answers for the paths nobody registered, and only GET is allowed.
    assert_answer(
        &probe(&cluster, 0, "/nope").await,
        404,
        "404 page not found\n",
        "/nope",
    );
    assert_answer(
        &probe(&cluster, 0, "/version").await,
        404,
        "404 page not found\n",
        "/version on the metrics URL",
    );
    let post = http_request(
        "POST",
        &format!("{}/health", metrics_url(&cluster, 0)),
        None,
        Duration::from_secs(10),
    )
    .await
    .expect("POST /health answered");
    assert_answer(&post, 405, "Method Not Allowed\n", "POST /health");
    assert_eq!(post.header("allow"), Some("GET"), "POST /health: {post:?}");

    // /version on the client URL: etcd 3.4 has two keys, 3.6 adds "storage".
    let v = version(&cluster, 0).await;
    let keys: BTreeSet<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    let server = v["etcdserver"].as_str().expect("etcdserver").to_owned();
    let minor = server
        .rsplit_once('.')
        .map(|(mm, _)| mm)
        .expect("x.y.z")
        .to_owned();
    assert_eq!(v["etcdcluster"], format!("{minor}.0"), "{v}");
    match flavor {
        Flavor::Etcd34 => assert_eq!(keys, BTreeSet::from(["etcdcluster", "etcdserver"]), "{v}"),
        Flavor::Etcd36 => {
            // etcd 3.6's three, and QuantyKube's release and commit (issue 54).
            assert_eq!(
                keys,
                BTreeSet::from([
                    "etcdcluster",
                    "etcdserver",
                    "storage",
                    "quantykube",
                    "quantykubeGitSha"
                ]),
                "{v}"
            );
            assert_eq!(v["quantykube"], env!("CARGO_PKG_VERSION"), "{v}");
            assert!(
                v["quantykubeGitSha"]
                    .as_str()
                    .is_some_and(|sha| !sha.is_empty()),
                "{v}"
            );
            assert_eq!(v["storage"], format!("{minor}.0"), "{v}");
        }
    }

    match flavor {
        Flavor::Etcd34 => {
            // etcd 3.4 has no /livez or /readyz (added in 3.5.11/3.6).
            for path in ["/livez", "/readyz"] {
                assert_answer(
                    &probe(&cluster, 0, path).await,
                    404,
                    "404 page not found\n",
                    path,
                );
            }
        }
        Flavor::Etcd36 => {
            for path in [
                "/livez",
                "/readyz",
                "/livez/serializable_read",
                "/readyz/linearizable_read",
            ] {
                let answer = probe(&cluster, 0, path).await;
                assert_answer(&answer, 200, "ok\n", path);
                assert_eq!(
                    answer.header("content-type"),
                    Some("text/plain; charset=utf-8")
                );
                assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
            }
            let answer = probe(&cluster, 0, "/livez?verbose").await;
            assert_answer(
                &answer,
                200,
                "[+]serializable_read ok\nok\n",
                "/livez?verbose",
            );
            let answer = probe(&cluster, 0, "/readyz?verbose").await;
            assert_eq!(answer.status, 200, "{answer:?}");
            assert_eq!(
                verbose_lines(&answer.body),
                (
                    set(&[
                        "[+]data_corruption ok",
                        "[+]serializable_read ok",
                        "[+]linearizable_read ok",
                        "[+]non_learner ok"
                    ]),
                    Some("ok".to_owned())
                ),
                "/readyz?verbose: {answer:?}"
            );
            let answer = probe(&cluster, 0, "/readyz?exclude=linearizable_read&verbose").await;
            assert_eq!(
                (answer.status, verbose_lines(&answer.body)),
                (
                    200,
                    (
                        set(&[
                            "[+]data_corruption ok",
                            "[+]serializable_read ok",
                            "[+]non_learner ok"
                        ]),
                        Some("ok".to_owned())
                    )
                ),
                "/readyz?exclude=linearizable_read&verbose: {answer:?}"
            );
            // Excluding a check that does not exist is no error (etcd only logs it).
            assert_answer(
                &probe(&cluster, 0, "/readyz?exclude=nonexistent").await,
                200,
                "ok\n",
                "/readyz?exclude=nonexistent",
            );
            assert_answer(
                &probe(&cluster, 0, "/readyz/").await,
                404,
                "404 page not found\n",
                "/readyz/",
            );
            let post = http_request(
                "POST",
                &format!("{}/readyz", metrics_url(&cluster, 0)),
                None,
                Duration::from_secs(10),
            )
            .await
            .expect("POST /readyz answered");
            assert_answer(&post, 405, "Method Not Allowed\n", "POST /readyz");
            assert_eq!(post.header("allow"), Some("GET"));
        }
    }

    // Quorum lost: two of three members die.
    cluster.kill9(1);
    cluster.kill9(2);
    // The survivor notices within an election timeout or so (as leader by CheckQuorum,
    // as follower by the missing heartbeats); /health then fails for want of a leader.
    let unhealthy = match flavor {
        Flavor::Etcd34 => "{\"health\":\"false\"}\n",
        Flavor::Etcd36 => "{\"health\":\"false\",\"reason\":\"RAFT NO LEADER\"}\n",
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = probe(&cluster, 0, "/health").await;
        if answer.status == 503 && answer.body == unhealthy {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/health after quorum loss: {answer:?}\n{}",
            cluster.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_answer(
        &probe(&cluster, 0, "/health?exclude=NOSPACE").await,
        503,
        unhealthy,
        "/health?exclude=NOSPACE",
    );
    match flavor {
        Flavor::Etcd34 => {
            // 3.4 ignores serializable: kubeadm's old liveness probe fails too.
            for path in [
                "/health?serializable=true",
                "/health?exclude=NOSPACE&serializable=true",
            ] {
                assert_answer(&probe(&cluster, 0, path).await, 503, unhealthy, path);
            }
        }
        Flavor::Etcd36 => {
            // Liveness stays: a local read needs no leader.
            for path in [
                "/health?serializable=true",
                "/health?exclude=NOSPACE&serializable=true",
            ] {
                assert_answer(&probe(&cluster, 0, path).await, 200, healthy, path);
            }
            for path in [
                "/livez",
                "/livez/serializable_read",
                "/readyz?exclude=linearizable_read",
            ] {
                assert_answer(&probe(&cluster, 0, path).await, 200, "ok\n", path);
            }
            // Readiness fails on the linearizable read, with every check's line (errors
            // always verbose), then http.Error's newline.
            let answer = probe(&cluster, 0, "/readyz").await;
            assert_eq!(answer.status, 503, "/readyz: {answer:?}");
            assert!(answer.body.ends_with("\n\n"), "/readyz: {answer:?}");
            let lines: BTreeSet<String> = answer
                .body
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect();
            assert!(lines.contains("[+]data_corruption ok"), "{answer:?}");
            assert!(lines.contains("[+]serializable_read ok"), "{answer:?}");
            assert!(lines.contains("[+]non_learner ok"), "{answer:?}");
            assert!(
                lines
                    .iter()
                    .any(|l| l.starts_with("[-]linearizable_read failed: ")),
                "{answer:?}"
            );
            assert_eq!(lines.len(), 4, "{answer:?}");
            let answer = probe(&cluster, 0, "/readyz/linearizable_read").await;
            assert_eq!(answer.status, 503, "{answer:?}");
            assert!(
                answer.body.starts_with("[-]linearizable_read failed: "),
                "{answer:?}"
            );
        }
    }
}

#[tokio::test]
async fn kubeadm_manifest_as_etcd_environment_variables() {
    let pki = Pki::new(loopback_ip());
    // kubeadm init's first member, every flag as its ETCD_* variable, nothing on the
    // command line.
    let cluster = kubeadm_cluster(&pki, 1).flags_as_env().start().await;
    let pid = cluster.pid(0).expect("runs");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    assert_eq!(
        cmdline.split(|&b| b == 0).filter(|a| !a.is_empty()).count(),
        1,
        "arguments on the command line: {:?}",
        String::from_utf8_lossy(&cmdline)
    );
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    let environ = String::from_utf8_lossy(&environ);
    for var in [
        "ETCD_CERT_FILE=",
        "ETCD_CLIENT_CERT_AUTH=true",
        "ETCD_LISTEN_METRICS_URLS=",
        "ETCD_PEER_CLIENT_CERT_AUTH=true",
    ] {
        assert!(
            environ.contains(var),
            "{var} not in the member's environment"
        );
    }
    let mut client = cluster.client(0).await;
    client.put("env/a", "1", None).await.expect("put over TLS");
    let flavor = flavor(&cluster).await;
    let healthy = match flavor {
        Flavor::Etcd34 => r#"{"health":"true"}"#,
        Flavor::Etcd36 => r#"{"health":"true","reason":""}"#,
    };
    let path = "/health?exclude=NOSPACE&serializable=true";
    assert_answer(&probe(&cluster, 0, path).await, 200, healthy, path);
    // A plaintext client is refused: the TLS variables took effect.
    let plain = cluster.endpoint(0).replacen("https://", "http://", 1);
    let out = crate::harness::etcdctl_raw(
        &plain,
        &["--dial-timeout=3s", "--command-timeout=5s", "get", "env/a"],
    )
    .await;
    assert!(!out.success(), "plaintext etcdctl read from the https URL");
}
