//! Locks: etcd's `Mutex` (client/v3/concurrency/mutex.go) as etcd's Lock server uses it.
//!
//! A lock `name` is held by the key under `name/` with the least create revision. Lock
//! puts the caller's key (`name/<lease hex>`, attached to the lease) unless that key
//! exists already (locking twice with one lease is one acquisition), and reads the
//! holder in the same transaction; a caller that does not hold it waits for the
//! deletion of every key created before its own ([`wait`](super::wait)), then checks
//! that its own key survived the wait (etcd 3.5's fix: 3.4 answered success with a key
//! its lease had already deleted). Unlock deletes the key it is given, whatever it is.

use bytes::Bytes;

use super::cancel::Cancellation;
use super::{keys, session, wait, Client, ConcurrencyError};
use crate::proto::etcdserverpb::{ResponseHeader, TxnRequest};

/// A lock held: the key that exists while it is, and the header of the read (or the
/// transaction) that found it held.
pub struct Locked {
    pub header: ResponseHeader,
    pub key: Bytes,
}

/// What the first transaction found.
struct Attempt {
    header: ResponseHeader,
    /// The create revision of the caller's key.
    revision: i64,
    /// The caller's key is the oldest: the lock is held.
    holds: bool,
}

/// Waits until the caller holds lock `name` under `lease` (0: a new 60-second lease),
/// or `cancel` says the request was dropped, in which case the caller's key is removed.
pub async fn lock(
    client: Client,
    name: Bytes,
    lease: i64,
    mut cancel: Cancellation,
) -> Result<Locked, ConcurrencyError> {
    let lease = session::lease(&client, lease).await?;
    let prefix = keys::prefix(&name);
    let key = keys::holder_key(&prefix, lease);
    let attempt = try_acquire(&client, &prefix, &key, lease).await?;
    if attempt.holds {
        return Ok(Locked {
            header: attempt.header,
            key,
        });
    }
    match wait_turn(&client, &prefix, &key, attempt.revision, &mut cancel).await {
        Ok(Some(header)) => Ok(Locked { header, key }),
        Ok(None) => Err(ConcurrencyError::SessionExpired),
        Err(error) => {
            // etcd's Mutex.Lock releases its key when the wait fails (its context was
            // cancelled, a watch failed), so that it blocks no later waiter. etcd does
            // this without the caller's credentials, which fails once auth is on; here
            // it is the caller's own delete.
            release(&client, &key).await;
            Err(error)
        }
    }
}

/// Deletes `key` for the caller (etcd's Unlock, which checks nothing about it).
pub async fn unlock(client: &Client, key: Bytes) -> Result<ResponseHeader, ConcurrencyError> {
    let deleted = client.delete(key).await?;
    Ok(deleted.header.unwrap_or_default())
}

/// Puts the caller's key unless it exists, and reads it and the holder.
async fn try_acquire(
    client: &Client,
    prefix: &[u8],
    key: &Bytes,
    lease: i64,
) -> Result<Attempt, ConcurrencyError> {
    let holder = || keys::range_op(keys::first_created(prefix));
    let txn = TxnRequest {
        compare: vec![keys::created_at(key, 0)],
        success: vec![keys::put_op(key, Bytes::new(), lease), holder()],
        failure: vec![keys::range_op(keys::get(key)), holder()],
    };
    let response = client.txn(txn).await?;
    let header = response.header.unwrap_or_default();
    let revision = if response.succeeded {
        header.revision
    } else {
        // The key existed when the compare ran, so the same transaction read it.
        keys::range_at(&response.responses, 0)
            .and_then(|mine| mine.kvs.first())
            .map(|mine| mine.create_revision)
            .ok_or_else(|| ConcurrencyError::Internal("lock: own key not read".into()))?
    };
    let holder = keys::range_at(&response.responses, 1)
        .ok_or_else(|| ConcurrencyError::Internal("lock: holder not read".into()))?
        .kvs
        .first();
    Ok(Attempt {
        holds: holder.is_none_or(|holder| holder.create_revision == revision),
        header,
        revision,
    })
}

/// Waits for every key created before the caller's (at `revision`), then reads the
/// caller's key: the read's header if it still exists, `None` if its lease ended.
async fn wait_turn(
    client: &Client,
    prefix: &[u8],
    key: &Bytes,
    revision: i64,
    cancel: &mut Cancellation,
) -> Result<Option<ResponseHeader>, ConcurrencyError> {
    wait::for_deletes(client, prefix, revision - 1, cancel).await?;
    let mine = cancel
        .unless_cancelled(client.range(keys::get(key)))
        .await?;
    Ok((!mine.kvs.is_empty()).then(|| mine.header.unwrap_or_default()))
}

/// Removes the caller's key after a failed wait; a failure is only logged, as etcd
/// ignores it (the lease removes the key at the latest).
async fn release(client: &Client, key: &Bytes) {
    if let Err(error) = client.delete(key.clone()).await {
        tracing::debug!(key = ?key, %error, "could not remove the key of an abandoned lock wait");
    }
}
