//! The keys and requests locks and elections are made of: a name's prefix (`name/`), a
//! holder's key under it (the lease id in Go's `%x`), and the ranges, compares and
//! operations etcd's concurrency package sends (`WithFirstCreate`, `WithLastCreate`,
//! `WithMaxCreateRev`). Pure functions; nothing here talks to the store.

use bytes::{BufMut, Bytes, BytesMut};

use crate::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use crate::proto::etcdserverpb::request_op::Request;
use crate::proto::etcdserverpb::response_op::Response;
use crate::proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, ResponseOp,
};

/// The prefix of every key of lock or election `name`.
pub fn prefix(name: &[u8]) -> Bytes {
    let mut prefix = BytesMut::with_capacity(name.len() + 1);
    prefix.put_slice(name);
    prefix.put_u8(b'/');
    prefix.freeze()
}

/// The key a holder under `lease` owns below `prefix`: the lease id as Go's `%x`
/// prints it (lowercase, a minus sign before a negative id's magnitude).
pub fn holder_key(prefix: &[u8], lease: i64) -> Bytes {
    let id = if lease < 0 {
        format!("-{:x}", lease.unsigned_abs())
    } else {
        format!("{lease:x}")
    };
    let mut key = BytesMut::with_capacity(prefix.len() + id.len());
    key.put_slice(prefix);
    key.put_slice(id.as_bytes());
    key.freeze()
}

/// The end of the range of every key starting with `prefix` (etcd's `GetPrefixRangeEnd`;
/// a prefix of only `0xff` bytes ranges to the end of the key space, `\0`).
pub fn prefix_end(prefix: &[u8]) -> Bytes {
    match prefix.iter().rposition(|&b| b < 0xff) {
        Some(last) => {
            let mut end = prefix[..=last].to_vec();
            end[last] += 1;
            Bytes::from(end)
        }
        None => Bytes::from_static(&[0]),
    }
}

fn newest_or_oldest(prefix: &[u8], order: SortOrder) -> RangeRequest {
    RangeRequest {
        key: Bytes::copy_from_slice(prefix),
        range_end: prefix_end(prefix),
        limit: 1,
        sort_order: order as i32,
        sort_target: SortTarget::Create as i32,
        ..Default::default()
    }
}

/// The key under `prefix` created first: the holder or leader (`WithFirstCreate`).
pub fn first_created(prefix: &[u8]) -> RangeRequest {
    newest_or_oldest(prefix, SortOrder::Ascend)
}

/// The key under `prefix` created last at or before `max_create_revision`: the one to
/// wait for (`WithLastCreate` and `WithMaxCreateRev`).
pub fn last_created_by(prefix: &[u8], max_create_revision: i64) -> RangeRequest {
    RangeRequest {
        max_create_revision,
        ..newest_or_oldest(prefix, SortOrder::Descend)
    }
}

/// A single key.
pub fn get(key: &Bytes) -> RangeRequest {
    RangeRequest {
        key: key.clone(),
        ..Default::default()
    }
}

/// `key`'s create revision is `revision` (0: the key does not exist).
pub fn created_at(key: &Bytes, revision: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.clone(),
        range_end: Bytes::new(),
        target_union: Some(TargetUnion::CreateRevision(revision)),
    }
}

pub fn put_op(key: &Bytes, value: Bytes, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: key.clone(),
            value,
            lease,
            ..Default::default()
        })),
    }
}

pub fn range_op(range: RangeRequest) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestRange(range)),
    }
}

pub fn delete_op(key: &Bytes) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
            key: key.clone(),
            ..Default::default()
        })),
    }
}

/// The range answered by a transaction's operation `index`, if it was one.
pub fn range_at(responses: &[ResponseOp], index: usize) -> Option<&RangeResponse> {
    match responses.get(index)?.response.as_ref()? {
        Response::ResponseRange(range) => Some(range),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_keys_spell_the_lease_as_go_does() {
        assert_eq!(
            &holder_key(b"l/", 0x2040_a234_737b_130b)[..],
            b"l/2040a234737b130b"
        );
        assert_eq!(&holder_key(b"l/", 255)[..], b"l/ff");
        assert_eq!(&holder_key(b"l/", -1)[..], b"l/-1");
        assert_eq!(&holder_key(b"l/", i64::MIN)[..], b"l/-8000000000000000");
        assert_eq!(&prefix(b"")[..], b"/");
    }

    #[test]
    fn prefix_ends_are_etcds() {
        assert_eq!(&prefix_end(b"a/")[..], b"a0");
        assert_eq!(&prefix_end(b"a\xff")[..], b"b");
        assert_eq!(&prefix_end(b"\xff\xff")[..], b"\0");
    }
}
