//! Where tonic's transport answers differ from etcd's (grpc-go's), the answer is
//! rewritten here, once, for every service.
//!
//! - A generated default stub says only "Not yet implemented": the message is replaced
//!   by one naming the RPC, so clients learn exactly what is missing.
//! - A request over the receive limit is `OutOfRange` in tonic but `ResourceExhausted`
//!   with grpc-go's "grpc: received message larger than max" in etcd.
//!
//! It only rewrites the status of trailers-only error responses; it never touches a
//! successful response.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderMap, HeaderValue};

const STUB_MESSAGE: &str = "Not yet implemented";
const TOO_LARGE_PREFIX: &str = "Error, decoded message length too large: found ";
const UNIMPLEMENTED: &str = "12";
const OUT_OF_RANGE: &str = "11";
const RESOURCE_EXHAUSTED: &str = "8";

fn percent_decoded(headers: &HeaderMap) -> Option<String> {
    let raw = headers.get("grpc-message")?.to_str().ok()?;
    Some(
        raw.replace("%20", " ")
            .replace("%3A", ":")
            .replace("%2C", ","),
    )
}

fn set_message(headers: &mut HeaderMap, message: &str) {
    let encoded = message.replace(' ', "%20");
    if let Ok(value) = HeaderValue::from_str(&encoded) {
        headers.insert("grpc-message", value);
    }
}

/// Rewrites one error response's status in place.
fn rewrite(method: &str, headers: &mut HeaderMap) {
    let Some(code) = headers.get("grpc-status").and_then(|c| c.to_str().ok()) else {
        return;
    };
    let code = code.to_string();
    let Some(message) = percent_decoded(headers) else {
        return;
    };
    if code == UNIMPLEMENTED && message == STUB_MESSAGE {
        set_message(
            headers,
            &format!("{method} is not implemented by QuantyKube yet"),
        );
    } else if code == OUT_OF_RANGE {
        // "found N bytes, the limit is: M bytes" becomes grpc-go's "(N vs. M)".
        let Some(rest) = message.strip_prefix(TOO_LARGE_PREFIX) else {
            return;
        };
        let numbers: Vec<&str> = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .collect();
        if let [found, limit] = numbers[..] {
            headers.insert("grpc-status", HeaderValue::from_static(RESOURCE_EXHAUSTED));
            set_message(
                headers,
                &format!("grpc: received message larger than max ({found} vs. {limit})"),
            );
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct CompatLayer;

impl<S> tower::Layer<S> for CompatLayer {
    type Service = Compat<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Compat { inner }
    }
}

#[derive(Clone, Debug)]
pub struct Compat<S> {
    inner: S,
}

impl<S, B, R> tower::Service<http::Request<B>> for Compat<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.uri().path().trim_start_matches('/').to_string();
        let response = self.inner.call(request);
        Box::pin(async move {
            let mut response = response.await?;
            rewrite(&method, response.headers_mut());
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(code: &'static str, message: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("grpc-status", HeaderValue::from_static(code));
        h.insert("grpc-message", HeaderValue::from_static(message));
        h
    }

    #[test]
    fn stubs_are_named_and_oversized_requests_are_resource_exhausted() {
        let mut h = headers("12", "Not%20yet%20implemented");
        rewrite("etcdserverpb.Lease/LeaseGrant", &mut h);
        assert_eq!(
            percent_decoded(&h).unwrap(),
            "etcdserverpb.Lease/LeaseGrant is not implemented by QuantyKube yet"
        );
        let mut h = headers(
            "11",
            "Error,%20decoded%20message%20length%20too%20large:%20found%20529418%20bytes,%20the%20limit%20is:%20528384%20bytes",
        );
        rewrite("etcdserverpb.KV/Put", &mut h);
        assert_eq!(h.get("grpc-status").unwrap(), "8");
        assert_eq!(
            percent_decoded(&h).unwrap(),
            "grpc: received message larger than max (529418 vs. 528384)"
        );
        let mut h = headers(
            "11",
            "etcdserver:%20mvcc:%20required%20revision%20is%20a%20future%20revision",
        );
        rewrite("etcdserverpb.KV/Range", &mut h);
        assert_eq!(h.get("grpc-status").unwrap(), "11");
    }
}
