//! The raft log and raft's durable state, in two column families of the node's RocksDB.
//!
//! This module owns the `raft_log` column family (entries keyed by big-endian index, so
//! RocksDB's byte order is log order) and `raft_state` (vote, committed log id, last
//! purged log id). It must never touch the server's column families, and it must never
//! acknowledge an append or a vote before the bytes are fsynced: a node that crashes
//! restarts to a prefix of what it acknowledged.
//!
//! Every write goes through [`crate::log_writer`], in order: appends, the committed log
//! id and purges are queued and the core goes on (appended entries are readable from
//! the in-memory tail at once); appends are reported flushed only after the WAL's fsync,
//! one fsync for every append that queued up meanwhile. Votes and truncations wait for
//! their own synced write. So openraft's core, which sends the heartbeats, never waits
//! for the disk while it leads.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader};
use rocksdb::{ColumnFamily, Direction, IteratorMode, WriteBatch, WriteOptions, DB};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec;
use crate::log_tail::{LogTail, DEFAULT_TAIL_BYTES};
use crate::log_writer::{self, Done, LogWrite, LogWriter};
use crate::types::{Entry, LogId, TypeConfig, Vote};

/// Column family holding log entries, keyed by big-endian index.
pub const CF_RAFT_LOG: &str = "raft_log";
/// Column family holding the vote, the committed log id and the last purged log id.
pub const CF_RAFT_STATE: &str = "raft_state";
/// The column families [`LogStore`] needs; the server creates them when it opens the DB.
pub const LOG_COLUMN_FAMILIES: &[&str] = &[CF_RAFT_LOG, CF_RAFT_STATE];

const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// openraft's log storage on a RocksDB shared with the server. Cloning is cheap: clones
/// share the DB, which is how the log reader handed to replication tasks is made.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
    writer: LogWriter,
    /// The newest entries and those not yet written, shared with every reader clone
    /// and with the writer (see [`crate::log_tail`]).
    tail: Arc<Mutex<LogTail>>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").finish_non_exhaustive()
    }
}

impl LogStore {
    /// Wraps `db`, which must have been opened with [`LOG_COLUMN_FAMILIES`], and writes
    /// it on a dedicated thread.
    pub fn new(db: Arc<DB>) -> Result<Self, io::Error> {
        Self::with_writer(db, LogWriter::spawn)
    }

    /// Wraps `db` and writes it on the caller's task, for deterministic simulation
    /// (where a thread would escape the simulator's control of time and order).
    pub fn inline(db: Arc<DB>) -> Result<Self, io::Error> {
        Self::with_writer(db, |db, tail| Ok(LogWriter::inline(db, tail)))
    }

    fn with_writer(
        db: Arc<DB>,
        start_writer: impl FnOnce(&Arc<DB>, &Arc<Mutex<LogTail>>) -> io::Result<LogWriter>,
    ) -> Result<Self, io::Error> {
        for name in LOG_COLUMN_FAMILIES {
            if db.cf_handle(name).is_none() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("RocksDB column family {name:?} is missing; open the DB with LOG_COLUMN_FAMILIES"),
                ));
            }
        }
        let tail = Arc::new(Mutex::new(LogTail::new(DEFAULT_TAIL_BYTES)));
        let writer = start_writer(&db, &tail)?;
        Ok(Self { db, writer, tail })
    }

    fn cf(&self, name: &'static str) -> Result<&ColumnFamily, io::Error> {
        // Checked in `new`; a column family cannot be dropped while we hold the DB, but a
        // missing handle is still an error, not a panic.
        self.db.cf_handle(name).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("column family {name:?} missing"),
            )
        })
    }

    fn get_state<T: DeserializeOwned>(
        &self,
        key: &'static [u8],
        what: &'static str,
    ) -> Result<Option<T>, io::Error> {
        let cf = self.cf(CF_RAFT_STATE)?;
        match self.db.get_pinned_cf(cf, key).map_err(rocks_err)? {
            None => Ok(None),
            Some(bytes) => Ok(Some(codec::decode(what, &bytes)?)),
        }
    }

    fn state_batch<T: Serialize>(
        &self,
        key: &'static [u8],
        what: &'static str,
        value: &T,
    ) -> Result<WriteBatch, io::Error> {
        let cf = self.cf(CF_RAFT_STATE)?;
        let bytes = codec::encode(what, value)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(cf, key, bytes);
        Ok(batch)
    }

    fn tail(&self) -> MutexGuard<'_, LogTail> {
        log_writer::lock(&self.tail)
    }

    /// Queues `batch` after every write before it; nobody waits for it.
    fn queue(&self, batch: WriteBatch) {
        self.writer.submit(LogWrite {
            batch,
            sync: false,
            appended: None,
            done: Done::Nobody,
        });
    }

    /// Waits until every write queued so far is in RocksDB, so that reading RocksDB
    /// sees them (the reads at raft's start).
    async fn drain(&self) -> Result<(), io::Error> {
        self.writer
            .write_and_wait(WriteBatch::default(), false)
            .await
    }

    fn last_entry_log_id(&self) -> Result<Option<LogId>, io::Error> {
        let cf = self.cf(CF_RAFT_LOG)?;
        match self.db.iterator_cf(cf, IteratorMode::End).next() {
            None => Ok(None),
            Some(item) => {
                let (key, value) = item.map_err(rocks_err)?;
                let entry = decode_entry(&key, &value)?;
                Ok(Some(entry.log_id()))
            }
        }
    }
}

impl LogStore {
    /// `--force-new-cluster`'s rewrite of the log (see [`crate::force`]), in one synced
    /// write, before raft starts: every entry after `keep_through` goes, `entry` (if any)
    /// is appended, and `vote` and `committed` (if given) are saved. A crash leaves
    /// either the old log or the new one.
    pub(crate) fn rewrite_before_start(
        &mut self,
        keep_through: u64,
        entry: Option<&Entry>,
        vote: Option<&Vote>,
        committed: Option<&LogId>,
    ) -> Result<(), io::Error> {
        let log_cf = self.cf(CF_RAFT_LOG)?;
        let state_cf = self.cf(CF_RAFT_STATE)?;
        let from = keep_through.saturating_add(1);
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(log_cf, &index_key(from)[..], END_OF_LOG_KEY);
        if let Some(entry) = entry {
            batch.put_cf(
                log_cf,
                index_key(entry.index()),
                codec::encode("log entry", entry)?,
            );
        }
        if let Some(vote) = vote {
            batch.put_cf(state_cf, KEY_VOTE, codec::encode("vote", vote)?);
        }
        if let Some(committed) = committed {
            // Stored as `save_committed` stores it: an `Option`.
            let committed = Some(*committed);
            batch.put_cf(
                state_cf,
                KEY_COMMITTED,
                codec::encode("committed log id", &committed)?,
            );
        }
        self.write_synced(batch)?;
        let mut tail = self.tail();
        tail.truncate_from(from);
        if let Some(entry) = entry {
            let written = tail.append(std::slice::from_ref(entry));
            tail.written_through(written);
        }
        Ok(())
    }

    /// Starts an empty log after `applied`, as if a snapshot through it had been
    /// installed: for a state machine filled before raft ever ran (a member converted
    /// from etcd's data dir, whose log ids are etcd's). `applied` becomes the purged and
    /// the committed log id, `pending` (uncommitted entries, from `applied`'s next index
    /// on) the log, and `vote` the vote, in one synced write, before raft starts. The
    /// state machine must already record `applied` and its membership.
    pub fn start_after(
        &mut self,
        applied: &LogId,
        pending: &[Entry],
        vote: &Vote,
    ) -> Result<(), io::Error> {
        if self.last_entry_log_id()?.is_some() {
            return Err(io::Error::other("the raft log is not empty"));
        }
        let log_cf = self.cf(CF_RAFT_LOG)?;
        let state_cf = self.cf(CF_RAFT_STATE)?;
        let mut batch = WriteBatch::default();
        let mut next = applied.index().saturating_add(1);
        for entry in pending {
            if entry.index() != next {
                return Err(io::Error::other(format!(
                    "entry {} does not follow {}",
                    entry.index(),
                    next.saturating_sub(1)
                )));
            }
            batch.put_cf(log_cf, index_key(next), codec::encode("log entry", entry)?);
            next = next.saturating_add(1);
        }
        batch.put_cf(
            state_cf,
            KEY_LAST_PURGED,
            codec::encode("last purged log id", applied)?,
        );
        batch.put_cf(
            state_cf,
            KEY_COMMITTED,
            codec::encode("committed log id", &Some(*applied))?,
        );
        batch.put_cf(state_cf, KEY_VOTE, codec::encode("vote", vote)?);
        self.write_synced(batch)
    }

    /// One synced write, before raft starts (raft's own writes go through the writer).
    fn write_synced(&self, batch: WriteBatch) -> Result<(), io::Error> {
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db.write_opt(batch, &opts).map_err(rocks_err)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => match i.checked_add(1) {
                Some(i) => i,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => 0,
        };
        // `None` means no upper bound.
        let end_exclusive = match range.end_bound() {
            Bound::Included(i) => i.checked_add(1),
            Bound::Excluded(i) => Some(*i),
            Bound::Unbounded => None,
        };
        if end_exclusive.is_some_and(|end| end <= start) {
            return Ok(Vec::new());
        }

        // The tail first: what it holds may not be in RocksDB yet, and what comes before
        // it is (an entry leaves the tail only once written).
        let from_tail = self.tail().get(start, end_exclusive);
        let end_exclusive = match (from_tail.first, end_exclusive) {
            (Some(first), Some(end)) => Some(first.min(end)),
            (Some(first), None) => Some(first),
            (None, end) => end,
        };
        if end_exclusive.is_some_and(|end| end <= start) {
            return Ok(from_tail.entries);
        }
        let mut entries = self.read_written(start, end_exclusive)?;
        if let (Some(last), Some(next)) = (entries.last(), from_tail.entries.first()) {
            if last.index().checked_add(1) != Some(next.index()) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "raft log has a hole: RocksDB ends at index {} and the tail starts at {}",
                        last.index(),
                        next.index()
                    ),
                ));
            }
        }
        entries.extend(from_tail.entries);
        Ok(entries)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        // No drain: replication reads the vote around every read of entries, and a vote
        // is in RocksDB before `save_vote` returns.
        self.get_state(KEY_VOTE, "vote")
    }
}

impl LogStore {
    /// Entries of `[start, end_exclusive)` from RocksDB, where every one of them is
    /// written: contiguous, or the log is corrupt.
    fn read_written(
        &self,
        start: u64,
        end_exclusive: Option<u64>,
    ) -> Result<Vec<Entry>, io::Error> {
        let cf = self.cf(CF_RAFT_LOG)?;
        let from = index_key(start);
        // A RocksDB iterator reads one implicit snapshot, so the result is atomic.
        let iter = self
            .db
            .iterator_cf(cf, IteratorMode::From(&from, Direction::Forward));
        let mut entries = Vec::with_capacity(
            end_exclusive
                .map_or(0, |end| usize::try_from(end - start).unwrap_or(0))
                .min(1024),
        );
        let mut expected: Option<u64> = None;
        for item in iter {
            let (key, value) = item.map_err(rocks_err)?;
            let index = key_index(&key)?;
            if end_exclusive.is_some_and(|end| index >= end) {
                break;
            }
            // Only the front (purged) and the tail (not yet appended) may be missing; a
            // gap inside the range means the log is corrupt.
            if let Some(want) = expected {
                if index != want {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("raft log has a hole: expected index {want}, found {index}"),
                    ));
                }
            }
            let entry = decode_entry(&key, &value)?;
            entries.push(entry);
            expected = index.checked_add(1);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        self.drain().await?;
        let last_purged_log_id: Option<LogId> =
            self.get_state(KEY_LAST_PURGED, "last purged log id")?;
        let last_log_id = self.last_entry_log_id()?.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        // A vote granted and then forgotten by a crash could elect two leaders in a term.
        let batch = self.state_batch(KEY_VOTE, "vote", vote)?;
        #[cfg(feature = "planted-bugs")]
        if crate::planted::is_planted(crate::planted::RaftBug::VoteWithoutSync) {
            return self.writer.write_and_wait(batch, false).await;
        }
        self.writer.write_and_wait(batch, true).await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        // Unsynced on purpose: this is called on every commit advance, and a committed id
        // that reverts in a crash only means re-learning it from the leader (see
        // `enable_leader_restore` in config.rs).
        let batch = self.state_batch(KEY_COMMITTED, "committed log id", &committed)?;
        self.queue(batch);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        self.drain().await?;
        Ok(self
            .get_state::<Option<LogId>>(KEY_COMMITTED, "committed log id")?
            .flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let cf = self.cf(CF_RAFT_LOG)?;
        let mut batch = WriteBatch::default();
        let entries: Vec<Entry> = entries.into_iter().collect();
        for entry in &entries {
            let value = codec::encode("log entry", entry)?;
            batch.put_cf(cf, index_key(entry.index()), value);
        }
        // Readable from the tail at once; written and synced by the writer, which
        // completes the callback only after the sync: openraft counts the entries then.
        let appended = (!entries.is_empty()).then(|| self.tail().append(&entries));
        tracing::trace!(entries = entries.len(), "raft log append queued");
        #[cfg(feature = "planted-bugs")]
        if crate::planted::is_planted(crate::planted::RaftBug::LogAcksBeforeSync) {
            callback.io_completed(Ok(()));
            self.writer.submit(LogWrite {
                batch,
                sync: false,
                appended,
                done: Done::Nobody,
            });
            return Ok(());
        }
        #[cfg(feature = "planted-bugs")]
        if crate::planted::is_planted(crate::planted::RaftBug::AppendWaitsForDisk) {
            self.writer.write_and_wait(batch, false).await?;
            self.writer.submit(LogWrite {
                batch: WriteBatch::default(),
                sync: true,
                appended,
                done: Done::Flushed(callback),
            });
            return Ok(());
        }
        self.writer.submit(LogWrite {
            batch,
            sync: true,
            appended,
            done: Done::Flushed(callback),
        });
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = match &last_log_id {
            Some(log_id) => log_id.index().saturating_add(1),
            None => 0,
        };
        tracing::debug!(from_index = from, "raft log truncate");
        let cf = self.cf(CF_RAFT_LOG)?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(cf, &index_key(from)[..], END_OF_LOG_KEY);
        // Rare (only on a leader change with conflicting entries), so sync it and wait:
        // no conflicting entry reappears after a crash even if no append follows, and
        // none is read back from RocksDB once the tail no longer holds it.
        self.tail().truncate_from(from);
        self.writer.write_and_wait(batch, true).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        tracing::debug!(upto_index = log_id.index(), "raft log purge");
        let log_cf = self.cf(CF_RAFT_LOG)?;
        let state_cf = self.cf(CF_RAFT_STATE)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(
            state_cf,
            KEY_LAST_PURGED,
            codec::encode("last purged log id", &log_id)?,
        );
        batch.delete_range_cf(
            log_cf,
            index_key(0),
            index_key(log_id.index().saturating_add(1)),
        );
        // Unsynced: purged entries are already in a snapshot; if a crash undoes the purge
        // (atomically, it is one batch) they are simply purged again. Queued after any
        // append of what it purges, so RocksDB never keeps an entry it purged.
        self.tail().purge_upto(log_id.index());
        self.queue(batch);
        Ok(())
    }
}

/// A key past every 8-byte index key, as the exclusive end of "everything after".
const END_OF_LOG_KEY: &[u8] = &[0xff; 9];

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn key_index(key: &[u8]) -> Result<u64, io::Error> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("raft log key of {} bytes, want 8", key.len()),
        )
    })?;
    Ok(u64::from_be_bytes(bytes))
}

fn decode_entry(key: &[u8], value: &[u8]) -> Result<Entry, io::Error> {
    let index = key_index(key)?;
    let entry: Entry = codec::decode("log entry", value)?;
    if entry.index() != index {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "raft log entry under key {index} has index {}",
                entry.index()
            ),
        ));
    }
    Ok(entry)
}

fn rocks_err(e: rocksdb::Error) -> io::Error {
    io::Error::other(e)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use openraft::testing::log_id;
    use openraft::type_config::TypeConfigExt;
    use rocksdb::Options;

    use super::*;
    use crate::types::Command;

    fn open(dir: &std::path::Path) -> Arc<DB> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        Arc::new(DB::open_cf(&opts, dir, LOG_COLUMN_FAMILIES).unwrap())
    }

    fn entry(term: u64, index: u64) -> Entry {
        Entry::new_normal(
            log_id::<TypeConfig>(term, 1, index),
            Command(Bytes::from(format!("cmd-{index}"))),
        )
    }

    async fn append(store: &mut LogStore, entries: Vec<Entry>) {
        let (tx, rx) = TypeConfig::oneshot();
        store.append(entries, IOFlushed::signal(tx)).await.unwrap();
        rx.await.unwrap().unwrap();
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.index()).collect()
    }

    #[test]
    fn new_requires_column_families() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = Options::default();
        opts.create_if_missing(true);
        let db = Arc::new(DB::open(&opts, dir.path()).unwrap());
        let err = LogStore::new(db).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn append_read_truncate_purge() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::new(open(dir.path())).unwrap();

        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, None);
        assert_eq!(state.last_purged_log_id, None);

        append(&mut store, (1..=10).map(|i| entry(1, i)).collect()).await;
        let got = store.try_get_log_entries(3..6).await.unwrap();
        assert_eq!(indexes(&got), vec![3, 4, 5]);
        assert_eq!(got[0], entry(1, 3));
        assert_eq!(
            indexes(&store.try_get_log_entries(8..).await.unwrap()),
            vec![8, 9, 10]
        );
        assert_eq!(
            indexes(&store.try_get_log_entries(..=2).await.unwrap()),
            vec![1, 2]
        );
        assert!(store.try_get_log_entries(20..30).await.unwrap().is_empty());
        assert!(store.try_get_log_entries(5..5).await.unwrap().is_empty());
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(log_id::<TypeConfig>(1, 1, 10))
        );

        // A new leader overwrites the tail.
        store
            .truncate_after(Some(log_id::<TypeConfig>(1, 1, 6)))
            .await
            .unwrap();
        assert_eq!(
            indexes(&store.try_get_log_entries(..).await.unwrap()),
            vec![1, 2, 3, 4, 5, 6]
        );
        append(&mut store, vec![entry(2, 7), entry(2, 8)]).await;
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(log_id::<TypeConfig>(2, 1, 8)));

        store.purge(log_id::<TypeConfig>(1, 1, 4)).await.unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(
            state.last_purged_log_id,
            Some(log_id::<TypeConfig>(1, 1, 4))
        );
        assert_eq!(state.last_log_id, Some(log_id::<TypeConfig>(2, 1, 8)));
        assert_eq!(
            indexes(&store.try_get_log_entries(0..100).await.unwrap()),
            vec![5, 6, 7, 8]
        );

        // Purging everything leaves the purged id as the last log id.
        store.purge(log_id::<TypeConfig>(2, 1, 8)).await.unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(log_id::<TypeConfig>(2, 1, 8)));
        assert!(store.try_get_log_entries(..).await.unwrap().is_empty());

        store.truncate_after(None).await.unwrap();
    }

    #[tokio::test]
    async fn vote_and_committed_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::new(open(dir.path())).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), None);
        assert_eq!(store.read_committed().await.unwrap(), None);

        let vote = Vote::new(3, 2);
        store.save_vote(&vote).await.unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(vote));
        let committed = Vote::new_committed(4, 2);
        store.save_vote(&committed).await.unwrap();
        assert_eq!(
            store.get_log_reader().await.read_vote().await.unwrap(),
            Some(committed)
        );

        store
            .save_committed(Some(log_id::<TypeConfig>(4, 2, 9)))
            .await
            .unwrap();
        assert_eq!(
            store.read_committed().await.unwrap(),
            Some(log_id::<TypeConfig>(4, 2, 9))
        );
        store.save_committed(None).await.unwrap();
        assert_eq!(store.read_committed().await.unwrap(), None);
    }

    #[tokio::test]
    async fn state_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut store = LogStore::new(open(dir.path())).unwrap();
            append(&mut store, (1..=5).map(|i| entry(1, i)).collect()).await;
            store.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
            store
                .save_committed(Some(log_id::<TypeConfig>(1, 1, 4)))
                .await
                .unwrap();
            store.purge(log_id::<TypeConfig>(1, 1, 2)).await.unwrap();
        }
        let mut store = LogStore::new(open(dir.path())).unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(
            state.last_purged_log_id,
            Some(log_id::<TypeConfig>(1, 1, 2))
        );
        assert_eq!(state.last_log_id, Some(log_id::<TypeConfig>(1, 1, 5)));
        assert_eq!(
            store.read_vote().await.unwrap(),
            Some(Vote::new_committed(1, 1))
        );
        assert_eq!(
            store.read_committed().await.unwrap(),
            Some(log_id::<TypeConfig>(1, 1, 4))
        );
        let got = store.try_get_log_entries(..).await.unwrap();
        assert_eq!(indexes(&got), vec![3, 4, 5]);
        assert_eq!(got[2], entry(1, 5));
    }

    #[tokio::test]
    async fn hole_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::new(open(dir.path())).unwrap();
        append(&mut store, vec![entry(1, 1), entry(1, 2), entry(1, 4)]).await;
        let err = store.try_get_log_entries(1..5).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
