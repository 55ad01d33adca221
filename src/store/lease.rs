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
    lease_attachment_key, lease_attachments_prefix, lease_record_id, lease_record_key,
    lease_record_value, lease_records_bounds, split_lease_record_value,
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
        let (start, end) = lease_records_bounds();
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(end.to_vec());
        let it = self.db.iterator_cf_opt(
            self.cf(CF_LEASE)?,
            opts,
            IteratorMode::From(&start, Direction::Forward),
        );
        let mut leases = Vec::new();
        for item in it {
            let (key, value) = item?;
            let (ttl, remaining_ttl) = split_lease_record_value(&value)?;
            leases.push(LeaseRecord {
                id: lease_record_id(&key)?,
                ttl,
                remaining_ttl,
            });
        }
        Ok(leases)
    }

    /// The keys attached to lease `id`, in key order.
    pub fn lease_keys(&self, id: i64) -> Result<Vec<Bytes>, StoreError> {
        let prefix = lease_attachments_prefix(id);
        let mut end = prefix.to_vec();
        // The prefix ends in the id's last byte; the next prefix bounds the scan.
        match end.iter().rposition(|b| *b != 0xFF) {
            Some(i) => {
                end[i] += 1;
                end.truncate(i + 1);
            }
            None => end.push(0xFF),
        }
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(end);
        let it = self.db.iterator_cf_opt(
            self.cf(CF_LEASE)?,
            opts,
            IteratorMode::From(&prefix, Direction::Forward),
        );
        let mut keys = Vec::new();
        for item in it {
            let (key, _) = item?;
            keys.push(Bytes::copy_from_slice(&key[prefix.len()..]));
        }
        Ok(keys)
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
