//! The revision store's errors: what a request can be refused for, and what means the
//! store itself is broken. Mapping them to gRPC statuses is the API layer's job.

use thiserror::Error;

use crate::proto::command::command_error::Kind;

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
    /// A committed command this build cannot apply: a newer build proposed it (only
    /// our own encoder writes the log). Fatal for this member, which must stop rather
    /// than apply something else (skipping it would leave it behind every member that
    /// applied it).
    #[error(
        "raft log entry {index} holds a command this build cannot apply ({detail}); a newer \
         QuantyKube proposed it: run this member with the release the rest of the cluster runs"
    )]
    UnknownCommand { index: u64, detail: String },
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    pub fn corrupt(what: impl Into<String>) -> Self {
        StoreError::Corrupt(what.into())
    }

    /// The one table of the errors every member applying the same command reaches
    /// alike, so that they are the command's result (its kind, in the log's outcome)
    /// rather than a failure of this member (`None`: this store is broken or its disk
    /// failed).
    pub fn command_kind(&self) -> Option<Kind> {
        Some(match self {
            StoreError::Compacted => Kind::Compacted,
            StoreError::FutureRevision => Kind::FutureRevision,
            StoreError::KeyNotFound => Kind::KeyNotFound,
            StoreError::LeaseNotFound => Kind::LeaseNotFound,
            StoreError::LeaseExists => Kind::LeaseExists,
            StoreError::NoSpace => Kind::NoSpace,
            StoreError::CorruptAlarm => Kind::Corrupt,
            StoreError::Auth(refusal) => refusal.kind(),
            StoreError::VersionMismatch => Kind::VersionMismatch,
            StoreError::ResourceNotFound => Kind::ResourceNotFound,
            StoreError::ResourceExists => Kind::ResourceExists,
            StoreError::Rocks(_)
            | StoreError::Corrupt(_)
            | StoreError::Io(_)
            | StoreError::UnknownCommand { .. } => return None,
        })
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
