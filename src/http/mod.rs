//! The HTTP surface beside gRPC: etcd's `/health`, `/livez`, `/readyz` (with their
//! per-check sub-paths), `/version`, `/metrics` and the JSON gateway (`gateway`, under
//! `/v3/`), on the client port (one listener serves gRPC and HTTP/1.1, as etcd's does)
//! and on `--listen-client-http-urls`; the probes and metrics only on
//! `--listen-metrics-urls`, and `/version` on peer URLs.
//!
//! This module owns paths, methods, status codes and bodies. It holds no check's
//! meaning (`probes`) and formats no metric (`metrics`); it never calls raft or the
//! store itself.

mod access;
pub mod gateway;
mod health;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Request, Response, StatusCode, Uri};
use axum::routing::any;
use axum::Router;

use crate::node::Node;

pub use access::Access;
pub use health::Probe;

/// What the client surfaces serve beyond the probes: the gateway (unless
/// `--enable-grpc-gateway=false`) and etcd's access controller around it all.
#[derive(Clone)]
pub struct ClientHttp {
    pub gateway: Option<Arc<gateway::Gateway>>,
    pub access: Arc<Access>,
}

/// What a listener serves over HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// Client URLs and `--listen-client-http-urls`: everything.
    Client,
    /// `--listen-metrics-urls`: `/metrics` and the health endpoints, as etcd's.
    Metrics,
    /// Peer URLs: `/version` only (raft is gRPC).
    Peer,
}

/// The HTTP routes of `surface`, without a fallback (see [`fallback`]). A client
/// surface is given `client`: its gateway and access controller.
pub fn router(node: Arc<Node>, surface: Surface, client: Option<ClientHttp>) -> Router {
    let mut router = match client.as_ref().and_then(|c| c.gateway.clone()) {
        Some(gateway) => gateway::router(gateway),
        None => Router::new(),
    };
    if surface != Surface::Peer {
        let node = node.clone();
        router = router.route(
            "/health",
            any(move |method: Method, uri: Uri| health::health(node.clone(), method, uri)),
        );
    }
    let probes: &[Probe] = if surface == Surface::Peer {
        &[]
    } else {
        &[Probe::Livez, Probe::Readyz]
    };
    for &probe in probes {
        let root = node.clone();
        router = router.route(
            probe.root(),
            any(move |method: Method, uri: Uri| {
                health::probe(root.clone(), probe, None, method, uri)
            }),
        );
        for &check in probe.checks() {
            let node = node.clone();
            router = router.route(
                &format!("{}/{check}", probe.root()),
                any(move |method: Method, uri: Uri| {
                    health::probe(node.clone(), probe, Some(check), method, uri)
                }),
            );
        }
    }
    if surface != Surface::Peer {
        router = router.route("/metrics", any(metrics));
    }
    if surface != Surface::Metrics {
        let node = node.clone();
        router = router.route(
            "/version",
            any(move |method: Method| version(node.clone(), method)),
        );
    }
    match client {
        Some(client) => router.layer(axum::middleware::from_fn_with_state(
            client.access,
            access::control,
        )),
        None => router,
    }
}

/// etcd 3.6's `/version`: this server's version, the cluster's (the lowest of the
/// members', major.minor.0) and the storage format's; and, in keys of their own (flat
/// strings, so that a client reading the answer as a map of strings still can),
/// QuantyKube's release and the commit it was built from.
async fn version(node: Arc<Node>, method: Method) -> Response<Body> {
    if let Some(refused) = health::only_get(&method) {
        return refused;
    }
    let server = node.etcd_version();
    let body = serde_json::json!({
        "etcdserver": server,
        "etcdcluster": format!("{}.0", node.cluster_version()),
        "storage": node.storage_version(),
        "quantykube": env!("CARGO_PKG_VERSION"),
        "quantykubeGitSha": crate::config::git_commit(),
    })
    .to_string();
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// `GET /metrics`: the Prometheus text format (`metrics` formats it).
async fn metrics(method: Method) -> Response<Body> {
    if let Some(refused) = health::only_get(&method) {
        return refused;
    }
    let text = crate::metrics::runtime::scrape(crate::metrics::render);
    let mut response = Response::new(Body::from(text));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    response
}

/// Reads what is left of a request body, up to `limit` bytes, before an answer that
/// did not need it. An HTTP/2 stream answered while its client is still sending is
/// reset (curl reports "Stream error in the HTTP/2 framing layer"), so a refusal reads
/// the body first, as Go's server does up to 256 KiB; beyond `limit` the client may
/// see that reset.
pub async fn drain(body: Body, limit: usize) {
    drain_stream(&mut body.into_data_stream(), limit).await;
}

/// As [`drain`], for a body already being read.
pub async fn drain_stream(stream: &mut axum::body::BodyDataStream, limit: usize) {
    use futures::StreamExt;
    let mut read = 0usize;
    while let Some(Ok(chunk)) = stream.next().await {
        read = read.saturating_add(chunk.len());
        if read > limit {
            return;
        }
    }
}

/// What Go's server reads of a body its handler left unread.
pub const DRAIN_BYTES: usize = 256 * 1024;

/// What answers a path no route has: a gRPC call gets gRPC's `Unimplemented` (as
/// tonic's own fallback), anything else Go's `404 page not found`.
pub async fn fallback(request: Request<Body>) -> Response<Body> {
    let grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        return tonic::Status::unimplemented("").into_http();
    }
    health::text_error(StatusCode::NOT_FOUND, "404 page not found")
}
