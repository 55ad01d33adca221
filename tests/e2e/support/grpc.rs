//! One raw unary gRPC call, on any service, with etcd's protobuf types: for requests
//! etcd-client cannot express or would rewrite, and for the `token` metadata a test
//! chooses (forged, expired, from another member).

#![allow(dead_code)]

use tonic::client::Grpc;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use crate::harness::RPC_TIMEOUT;
use crate::support::connect::channel;

/// One unary call of `path` (e.g. `/etcdserverpb.KV/Range`) on `grpc`, sending `token`
/// as the `token` metadata etcd reads if given, and [`RPC_TIMEOUT`] as its deadline.
pub async fn unary<Req, Resp>(
    grpc: &mut Grpc<Channel>,
    path: &'static str,
    req: Req,
    token: Option<&str>,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("channel not ready: {e}")))?;
    let mut request = tonic::Request::new(req);
    request.set_timeout(RPC_TIMEOUT);
    if let Some(token) = token {
        let value = MetadataValue::try_from(token)
            .unwrap_or_else(|e| panic!("token is no metadata value: {e}"));
        request.metadata_mut().insert("token", value);
    }
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    grpc.unary(request, PathAndQuery::from_static(path), codec)
        .await
        .map(tonic::Response::into_inner)
}

/// As [`unary`] without a token, on a connection of its own to `endpoint`.
pub async fn unary_to<Req, Resp>(
    endpoint: &str,
    path: &'static str,
    req: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = Grpc::new(channel(endpoint).await);
    unary(&mut grpc, path, req, None).await
}
