//! An etcd snapshot file into a new store: every version of the `key` bucket at its
//! revision, the leases with their TTLs, and the compaction the `meta` bucket records,
//! so that revisions (Kubernetes' `resourceVersion`s) survive the move.
//!
//! Written by QuantyKube or by etcd 3.4-3.6 alike: only etcd's schema counts. Users,
//! roles and the auth flag are carried; members, alarms and the consistent index are
//! not, as etcd's own restore drops them:
//! the restored data dir founds a new cluster. This module never decides where the
//! store lives (`cli` does).

use bytes::Bytes;
use quantykube_bbolt::Database;

use super::schema;
use super::BackupError;
use crate::store::{ImportSummary, LeaseRecord, RevisionStore, StoredChange};

fn not_etcd(what: impl std::fmt::Display) -> BackupError {
    BackupError::NotEtcd(what.to_string())
}

/// The main revision of a `meta` compaction record, if present.
fn compact_revision(db: &Database, key: &[u8]) -> Result<Option<i64>, BackupError> {
    let Some(meta) = db.bucket(schema::META)? else {
        return Ok(None);
    };
    for entry in meta.entries() {
        let (k, v) = entry?;
        if k == key {
            let revision = schema::parse_revision_key(&v)
                .ok_or_else(|| not_etcd(format!("bad {} record", String::from_utf8_lossy(key))))?;
            return Ok(Some(revision.main));
        }
    }
    Ok(None)
}

/// Imports `db` into `store`, which must be new and empty.
pub fn import(db: &Database, store: &RevisionStore) -> Result<ImportSummary, BackupError> {
    let keys = db
        .bucket(schema::KEY)?
        .ok_or_else(|| not_etcd("it has no key bucket"))?;
    let mut import = store.import()?;
    for entry in keys.entries() {
        let (raw_revision, raw) = entry?;
        let revision = schema::parse_revision_key(&raw_revision)
            .ok_or_else(|| not_etcd("a key bucket entry is not keyed by a revision"))?;
        let sub = u32::try_from(revision.sub).map_err(|_| {
            not_etcd(format!(
                "revision {}_{} out of range",
                revision.main, revision.sub
            ))
        })?;
        let mut kv = schema::parse_key_value(&raw).map_err(|e| {
            not_etcd(format!(
                "the version at revision {} does not decode: {e}",
                revision.main
            ))
        })?;
        let key = Bytes::clone(&kv.key);
        let version = if revision.tombstone {
            None
        } else {
            // etcd's records carry their revision; an older etcd's may leave it implied.
            if kv.mod_revision == 0 {
                kv.mod_revision = revision.main;
            }
            Some(kv)
        };
        import.change(&StoredChange {
            main: revision.main,
            sub,
            key,
            version,
        })?;
    }
    if let Some(leases) = db.bucket(schema::LEASE)? {
        for entry in leases.entries() {
            let (_, raw) = entry?;
            let lease = schema::parse_lease(&raw)
                .map_err(|e| not_etcd(format!("a lease record does not decode: {e}")))?;
            import.lease(LeaseRecord {
                id: lease.id,
                ttl: lease.ttl,
                remaining_ttl: lease.remaining_ttl,
            })?;
        }
    }
    // Users, roles and whether auth is on travel with the data, as etcd's restore
    // keeps them.
    let bucket = |name: &[u8]| -> Result<schema::Entries, BackupError> {
        let Some(bucket) = db.bucket(name)? else {
            return Ok(Vec::new());
        };
        let mut entries = Vec::new();
        for entry in bucket.entries() {
            entries.push(entry?);
        }
        Ok(entries)
    };
    let auth = schema::parse_auth(
        &bucket(schema::AUTH)?,
        &bucket(schema::AUTH_USERS)?,
        &bucket(schema::AUTH_ROLES)?,
    )
    .map_err(not_etcd)?;
    import.auth(&auth)?;
    let finished = compact_revision(db, schema::FINISHED_COMPACT)?;
    let scheduled = compact_revision(db, schema::SCHEDULED_COMPACT)?;
    // A compaction etcd had scheduled but not finished is finished when the member
    // starts, as etcd itself resumes it.
    let compacted = scheduled.max(finished).unwrap_or(-1);
    Ok(import.finish(compacted, finished.unwrap_or(0))?)
}
