//! Byte layouts of the revision store's RocksDB keys and values.
//!
//! This module owns how user keys, revisions and key versions become RocksDB bytes, so
//! that the rest of the store never slices raw bytes itself. It must never touch the
//! database: it only encodes and decodes.
//!
//! `kv` column family: `escape(user_key) ++ be(!main_revision)`. Escaping keeps the
//! byte order of user keys and makes every key's encoding prefix-free; inverting the
//! revision puts a key's newest version first, so a read at the current revision takes
//! the first entry of each key and a read at revision `r` seeks to `!r`.
//!
//! `history` column family: `be(main_revision) ++ be(sub_revision)` to the change's
//! kind, the version it replaced ([`Replaced`]) and its user key, in revision order for
//! watch catch-up, compaction and hashing.
//!
//! `latest` column family: the raw user key to `be(mod_revision) ++` the newest
//! version's sub revision `++` its record, present only while the key is live. It
//! duplicates the newest `kv` entry so that reads at the current revision (every put's
//! previous version, compares, most ranges) are one point lookup, or one entry per key
//! in a scan, instead of a walk over every version.
//!
//! Two layouts came later than the first stores and are told from the older ones by a
//! kind byte no older value holds there: the sub revision in `latest` and the replaced
//! version in `history`. Values written before them still decode, as "not recorded".
//!
//! `lease` column family: `b'L' ++ be(id)` to `be(granted_ttl) ++ be(remaining_ttl)`
//! (remaining 0 until a checkpoint records one) for each live lease, and
//! `b'K' ++ be(id) ++ user_key`, empty, for each key attached to it.

use bytes::Bytes;

use super::StoreError;

const ESCAPE: u8 = 0x00;
const ESCAPED_ZERO: u8 = 0xFF;
const TERMINATOR: u8 = 0x01;
const REVISION_LEN: usize = 8;

const LEASE_RECORD: u8 = b'L';
const LEASE_ATTACHMENT: u8 = b'K';
const LEASE_ID_LEN: usize = 8;

/// The key of lease `id`'s record.
pub fn lease_record_key(id: i64) -> [u8; 1 + LEASE_ID_LEN] {
    lease_prefixed(LEASE_RECORD, id)
}

/// Where every lease record lives: the bounds of a scan over all of them.
pub fn lease_records_bounds() -> (Vec<u8>, Vec<u8>) {
    (vec![LEASE_RECORD], vec![LEASE_RECORD + 1])
}

/// The id in a lease record's key.
pub fn lease_record_id(raw: &[u8]) -> Result<i64, StoreError> {
    match raw {
        [LEASE_RECORD, id @ ..] => lease_id(id),
        _ => Err(StoreError::corrupt("bad lease record key")),
    }
}

/// A lease record's value: its granted TTL and the remaining TTL last checkpointed.
pub fn lease_record_value(ttl: i64, remaining_ttl: i64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&ttl.to_be_bytes());
    out[8..].copy_from_slice(&remaining_ttl.to_be_bytes());
    out
}

/// (granted TTL, remaining TTL) of a lease record's value.
pub fn split_lease_record_value(raw: &[u8]) -> Result<(i64, i64), StoreError> {
    let (ttl, remaining) = raw
        .split_first_chunk::<8>()
        .ok_or_else(|| StoreError::corrupt("short lease record"))?;
    let remaining: &[u8; 8] = remaining
        .try_into()
        .map_err(|_| StoreError::corrupt("bad lease record length"))?;
    Ok((i64::from_be_bytes(*ttl), i64::from_be_bytes(*remaining)))
}

/// The key recording that `user_key` is attached to lease `id`.
pub fn lease_attachment_key(id: i64, user_key: &[u8]) -> Vec<u8> {
    let mut out = lease_prefixed(LEASE_ATTACHMENT, id).to_vec();
    out.extend_from_slice(user_key);
    out
}

/// The bounds of a scan over every attachment of lease `id`: its prefix, up to the
/// next prefix.
pub fn lease_attachments_bounds(id: i64) -> (Vec<u8>, Vec<u8>) {
    let start = lease_prefixed(LEASE_ATTACHMENT, id).to_vec();
    let mut end = start.clone();
    // The tag byte is never 0xFF, so some byte is left to increment.
    while end.last() == Some(&0xFF) {
        end.pop();
    }
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    (start, end)
}

/// The user key an attachment key attaches.
pub fn attached_key(raw: &[u8]) -> Result<&[u8], StoreError> {
    match raw {
        [LEASE_ATTACHMENT, rest @ ..] if rest.len() >= LEASE_ID_LEN => Ok(&rest[LEASE_ID_LEN..]),
        _ => Err(StoreError::corrupt("bad lease attachment key")),
    }
}

fn lease_prefixed(tag: u8, id: i64) -> [u8; 1 + LEASE_ID_LEN] {
    let mut out = [tag; 1 + LEASE_ID_LEN];
    out[1..].copy_from_slice(&id.to_be_bytes());
    out
}

fn lease_id(raw: &[u8]) -> Result<i64, StoreError> {
    let raw: &[u8; LEASE_ID_LEN] = raw
        .try_into()
        .map_err(|_| StoreError::corrupt("bad lease id"))?;
    Ok(i64::from_be_bytes(*raw))
}

/// The escaped form of a user key: order-preserving and prefix-free.
pub fn escape_key(user_key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(user_key.len() + 2 + REVISION_LEN);
    for &b in user_key {
        out.push(b);
        if b == ESCAPE {
            out.push(ESCAPED_ZERO);
        }
    }
    out.push(ESCAPE);
    out.push(TERMINATOR);
    out
}

/// Decodes an escaped user key (without any revision suffix) into `out`, which it
/// clears first.
pub fn unescape_key_into(escaped: &[u8], out: &mut Vec<u8>) -> Result<(), StoreError> {
    out.clear();
    let mut i = 0;
    while i < escaped.len() {
        let b = escaped[i];
        if b != ESCAPE {
            out.push(b);
            i += 1;
            continue;
        }
        match escaped.get(i + 1) {
            Some(&ESCAPED_ZERO) => {
                out.push(ESCAPE);
                i += 2;
            }
            Some(&TERMINATOR) if i + 2 == escaped.len() => return Ok(()),
            _ => return Err(StoreError::corrupt("bad key escape")),
        }
    }
    Err(StoreError::corrupt("unterminated key"))
}

/// A change's place in the store's history: its revision and its index among that
/// revision's changes (etcd's main and sub revision).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeId {
    pub main: i64,
    pub sub: u32,
}

/// The byte after a `latest` value's revision when the sub revision follows it; a value
/// written before the sub was recorded holds its record's first byte there ([`LIVE`]).
const LATEST_WITH_SUB: u8 = 2;
const SUB_LEN: usize = 4;

/// `latest` value: the newest version's revision, its sub revision when the writer
/// knows it, and its (live) `kv` record.
pub fn latest_value(mod_revision: i64, sub: Option<u32>, record: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(REVISION_LEN + 1 + SUB_LEN + record.len());
    out.extend_from_slice(&mod_revision.to_be_bytes());
    if let Some(sub) = sub {
        out.push(LATEST_WITH_SUB);
        out.extend_from_slice(&sub.to_be_bytes());
    }
    out.extend_from_slice(record);
    out
}

/// A `latest` value read in place.
#[derive(Debug, PartialEq, Eq)]
pub struct LatestValue<'a> {
    pub mod_revision: i64,
    /// `None` in values written before it was recorded, or by a rebuild from `kv`.
    pub sub: Option<u32>,
    pub record: &'a [u8],
}

/// Splits a `latest` value into the newest version's revision, sub revision and record.
pub fn split_latest_value(raw: &[u8]) -> Result<LatestValue<'_>, StoreError> {
    let (revision, rest) = raw
        .split_first_chunk::<REVISION_LEN>()
        .ok_or_else(|| StoreError::corrupt("short latest record"))?;
    let mod_revision = i64::from_be_bytes(*revision);
    let (sub, record) = match rest.split_first() {
        Some((&LATEST_WITH_SUB, after)) => {
            let (sub, record) = after
                .split_first_chunk::<SUB_LEN>()
                .ok_or_else(|| StoreError::corrupt("short latest record"))?;
            (Some(u32::from_be_bytes(*sub)), record)
        }
        _ => (None, rest),
    };
    Ok(LatestValue {
        mod_revision,
        sub,
        record,
    })
}

/// `kv` key of one version of `user_key`, written at `revision`.
pub fn version_key(escaped: &[u8], revision: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(escaped.len() + REVISION_LEN);
    out.extend_from_slice(escaped);
    out.extend_from_slice(&(!(revision as u64)).to_be_bytes());
    out
}

/// A `kv` key past every version of the escaped key and before the next user key.
pub fn after_all_versions(escaped: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(escaped.len() + REVISION_LEN + 1);
    out.extend_from_slice(escaped);
    out.extend_from_slice(&[0xFF; REVISION_LEN + 1]);
    out
}

/// Whether `raw` is a whole `kv` key (an escaped user key and a revision), as opposed
/// to a bound or seek target made of an escaped key alone or followed by `0xFF`s:
/// `kv`'s prefix filter covers exactly these keys (see [`version_key_owner`]).
pub fn is_version_key(raw: &[u8]) -> bool {
    raw.len() >= REVISION_LEN + 2
        && raw[raw.len() - REVISION_LEN - 2..raw.len() - REVISION_LEN] == [ESCAPE, TERMINATOR]
}

/// The escaped user key that a whole `kv` key belongs to: the prefix RocksDB's filter
/// on `kv` records, so that looking up one key's versions skips the files that hold
/// none. Escaping leaves `ESCAPE TERMINATOR` only at the end of an escaped key, which
/// [`is_version_key`] checks; other keys are returned whole (RocksDB asks only for keys
/// in the domain).
pub fn version_key_owner(raw: &[u8]) -> &[u8] {
    if is_version_key(raw) {
        &raw[..raw.len() - REVISION_LEN]
    } else {
        raw
    }
}

/// Splits a `kv` key into its escaped user key and its revision.
pub fn split_version_key(raw: &[u8]) -> Result<(&[u8], i64), StoreError> {
    if raw.len() < REVISION_LEN + 2 {
        return Err(StoreError::corrupt("short kv key"));
    }
    let (escaped, rev) = raw.split_at(raw.len() - REVISION_LEN);
    let mut be = [0u8; REVISION_LEN];
    be.copy_from_slice(rev);
    Ok((escaped, (!u64::from_be_bytes(be)) as i64))
}

/// The `kv` bounds `[lower, upper)` covering every user key in `[key, range_end)` as
/// etcd reads a range: empty `range_end` is the single key, `"\0"` means every key
/// from `key` on. `upper` is `None` when the range is unbounded above.
pub fn kv_bounds(key: &[u8], range_end: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    let lower = escape_key(key);
    let upper = if range_end.is_empty() {
        Some(after_all_versions(&lower))
    } else if range_end == [0] {
        None
    } else {
        Some(escape_key(range_end))
    };
    (lower, upper)
}

const HISTORY_KEY_LEN: usize = REVISION_LEN + SUB_LEN;

/// `history` key of the change at (`main`, `sub`).
pub fn history_key(main: i64, sub: u32) -> [u8; HISTORY_KEY_LEN] {
    let mut out = [0u8; HISTORY_KEY_LEN];
    out[..8].copy_from_slice(&(main as u64).to_be_bytes());
    out[8..].copy_from_slice(&sub.to_be_bytes());
    out
}

/// The (main, sub) revision of a `history` key.
pub fn split_history_key(raw: &[u8]) -> Result<(i64, u32), StoreError> {
    let raw: &[u8; HISTORY_KEY_LEN] = raw
        .try_into()
        .map_err(|_| StoreError::corrupt("bad history key length"))?;
    let (main, sub) = raw.split_at(REVISION_LEN);
    let main: [u8; REVISION_LEN] = main
        .try_into()
        .map_err(|_| StoreError::corrupt("bad history key"))?;
    let sub: [u8; 4] = sub
        .try_into()
        .map_err(|_| StoreError::corrupt("bad history key"))?;
    Ok((u64::from_be_bytes(main) as i64, u32::from_be_bytes(sub)))
}

/// The main revision of a `history` key.
pub fn history_revision(raw: &[u8]) -> Result<i64, StoreError> {
    raw.get(..REVISION_LEN)
        .and_then(|b| <[u8; REVISION_LEN]>::try_from(b).ok())
        .map(|b| u64::from_be_bytes(b) as i64)
        .ok_or_else(|| StoreError::corrupt("short history key"))
}

/// One stored version of a key: what the `kv` column family holds under
/// `version_key(key, mod_revision)`. A tombstone marks the key deleted at that revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredVersion {
    Live {
        create_revision: i64,
        version: i64,
        lease: i64,
        value: Bytes,
    },
    Tombstone,
}

const LIVE: u8 = 0;
const TOMBSTONE: u8 = 1;
const LIVE_HEADER: usize = 1 + 8 * 3;

impl StoredVersion {
    /// Tells a tombstone from a live version without decoding the value.
    pub fn is_tombstone(raw: &[u8]) -> bool {
        raw.first() == Some(&TOMBSTONE)
    }

    pub fn encode(&self) -> Vec<u8> {
        match self {
            StoredVersion::Tombstone => vec![TOMBSTONE],
            StoredVersion::Live {
                create_revision,
                version,
                lease,
                value,
            } => {
                let mut out = Vec::with_capacity(LIVE_HEADER + value.len());
                out.push(LIVE);
                out.extend_from_slice(&create_revision.to_be_bytes());
                out.extend_from_slice(&version.to_be_bytes());
                out.extend_from_slice(&lease.to_be_bytes());
                out.extend_from_slice(value);
                out
            }
        }
    }

    pub fn decode(raw: &[u8]) -> Result<Self, StoreError> {
        Ok(match LiveRecord::parse(raw)? {
            None => StoredVersion::Tombstone,
            Some(live) => StoredVersion::Live {
                create_revision: live.create_revision,
                version: live.version,
                lease: live.lease,
                value: Bytes::copy_from_slice(live.value),
            },
        })
    }
}

/// A live version record read in place: the value still borrowed from RocksDB, for
/// callers that copy it somewhere of their own (a Range response's shared buffer).
pub struct LiveRecord<'a> {
    pub create_revision: i64,
    pub version: i64,
    pub lease: i64,
    pub value: &'a [u8],
}

impl<'a> LiveRecord<'a> {
    /// The record in `raw`, which must be live: a tombstone here is corruption (a
    /// reader that found it through `latest` or a live scan).
    pub fn parse_live(raw: &'a [u8]) -> Result<Self, StoreError> {
        Self::parse(raw)?.ok_or_else(|| StoreError::corrupt("tombstone read as live"))
    }

    /// The live record in `raw`, or `None` for a tombstone.
    pub fn parse(raw: &'a [u8]) -> Result<Option<Self>, StoreError> {
        match raw.first() {
            Some(&TOMBSTONE) => Ok(None),
            Some(&LIVE) if raw.len() >= LIVE_HEADER => {
                let int = |at: usize| {
                    let mut be = [0u8; 8];
                    be.copy_from_slice(&raw[at..at + 8]);
                    i64::from_be_bytes(be)
                };
                Ok(Some(LiveRecord {
                    create_revision: int(1),
                    version: int(9),
                    lease: int(17),
                    value: &raw[LIVE_HEADER..],
                }))
            }
            _ => Err(StoreError::corrupt("bad version record")),
        }
    }
}

/// The version a change replaced, as the change's `history` entry records it, so that
/// compaction can delete that version and its entry without reading for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replaced {
    /// Not recorded: entries written before it was, and changes whose writer did not
    /// know the replaced version's sub revision. Compaction looks the key's versions up.
    Unknown,
    /// The key was not live before the change.
    Nothing,
    /// The live version the change replaced, and about how many bytes it and its
    /// history entry take ([`replaced_bytes`]), for the store's size in use.
    Version { written: ChangeId, bytes: u32 },
}

/// About how many bytes a live version of a key takes in `kv` and `history`: its
/// version key and record (`escaped_len`, `value_len`), and its history key and entry.
pub fn replaced_bytes(key_len: usize, escaped_len: usize, value_len: usize) -> u32 {
    let bytes = escaped_len
        + REVISION_LEN
        + LIVE_HEADER
        + value_len
        + HISTORY_KEY_LEN
        + CHAINED_HEADER
        + key_len;
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

/// What a `history` entry records: a put or a delete of one user key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    pub deleted: bool,
    pub key: Vec<u8>,
    pub replaced: Replaced,
}

/// Kinds of history entries that record the version they replaced.
const PUT_CHAINED: u8 = 2;
const DELETE_CHAINED: u8 = 3;
/// Kind, replaced main and sub revision (main 0: nothing replaced), replaced bytes.
const CHAINED_HEADER: usize = 1 + REVISION_LEN + SUB_LEN + 4;

impl HistoryEntry {
    pub fn encode(&self) -> Vec<u8> {
        let (written, bytes) = match self.replaced {
            Replaced::Unknown => {
                let mut out = Vec::with_capacity(1 + self.key.len());
                out.push(if self.deleted { TOMBSTONE } else { LIVE });
                out.extend_from_slice(&self.key);
                return out;
            }
            Replaced::Nothing => (ChangeId { main: 0, sub: 0 }, 0),
            Replaced::Version { written, bytes } => (written, bytes),
        };
        let mut out = Vec::with_capacity(CHAINED_HEADER + self.key.len());
        out.push(if self.deleted {
            DELETE_CHAINED
        } else {
            PUT_CHAINED
        });
        out.extend_from_slice(&written.main.to_be_bytes());
        out.extend_from_slice(&written.sub.to_be_bytes());
        out.extend_from_slice(&bytes.to_be_bytes());
        out.extend_from_slice(&self.key);
        out
    }

    pub fn decode(raw: &[u8]) -> Result<Self, StoreError> {
        let bad = || StoreError::corrupt("bad history record");
        let (&kind, rest) = raw.split_first().ok_or_else(bad)?;
        let (deleted, replaced, key) = match kind {
            LIVE | TOMBSTONE => (kind == TOMBSTONE, Replaced::Unknown, rest),
            PUT_CHAINED | DELETE_CHAINED => {
                let (main, rest) = rest.split_first_chunk::<REVISION_LEN>().ok_or_else(bad)?;
                let (sub, rest) = rest.split_first_chunk::<SUB_LEN>().ok_or_else(bad)?;
                let (bytes, key) = rest.split_first_chunk::<4>().ok_or_else(bad)?;
                let main = i64::from_be_bytes(*main);
                let replaced = match main {
                    0 => Replaced::Nothing,
                    main if main > 0 => Replaced::Version {
                        written: ChangeId {
                            main,
                            sub: u32::from_be_bytes(*sub),
                        },
                        bytes: u32::from_be_bytes(*bytes),
                    },
                    _ => return Err(bad()),
                };
                (kind == DELETE_CHAINED, replaced, key)
            }
            _ => return Err(bad()),
        };
        Ok(HistoryEntry {
            deleted,
            key: key.to_vec(),
            replaced,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_preserves_order_and_round_trips() {
        let mut keys: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"\0".to_vec(),
            b"\0\0".to_vec(),
            b"\0\x01".to_vec(),
            b"a".to_vec(),
            b"a\0".to_vec(),
            b"a\0b".to_vec(),
            b"a\x01".to_vec(),
            b"ab".to_vec(),
            b"b".to_vec(),
            vec![0xFF],
            vec![0xFF, 0x00],
        ];
        keys.sort();
        let encoded: Vec<Vec<u8>> = keys.iter().map(|k| escape_key(k)).collect();
        let mut sorted = encoded.clone();
        sorted.sort();
        assert_eq!(encoded, sorted);
        let mut decoded = Vec::new();
        for (k, e) in keys.iter().zip(&encoded) {
            unescape_key_into(e, &mut decoded).unwrap();
            assert_eq!(&decoded, k);
        }
    }

    #[test]
    fn versions_sort_newest_first_and_stay_inside_their_key() {
        let a = escape_key(b"a");
        let a0 = escape_key(b"a\0");
        let k5 = version_key(&a, 5);
        let k9 = version_key(&a, 9);
        assert!(k9 < k5);
        assert!(k5 < after_all_versions(&a));
        assert!(after_all_versions(&a) < version_key(&a0, i64::MAX));
        assert_eq!(split_version_key(&k5).unwrap(), (a.as_slice(), 5));
    }

    #[test]
    fn only_whole_version_keys_have_an_owner_prefix() {
        // Keys whose bytes, escaped, end in what looks like a revision: zeros, ones,
        // 0xFF, and the escape pair itself.
        let users: [&[u8]; 6] = [
            b"",
            b"\0",
            b"\0\x01\0\x01",
            &[0xFF; 12],
            b"abcdefgh\0\x01",
            b"k",
        ];
        for user in users {
            let escaped = escape_key(user);
            assert!(!is_version_key(&escaped), "{user:?}");
            assert!(!is_version_key(&after_all_versions(&escaped)), "{user:?}");
            for revision in [0, 1, 256, i64::MAX] {
                let key = version_key(&escaped, revision);
                assert!(is_version_key(&key), "{user:?} at {revision}");
                assert_eq!(version_key_owner(&key), escaped.as_slice());
            }
        }
        assert!(!is_version_key(b"\0\x01"));
    }

    #[test]
    fn records_round_trip() {
        let live = StoredVersion::Live {
            create_revision: 3,
            version: 2,
            lease: 7,
            value: Bytes::from_static(b"v"),
        };
        assert_eq!(StoredVersion::decode(&live.encode()).unwrap(), live);
        let dead = StoredVersion::Tombstone;
        assert_eq!(StoredVersion::decode(&dead.encode()).unwrap(), dead);
        assert!(StoredVersion::decode(&[9]).is_err());
        let record = live.encode();
        for sub in [None, Some(0), Some(7)] {
            let latest = latest_value(42, sub, &record);
            assert_eq!(
                split_latest_value(&latest).unwrap(),
                LatestValue {
                    mod_revision: 42,
                    sub,
                    record: &record,
                }
            );
        }
        assert!(split_latest_value(&[1, 2]).is_err());
        assert!(split_latest_value(&[0, 0, 0, 0, 0, 0, 0, 42, LATEST_WITH_SUB, 0, 0]).is_err());
        for replaced in [
            Replaced::Unknown,
            Replaced::Nothing,
            Replaced::Version {
                written: ChangeId { main: 9, sub: 3 },
                bytes: 300,
            },
        ] {
            for deleted in [false, true] {
                let h = HistoryEntry {
                    deleted,
                    key: b"k".to_vec(),
                    replaced,
                };
                assert_eq!(HistoryEntry::decode(&h.encode()).unwrap(), h);
            }
        }
    }

    #[test]
    fn entries_written_before_the_chain_read_as_unknown_and_bad_ones_are_refused() {
        // The layout of the first stores: kind byte, then the key.
        assert_eq!(
            HistoryEntry::decode(b"\x01key").unwrap(),
            HistoryEntry {
                deleted: true,
                key: b"key".to_vec(),
                replaced: Replaced::Unknown,
            }
        );
        assert!(HistoryEntry::decode(b"").is_err());
        assert!(HistoryEntry::decode(b"\x04key").is_err());
        // A chained entry cut short, and one naming a negative revision.
        assert!(HistoryEntry::decode(&[PUT_CHAINED, 0, 0, 0]).is_err());
        let mut negative = vec![PUT_CHAINED];
        negative.extend_from_slice(&(-5i64).to_be_bytes());
        negative.extend_from_slice(&[0; 8]);
        assert!(HistoryEntry::decode(&negative).is_err());
    }
}
