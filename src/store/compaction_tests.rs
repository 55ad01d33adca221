//! Physical compaction in the background (`compaction.rs`): what reads see while a
//! pass is under way, writes between its steps, a snapshot file taken in the middle,
//! an install that replaces the store under a pass, and what a pass leaves against
//! etcd's keep rule, from history entries that name the version they replaced and
//! from entries written before they did.

use super::tests::{b, no_install, round_trip, Harness};
use super::*;
use crate::proto::command::command::Request as C;
use crate::proto::etcdserverpb::request_op::Request as Op;
use crate::proto::etcdserverpb::{
    CompactionRequest, DeleteRangeRequest, LeaseGrantRequest, LeaseRevokeRequest, PutRequest,
    RangeRequest, RequestOp, TxnRequest,
};
use crate::proto::mvccpb::KeyValue;

const KEYS: usize = 2500;

/// Keys 0..1 249 were rewritten by then, the others not yet.
const COMPACTED: i64 = 1 + KEYS as i64 + 1250;

/// `KEYS` keys written three times over (revisions 2 to 7 501), compacted in the middle
/// of the second round but not yet carried out: a pass of several steps.
fn three_rounds_compacted_at(compacted: i64) -> Harness {
    let mut h = Harness::new();
    for round in 0..3 {
        for i in 0..KEYS {
            h.put(&format!("k/{i:05}"), &format!("round {round}"));
        }
    }
    h.apply_unfinished(C::Compaction(CompactionRequest {
        revision: compacted,
        physical: false,
    }));
    h
}

/// [`three_rounds_compacted_at`] `COMPACTED`, with the first step of its pass done.
fn one_step_into_a_pass() -> (Harness, CompactionPass) {
    let h = three_rounds_compacted_at(COMPACTED);
    let mut pass = h.store.compaction_pass().unwrap().unwrap();
    assert!(!pass.step(&h.store).unwrap());
    (h, pass)
}

/// Every key at each of `revisions`, and HashKV at each (above the compacted revision:
/// HashKV at it answers `Compacted`, as etcd); not the current revision, which writes
/// between steps move.
fn what_reads_see(h: &Harness, revisions: &[i64]) -> Vec<(Vec<KeyValue>, u32, i64)> {
    revisions
        .iter()
        .map(|&revision| {
            let range = h
                .store
                .range(&RangeRequest {
                    key: b("k/"),
                    range_end: b("k0"),
                    revision,
                    ..Default::default()
                })
                .unwrap();
            let hash = h.store.hash_kv(revision).unwrap();
            (range.kvs, hash.hash, hash.compacted)
        })
        .collect()
}

fn stored_versions(store: &RevisionStore) -> usize {
    let kv = store.cf(CF_KV).unwrap();
    store
        .db
        .iterator_cf(kv, rocksdb::IteratorMode::Start)
        .count()
}

#[test]
fn reads_above_the_compacted_revision_are_the_same_at_every_step_of_a_pass() {
    let mut h = three_rounds_compacted_at(COMPACTED);
    let last = h.store.current_revision().unwrap();
    let revisions = [COMPACTED + 1, COMPACTED + 2000, last];
    let before = what_reads_see(&h, &revisions);
    assert_eq!(h.store.physically_compacted(), 0);

    let mut pass = h.store.compaction_pass().unwrap().unwrap();
    let mut steps = 0;
    let mut writes_between = 0;
    while !pass.step(&h.store).unwrap() {
        steps += 1;
        assert!(
            what_reads_see(&h, &revisions) == before,
            "after step {steps}"
        );
        // Writes go on between steps; the pass leaves their versions alone.
        h.put("k/00000", &format!("between step {steps}"));
        writes_between += 1;
    }
    assert!(steps >= 3, "{steps} steps");
    assert!(what_reads_see(&h, &revisions) == before);
    assert_eq!(h.store.physically_compacted(), COMPACTED);
    assert!(h.store.compaction_pass().unwrap().is_none());
    // Kept: the version live at the COMPACTED revision and every later one (two of
    // the keys rewritten by then, three of the others), and the writes in between.
    assert_eq!(
        stored_versions(&h.store),
        1250 * 2 + (KEYS - 1250) * 3 + writes_between
    );
    assert_eq!(h.get("k/00000").unwrap().version, 3 + writes_between as i64);
}

#[test]
fn a_snapshot_file_taken_during_a_pass_is_finished_by_the_member_it_restores() {
    let (h, _pass) = one_step_into_a_pass();

    // The export says the compaction was decided but not carried out.
    let export = h.store.export(&no_install(&h.store)).unwrap();
    assert_eq!(export.compacted_revision(), COMPACTED);
    assert_eq!(export.physically_compacted(), 0);
    drop(export);
    let copy = round_trip(&h.store);
    assert_eq!(copy.store.physically_compacted(), 0);
    let last = h.store.current_revision().unwrap();
    let revisions = [COMPACTED + 1, last];
    assert!(what_reads_see(&copy, &revisions) == what_reads_see(&h, &revisions));

    h.store.finish_compaction().unwrap();
    copy.store.finish_compaction().unwrap();
    assert_eq!(copy.store.physically_compacted(), COMPACTED);
    assert_eq!(stored_versions(&copy.store), stored_versions(&h.store));
    assert!(what_reads_see(&copy, &revisions) == what_reads_see(&h, &revisions));
}

#[test]
fn a_pass_gives_up_when_an_install_replaces_the_store_and_the_next_starts_from_its_state() {
    let (h, mut pass) = one_step_into_a_pass();

    // The leader's snapshot: the same history, COMPACTED further and carried out.
    let mut leader = three_rounds_compacted_at(COMPACTED);
    leader.apply(C::Compaction(CompactionRequest {
        revision: COMPACTED + 1000,
        physical: true,
    }));
    let dir = tempfile::tempdir().unwrap();
    let info = leader.store.build_snapshot(dir.path()).unwrap();
    let file = leader
        .store
        .current_snapshot(dir.path(), true)
        .unwrap()
        .unwrap();
    assert_eq!(file.meta, info.meta);
    h.store.install_snapshot(&file.path).unwrap();
    assert_eq!(h.store.physically_compacted(), COMPACTED + 1000);

    // The old pass ends without touching the new store; none is left to do.
    let versions = stored_versions(&h.store);
    assert!(pass.step(&h.store).unwrap());
    assert_eq!(stored_versions(&h.store), versions);
    assert_eq!(h.store.physically_compacted(), COMPACTED + 1000);
    assert!(h.store.compaction_pass().unwrap().is_none());
    assert_eq!(stored_versions(&h.store), stored_versions(&leader.store));
}

/// `kv` filters each file by the user keys it holds (`with_owner_filter` in mod.rs),
/// and compaction's seeks use that filter to skip files. Reads that cross keys must not:
/// here each half of the keys sits in files of its own, so a read that let the filter
/// hide a file would miss half of them, and a compaction whose filter lied would leave
/// old versions behind.
#[test]
fn reads_across_keys_see_every_file_and_compaction_finds_every_version() {
    let mut h = Harness::new();
    let flush_kv = |h: &Harness| {
        let kv = h.store.cf(CF_KV).unwrap();
        h.store.db.flush_cf(kv).unwrap();
    };
    for round in 0..3 {
        for half in [0..50, 50..100] {
            for i in half {
                h.put(&format!("k/{i:03}"), &format!("round {round}"));
            }
            flush_kv(&h);
        }
    }
    let after_round = |round: i64| 1 + 100 * (round + 1);
    let read_at = |h: &Harness, revision: i64| {
        h.store
            .range(&RangeRequest {
                key: b("k/"),
                range_end: b("k0"),
                revision,
                ..Default::default()
            })
            .unwrap()
            .kvs
    };
    let before = read_at(&h, after_round(1));
    assert_eq!(before.len(), 100);
    assert!(before.iter().all(|kv| kv.value == b("round 1")));
    h.apply(C::Compaction(CompactionRequest {
        revision: after_round(1),
        physical: false,
    }));
    // Kept: the version live at the compacted revision, and the newer one.
    assert_eq!(stored_versions(&h.store), 200);
    assert_eq!(read_at(&h, after_round(1)), before);
    assert_eq!(read_at(&h, 0).len(), 100);
}

/// Every entry of column family `cf`, raw.
fn entries(store: &RevisionStore, cf: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    store
        .db
        .iterator_cf(store.cf(cf).unwrap(), rocksdb::IteratorMode::Start)
        .map(|entry| {
            let (key, value) = entry.unwrap();
            (key.to_vec(), value.to_vec())
        })
        .collect()
}

/// What a pass to `to` must leave of `kv` and `history` as they are before it (the
/// module doc of compaction.rs): each key's versions above `to`, and its newest one at
/// or below `to` unless that is a deletion; the history entries of the versions kept,
/// and every entry at or above `to`.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;
fn kept_by_a_pass(kv: &Entries, history: &Entries, to: i64) -> (Entries, Entries) {
    let mut kept_kv = Vec::new();
    let mut owner_done: Option<Vec<u8>> = None;
    for (raw, record) in kv {
        let (owner, revision) = encoding::split_version_key(raw).unwrap();
        let newest_at_to = revision <= to && owner_done.as_deref() != Some(owner);
        if revision <= to {
            owner_done = Some(owner.to_vec());
        }
        if revision > to || newest_at_to && !encoding::StoredVersion::is_tombstone(record) {
            kept_kv.push((raw.clone(), record.clone()));
        }
    }
    let kept_versions: std::collections::BTreeSet<&Vec<u8>> =
        kept_kv.iter().map(|(raw, _)| raw).collect();
    let kept_history = history
        .iter()
        .filter(|(raw, entry)| {
            let (revision, _) = encoding::split_history_key(raw).unwrap();
            let key = encoding::HistoryEntry::decode(entry).unwrap().key;
            let version = encoding::version_key(&encoding::escape_key(&key), revision);
            revision >= to || kept_versions.contains(&version)
        })
        .cloned()
        .collect();
    (kept_kv, kept_history)
}

/// A transaction whose success branch runs `ops` in order.
fn txn(ops: Vec<Op>) -> C {
    C::Txn(TxnRequest {
        success: ops
            .into_iter()
            .map(|request| RequestOp {
                request: Some(request),
            })
            .collect(),
        ..Default::default()
    })
}

/// Client writes over ten keys, in batches of one to four commands: puts (some with a
/// lease), transactions putting up to three keys (changes at sub revisions above 0),
/// deletions of one key and of ranges, lease grants and revocations.
fn write_mix(h: &mut Harness, state: &mut u64, commands: usize) {
    let mut next = |n: u64| {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*state >> 33) % n
    };
    let key = |i: u64| b(&format!("k{i}"));
    let mut written = 0;
    while written < commands {
        let size = 1 + next(4) as usize;
        let batch: Vec<C> = (0..size)
            .map(|_| match next(10) {
                0..=3 => C::Put(PutRequest {
                    key: key(next(10)),
                    value: b(&format!("v{}", next(1000))),
                    lease: if next(4) == 0 { 1 + next(2) as i64 } else { 0 },
                    ..Default::default()
                }),
                4 | 5 => {
                    let first = next(8);
                    let put = |k| {
                        Op::RequestPut(PutRequest {
                            key: key(k),
                            value: b("t"),
                            ..Default::default()
                        })
                    };
                    let mut ops = vec![put(first), put(first + 1)];
                    if next(2) == 0 {
                        ops.push(put(first + 2));
                    }
                    txn(ops)
                }
                6 => C::DeleteRange(DeleteRangeRequest {
                    key: key(next(10)),
                    ..Default::default()
                }),
                7 => C::DeleteRange(DeleteRangeRequest {
                    key: key(next(5)),
                    range_end: key(5 + next(5)),
                    ..Default::default()
                }),
                8 => C::LeaseGrant(LeaseGrantRequest {
                    id: 1 + next(2) as i64,
                    ttl: 60,
                }),
                _ => C::LeaseRevoke(LeaseRevokeRequest {
                    id: 1 + next(2) as i64,
                }),
            })
            .collect();
        written += batch.len();
        h.apply_batch(batch);
    }
}

/// Rewrites about half of the history entries and of `latest`'s values in the layouts
/// of a store written before changes named the version they replaced.
fn as_written_before_the_chain(store: &RevisionStore) {
    let mut batch = rocksdb::WriteBatch::default();
    let history = store.cf(CF_HISTORY).unwrap();
    for (raw, entry) in entries(store, CF_HISTORY).iter().step_by(2) {
        let mut entry = encoding::HistoryEntry::decode(entry).unwrap();
        entry.replaced = encoding::Replaced::Unknown;
        batch.put_cf(history, raw, entry.encode());
    }
    let latest = store.cf(CF_LATEST).unwrap();
    for (key, raw) in entries(store, CF_LATEST).iter().step_by(2) {
        let value = encoding::split_latest_value(raw).unwrap();
        batch.put_cf(
            latest,
            key,
            encoding::latest_value(value.mod_revision, None, value.record),
        );
    }
    store.db.write(batch).unwrap();
}

/// Compacts at `to` and checks that the pass left exactly what etcd's rule keeps.
fn compact_and_check(h: &mut Harness, to: i64, context: &str) {
    h.apply_unfinished(C::Compaction(CompactionRequest {
        revision: to,
        physical: false,
    }));
    let (kv, history) = (entries(&h.store, CF_KV), entries(&h.store, CF_HISTORY));
    let (want_kv, want_history) = kept_by_a_pass(&kv, &history, to);
    h.store.finish_compaction().unwrap();
    assert_eq!(entries(&h.store, CF_KV), want_kv, "{context}: kv");
    assert_eq!(
        entries(&h.store, CF_HISTORY),
        want_history,
        "{context}: history"
    );
}

#[test]
fn a_pass_leaves_exactly_what_etcd_keeps_from_entries_old_and_new() {
    for seed in 1..=16 {
        for old_layouts in [false, true] {
            let context = format!("seed {seed}, old layouts {old_layouts}");
            let mut h = Harness::new();
            let mut state = seed;
            write_mix(&mut h, &mut state, 80);
            if old_layouts {
                as_written_before_the_chain(&h.store);
            }
            write_mix(&mut h, &mut state, 80);
            let first = 2 + (state >> 40) as i64 % (h.store.current_revision().unwrap() - 1);
            compact_and_check(&mut h, first, &context);
            write_mix(&mut h, &mut state, 80);
            // The next compaction at a deletion's own revision: its event stays.
            h.put("k3", "doomed");
            h.apply(C::DeleteRange(DeleteRangeRequest {
                key: b("k3"),
                ..Default::default()
            }));
            let second = h.store.current_revision().unwrap();
            compact_and_check(&mut h, second, &context);
        }
    }
}

/// Each history entry's `replaced`, in revision order, with the entry's key.
fn replaced_by_entry(store: &RevisionStore) -> Vec<(String, encoding::Replaced)> {
    entries(store, CF_HISTORY)
        .iter()
        .map(|(_, raw)| {
            let entry = encoding::HistoryEntry::decode(raw).unwrap();
            (String::from_utf8(entry.key).unwrap(), entry.replaced)
        })
        .collect()
}

#[test]
fn changes_name_the_version_they_replaced_but_a_range_deletion() {
    use encoding::{ChangeId, Replaced};
    let version = |main, sub, key: &str, value: &str| Replaced::Version {
        written: ChangeId { main, sub },
        bytes: encoding::replaced_bytes(
            key.len(),
            encoding::escape_key(key.as_bytes()).len(),
            value.len(),
        ),
    };
    let put = |key: &str, value: &str| {
        Op::RequestPut(PutRequest {
            key: b(key),
            value: b(value),
            ..Default::default()
        })
    };
    let delete = |key: &str| {
        Op::RequestDeleteRange(DeleteRangeRequest {
            key: b(key),
            ..Default::default()
        })
    };
    let mut h = Harness::new();
    h.put("a", "1"); // 2
    h.apply(txn(vec![put("b", "22"), put("a", "333")])); // 3.0, 3.1
    h.apply(C::DeleteRange(DeleteRangeRequest {
        key: b("a"),
        ..Default::default()
    })); // 4
    h.apply(txn(vec![put("c", "4"), delete("c"), delete("b")])); // 5.0-5.2
    h.put("d", "5"); // 6
    h.apply(C::DeleteRange(DeleteRangeRequest {
        key: b("a"),
        range_end: b("z"),
        ..Default::default()
    })); // 7: d
    assert_eq!(
        replaced_by_entry(&h.store),
        [
            ("a".into(), Replaced::Nothing),
            ("b".into(), Replaced::Nothing),
            ("a".into(), version(2, 0, "a", "1")),
            // A single key's deletion, from `latest` and from the batch's staged changes.
            ("a".into(), version(3, 1, "a", "333")),
            ("c".into(), Replaced::Nothing),
            ("c".into(), version(5, 0, "c", "4")),
            ("b".into(), version(3, 0, "b", "22")),
            ("d".into(), Replaced::Nothing),
            // A range's deletions do not know the sub revision: compaction looks them up.
            ("d".into(), Replaced::Unknown),
        ]
    );
}
