//! What can go wrong reading or writing an etcd snapshot file, in words an operator can
//! act on. The Snapshot RPC maps these to gRPC statuses in `api::status`.

use std::path::PathBuf;

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("snapshot missing hash but --skip-hash-check=false")]
    MissingHash,
    /// etcd's words, with Go's rendering of the two digests.
    #[error("expected sha256 {expected}, got {actual}")]
    HashMismatch { expected: String, actual: String },
    #[error("not a valid bbolt database: {0}")]
    Database(#[from] quantykube_bbolt::ReadError),
    #[error("not an etcd snapshot: {0}")]
    NotEtcd(String),
    #[error("cannot write the snapshot: {0}")]
    Write(String),
    #[error("data-dir {0:?} exists")]
    DataDirExists(PathBuf),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The restored member's identity files could not be written.
    #[error("{0}")]
    Identity(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl BackupError {
    pub(crate) fn file(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
        move |source| BackupError::File {
            path: path.to_path_buf(),
            source,
        }
    }
}
