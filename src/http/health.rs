//! `/health`, `/livez` and `/readyz`, with etcd 3.6's checks, query parameters, status
//! codes and bodies (server/etcdserver/api/etcdhttp/health.go).
//!
//! This module owns the endpoints' shape; what each check means is `probes`'.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Response, StatusCode, Uri};

use crate::node::Node;
use crate::probes;
use crate::proto::etcdserverpb::AlarmType;

/// The query parameters the endpoints read, as Go's `url.Values` holds them.
struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    fn of(uri: &Uri) -> Query {
        Query {
            pairs: url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        }
    }

    /// Every non-empty value of `key` (etcd's `getQuerySet`).
    fn set(&self, key: &str) -> BTreeSet<String> {
        self.pairs
            .iter()
            .filter(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Go's `Query().Get(key)`: the first value, or "".
    fn first(&self, key: &str) -> &str {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    }

    fn has(&self, key: &str) -> bool {
        self.pairs.iter().any(|(k, _)| k == key)
    }
}

/// Go's `http.Error`: the text and a newline, as plain text.
pub(super) fn text_error(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = plain_text(format!("{text}\n"));
    *response.status_mut() = status;
    response
}

/// A 200 plain-text body with the headers etcd's health handlers set.
fn plain_text(body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        "x-content-type-options",
        header::HeaderValue::from_static("nosniff"),
    );
    response
}

/// etcd's `allowMethod`: anything but GET is 405 with `Allow: GET`.
pub(super) fn only_get(method: &Method) -> Option<Response<Body>> {
    if method == Method::GET {
        return None;
    }
    let mut response = text_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static("GET"));
    Some(response)
}

/// `GET /health[?exclude=ALARM][&serializable=true]`: alarms, then the leader, then a
/// read; `{"health":"true","reason":""}`, or 503 with the first failure's reason.
pub async fn health(node: Arc<Node>, method: Method, uri: Uri) -> Response<Body> {
    if let Some(refused) = only_get(&method) {
        tracing::warn!(status_code = 405, "/health error");
        return refused;
    }
    let query = Query::of(&uri);
    let excluded = query.set("exclude");
    let serializable = query.first("serializable") == "true";
    let failure = health_failure(&node, &excluded, serializable).await;
    crate::metrics::server::health_checked(failure.is_none());
    let body = serde_json::json!({
        "health": if failure.is_none() { "true" } else { "false" },
        "reason": failure.clone().unwrap_or_default(),
    })
    .to_string();
    match failure {
        None => {
            let mut response = Response::new(Body::from(body));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            response
        }
        Some(reason) => {
            tracing::warn!(%reason, status_code = 503, "/health error");
            text_error(StatusCode::SERVICE_UNAVAILABLE, &body)
        }
    }
}

async fn health_failure(
    node: &Node,
    excluded: &BTreeSet<String>,
    serializable: bool,
) -> Option<String> {
    if let Some(reason) = probes::alarm_failure(node, excluded) {
        return Some(reason.into());
    }
    if !serializable && !node.has_leader() {
        return Some("RAFT NO LEADER".into());
    }
    probes::read(node, serializable)
        .await
        .err()
        .map(|e| format!("RANGE ERROR:{e}"))
}

/// The checks of `/livez` or `/readyz`, in the order their output lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    Livez,
    Readyz,
}

impl Probe {
    pub fn root(self) -> &'static str {
        match self {
            Probe::Livez => "/livez",
            Probe::Readyz => "/readyz",
        }
    }

    /// etcd's name of the kind of check (the `type` label of its health metrics).
    pub fn kind(self) -> &'static str {
        match self {
            Probe::Livez => "livez",
            Probe::Readyz => "readyz",
        }
    }

    pub fn checks(self) -> &'static [&'static str] {
        match self {
            Probe::Livez => &["serializable_read"],
            Probe::Readyz => &[
                "data_corruption",
                "serializable_read",
                "linearizable_read",
                "non_learner",
            ],
        }
    }
}

async fn run_check(node: &Node, name: &str) -> Result<(), String> {
    match name {
        "data_corruption" => probes::no_alarm(node, AlarmType::Corrupt),
        "serializable_read" => probes::serializable_read(node),
        "linearizable_read" => probes::linearizable_read(node).await,
        "non_learner" => probes::non_learner(node),
        other => Err(format!("unknown check {other}")),
    }
}

/// `GET /livez`, `/readyz` (all checks but `?exclude=` ones) or `/<root>/<check>`
/// (that one): `ok`, with each check's line first under `?verbose`; 503 with every
/// check's line when one fails.
pub async fn probe(
    node: Arc<Node>,
    probe: Probe,
    only: Option<&'static str>,
    method: Method,
    uri: Uri,
) -> Response<Body> {
    let path = uri.path().to_string();
    if let Some(refused) = only_get(&method) {
        tracing::warn!(%path, status_code = 405, "Health request error");
        return refused;
    }
    let query = Query::of(&uri);
    let checks: Vec<&str> = match only {
        Some(check) => vec![check],
        None => {
            let excluded = query.set("exclude");
            let unknown: Vec<&String> = excluded
                .iter()
                .filter(|e| !probe.checks().contains(&e.as_str()))
                .collect();
            if !unknown.is_empty() {
                tracing::warn!(missing_health_checks = ?unknown, "some health checks cannot be excluded");
            }
            probe
                .checks()
                .iter()
                .copied()
                .filter(|c| !excluded.contains(*c))
                .collect()
        }
    };
    let mut report = String::new();
    let mut failed = false;
    for check in checks {
        let outcome = run_check(&node, check).await;
        crate::metrics::server::health_check_ran(probe.kind(), check, outcome.is_ok());
        match outcome {
            Ok(()) => report.push_str(&format!("[+]{check} ok\n")),
            Err(error) => {
                failed = true;
                report.push_str(&format!("[-]{check} failed: {error}\n"));
            }
        }
    }
    if failed {
        tracing::error!(%path, reason = %report, status_code = 503, "Health check error");
        return text_error(StatusCode::SERVICE_UNAVAILABLE, &report);
    }
    let mut body = String::new();
    if query.has("verbose") {
        body.push_str(&report);
    }
    body.push_str("ok\n");
    plain_text(body)
}
