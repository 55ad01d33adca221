//! Physical compaction: deleting the versions and history that a compaction made
//! unreachable.
//!
//! Logical compaction (refusing reads below the compacted revision) happens when the
//! Compact command is applied; this module then removes, for every key changed since
//! the last compaction, each version older than the one live at the compacted
//! revision (and that one too when it is a deletion), and the history below that
//! revision (its own events stay, so that a watch may start there, as in etcd). It is
//! idempotent and resumable: the history it walks is deleted last, and
//! its progress marker moves in the same batch. It must never delete anything a read
//! at or above the compacted revision can see.

use std::collections::BTreeSet;

use rocksdb::{ReadOptions, WriteBatch};

use super::encoding::{
    after_all_versions, escape_key, history_key, split_version_key, version_key, HistoryEntry,
    StoredVersion,
};
use super::{meta, RevisionStore, StoreError, CF_HISTORY, CF_KV};

/// Keys handled per write batch, to bound memory on a long history.
const KEYS_PER_BATCH: usize = 4096;

pub fn compact_physically(store: &RevisionStore, to: i64) -> Result<(), StoreError> {
    let from = meta::read_physically_compacted(store)?;
    if to <= from {
        return Ok(());
    }
    let history = store.cf(CF_HISTORY)?;
    let mut opts = ReadOptions::default();
    opts.set_iterate_upper_bound(history_key(to + 1, 0).to_vec());
    let mut it = store.db.raw_iterator_cf_opt(history, opts);
    it.seek(history_key(from + 1, 0));
    let mut keys = BTreeSet::new();
    let mut history_bytes = 0u64;
    while it.valid() {
        if let (Some(key), Some(raw)) = (it.key(), it.value()) {
            history_bytes += (key.len() + raw.len()) as u64;
            keys.insert(HistoryEntry::decode(raw)?.key);
        }
        if keys.len() >= KEYS_PER_BATCH {
            drop_old_versions(store, &std::mem::take(&mut keys), to)?;
        }
        it.next();
    }
    it.status()?;
    drop_old_versions(store, &keys, to)?;

    let mut batch = WriteBatch::default();
    // The compacted revision's own events stay: as in etcd, a watch may start there.
    batch.delete_range_cf(history, history_key(0, 0), history_key(to, 0));
    meta::stage_physically_compacted(store, &mut batch, to)?;
    store.db.write(batch)?;
    store.note_reclaimable(history_bytes);
    tracing::debug!(from, to, "physical compaction done");
    Ok(())
}

fn drop_old_versions(
    store: &RevisionStore,
    keys: &BTreeSet<Vec<u8>>,
    to: i64,
) -> Result<(), StoreError> {
    let kv = store.cf(CF_KV)?;
    let mut batch = WriteBatch::default();
    let mut deleted_bytes = 0u64;
    for key in keys {
        let escaped = escape_key(key);
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(after_all_versions(&escaped));
        let mut it = store.db.raw_iterator_cf_opt(kv, opts);
        it.seek(version_key(&escaped, to));
        // The first entry is the version live at `to`: keep it unless it is a deletion.
        let keep = match (it.key(), it.value()) {
            (Some(_), Some(value)) => !StoredVersion::is_tombstone(value),
            _ => continue,
        };
        if keep {
            it.next();
        }
        while let Some(raw) = it.key() {
            split_version_key(raw)?;
            deleted_bytes += (raw.len() + it.value().map_or(0, <[u8]>::len)) as u64;
            batch.delete_cf(kv, raw);
            it.next();
        }
        it.status()?;
    }
    store.db.write(batch)?;
    store.note_reclaimable(deleted_bytes);
    Ok(())
}

impl RevisionStore {
    /// Finishes a physical compaction that a crash interrupted.
    pub fn resume_compaction(&self) -> Result<(), StoreError> {
        let compacted = self.compacted_revision()?;
        if compacted > meta::read_physically_compacted(self)? {
            compact_physically(self, compacted)?;
        }
        Ok(())
    }
}
