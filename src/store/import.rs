//! Filling a new, empty store from another store's history (etcd's snapshot file,
//! read by the `backup` module): every stored version in revision order, the live
//! leases, and the compaction the source had reached.
//!
//! An [`Import`] writes what `apply` would have left behind: each version with its
//! `history` entry, the `latest` index, the counters, and, at the end, the lease
//! attachments of the live keys. It never runs on a store that holds data or serves
//! clients (`quantykube snapshot restore` writes a data dir before any member starts),
//! and it does not replay commands: the versions arrive already decided.

use rocksdb::WriteBatch;

use super::encoding::{
    escape_key, history_key, latest_value, split_latest_value, version_key, HistoryEntry, Replaced,
    StoredVersion,
};
use super::export::StoredChange;
use super::lease::LeaseRecord;
use super::{meta, RevisionStore, StoreError, CF_HISTORY, CF_KV, CF_LATEST};

/// Bytes staged before a batch is written, to bound memory on a large import.
const BATCH_BYTES: usize = 4 << 20;
/// Live keys scanned per batch while the lease attachments are written.
const KEYS_PER_BATCH: usize = 4096;

/// What an import wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportSummary {
    pub versions: u64,
    pub leases: u64,
    /// Live keys attached to a lease that the source did not hold (kept without the
    /// attachment, as etcd's restore keeps them).
    pub orphaned_keys: u64,
    pub current_revision: i64,
}

/// An import in progress; see the module doc.
pub struct Import<'a> {
    store: &'a RevisionStore,
    batch: WriteBatch,
    last: Option<(i64, u32)>,
    summary: ImportSummary,
}

impl RevisionStore {
    /// Starts an import; refuses a store that already holds anything.
    pub fn import(&self) -> Result<Import<'_>, StoreError> {
        let empty = meta::read_applied(self)?.last_applied.is_none()
            && self.current_revision()? == 1
            && self
                .db
                .iterator_cf(self.cf(CF_HISTORY)?, rocksdb::IteratorMode::Start)
                .next()
                .is_none();
        if !empty {
            return Err(StoreError::corrupt(
                "cannot import into a store that holds data",
            ));
        }
        Ok(Import {
            store: self,
            batch: WriteBatch::default(),
            last: None,
            summary: ImportSummary::default(),
        })
    }
}

impl Import<'_> {
    fn flush_if_full(&mut self) -> Result<(), StoreError> {
        if self.batch.size_in_bytes() >= BATCH_BYTES {
            self.store.db.write(std::mem::take(&mut self.batch))?;
        }
        Ok(())
    }

    /// Writes one version; versions must come in increasing (main, sub) order.
    pub fn change(&mut self, change: &StoredChange) -> Result<(), StoreError> {
        let at = (change.main, change.sub);
        if change.main < 1 || self.last.is_some_and(|last| at <= last) {
            return Err(StoreError::corrupt(format!(
                "revision {}_{} out of order",
                change.main, change.sub
            )));
        }
        self.last = Some(at);
        let record = match &change.version {
            Some(kv) => {
                if kv.mod_revision != change.main || kv.key != change.key {
                    return Err(StoreError::corrupt(format!(
                        "the version at revision {} names another revision or key",
                        change.main
                    )));
                }
                StoredVersion::Live {
                    create_revision: kv.create_revision,
                    version: kv.version,
                    lease: kv.lease,
                    value: kv.value.clone(),
                }
            }
            None => StoredVersion::Tombstone,
        }
        .encode();
        let store = self.store;
        let latest = store.cf(CF_LATEST)?;
        match change.version {
            Some(_) => self.batch.put_cf(
                latest,
                &change.key,
                latest_value(change.main, Some(change.sub), &record),
            ),
            None => self.batch.delete_cf(latest, &change.key),
        }
        self.batch.put_cf(
            store.cf(CF_KV)?,
            version_key(&escape_key(&change.key), change.main),
            record,
        );
        // The snapshot file does not say which version a change replaced:
        // compaction looks these keys' versions up.
        let event = HistoryEntry {
            deleted: change.version.is_none(),
            key: change.key.to_vec(),
            replaced: Replaced::Unknown,
        };
        self.batch.put_cf(
            store.cf(CF_HISTORY)?,
            history_key(change.main, change.sub),
            event.encode(),
        );
        self.summary.versions += 1;
        self.flush_if_full()
    }

    /// Writes one live lease.
    pub fn lease(&mut self, record: LeaseRecord) -> Result<(), StoreError> {
        self.store.stage_lease_record(&mut self.batch, record)?;
        self.summary.leases += 1;
        self.flush_if_full()
    }

    /// Ends the import. `compacted` is the compaction the source had decided (-1 for
    /// none), `finished` how far it had carried it out; the rest is done by the
    /// member's compaction worker once it starts (`compaction.rs`). The current revision is the last version's,
    /// or the compacted revision if that is higher (as etcd restores it).
    pub fn finish(mut self, compacted: i64, finished: i64) -> Result<ImportSummary, StoreError> {
        let store = self.store;
        let last = self.last.map_or(1, |(main, _)| main);
        let current = last.max(compacted).max(1);
        meta::stage_current_revision(store, &mut self.batch, current)?;
        meta::stage_compacted_revision(store, &mut self.batch, compacted)?;
        meta::stage_physically_compacted(
            store,
            &mut self.batch,
            finished.clamp(0, compacted.max(0)),
        )?;
        meta::stage_latest_index_built(store, &mut self.batch)?;
        store.db.write(std::mem::take(&mut self.batch))?;
        self.summary.current_revision = current;
        self.attach_leased_keys()?;
        Ok(self.summary)
    }

    /// Writes the auth store's records (an empty store has none of its own).
    pub fn auth(&mut self, records: &super::AuthRecords) -> Result<(), StoreError> {
        self.store.stage_auth_records(&mut self.batch, records)?;
        self.store.db.write(std::mem::take(&mut self.batch))?;
        self.store.reload_auth()
    }

    /// Attaches every live key with a lease to it, once all leases are written.
    fn attach_leased_keys(&mut self) -> Result<(), StoreError> {
        let store = self.store;
        let mut it = store.db.raw_iterator_cf(store.cf(CF_LATEST)?);
        it.seek_to_first();
        let mut batch = WriteBatch::default();
        while let (Some(key), Some(raw)) = (it.key(), it.value()) {
            let latest = split_latest_value(raw)?;
            if let StoredVersion::Live { lease, .. } = StoredVersion::decode(latest.record)? {
                if lease != 0 {
                    if store.lease_exists(lease)? {
                        store.stage_attachment(&mut batch, key, 0, lease)?;
                    } else {
                        self.summary.orphaned_keys += 1;
                        tracing::warn!(lease = %format!("{lease:x}"), "a restored key names a lease the snapshot does not hold; kept without it");
                    }
                }
            }
            if batch.len() >= KEYS_PER_BATCH {
                store.db.write(std::mem::take(&mut batch))?;
            }
            it.next();
        }
        it.status()?;
        store.db.write(batch)?;
        Ok(())
    }
}
