//! Physical compaction in the background (`compaction.rs`): what reads see while a
//! pass is under way, writes between its steps, a snapshot file taken in the middle,
//! and an install that replaces the store under a pass.

use super::tests::{b, no_install, round_trip, Harness};
use super::*;
use crate::proto::command::command::Request as C;
use crate::proto::etcdserverpb::{CompactionRequest, RangeRequest};
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
