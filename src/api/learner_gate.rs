//! A learner serves only what etcd's learner serves: `Maintenance/Status`, serializable
//! `KV/Range` (the Range handler refuses a linearizable one), and the `Maintenance/
//! Snapshot` stream (etcd 3.6). Every other RPC, etcd 3.7's RangeStream and gRPC health
//! included (etcd's interceptor sees them too), gets etcd 3.6's `FailedPrecondition
//! etcdserver: rpc not supported for learner`. This layer decides by path only; it never reads a body.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::node::Node;

const SERVED_BY_LEARNERS: [&str; 3] = [
    "/etcdserverpb.Maintenance/Status",
    "/etcdserverpb.KV/Range",
    "/etcdserverpb.Maintenance/Snapshot",
];

/// True when a learner serves the RPC at `path` (before any check of its body).
pub fn served_by_learners(path: &str) -> bool {
    SERVED_BY_LEARNERS.contains(&path)
}

#[derive(Clone)]
pub struct LearnerGateLayer {
    node: Arc<Node>,
}

impl LearnerGateLayer {
    pub fn new(node: Arc<Node>) -> Self {
        LearnerGateLayer { node }
    }
}

impl<S> tower::Layer<S> for LearnerGateLayer {
    type Service = LearnerGate<S>;
    fn layer(&self, inner: S) -> Self::Service {
        LearnerGate {
            inner,
            node: self.node.clone(),
        }
    }
}

#[derive(Clone)]
pub struct LearnerGate<S> {
    inner: S,
    node: Arc<Node>,
}

impl<S, B, R> tower::Service<http::Request<B>> for LearnerGate<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    R: Default + Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // Only gRPC calls are gated: the HTTP probes on the same port report a
        // learner themselves (`/readyz`'s non_learner check).
        let grpc = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
        if grpc && !served_by_learners(request.uri().path()) && self.node.is_learner() {
            let refused = super::status::not_supported_for_learner().into_http::<R>();
            return Box::pin(async move { Ok(refused) });
        }
        let response = self.inner.call(request);
        Box::pin(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learners_serve_status_range_and_snapshot_only() {
        assert!(served_by_learners("/etcdserverpb.KV/Range"));
        assert!(served_by_learners("/etcdserverpb.Maintenance/Status"));
        assert!(!served_by_learners("/etcdserverpb.KV/Put"));
        // etcd 3.7 refuses every stream but Snapshot on a learner.
        assert!(!served_by_learners("/etcdserverpb.KV/RangeStream"));
        assert!(!served_by_learners("/etcdserverpb.Cluster/MemberList"));
        assert!(!served_by_learners("/grpc.health.v1.Health/Check"));
    }
}
