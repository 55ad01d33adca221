//! The checks etcd makes on a request before it reaches raft: shape only, never data.
//!
//! Everything here is decided from the request alone, so a bad request is refused on
//! the node that received it, with etcd's error, and never enters the log. Checks that
//! depend on the store (a missing key for `ignore_value`, a compacted revision) belong
//! to the apply path instead.

use tonic::Status;

use super::status;
use crate::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use crate::proto::etcdserverpb::request_op::Request;
use crate::proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};

pub fn range(req: &RangeRequest) -> Result<(), Status> {
    if req.key.is_empty() {
        return Err(status::empty_key());
    }
    if SortOrder::try_from(req.sort_order).is_err()
        || SortTarget::try_from(req.sort_target).is_err()
    {
        return Err(status::invalid_sort_option());
    }
    Ok(())
}

/// etcd 3.7's `checkRangeStreamRequest`: Range's checks, then no order but by key
/// ascending (a target without an order is allowed, as `IsDefaultOrdering` reads it),
/// then no revision filters.
pub fn range_stream(req: &RangeRequest) -> Result<(), Status> {
    range(req)?;
    let order = SortOrder::try_from(req.sort_order).unwrap_or(SortOrder::None);
    let by_key =
        SortTarget::try_from(req.sort_target).unwrap_or(SortTarget::Key) == SortTarget::Key;
    if !(order == SortOrder::None || by_key && order == SortOrder::Ascend) {
        return Err(status::range_stream_custom_sort());
    }
    if req.min_mod_revision != 0
        || req.max_mod_revision != 0
        || req.min_create_revision != 0
        || req.max_create_revision != 0
    {
        return Err(status::range_stream_revision_filters());
    }
    Ok(())
}

pub fn put(req: &PutRequest) -> Result<(), Status> {
    if req.key.is_empty() {
        return Err(status::empty_key());
    }
    if req.ignore_value && !req.value.is_empty() {
        return Err(status::value_provided());
    }
    if req.ignore_lease && req.lease != 0 {
        return Err(status::lease_provided());
    }
    Ok(())
}

pub fn delete_range(req: &DeleteRangeRequest) -> Result<(), Status> {
    if req.key.is_empty() {
        return Err(status::empty_key());
    }
    Ok(())
}

/// etcd's transaction checks: operation count, keys, every nested request, then the
/// put/delete overlap rule.
pub fn txn(req: &TxnRequest, max_txn_ops: usize) -> Result<(), Status> {
    check_txn(req, max_txn_ops)?;
    Overlaps::check(&req.success)?;
    Overlaps::check(&req.failure)?;
    Ok(())
}

fn check_txn(req: &TxnRequest, max_txn_ops: usize) -> Result<(), Status> {
    let ops = req
        .compare
        .len()
        .max(req.success.len())
        .max(req.failure.len());
    if ops > max_txn_ops {
        return Err(status::too_many_ops());
    }
    if req.compare.iter().any(|c| c.key.is_empty()) {
        return Err(status::empty_key());
    }
    // A nested transaction may use only what the enclosing lists left over, as in etcd.
    for op in req.success.iter().chain(&req.failure) {
        check_op(op, max_txn_ops - ops)?;
    }
    Ok(())
}

fn check_op(op: &RequestOp, max_txn_ops: usize) -> Result<(), Status> {
    match &op.request {
        Some(Request::RequestRange(r)) => range(r),
        Some(Request::RequestPut(p)) => put(p),
        Some(Request::RequestDeleteRange(d)) => delete_range(d),
        Some(Request::RequestTxn(t)) => check_txn(t, max_txn_ops),
        // etcd answers an empty operation this way.
        None => Err(status::key_not_found()),
    }
}

/// A half-open key interval as etcd's duplicate check sees it: an empty end is
/// "unbounded", and a point `k` is `[k, k\0)`.
#[derive(Clone, Debug)]
struct Interval {
    begin: Vec<u8>,
    end: Vec<u8>,
}

impl Interval {
    fn of_delete(key: &[u8], range_end: &[u8]) -> Self {
        if range_end.is_empty() {
            Self::point(key)
        } else {
            Interval {
                begin: key.to_vec(),
                end: range_end.to_vec(),
            }
        }
    }

    fn point(key: &[u8]) -> Self {
        let mut end = key.to_vec();
        end.push(0);
        Interval {
            begin: key.to_vec(),
            end,
        }
    }

    fn contains(&self, key: &[u8]) -> bool {
        key >= self.begin.as_slice() && (self.end.is_empty() || key < self.end.as_slice())
    }
}

/// etcd's rule: within one level of a transaction no key may be both put twice, or put
/// and deleted; the two branches of a nested transaction exclude each other.
#[derive(Default)]
struct Overlaps {
    puts: std::collections::HashSet<Vec<u8>>,
    deletes: Vec<Interval>,
}

impl Overlaps {
    fn check(ops: &[RequestOp]) -> Result<Self, Status> {
        let mut level = Overlaps::default();
        for op in ops {
            if let Some(Request::RequestDeleteRange(d)) = &op.request {
                level
                    .deletes
                    .push(Interval::of_delete(&d.key, &d.range_end));
            }
        }
        for op in ops {
            let Some(Request::RequestTxn(nested)) = &op.request else {
                continue;
            };
            let then = Overlaps::check(&nested.success)?;
            let otherwise = Overlaps::check(&nested.failure)?;
            for key in &then.puts {
                if level.puts.contains(key) || level.deleted(key) {
                    return Err(status::duplicate_key());
                }
                level.puts.insert(key.clone());
            }
            for key in &otherwise.puts {
                if level.puts.contains(key) && !then.puts.contains(key) || level.deleted(key) {
                    return Err(status::duplicate_key());
                }
                level.puts.insert(key.clone());
            }
            level.deletes.extend(then.deletes);
            level.deletes.extend(otherwise.deletes);
        }
        for op in ops {
            let Some(Request::RequestPut(p)) = &op.request else {
                continue;
            };
            if level.puts.contains(p.key.as_ref()) || level.deleted(&p.key) {
                return Err(status::duplicate_key());
            }
            level.puts.insert(p.key.to_vec());
        }
        Ok(level)
    }

    fn deleted(&self, key: &[u8]) -> bool {
        self.deletes.iter().any(|d| d.contains(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::etcdserverpb::Compare;

    fn put_op(key: &str) -> RequestOp {
        RequestOp {
            request: Some(Request::RequestPut(PutRequest {
                key: key.as_bytes().to_vec().into(),
                ..Default::default()
            })),
        }
    }

    fn delete_op(key: &str, end: &str) -> RequestOp {
        RequestOp {
            request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
                key: key.as_bytes().to_vec().into(),
                range_end: end.as_bytes().to_vec().into(),
                ..Default::default()
            })),
        }
    }

    fn nested(success: Vec<RequestOp>, failure: Vec<RequestOp>) -> RequestOp {
        RequestOp {
            request: Some(Request::RequestTxn(TxnRequest {
                compare: vec![],
                success,
                failure,
            })),
        }
    }

    fn txn_of(success: Vec<RequestOp>) -> TxnRequest {
        TxnRequest {
            compare: vec![],
            success,
            failure: vec![],
        }
    }

    fn message(r: Result<(), Status>) -> String {
        r.err().map(|s| s.message().to_string()).unwrap_or_default()
    }

    #[test]
    fn duplicate_puts_and_put_inside_delete_are_refused() {
        let dup = "etcdserver: duplicate key given in txn request";
        assert_eq!(
            message(txn(&txn_of(vec![put_op("a"), put_op("a")]), 128)),
            dup
        );
        assert_eq!(
            message(txn(&txn_of(vec![delete_op("a", "c"), put_op("b")]), 128)),
            dup
        );
        assert_eq!(
            message(txn(&txn_of(vec![delete_op("a", ""), put_op("a")]), 128)),
            dup
        );
        // Overlapping deletes are allowed, as in etcd.
        assert!(txn(&txn_of(vec![delete_op("a", "c"), delete_op("b", "d")]), 128).is_ok());
        // A put outside a half-open delete range is fine.
        assert!(txn(&txn_of(vec![delete_op("a", "c"), put_op("c")]), 128).is_ok());
    }

    #[test]
    fn nested_branches_exclude_each_other_but_not_the_outer_level() {
        let ok = txn_of(vec![nested(vec![put_op("a")], vec![put_op("a")])]);
        assert!(txn(&ok, 128).is_ok());
        let clash = txn_of(vec![nested(vec![put_op("a")], vec![]), put_op("a")]);
        assert!(txn(&clash, 128).is_err());
        let deleted_inside = txn_of(vec![nested(vec![delete_op("a", "")], vec![]), put_op("a")]);
        assert!(txn(&deleted_inside, 128).is_err());
    }

    #[test]
    fn too_many_ops_counts_the_largest_of_compares_and_branches() {
        let mut req = txn_of(vec![put_op("a"), put_op("b"), put_op("c")]);
        assert_eq!(
            message(txn(&req, 2)),
            "etcdserver: too many operations in txn request"
        );
        req.success.truncate(2);
        req.compare = vec![Compare::default(); 3];
        assert!(txn(&req, 2).is_err());
    }

    #[test]
    fn empty_keys_and_ignore_misuse_get_etcds_errors() {
        assert_eq!(
            message(put(&PutRequest::default())),
            "etcdserver: key is not provided"
        );
        let mut p = PutRequest {
            key: "k".into(),
            value: "v".into(),
            ignore_value: true,
            ..Default::default()
        };
        assert_eq!(message(put(&p)), "etcdserver: value is provided");
        p.value = Default::default();
        p.ignore_value = false;
        p.ignore_lease = true;
        p.lease = 5;
        assert_eq!(message(put(&p)), "etcdserver: lease is provided");
        let bad_sort = RangeRequest {
            key: "k".into(),
            sort_order: 7,
            ..Default::default()
        };
        assert_eq!(message(range(&bad_sort)), "etcdserver: invalid sort option");
        let empty_op = txn_of(vec![RequestOp { request: None }]);
        assert_eq!(message(txn(&empty_op, 128)), "etcdserver: key not found");
    }

    #[test]
    fn range_stream_refuses_orders_and_filters_as_etcd_3_7() {
        let base = RangeRequest {
            key: "k".into(),
            ..Default::default()
        };
        let with = |order: SortOrder, target: SortTarget| RangeRequest {
            sort_order: order as i32,
            sort_target: target as i32,
            ..base.clone()
        };
        let sorts = "RangeStream does not support custom sort orders";
        assert!(range_stream(&with(SortOrder::None, SortTarget::Key)).is_ok());
        assert!(range_stream(&with(SortOrder::Ascend, SortTarget::Key)).is_ok());
        // No order: a target alone is "default ordering" in etcd 3.7.
        assert!(range_stream(&with(SortOrder::None, SortTarget::Value)).is_ok());
        assert_eq!(
            message(range_stream(&with(SortOrder::Descend, SortTarget::Key))),
            sorts
        );
        assert_eq!(
            message(range_stream(&with(SortOrder::Ascend, SortTarget::Mod))),
            sorts
        );
        let refused = range_stream(&with(SortOrder::Descend, SortTarget::Create)).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unimplemented);
        for filtered in [
            RangeRequest {
                min_mod_revision: 1,
                ..base.clone()
            },
            RangeRequest {
                max_mod_revision: 1,
                ..base.clone()
            },
            RangeRequest {
                min_create_revision: 1,
                ..base.clone()
            },
            RangeRequest {
                max_create_revision: 1,
                ..base.clone()
            },
        ] {
            assert_eq!(
                message(range_stream(&filtered)),
                "RangeStream does not support revision filters"
            );
        }
        // Range's own checks come first.
        let empty = RangeRequest {
            min_mod_revision: 1,
            ..Default::default()
        };
        assert_eq!(
            message(range_stream(&empty)),
            "etcdserver: key is not provided"
        );
        let bad_sort = RangeRequest {
            sort_order: 9,
            ..base.clone()
        };
        assert_eq!(
            message(range_stream(&bad_sort)),
            "etcdserver: invalid sort option"
        );
    }
}
