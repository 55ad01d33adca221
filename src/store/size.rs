//! The store's size on disk, as Status reports it and as the quota checks weigh it.
//!
//! RocksDB computes it from properties that each take the database's mutex, ten of them
//! for the five column families: too much for every put that `--quota-backend-bytes`
//! weighs. The quota checks read a sample at most [`SAMPLE_LIFETIME`] old instead, as
//! etcd's quota reads a bbolt file that grows only when its batch commits (every 100
//! ms). Status, metrics and defragmentation always read the size afresh.
//!
//! This module never decides what the size means; `quota` does.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{RevisionStore, STORE_COLUMN_FAMILIES};

/// How long a sample serves the quota checks: etcd's default backend batch interval,
/// the staleness of the size etcd's own quota reads.
pub const SAMPLE_LIFETIME: Duration = Duration::from_millis(100);

/// The last size read for the quota checks, and when.
#[derive(Default)]
pub(super) struct SizeSample(Mutex<Option<(Instant, u64)>>);

impl SizeSample {
    fn fresh(&self, now: Instant) -> Option<u64> {
        let sample = *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        sample
            .filter(|(taken, _)| now.saturating_duration_since(*taken) < SAMPLE_LIFETIME)
            .map(|(_, size)| size)
    }

    fn record(&self, taken: Instant, size: u64) {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((taken, size));
    }

    fn forget(&self) {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }
}

impl RevisionStore {
    /// The approximate on-disk size of the store, read now: SST files and memtables of
    /// every column family of the store (the raft log lives elsewhere).
    pub fn approximate_size(&self) -> u64 {
        STORE_COLUMN_FAMILIES
            .iter()
            .filter_map(|name| self.db.cf_handle(name))
            .filter_map(|cf| {
                let files = self
                    .db
                    .property_int_value_cf(cf, "rocksdb.total-sst-files-size")
                    .ok()
                    .flatten()?;
                let memtables = self
                    .db
                    .property_int_value_cf(cf, "rocksdb.size-all-mem-tables")
                    .ok()
                    .flatten()?;
                Some(files + memtables)
            })
            .sum()
    }

    /// Read views of the store open now (RocksDB snapshots: a Range, a Txn, a watch
    /// catching up, a snapshot export each hold one while they read): etcd's open
    /// read transactions.
    pub fn open_snapshots(&self) -> u64 {
        self.db
            .property_int_value("rocksdb.num-snapshots")
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    /// [`Self::approximate_size`] as of at most [`SAMPLE_LIFETIME`] ago: what the quota
    /// checks weigh, on the write path.
    pub fn recent_size(&self) -> u64 {
        let now = Instant::now();
        if let Some(size) = self.size_sample.fresh(now) {
            return size;
        }
        let size = self.approximate_size();
        self.size_sample.record(now, size);
        size
    }

    /// Drops the sample after a defragmentation shrank the store, so that no write is
    /// refused for the size it had before (the usual recovery from NOSPACE is compact,
    /// defragment, disarm, write).
    pub(super) fn forget_size_sample(&self) {
        self.size_sample.forget();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_serves_for_its_lifetime_only() {
        let sample = SizeSample::default();
        let taken = Instant::now();
        assert_eq!(sample.fresh(taken), None);
        sample.record(taken, 42);
        assert_eq!(sample.fresh(taken + SAMPLE_LIFETIME / 2), Some(42));
        assert_eq!(sample.fresh(taken + SAMPLE_LIFETIME), None);
        sample.record(taken, 7);
        sample.forget();
        assert_eq!(sample.fresh(taken), None);
    }
}
