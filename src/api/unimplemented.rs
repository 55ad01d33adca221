//! The services and RPCs that are not built yet, and how they answer.
//!
//! Every etcd service is registered so that clients never see a missing service; an
//! RPC without an implementation answers `Unimplemented` at once, with a message that
//! names it. The generated default stubs say only "Not yet implemented"; the layer here
//! rewrites that one message to name the RPC, so that one mechanism covers every stub.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::HeaderValue;

use crate::proto::etcdserverpb::auth_server::Auth;
use crate::proto::etcdserverpb::lease_server::Lease;
use crate::proto::etcdserverpb::watch_server::Watch;

/// Watch is not built yet: every RPC answers Unimplemented.
pub struct WatchService;
#[tonic::async_trait]
impl Watch for WatchService {}

/// Lease is not built yet: every RPC answers Unimplemented.
pub struct LeaseService;
#[tonic::async_trait]
impl Lease for LeaseService {}

/// Auth is not built yet: every RPC answers Unimplemented.
pub struct AuthService;
#[tonic::async_trait]
impl Auth for AuthService {}

const STUB_MESSAGE: &str = "Not yet implemented";
const UNIMPLEMENTED: &str = "12";

#[derive(Clone, Copy, Debug, Default)]
pub struct NameUnimplementedLayer;

impl<S> tower::Layer<S> for NameUnimplementedLayer {
    type Service = NameUnimplemented<S>;
    fn layer(&self, inner: S) -> Self::Service {
        NameUnimplemented { inner }
    }
}

#[derive(Clone, Debug)]
pub struct NameUnimplemented<S> {
    inner: S,
}

impl<S, B, R> tower::Service<http::Request<B>> for NameUnimplemented<S>
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
            let headers = response.headers_mut();
            let is_stub = headers.get("grpc-status").is_some_and(|s| s == UNIMPLEMENTED)
                && headers
                    .get("grpc-message")
                    .and_then(|m| m.to_str().ok())
                    .is_some_and(|m| m.replace("%20", " ") == STUB_MESSAGE);
            if is_stub {
                let message = format!("{method}%20is%20not%20implemented%20by%20QuantyKube%20yet");
                if let Ok(value) = HeaderValue::from_str(&message) {
                    headers.insert("grpc-message", value);
                }
            }
            Ok(response)
        })
    }
}
