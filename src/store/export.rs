//! A consistent view of the whole store, for export to another format (etcd's snapshot
//! file, written by the `backup` module).
//!
//! An [`Export`] holds one RocksDB snapshot, taken while no snapshot install runs, and
//! reads from it every stored version in revision order with its full record (the
//! `history` column family keeps one entry per stored version, see `compaction.rs`),
//! every live lease, the counters and the applied raft position. Writes go on
//! meanwhile; the view does not see them. This module only reads, and knows no file
//! format.

use bytes::Bytes;
use quantykube_raft::StoredMembership;
use rocksdb::{DBRawIterator, ReadOptions, Snapshot};

use super::encoding::{
    escape_key, lease_record_id, lease_records_bounds, split_history_key, split_lease_record_value,
    version_key, HistoryEntry, StoredVersion,
};
use super::lease::LeaseRecord;
use super::meta::{self, Revisions};
use super::{RevisionStore, StoreError, CF_HISTORY, CF_KV, CF_LEASE};
use crate::proto::command::MemberAttributes;
use crate::proto::mvccpb::KeyValue;

/// One stored change: the version of `key` written at revision (`main`, `sub`), or its
/// deletion there (`version` is `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredChange {
    pub main: i64,
    pub sub: u32,
    pub key: Bytes,
    pub version: Option<KeyValue>,
}

/// The store as of one instant; see the module doc.
pub struct Export<'a> {
    store: &'a RevisionStore,
    snapshot: Snapshot<'a>,
    revisions: Revisions,
    physically_compacted: i64,
    applied_index: u64,
    membership: StoredMembership,
}

impl RevisionStore {
    /// A view of the store as it is now. The caller holds `_no_install` (see
    /// [`RevisionStore::readable`]) while the RocksDB snapshot is taken, so that the view
    /// never sees an install half done; it may let go once this returns.
    pub fn export(&self, _no_install: &super::ReadGate) -> Result<Export<'_>, StoreError> {
        self.export_of(self.db.snapshot())
    }

    fn export_of<'s>(&'s self, snapshot: Snapshot<'s>) -> Result<Export<'s>, StoreError> {
        let revisions = meta::read_revisions(self, Some(&snapshot))?;
        let applied = meta::read_applied_at(self, &snapshot)?;
        let physically_compacted = meta::read_physically_compacted_at(self, &snapshot)?;
        Ok(Export {
            store: self,
            revisions,
            physically_compacted,
            applied_index: applied.last_applied.map_or(0, |id| id.index),
            membership: applied.membership,
            snapshot,
        })
    }
}

impl<'a> Export<'a> {
    /// The revision of the last change (1 in a new store).
    pub fn current_revision(&self) -> i64 {
        self.revisions.current
    }

    /// The revision of the last compaction, or -1.
    pub fn compacted_revision(&self) -> i64 {
        self.revisions.compacted
    }

    /// How far physical compaction had gone: below the compacted revision while the
    /// worker was behind, and then the view still holds versions it would delete.
    pub fn physically_compacted(&self) -> i64 {
        self.physically_compacted
    }

    /// The index of the last raft log entry the view reflects (0 if none).
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// The membership the view reflects.
    pub fn membership(&self) -> &StoredMembership {
        &self.membership
    }

    fn read_options(&self, upper: Option<Vec<u8>>) -> ReadOptions {
        let mut opts = super::total_order();
        opts.set_snapshot(&self.snapshot);
        if let Some(upper) = upper {
            opts.set_iterate_upper_bound(upper);
        }
        opts
    }

    fn iterator(&self, cf: &str, upper: Option<Vec<u8>>) -> Result<DBRawIterator<'_>, StoreError> {
        let opts = self.read_options(upper);
        let mut it = self.store.db.raw_iterator_cf_opt(self.store.cf(cf)?, opts);
        it.seek_to_first();
        Ok(it)
    }

    /// What member `id` published about itself, as of the view.
    pub fn member_attributes(&self, id: u64) -> Result<Option<MemberAttributes>, StoreError> {
        meta::read_member_attributes_at(self.store, &self.snapshot, id)
    }

    /// Every member id the cluster removed, as of the view.
    /// The auth store's records (users, roles, enabled flag, revision).
    pub fn auth_records(&self) -> Result<super::AuthRecords, StoreError> {
        self.store.read_auth_records(Some(&self.snapshot))
    }

    pub fn removed_members(&self) -> Result<Vec<u64>, StoreError> {
        meta::read_removed_members_at(self.store, &self.snapshot)
    }

    /// Every stored version, in revision order.
    pub fn changes(&self) -> Result<Changes<'_>, StoreError> {
        Ok(Changes {
            history: self.iterator(CF_HISTORY, None)?,
            kv: self.store.cf(CF_KV)?,
            export: self,
        })
    }

    /// Every live lease, by id.
    pub fn leases(&self) -> Result<Leases<'_>, StoreError> {
        let (start, end) = lease_records_bounds();
        let mut records = self.iterator(CF_LEASE, Some(end))?;
        records.seek(start);
        Ok(Leases { records })
    }
}

/// The iterator of [`Export::changes`].
pub struct Changes<'b> {
    history: DBRawIterator<'b>,
    kv: &'b rocksdb::ColumnFamily,
    export: &'b Export<'b>,
}

/// What one `history` entry holds for an export.
enum Entry {
    Change(StoredChange),
    /// A deletion at the compacted revision keeps its event for watches after its
    /// version went (compaction.rs): not a stored version any more.
    KeptForWatches,
}

impl Changes<'_> {
    fn decode(&self, raw_key: &[u8], raw: &[u8]) -> Result<Entry, StoreError> {
        let (main, sub) = split_history_key(raw_key)?;
        let entry = HistoryEntry::decode(raw)?;
        let opts = self.export.read_options(None);
        let stored = self.export.store.db.get_pinned_cf_opt(
            self.kv,
            version_key(&escape_key(&entry.key), main),
            &opts,
        )?;
        let key = Bytes::from(entry.key);
        let version = match stored.as_deref().map(StoredVersion::decode).transpose()? {
            None if entry.deleted && main <= self.export.revisions.compacted => {
                return Ok(Entry::KeptForWatches)
            }
            None => {
                return Err(StoreError::corrupt(format!(
                    "history entry at revision {main} has no stored version"
                )))
            }
            Some(StoredVersion::Tombstone) if entry.deleted => None,
            Some(StoredVersion::Live {
                create_revision,
                version,
                lease,
                value,
            }) if !entry.deleted => Some(KeyValue {
                key: key.clone(),
                create_revision,
                mod_revision: main,
                version,
                value,
                lease,
            }),
            Some(_) => {
                return Err(StoreError::corrupt(format!(
                    "history entry at revision {main} disagrees with its stored version"
                )))
            }
        };
        Ok(Entry::Change(StoredChange {
            main,
            sub,
            key,
            version,
        }))
    }
}

impl Iterator for Changes<'_> {
    type Item = Result<StoredChange, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let entry = match (self.history.key(), self.history.value()) {
                (Some(raw_key), Some(raw)) => self.decode(raw_key, raw),
                _ => return self.history.status().err().map(|e| Err(e.into())),
            };
            self.history.next();
            match entry {
                Ok(Entry::KeptForWatches) => continue,
                Ok(Entry::Change(change)) => return Some(Ok(change)),
                Err(error) => return Some(Err(error)),
            }
        }
    }
}

/// The iterator of [`Export::leases`].
pub struct Leases<'b> {
    records: DBRawIterator<'b>,
}

impl Iterator for Leases<'_> {
    type Item = Result<LeaseRecord, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let record = match (self.records.key(), self.records.value()) {
            (Some(key), Some(value)) => lease_record_id(key).and_then(|id| {
                let (ttl, remaining_ttl) = split_lease_record_value(value)?;
                Ok(LeaseRecord {
                    id,
                    ttl,
                    remaining_ttl,
                })
            }),
            _ => return self.records.status().err().map(|e| Err(e.into())),
        };
        self.records.next();
        Some(record)
    }
}
