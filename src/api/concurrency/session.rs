//! etcd's `concurrency.NewSession` as its Lock and Election servers use it: the lease a
//! request's keys are attached to.
//!
//! etcd's servers open a session with the request's lease and orphan it at once, so the
//! server never keeps a lease alive: the client does (or nobody, and the lease, with
//! its keys, expires).

use super::{Client, ConcurrencyError};

/// etcd's `defaultSessionTTL`, in seconds: the lease a request without one gets.
pub const DEFAULT_TTL: i64 = 60;

/// etcd's `NoLease`.
const NO_LEASE: i64 = 0;

/// The lease to attach keys to: `lease` as given (etcd checks nothing here; a lease
/// that does not exist fails the first put), or, for 0, a new lease of
/// [`DEFAULT_TTL`] granted for the caller, which nobody keeps alive.
pub async fn lease(client: &Client, lease: i64) -> Result<i64, ConcurrencyError> {
    if lease != NO_LEASE {
        return Ok(lease);
    }
    client.grant(DEFAULT_TTL).await
}
