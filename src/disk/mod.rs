//! Where a member keeps its data on disk: the revision store's RocksDB in
//! `<data-dir>/db`, and the raft log's own RocksDB in `--wal-dir` (by default
//! `<data-dir>/wal`), as etcd keeps its WAL apart from its bbolt file.
//!
//! This module owns opening both and the one-time move of a log that a build before
//! the split kept in the store's database (as two column families beside the store's).
//! It must never open one database for both again: the log's fsync would wait for user
//! data, and a snapshot's flush would rewrite log entries.

use std::path::Path;
use std::sync::Arc;

use quantykube_raft::{log_db, LOG_COLUMN_FAMILIES};
use rocksdb::DB;

use crate::format::{self, Database, FormatError};
use crate::store::{self, StoreError};

/// Why a member's databases cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Format(#[from] FormatError),
}

impl From<std::io::Error> for DiskError {
    fn from(error: std::io::Error) -> Self {
        DiskError::Store(error.into())
    }
}

impl From<rocksdb::Error> for DiskError {
    fn from(error: rocksdb::Error) -> Self {
        DiskError::Store(error.into())
    }
}

/// A member's two databases.
pub struct Databases {
    pub store: Arc<DB>,
    pub log: Arc<DB>,
}

/// The revision store's database under `data_dir`.
pub fn store_path(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("db")
}

/// The raft log's database: `wal_dir` when given (`--wal-dir`), else `<data-dir>/wal`.
pub fn log_path(data_dir: &Path, wal_dir: Option<&Path>) -> std::path::PathBuf {
    wal_dir.map_or_else(|| data_dir.join("wal"), Path::to_path_buf)
}

/// Opens the member's databases, moving a log kept in the store's database into the
/// log's own first. The move is idempotent until its last steps, which drop the old
/// column families one at a time (each a synced MANIFEST edit of RocksDB's); the log's
/// database is synced before the first drop, so a store that lacks some of them has
/// had its log moved already, and only the drops are left. A crash at any point leaves
/// a member that starts with its log.
///
/// A database a newer build wrote is refused before anything opens it for writing; an
/// older one is brought to this build's format ([`format::migrate`]).
pub fn open(data_dir: &Path, wal_dir: Option<&Path>) -> Result<Databases, DiskError> {
    open_in_format(data_dir, wal_dir, format::CURRENT).map(|(databases, _)| databases)
}

/// The formats the databases were in when opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundFormats {
    pub store: u32,
    pub log: u32,
}

/// Opens the member's databases as [`open`] does, and brings both to `target` (up or
/// down: `quantykube migrate`); also says which formats they were in.
pub fn open_in_format(
    data_dir: &Path,
    wal_dir: Option<&Path>,
    target: u32,
) -> Result<(Databases, FoundFormats), DiskError> {
    let store_path = store_path(data_dir);
    let log_path = log_path(data_dir, wal_dir);
    format::refuse_newer(Database::Store, &store_path)?;
    format::refuse_newer(Database::Log, &log_path)?;
    // RocksDB syncs the directories it writes in, never their parents.
    quantykube_raft::durable::create_dir_all(&store_path)?;
    let legacy = log_db::legacy_log_families(&store_path)?;
    let log = log_db::open_log_database(&log_path)?;
    let mut store = store::open_database(&store_path, &legacy)?;
    if !legacy.is_empty() {
        let moved = if legacy.len() == LOG_COLUMN_FAMILIES.len() {
            log_db::move_log(&store, &log)?
        } else {
            0
        };
        let only_handle = Arc::get_mut(&mut store)
            .ok_or_else(|| StoreError::corrupt("the store's database is shared while opening"))?;
        for name in &legacy {
            only_handle.drop_cf(name)?;
        }
        tracing::info!(
            records = moved,
            to = %log_path.display(),
            "moved the raft log out of the store's database"
        );
    }
    let found = FoundFormats {
        log: format::migrate(Database::Log, &log, target)?,
        store: format::migrate(Database::Store, &store, target)?,
    };
    Ok((Databases { store, log }, found))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_kept_in_the_store_database_moves_to_its_own_and_the_store_keeps_its_data() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = store::open_database(&store_path(dir.path()), LOG_COLUMN_FAMILIES).unwrap();
            let log_cf = db.cf_handle(LOG_COLUMN_FAMILIES[0]).unwrap();
            db.put_cf(log_cf, 1u64.to_be_bytes(), b"entry").unwrap();
            let kv = db.cf_handle("meta").unwrap();
            db.put_cf(kv, b"mine", b"kept").unwrap();
        }
        let wal = dir.path().join("elsewhere");
        let opened = open(dir.path(), Some(&wal)).unwrap();
        let log_cf = opened.log.cf_handle(LOG_COLUMN_FAMILIES[0]).unwrap();
        assert_eq!(
            opened
                .log
                .get_cf(log_cf, 1u64.to_be_bytes())
                .unwrap()
                .as_deref(),
            Some(&b"entry"[..])
        );
        assert!(opened.store.cf_handle(LOG_COLUMN_FAMILIES[0]).is_none());
        let meta = opened.store.cf_handle("meta").unwrap();
        assert_eq!(
            opened.store.get_cf(meta, b"mine").unwrap().as_deref(),
            Some(&b"kept"[..])
        );
        drop(opened);
        // Reopened: nothing left to move, and the log is where it went.
        let again = open(dir.path(), Some(&wal)).unwrap();
        let log_cf = again.log.cf_handle(LOG_COLUMN_FAMILIES[0]).unwrap();
        assert!(again
            .log
            .get_cf(log_cf, 1u64.to_be_bytes())
            .unwrap()
            .is_some());
    }

    #[test]
    fn a_crash_between_the_two_drops_of_the_move_leaves_a_member_that_starts_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("wal");
        {
            let mut db =
                store::open_database(&store_path(dir.path()), LOG_COLUMN_FAMILIES).unwrap();
            let log_cf = db.cf_handle(LOG_COLUMN_FAMILIES[0]).unwrap();
            db.put_cf(log_cf, 1u64.to_be_bytes(), b"entry").unwrap();
            let state_cf = db.cf_handle(LOG_COLUMN_FAMILIES[1]).unwrap();
            db.put_cf(state_cf, b"vote", b"term 3").unwrap();
            // The move as `open` makes it, and the first of its two drops; then the
            // process dies (each drop is a synced MANIFEST edit of its own).
            let log = log_db::open_log_database(&wal).unwrap();
            log_db::move_log(&db, &log).unwrap();
            std::sync::Arc::get_mut(&mut db)
                .unwrap()
                .drop_cf(LOG_COLUMN_FAMILIES[0])
                .unwrap();
        }
        let opened = open(dir.path(), None).unwrap();
        let log_cf = opened.log.cf_handle(LOG_COLUMN_FAMILIES[0]).unwrap();
        let state_cf = opened.log.cf_handle(LOG_COLUMN_FAMILIES[1]).unwrap();
        assert_eq!(
            opened
                .log
                .get_cf(log_cf, 1u64.to_be_bytes())
                .unwrap()
                .as_deref(),
            Some(&b"entry"[..])
        );
        assert_eq!(
            opened.log.get_cf(state_cf, b"vote").unwrap().as_deref(),
            Some(&b"term 3"[..])
        );
        for name in LOG_COLUMN_FAMILIES {
            assert!(
                opened.store.cf_handle(name).is_none(),
                "{name} is still in the store"
            );
        }
    }
}
