//! The format version of a member's databases: which layout of keys and values wrote
//! them, so that a build never misreads a data dir another build wrote.
//!
//! Each database (the store's, `<data-dir>/db`, and the raft log's, `--wal-dir`)
//! records the format it is in under [`FORMAT_KEY`] of RocksDB's `default` column
//! family, which holds nothing else and which no snapshot carries: a snapshot moves
//! data between members, never a member's format. A database without the key is
//! format 1, the layout of v0.1.0, the first release, which recorded none.
//!
//! This module owns reading the format (without changing anything: [`recorded`] opens
//! read-only), refusing a format newer than this build reads, and the steps between
//! formats, up and down ([`migrate`]). Every step changes one database in one synced
//! write that also records the format it leads to, so a power cut leaves either format,
//! and running a step again changes nothing. It never interprets the data of a format;
//! a step that must rewrite data calls the module that owns it.

use std::path::{Path, PathBuf};

use rocksdb::{Options, WriteBatch, WriteOptions, DB};

/// The format this build writes.
pub const CURRENT: u32 = 2;

/// The oldest format this build reads (and migrates to [`CURRENT`] at startup).
pub const OLDEST: u32 = 1;

/// Releases and the format each writes, oldest first: `quantykube migrate
/// --target-version` takes a release's `major.minor`. CHANGELOG.md lists them too.
pub const RELEASES: &[(&str, u32)] = &[("0.1", 1), ("0.2", 2)];

/// Where a database records its format: in the `default` column family.
pub const FORMAT_KEY: &[u8] = b"quantykube/format";

/// One of a member's two databases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Database {
    Store,
    Log,
}

impl Database {
    pub fn name(self) -> &'static str {
        match self {
            Database::Store => "store",
            Database::Log => "raft log",
        }
    }
}

/// Why a database's format cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error(
        "the {} database at {path} is in format {found}, written by a newer QuantyKube; \
         this build reads formats {OLDEST} to {CURRENT} and has not opened it: start the \
         newer build, or migrate the data dir back first with the newer build's \
         `quantykube migrate --target-version {}`",
        .database.name(),
        release_of(CURRENT).unwrap_or("?"),
        path = .path.display()
    )]
    Newer {
        database: Database,
        path: PathBuf,
        found: u32,
    },
    #[error("the {} database at {path} records an unreadable format: {detail}", .database.name(), path = .path.display())]
    Unreadable {
        database: Database,
        path: PathBuf,
        detail: String,
    },
    #[error("unknown target version {version}: this build knows {known}", known = known_releases())]
    UnknownTarget { version: String },
    #[error("rocksdb: {0}")]
    RocksDb(#[from] rocksdb::Error),
}

/// The release that writes `format`.
pub fn release_of(format: u32) -> Option<&'static str> {
    RELEASES
        .iter()
        .find(|(_, f)| *f == format)
        .map(|(release, _)| *release)
}

/// The format a release (`major.minor`, or `major.minor.patch`) writes.
pub fn format_of(release: &str) -> Result<u32, FormatError> {
    let major_minor = release.splitn(3, '.').take(2).collect::<Vec<_>>().join(".");
    RELEASES
        .iter()
        .find(|(r, _)| *r == major_minor)
        .map(|(_, f)| *f)
        .ok_or_else(|| FormatError::UnknownTarget {
            version: release.to_owned(),
        })
}

/// The format of a file or database that records none: v0.1.0's.
pub fn unrecorded() -> u32 {
    1
}

/// Why a file a newer build wrote is refused (the file's reader names the file).
pub fn newer_file(found: u32) -> String {
    format!(
        "written in format {found} by a newer QuantyKube; this build reads formats {OLDEST} \
         to {CURRENT}: start the newer build, or migrate the data dir back first with the \
         newer build's `quantykube migrate --target-version {}`",
        release_of(CURRENT).unwrap_or("?")
    )
}

/// The format recorded in an open database (1 when none is).
pub fn read(db: &DB) -> Result<u32, String> {
    match db.get(FORMAT_KEY).map_err(|e| e.to_string())? {
        None => Ok(unrecorded()),
        Some(raw) => <[u8; 4]>::try_from(raw.as_slice())
            .map(u32::from_be_bytes)
            .map_err(|_| format!("{} bytes where a format version takes 4", raw.len())),
    }
}

/// The format of the database at `path`, read without changing anything; `None` if
/// there is no database there yet.
pub fn recorded(database: Database, path: &Path) -> Result<Option<u32>, FormatError> {
    if !path.join("CURRENT").exists() {
        return Ok(None);
    }
    let unreadable = |detail: String| FormatError::Unreadable {
        database,
        path: path.to_path_buf(),
        detail,
    };
    let options = Options::default();
    let families = DB::list_cf(&options, path).map_err(|e| unreadable(e.to_string()))?;
    let db = DB::open_cf_for_read_only(&options, path, families, false)
        .map_err(|e| unreadable(e.to_string()))?;
    read(&db).map(Some).map_err(unreadable)
}

/// Refuses the database at `path` if a newer build wrote it. Call before opening it
/// for writing: opening alone would change its files.
pub fn refuse_newer(database: Database, path: &Path) -> Result<(), FormatError> {
    match recorded(database, path)? {
        Some(found) if found > CURRENT && !crate::planted_bug!(OpensNewerFormat) => {
            Err(FormatError::Newer {
                database,
                path: path.to_path_buf(),
                found,
            })
        }
        _ => Ok(()),
    }
}

/// Brings an open database from the format it records to `target`, one step at a
/// time, each step one synced write; returns the format it was in. Running it again
/// changes nothing.
pub fn migrate(database: Database, db: &DB, target: u32) -> Result<u32, FormatError> {
    let unreadable = |detail: String| FormatError::Unreadable {
        database,
        path: db.path().to_path_buf(),
        detail,
    };
    let found = read(db).map_err(unreadable)?;
    if found > CURRENT {
        return Err(FormatError::Newer {
            database,
            path: db.path().to_path_buf(),
            found,
        });
    }
    let mut format = found;
    while format != target {
        let next = if format < target {
            format + 1
        } else {
            format - 1
        };
        step(db, format, next)?;
        tracing::info!(
            database = database.name(),
            path = %db.path().display(),
            from = format,
            to = next,
            "migrated the database's format"
        );
        format = next;
    }
    Ok(found)
}

/// One step between adjacent formats, in one synced write with the format it leads to.
fn step(db: &DB, from: u32, to: u32) -> Result<(), FormatError> {
    let mut batch = WriteBatch::default();
    match (from, to) {
        // Format 2 differs from 1 only in recording itself: 1 records nothing.
        (1, 2) => batch.put(FORMAT_KEY, to.to_be_bytes()),
        (2, 1) => batch.delete(FORMAT_KEY),
        _ => unreachable_step(from, to)?,
    }
    let mut sync = WriteOptions::default();
    sync.set_sync(true);
    db.write_opt(batch, &sync)?;
    Ok(())
}

fn unreachable_step(from: u32, to: u32) -> Result<(), FormatError> {
    Err(FormatError::UnknownTarget {
        version: format!("(no step from format {from} to {to})"),
    })
}

/// The releases `--target-version` takes, for an error message.
fn known_releases() -> String {
    RELEASES
        .iter()
        .map(|(release, _)| *release)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database(dir: &Path) -> DB {
        let mut options = Options::default();
        options.create_if_missing(true);
        DB::open(&options, dir).unwrap()
    }

    #[test]
    fn an_unrecorded_format_is_v0_1s_and_migrates_up_and_down_idempotently() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(recorded(Database::Store, dir.path()).unwrap(), None);
        let db = database(dir.path());
        assert_eq!(read(&db).unwrap(), 1);
        assert_eq!(migrate(Database::Store, &db, CURRENT).unwrap(), 1);
        assert_eq!(read(&db).unwrap(), CURRENT);
        assert_eq!(
            migrate(Database::Store, &db, CURRENT).unwrap(),
            CURRENT,
            "again: nothing"
        );
        drop(db);
        assert_eq!(
            recorded(Database::Store, dir.path()).unwrap(),
            Some(CURRENT)
        );
        let db = database(dir.path());
        migrate(Database::Store, &db, 1).unwrap();
        assert_eq!(
            db.get(FORMAT_KEY).unwrap(),
            None,
            "format 1 records nothing"
        );
    }

    #[test]
    fn a_newer_format_is_refused_before_anything_opens_it_for_writing() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = database(dir.path());
            db.put(FORMAT_KEY, (CURRENT + 1).to_be_bytes()).unwrap();
        }
        let listing = |dir: &Path| {
            let mut names: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            names
        };
        let before = listing(dir.path());
        let refused = refuse_newer(Database::Log, dir.path()).unwrap_err();
        let text = refused.to_string();
        assert!(text.contains(&format!("format {}", CURRENT + 1)), "{text}");
        assert!(text.contains("raft log"), "{text}");
        assert!(
            text.contains("quantykube migrate --target-version 0.2"),
            "{text}"
        );
        assert_eq!(listing(dir.path()), before, "no file added or removed");
        let db = database(dir.path());
        assert!(matches!(
            migrate(Database::Log, &db, CURRENT),
            Err(FormatError::Newer { found, .. }) if found == CURRENT + 1
        ));
    }

    #[test]
    fn a_release_names_its_format() {
        assert_eq!(format_of("0.1").unwrap(), 1);
        assert_eq!(format_of("0.2.3").unwrap(), 2);
        assert!(matches!(
            format_of("9.9"),
            Err(FormatError::UnknownTarget { .. })
        ));
        assert_eq!(release_of(CURRENT), Some("0.2"));
        assert_eq!(RELEASES.last().map(|(_, f)| *f), Some(CURRENT));
        assert_eq!(RELEASES.first().map(|(_, f)| *f), Some(OLDEST));
    }
}
