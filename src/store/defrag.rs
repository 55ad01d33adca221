//! Defragmentation: giving back the disk space that compaction freed, as etcd's
//! Defragment does for its bbolt file, and the estimate of how much of the store is
//! in use meanwhile (etcd's `dbSizeInUse`).
//!
//! Physical compaction only writes RocksDB tombstones; the space they free comes back
//! when RocksDB compacts the files holding them. Defragment asks for that at once: a
//! manual compaction of every column family of the store, down to the bottom level. It
//! runs on the caller's (blocking) thread while reads and writes go on, never on an
//! async worker, and one at a time. This module never touches the raft log's column
//! families.

use std::sync::atomic::Ordering;

use rocksdb::{BottommostLevelCompaction, CompactOptions};

use super::{RevisionStore, StoreError, CF_KV, STORE_COLUMN_FAMILIES};

impl RevisionStore {
    /// Compacts every column family of the store in full, so that what compaction
    /// deleted leaves the disk. Blocks until done; a second call waits for the first.
    pub fn defragment(&self) -> Result<(), StoreError> {
        let _alone = self
            .defrag_lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let _in_flight = super::metrics::DefragInFlight::start();
        let before = self.approximate_size();
        let started = std::time::Instant::now();
        // Counted from here: what compaction deletes from now on may land in files
        // this run has already rewritten.
        let reclaimed = self.reclaimable_bytes.swap(0, Ordering::AcqRel);
        for name in STORE_COLUMN_FAMILIES {
            let cf = self.cf(name)?;
            // Memtables first, so that their tombstones meet the data they delete.
            self.db.flush_cf(cf)?;
            let mut options = CompactOptions::default();
            // Rewrite the bottom level too: that is where the deleted versions are.
            options.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
            // Automatic compactions go on meanwhile, so writes never stall behind it.
            options.set_exclusive_manual_compaction(false);
            self.db
                .compact_range_cf_opt(cf, None::<&[u8]>, None::<&[u8]>, &options);
        }
        self.forget_size_sample();
        tracing::info!(
            size_before = before,
            size_after = self.approximate_size(),
            reclaimed_estimate = reclaimed,
            took = ?started.elapsed(),
            "defragmented the store"
        );
        Ok(())
    }

    /// Records `bytes` (keys and values as written) that compaction just deleted.
    pub(super) fn note_reclaimable(&self, bytes: u64) {
        self.reclaimable_bytes.fetch_add(bytes, Ordering::AcqRel);
    }

    /// The store's size less what compaction deleted since the last defragmentation
    /// (or restart) and RocksDB still keeps on disk: etcd's `dbSizeInUse`. Deleted
    /// bytes are counted as written and scaled by how much the `kv` files compress.
    pub fn approximate_size_in_use(&self) -> u64 {
        let size = self.approximate_size();
        let deleted = self.reclaimable_bytes.load(Ordering::Acquire);
        if deleted == 0 {
            return size;
        }
        let on_disk = (deleted as f64 * self.kv_compression_ratio()) as u64;
        size.saturating_sub(on_disk)
    }

    /// Bytes on disk per byte written in the `kv` column family's files, from their
    /// aggregated table properties; 1 when there are none yet.
    fn kv_compression_ratio(&self) -> f64 {
        let Ok(cf) = self.cf(CF_KV) else {
            return 1.0;
        };
        let Ok(Some(properties)) = self
            .db
            .property_value_cf(cf, "rocksdb.aggregated-table-properties")
        else {
            return 1.0;
        };
        let field = |name: &str| -> Option<f64> {
            properties.split(';').find_map(|pair| {
                let (key, value) = pair.split_once('=')?;
                (key.trim() == name).then(|| value.trim().parse().ok())?
            })
        };
        match (
            field("data block size"),
            field("raw key size"),
            field("raw value size"),
        ) {
            (Some(disk), Some(keys), Some(values)) if keys + values > 0.0 => {
                (disk / (keys + values)).clamp(0.0, 1.0)
            }
            _ => 1.0,
        }
    }
}
