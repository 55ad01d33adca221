//! What a write or a read barrier can fail with, in terms the server maps onto etcd's
//! errors. This module owns only the vocabulary; it must never decide retries.

/// A write did not produce an outcome.
///
/// Whether the command may still take effect matters to the caller (etcd clients
/// retry on some errors and not others), so every variant says so.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// No leader was known or reachable before the deadline. The command was not
    /// proposed. (etcd: `etcdserver: no leader`.)
    #[error("no leader available")]
    NoLeader,
    /// The deadline passed after the command may have been proposed: it may or may
    /// not be applied. (etcd: `etcdserver: request timed out`.)
    #[error("request timed out; the command may or may not be applied")]
    Timeout,
    /// The leader lost leadership after the command was proposed: it may or may not be
    /// applied. (etcd: `etcdserver: leader changed`.)
    #[error("leader changed; the command may or may not be applied")]
    LeaderChanged,
    /// This node's raft has stopped (shutdown or a fatal storage error).
    /// (etcd: `etcdserver: server stopped`.)
    #[error("raft stopped: {0}")]
    Stopped(String),
    /// The leader refused the forwarded request outright (it was malformed or too
    /// large for the peer API); the command was not applied.
    #[error("peer refused the request: {0}")]
    Network(String),
}

/// A read barrier could not confirm that local state is linearizable. Reads are
/// idempotent, so every variant is safe to retry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// No leader was known or reachable before the deadline. (etcd: `etcdserver: no leader`.)
    #[error("no leader available")]
    NoLeader,
    /// The leader could not confirm its leadership, or this node did not apply up to the
    /// read index, before the deadline. (etcd: `etcdserver: request timed out`.)
    #[error("read barrier timed out")]
    Timeout,
    /// Leadership moved while the read index was being obtained, until the deadline.
    /// (etcd: `etcdserver: leader changed`.)
    #[error("leader changed during the read barrier")]
    LeaderChanged,
    /// This node's raft has stopped. (etcd: `etcdserver: server stopped`.)
    #[error("raft stopped: {0}")]
    Stopped(String),
    /// The leader kept failing the read-index request until the deadline.
    #[error("read index request failed: {0}")]
    Network(String),
}
