//! etcd's snapshot file, both ways: the Snapshot RPC and `quantykube snapshot` write
//! and read the file `etcdctl snapshot save` produces (a bbolt database in etcd's
//! schema, then its SHA-256), so that backups, restores and migrations work between
//! QuantyKube and etcd 3.4-3.6 in either direction.
//!
//! The page format is the `quantykube-bbolt` crate's, which knows nothing of etcd or
//! RocksDB; `schema` is etcd's buckets and encodings; `export` and `import` convert
//! between them and the revision store; `file` checks a file on disk; `cli` is the
//! offline command. Nothing here serves requests or changes a running store.

pub mod cli;
mod error;
pub mod etcd_entries;
pub mod etcd_wal;
pub mod export;
pub mod file;
pub mod import;
pub mod in_place;
pub mod save;
pub mod schema;

pub use error::BackupError;
