//! The raft log's own RocksDB: where it lives, how it is tuned, and the move of a log
//! that an earlier build kept inside the server's database.
//!
//! The log has a database of its own (etcd's `--wal-dir`, by default `<data-dir>/wal`),
//! with its own WAL and memtable, so that nothing the server does to its data (flushes
//! for a raft snapshot, compactions of user keys, a defragmentation) rewrites log
//! entries about to be purged, and an fsync of the log waits for no user data. This
//! module owns only opening that database and the one-time move into it; it must never
//! touch the server's own column families.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rocksdb::{ColumnFamilyDescriptor, IteratorMode, Options, WriteBatch, WriteOptions, DB};

use crate::log_store::LOG_COLUMN_FAMILIES;

/// The log holds at most `--snapshot-count` entries (10 000 by default) plus the 5 000
/// kept for lagging followers: a few MiB. A memtable of 16 MiB holds several times that,
/// so a flush, which drops what a purge's range deletion covers, writes at most those
/// last entries to a table file. At 64 MiB the memtable was the largest single use of a
/// member's memory: 66 of 126 MiB of heap at the peak of loading 1 000 000 keys
/// (heaptrack; docs/benchmarks.md, issue 20).
const LOG_WRITE_BUFFER_BYTES: usize = 16 << 20;

/// The log's WAL files together, beyond which RocksDB flushes to let the oldest go: two
/// memtables' worth.
const MAX_TOTAL_WAL_BYTES: u64 = 2 * LOG_WRITE_BUFFER_BYTES as u64;

/// How many bytes of entries one write of the move carries.
const MOVE_BATCH_BYTES: usize = 4 << 20;

/// Opens (creating it if needed) the raft log's database at `path`, with
/// [`LOG_COLUMN_FAMILIES`].
pub fn open_log_database(path: &Path) -> io::Result<Arc<DB>> {
    // Its name must survive a power cut as surely as the entries RocksDB syncs in it.
    crate::durable::create_dir_all(path)?;
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // Log entries are read back rarely (a lagging follower) and deleted soon: not worth
    // compressing.
    opts.set_compression_type(rocksdb::DBCompressionType::None);
    opts.set_write_buffer_size(LOG_WRITE_BUFFER_BYTES);
    opts.set_max_write_buffer_number(2);
    // RocksDB keeps a WAL file until every family with writes in it has flushed. The
    // state family (vote, committed index) takes a few bytes at a time and never fills
    // its memtable, so without a bound every WAL file since the start stayed: 633 MiB
    // per member after 2 000 000 puts, all replayed at the next start. Past this size
    // RocksDB flushes the families holding the oldest file.
    opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
    // Each family gets these options itself: `DB::open_cf` would open them with
    // RocksDB's defaults (a 64 MiB memtable, LZ4), `opts` applying only database-wide.
    let families = LOG_COLUMN_FAMILIES
        .iter()
        .map(|name| ColumnFamilyDescriptor::new(*name, opts.clone()));
    let db = DB::open_cf_descriptors(&opts, path, families).map_err(io::Error::other)?;
    Ok(Arc::new(db))
}

/// The log column families `legacy` (a database that may predate the log's own) still
/// holds. [`move_log`] empties them into the log's database; the caller then drops them.
pub fn legacy_log_families(legacy_path: &Path) -> io::Result<Vec<&'static str>> {
    if !legacy_path.join("CURRENT").exists() {
        return Ok(Vec::new());
    }
    let present = DB::list_cf(&Options::default(), legacy_path).map_err(io::Error::other)?;
    Ok(LOG_COLUMN_FAMILIES
        .iter()
        .copied()
        .filter(|name| present.iter().any(|p| p == name))
        .collect())
}

/// Copies every log entry and raft's state (vote, committed, purged) from `legacy`'s
/// log column families into `log`, replacing whatever `log` held, and syncs it. Run
/// before raft starts; a crash midway leaves `legacy` untouched, so the move simply
/// runs again.
pub fn move_log(legacy: &DB, log: &DB) -> io::Result<u64> {
    let mut moved = 0;
    for name in LOG_COLUMN_FAMILIES {
        let (Some(from), Some(to)) = (legacy.cf_handle(name), log.cf_handle(name)) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("column family {name:?} missing for the log's move"),
            ));
        };
        let mut batch = WriteBatch::default();
        // Everything `log` held: a move interrupted by a crash left a partial copy.
        batch.delete_range_cf(to, [].as_slice(), [0xffu8; 16].as_slice());
        for item in legacy.iterator_cf(from, IteratorMode::Start) {
            let (key, value) = item.map_err(io::Error::other)?;
            batch.put_cf(to, key, value);
            moved += 1;
            if batch.size_in_bytes() >= MOVE_BATCH_BYTES {
                log.write(std::mem::take(&mut batch))
                    .map_err(io::Error::other)?;
            }
        }
        let mut synced = WriteOptions::default();
        synced.set_sync(true);
        log.write_opt(batch, &synced).map_err(io::Error::other)?;
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log_store::{CF_RAFT_LOG, CF_RAFT_STATE};

    #[test]
    fn the_move_copies_every_record_and_replaces_a_partial_copy() {
        let dir = tempfile::tempdir().unwrap();
        let legacy_path = dir.path().join("db");
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let legacy = DB::open_cf(&opts, &legacy_path, ["kv", CF_RAFT_LOG, CF_RAFT_STATE]).unwrap();
        let log_cf = legacy.cf_handle(CF_RAFT_LOG).unwrap();
        for index in 5u64..2_000 {
            legacy
                .put_cf(log_cf, index.to_be_bytes(), vec![7u8; 3_000])
                .unwrap();
        }
        let state_cf = legacy.cf_handle(CF_RAFT_STATE).unwrap();
        legacy.put_cf(state_cf, b"vote", b"v").unwrap();
        drop(legacy);
        assert_eq!(
            legacy_log_families(&legacy_path).unwrap(),
            vec![CF_RAFT_LOG, CF_RAFT_STATE]
        );

        let log = open_log_database(&dir.path().join("wal")).unwrap();
        // A stale entry from an interrupted move, past the legacy log's end.
        let stale = log.cf_handle(CF_RAFT_LOG).unwrap();
        log.put_cf(stale, 9_999u64.to_be_bytes(), b"stale").unwrap();
        let legacy = DB::open_cf(&opts, &legacy_path, ["kv", CF_RAFT_LOG, CF_RAFT_STATE]).unwrap();
        assert_eq!(move_log(&legacy, &log).unwrap(), 1_996);
        let to = log.cf_handle(CF_RAFT_LOG).unwrap();
        let keys: Vec<u64> = log
            .iterator_cf(to, IteratorMode::Start)
            .map(|item| u64::from_be_bytes(item.unwrap().0[..].try_into().unwrap()))
            .collect();
        assert_eq!(keys, (5u64..2_000).collect::<Vec<_>>());
        let state = log.cf_handle(CF_RAFT_STATE).unwrap();
        assert_eq!(
            log.get_cf(state, b"vote").unwrap().as_deref(),
            Some(&b"v"[..])
        );
    }

    /// The options RocksDB recorded for column family `family` in the newest OPTIONS
    /// file of `dir`, as `name=value` lines.
    fn recorded_family_options(dir: &Path, family: &str) -> Vec<String> {
        let newest = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                path.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("OPTIONS-")
            })
            .max()
            .unwrap();
        let text = std::fs::read_to_string(newest).unwrap();
        let header = format!("[CFOptions \"{family}\"]");
        text.lines()
            .skip_while(|line| line.trim() != header)
            .skip(1)
            .take_while(|line| !line.trim_start().starts_with('['))
            .map(|line| line.trim().to_owned())
            .collect()
    }

    #[test]
    fn every_log_family_is_opened_with_the_log_options() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        drop(open_log_database(&path).unwrap());
        for family in LOG_COLUMN_FAMILIES {
            let options = recorded_family_options(&path, family);
            let expected = [
                format!("write_buffer_size={LOG_WRITE_BUFFER_BYTES}"),
                "max_write_buffer_number=2".to_owned(),
                "compression=kNoCompression".to_owned(),
            ];
            for line in expected {
                assert!(
                    options.contains(&line),
                    "{family}: no {line} in {options:?}"
                );
            }
        }
    }

    /// Bytes of RocksDB WAL files (`*.log`) in `dir`.
    fn wal_bytes(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap())
            .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "log"))
            .map(|entry| entry.metadata().unwrap().len())
            .sum()
    }

    #[test]
    fn old_wal_files_go_although_the_state_family_never_fills_its_memtable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let log = open_log_database(&path).unwrap();
        // A few bytes of raft state first: its memtable then holds the oldest WAL file,
        // as a member's vote and committed index do.
        let state = log.cf_handle(CF_RAFT_STATE).unwrap();
        log.put_cf(state, b"committed", b"1").unwrap();
        let entries = log.cf_handle(CF_RAFT_LOG).unwrap();
        let written = 6 * MAX_TOTAL_WAL_BYTES;
        let entry = vec![7u8; 4_096];
        for index in 0..written / entry.len() as u64 {
            log.put_cf(entries, index.to_be_bytes(), &entry).unwrap();
        }
        // The flushes that let old files go run in the background.
        let bound = MAX_TOTAL_WAL_BYTES + 2 * LOG_WRITE_BUFFER_BYTES as u64;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while wal_bytes(&path) > bound && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let kept = wal_bytes(&path);
        assert!(
            kept <= bound,
            "{kept} bytes of WAL kept after writing {written}"
        );
        assert_eq!(
            log.get_cf(state, b"committed").unwrap().as_deref(),
            Some(&b"1"[..])
        );
    }

    #[test]
    fn a_database_without_log_families_or_no_database_has_nothing_to_move() {
        let dir = tempfile::tempdir().unwrap();
        assert!(legacy_log_families(&dir.path().join("none"))
            .unwrap()
            .is_empty());
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        drop(DB::open_cf(&opts, dir.path().join("db"), ["kv"]).unwrap());
        assert!(legacy_log_families(&dir.path().join("db"))
            .unwrap()
            .is_empty());
    }
}
