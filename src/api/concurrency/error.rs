//! What a lock or an election operation can fail with. etcd's servers return these
//! errors as plain Go values, so clients see them as `Unknown` with etcd's text;
//! the one mapping to a gRPC status is this module's `From`.

use tonic::{Code, Status};

use crate::api::status;
use crate::rpctypes;

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

/// etcd's Lock and Election servers return what their in-process client returned: it
/// turns every error etcd's server knows (`etcdserver: ...`) into a value grpc-go sends
/// as Unknown, in the same words, and leaves other statuses as they are; their own
/// errors (`mutex: ...`, `election: ...`) are plain Go errors, Unknown as well.
impl From<ConcurrencyError> for Status {
    fn from(error: ConcurrencyError) -> Status {
        match error {
            ConcurrencyError::Call(status)
                if status.code() != Code::Internal && rpctypes::is_server_error(&status) =>
            {
                Status::unknown(status.message())
            }
            ConcurrencyError::Call(status) => status,
            cancelled @ ConcurrencyError::Cancelled => Status::cancelled(cancelled.to_string()),
            ConcurrencyError::Internal(detail) => status::internal("concurrency", &detail),
            other => Status::unknown(other.to_string()),
        }
    }
}
