//! What the node's operations fail with, in the node's own terms.
//!
//! Each error displays as etcd's own error of that name (`etcdserver: no leader`), the
//! text etcd's health endpoints and gRPC statuses carry alike. The node knows no gRPC:
//! each edge maps these once (`api::status`'s `From` for
//! `tonic::Status`, the admin API's through it). Callers branch on the variants, never on
//! a message's text.

use quantykube_raft::{ReadError, WriteError};
use thiserror::Error;

use crate::proto::command::command_error::Kind;
use crate::store::StoreError;

#[derive(Debug, Error)]
pub enum NodeError {
    /// The encoded command exceeds `--max-request-bytes`.
    #[error("etcdserver: request is too large")]
    TooLarge,
    /// The write would take the store to `--quota-backend-bytes` or past it.
    #[error("etcdserver: mvcc: database space exceeded")]
    NoSpace,
    #[error("etcdserver: no leader")]
    NoLeader,
    #[error("etcdserver: request timed out")]
    Timeout,
    #[error("etcdserver: leader changed")]
    LeaderChanged,
    /// Raft stopped (the member is shutting down, or its disk failed).
    #[error("etcdserver: server stopped")]
    Stopped,
    /// Applying the command refused it, the same way on every member.
    #[error("command refused: {0:?}")]
    Command(Kind),
    /// Reading this member's store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A node-local failure that is not the request's fault.
    #[error("{context}: {detail}")]
    Internal {
        context: &'static str,
        detail: String,
    },
}

impl NodeError {
    pub fn internal(context: &'static str, error: &dyn std::fmt::Display) -> Self {
        NodeError::Internal {
            context,
            detail: error.to_string(),
        }
    }

    /// True when applying the command found its auth revision old: the request must be
    /// authorised again.
    pub fn is_auth_old_revision(&self) -> bool {
        matches!(self, NodeError::Command(Kind::AuthOldRevision))
    }
}

impl From<WriteError> for NodeError {
    fn from(error: WriteError) -> Self {
        match error {
            WriteError::NoLeader => NodeError::NoLeader,
            WriteError::Timeout => NodeError::Timeout,
            WriteError::LeaderChanged => NodeError::LeaderChanged,
            other => {
                tracing::warn!(error = %other, "write failed");
                NodeError::Stopped
            }
        }
    }
}

impl From<ReadError> for NodeError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::NoLeader => NodeError::NoLeader,
            ReadError::Timeout => NodeError::Timeout,
            ReadError::LeaderChanged => NodeError::LeaderChanged,
            other => {
                tracing::warn!(error = %other, "read barrier failed");
                NodeError::Stopped
            }
        }
    }
}
