//! etcdserverpb.KV: Range, Put, DeleteRange, Txn and Compact.
//!
//! Handlers validate, then either read the local store (after a read index unless
//! serializable) or propose one command through raft and translate its outcome. They
//! hold no data logic of their own.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::{status, validate};
use crate::node::Node;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_result::Result as Outcome;
use crate::proto::etcdserverpb::kv_server::Kv;
use crate::proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
};
use crate::store::txn as txn_rules;

pub struct KvService {
    node: Arc<Node>,
}

impl KvService {
    pub fn new(node: Arc<Node>) -> Self {
        KvService { node }
    }
}

fn unexpected(outcome: Option<Outcome>) -> Status {
    status::internal("apply", &format!("unexpected outcome {outcome:?}"))
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<Response<RangeResponse>, Status> {
        let req = request.into_inner();
        validate::range(&req)?;
        if !req.serializable {
            self.node.read_barrier().await?;
        }
        let store = self.node.store().clone();
        let mut resp = tokio::task::spawn_blocking(move || store.range(&req))
            .await
            .map_err(|e| status::internal("range", &e))?
            .map_err(status::from_store)?;
        resp.header = Some(self.node.header_from(resp.header));
        Ok(Response::new(resp))
    }

    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let req = request.into_inner();
        validate::put(&req)?;
        match self.node.propose(CommandRequest::Put(req)).await? {
            Some(Outcome::Put(mut resp)) => {
                resp.header = Some(self.node.header_from(resp.header));
                Ok(Response::new(resp))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let req = request.into_inner();
        validate::delete_range(&req)?;
        match self.node.propose(CommandRequest::DeleteRange(req)).await? {
            Some(Outcome::DeleteRange(mut resp)) => {
                resp.header = Some(self.node.header_from(resp.header));
                Ok(Response::new(resp))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn txn(&self, request: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let req = request.into_inner();
        validate::txn(&req, self.node.limits().max_txn_ops)?;
        // A transaction that writes nothing is a read: served locally, as etcd does.
        if txn_rules::is_read_only(&req) {
            if !txn_rules::is_serializable(&req) {
                self.node.read_barrier().await?;
            }
            let store = self.node.store().clone();
            let mut resp = tokio::task::spawn_blocking(move || store.read_only_txn(&req))
                .await
                .map_err(|e| status::internal("txn", &e))?
                .map_err(status::from_store)?;
            resp.header = Some(self.node.header_from(resp.header));
            return Ok(Response::new(resp));
        }
        match self.node.propose(CommandRequest::Txn(req)).await? {
            Some(Outcome::Txn(mut resp)) => {
                resp.header = Some(self.node.header_from(resp.header));
                Ok(Response::new(resp))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn compact(
        &self,
        request: Request<CompactionRequest>,
    ) -> Result<Response<CompactionResponse>, Status> {
        let req = request.into_inner();
        let physical = req.physical;
        match self.node.propose(CommandRequest::Compaction(req)).await? {
            Some(Outcome::Compaction(mut resp)) => {
                // Compaction runs as the entry is applied; once this node has applied
                // everything the leader committed, it is physically done here.
                if physical {
                    self.node.read_barrier().await?;
                }
                resp.header = Some(self.node.header_from(resp.header));
                Ok(Response::new(resp))
            }
            other => Err(unexpected(other)),
        }
    }
}
