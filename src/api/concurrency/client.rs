//! The calls etcd's concurrency package makes through etcd's in-process client
//! (`v3client`), made here on the KV, Lease and Watch services themselves for one
//! caller: every read, write and watch is validated and authorised exactly as the same
//! RPC from that caller would be, and fails with the same status. Reads are
//! linearizable, as the client's are by default. Nothing here knows about locks.

use std::sync::Arc;

use bytes::Bytes;

use super::watch::Watch;
use super::ConcurrencyError;
use crate::api::kv::KvService;
use crate::api::lease::LeaseService;
use crate::auth::Caller;
use crate::node::Node;
use crate::proto::etcdserverpb::{
    DeleteRangeRequest, DeleteRangeResponse, LeaseGrantRequest, RangeRequest, RangeResponse,
    TxnRequest, TxnResponse, WatchCreateRequest,
};

/// The services the Lock and Election services act through, built once with the
/// client routes (so that leases they grant draw ids from the Lease service's own
/// sequence).
#[derive(Clone)]
pub struct Services {
    node: Arc<Node>,
    kv: Arc<KvService>,
    leases: Arc<LeaseService>,
}

impl Services {
    pub fn new(node: Arc<Node>, kv: Arc<KvService>, leases: Arc<LeaseService>) -> Self {
        Services { node, kv, leases }
    }

    /// The services as `caller` uses them.
    pub fn client(&self, caller: Caller) -> Client {
        Client {
            services: self.clone(),
            caller,
        }
    }
}

/// The services as one caller uses them.
#[derive(Clone)]
pub struct Client {
    services: Services,
    caller: Caller,
}

impl Client {
    pub async fn txn(&self, txn: TxnRequest) -> Result<TxnResponse, ConcurrencyError> {
        Ok(self.services.kv.txn_for(&self.caller, txn).await?)
    }

    /// A linearizable range.
    pub async fn range(&self, range: RangeRequest) -> Result<RangeResponse, ConcurrencyError> {
        Ok(self.services.kv.range_for(&self.caller, range).await?)
    }

    pub async fn delete(&self, key: Bytes) -> Result<DeleteRangeResponse, ConcurrencyError> {
        let delete = DeleteRangeRequest {
            key,
            ..Default::default()
        };
        Ok(self
            .services
            .kv
            .delete_range_for(&self.caller, delete)
            .await?)
    }

    /// Grants a lease of `ttl` seconds with a server-chosen id.
    pub async fn grant(&self, ttl: i64) -> Result<i64, ConcurrencyError> {
        let grant = LeaseGrantRequest { ttl, id: 0 };
        let granted = self.services.leases.grant_for(&self.caller, grant).await?;
        Ok(granted.id)
    }

    pub fn watch(&self, create: WatchCreateRequest) -> Result<Watch, ConcurrencyError> {
        Watch::open(self.services.node.clone(), self.caller.clone(), create)
    }
}
