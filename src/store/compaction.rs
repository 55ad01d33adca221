//! Physical compaction: deleting the versions and history that a compaction made
//! unreachable, in the background, a step at a time.
//!
//! Logical compaction (refusing reads below the compacted revision) happens when the
//! Compact command is applied; the apply path then only wakes this module's worker
//! ([`run`]), as etcd schedules its compaction, so no write waits for the deletions.
//! A pass removes, for every key changed since the last physical compaction, each
//! version older than the one live at the compacted revision (and that one too when it
//! is a deletion), together with its `history` entry. It reads only the history since
//! the last pass, in order: each change's entry names the version it replaced
//! (`Replaced`), which goes without a read, and a deletion takes its own version. Only
//! entries that do not say (written before they did, or by a delete of a range) make
//! the pass look their key's versions up: random reads of old `kv` and `history`
//! blocks, most of a member's compaction CPU once the store outgrew the block cache
//! (docs/benchmarks.md, issue 20's twelfth step). The history thus keeps one entry
//! per stored version, in revision order: etcd's `key` bucket, which a snapshot export
//! walks. One exception: the compacted revision's own events stay even when their
//! version goes (a deletion), so that a watch may start there, as in etcd; the next
//! compaction removes them.
//!
//! A pass works in steps of [`KEYS_PER_STEP`] keys with a pause between them (etcd's
//! 1 000 keys and 10 ms), each step under the store's read gate so that no snapshot
//! install runs meanwhile; a pass that sees an install happen gives up and the next
//! starts from the installed store's own progress. It is idempotent and resumable: a
//! step deletes versions with their history entries, and the progress marker moves
//! last, so a crash only repeats work. It must never delete anything a read at or above
//! the compacted revision can see, and reads above it never depend on its progress
//! (`HashKV` included: see `hash.rs`).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rocksdb::{ReadOptions, WriteBatch};

use super::encoding::{
    after_all_versions, escape_key, history_key, split_history_key, split_version_key, version_key,
    HistoryEntry, Replaced, StoredVersion,
};
use super::{meta, RevisionStore, StoreError, CF_HISTORY, CF_KV};
use crate::offload::Offload;

/// Changes a step handles: etcd's compaction batch.
const CHANGES_PER_STEP: usize = 1000;

/// The pause between two steps, in which writes and reads have the store to themselves
/// (etcd 3.4's 10 ms).
const PAUSE_BETWEEN_STEPS: Duration = Duration::from_millis(10);

/// How long the worker waits before trying again after a step failed.
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(1);

/// One physical compaction, from where the last one ended to the compacted revision.
pub struct CompactionPass {
    from: i64,
    to: i64,
    /// The history key the next step starts at.
    next: Vec<u8>,
    /// The store's install count when the pass started.
    installs: u64,
    /// When the pass started (etcd's compaction total duration).
    started: std::time::Instant,
}

impl RevisionStore {
    /// The pass that brings physical compaction up to the compacted revision, or `None`
    /// when it is there already.
    pub fn compaction_pass(&self) -> Result<Option<CompactionPass>, StoreError> {
        let installs = self.installs.load(Ordering::Acquire);
        let from = meta::read_physically_compacted(self)?;
        #[allow(unused_mut)]
        let mut to = self.compacted_revision()?;
        #[cfg(feature = "planted-bugs")]
        if crate::planted::is_planted(crate::planted::PlantedBug::CompactionOvershoots) {
            to = self.current_revision()?;
        }
        Ok((to > from).then(|| CompactionPass {
            from,
            to,
            next: history_key(from + 1, 0).to_vec(),
            installs,
            started: std::time::Instant::now(),
        }))
    }

    /// Runs passes until physical compaction has caught up, here and now (a member
    /// restoring a backup, and tests).
    pub fn finish_compaction(&self) -> Result<(), StoreError> {
        while let Some(mut pass) = self.compaction_pass()? {
            while !pass.step(self)? {}
        }
        Ok(())
    }

    /// Wakes the worker: a compaction was applied, or an install replaced the store.
    pub(super) fn schedule_compaction(&self) {
        self.compaction_wake.notify_one();
    }

    /// How far physical compaction has gone.
    pub fn physically_compacted(&self) -> i64 {
        *self.physically_compacted.borrow()
    }

    /// Waits until physical compaction has reached `revision` (etcd's `physical`
    /// Compact, which returns once the deletions are done on the member it asked).
    pub async fn wait_physically_compacted(&self, revision: i64) {
        let mut done = self.physically_compacted.subscribe();
        // The sender lives as long as the store, which the caller holds.
        let _ = done.wait_for(|reached| *reached >= revision).await;
    }
}

impl CompactionPass {
    /// Deletes what the next [`CHANGES_PER_STEP`] changes in the pass's range made
    /// unreachable, and answers whether the pass is over: done (the progress marker
    /// moved to its end), or given up because a snapshot install replaced the store.
    pub fn step(&mut self, store: &RevisionStore) -> Result<bool, StoreError> {
        if store.installs.load(Ordering::Acquire) != self.installs {
            return Ok(true);
        }
        let step_started = std::time::Instant::now();
        let history = store.cf(CF_HISTORY)?;
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(history_key(self.to + 1, 0).to_vec());
        let mut it = store.db.raw_iterator_cf_opt(history, opts);
        it.seek(&self.next);
        let mut batch = WriteBatch::default();
        let mut deleted_bytes = 0u64;
        // Keys with a change whose entry does not name the version it replaced.
        let mut looked_up = BTreeSet::new();
        let mut changes = 0;
        while changes < CHANGES_PER_STEP {
            let (Some(raw_key), Some(raw)) = (it.key(), it.value()) else {
                break;
            };
            let entry = HistoryEntry::decode(raw)?;
            let held = (raw_key.len() + raw.len()) as u64;
            deleted_bytes += drop_replaced(store, &mut batch, raw_key, &entry, held, self.to)?;
            if entry.replaced == Replaced::Unknown {
                looked_up.insert(entry.key);
            }
            changes += 1;
            it.next();
        }
        it.status()?;
        let rest = it.key().map(<[u8]>::to_vec);
        drop(it);
        deleted_bytes += drop_old_versions(store, &mut batch, &looked_up, self.to)?;
        store.db.write(batch)?;
        store.note_reclaimable(deleted_bytes);
        // Each change made the version it replaced unreachable: one key deleted.
        super::metrics::compaction_step(changes as u64, step_started.elapsed());
        match rest {
            Some(next) => {
                self.next = next;
                Ok(false)
            }
            None => {
                let mut batch = WriteBatch::default();
                if self.from > 0 {
                    drop_orphan_events(store, &mut batch, self.from)?;
                }
                meta::stage_physically_compacted(store, &mut batch, self.to)?;
                store.db.write(batch)?;
                store.physically_compacted.send_replace(self.to);
                super::metrics::compaction_finished(self.started.elapsed());
                tracing::debug!(from = self.from, to = self.to, "physical compaction done");
                Ok(true)
            }
        }
    }
}

/// The worker: runs physical compaction whenever the store is behind, for as long as
/// the member runs.
pub async fn run(store: Arc<RevisionStore>, offload: Offload) {
    loop {
        match catch_up(&store, offload).await {
            Ok(()) => store.compaction_wake.notified().await,
            Err(error) => {
                tracing::warn!(%error, "physical compaction failed; trying again");
                tokio::time::sleep(RETRY_AFTER_ERROR).await;
            }
        }
    }
}

/// Why the worker could not finish a pass.
#[derive(Debug, thiserror::Error)]
enum WorkerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Offload(#[from] crate::offload::OffloadError),
}

async fn catch_up(store: &Arc<RevisionStore>, offload: Offload) -> Result<(), WorkerError> {
    // Two meta reads, no gate: a pass reads the install count first, so one that an
    // install overtakes gives up at its first step.
    while let Some(mut pass) = store.compaction_pass()? {
        loop {
            let gate = store.readable().await;
            let owned = store.clone();
            let (finished, returned) = offload.run(move || (pass.step(&owned), pass)).await?;
            drop(gate);
            pass = returned;
            if finished? {
                break;
            }
            tokio::time::sleep(PAUSE_BETWEEN_STEPS).await;
        }
    }
    Ok(())
}

/// Stages the deletions that one change makes possible without a read (`entry`, stored
/// under history key `raw_key` in `held` bytes): the version it replaced, with that
/// version's history entry, and when it is a deletion its own version (with its entry
/// below `to`: the compacted revision's own events stay, see the module doc). Answers
/// about how many bytes they held.
///
/// The replaced version is never one a read at or above `to` can see: the change
/// replaced it at a revision no later than `to`. Deleting what an earlier step or pass
/// deleted already writes a tombstone and nothing else.
fn drop_replaced(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    raw_key: &[u8],
    entry: &HistoryEntry,
    held: u64,
    to: i64,
) -> Result<u64, StoreError> {
    let replaced = match entry.replaced {
        Replaced::Version { written, bytes } => Some((written, bytes)),
        Replaced::Nothing | Replaced::Unknown => None,
    };
    if replaced.is_none() && !entry.deleted {
        return Ok(0);
    }
    let kv = store.cf(CF_KV)?;
    let history = store.cf(CF_HISTORY)?;
    let escaped = escape_key(&entry.key);
    let mut deleted_bytes = 0u64;
    if let Some((written, bytes)) = replaced {
        batch.delete_cf(kv, version_key(&escaped, written.main));
        batch.delete_cf(history, history_key(written.main, written.sub));
        deleted_bytes += u64::from(bytes);
    }
    if entry.deleted {
        let (revision, _) = split_history_key(raw_key)?;
        let version = version_key(&escaped, revision);
        // A tombstone's record is one byte.
        deleted_bytes += version.len() as u64 + 1;
        batch.delete_cf(kv, version);
        if revision < to {
            batch.delete_cf(history, raw_key);
            deleted_bytes += held;
        }
    }
    Ok(deleted_bytes)
}

/// Deletes, for each of `keys` (sorted: those of a step's changes that do not name the
/// version they replaced), the versions older than the one live at `to` (and that one
/// when it is a deletion), with their history entries. Answers how many bytes they held.
///
/// One iterator per column family serves the whole step (an iterator per key opened
/// every L0 file of `kv` again), and `kv`'s seeks read only the files whose filter has
/// the key: with random keys every L0 file of `kv` (up to 16 since the sixth step of
/// issue 20) covers the whole key space, and reading a block of each for every key was
/// most of a member's compaction CPU under sustained puts (docs/benchmarks.md, issue
/// 20's eighth step).
fn drop_old_versions(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    keys: &BTreeSet<Vec<u8>>,
    to: i64,
) -> Result<u64, StoreError> {
    let Some(last) = keys.last() else {
        return Ok(0);
    };
    let kv = store.cf(CF_KV)?;
    // Prefix seeks, the one `kv` iterator without total order: each seek consults the
    // files' filters of user keys and skips those without this key, and iteration ends
    // with the key's last version (see `with_owner_filter` in mod.rs).
    let mut opts = ReadOptions::default();
    opts.set_prefix_same_as_start(true);
    opts.set_iterate_upper_bound(after_all_versions(&escape_key(last)));
    let mut versions = store.db.raw_iterator_cf_opt(kv, opts);
    let mut events = EventFinder::new(store)?;
    let mut deleted_bytes = 0u64;
    for key in keys {
        let escaped = escape_key(key);
        versions.seek(version_key(&escaped, to));
        let mut live_at_to = true;
        while let (Some(raw), Some(value)) = (versions.key(), versions.value()) {
            let (owner, revision) = split_version_key(raw)?;
            if owner != escaped.as_slice() {
                break;
            }
            // The first entry is the version live at `to`: keep it unless it is a deletion.
            let keep = std::mem::take(&mut live_at_to) && !StoredVersion::is_tombstone(value);
            if !keep {
                deleted_bytes += (raw.len() + value.len()) as u64;
                batch.delete_cf(kv, raw);
                // The compacted revision's own events stay (see the module doc).
                if revision < to {
                    deleted_bytes += events.stage_removal(batch, revision, key)?;
                }
            }
            versions.next();
        }
        versions.status()?;
    }
    Ok(deleted_bytes)
}

/// Finds the history entries of deleted versions, through one `history` iterator for a
/// whole step.
///
/// Every stored version below the compacted revision has exactly one history entry
/// (one change per key per revision: etcd refuses a transaction that writes a key
/// twice), and a step deletes both in one batch. So a search stops at the entry it
/// finds, and never walks past its revision into entries deleted before, which a
/// reused iterator (with no bound at that revision) would have to skip one by one.
struct EventFinder<'a> {
    history: &'a rocksdb::ColumnFamily,
    it: rocksdb::DBRawIterator<'a>,
}

impl<'a> EventFinder<'a> {
    fn new(store: &'a RevisionStore) -> Result<Self, StoreError> {
        let history = store.cf(CF_HISTORY)?;
        let it = store.db.raw_iterator_cf(history);
        Ok(Self { history, it })
    }

    /// Stages the removal of `key`'s history entry at `revision`, and answers how many
    /// bytes it held.
    fn stage_removal(
        &mut self,
        batch: &mut WriteBatch,
        revision: i64,
        key: &[u8],
    ) -> Result<u64, StoreError> {
        self.it.seek(history_key(revision, 0));
        while let (Some(raw_key), Some(raw)) = (self.it.key(), self.it.value()) {
            if split_history_key(raw_key)?.0 != revision {
                break;
            }
            if HistoryEntry::decode(raw)?.key == key {
                batch.delete_cf(self.history, raw_key);
                return Ok((raw_key.len() + raw.len()) as u64);
            }
            self.it.next();
        }
        self.it.status()?;
        Ok(0)
    }
}

/// Stages the removal of the events the previous compaction (to `revision`) kept for
/// watches although their versions went: deletions at that revision.
fn drop_orphan_events(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    revision: i64,
) -> Result<(), StoreError> {
    let history = store.cf(CF_HISTORY)?;
    let kv = store.cf(CF_KV)?;
    let mut opts = ReadOptions::default();
    opts.set_iterate_upper_bound(history_key(revision + 1, 0).to_vec());
    let mut it = store.db.raw_iterator_cf_opt(history, opts);
    it.seek(history_key(revision, 0));
    while let (Some(raw_key), Some(raw)) = (it.key(), it.value()) {
        let entry = HistoryEntry::decode(raw)?;
        let version = version_key(&escape_key(&entry.key), revision);
        if store.db.get_pinned_cf(kv, version)?.is_none() {
            batch.delete_cf(history, raw_key);
        }
        it.next();
    }
    it.status()?;
    Ok(())
}
