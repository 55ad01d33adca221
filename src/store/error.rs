//! The revision store's errors: what a request can be refused for, and what means the
//! store itself is broken. Mapping them to gRPC statuses is the API layer's job.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum StoreError {
    /// The requested revision is older than the compacted revision.
    #[error("mvcc: required revision has been compacted")]
    Compacted,
    /// The requested revision has not been written yet.
    #[error("mvcc: required revision is a future revision")]
    FutureRevision,
    /// `ignore_value` or `ignore_lease` on a key that does not exist.
    #[error("key not found")]
    KeyNotFound,
    /// A put names a lease that does not exist.
    #[error("requested lease not found")]
    LeaseNotFound,
    /// A grant names a lease that already exists.
    #[error("lease already exists")]
    LeaseExists,
    /// A NOSPACE alarm is active and the command would grow the store.
    #[error("mvcc: database space exceeded")]
    NoSpace,
    /// A CORRUPT alarm is active (not to be confused with [`StoreError::Corrupt`], this
    /// store's own broken data).
    #[error("corrupt cluster")]
    CorruptAlarm,
    /// The auth store refuses the command (or it was authorised at an older auth
    /// revision than the one applied).
    #[error("{0}")]
    Auth(#[from] super::auth::error::AuthError),
    /// The admin API: a guarded sync's uid or version is not the record's.
    #[error("the resource's uid or version is not the one given")]
    VersionMismatch,
    /// The admin API: a guarded sync names a member without a record.
    #[error("the resource does not exist")]
    ResourceNotFound,
    /// The admin API: a resource of that name exists.
    #[error("the resource already exists")]
    ResourceExists,
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    pub fn corrupt(what: impl Into<String>) -> Self {
        StoreError::Corrupt(what.into())
    }

    /// True when every node applying the same command reaches the same error, so the
    /// error is the command's result rather than a failure of this node.
    pub fn is_deterministic(&self) -> bool {
        matches!(
            self,
            StoreError::Compacted
                | StoreError::FutureRevision
                | StoreError::KeyNotFound
                | StoreError::LeaseNotFound
                | StoreError::LeaseExists
                | StoreError::NoSpace
                | StoreError::CorruptAlarm
                | StoreError::Auth(_)
                | StoreError::VersionMismatch
                | StoreError::ResourceNotFound
                | StoreError::ResourceExists
        )
    }
}

impl From<StoreError> for std::io::Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Io(io) => io,
            other => std::io::Error::other(other),
        }
    }
}
