//! The store as etcd's snapshot file: its export view laid out in etcd's buckets
//! (`schema`), written by the bbolt codec page by page as the bytes are produced, then
//! the SHA-256 of those bytes, as etcd's Snapshot RPC appends it.
//!
//! Memory stays bounded whatever the store's size: the codec streams, and the store's
//! view reads one version at a time from its RocksDB snapshot. Writes go on meanwhile.

use std::io::Write;

use quantykube_bbolt::{Source, WriteError, DEFAULT_PAGE_SIZE};
use sha2::{Digest, Sha256};

use super::schema::{self, MemberRecord};
use super::BackupError;
use crate::store::{Export, StoreError};

/// What a written snapshot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// The bbolt database's size, without the trailer.
    pub db_bytes: u64,
    pub revision: i64,
}

/// Entries of one bucket, as the codec takes them.
type Entries<'a> = Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>), StoreError>> + 'a>;

/// The etcd buckets of one export view.
struct EtcdBuckets<'a> {
    export: &'a Export<'a>,
    /// Small buckets, built once: (key, value) in key order.
    members: Vec<(Vec<u8>, Vec<u8>)>,
    removed: Vec<(Vec<u8>, Vec<u8>)>,
    meta: Vec<(Vec<u8>, Vec<u8>)>,
    alarms: Vec<(Vec<u8>, Vec<u8>)>,
    auth: Vec<(Vec<u8>, Vec<u8>)>,
    users: Vec<(Vec<u8>, Vec<u8>)>,
    roles: Vec<(Vec<u8>, Vec<u8>)>,
}

impl<'a> EtcdBuckets<'a> {
    fn new(export: &'a Export<'a>, alarms: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Self, StoreError> {
        let membership = export.membership().membership();
        let mut members = Vec::new();
        for (id, member) in membership.nodes() {
            let published = export.member_attributes(*id)?;
            let record = MemberRecord {
                id: *id,
                peer_urls: member.peer_urls.clone(),
                is_learner: !membership.voter_ids().any(|voter| voter == *id),
                name: published
                    .as_ref()
                    .map_or_else(|| member.name.clone(), |p| p.name.clone()),
                client_urls: published.map_or_else(Vec::new, |p| p.client_urls),
            };
            let json = serde_json::to_vec(&record)
                .map_err(|e| StoreError::corrupt(format!("member record: {e}")))?;
            members.push((schema::member_key(*id), json));
        }
        members.sort();
        let mut removed: Vec<_> = export
            .removed_members()?
            .into_iter()
            .map(|id| (schema::member_key(id), schema::REMOVED.to_vec()))
            .collect();
        removed.sort();
        let mut meta = vec![(
            schema::CONSISTENT_INDEX.to_vec(),
            schema::u64_value(export.applied_index()),
        )];
        let compacted = export.compacted_revision();
        if compacted > 0 {
            // As etcd's own file: the compaction decided, and how far it was carried out
            // (a restore finishes it). The view reads as compacted there either way.
            let finished = export.physically_compacted();
            if finished > 0 {
                meta.push((
                    schema::FINISHED_COMPACT.to_vec(),
                    schema::compact_revision_value(finished),
                ));
            }
            meta.push((
                schema::SCHEDULED_COMPACT.to_vec(),
                schema::compact_revision_value(compacted),
            ));
        }
        meta.sort();
        let [auth, users, roles] = schema::auth_buckets(&export.auth_records()?);
        let mut alarms = alarms;
        alarms.sort();
        Ok(EtcdBuckets {
            export,
            members,
            removed,
            meta,
            alarms,
            auth,
            users,
            roles,
        })
    }
}

impl EtcdBuckets<'_> {
    /// Whether the planted `SnapshotSkipsVersion` leaves `change` out of the file.
    #[cfg(feature = "planted-bugs")]
    fn planted_skip(&self, change: &Result<crate::store::StoredChange, StoreError>) -> bool {
        use crate::planted::{is_planted, PlantedBug};
        is_planted(PlantedBug::SnapshotSkipsVersion)
            && change
                .as_ref()
                .is_ok_and(|c| c.main == self.export.current_revision() - 1)
    }

    #[cfg(not(feature = "planted-bugs"))]
    fn planted_skip(&self, _: &Result<crate::store::StoredChange, StoreError>) -> bool {
        false
    }
}

fn fixed<'a>(entries: &'a [(Vec<u8>, Vec<u8>)]) -> Entries<'a> {
    Box::new(entries.iter().map(|(k, v)| Ok((k.clone(), v.clone()))))
}

impl Source for EtcdBuckets<'_> {
    type Error = StoreError;

    fn buckets(&self) -> Vec<Vec<u8>> {
        schema::BUCKETS.iter().map(|name| name.to_vec()).collect()
    }

    fn entries<'a>(&'a self, bucket: &[u8]) -> Result<Entries<'a>, StoreError> {
        Ok(match bucket {
            schema::KEY => Box::new(
                self.export
                    .changes()?
                    .filter(|change| !self.planted_skip(change))
                    .map(|change| {
                        let change = change?;
                        let sub = i64::from(change.sub);
                        Ok(match &change.version {
                            Some(kv) => (
                                schema::revision_key(change.main, sub, false),
                                schema::key_value_record(kv),
                            ),
                            None => (
                                schema::revision_key(change.main, sub, true),
                                schema::tombstone_record(&change.key),
                            ),
                        })
                    }),
            ),
            schema::LEASE => Box::new(self.export.leases()?.map(|lease| {
                let lease = lease?;
                Ok(schema::lease_entry(
                    lease.id,
                    lease.ttl,
                    lease.remaining_ttl,
                ))
            })),
            schema::MEMBERS => fixed(&self.members),
            schema::MEMBERS_REMOVED => fixed(&self.removed),
            schema::META => fixed(&self.meta),
            schema::ALARM => fixed(&self.alarms),
            schema::AUTH => fixed(&self.auth),
            schema::AUTH_USERS => fixed(&self.users),
            schema::AUTH_ROLES => fixed(&self.roles),
            _ => Box::new(std::iter::empty()),
        })
    }
}

/// Feeds what passes through it to a SHA-256.
struct Hashing<'w> {
    out: &'w mut dyn SnapshotSink,
    sha: Sha256,
}

impl Write for Hashing<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.sha.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Where a snapshot goes: bytes, told how many the database will have before the first.
pub trait SnapshotSink: Write {
    fn announce(&mut self, _db_bytes: u64) {}
}

impl SnapshotSink for Vec<u8> {}
impl SnapshotSink for std::fs::File {}
impl<W: Write> SnapshotSink for std::io::BufWriter<W> {}

/// Writes an export view as a bbolt database in etcd's schema to `out`, and returns its
/// SHA-256 (the snapshot file's trailer). Blocks: call it from a blocking thread.
/// `alarms` are the `alarm` bucket's entries.
pub fn write_database(
    export: &Export<'_>,
    alarms: Vec<(Vec<u8>, Vec<u8>)>,
    out: &mut dyn SnapshotSink,
) -> Result<(Written, [u8; 32]), BackupError> {
    let buckets = EtcdBuckets::new(export, alarms)?;
    let codec = |e: WriteError<StoreError>| match e {
        WriteError::Source(store) => BackupError::Store(store),
        other => BackupError::Write(other.to_string()),
    };
    let plan = quantykube_bbolt::plan(&buckets, DEFAULT_PAGE_SIZE).map_err(codec)?;
    out.announce(plan.summary().bytes);
    let mut hashing = Hashing {
        out,
        sha: Sha256::new(),
    };
    let summary = plan.write(&buckets, &mut hashing).map_err(codec)?;
    let written = Written {
        db_bytes: summary.bytes,
        revision: export.current_revision(),
    };
    Ok((written, hashing.sha.finalize().into()))
}
