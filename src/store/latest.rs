//! The `latest` column family's upkeep outside the apply path: filling it for a store
//! written before it existed, or from a snapshot file that did not carry it.
//!
//! The apply path keeps `latest` in step with `kv` in the same write batch
//! (`write.rs`); this module only rebuilds it from `kv` when the `meta` marker says it
//! was never built. It must never run while commands are being applied.

use rocksdb::WriteBatch;

use super::encoding::latest_value;
use super::range::Reader;
use super::{meta, RevisionStore, StoreError, CF_LATEST};

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
                batch.put_cf(latest, key, latest_value(revision, record));
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
