//! Leases as the store keeps them: each live lease's granted TTL and last checkpointed
//! remaining TTL, and which keys are attached to it.
//!
//! Granting, revoking and checkpointing are commands in the log, applied here like any
//! other; attachments change with the keys themselves, in the apply step that changes
//! the key (write.rs). This module owns reading and staging lease records. It must
//! never time a lease: only the leader's lessor does, and what it decides comes back
//! here as commands.

use bytes::Bytes;
use rocksdb::{Direction, IteratorMode, ReadOptions, WriteBatch};

use super::encoding::{
    attached_key, lease_attachment_key, lease_attachments_bounds, lease_record_id,
    lease_record_key, lease_record_value, lease_records_bounds, split_lease_record_value,
};
use super::{RevisionStore, StoreError, CF_LEASE};

/// A live lease as the store knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    pub id: i64,
    /// The TTL it was granted, in seconds.
    pub ttl: i64,
    /// The remaining TTL the leader last checkpointed, in seconds; 0 if none yet.
    pub remaining_ttl: i64,
}

impl LeaseRecord {
    /// The seconds a leader that starts timing this lease gives it: the last
    /// checkpointed remaining TTL, or the whole TTL if none was recorded.
    pub fn starting_ttl(&self) -> i64 {
        if self.remaining_ttl > 0 {
            self.remaining_ttl
        } else {
            self.ttl
        }
    }
}

impl RevisionStore {
    /// Lease `id`, if it is live.
    pub fn lease(&self, id: i64) -> Result<Option<LeaseRecord>, StoreError> {
        let Some(raw) = self
            .db
            .get_pinned_cf(self.cf(CF_LEASE)?, lease_record_key(id))?
        else {
            return Ok(None);
        };
        let (ttl, remaining_ttl) = split_lease_record_value(&raw)?;
        Ok(Some(LeaseRecord {
            id,
            ttl,
            remaining_ttl,
        }))
    }

    /// True while lease `id` is live.
    pub fn lease_exists(&self, id: i64) -> Result<bool, StoreError> {
        Ok(self.lease(id)?.is_some())
    }

    /// Every live lease, by id.
    pub fn leases(&self) -> Result<Vec<LeaseRecord>, StoreError> {
        let mut leases = Vec::new();
        self.for_each_lease_entry(lease_records_bounds(), |key, value| {
            let (ttl, remaining_ttl) = split_lease_record_value(value)?;
            leases.push(LeaseRecord {
                id: lease_record_id(key)?,
                ttl,
                remaining_ttl,
            });
            Ok(())
        })?;
        Ok(leases)
    }

    /// The keys attached to lease `id`, in key order.
    pub fn lease_keys(&self, id: i64) -> Result<Vec<Bytes>, StoreError> {
        let mut keys = Vec::new();
        self.for_each_lease_entry(lease_attachments_bounds(id), |key, _| {
            keys.push(Bytes::copy_from_slice(attached_key(key)?));
            Ok(())
        })?;
        Ok(keys)
    }

    /// Calls `visit` with every entry of the lease family from `start` up to `end`.
    fn for_each_lease_entry(
        &self,
        (start, end): (Vec<u8>, Vec<u8>),
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(end);
        let entries = self.db.iterator_cf_opt(
            self.cf(CF_LEASE)?,
            opts,
            IteratorMode::From(&start, Direction::Forward),
        );
        for entry in entries {
            let (key, value) = entry?;
            visit(&key, &value)?;
        }
        Ok(())
    }

    /// Stages lease `id`'s record.
    pub(super) fn stage_lease_record(
        &self,
        batch: &mut WriteBatch,
        record: LeaseRecord,
    ) -> Result<(), StoreError> {
        batch.put_cf(
            self.cf(CF_LEASE)?,
            lease_record_key(record.id),
            lease_record_value(record.ttl, record.remaining_ttl),
        );
        Ok(())
    }

    /// Stages the removal of lease `id`'s record and of every attachment left to it.
    pub(super) fn stage_lease_removal(
        &self,
        batch: &mut WriteBatch,
        id: i64,
        attached: &[Bytes],
    ) -> Result<(), StoreError> {
        let cf = self.cf(CF_LEASE)?;
        batch.delete_cf(cf, lease_record_key(id));
        for key in attached {
            batch.delete_cf(cf, lease_attachment_key(id, key));
        }
        Ok(())
    }

    /// Stages the move of `key` from lease `from` to lease `to` (0: none).
    pub(super) fn stage_attachment(
        &self,
        batch: &mut WriteBatch,
        key: &[u8],
        from: i64,
        to: i64,
    ) -> Result<(), StoreError> {
        if from == to {
            return Ok(());
        }
        let cf = self.cf(CF_LEASE)?;
        if from != 0 {
            batch.delete_cf(cf, lease_attachment_key(from, key));
        }
        if to != 0 {
            batch.put_cf(cf, lease_attachment_key(to, key), []);
        }
        Ok(())
    }
}
