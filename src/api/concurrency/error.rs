//! What a lock or an election operation can fail with. etcd's servers return these
//! errors as plain Go values, so clients see them as `Unknown` with etcd's text;
//! `api::status::from_concurrency` is where that mapping lives.

use tonic::Status;

#[derive(Debug, thiserror::Error)]
pub enum ConcurrencyError {
    /// A KV, Lease or Watch call made for the caller was refused, with this status.
    #[error("{}", .0.message())]
    Call(Status),
    /// etcd 3.5's `ErrSessionExpired`: the waiter's own key was gone once its turn came
    /// (its lease ended while it waited).
    #[error("mutex: session is expired")]
    SessionExpired,
    /// `ErrElectionNotLeader`: the leadership given is not (or no longer) the leader's.
    #[error("election: not leader")]
    NotLeader,
    /// `ErrElectionNoLeader`: nobody campaigns in the election.
    #[error("election: no leader")]
    NoLeader,
    /// A watch ended without an error of its own (etcd's `waitDelete`).
    #[error("lost watcher waiting for delete")]
    LostWatcher,
    /// The request was dropped by its client while the operation waited.
    #[error("context canceled")]
    Cancelled,
    /// A reply of a shape the services never give, or a task that died.
    #[error("{0}")]
    Internal(String),
}

impl From<Status> for ConcurrencyError {
    fn from(status: Status) -> Self {
        ConcurrencyError::Call(status)
    }
}
