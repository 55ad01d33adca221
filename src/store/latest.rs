//! The `latest` column family's upkeep outside the apply path: filling it for a store
//! written before it existed, or from a snapshot file that did not carry it, and
//! clearing out the overwritten entries that crowded scans step over: a flush of its
//! memtable, or a compaction of the scanned range when they lie in files.
//!
//! The apply path keeps `latest` in step with `kv` in the same write batch
//! (`write.rs`); this module only rebuilds it from `kv` when the `meta` marker says it
//! was never built, and a rebuild must never run while commands are being applied.
//! Flushes and compactions change no data, and a read asks for them: it must never
//! wait for one. A compaction runs on the upkeep worker (`run`), never on the reader.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rocksdb::{FlushOptions, WriteBatch};

use crate::offload::Offload;

use super::encoding::latest_value;
use super::range::Reader;
use super::{meta, RevisionStore, StoreError, CF_LATEST, LATEST_L0_FILES_BEFORE_COMPACTION};

/// Keys written per batch while rebuilding, to bound memory on a large store.
const KEYS_PER_BATCH: usize = 4096;

impl RevisionStore {
    /// Fills `latest` from `kv` at the current revision if it was never built here.
    pub fn ensure_latest_index(&self) -> Result<(), StoreError> {
        if meta::read_latest_index_built(self)? {
            return Ok(());
        }
        // A rebuild cut short by a crash starts over.
        self.clear(CF_LATEST)?;
        let reader = Reader::live(self, meta::read_revisions(self, None)?);
        let latest = self.cf(CF_LATEST)?;
        let mut batch = WriteBatch::default();
        let mut keys = 0usize;
        reader.scan_versions(
            b"",
            &[0],
            reader.revisions().current,
            |key, revision, record| {
                // `kv` does not record sub revisions.
                batch.put_cf(latest, key, latest_value(revision, None, record));
                keys += 1;
                if batch.len() >= KEYS_PER_BATCH {
                    self.db.write(std::mem::take(&mut batch))?;
                }
                Ok(true)
            },
        )?;
        meta::stage_latest_index_built(self, &mut batch)?;
        self.db.write(batch)?;
        tracing::info!(keys, "built the latest-version index");
        Ok(())
    }
}

/// Hidden entries a scan of `latest` may step over per key it returns before they are
/// cleared out (one overwritten version of every key, on average)...
const HIDDEN_PER_KEY_BEFORE_CLEARING: u64 = 1;
/// ... and in all: a short scan, or a few overwritten keys, is not worth a flush or a
/// compaction.
const HIDDEN_BEFORE_CLEARING: u64 = 256;

/// A range of `latest` to compact: the union of the crowded scans' ranges since the
/// last compaction (`None` as the end: to the last key).
pub(super) type WantedRange = (Vec<u8>, Option<Vec<u8>>);

/// What crowded scans share with the upkeep worker.
#[derive(Default)]
pub(super) struct LatestUpkeep {
    /// Held while a scan decides on and asks for a flush or a compaction.
    pub(super) asking: Mutex<()>,
    /// The range the worker compacts next.
    pub(super) wanted: Mutex<Option<WantedRange>>,
    /// Set while the worker compacts: scans meanwhile still see the files it replaces,
    /// and would ask again for what it is doing.
    pub(super) compacting: AtomicBool,
    wake: tokio::sync::Notify,
}

impl LatestUpkeep {
    /// Adds `[start, end)` to the range the worker compacts next, and wakes it.
    pub(super) fn want_compacted(&self, start: &[u8], end: Option<&[u8]>) {
        let Ok(mut wanted) = self.wanted.lock() else {
            return;
        };
        let range = match wanted.take() {
            None => (start.to_vec(), end.map(<[u8]>::to_vec)),
            Some((first, last)) => (
                first.min(start.to_vec()),
                last.zip(end).map(|(last, end)| last.max(end.to_vec())),
            ),
        };
        *wanted = Some(range);
        self.wake.notify_one();
    }
}

/// The worker: compacts the ranges of `latest` that crowded scans asked for, one at a
/// time, for as long as the member runs.
pub async fn run(store: Arc<RevisionStore>, offload: Offload) {
    loop {
        store.latest_upkeep.wake.notified().await;
        let owned = store.clone();
        // A failed compaction is asked for again by the next crowded scan.
        match offload
            .run(move || owned.compact_latest_where_wanted())
            .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "could not compact latest"),
            Err(error) => tracing::warn!(%error, "could not compact latest"),
        }
    }
}

impl RevisionStore {
    /// Compacts the range of `latest` that crowded scans asked for, if any (the worker's
    /// work, and tests'). RocksDB flushes the memtable first when it holds keys of the
    /// range, and merges the range's files into the level below: one entry per key is
    /// left, and no deletion where nothing older lies beneath.
    pub(super) fn compact_latest_where_wanted(&self) -> Result<bool, StoreError> {
        let wanted = match self.latest_upkeep.wanted.lock() {
            Ok(mut wanted) => wanted.take(),
            Err(_) => None,
        };
        let Some((start, end)) = wanted else {
            return Ok(false);
        };
        let latest = self.cf(CF_LATEST)?;
        self.latest_upkeep.compacting.store(true, Ordering::Release);
        self.db
            .compact_range_cf(latest, Some(start.as_slice()), end.as_deref());
        self.latest_upkeep
            .compacting
            .store(false, Ordering::Release);
        tracing::debug!("compacted latest where scans stepped over overwritten entries");
        Ok(true)
    }

    /// Clears out the overwritten entries a scan of `[start, range_end)` (etcd's range
    /// end) stepped over, when it stepped over `hidden` of them to return `keys` keys.
    /// Where they lie decides how, and the read waits for neither:
    ///
    /// - in the memtable (every put of a key adds an entry there, kept until it flushes):
    ///   a flush keeps one entry per key. RocksDB's own trigger for this
    ///   (`memtable_avg_op_scan_flush_trigger`) only marks the memtable, and the flush
    ///   waits for the family's next writes, so ranges between writes kept paying.
    /// - in L0 files, each holding its own version of keys written often, and deletions
    ///   waiting for a compaction: the upkeep worker compacts the scanned range. RocksDB
    ///   compacts L0 only once it holds four files, so after writes stopped a range
    ///   stepped over up to three versions of each key for as long as it ran (compare.sh's
    ///   range after txn-cas, docs/benchmarks.md).
    ///
    /// Entries below L0 that a compaction could not drop (versions a reader's snapshot
    /// pins) ask for nothing: a compaction leaves L0 empty until the next flush.
    pub(super) fn tidy_latest_if_crowded(
        &self,
        hidden: u64,
        keys: u64,
        start: &[u8],
        range_end: &[u8],
    ) {
        if hidden < HIDDEN_BEFORE_CLEARING
            || hidden < keys.saturating_mul(HIDDEN_PER_KEY_BEFORE_CLEARING)
        {
            return;
        }
        if self.latest_upkeep.compacting.load(Ordering::Acquire) {
            return;
        }
        // Concurrent scans of the same keys would all ask, and the second ask would wait
        // for the first flush: one decides, the others go on.
        let Ok(_asking) = self.latest_upkeep.asking.try_lock() else {
            return;
        };
        let Ok(latest) = self.cf(CF_LATEST) else {
            return;
        };
        let property = |name| self.db.property_int_value_cf(latest, name).ok().flatten();
        // Nothing while a flush or a compaction is under way or due: it takes what it
        // can. RocksDB makes even a non-waiting flush wait while one more memtable or L0
        // file could stall writes, and never with no flush under way and fewer L0 files
        // than its compaction trigger; only a flush of its own starting between these
        // checks and the ask can make the read wait, for that flush.
        let l0_files = match property("rocksdb.num-files-at-level0") {
            Some(files) if files < LATEST_L0_FILES_BEFORE_COMPACTION as u64 => files,
            _ => return,
        };
        if property("rocksdb.num-immutable-mem-table") != Some(0)
            || property("rocksdb.compaction-pending") != Some(0)
        {
            return;
        }
        let memtable = property("rocksdb.num-entries-active-mem-table").unwrap_or(0);
        if memtable >= hidden {
            let mut options = FlushOptions::default();
            options.set_wait(false);
            match self.db.flush_cf_opt(latest, &options) {
                Ok(()) => tracing::debug!(
                    hidden,
                    keys,
                    "flushing latest: a scan stepped over its overwrites"
                ),
                Err(error) => tracing::warn!(%error, "could not ask for a flush of latest"),
            }
        } else if l0_files > 0 {
            let end = (range_end != [0]).then_some(range_end);
            self.latest_upkeep.want_compacted(start, end);
            tracing::debug!(
                hidden,
                keys,
                l0_files,
                "compacting latest's scanned range: a scan stepped over overwrites in files"
            );
        }
    }
}
