//! etcd's access controller in front of the client URLs' HTTP endpoints (embed/serve.go
//! `accessController`): over plain HTTP, a `Host` outside `--host-whitelist` is refused
//! with 421 against DNS rebinding (CVE-2018-5702); over TLS, with `--client-cert-auth`
//! and auth on, a gateway request whose verified certificate has a Common Name is
//! refused, since that name would not be used; every answer carries the CORS headers
//! `--cors` allows; and an `OPTIONS` request (a CORS preflight) is answered at once.
//!
//! It only decides whether a request goes on, and adds headers; it never looks at a
//! body. gRPC calls never pass through it, as they never pass through etcd's.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Method, Request, Response, StatusCode};
use axum::middleware::Next;

use crate::config::HttpAccess;
use crate::node::Node;
use crate::transport::ConnectionInfo;

/// What the controller checks, from the flags.
pub struct Access {
    pub policy: HttpAccess,
    /// `--client-cert-auth` with the gateway on: certificates with a CN are refused on
    /// the gateway while auth is on.
    pub refuse_gateway_common_names: bool,
    pub node: Arc<Node>,
}

/// etcd's text for a refused `Host` (3.7's wording).
fn dns_rebinding_text(host: &str) -> String {
    format!(
        "\netcd received your request, but the Host header was unrecognized.\n\n\
         To fix this, choose one of the following options:\n\
         - Enable TLS, then any HTTPS request will be allowed.\n\
         - Add the hostname you want to use to the whitelist in settings.\n  \
         - e.g. etcd --host-whitelist {}\n\n\
         This requirement has been added to help prevent \"DNS Rebinding\" attacks \
         (CVE-2018-5702).\n",
        crate::http::gateway::go_quote(host)
    )
}

const COMMON_NAME_TEXT: &str =
    "CommonName of client sending a request against gateway will be ignored and not used as expected";

/// The host of a request as Go's `httputil.GetHostname` takes it from `Host`: without a
/// port, or the whole value when it has none.
fn hostname(request: &Request<Body>) -> String {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default();
    match host.rsplit_once(':') {
        // Go's SplitHostPort: `[v6]:port`, or `host:port` with a single colon.
        Some((name, port))
            if !port.contains(']') && (name.starts_with('[') || !name.contains(':')) =>
        {
            name.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string()
        }
        _ => host,
    }
}

fn add_cors(response: &mut Response<Body>, origin: &str) {
    let headers = response.headers_mut();
    if let Ok(origin) = HeaderValue::from_str(origin) {
        headers.append(
            "access-control-allow-methods",
            HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"),
        );
        headers.append("access-control-allow-origin", origin);
        headers.append(
            "access-control-allow-headers",
            HeaderValue::from_static("accept, content-type, authorization"),
        );
    }
}

/// The middleware (axum's `from_fn_with_state`).
pub async fn control(
    State(access): State<Arc<Access>>,
    request: Request<Body>,
    next: Next,
) -> Response<Body> {
    let connection = request.extensions().get::<ConnectionInfo>();
    let tls = connection.is_some_and(|c| c.tls);
    if !tls {
        let host = hostname(&request);
        if !access.policy.host_allowed(&host) {
            tracing::warn!(host = %host, "rejecting HTTP request to prevent DNS rebinding attacks");
            super::drain(request.into_body(), super::DRAIN_BYTES).await;
            // Go's http.Error adds a line end to a text that ends with one.
            return super::health::text_error(
                StatusCode::MISDIRECTED_REQUEST,
                &dns_rebinding_text(&host),
            );
        }
    } else if access.refuse_gateway_common_names
        && request.uri().path().starts_with("/v3/")
        && connection.is_some_and(|c| {
            c.client_common_name
                .as_deref()
                .is_some_and(|cn| !cn.is_empty())
        })
        && access.node.auth().enabled()
    {
        super::drain(request.into_body(), super::DRAIN_BYTES).await;
        return super::health::text_error(StatusCode::BAD_REQUEST, COMMON_NAME_TEXT);
    }
    let cors = if access.policy.any_origin() {
        Some("*".to_string())
    } else {
        request
            .headers()
            .get(header::ORIGIN)
            .and_then(|o| o.to_str().ok())
            .filter(|o| access.policy.origin_allowed(o))
            .map(str::to_string)
    };
    let mut response = if request.method() == Method::OPTIONS {
        super::drain(request.into_body(), super::DRAIN_BYTES).await;
        Response::new(Body::empty())
    } else {
        next.run(request).await
    };
    if let Some(origin) = cors {
        add_cors(&mut response, &origin);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_host(host: &str) -> Request<Body> {
        Request::builder()
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap()
    }

    #[test]
    fn hostnames_are_read_as_go_reads_them() {
        assert_eq!(hostname(&with_host("example.com:2379")), "example.com");
        assert_eq!(hostname(&with_host("example.com")), "example.com");
        assert_eq!(hostname(&with_host("127.0.0.1:2379")), "127.0.0.1");
        assert_eq!(hostname(&with_host("[::1]:2379")), "::1");
        assert_eq!(hostname(&with_host("::1")), "::1");
    }

    #[test]
    fn the_refusal_names_the_host_as_etcd_does() {
        let text = dns_rebinding_text("evil.example");
        assert!(
            text.starts_with("\netcd received your request, but the Host header was unrecognized.")
        );
        assert!(text.contains("  - e.g. etcd --host-whitelist \"evil.example\"\n"));
        assert!(text.ends_with("(CVE-2018-5702).\n"));
    }
}
