//! etcdserverpb.KV: Range, RangeStream (etcd 3.7), Put, DeleteRange, Txn and Compact.
//!
//! Handlers validate, then either read the local store (after a read index unless
//! serializable) or propose one command through raft and unwrap its outcome. They hold
//! no data logic of their own.

use std::sync::Arc;
use std::time::Instant;

use tonic::{Request, Response, Status};

use super::{authorized, status, validate};
use crate::auth::{Action, Caller};
use crate::node::metrics as node_metrics;
use crate::node::Node;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_result::Result as Outcome;
use crate::proto::etcdserverpb::kv_server::Kv;
use crate::proto::etcdserverpb::request_op::Request as Op;
use crate::proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, ResponseHeader, TxnRequest, TxnResponse,
};
use crate::store::txn as txn_rules;
use crate::store::RequestType;

/// A response whose header the store leaves at its revision and the API completes.
trait Headed {
    fn header_mut(&mut self) -> &mut Option<ResponseHeader>;
}

macro_rules! headed {
    ($($response:ty),*) => {
        $(impl Headed for $response {
            fn header_mut(&mut self) -> &mut Option<ResponseHeader> {
                &mut self.header
            }
        })*
    };
}

headed!(
    RangeResponse,
    PutResponse,
    DeleteRangeResponse,
    TxnResponse,
    CompactionResponse
);

/// What Compact needs once auth is on: root, as etcd 3.7's `isPermitted` (etcd 3.4
/// to 3.6 let anyone compact).
const COMPACT_NEEDS: Action<'static> = Action::Admin;

pub struct KvService {
    node: Arc<Node>,
}

impl KvService {
    pub fn new(node: Arc<Node>) -> Self {
        KvService { node }
    }

    /// Completes the header with this member's identity and term.
    fn complete<T: Headed>(&self, mut response: T) -> T {
        let partial = response.header_mut().take();
        *response.header_mut() = Some(self.node.header_from(partial));
        response
    }

    /// Proposes a write for `caller` and takes the outcome it must produce.
    async fn write<T>(
        &self,
        caller: &Caller,
        request: CommandRequest,
        also: &[Action<'_>],
        expected: impl FnOnce(Outcome) -> Result<T, Box<Outcome>>,
    ) -> Result<T, Status> {
        match authorized::propose(&self.node, caller, request, also).await? {
            // The other outcome is described only when it happens, not on every write.
            Some(outcome) => expected(outcome)
                .map_err(|other| status::internal("apply", &format!("unexpected {other:?}"))),
            None => Err(status::internal("apply", &"empty outcome")),
        }
    }

    /// The keys already on the leases puts attach (`leases`, 0 for none), with auth on:
    /// etcd's `checkLeasePuts` needs write permission over them, as attaching to a
    /// lease whose keys the caller may not write would let it revoke them.
    async fn lease_keys_of(&self, mut leases: Vec<i64>) -> Result<Vec<bytes::Bytes>, Status> {
        leases.retain(|&lease| lease != 0);
        if leases.is_empty() || !self.node.auth().enabled() {
            return Ok(Vec::new());
        }
        leases.sort_unstable();
        leases.dedup();
        super::lease::keys_of_leases(&self.node, leases).await
    }

    /// What Range does for `caller`; also the reads the Lock and Election services make
    /// for their callers.
    pub(crate) async fn range_for(
        &self,
        caller: &Caller,
        req: RangeRequest,
    ) -> Result<RangeResponse, Status> {
        let started = Instant::now();
        let answered = self.answer_range(caller, req).await;
        node_metrics::request_finished(RequestType::Range, answered.is_ok(), started.elapsed());
        answered
    }

    async fn answer_range(
        &self,
        caller: &Caller,
        req: RangeRequest,
    ) -> Result<RangeResponse, Status> {
        validate::range(&req)?;
        if !req.serializable && self.node.is_learner() {
            return Err(status::not_supported_for_learner());
        }
        if !req.serializable {
            self.node.read_barrier().await?;
        }
        let read = Action::Read {
            key: &req.key,
            range_end: &req.range_end,
        };
        let grant = authorized::check(&self.node, caller, &[read]).await?;
        let response = if req.range_end.is_empty() {
            // One key is a few lookups in memory or cache (microseconds): answered here,
            // sparing the hand-off to the blocking pool and back, two context switches
            // that cost more than the read.
            let _readable = self.node.store().readable().await;
            self.node.store().range(&req).map_err(status::from_store)?
        } else {
            self.node.read_store(move |store| store.range(&req)).await?
        };
        authorized::confirm(&self.node, grant)?;
        Ok(self.complete(response))
    }

    /// What DeleteRange does for `caller` (also Unlock's delete).
    pub(crate) async fn delete_range_for(
        &self,
        caller: &Caller,
        req: DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, Status> {
        validate::delete_range(&req)?;
        let response = self
            .write(caller, CommandRequest::DeleteRange(req), &[], |o| match o {
                Outcome::DeleteRange(r) => Ok(r),
                other => Err(Box::new(other)),
            })
            .await?;
        Ok(self.complete(response))
    }

    /// What Txn does for `caller`; also the transactions the Lock and Election services
    /// make for their callers.
    pub(crate) async fn txn_for(
        &self,
        caller: &Caller,
        req: TxnRequest,
    ) -> Result<TxnResponse, Status> {
        validate::txn(&req, self.node.limits().max_txn_ops)?;
        // A transaction that writes nothing is a read: served locally, as etcd does.
        let response = if txn_rules::is_read_only(&req) {
            let started = Instant::now();
            let answered = self.answer_read_only_txn(caller, req).await;
            node_metrics::request_finished(
                RequestType::ReadonlyTxn,
                answered.is_ok(),
                started.elapsed(),
            );
            answered?
        } else {
            // etcd's `checkPutAuth` for each of the transaction's puts (both branches,
            // nested ones too): the leases they attach, as a plain Put's.
            let lease_keys = self.lease_keys_of(leases_attached(&req)).await?;
            self.write(
                caller,
                CommandRequest::Txn(req),
                &[Action::WriteKeys(&lease_keys)],
                |o| match o {
                    Outcome::Txn(r) => Ok(r),
                    other => Err(Box::new(other)),
                },
            )
            .await?
        };
        Ok(self.complete(response))
    }

    /// A transaction that writes nothing, served locally as etcd does.
    async fn answer_read_only_txn(
        &self,
        caller: &Caller,
        req: TxnRequest,
    ) -> Result<TxnResponse, Status> {
        if !txn_rules::is_serializable(&req) {
            self.node.read_barrier().await?;
        }
        let grant = authorized::check(&self.node, caller, &[Action::Txn(&req)]).await?;
        let response = self
            .node
            .read_store(move |store| store.read_only_txn(&req))
            .await?;
        authorized::confirm(&self.node, grant)?;
        Ok(response)
    }
}

/// The leases every put of `txn` attaches: both branches, nested transactions too.
fn leases_attached(txn: &TxnRequest) -> Vec<i64> {
    let mut leases = Vec::new();
    let mut pending = vec![txn];
    while let Some(txn) = pending.pop() {
        for op in txn.success.iter().chain(&txn.failure) {
            match &op.request {
                Some(Op::RequestPut(put)) => leases.push(put.lease),
                Some(Op::RequestTxn(nested)) => pending.push(nested),
                _ => {}
            }
        }
    }
    leases
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<Response<RangeResponse>, Status> {
        let caller = Caller::of(&request);
        self.range_for(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    /// etcd 3.7's RangeStream: Range's checks, read index and permission, then the
    /// range in chunks from one snapshot (`range_stream`). A learner never gets here:
    /// etcd refuses every stream but Snapshot on a learner (`learner_gate`).
    async fn range_stream(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<Response<super::range_stream::ChunkStream>, Status> {
        let caller = Caller::of(&request);
        let req = request.into_inner();
        validate::range_stream(&req)?;
        if !req.serializable {
            self.node.read_barrier().await?;
        }
        let read = Action::Read {
            key: &req.key,
            range_end: &req.range_end,
        };
        let grant = authorized::check(&self.node, &caller, &[read]).await?;
        let chunks = super::range_stream::start(self.node.clone(), req, grant).await?;
        Ok(Response::new(chunks))
    }

    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let caller = Caller::of(&request);
        let req = request.into_inner();
        validate::put(&req)?;
        let lease_keys = self.lease_keys_of(vec![req.lease]).await?;
        let response = self
            .write(
                &caller,
                CommandRequest::Put(req),
                &[Action::WriteKeys(&lease_keys)],
                |o| match o {
                    Outcome::Put(r) => Ok(r),
                    other => Err(Box::new(other)),
                },
            )
            .await?;
        Ok(Response::new(self.complete(response)))
    }

    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let caller = Caller::of(&request);
        self.delete_range_for(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn txn(&self, request: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let caller = Caller::of(&request);
        self.txn_for(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn compact(
        &self,
        request: Request<CompactionRequest>,
    ) -> Result<Response<CompactionResponse>, Status> {
        let caller = Caller::of(&request);
        let req = request.into_inner();
        let physical = req.physical.then_some(req.revision);
        let response = self
            .write(
                &caller,
                CommandRequest::Compaction(req),
                &[COMPACT_NEEDS],
                |o| match o {
                    Outcome::Compaction(r) => Ok(r),
                    other => Err(Box::new(other)),
                },
            )
            .await?;
        // Once this member has applied what the leader committed, it has scheduled the
        // compaction; its worker deletes in the background (as etcd's), and `physical`
        // waits for it here, as etcd waits on the member it asked.
        if let Some(revision) = physical {
            self.node.read_barrier().await?;
            self.node.store().wait_physically_compacted(revision).await;
        }
        Ok(Response::new(self.complete(response)))
    }
}
