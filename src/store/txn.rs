//! etcd's transaction semantics: compares, the branch path, and the checks that must
//! pass before a transaction changes anything.
//!
//! etcd decides every branch of a (nested) transaction against the store as it was
//! before the transaction, checks the requests on that path, and only then executes
//! them. This module owns that decision and those checks; executing the operations is
//! the write transaction's job (see `write.rs`). It never stages a change.

use super::meta::Revisions;
use super::range::{read_revision, Reader};
use super::StoreError;
use crate::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::proto::etcdserverpb::request_op::Request;
use crate::proto::etcdserverpb::{Compare, RequestOp, TxnRequest};
use crate::proto::mvccpb::KeyValue;

/// The branch taken by a transaction and by every nested transaction on that branch,
/// in the order they execute.
#[derive(Debug, Default)]
pub struct Path {
    decisions: Vec<bool>,
}

impl Path {
    /// Decides every compare on the taken path against the pre-transaction store.
    pub fn decide(reader: &Reader<'_>, at: i64, txn: &TxnRequest) -> Result<Self, StoreError> {
        let mut path = Path::default();
        path.push(reader, at, txn)?;
        Ok(path)
    }

    fn push(&mut self, reader: &Reader<'_>, at: i64, txn: &TxnRequest) -> Result<(), StoreError> {
        let mut succeeded = true;
        for compare in &txn.compare {
            if !compare_holds(reader, at, compare)? {
                succeeded = false;
                break;
            }
        }
        self.decisions.push(succeeded);
        for op in branch(txn, succeeded) {
            if let Some(Request::RequestTxn(nested)) = &op.request {
                self.push(reader, at, nested)?;
            }
        }
        Ok(())
    }

    /// Hands out the decisions in execution order.
    pub fn cursor(&self) -> impl Iterator<Item = bool> + '_ {
        self.decisions.iter().copied()
    }
}

/// The operations a transaction runs once its compares decided `succeeded`.
pub fn branch(txn: &TxnRequest, succeeded: bool) -> &[RequestOp] {
    if succeeded {
        &txn.success
    } else {
        &txn.failure
    }
}

/// True when the transaction and its nested transactions contain no write.
pub fn is_read_only(txn: &TxnRequest) -> bool {
    txn.success
        .iter()
        .chain(&txn.failure)
        .all(|op| match &op.request {
            Some(Request::RequestPut(_)) | Some(Request::RequestDeleteRange(_)) => false,
            Some(Request::RequestTxn(nested)) => is_read_only(nested),
            _ => true,
        })
}

/// True when every read in the transaction asked for a serializable read.
pub fn is_serializable(txn: &TxnRequest) -> bool {
    txn.success
        .iter()
        .chain(&txn.failure)
        .all(|op| match &op.request {
            Some(Request::RequestRange(r)) => r.serializable,
            Some(Request::RequestTxn(nested)) => is_serializable(nested),
            _ => true,
        })
}

/// The checks etcd makes along the taken path before executing: puts that need an
/// existing key or lease, and reads at a revision that must exist.
pub fn check_path(
    reader: &Reader<'_>,
    revisions: Revisions,
    txn: &TxnRequest,
    path: &mut dyn Iterator<Item = bool>,
    lease_exists: &dyn Fn(i64) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    let succeeded = path.next().unwrap_or(false);
    let write = !is_read_only(txn);
    for op in branch(txn, succeeded) {
        match &op.request {
            Some(Request::RequestPut(put)) if write => {
                if (put.ignore_value || put.ignore_lease)
                    && reader.get(&put.key, revisions.current)?.is_none()
                {
                    return Err(StoreError::KeyNotFound);
                }
                if put.lease != 0 && !lease_exists(put.lease)? {
                    return Err(StoreError::LeaseNotFound);
                }
            }
            Some(Request::RequestRange(range)) if range.revision != 0 => {
                read_revision(revisions, range.revision)?;
            }
            Some(Request::RequestTxn(nested)) => {
                check_path(reader, revisions, nested, path, lease_exists)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// etcd's compare: over a key range it holds only if it holds for every key; on no key
/// it compares against an empty record, except that a value compare then fails.
fn compare_holds(reader: &Reader<'_>, at: i64, compare: &Compare) -> Result<bool, StoreError> {
    let mut holds = true;
    let mut any = false;
    reader.scan(
        &compare.key,
        &compare.range_end,
        at,
        |key, revision, raw| {
            any = true;
            let kv = super::range::key_value(key, revision, raw, true)?;
            holds = compare_key_value(compare, &kv);
            Ok(holds)
        },
    )?;
    if !any {
        if compare.target() == CompareTarget::Value {
            return Ok(false);
        }
        return Ok(compare_key_value(compare, &KeyValue::default()));
    }
    Ok(holds)
}

fn compare_key_value(compare: &Compare, kv: &KeyValue) -> bool {
    let number = |pick: fn(&TargetUnion) -> Option<i64>| {
        compare.target_union.as_ref().and_then(pick).unwrap_or(0)
    };
    let ordering = match compare.target() {
        CompareTarget::Value => {
            let wanted: &[u8] = match &compare.target_union {
                Some(TargetUnion::Value(v)) => v,
                _ => &[],
            };
            kv.value.as_ref().cmp(wanted)
        }
        CompareTarget::Create => kv.create_revision.cmp(&number(|t| match t {
            TargetUnion::CreateRevision(r) => Some(*r),
            _ => None,
        })),
        CompareTarget::Mod => kv.mod_revision.cmp(&number(|t| match t {
            TargetUnion::ModRevision(r) => Some(*r),
            _ => None,
        })),
        CompareTarget::Version => kv.version.cmp(&number(|t| match t {
            TargetUnion::Version(r) => Some(*r),
            _ => None,
        })),
        CompareTarget::Lease => kv.lease.cmp(&number(|t| match t {
            TargetUnion::Lease(r) => Some(*r),
            _ => None,
        })),
    };
    match compare.result() {
        CompareResult::Equal => ordering.is_eq(),
        CompareResult::NotEqual => ordering.is_ne(),
        CompareResult::Greater => ordering.is_gt(),
        CompareResult::Less => ordering.is_lt(),
    }
}
