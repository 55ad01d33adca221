//! The store's counters and raft bookkeeping in the `meta` column family.
//!
//! Every write batch that changes data also rewrites the counters it moved and the
//! applied log id, so that after a crash the store is exactly the prefix of the log it
//! says it applied. This module only reads and stages these records; it never commits.

use quantykube_raft::{LogId, StoredMembership};
use rocksdb::{Snapshot, WriteBatch};

use super::{RevisionStore, StoreError, CF_META};

const CURRENT_REVISION: &[u8] = b"current_revision";
const COMPACTED_REVISION: &[u8] = b"compacted_revision";
const APPLIED_LOG_ID: &[u8] = b"applied_log_id";
const MEMBERSHIP: &[u8] = b"membership";
/// Present once the `latest` column family holds every live key (`latest.rs`).
const LATEST_INDEX_BUILT: &[u8] = b"latest_index_built";

/// A new store is at revision 1, as etcd; -1 means "never compacted", as etcd.
const INITIAL_REVISION: i64 = 1;
const NEVER_COMPACTED: i64 = -1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revisions {
    pub current: i64,
    pub compacted: i64,
}

/// What raft needs back after a restart: the last applied log id and membership.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct AppliedState {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
}

fn get(
    store: &RevisionStore,
    snapshot: Option<&Snapshot<'_>>,
    key: &[u8],
) -> Result<Option<Vec<u8>>, StoreError> {
    let cf = store.cf(CF_META)?;
    Ok(match snapshot {
        Some(s) => s.get_cf(cf, key)?,
        None => store.db.get_cf(cf, key)?,
    })
}

fn get_i64(
    store: &RevisionStore,
    snapshot: Option<&Snapshot<'_>>,
    key: &[u8],
    default: i64,
) -> Result<i64, StoreError> {
    match get(store, snapshot, key)? {
        None => Ok(default),
        Some(raw) => raw
            .as_slice()
            .try_into()
            .map(i64::from_be_bytes)
            .map_err(|_| StoreError::corrupt("bad revision counter")),
    }
}

pub fn read_revisions(
    store: &RevisionStore,
    snapshot: Option<&Snapshot<'_>>,
) -> Result<Revisions, StoreError> {
    Ok(Revisions {
        current: get_i64(store, snapshot, CURRENT_REVISION, INITIAL_REVISION)?,
        compacted: get_i64(store, snapshot, COMPACTED_REVISION, NEVER_COMPACTED)?,
    })
}

fn get_json<T: serde::de::DeserializeOwned + Default>(
    store: &RevisionStore,
    snapshot: Option<&Snapshot<'_>>,
    key: &[u8],
) -> Result<T, StoreError> {
    match get(store, snapshot, key)? {
        None => Ok(T::default()),
        Some(raw) => serde_json::from_slice(&raw)
            .map_err(|e| StoreError::corrupt(format!("meta record: {e}"))),
    }
}

pub fn read_applied(store: &RevisionStore) -> Result<AppliedState, StoreError> {
    Ok(AppliedState {
        last_applied: get_json(store, None, APPLIED_LOG_ID)?,
        membership: get_json(store, None, MEMBERSHIP)?,
    })
}

pub fn read_applied_at(
    store: &RevisionStore,
    snapshot: &Snapshot<'_>,
) -> Result<AppliedState, StoreError> {
    Ok(AppliedState {
        last_applied: get_json(store, Some(snapshot), APPLIED_LOG_ID)?,
        membership: get_json(store, Some(snapshot), MEMBERSHIP)?,
    })
}

pub fn stage_current_revision(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    revision: i64,
) -> Result<(), StoreError> {
    batch.put_cf(store.cf(CF_META)?, CURRENT_REVISION, revision.to_be_bytes());
    Ok(())
}

pub fn stage_compacted_revision(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    revision: i64,
) -> Result<(), StoreError> {
    batch.put_cf(
        store.cf(CF_META)?,
        COMPACTED_REVISION,
        revision.to_be_bytes(),
    );
    Ok(())
}

fn stage_json<T: serde::Serialize>(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    key: &[u8],
    value: &T,
) -> Result<(), StoreError> {
    let raw =
        serde_json::to_vec(value).map_err(|e| StoreError::corrupt(format!("meta record: {e}")))?;
    batch.put_cf(store.cf(CF_META)?, key, raw);
    Ok(())
}

pub fn stage_applied_log_id(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    log_id: &LogId,
) -> Result<(), StoreError> {
    stage_json(store, batch, APPLIED_LOG_ID, &Some(log_id))
}

/// Forgets the applied log id: the store no longer claims to reflect any log prefix.
pub fn stage_forget_applied(
    store: &RevisionStore,
    batch: &mut WriteBatch,
) -> Result<(), StoreError> {
    batch.delete_cf(store.cf(CF_META)?, APPLIED_LOG_ID);
    Ok(())
}

/// True for the meta record a snapshot install must write last.
pub fn is_applied_log_id(key: &[u8]) -> bool {
    key == APPLIED_LOG_ID
}

pub fn stage_membership(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    membership: &StoredMembership,
) -> Result<(), StoreError> {
    stage_json(store, batch, MEMBERSHIP, membership)
}

const PHYSICALLY_COMPACTED: &[u8] = b"physically_compacted_revision";

pub fn read_latest_index_built(store: &RevisionStore) -> Result<bool, StoreError> {
    Ok(get(store, None, LATEST_INDEX_BUILT)?.is_some())
}

pub fn stage_latest_index_built(
    store: &RevisionStore,
    batch: &mut WriteBatch,
) -> Result<(), StoreError> {
    batch.put_cf(store.cf(CF_META)?, LATEST_INDEX_BUILT, []);
    Ok(())
}

/// How far compaction has actually deleted old versions; trails the compacted revision
/// while the worker runs behind it, or after a crash until it resumes.
pub fn read_physically_compacted(store: &RevisionStore) -> Result<i64, StoreError> {
    get_i64(store, None, PHYSICALLY_COMPACTED, 0)
}

pub fn read_physically_compacted_at(
    store: &RevisionStore,
    snapshot: &Snapshot<'_>,
) -> Result<i64, StoreError> {
    get_i64(store, Some(snapshot), PHYSICALLY_COMPACTED, 0)
}

pub fn stage_physically_compacted(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    revision: i64,
) -> Result<(), StoreError> {
    batch.put_cf(
        store.cf(CF_META)?,
        PHYSICALLY_COMPACTED,
        revision.to_be_bytes(),
    );
    Ok(())
}

const MEMBER_ATTRIBUTES_PREFIX: &[u8] = b"member_attributes/";

fn member_attributes_key(member_id: u64) -> Vec<u8> {
    let mut key = MEMBER_ATTRIBUTES_PREFIX.to_vec();
    key.extend_from_slice(&member_id.to_be_bytes());
    key
}

/// What a member published about itself (name, client URLs), if it did.
pub fn read_member_attributes(
    store: &RevisionStore,
    member_id: u64,
) -> Result<Option<crate::proto::command::MemberAttributes>, StoreError> {
    member_attributes(store, None, member_id)
}

/// [`read_member_attributes`] as of `snapshot`.
pub fn read_member_attributes_at(
    store: &RevisionStore,
    snapshot: &Snapshot<'_>,
    member_id: u64,
) -> Result<Option<crate::proto::command::MemberAttributes>, StoreError> {
    member_attributes(store, Some(snapshot), member_id)
}

fn member_attributes(
    store: &RevisionStore,
    snapshot: Option<&Snapshot<'_>>,
    member_id: u64,
) -> Result<Option<crate::proto::command::MemberAttributes>, StoreError> {
    use prost::Message;
    get(store, snapshot, &member_attributes_key(member_id))?
        .map(|raw| {
            crate::proto::command::MemberAttributes::decode(raw.as_slice())
                .map_err(|e| StoreError::corrupt(format!("member attributes: {e}")))
        })
        .transpose()
}

pub fn stage_member_attributes(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    attributes: &crate::proto::command::MemberAttributes,
) -> Result<(), StoreError> {
    use prost::Message;
    batch.put_cf(
        store.cf(CF_META)?,
        member_attributes_key(attributes.member_id),
        attributes.encode_to_vec(),
    );
    Ok(())
}

pub fn stage_forget_member_attributes(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    member_id: u64,
) -> Result<(), StoreError> {
    batch.delete_cf(store.cf(CF_META)?, member_attributes_key(member_id));
    Ok(())
}

/// Every value of the meta column family under `prefix`, in key order.
pub(super) fn values_under(
    store: &RevisionStore,
    prefix: &[u8],
) -> Result<Vec<Box<[u8]>>, StoreError> {
    let cf = store.cf(CF_META)?;
    let mut values = Vec::new();
    let iter = store.db.iterator_cf(
        cf,
        rocksdb::IteratorMode::From(prefix, rocksdb::Direction::Forward),
    );
    for item in iter {
        let (key, value) = item?;
        if !key.starts_with(prefix) {
            break;
        }
        values.push(value);
    }
    Ok(values)
}

/// One record per member the cluster removed: etcd never lets a removed id back.
const REMOVED_MEMBER_PREFIX: &[u8] = b"removed_member/";

fn removed_member_key(member_id: u64) -> Vec<u8> {
    let mut key = REMOVED_MEMBER_PREFIX.to_vec();
    key.extend_from_slice(&member_id.to_be_bytes());
    key
}

pub fn stage_removed_member(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    member_id: u64,
) -> Result<(), StoreError> {
    batch.put_cf(store.cf(CF_META)?, removed_member_key(member_id), []);
    Ok(())
}

pub fn is_removed_member(store: &RevisionStore, member_id: u64) -> Result<bool, StoreError> {
    Ok(get(store, None, &removed_member_key(member_id))?.is_some())
}

/// Every id the applied membership changes removed, in id order.
pub fn read_removed_members(store: &RevisionStore) -> Result<Vec<u64>, StoreError> {
    removed_members(store, rocksdb::ReadOptions::default())
}

/// [`read_removed_members`] as of `snapshot`.
pub fn read_removed_members_at(
    store: &RevisionStore,
    snapshot: &Snapshot<'_>,
) -> Result<Vec<u64>, StoreError> {
    let mut opts = rocksdb::ReadOptions::default();
    opts.set_snapshot(snapshot);
    removed_members(store, opts)
}

fn removed_members(
    store: &RevisionStore,
    opts: rocksdb::ReadOptions,
) -> Result<Vec<u64>, StoreError> {
    let cf = store.cf(CF_META)?;
    let mut ids = Vec::new();
    let iter = store.db.iterator_cf_opt(
        cf,
        opts,
        rocksdb::IteratorMode::From(REMOVED_MEMBER_PREFIX, rocksdb::Direction::Forward),
    );
    for item in iter {
        let (key, _) = item?;
        let Some(raw) = key.strip_prefix(REMOVED_MEMBER_PREFIX) else {
            break;
        };
        let id: [u8; 8] = raw
            .try_into()
            .map_err(|_| StoreError::corrupt("bad removed member record"))?;
        ids.push(u64::from_be_bytes(id));
    }
    Ok(ids)
}
