//! Elections: etcd's `Election` (client/v3/concurrency/election.go) as etcd's Election
//! server uses it, Observe aside ([`observe`](super::observe)).
//!
//! The campaigner whose key under `name/` was created first leads, and its key's value
//! is the leader's proclamation. A leadership is the key and its create revision:
//! Proclaim and Resign act only while the key still has that revision (a transaction
//! compares it), so a leadership that ended, even if its key was put again since, can
//! do nothing. As in etcd, Proclaim and Resign open a session with the leadership's
//! lease: given 0, they grant a new 60-second lease, and Proclaim moves the key to it.

use bytes::Bytes;

use super::cancel::Cancellation;
use super::{keys, session, wait, Client, ConcurrencyError};
use crate::proto::etcdserverpb::{ResponseHeader, TxnRequest};
use crate::proto::mvccpb::KeyValue;

/// A leadership, as Campaign answers it and Proclaim and Resign are given it back.
#[derive(Clone, Debug, Default)]
pub struct Leadership {
    pub name: Bytes,
    pub key: Bytes,
    /// The create revision of `key`.
    pub rev: i64,
    pub lease: i64,
}

/// Waits until the caller leads election `name` under `lease` (0: a new 60-second
/// lease), proclaiming `value`; answers with the header of its first transaction, as
/// etcd does. If the request is dropped while it waits, the caller resigns.
pub async fn campaign(
    client: Client,
    name: Bytes,
    lease: i64,
    value: Bytes,
    mut cancel: Cancellation,
) -> Result<(ResponseHeader, Leadership), ConcurrencyError> {
    let lease = session::lease(&client, lease).await?;
    let prefix = keys::prefix(&name);
    let key = keys::holder_key(&prefix, lease);
    let txn = TxnRequest {
        compare: vec![keys::created_at(&key, 0)],
        success: vec![keys::put_op(&key, value.clone(), lease)],
        failure: vec![keys::range_op(keys::get(&key))],
    };
    let response = client.txn(txn).await?;
    let header = response.header.unwrap_or_default();
    let mut rev = header.revision;
    if !response.succeeded {
        // Campaigning again with the same lease: the key is the campaign's already.
        let mine = keys::range_at(&response.responses, 0)
            .and_then(|mine| mine.kvs.first())
            .ok_or_else(|| ConcurrencyError::Internal("campaign: own key not read".into()))?;
        rev = mine.create_revision;
        if mine.value != value {
            match proclaim_as(&client, &key, rev, lease, value).await {
                Ok(_) => {}
                // etcd's Resign after this error runs with the key already forgotten
                // and deletes nothing.
                Err(ConcurrencyError::NotLeader) => return Err(ConcurrencyError::NotLeader),
                Err(error) => {
                    let _ = resign_as(&client, &key, rev).await;
                    return Err(error);
                }
            }
        }
    }
    if let Err(error) = wait::for_deletes(&client, &prefix, rev - 1, &mut cancel).await {
        // Only a cancelled campaign resigns; after any other failure the key stays
        // campaigning, as in etcd.
        if cancel.is_cancelled() {
            let _ = resign_as(&client, &key, rev).await;
        }
        return Err(error);
    }
    let leadership = Leadership {
        name,
        key,
        rev,
        lease,
    };
    Ok((header, leadership))
}

/// Replaces the leader's value with `value`, if `leader` still leads.
pub async fn proclaim(
    client: &Client,
    leader: Leadership,
    value: Bytes,
) -> Result<ResponseHeader, ConcurrencyError> {
    let lease = session::lease(client, leader.lease).await?;
    proclaim_as(client, &leader.key, leader.rev, lease, value).await
}

/// Deletes the leader's key if it still has the leadership's revision; answers the
/// same whether it did or not.
pub async fn resign(
    client: &Client,
    leader: Leadership,
) -> Result<ResponseHeader, ConcurrencyError> {
    session::lease(client, leader.lease).await?;
    resign_as(client, &leader.key, leader.rev).await
}

/// The current leader's key and value (etcd's `ErrElectionNoLeader` if nobody
/// campaigns).
pub async fn leader(
    client: &Client,
    name: &[u8],
) -> Result<(ResponseHeader, KeyValue), ConcurrencyError> {
    let current = client
        .range(keys::first_created(&keys::prefix(name)))
        .await?;
    let header = current.header.unwrap_or_default();
    match current.kvs.into_iter().next() {
        Some(kv) => Ok((header, kv)),
        None => Err(ConcurrencyError::NoLeader),
    }
}

async fn proclaim_as(
    client: &Client,
    key: &Bytes,
    rev: i64,
    lease: i64,
    value: Bytes,
) -> Result<ResponseHeader, ConcurrencyError> {
    let txn = TxnRequest {
        compare: vec![keys::created_at(key, rev)],
        success: vec![keys::put_op(key, value, lease)],
        failure: Vec::new(),
    };
    let response = client.txn(txn).await?;
    if !response.succeeded {
        return Err(ConcurrencyError::NotLeader);
    }
    Ok(response.header.unwrap_or_default())
}

async fn resign_as(
    client: &Client,
    key: &Bytes,
    rev: i64,
) -> Result<ResponseHeader, ConcurrencyError> {
    let txn = TxnRequest {
        compare: vec![keys::created_at(key, rev)],
        success: vec![keys::delete_op(key)],
        failure: Vec::new(),
    };
    let response = client.txn(txn).await?;
    Ok(response.header.unwrap_or_default())
}
