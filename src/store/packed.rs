//! The key-values of one Range response, their keys and values copied into one buffer.
//!
//! A response of 1 000 keys built one `KeyValue` at a time made 2 000 allocations for
//! the copies out of RocksDB, and prost's encoder made 2 000 more when it cloned each
//! vector-backed `Bytes` into the gRPC frame (issue 20: during ranges of 1 000 keys, a
//! fifth of the members' CPU went to malloc and free). Here the copies go into one
//! growing buffer, and each `KeyValue` holds a slice of it, which clones with a
//! reference count. A slice kept keeps the whole buffer alive, so this module must
//! only serve responses that are encoded and dropped. The one longer holder is a
//! DeleteRange's events in the change feed's bounded queue: they hold the deleted
//! key-values, which are the buffer's whole content (its Range has no limit).

use std::ops::Range;

use bytes::Bytes;

use super::encoding::LiveRecord;
use super::StoreError;
use crate::proto::mvccpb::KeyValue;

/// One key-value as its place in the buffer.
struct PackedEntry {
    key: Range<usize>,
    value: Range<usize>,
    create_revision: i64,
    mod_revision: i64,
    version: i64,
    lease: i64,
}

#[derive(Default)]
pub(super) struct PackedKeyValues {
    bytes: Vec<u8>,
    entries: Vec<PackedEntry>,
}

impl PackedKeyValues {
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Adds the live version `raw` of `user_key`, written at `mod_revision`; without
    /// its value unless `with_value`.
    pub(super) fn push(
        &mut self,
        user_key: &[u8],
        mod_revision: i64,
        raw: &[u8],
        with_value: bool,
    ) -> Result<(), StoreError> {
        let live = LiveRecord::parse_live(raw)?;
        let key = self.append(user_key);
        let value = if with_value {
            self.append(live.value)
        } else {
            0..0
        };
        self.entries.push(PackedEntry {
            key,
            value,
            create_revision: live.create_revision,
            mod_revision,
            version: live.version,
            lease: live.lease,
        });
        Ok(())
    }

    fn append(&mut self, part: &[u8]) -> Range<usize> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(part);
        start..self.bytes.len()
    }

    pub(super) fn into_key_values(self) -> Vec<KeyValue> {
        let shared = Bytes::from(self.bytes);
        self.entries
            .into_iter()
            .map(|entry| KeyValue {
                key: shared.slice(entry.key),
                create_revision: entry.create_revision,
                mod_revision: entry.mod_revision,
                version: entry.version,
                value: shared.slice(entry.value),
                lease: entry.lease,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::encoding::StoredVersion;

    fn record(value: &[u8]) -> Vec<u8> {
        StoredVersion::Live {
            create_revision: 3,
            version: 2,
            lease: 7,
            value: Bytes::copy_from_slice(value),
        }
        .encode()
    }

    #[test]
    fn packed_key_values_equal_those_built_one_by_one() {
        let mut packed = PackedKeyValues::default();
        let versions: [(&[u8], &[u8]); 4] =
            [(b"a", b"1"), (b"", b""), (b"key", b""), (b"\0z", b"v\0")];
        for (revision, (key, value)) in (10..).zip(versions) {
            packed.push(key, revision, &record(value), true).unwrap();
        }
        assert_eq!(packed.len(), 4);
        let kvs = packed.into_key_values();
        for ((revision, (key, value)), kv) in (10..).zip(versions).zip(&kvs) {
            let one_by_one = super::super::range::key_value(key, revision, &record(value), true);
            assert_eq!(kv, &one_by_one.unwrap());
        }
    }

    #[test]
    fn without_values_only_keys_are_copied() {
        let mut packed = PackedKeyValues::default();
        packed
            .push(b"k", 5, &record(b"a long value"), false)
            .unwrap();
        assert_eq!(packed.bytes, b"k");
        let kv = &packed.into_key_values()[0];
        assert_eq!((kv.key.as_ref(), kv.value.as_ref()), (&b"k"[..], &b""[..]));
        assert_eq!(
            (kv.create_revision, kv.mod_revision, kv.version, kv.lease),
            (3, 5, 2, 7)
        );
    }

    #[test]
    fn a_tombstone_or_a_malformed_record_is_corruption_not_a_panic() {
        let mut packed = PackedKeyValues::default();
        for raw in [
            StoredVersion::Tombstone.encode(),
            vec![],
            vec![0, 1, 2],
            vec![9; 40],
        ] {
            assert!(matches!(
                packed.push(b"k", 1, &raw, true),
                Err(StoreError::Corrupt(_))
            ));
        }
        assert_eq!(packed.len(), 0);
    }
}
