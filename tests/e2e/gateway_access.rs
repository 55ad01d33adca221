//! etcd's access controller in front of the client URLs' HTTP endpoints, against the
//! target: CORS headers by `--cors`, the preflight `OPTIONS`, the `Host` check by
//! `--host-whitelist` (421 against DNS rebinding), the gateway turned off by
//! `--enable-grpc-gateway=false`, and over TLS with auth on a gateway request from a
//! certificate with a Common Name refused.

use std::time::Duration;

use serde_json::json;

use crate::gateway_support::*;
use crate::harness::*;

const WAIT: Duration = Duration::from_secs(10);

async fn answer(cluster: &Cluster, method: &str, path: &str, args: &[&str]) -> HttpAnswer {
    let url = format!("{}{path}", cluster.endpoint(0));
    http_request_with(method, &url, cluster.client_tls(), WAIT, args)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_http_answer_carries_cors_headers_and_options_is_a_preflight() {
    let cluster = Cluster::start(1).await;
    for path in ["/health", "/version", "/v3/kv/nothing"] {
        let http = answer(&cluster, "GET", path, &[]).await;
        assert_eq!(
            http.header("access-control-allow-origin"),
            Some("*"),
            "{path}"
        );
        assert_eq!(
            http.header("access-control-allow-methods"),
            Some("POST, GET, OPTIONS, PUT, DELETE"),
            "{path}"
        );
        assert_eq!(
            http.header("access-control-allow-headers"),
            Some("accept, content-type, authorization"),
            "{path}"
        );
    }
    let preflight = answer(
        &cluster,
        "OPTIONS",
        "/v3/kv/range",
        &["-H", "Origin: http://x.example"],
    )
    .await;
    assert_eq!((preflight.status, preflight.body.as_str()), (200, ""));
    assert_eq!(preflight.header("access-control-allow-origin"), Some("*"));
}

#[tokio::test(flavor = "multi_thread")]
async fn cors_names_only_the_allowed_origins() {
    let cluster = ClusterOptions::new(1)
        .arg("--cors=http://a.example:8080,http://b.example:8080")
        .start()
        .await;
    let allowed = answer(
        &cluster,
        "GET",
        "/health",
        &["-H", "Origin: http://b.example:8080"],
    )
    .await;
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("http://b.example:8080")
    );
    let other = answer(
        &cluster,
        "GET",
        "/health",
        &["-H", "Origin: http://c.example:8080"],
    )
    .await;
    assert_eq!(other.header("access-control-allow-origin"), None);
    assert_eq!(other.status, 200);
    let none = answer(&cluster, "GET", "/health", &[]).await;
    assert_eq!(none.header("access-control-allow-origin"), None);
}

/// etcd takes origins as URLs with a port, and refuses others at startup.
#[tokio::test(flavor = "multi_thread")]
async fn an_origin_without_a_port_is_refused_at_startup() {
    let binary = Target::from_env().require_binary();
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(binary)
        .arg(format!("--data-dir={}", dir.path().display()))
        .arg("--cors=http://a.example")
        .output()
        .expect("run the server");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // etcd (Go's flag package) says `-cors`, QuantyKube `--cors`, as for every flag.
    let (before, after) = (
        "invalid value \"http://a.example\" for flag -",
        "cors: URL address does not have the form \"host:port\": http://a.example",
    );
    assert!(
        stderr.contains(before) && stderr.contains(after),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_http_with_another_host_is_refused_against_dns_rebinding() {
    let cluster = ClusterOptions::new(1)
        .arg("--host-whitelist=allowed.example")
        .start()
        .await;
    let refused = answer(&cluster, "GET", "/health", &[]).await;
    assert_eq!(refused.status, 421, "{}", refused.body);
    let host = cluster.ip().to_string();
    assert!(
        refused
            .body
            .starts_with("\netcd received your request, but the Host header was unrecognized."),
        "{}",
        refused.body
    );
    assert!(
        refused
            .body
            .contains(&format!("  - e.g. etcd --host-whitelist \"{host}\"\n")),
        "{}",
        refused.body
    );
    let allowed = answer(&cluster, "GET", "/health", &["-H", "Host: allowed.example"]).await;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    let gateway = answer(
        &cluster,
        "POST",
        "/v3/kv/range",
        &[
            "-H",
            "Host: allowed.example:2379",
            "--data-binary",
            r#"{"key":"YQ=="}"#,
        ],
    )
    .await;
    assert_eq!(gateway.status, 200, "{}", gateway.body);
    // gRPC never passes the access controller.
    let mut client = cluster.client(0).await;
    client.put("grpc", "ok", None).await.expect("a gRPC put");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gateway_can_be_turned_off() {
    let cluster = ClusterOptions::new(1)
        .arg("--enable-grpc-gateway=false")
        .start()
        .await;
    let off = answer(
        &cluster,
        "POST",
        "/v3/kv/range",
        &["--data-binary", r#"{"key":"YQ=="}"#],
    )
    .await;
    assert_eq!(
        (off.status, off.body.as_str()),
        (404, "404 page not found\n")
    );
    assert_eq!(answer(&cluster, "GET", "/health", &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_auth_on_a_gateway_request_from_a_named_certificate_is_refused() {
    let (_pki, cluster) = mtls_cluster().await;
    let gw = Gateway::of(&cluster, 0);
    gw.call(
        "/v3/auth/user/add",
        json!({"name": "root", "password": "rootpw"}),
    )
    .await;
    gw.call(
        "/v3/auth/user/grant",
        json!({"user": "root", "role": "root"}),
    )
    .await;
    gw.call("/v3/auth/enable", json!({})).await;
    let refused = gw
        .post(
            "/v3/auth/authenticate",
            json!({"name": "root", "password": "rootpw"}),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.http.body);
    assert_eq!(
        refused.http.body,
        "CommonName of client sending a request against gateway will be ignored and not used as expected\n"
    );
    // The probes are no gateway paths: they still answer.
    assert_eq!(answer(&cluster, "GET", "/version", &[]).await.status, 200);
}
