//! The admin API's snapshot records (`admin_snapshot/<name>` in the meta column
//! family): which member's disk holds each snapshot file and what the file holds.
//!
//! Records change only by applying a `ChangeSnapshotRecord` command, so every member
//! knows every snapshot and its version is the log index of its last change. The files
//! themselves are the holding member's (`admin::snapshots`); nothing here touches them.

use prost::Message;
use rocksdb::WriteBatch;

use super::{meta, RevisionStore, StoreError, CF_META};
use crate::proto::command::change_snapshot_record::Change;
use crate::proto::command::{ChangeSnapshotRecord, SnapshotRecord};

const PREFIX: &[u8] = b"admin_snapshot/";

fn key(name: &str) -> Vec<u8> {
    [PREFIX, name.as_bytes()].concat()
}

/// Every snapshot record, in order of name.
pub fn read_snapshot_records(store: &RevisionStore) -> Result<Vec<SnapshotRecord>, StoreError> {
    meta::values_under(store, PREFIX)?
        .iter()
        .map(|value| decode(value))
        .collect()
}

fn read(store: &RevisionStore, name: &str) -> Result<Option<SnapshotRecord>, StoreError> {
    let cf = store.cf(CF_META)?;
    store
        .db
        .get_cf(cf, key(name))?
        .map(|raw| decode(&raw))
        .transpose()
}

fn decode(raw: &[u8]) -> Result<SnapshotRecord, StoreError> {
    SnapshotRecord::decode(raw).map_err(|e| StoreError::corrupt(format!("snapshot record: {e}")))
}

/// Applies `change` at log index `index`; returns the record as it now is (as it was,
/// for a delete). A refused change stages nothing.
pub fn stage_change(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    index: u64,
    change: &ChangeSnapshotRecord,
) -> Result<Option<SnapshotRecord>, StoreError> {
    let version = i64::try_from(index).map_err(|_| StoreError::corrupt("log index overflow"))?;
    let cf = store.cf(CF_META)?;
    let now = change.time_unix_nanos;
    match &change.change {
        Some(Change::Create(create)) => {
            if read(store, &create.name)?.is_some() {
                return Err(StoreError::ResourceExists);
            }
            let record = SnapshotRecord {
                version,
                create_time_unix_nanos: now,
                update_time_unix_nanos: now,
                // CREATING, whatever the proposer said.
                state: 1,
                revision: 0,
                size: 0,
                sha256: String::new(),
                error_reason: String::new(),
                ..create.clone()
            };
            batch.put_cf(cf, key(&record.name), record.encode_to_vec());
            Ok(Some(record))
        }
        Some(Change::Finish(finish)) => {
            let Some(current) = read(store, &finish.name)?.filter(|r| r.uid == finish.uid) else {
                return Ok(None);
            };
            let record = SnapshotRecord {
                version,
                update_time_unix_nanos: now,
                state: finish.state,
                revision: finish.revision,
                size: finish.size,
                sha256: finish.sha256.clone(),
                error_reason: finish.error_reason.clone(),
                ..current
            };
            batch.put_cf(cf, key(&record.name), record.encode_to_vec());
            Ok(Some(record))
        }
        Some(Change::Delete(guard)) => {
            let current = read(store, &guard.name)?.ok_or(StoreError::ResourceNotFound)?;
            let uid_differs = !guard.uid.is_empty() && guard.uid != current.uid;
            let version_differs = guard.version != 0 && guard.version != current.version;
            if uid_differs || version_differs {
                return Err(StoreError::VersionMismatch);
            }
            batch.delete_cf(cf, key(&guard.name));
            Ok(Some(current))
        }
        None => Err(StoreError::corrupt("empty snapshot record change")),
    }
}
