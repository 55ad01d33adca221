//! etcd's Lock and Election semantics, as etcd's server-side `v3lock` and `v3election`
//! services build them on client/v3/concurrency (`mutex.go`, `election.go`, `key.go`):
//! a lock or an election is the set of keys under `name/`, one per lease
//! (`name/<lease id in hex>`), attached to that lease; the key created first holds the
//! lock or leads. Waiting is a watch on the deletion of the next older key, never a poll,
//! and a holder whose lease ends loses its key and with it the lock.
//!
//! This module owns those rules only. It acts for the caller through [`Client`], which
//! makes the KV, Lease and Watch calls etcd's in-process client makes, on the services
//! themselves and authorised as the caller; it never proposes or reads the store by
//! itself. Its waits end when the request that started them is dropped
//! ([`cancel`]), after removing what they left behind, as etcd's do.

pub mod cancel;
pub mod client;
pub mod election;
pub mod error;
pub mod keys;
pub mod mutex;
pub mod observe;
pub mod session;
pub mod wait;
pub mod watch;

pub use client::{Client, Services};
pub use error::ConcurrencyError;
