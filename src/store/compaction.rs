//! Physical compaction: deleting the versions and history that a compaction made
//! unreachable.
//!
//! Logical compaction (refusing reads below the compacted revision) happens when the
//! Compact command is applied; this module then removes, for every key changed since
//! the last compaction, each version older than the one live at the compacted
//! revision (and that one too when it is a deletion), together with its `history`
//! entry. The history thus keeps one entry per stored version, in revision order:
//! etcd's `key` bucket, which a snapshot export walks. One exception: the compacted
//! revision's own events stay even when their version goes (a deletion), so that a
//! watch may start there, as in etcd; the next compaction removes them. It is
//! idempotent and resumable: a batch deletes versions with their history entries, and
//! the progress marker moves last. It must never delete anything a read at or above
//! the compacted revision can see.

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
    while it.valid() {
        if let Some(raw) = it.value() {
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
    if from > 0 {
        drop_orphan_events(store, &mut batch, from)?;
    }
    meta::stage_physically_compacted(store, &mut batch, to)?;
    store.db.write(batch)?;
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
            let (_, revision) = split_version_key(raw)?;
            deleted_bytes += (raw.len() + it.value().map_or(0, <[u8]>::len)) as u64;
            batch.delete_cf(kv, raw);
            // The compacted revision's own events stay (see the module doc).
            if revision < to {
                deleted_bytes += stage_event_removal(store, &mut batch, revision, key)?;
            }
            it.next();
        }
        it.status()?;
    }
    store.db.write(batch)?;
    store.note_reclaimable(deleted_bytes);
    Ok(())
}

/// Stages the removal of `key`'s history entries at `revision` (among the few changes
/// of that revision: a transaction's), and answers how many bytes they held.
fn stage_event_removal(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    revision: i64,
    key: &[u8],
) -> Result<u64, StoreError> {
    let mut removed = 0u64;
    let history = store.cf(CF_HISTORY)?;
    let mut opts = ReadOptions::default();
    opts.set_iterate_upper_bound(history_key(revision + 1, 0).to_vec());
    let mut it = store.db.raw_iterator_cf_opt(history, opts);
    it.seek(history_key(revision, 0));
    while let (Some(raw_key), Some(raw)) = (it.key(), it.value()) {
        if HistoryEntry::decode(raw)?.key == key {
            removed += (raw_key.len() + raw.len()) as u64;
            batch.delete_cf(history, raw_key);
        }
        it.next();
    }
    it.status()?;
    Ok(removed)
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
