//! etcd 3.7's `KV.RangeStream` in the store: one range read as a sequence of chunks,
//! all from one RocksDB snapshot.
//!
//! A [`RangeStream`] owns a RocksDB snapshot (pinned to the store's `Arc`, so that it
//! can outlive the call that took it and travel between blocking-pool threads) and the
//! key to resume from. Each [`next_chunk`](RangeStream::next_chunk) opens a fresh
//! iterator over that snapshot, seeks to the resume key and reads keys until the chunk
//! reaches its byte budget: memory is one chunk, whatever the range. No iterator lives
//! between chunks, so a stream that waits for a slow client pins no memtable or SST
//! file; only the snapshot itself, which keeps RocksDB from dropping versions that
//! changed since (bounded by the writes during the stream).
//!
//! The chunks are what etcd 3.7 sends: disjoint `kvs` in key order, the first one
//! small (time to first chunk), later ones growing toward the byte budget; `header`,
//! `more` and `count` only on the last, `count` being every key in the range (the keys
//! past a limit are counted from the same snapshot). Unlike etcd, which ranges again at
//! the pinned revision for every chunk, one snapshot means that a compaction during the
//! stream cannot fail it half way.
//!
//! This module decides chunk contents only: request shapes (refused sorts and filters)
//! are the API's, and it must never write.

use std::sync::Arc;

use rocksdb::Snapshot;
use yoke::{Yoke, Yokeable};

use super::meta::Revisions;
use super::range::{effective_sort_order, key_value, read_revision, sort, Reader};
use super::{ReadGate, RevisionStore, StoreError};
use crate::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use crate::proto::etcdserverpb::{RangeRequest, RangeResponse, ResponseHeader};
use crate::proto::mvccpb::KeyValue;

/// Keys in the first chunk, as etcd's `initialStreamChunkLimit`; each later chunk may
/// hold twice as many as the one before, until the byte budget decides.
pub const FIRST_CHUNK_KEYS: usize = 10;

/// The bytes a chunk aims at, for a member whose requests may be `max_request_bytes`
/// large. etcd aims at `--max-request-bytes`; above 2 MiB we stop, so that a chunk (the
/// budget plus at most one key-value, itself no larger than a request) stays under the
/// 4 MiB a gRPC client accepts by default (tonic's, and so etcd-client's).
pub fn chunk_budget(max_request_bytes: usize) -> usize {
    max_request_bytes.clamp(1, 2 << 20)
}

/// The store's RocksDB snapshot, borrowed from the store it keeps alive.
#[derive(Yokeable)]
struct Pinned<'a>(Snapshot<'a>);

/// One RangeStream's position in one snapshot; see the module doc.
pub struct RangeStream {
    snapshot: Yoke<Pinned<'static>, Arc<RevisionStore>>,
    revisions: Revisions,
    /// The revision read at.
    at: i64,
    range_end: Vec<u8>,
    /// Where the next chunk starts; `None` once the last chunk was read.
    next_key: Option<Vec<u8>>,
    keys_only: bool,
    count_only: bool,
    /// etcd 3.7 sorts each chunk on its own when a target other than the key is given
    /// without an order (an order itself is refused): ascending by that target.
    chunk_sort: Option<SortTarget>,
    /// Keys still allowed by the request's limit; `None` when unlimited.
    limit_left: Option<usize>,
    /// Keys sent so far.
    sent: i64,
    chunk_keys: usize,
    chunk_bytes: usize,
}

impl RangeStream {
    /// Takes a snapshot of `store` and checks the requested revision against it. The
    /// caller holds `_no_install` while it does (see [`RevisionStore::readable`]) and
    /// may let go once this returns: the snapshot goes on seeing the store as it was,
    /// whatever an install writes later.
    pub fn open(
        store: Arc<RevisionStore>,
        _no_install: &ReadGate,
        req: &RangeRequest,
        chunk_bytes: usize,
    ) -> Result<Self, StoreError> {
        let snapshot: Yoke<Pinned<'static>, Arc<RevisionStore>> =
            Yoke::attach_to_cart(store, |store: &RevisionStore| Pinned(store.db.snapshot()));
        let revisions =
            super::meta::read_revisions(snapshot.backing_cart(), Some(&snapshot.get().0))?;
        let at = read_revision(revisions, req.revision)?;
        let target = SortTarget::try_from(req.sort_target).unwrap_or(SortTarget::Key);
        let chunk_sort = (effective_sort_order(req) == SortOrder::Ascend
            && target != SortTarget::Key)
            .then_some(target);
        Ok(RangeStream {
            snapshot,
            revisions,
            at,
            range_end: req.range_end.to_vec(),
            next_key: Some(req.key.to_vec()),
            keys_only: req.keys_only,
            count_only: req.count_only,
            chunk_sort,
            // A negative limit is no limit, as in Range.
            limit_left: usize::try_from(req.limit).ok().filter(|l| *l > 0),
            sent: 0,
            chunk_keys: FIRST_CHUNK_KEYS,
            chunk_bytes: chunk_bytes.max(1),
        })
    }

    /// True once the last chunk was read.
    pub fn finished(&self) -> bool {
        self.next_key.is_none()
    }

    /// The next chunk, or `None` after the last one (which carries the header).
    pub fn next_chunk(&mut self) -> Result<Option<RangeResponse>, StoreError> {
        let Some(start) = self.next_key.take() else {
            return Ok(None);
        };
        let reader = self.reader()?;
        if self.count_only {
            // etcd 3.7 sends the count and the header alone, whatever the limit.
            let mut count: i64 = 0;
            reader.scan(&start, &self.range_end, self.at, |_, _, _| {
                count += 1;
                Ok(true)
            })?;
            return Ok(Some(RangeResponse {
                header: Some(self.header()),
                kvs: Vec::new(),
                more: false,
                count,
            }));
        }
        let with_value = !self.keys_only || self.chunk_sort == Some(SortTarget::Value);
        let (cap, budget, limit_left) = (self.chunk_keys, self.chunk_bytes, self.limit_left);
        let mut kvs: Vec<KeyValue> = Vec::new();
        let mut bytes = 0usize;
        // The first key of the next chunk, when this one is full.
        let mut resume = None;
        // Keys in the range past the request's limit: counted, not sent.
        let mut beyond: i64 = 0;
        reader.scan(&start, &self.range_end, self.at, |key, revision, raw| {
            if limit_left == Some(kvs.len()) {
                beyond += 1;
                return Ok(true);
            }
            if kvs.len() >= cap || bytes >= budget {
                resume = Some(key.to_vec());
                return Ok(false);
            }
            let kv = key_value(key, revision, raw, with_value)?;
            bytes += encoded_len_in_response(&kv);
            kvs.push(kv);
            Ok(true)
        })?;
        if let Some(target) = self.chunk_sort {
            sort(&mut kvs, target, SortOrder::Ascend);
        }
        if self.keys_only {
            for kv in &mut kvs {
                kv.value = bytes::Bytes::new();
            }
        }
        let n = kvs.len();
        self.sent += i64::try_from(n).unwrap_or(i64::MAX);
        self.limit_left = self.limit_left.map(|l| l.saturating_sub(n));
        // A single key (no range end) is all in the first chunk.
        if let (Some(next), false) = (resume, self.range_end.is_empty()) {
            self.next_key = Some(next);
            self.chunk_keys = self.chunk_keys.saturating_mul(2);
            return Ok(Some(RangeResponse {
                header: None,
                kvs,
                more: false,
                count: 0,
            }));
        }
        Ok(Some(RangeResponse {
            header: Some(self.header()),
            kvs,
            more: beyond > 0,
            count: self.sent.saturating_add(beyond),
        }))
    }

    fn reader(&self) -> Result<Reader<'_>, StoreError> {
        Reader::new(self.snapshot.backing_cart(), &self.snapshot.get().0)
    }

    /// The last chunk's header: the revision the store was at when the stream began,
    /// whatever revision it reads at (as Range's header).
    fn header(&self) -> ResponseHeader {
        ResponseHeader {
            revision: self.revisions.current,
            ..Default::default()
        }
    }
}

/// What `kv` adds to an encoded RangeResponse: its bytes, the field tag and the length.
fn encoded_len_in_response(kv: &KeyValue) -> usize {
    let len = prost::Message::encoded_len(kv);
    1 + prost::length_delimiter_len(len) + len
}

#[cfg(test)]
#[path = "range_stream_tests.rs"]
mod tests;
