//! etcd's backend schema (etcd 3.4-3.6 `mvcc/buckets.go`, `etcdserver/cindex`,
//! `membership/store.go`, `lease/lessor.go`): the bucket names of an etcd snapshot file
//! and how each bucket encodes its keys and values.
//!
//! This module owns those encodings, both ways; it never touches a file or the store.

use bytes::Bytes;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::proto::etcdserverpb::{AlarmMember, AlarmType};
use crate::proto::leasepb::Lease;
use crate::proto::mvccpb::KeyValue;

pub const ALARM: &[u8] = b"alarm";
pub const AUTH: &[u8] = b"auth";
pub const AUTH_ROLES: &[u8] = b"authRoles";
pub const AUTH_USERS: &[u8] = b"authUsers";
pub const CLUSTER: &[u8] = b"cluster";
pub const KEY: &[u8] = b"key";
pub const LEASE: &[u8] = b"lease";
pub const MEMBERS: &[u8] = b"members";
pub const MEMBERS_REMOVED: &[u8] = b"members_removed";
pub const META: &[u8] = b"meta";

/// Every bucket etcd 3.4 creates, in byte order (as bbolt keeps them).
pub const BUCKETS: [&[u8]; 10] = [
    ALARM,
    AUTH,
    AUTH_ROLES,
    AUTH_USERS,
    CLUSTER,
    KEY,
    LEASE,
    MEMBERS,
    MEMBERS_REMOVED,
    META,
];

/// `meta` keys.
pub const CONSISTENT_INDEX: &[u8] = b"consistent_index";
pub const SCHEDULED_COMPACT: &[u8] = b"scheduledCompactRev";
pub const FINISHED_COMPACT: &[u8] = b"finishedCompactRev";
/// The `auth` key of the authentication revision.
pub const AUTH_REVISION: &[u8] = b"authRevision";
/// The `auth` key of the enabled flag: `[1]` on, `[0]` (or missing) off.
pub const AUTH_ENABLED: &[u8] = b"authEnabled";
/// A `members_removed` value.
pub const REMOVED: &[u8] = b"removed";

const REVISION_BYTES: usize = 17;
const TOMBSTONE_MARK: u8 = b't';

/// A revision as a `key` bucket key: big-endian main, `_`, big-endian sub, and a `t`
/// after a deletion's.
pub fn revision_key(main: i64, sub: i64, tombstone: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(REVISION_BYTES + 1);
    out.extend_from_slice(&main.to_be_bytes());
    out.push(b'_');
    out.extend_from_slice(&sub.to_be_bytes());
    if tombstone {
        out.push(TOMBSTONE_MARK);
    }
    out
}

/// A `key` bucket key decoded: (main, sub, deletion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revision {
    pub main: i64,
    pub sub: i64,
    pub tombstone: bool,
}

pub fn parse_revision_key(raw: &[u8]) -> Option<Revision> {
    let tombstone = match raw.len() {
        REVISION_BYTES => false,
        n if n == REVISION_BYTES + 1 && raw[REVISION_BYTES] == TOMBSTONE_MARK => true,
        _ => return None,
    };
    if raw[8] != b'_' {
        return None;
    }
    let main: [u8; 8] = raw[..8].try_into().ok()?;
    let sub: [u8; 8] = raw[9..REVISION_BYTES].try_into().ok()?;
    Some(Revision {
        main: i64::from_be_bytes(main),
        sub: i64::from_be_bytes(sub),
        tombstone,
    })
}

/// A `key` bucket value: the version as `mvccpb.KeyValue`; a deletion's names only
/// the key, as etcd writes it.
pub fn key_value_record(kv: &KeyValue) -> Vec<u8> {
    kv.encode_to_vec()
}

pub fn tombstone_record(key: &Bytes) -> Vec<u8> {
    KeyValue {
        key: key.clone(),
        ..Default::default()
    }
    .encode_to_vec()
}

pub fn parse_key_value(raw: &[u8]) -> Result<KeyValue, prost::DecodeError> {
    KeyValue::decode(raw)
}

/// A `lease` bucket entry: the id as a big-endian int64, then `leasepb.Lease`.
pub fn lease_entry(id: i64, ttl: i64, remaining_ttl: i64) -> (Vec<u8>, Vec<u8>) {
    let record = Lease {
        id,
        ttl,
        remaining_ttl,
    };
    (id.to_be_bytes().to_vec(), record.encode_to_vec())
}

pub fn parse_lease(raw: &[u8]) -> Result<Lease, prost::DecodeError> {
    Lease::decode(raw)
}

/// A `meta` compaction revision: a revision key with sub 0.
pub fn compact_revision_value(main: i64) -> Vec<u8> {
    revision_key(main, 0, false)
}

/// A big-endian u64, as `consistent_index` and `authRevision` are kept.
pub fn u64_value(value: u64) -> Vec<u8> {
    value.to_be_bytes().to_vec()
}

/// A `members` value: etcd's `membership.Member` as JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub id: u64,
    #[serde(rename = "peerURLs")]
    pub peer_urls: Vec<String>,
    #[serde(
        rename = "isLearner",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub is_learner: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "clientURLs", default, skip_serializing_if = "Vec::is_empty")]
    pub client_urls: Vec<String>,
}

/// A `members` or `members_removed` key: the id in lower-case hex, as etcd's
/// `types.ID.String()`.
pub fn member_key(id: u64) -> Vec<u8> {
    format!("{id:x}").into_bytes()
}

/// An `alarm` key: the `AlarmMember` itself (the value is empty).
pub fn alarm_key(member_id: u64, alarm: AlarmType) -> Vec<u8> {
    AlarmMember {
        member_id,
        alarm: alarm.into(),
    }
    .encode_to_vec()
}

pub fn parse_alarm(raw: &[u8]) -> Result<AlarmMember, prost::DecodeError> {
    AlarmMember::decode(raw)
}

/// The `auth`, `authUsers` and `authRoles` buckets' entries, each in key order: users
/// and roles keyed by name, valued as etcd's `authpb` records.
pub type AuthBuckets = [Entries; 3];

/// One bucket's (key, value) entries.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

pub fn auth_buckets(records: &crate::store::AuthRecords) -> AuthBuckets {
    let mut auth = Vec::new();
    // A store whose auth never changed: etcd then keeps only its revision.
    if records.enabled || records.revision > 1 {
        auth.push((AUTH_ENABLED.to_vec(), vec![u8::from(records.enabled)]));
    }
    auth.push((AUTH_REVISION.to_vec(), u64_value(records.revision.max(1))));
    let mut users: Vec<_> = records
        .users
        .iter()
        .map(|user| (user.name.to_vec(), user.encode_to_vec()))
        .collect();
    users.sort();
    let mut roles: Vec<_> = records
        .roles
        .iter()
        .map(|role| (role.name.to_vec(), role.encode_to_vec()))
        .collect();
    roles.sort();
    [auth, users, roles]
}

/// The auth records the three buckets hold; `None` entries for a missing bucket.
pub fn parse_auth(
    auth: &[(Vec<u8>, Vec<u8>)],
    users: &[(Vec<u8>, Vec<u8>)],
    roles: &[(Vec<u8>, Vec<u8>)],
) -> Result<crate::store::AuthRecords, String> {
    use crate::proto::authpb::{Role, User};
    let mut records = crate::store::AuthRecords::default();
    for (key, value) in auth {
        if key == AUTH_ENABLED {
            records.enabled = value.as_slice() == [1];
        } else if key == AUTH_REVISION {
            let raw: [u8; 8] = value
                .as_slice()
                .try_into()
                .map_err(|_| "the auth revision is not 8 bytes".to_string())?;
            records.revision = u64::from_be_bytes(raw);
        }
    }
    for (name, value) in users {
        let user = User::decode(value.as_slice()).map_err(|e| {
            format!(
                "user {:?} does not decode: {e}",
                String::from_utf8_lossy(name)
            )
        })?;
        records.users.push(user);
    }
    for (name, value) in roles {
        let role = Role::decode(value.as_slice()).map_err(|e| {
            format!(
                "role {:?} does not decode: {e}",
                String::from_utf8_lossy(name)
            )
        })?;
        records.roles.push(role);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_keys_sort_by_revision_and_round_trip() {
        let a = revision_key(2, 0, false);
        let b = revision_key(2, 1, true);
        let c = revision_key(10, 0, false);
        assert!(a < b && b < c);
        assert_eq!(
            parse_revision_key(&b),
            Some(Revision {
                main: 2,
                sub: 1,
                tombstone: true
            })
        );
        assert_eq!(parse_revision_key(&a[..16]), None);
        let mut bad = a.clone();
        bad[8] = b'-';
        assert_eq!(parse_revision_key(&bad), None);
        let mut marked = a;
        marked.push(b'x');
        assert_eq!(parse_revision_key(&marked), None);
    }

    #[test]
    fn member_records_are_etcds_json() {
        let record = MemberRecord {
            id: 0x8e9e05c52164694d,
            peer_urls: vec!["http://localhost:2380".into()],
            is_learner: false,
            name: "default".into(),
            client_urls: vec!["http://localhost:2379".into()],
        };
        assert_eq!(
            serde_json::to_string(&record).unwrap(),
            r#"{"id":10276657743932975437,"peerURLs":["http://localhost:2380"],"name":"default","clientURLs":["http://localhost:2379"]}"#
        );
        assert_eq!(member_key(0x8e9e05c52164694d), b"8e9e05c52164694d");
    }
}
