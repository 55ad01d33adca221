//! RangeStream's chunks against a plain Range of the same store: boundaries, the last
//! chunk's fields, limits, the byte budget, and one snapshot for the whole stream.

use std::sync::Arc;

use super::super::tests::{b, Harness};
use super::*;
use crate::proto::command::command::Request as C;
use crate::proto::etcdserverpb::{CompactionRequest, PutRequest};

fn gate(store: &Arc<RevisionStore>) -> ReadGate {
    futures::executor::block_on(store.readable())
}

fn open(h: &Harness, req: &RangeRequest, budget: usize) -> Result<RangeStream, StoreError> {
    RangeStream::open(h.store.clone(), &gate(&h.store), req, budget)
}

fn drain(stream: &mut RangeStream) -> Vec<RangeResponse> {
    let mut chunks = Vec::new();
    while let Some(chunk) = stream.next_chunk().unwrap() {
        chunks.push(chunk);
    }
    chunks
}

fn stream_all(h: &Harness, req: &RangeRequest, budget: usize) -> Vec<RangeResponse> {
    drain(&mut open(h, req, budget).unwrap())
}

/// The chunks merged as etcd's proto.Merge would: kvs concatenated, the rest from the
/// last chunk.
fn merged(chunks: &[RangeResponse]) -> RangeResponse {
    let last = chunks.last().expect("at least one chunk");
    RangeResponse {
        header: last.header,
        kvs: chunks.iter().flat_map(|c| c.kvs.clone()).collect(),
        more: last.more,
        count: last.count,
    }
}

/// Every chunk but the last carries kvs only; keys ascend strictly across chunks.
fn assert_well_formed(chunks: &[RangeResponse]) {
    let (last, rest) = chunks.split_last().expect("at least one chunk");
    for chunk in rest {
        assert!(chunk.header.is_none() && !chunk.more && chunk.count == 0);
        assert!(!chunk.kvs.is_empty(), "only the last chunk may be empty");
    }
    assert!(last.header.is_some());
    let keys: Vec<_> = chunks
        .iter()
        .flat_map(|c| &c.kvs)
        .map(|kv| &kv.key)
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "disjoint and in order"
    );
}

fn key(i: usize) -> String {
    format!("k/{i:05}")
}

fn loaded(n: usize) -> Harness {
    let mut h = Harness::new();
    for i in 0..n {
        h.put(&key(i), &format!("value-{i}"));
    }
    h
}

fn prefix(p: &str) -> RangeRequest {
    let mut end = p.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    RangeRequest {
        key: b(p),
        range_end: end.into(),
        ..Default::default()
    }
}

#[test]
fn chunks_concatenate_to_the_plain_range_for_many_option_combinations() {
    let mut h = loaded(300);
    // Deleted and overwritten keys, so that a past revision differs from now.
    h.delete(&key(7), "");
    h.put(&key(8), "changed");
    let past = 150;
    let requests = [
        prefix("k/"),
        RangeRequest {
            key: b("\0"),
            range_end: b("\0"),
            ..Default::default()
        },
        RangeRequest {
            key: b("k/00250"),
            range_end: b("\0"),
            ..Default::default()
        },
        RangeRequest {
            key: b("k/00003"),
            range_end: b("k/00042"),
            ..Default::default()
        },
        RangeRequest {
            key: b("k/00008"),
            ..Default::default()
        },
        RangeRequest {
            key: b("missing"),
            ..Default::default()
        },
    ];
    for base in requests {
        for limit in [0, -1, 1, 5, 10, 11, 31, 299, 300, 1000] {
            for keys_only in [false, true] {
                for revision in [0, past] {
                    let req = RangeRequest {
                        limit,
                        keys_only,
                        revision,
                        ..base.clone()
                    };
                    for budget in [1, 300, 4096, 1 << 20] {
                        let chunks = stream_all(&h, &req, budget);
                        assert_well_formed(&chunks);
                        assert_eq!(merged(&chunks), h.store.range(&req).unwrap(), "{req:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn the_first_chunk_is_small_and_later_ones_grow_until_the_byte_budget_decides() {
    let h = loaded(2000);
    let sizes: Vec<usize> = stream_all(&h, &prefix("k/"), 1 << 20)
        .iter()
        .map(|c| c.kvs.len())
        .collect();
    assert_eq!(sizes, [10, 20, 40, 80, 160, 320, 640, 730]);

    // A 4 KiB budget: once chunks reach it, each ends with the key-value that takes it
    // to the budget (and the last holds what is left).
    let chunks = stream_all(&h, &prefix("k/"), 4096);
    let sizes: Vec<usize> = chunks.iter().map(|c| c.kvs.len()).collect();
    assert_eq!(sizes[..4], [10, 20, 40, 80]);
    assert!(sizes[4] < 160, "{sizes:?}");
    for chunk in &chunks[4..chunks.len() - 1] {
        let kvs: usize = chunk.kvs.iter().map(encoded_len_in_response).sum();
        let last = chunk.kvs.last().map_or(0, encoded_len_in_response);
        assert!(kvs >= 4096 && kvs - last < 4096, "{kvs} bytes in a chunk");
    }
}

#[test]
fn no_chunk_exceeds_the_budget_by_more_than_one_key_value() {
    let mut h = Harness::new();
    // Values from 1 byte to 40 KiB; one larger than the budget.
    for i in 0..200usize {
        let len = if i == 77 {
            100_000
        } else {
            (i * 997) % 40_000 + 1
        };
        h.apply(C::Put(PutRequest {
            key: b(&key(i)),
            value: vec![b'x'; len].into(),
            ..Default::default()
        }));
    }
    let budget = 64 * 1024;
    let chunks = stream_all(&h, &prefix("k/"), budget);
    assert_well_formed(&chunks);
    let mut chunk_count = 0;
    for chunk in &chunks {
        let size = prost::Message::encoded_len(chunk);
        let largest = chunk
            .kvs
            .iter()
            .map(encoded_len_in_response)
            .max()
            .unwrap_or(0);
        assert!(size <= budget + largest + 64, "{size} bytes in a chunk");
        chunk_count += 1;
    }
    assert!(chunk_count > 40, "{chunk_count} chunks for about 4 MB");
    // The oversized one travels alone or with keys before it, never dropped.
    assert_eq!(merged(&chunks).kvs.len(), 200);
}

#[test]
fn the_last_chunk_counts_every_key_in_the_range_even_past_the_limit() {
    let h = loaded(500);
    let req = RangeRequest {
        limit: 123,
        ..prefix("k/")
    };
    let chunks = stream_all(&h, &req, 1 << 20);
    let last = chunks.last().unwrap();
    assert!(last.more);
    assert_eq!(last.count, 500);
    assert_eq!(merged(&chunks).kvs.len(), 123);
    assert_eq!(last.header.as_ref().unwrap().revision, 501);
    // Exactly as many keys as the limit: no more.
    let chunks = stream_all(
        &h,
        &RangeRequest {
            limit: 500,
            ..prefix("k/")
        },
        1 << 20,
    );
    assert!(!chunks.last().unwrap().more);
}

#[test]
fn count_only_is_one_message_with_the_count_and_the_header() {
    let h = loaded(42);
    let req = RangeRequest {
        count_only: true,
        limit: 3,
        ..prefix("k/")
    };
    let chunks = stream_all(&h, &req, 1);
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].count, 42);
    assert!(chunks[0].kvs.is_empty() && !chunks[0].more);
    assert_eq!(chunks[0].header.as_ref().unwrap().revision, 43);
    assert_eq!(merged(&chunks), h.store.range(&req).unwrap());
}

#[test]
fn an_empty_range_is_one_chunk_with_the_header() {
    let h = loaded(3);
    let chunks = stream_all(&h, &prefix("nothing/"), 1 << 20);
    assert_eq!(chunks.len(), 1);
    assert!(chunks[0].kvs.is_empty());
    assert_eq!(chunks[0].count, 0);
    assert_eq!(chunks[0].header.as_ref().unwrap().revision, 4);
}

#[test]
fn writes_and_compactions_after_the_first_chunk_are_not_seen() {
    let mut h = loaded(100);
    let req = RangeRequest {
        revision: 50,
        ..prefix("k/")
    };
    let expected = h.store.range(&req).unwrap();
    let now = h.store.range(&prefix("k/")).unwrap();
    let mut stream = open(&h, &req, 200).unwrap();
    let mut chunks = vec![stream.next_chunk().unwrap().unwrap()];
    for i in 0..100 {
        h.put(&key(i), "later");
    }
    h.put("k/zzz", "new");
    h.delete(&key(60), "");
    h.apply(C::Compaction(CompactionRequest {
        revision: 150,
        physical: true,
    }));
    h.store.finish_compaction().unwrap();
    h.store.db().compact_range_cf(
        h.store.cf(crate::store::CF_KV).unwrap(),
        None::<&[u8]>,
        None::<&[u8]>,
    );
    chunks.extend(drain(&mut stream));
    assert!(chunks.len() > 3);
    assert_eq!(merged(&chunks), expected);
    // A stream at the current revision (the `latest` family) likewise.
    let mut stream = open(&h, &prefix("k/"), 200).unwrap();
    let first = stream.next_chunk().unwrap().unwrap();
    let at_open = h.store.range(&prefix("k/")).unwrap();
    h.put(&key(99), "even later");
    h.delete(&key(1), "");
    let mut chunks = vec![first];
    chunks.extend(drain(&mut stream));
    assert_eq!(merged(&chunks), at_open);
    assert_ne!(merged(&chunks), now);
}

#[test]
fn future_and_compacted_revisions_are_refused_when_the_stream_opens() {
    let mut h = loaded(10);
    let future = RangeRequest {
        revision: 12,
        ..prefix("k/")
    };
    assert!(matches!(
        open(&h, &future, 100),
        Err(StoreError::FutureRevision)
    ));
    h.apply(C::Compaction(CompactionRequest {
        revision: 5,
        physical: false,
    }));
    let compacted = RangeRequest {
        revision: 4,
        ..prefix("k/")
    };
    assert!(matches!(
        open(&h, &compacted, 100),
        Err(StoreError::Compacted)
    ));
    let at_compaction = RangeRequest {
        revision: 5,
        ..prefix("k/")
    };
    assert_eq!(
        merged(&stream_all(&h, &at_compaction, 100)),
        h.store.range(&at_compaction).unwrap()
    );
}

#[test]
fn a_target_without_an_order_sorts_each_chunk_on_its_own_as_etcd_3_7_does() {
    let mut h = Harness::new();
    for i in 0..50usize {
        // Values descend as keys ascend.
        h.put(&key(i), &format!("{:03}", 100 - i));
    }
    let req = RangeRequest {
        sort_target: SortTarget::Value as i32,
        keys_only: true,
        ..prefix("k/")
    };
    let chunks = stream_all(&h, &req, 1 << 20);
    assert_eq!(chunks[0].kvs.len(), 10);
    // The first chunk holds the first ten keys, ascending by value: key 9 first.
    assert_eq!(chunks[0].kvs[0].key, b(&key(9)));
    assert!(chunks[0].kvs.iter().all(|kv| kv.value.is_empty()));
    let mut keys: Vec<_> = chunks
        .iter()
        .flat_map(|c| c.kvs.iter().map(|kv| kv.key.clone()))
        .collect();
    keys.sort();
    assert_eq!(keys, (0..50).map(|i| b(&key(i))).collect::<Vec<_>>());
}

#[test]
fn each_call_reads_one_budget_of_a_large_range() {
    // 2 000 values of 10 KiB (20 MB): each call reads one budget's worth, never more;
    // between calls the stream holds its snapshot and a resume key, nothing else.
    let mut h = Harness::new();
    for i in 0..2000usize {
        h.apply(C::Put(PutRequest {
            key: b(&key(i)),
            value: vec![b'v'; 10 * 1024].into(),
            ..Default::default()
        }));
    }
    let budget = 256 * 1024;
    let mut stream = open(&h, &prefix("k/"), budget).unwrap();
    let mut total = 0;
    let mut largest = 0;
    while let Some(chunk) = stream.next_chunk().unwrap() {
        let size = prost::Message::encoded_len(&chunk);
        largest = largest.max(size);
        total += size;
    }
    assert!(total > 20_000_000);
    assert!(largest <= budget + 11 * 1024, "{largest}");
}

#[test]
fn a_snapshot_install_during_a_stream_neither_waits_for_it_nor_shows_in_it() {
    let h = loaded(500);
    let expected = h.store.range(&prefix("k/")).unwrap();
    let mut stream = open(&h, &prefix("k/"), 512).unwrap();
    let mut chunks = vec![stream.next_chunk().unwrap().unwrap()];
    // The stream holds no install gate between chunks.
    let alone = h.store.install_gate.clone().try_write_owned();
    assert!(alone.is_ok(), "an open stream holds snapshot installs back");
    drop(alone);
    // Another store's snapshot rewrites this one under the stream.
    let mut other = Harness::new();
    for i in 0..50 {
        other.put(&key(i * 3), "from the leader");
    }
    let dir = tempfile::tempdir().unwrap();
    other.store.build_snapshot(dir.path()).unwrap();
    let file = other
        .store
        .current_snapshot(dir.path(), true)
        .unwrap()
        .unwrap();
    h.store.install_snapshot(&file.path).unwrap();
    assert_eq!(h.store.range(&prefix("k/")).unwrap().count, 50);
    chunks.extend(drain(&mut stream));
    assert!(chunks.len() > 5);
    assert_eq!(merged(&chunks), expected);
}
