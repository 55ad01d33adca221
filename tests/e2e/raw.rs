//! A raw KV client over etcd's protobuf types (re-exported by etcd-client's
//! `build-server` feature), for request fields that etcd-client's convenience API
//! cannot express (an explicit sort order with the KEY target, out-of-range enums,
//! empty txn ops) and for field-by-field comparison of whole responses.

#![allow(dead_code)]

use etcd_client::proto::{
    PbCompactionRequest, PbCompactionResponse, PbCompare, PbDeleteRequest, PbDeleteResponse,
    PbPutRequest, PbPutResponse, PbRangeRequest, PbRangeResponse, PbTargetUnion, PbTxnOpRequest,
    PbTxnRequest, PbTxnRequestOp, PbTxnResponse,
};
use tonic::transport::Channel;

pub mod sort_order {
    pub const NONE: i32 = 0;
    pub const ASCEND: i32 = 1;
    pub const DESCEND: i32 = 2;
}

pub mod sort_target {
    pub const KEY: i32 = 0;
    pub const VERSION: i32 = 1;
    pub const CREATE: i32 = 2;
    pub const MOD: i32 = 3;
    pub const VALUE: i32 = 4;
}

pub mod compare_result {
    pub const EQUAL: i32 = 0;
    pub const GREATER: i32 = 1;
    pub const LESS: i32 = 2;
    pub const NOT_EQUAL: i32 = 3;
}

pub mod compare_target {
    pub const VERSION: i32 = 0;
    pub const CREATE: i32 = 1;
    pub const MOD: i32 = 2;
    pub const VALUE: i32 = 3;
    pub const LEASE: i32 = 4;
}

pub use crate::support::connect::channel;

/// A client of the `etcdserverpb.KV` service speaking raw protobuf messages.
#[derive(Clone)]
pub struct RawKv {
    grpc: tonic::client::Grpc<Channel>,
}

impl RawKv {
    pub async fn connect(endpoint: &str) -> RawKv {
        RawKv {
            grpc: tonic::client::Grpc::new(channel(endpoint).await),
        }
    }

    async fn unary<Req, Resp>(
        &mut self,
        path: &'static str,
        req: Req,
    ) -> Result<Resp, tonic::Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        crate::support::grpc::unary(&mut self.grpc, path, req, None).await
    }

    pub async fn range(&mut self, req: PbRangeRequest) -> Result<PbRangeResponse, tonic::Status> {
        self.unary("/etcdserverpb.KV/Range", req).await
    }

    pub async fn put(&mut self, req: PbPutRequest) -> Result<PbPutResponse, tonic::Status> {
        self.unary("/etcdserverpb.KV/Put", req).await
    }

    pub async fn delete_range(
        &mut self,
        req: PbDeleteRequest,
    ) -> Result<PbDeleteResponse, tonic::Status> {
        self.unary("/etcdserverpb.KV/DeleteRange", req).await
    }

    pub async fn txn(&mut self, req: PbTxnRequest) -> Result<PbTxnResponse, tonic::Status> {
        self.unary("/etcdserverpb.KV/Txn", req).await
    }

    pub async fn compact(
        &mut self,
        req: PbCompactionRequest,
    ) -> Result<PbCompactionResponse, tonic::Status> {
        self.unary("/etcdserverpb.KV/Compact", req).await
    }
}

/// A Range request for one key.
pub fn range(key: &str) -> PbRangeRequest {
    PbRangeRequest {
        key: key.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// A Range request for `[key, end)`.
pub fn range_between(key: &str, end: &str) -> PbRangeRequest {
    PbRangeRequest {
        key: key.as_bytes().to_vec(),
        range_end: end.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// A Put request.
pub fn put(key: &str, value: &str) -> PbPutRequest {
    PbPutRequest {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// A DeleteRange request for one key.
pub fn delete(key: &str) -> PbDeleteRequest {
    PbDeleteRequest {
        key: key.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// A DeleteRange request for `[key, end)`.
pub fn delete_between(key: &str, end: &str) -> PbDeleteRequest {
    PbDeleteRequest {
        key: key.as_bytes().to_vec(),
        range_end: end.as_bytes().to_vec(),
        ..Default::default()
    }
}

pub fn op_range(req: PbRangeRequest) -> PbTxnRequestOp {
    PbTxnRequestOp {
        request: Some(PbTxnOpRequest::RequestRange(req)),
    }
}

pub fn op_put(key: &str, value: &str) -> PbTxnRequestOp {
    PbTxnRequestOp {
        request: Some(PbTxnOpRequest::RequestPut(put(key, value))),
    }
}

pub fn op_delete(req: PbDeleteRequest) -> PbTxnRequestOp {
    PbTxnRequestOp {
        request: Some(PbTxnOpRequest::RequestDeleteRange(req)),
    }
}

pub fn op_txn(req: PbTxnRequest) -> PbTxnRequestOp {
    PbTxnRequestOp {
        request: Some(PbTxnOpRequest::RequestTxn(req)),
    }
}

/// A RequestOp with no request set.
pub fn op_empty() -> PbTxnRequestOp {
    PbTxnRequestOp { request: None }
}

/// A Txn request.
pub fn txn(
    compare: Vec<PbCompare>,
    success: Vec<PbTxnRequestOp>,
    failure: Vec<PbTxnRequestOp>,
) -> PbTxnRequest {
    PbTxnRequest {
        compare,
        success,
        failure,
    }
}

/// A Compare of `key`'s `target` against `value` with `result` (see the modules above).
pub fn compare(key: &str, result: i32, target: PbTargetUnion) -> PbCompare {
    let target_code = match &target {
        PbTargetUnion::Version(_) => compare_target::VERSION,
        PbTargetUnion::CreateRevision(_) => compare_target::CREATE,
        PbTargetUnion::ModRevision(_) => compare_target::MOD,
        PbTargetUnion::Value(_) => compare_target::VALUE,
        PbTargetUnion::Lease(_) => compare_target::LEASE,
    };
    PbCompare {
        result,
        target: target_code,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(target),
    }
}

/// The keys of a Range response, as strings.
pub fn keys(resp: &PbRangeResponse) -> Vec<String> {
    resp.kvs
        .iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}
