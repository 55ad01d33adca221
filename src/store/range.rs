//! Reading the key space at a revision: etcd's Range, from a RocksDB snapshot.
//!
//! This module owns the walks over the `latest` and `kv` column families and etcd's
//! post-processing of a Range (revision checks, filters, sorting, limit and `more`,
//! count, keys only). It holds at most the response in memory: keys are visited in
//! order straight from the iterator. It must never write.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use bytes::Bytes;
use rocksdb::{DBRawIterator, ReadOptions, Snapshot};

use super::encoding::{
    after_all_versions, escape_key, kv_bounds, split_latest_value, split_version_key,
    unescape_key_into, version_key, LiveRecord, StoredVersion,
};
use super::hidden_entries::HiddenEntries;
use super::meta::Revisions;
use super::packed::PackedKeyValues;
use super::{RevisionStore, StoreError, CF_KV, CF_LATEST};
use crate::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use crate::proto::etcdserverpb::{RangeRequest, RangeResponse, ResponseHeader};
use crate::proto::mvccpb::KeyValue;

/// Pending changes of a write transaction not yet in RocksDB: user key to its new state
/// (`None` once deleted). Reads inside the transaction see them over the store.
pub type Overlay = BTreeMap<Bytes, Option<PendingVersion>>;

/// A version staged in an [`Overlay`], with its sub revision (which the next change of
/// the key records as the version it replaced).
#[derive(Clone, Debug)]
pub struct PendingVersion {
    pub kv: KeyValue,
    pub sub: u32,
}

/// How many `next()` calls to spend skipping a key's older versions before seeking
/// past them: cheap for keys with few versions, bounded for keys with many.
const SEQUENTIAL_SKIPS: usize = 4;

/// Reads the key space either live (the apply path, which is the only writer) or
/// through a snapshot (client reads, which must see one revision). A read at the
/// current revision of what it sees goes to the `latest` column family; an older one
/// walks the versions in `kv`.
pub struct Reader<'a> {
    store: &'a RevisionStore,
    snapshot: Option<&'a Snapshot<'a>>,
    /// The counters of the data this reader sees.
    revisions: Revisions,
}

impl<'a> Reader<'a> {
    pub fn new(store: &'a RevisionStore, snapshot: &'a Snapshot<'a>) -> Result<Self, StoreError> {
        Ok(Reader {
            store,
            snapshot: Some(snapshot),
            revisions: super::meta::read_revisions(store, Some(snapshot))?,
        })
    }

    /// A reader of the store as written, whose counters the caller knows (`written`).
    pub fn live(store: &'a RevisionStore, written: Revisions) -> Self {
        Reader {
            store,
            snapshot: None,
            revisions: written,
        }
    }

    /// The store's counters as this reader sees them.
    pub fn revisions(&self) -> Revisions {
        self.revisions
    }

    fn read_options(&self, upper: Option<Vec<u8>>) -> ReadOptions {
        let mut opts = super::total_order();
        if let Some(s) = self.snapshot {
            opts.set_snapshot(s);
        }
        if let Some(upper) = upper {
            opts.set_iterate_upper_bound(upper);
        }
        opts
    }

    /// An iterator over column family `cf` as this reader sees it, below `upper`.
    pub(super) fn iterator(
        &self,
        cf: &str,
        upper: Option<Vec<u8>>,
    ) -> Result<DBRawIterator<'a>, StoreError> {
        let opts = self.read_options(upper);
        Ok(self.store.db.raw_iterator_cf_opt(self.store.cf(cf)?, opts))
    }

    /// Visits, in key order, every key in `[key, range_end)` (etcd's range conventions)
    /// that is live at revision `at`, with its revision and version record. `visit`
    /// returns false to stop early.
    pub fn scan(
        &self,
        key: &[u8],
        range_end: &[u8],
        at: i64,
        visit: impl FnMut(&[u8], i64, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        if at >= self.revisions.current {
            self.scan_latest(key, range_end, visit)
        } else {
            self.scan_versions(key, range_end, at, visit)
        }
    }

    /// `scan` at the current revision: one `latest` entry per live key.
    fn scan_latest(
        &self,
        key: &[u8],
        range_end: &[u8],
        mut visit: impl FnMut(&[u8], i64, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let cf = self.store.cf(CF_LATEST)?;
        if range_end.is_empty() {
            let opts = self.read_options(None);
            if let Some(raw) = self.store.db.get_pinned_cf_opt(cf, key, &opts)? {
                let latest = split_latest_value(&raw)?;
                visit(key, latest.mod_revision, latest.record)?;
            }
            return Ok(());
        }
        let upper = (range_end != [0]).then(|| range_end.to_vec());
        if upper.as_deref().is_some_and(|u| u <= key) {
            return Ok(());
        }
        let hidden = HiddenEntries::start();
        let mut keys = 0u64;
        let mut steps = 0u64;
        let mut it = self.iterator(CF_LATEST, upper)?;
        it.seek(key);
        while let (Some(k), Some(raw)) = (it.key(), it.value()) {
            let latest = split_latest_value(raw)?;
            keys += 1;
            if !visit(k, latest.mod_revision, latest.record)? {
                break;
            }
            it.next();
            steps += 1;
        }
        let status = it.status().map_err(StoreError::from);
        self.store
            .tidy_latest_if_crowded(hidden.count(steps), keys, key, range_end);
        status
    }

    /// `scan` at any revision, by walking the versions in `kv`.
    pub fn scan_versions(
        &self,
        key: &[u8],
        range_end: &[u8],
        at: i64,
        mut visit: impl FnMut(&[u8], i64, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let (lower, upper) = kv_bounds(key, range_end);
        if upper.as_ref().is_some_and(|u| *u <= lower) {
            return Ok(());
        }
        let mut it = self.iterator(CF_KV, upper)?;
        it.seek(&lower);
        // The current key, escaped and as the user wrote it; the buffers are reused.
        let mut escaped = Vec::new();
        let mut user_key = Vec::new();
        while it.valid() {
            let Some(raw) = it.key() else { break };
            let (current, revision) = split_version_key(raw)?;
            escaped.clear();
            escaped.extend_from_slice(current);
            let mut revision = revision;
            if revision > at {
                it.seek(version_key(&escaped, at));
                match it.key().map(split_version_key).transpose()? {
                    Some((e, r)) if e == escaped.as_slice() => revision = r,
                    _ => continue,
                }
            }
            let value = it.value().unwrap_or_default();
            if !StoredVersion::is_tombstone(value) {
                unescape_key_into(&escaped, &mut user_key)?;
                if !visit(&user_key, revision, value)? {
                    return it.status().map_err(StoreError::from);
                }
            }
            skip_versions(&mut it, &escaped);
        }
        it.status().map_err(StoreError::from)
    }

    /// The version of `key` written at exactly `revision` (a put's), if any: one point
    /// lookup, where [`get`](Self::get) finds the version live at a revision.
    pub fn written_at(&self, key: &[u8], revision: i64) -> Result<Option<KeyValue>, StoreError> {
        let opts = self.read_options(None);
        let kv = self.store.cf(CF_KV)?;
        let found =
            self.store
                .db
                .get_pinned_cf_opt(kv, version_key(&escape_key(key), revision), &opts)?;
        found
            .map(|raw| key_value(key, revision, &raw, true))
            .transpose()
    }

    /// The live version of `key` with its sub revision when `latest` records it: the
    /// apply path's lookup of the version a change replaces.
    pub fn get_current(&self, key: &[u8]) -> Result<Option<(KeyValue, Option<u32>)>, StoreError> {
        let opts = self.read_options(None);
        let cf = self.store.cf(CF_LATEST)?;
        let Some(raw) = self.store.db.get_pinned_cf_opt(cf, key, &opts)? else {
            return Ok(None);
        };
        let latest = split_latest_value(&raw)?;
        let kv = key_value(key, latest.mod_revision, latest.record, true)?;
        Ok(Some((kv, latest.sub)))
    }

    /// The version of `key` live at revision `at`, if any.
    pub fn get(&self, key: &[u8], at: i64) -> Result<Option<KeyValue>, StoreError> {
        let mut found = None;
        self.scan(key, &[], at, |user_key, revision, raw| {
            found = Some(key_value(user_key, revision, raw, true)?);
            Ok(false)
        })?;
        Ok(found)
    }
}

fn skip_versions(it: &mut DBRawIterator<'_>, escaped: &[u8]) {
    for _ in 0..SEQUENTIAL_SKIPS {
        it.next();
        match it.key() {
            Some(k) if k.len() == escaped.len() + 8 && k.starts_with(escaped) => continue,
            _ => return,
        }
    }
    it.seek(after_all_versions(escaped));
}

/// Builds the client-facing record of one stored version.
pub fn key_value(
    user_key: &[u8],
    mod_revision: i64,
    raw: &[u8],
    with_value: bool,
) -> Result<KeyValue, StoreError> {
    let live = LiveRecord::parse_live(raw)?;
    Ok(KeyValue {
        key: Bytes::copy_from_slice(user_key),
        create_revision: live.create_revision,
        mod_revision,
        version: live.version,
        value: if with_value {
            Bytes::copy_from_slice(live.value)
        } else {
            Bytes::new()
        },
        lease: live.lease,
    })
}

/// The revision a read at `requested` (0 = current) is served at, as etcd checks it.
pub fn read_revision(revisions: Revisions, requested: i64) -> Result<i64, StoreError> {
    if requested > revisions.current {
        return Err(StoreError::FutureRevision);
    }
    let at = if requested <= 0 {
        revisions.current
    } else {
        requested
    };
    if at < revisions.compacted {
        return Err(StoreError::Compacted);
    }
    Ok(at)
}

/// True when `key` lies in the range etcd means by (`start`, `range_end`).
pub fn in_range(key: &[u8], start: &[u8], range_end: &[u8]) -> bool {
    if range_end.is_empty() {
        key == start
    } else if range_end == [0] {
        key >= start
    } else {
        key >= start && key < range_end
    }
}

/// etcd's Range over `reader` at the store's `revisions`, seeing `overlay` when given.
pub fn range(
    reader: &Reader<'_>,
    revisions: Revisions,
    req: &RangeRequest,
    overlay: Option<&Overlay>,
) -> Result<RangeResponse, StoreError> {
    let at = read_revision(revisions, req.revision)?;
    let sort_order = effective_sort_order(req);
    let filtered = req.min_mod_revision != 0
        || req.max_mod_revision != 0
        || req.min_create_revision != 0
        || req.max_create_revision != 0;
    // An explicit order and the filters need every key; otherwise one extra key tells
    // `more`. As in etcd, a non-key target without an order sorts only what it fetched.
    let ordered = SortOrder::try_from(req.sort_order).unwrap_or(SortOrder::None) != SortOrder::None;
    let fetch_limit = if ordered || filtered || req.limit <= 0 {
        usize::MAX
    } else {
        usize::try_from(req.limit)
            .unwrap_or(usize::MAX)
            .saturating_add(1)
    };
    // Sorting by value needs values even when the response will carry none.
    let with_value =
        !req.keys_only || req.sort_target() == SortTarget::Value && sort_order != SortOrder::None;
    let pending: Vec<(&Bytes, &Option<PendingVersion>)> = overlay
        .map(|o| {
            o.iter()
                .filter(|(k, _)| in_range(k, &req.key, &req.range_end))
                .collect()
        })
        .unwrap_or_default();

    let (mut kvs, count) = if pending.is_empty() {
        let mut packed = PackedKeyValues::default();
        let mut count: i64 = 0;
        reader.scan(&req.key, &req.range_end, at, |key, revision, raw| {
            count += 1;
            if !req.count_only && packed.len() < fetch_limit {
                packed.push(key, revision, raw, with_value)?;
            }
            Ok(true)
        })?;
        (packed.into_key_values(), count)
    } else {
        let mut merged: BTreeMap<Bytes, KeyValue> = BTreeMap::new();
        reader.scan(&req.key, &req.range_end, at, |key, revision, raw| {
            let kv = key_value(key, revision, raw, with_value)?;
            merged.insert(kv.key.clone(), kv);
            Ok(true)
        })?;
        for (key, state) in pending {
            match state {
                Some(pending) => {
                    merged.insert(key.clone(), pending.kv.clone());
                }
                None => {
                    merged.remove(key);
                }
            }
        }
        let count = i64::try_from(merged.len()).unwrap_or(i64::MAX);
        let kvs = if req.count_only {
            Vec::new()
        } else {
            merged.into_values().take(fetch_limit).collect()
        };
        (kvs, count)
    };

    kvs.retain(|kv| {
        (req.max_mod_revision == 0 || kv.mod_revision <= req.max_mod_revision)
            && (req.min_mod_revision == 0 || kv.mod_revision >= req.min_mod_revision)
            && (req.max_create_revision == 0 || kv.create_revision <= req.max_create_revision)
            && (req.min_create_revision == 0 || kv.create_revision >= req.min_create_revision)
    });
    sort(&mut kvs, req.sort_target(), sort_order);
    let mut more = false;
    if let Ok(limit) = usize::try_from(req.limit) {
        if limit > 0 && kvs.len() > limit {
            kvs.truncate(limit);
            more = true;
        }
    }
    if req.keys_only {
        for kv in &mut kvs {
            kv.value = Bytes::new();
        }
    }
    Ok(RangeResponse {
        header: Some(ResponseHeader {
            revision: revisions.current,
            ..Default::default()
        }),
        kvs,
        more,
        count,
    })
}

/// etcd sorts ascending when a non-key target is given without an order, because keys
/// already come in ascending key order.
pub(super) fn effective_sort_order(req: &RangeRequest) -> SortOrder {
    let order = SortOrder::try_from(req.sort_order).unwrap_or(SortOrder::None);
    let target = SortTarget::try_from(req.sort_target).unwrap_or(SortTarget::Key);
    if order == SortOrder::None && target != SortTarget::Key {
        SortOrder::Ascend
    } else {
        order
    }
}

pub(super) fn sort(kvs: &mut [KeyValue], target: SortTarget, order: SortOrder) {
    let compare = |a: &KeyValue, b: &KeyValue| -> Ordering {
        match target {
            SortTarget::Key => a.key.cmp(&b.key),
            SortTarget::Version => a.version.cmp(&b.version),
            SortTarget::Create => a.create_revision.cmp(&b.create_revision),
            SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
            SortTarget::Value => a.value.cmp(&b.value),
        }
    };
    match order {
        SortOrder::None => {}
        SortOrder::Ascend => kvs.sort_by(compare),
        SortOrder::Descend => kvs.sort_by(|a, b| compare(b, a)),
    }
}
