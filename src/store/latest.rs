//! The `latest` column family's upkeep outside the apply path: filling it for a store
//! written before it existed, or from a snapshot file that did not carry it, and
//! flushing its memtable when scans find it crowded with overwritten entries.
//!
//! The apply path keeps `latest` in step with `kv` in the same write batch
//! (`write.rs`); this module only rebuilds it from `kv` when the `meta` marker says it
//! was never built, and a rebuild must never run while commands are being applied. A
//! flush changes no data: it must never wait for one (a read asks for it).

use rocksdb::perf::{set_perf_stats, PerfContext, PerfMetric, PerfStatsLevel};
use rocksdb::{FlushOptions, WriteBatch};

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

/// Hidden entries a scan of `latest` may step over per key it returns before the
/// memtable is flushed...
const HIDDEN_PER_KEY_BEFORE_FLUSH: u64 = 2;
/// ... and in all: a short scan, or a few overwritten keys, is not worth a flush.
const HIDDEN_BEFORE_FLUSH: u64 = 256;

/// Counts the entries RocksDB's iterators on this thread step over without returning
/// them: versions hidden by a newer one, and deletions.
///
/// Every put of a key adds an entry to `latest`'s memtable, which keeps the overwritten
/// ones until it flushes (up to 8 MiB of them). A scan of keys written often (Kubernetes'
/// leases and endpoints, compare.sh's txn-cas keys) steps over all of them: after
/// txn-cas ×100, a range of its 1 000 keys spent most of its 3 ms of CPU in the
/// memtable's iterator (docs/benchmarks.md, issue 20's eleventh step).
pub(super) struct HiddenEntries {
    context: PerfContext,
    before: u64,
}

impl HiddenEntries {
    /// Starts counting on this thread (RocksDB's per-thread perf counters).
    pub(super) fn start() -> Self {
        set_perf_stats(PerfStatsLevel::EnableCount);
        let context = PerfContext::default();
        let before = skipped(&context);
        HiddenEntries { context, before }
    }

    /// The entries stepped over since `start`.
    pub(super) fn count(&self) -> u64 {
        skipped(&self.context).saturating_sub(self.before)
    }
}

impl Drop for HiddenEntries {
    /// Counting stops however the scan ends, so no other work on this thread pays for it.
    fn drop(&mut self) {
        set_perf_stats(PerfStatsLevel::Disable);
    }
}

fn skipped(context: &PerfContext) -> u64 {
    context.metric(PerfMetric::InternalKeySkippedCount)
        + context.metric(PerfMetric::InternalDeleteSkippedCount)
}

impl RevisionStore {
    /// Asks RocksDB to flush `latest`'s memtable when a scan that returned `keys` keys
    /// stepped over `hidden` entries: the flush keeps one entry per key. RocksDB's own
    /// trigger for this (`memtable_avg_op_scan_flush_trigger`) only marks the memtable,
    /// and the flush waits for the family's next writes, so ranges between writes kept
    /// paying. The read does not wait for the flush it asks for.
    pub(super) fn flush_latest_if_crowded(&self, hidden: u64, keys: u64) {
        if hidden < HIDDEN_BEFORE_FLUSH || hidden < keys.saturating_mul(HIDDEN_PER_KEY_BEFORE_FLUSH)
        {
            return;
        }
        // Concurrent scans of the same keys would all ask, and the second ask would wait
        // for the first flush: one decides, the others go on.
        let Ok(_asking) = self.latest_flush_asking.try_lock() else {
            return;
        };
        let Ok(latest) = self.cf(CF_LATEST) else {
            return;
        };
        // The hidden entries may lie in files rather than in the memtable (deletions wait
        // there for a compaction, versions for a reader's snapshot), where a flush does not
        // help: flush only a memtable that could hold them, and not while one flushes.
        // RocksDB makes even a non-waiting flush wait while one more memtable or L0 file
        // could stall writes, and never with no flush under way and fewer L0 files than
        // its compaction trigger; only a flush of its own starting between these checks
        // and the ask can make the read wait, for that flush.
        let property = |name| self.db.property_int_value_cf(latest, name).ok().flatten();
        if property("rocksdb.num-immutable-mem-table") != Some(0)
            || property("rocksdb.num-files-at-level0")
                .is_none_or(|files| files >= LATEST_L0_FILES_BEFORE_COMPACTION as u64)
            || property("rocksdb.num-entries-active-mem-table")
                .is_none_or(|entries| entries < hidden)
        {
            return;
        }
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
    }
}
