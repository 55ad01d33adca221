//! etcd's `HashKV` and `Hash` over the revision store: CRC-32C (Castagnoli, as etcd)
//! checksums that members holding the same data agree on.
//!
//! `HashKV(rev)` covers every key version a read at `rev` could reach after the last
//! compaction, with etcd's rule: versions newer than the compacted revision, and, of the
//! older ones, only each key's newest version at `rev` unless it is a deletion (etcd's
//! `keyIndex.Keep`). It is therefore a function of the logical history alone, whatever
//! a member's physical compaction has removed so far. `Hash` covers every stored entry
//! (etcd: "for testing only").
//!
//! The values differ from etcd's (the bytes are this store's encoding, walked in key
//! order), so they compare QuantyKube members with each other, not with etcd. This
//! module only reads, from one RocksDB snapshot.

use crc::{Crc, CRC_32_ISCSI};

use super::encoding::{split_version_key, StoredVersion};
use super::meta::Revisions;
use super::range::Reader;
use super::{RevisionStore, StoreError, CF_KV, CF_LATEST, CF_LEASE};

/// CRC-32C (Castagnoli): the checksum of etcd's hashes, WAL and snapshot files, and of
/// our transfer files' trailers and the admin API's page tokens. One table, built at
/// compile time.
pub static CASTAGNOLI: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// What `HashKV` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvHash {
    pub hash: u32,
    /// The revision the hash covers (etcd 3.6's `hash_revision`).
    pub revision: i64,
    /// The store's compacted revision (-1 when never compacted).
    pub compacted: i64,
    /// The store's current revision, for the response header.
    pub current: i64,
}

impl RevisionStore {
    /// etcd's `HashByRev`: `revision` 0 means the current one; at or below the
    /// compacted revision is `Compacted`, above the current one `FutureRevision`.
    pub fn hash_kv(&self, revision: i64) -> Result<KvHash, StoreError> {
        let snapshot = self.db.snapshot();
        let reader = Reader::new(self, &snapshot)?;
        let revisions = reader.revisions();
        if revision > 0 && revision <= revisions.compacted {
            return Err(StoreError::Compacted);
        }
        if revision > revisions.current {
            return Err(StoreError::FutureRevision);
        }
        let at = if revision == 0 {
            revisions.current
        } else {
            revision
        };
        let started = std::time::Instant::now();
        let hashed = hash_at(&reader, revisions, at);
        super::metrics::hashed(true, started.elapsed());
        hashed
    }

    /// The hash of the key space at the compacted revision itself, which `hash_kv`
    /// refuses: what a compaction left, equal on members that applied the same history
    /// up to that compaction whatever they applied since (the compaction-hash check,
    /// the `corruption` module). `None` before any compaction.
    pub fn compaction_hash(&self) -> Result<Option<KvHash>, StoreError> {
        let snapshot = self.db.snapshot();
        let reader = Reader::new(self, &snapshot)?;
        let revisions = reader.revisions();
        if revisions.compacted < 1 {
            return Ok(None);
        }
        hash_at(&reader, revisions, revisions.compacted).map(Some)
    }

    /// etcd's `Hash`: every entry of the key versions, the latest-version index and the
    /// leases, as stored now (physical: it changes as compaction removes versions).
    pub fn hash_all(&self) -> Result<(u32, i64), StoreError> {
        let started = std::time::Instant::now();
        let hashed = self.hash_everything();
        super::metrics::hashed(false, started.elapsed());
        hashed
    }

    fn hash_everything(&self) -> Result<(u32, i64), StoreError> {
        let snapshot = self.db.snapshot();
        let reader = Reader::new(self, &snapshot)?;
        let mut digest = CASTAGNOLI.digest();
        for cf in [CF_KV, CF_LATEST, CF_LEASE] {
            digest.update(cf.as_bytes());
            let mut iter = reader.iterator(cf, None)?;
            iter.seek_to_first();
            while iter.valid() {
                if let (Some(key), Some(value)) = (iter.key(), iter.value()) {
                    digest.update(key);
                    digest.update(value);
                }
                iter.next();
            }
            iter.status().map_err(StoreError::from)?;
        }
        Ok((digest.finalize(), reader.revisions().current))
    }
}

/// etcd's keep rule at `at` over what `reader` sees (see the module doc).
fn hash_at(reader: &Reader<'_>, revisions: Revisions, at: i64) -> Result<KvHash, StoreError> {
    let mut digest = CASTAGNOLI.digest();
    // etcd starts with its bucket's name.
    digest.update(b"key");
    let mut iter = reader.iterator(CF_KV, None)?;
    iter.seek_to_first();
    // The key whose versions are being walked, and whether its newest version at
    // `at` has been met (versions come newest first).
    let mut current_key: Vec<u8> = Vec::new();
    let mut newest_seen = false;
    while iter.valid() {
        let (Some(raw_key), Some(record)) = (iter.key(), iter.value()) else {
            break;
        };
        let (escaped, version_revision) = split_version_key(raw_key)?;
        if escaped != current_key.as_slice() {
            current_key.clear();
            current_key.extend_from_slice(escaped);
            newest_seen = false;
        }
        if version_revision <= at {
            let newest = !newest_seen;
            newest_seen = true;
            let kept = version_revision > revisions.compacted
                || (newest && !StoredVersion::is_tombstone(record));
            if kept {
                digest.update(raw_key);
                digest.update(record);
            }
        }
        iter.next();
    }
    iter.status().map_err(StoreError::from)?;
    Ok(KvHash {
        hash: digest.finalize(),
        revision: at,
        compacted: revisions.compacted,
        current: revisions.current,
    })
}
