//! The apply path against one command at a time: a batch applies exactly as its
//! commands one by one, is invisible until flushed and keeps the rest when one command
//! fails; the `latest` index answers as the version walk (and is rebuilt for a store
//! written without it); event replay from history, and the feed carrying exactly what
//! history replays.

use bytes::Bytes;

use super::tests::{all_history, apply_alone, b, compare, log_id, op, Harness};
use super::*;
use crate::proto::command::command::Request as C;
use crate::proto::command::command_result::Result as R;
use crate::proto::command::Command;
use crate::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::proto::etcdserverpb::request_op::Request as Op;
use crate::proto::etcdserverpb::*;

/// A deterministic mix of every command shape the apply path distinguishes: puts (some
/// with `ignore_value`), deletes of one key and of ranges, transactions comparing,
/// reading (some at an explicit revision), writing and failing, and compactions.
fn command_mix(seed: u64, count: usize) -> Vec<Command> {
    let mut state = seed;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let key = |i: u64| b(&format!("k{i}"));
    (0..count)
        .map(|i| {
            let request = match next(10) {
                0..=3 => C::Put(PutRequest {
                    key: key(next(6)),
                    value: b(&format!("v{i}")),
                    prev_kv: next(2) == 0,
                    ignore_value: next(8) == 0,
                    ..Default::default()
                }),
                4 => C::DeleteRange(DeleteRangeRequest {
                    key: key(next(6)),
                    range_end: if next(2) == 0 {
                        Bytes::new()
                    } else {
                        key(next(6) + 1)
                    },
                    prev_kv: true,
                }),
                5..=8 => {
                    let k = key(next(6));
                    let read = RangeRequest {
                        key: key(0),
                        range_end: b("l"),
                        revision: if next(3) == 0 { i as i64 / 2 } else { 0 },
                        ..Default::default()
                    };
                    C::Txn(TxnRequest {
                        compare: vec![compare(
                            std::str::from_utf8(&k).unwrap(),
                            CompareTarget::Mod,
                            CompareResult::Less,
                            TargetUnion::ModRevision(next(40) as i64),
                        )],
                        success: vec![
                            op(Op::RequestPut(PutRequest {
                                key: k.clone(),
                                value: b(&format!("t{i}")),
                                ..Default::default()
                            })),
                            op(Op::RequestDeleteRange(DeleteRangeRequest {
                                key: key(next(6)),
                                ..Default::default()
                            })),
                            op(Op::RequestRange(read)),
                            op(Op::RequestPut(PutRequest {
                                key: k,
                                ignore_value: next(4) == 0,
                                ..Default::default()
                            })),
                        ],
                        failure: vec![op(Op::RequestRange(RangeRequest {
                            key: key(0),
                            range_end: b("l"),
                            ..Default::default()
                        }))],
                    })
                }
                _ => C::Compaction(CompactionRequest {
                    revision: i as i64 / 3,
                    ..Default::default()
                }),
            };
            Command {
                auth_revision: 0,
                auth_checked: false,
                request: Some(request),
            }
        })
        .collect()
}

#[test]
fn a_batch_applies_exactly_as_one_command_at_a_time() {
    for seed in 1..=20 {
        let commands = command_mix(seed, 120);
        let one_by_one = Harness::new();
        let expected: Vec<_> = commands
            .iter()
            .enumerate()
            .map(|(i, c)| apply_alone(&one_by_one.store, &log_id(i as u64 + 1), c).unwrap())
            .collect();

        let batched = Harness::new();
        let mut batch = batched.store.begin_apply().unwrap();
        let outcomes: Vec<_> = commands
            .iter()
            .enumerate()
            .map(|(i, c)| batch.command(&log_id(i as u64 + 1), c).unwrap())
            .collect();
        batch.flush().unwrap();

        for (i, (got, want)) in outcomes.iter().zip(&expected).enumerate() {
            assert_eq!(got, want, "seed {seed}, command {i}: {:?}", commands[i]);
        }
        assert_eq!(
            all_history(&batched.store),
            all_history(&one_by_one.store),
            "seed {seed}"
        );
        assert_eq!(
            read_applied(&batched.store).unwrap().last_applied,
            Some(log_id(commands.len() as u64))
        );
    }
}

#[test]
fn a_batch_is_invisible_until_flushed_and_a_failed_command_keeps_the_rest() {
    let h = Harness::new();
    let mut batch = h.store.begin_apply().unwrap();
    let put = |key: &str| Command {
        auth_revision: 0,
        auth_checked: false,
        request: Some(C::Put(PutRequest {
            key: b(key),
            value: b("v"),
            ..Default::default()
        })),
    };
    batch.command(&log_id(1), &put("a")).unwrap();
    batch.command(&log_id(2), &put("b")).unwrap();
    assert!(h.get("a").is_none());
    assert_eq!(h.store.current_revision().unwrap(), 1);
    assert!(read_applied(&h.store).unwrap().last_applied.is_none());

    // Deletes "a" and then needs it: fails after staging, and only its changes go.
    let failing = Command {
        auth_revision: 0,
        auth_checked: false,
        request: Some(C::Txn(TxnRequest {
            success: vec![
                op(Op::RequestDeleteRange(DeleteRangeRequest {
                    key: b("a"),
                    ..Default::default()
                })),
                op(Op::RequestPut(PutRequest {
                    key: b("a"),
                    ignore_value: true,
                    ..Default::default()
                })),
            ],
            ..Default::default()
        })),
    };
    let outcome = batch.command(&log_id(3), &failing).unwrap();
    assert!(matches!(outcome.result, Some(R::Error(_))), "{outcome:?}");
    batch.command(&log_id(4), &put("c")).unwrap();
    batch.flush().unwrap();
    assert_eq!(
        h.keys(RangeRequest {
            key: b("a"),
            range_end: b("z"),
            ..Default::default()
        }),
        ["a", "b", "c"]
    );
    assert_eq!(h.store.current_revision().unwrap(), 4);
    assert_eq!(
        read_applied(&h.store).unwrap().last_applied,
        Some(log_id(4))
    );
}

/// Every live key with its revision and record, read at the current revision twice:
/// through `latest` (what reads use) and by walking the versions in `kv`.
type LiveKey = (Vec<u8>, i64, Vec<u8>);
fn live_keys_both_ways(store: &RevisionStore, key: &[u8], end: &[u8]) -> [Vec<LiveKey>; 2] {
    let snapshot = store.db.snapshot();
    let reader = range::Reader::new(store, &snapshot).unwrap();
    let current = reader.revisions().current;
    let mut through_latest = Vec::new();
    reader
        .scan(key, end, current, |k, revision, record| {
            through_latest.push((k.to_vec(), revision, record.to_vec()));
            Ok(true)
        })
        .unwrap();
    let mut through_versions = Vec::new();
    reader
        .scan_versions(key, end, current, |k, revision, record| {
            through_versions.push((k.to_vec(), revision, record.to_vec()));
            Ok(true)
        })
        .unwrap();
    [through_latest, through_versions]
}

fn assert_latest_matches_versions(store: &RevisionStore, context: &str) {
    let [latest, versions] = live_keys_both_ways(store, &[0], &[0]);
    assert_eq!(latest, versions, "{context}: every key");
    for i in 0..7 {
        let key = format!("k{i}");
        let [latest, versions] = live_keys_both_ways(store, key.as_bytes(), &[]);
        assert_eq!(latest, versions, "{context}: {key}");
    }
}

#[test]
fn the_latest_index_answers_exactly_as_the_version_walk() {
    for seed in 1..=10 {
        let commands = command_mix(seed, 120);
        let one_by_one = Harness::new();
        let batched = Harness::new();
        let mut batch = batched.store.begin_apply().unwrap();
        for (i, c) in commands.iter().enumerate() {
            let id = log_id(i as u64 + 1);
            apply_alone(&one_by_one.store, &id, c).unwrap();
            assert_latest_matches_versions(&one_by_one.store, &format!("seed {seed}, {i}"));
            batch.command(&id, c).unwrap();
            if i % 7 == 6 {
                batch.flush().unwrap();
                assert_latest_matches_versions(&batched.store, &format!("seed {seed}, {i}"));
            }
        }
        batch.flush().unwrap();
        assert_latest_matches_versions(&batched.store, &format!("seed {seed}, batched"));
    }
}

#[test]
fn a_store_written_without_the_latest_index_gets_it_rebuilt() {
    let mut h = Harness::new();
    for c in command_mix(3, 120) {
        h.apply(c.request.unwrap());
    }
    let before = live_keys_both_ways(&h.store, &[0], &[0]);
    assert!(!before[0].is_empty());
    // What a store written before `latest` existed looks like: neither the index nor
    // its marker.
    h.store.clear(CF_LATEST).unwrap();
    let mut unmark = rocksdb::WriteBatch::default();
    unmark.delete_cf(h.store.cf(CF_META).unwrap(), b"latest_index_built");
    h.store.db.write(unmark).unwrap();
    assert!(live_keys_both_ways(&h.store, &[0], &[0])[0].is_empty());

    h.store.ensure_latest_index().unwrap();
    assert_eq!(live_keys_both_ways(&h.store, &[0], &[0]), before);
    assert_latest_matches_versions(&h.store, "rebuilt");
    // Once built, it is never rebuilt: a later open leaves it as the apply path keeps it.
    h.put("after", "1");
    h.store.ensure_latest_index().unwrap();
    assert_eq!(h.get("after").unwrap().value, b("1"));
}

/// (type, key, mod revision, value, previous value) of each event of a page.
type EventSummary = (i32, String, i64, String, Option<String>);
fn summary(page: &EventPage) -> Vec<EventSummary> {
    let text = |b: &Bytes| String::from_utf8(b.to_vec()).unwrap();
    page.events
        .iter()
        .map(|e| {
            let kv = e.kv.clone().unwrap();
            (
                e.r#type,
                text(&kv.key),
                kv.mod_revision,
                text(&kv.value),
                e.prev_kv.as_ref().map(|p| text(&p.value)),
            )
        })
        .collect()
}

#[test]
fn events_replay_history_in_order_with_prev_kv_and_never_split_a_revision() {
    const PUT: i32 = 0;
    const DELETE: i32 = 1;
    let mut h = Harness::new();
    h.put("a", "1"); // 2
    h.put("b", "1"); // 3
    h.apply(C::Txn(TxnRequest {
        success: vec![
            op(Op::RequestPut(PutRequest {
                key: b("a"),
                value: b("2"),
                ..Default::default()
            })),
            op(Op::RequestDeleteRange(DeleteRangeRequest {
                key: b("b"),
                ..Default::default()
            })),
        ],
        ..Default::default()
    })); // 4
    h.put("c", "1"); // 5
    h.delete("a", ""); // 6
    let store = h.store.clone();
    let all = |from, to, prev_kv, max_bytes| {
        let interest = if prev_kv {
            Interest::EventsWithPrevious
        } else {
            Interest::Events
        };
        store.events(from, to, &|_| interest, max_bytes)
    };

    let page = all(2, 6, true, usize::MAX).unwrap();
    assert_eq!(page.through, 6);
    let s = |x: &str| x.to_owned();
    assert_eq!(
        summary(&page),
        vec![
            (PUT, s("a"), 2, s("1"), None),
            (PUT, s("b"), 3, s("1"), None),
            (PUT, s("a"), 4, s("2"), Some(s("1"))),
            (DELETE, s("b"), 4, s(""), Some(s("1"))),
            (PUT, s("c"), 5, s("1"), None),
            (DELETE, s("a"), 6, s(""), Some(s("2"))),
        ]
    );
    // A delete's kv is its key and revision only, as etcd sends it.
    let deleted = page.events[3].kv.clone().unwrap();
    assert_eq!((deleted.version, deleted.create_revision), (0, 0));
    assert!(all(2, 6, false, usize::MAX)
        .unwrap()
        .events
        .iter()
        .all(|e| e.prev_kv.is_none()));

    // The limit is reached inside revision 4: the page still takes all of it.
    let without_prev = all(2, 6, false, usize::MAX).unwrap();
    let limit: usize = without_prev.events[..3]
        .iter()
        .map(prost::Message::encoded_len)
        .sum();
    let first = all(2, 6, false, limit).unwrap();
    assert_eq!((first.events.len(), first.through), (4, 4));
    let rest = all(first.through + 1, 6, false, limit).unwrap();
    assert_eq!((rest.events.len(), rest.through), (2, 6));

    // Only the watched keys; beyond the current revision; nothing yet.
    let only_a = h
        .store
        .events(
            1,
            100,
            &|key| {
                if key == b"a" {
                    Interest::Events
                } else {
                    Interest::Ignore
                }
            },
            usize::MAX,
        )
        .unwrap();
    let revisions: Vec<i64> = summary(&only_a).iter().map(|e| e.2).collect();
    assert_eq!((revisions, only_a.through), (vec![2, 4, 6], 6));
    assert_eq!(
        all(7, 100, false, usize::MAX).unwrap(),
        EventPage {
            events: vec![],
            through: 6
        }
    );

    // After compacting at 4, a replay may start at 4 (whose versions before it are
    // gone, so no prev_kv) but not below.
    h.apply(C::Compaction(CompactionRequest {
        revision: 4,
        physical: true,
    }));
    assert!(matches!(
        all(3, 6, true, usize::MAX),
        Err(StoreError::Compacted)
    ));
    assert_eq!(
        summary(&all(4, 6, true, usize::MAX).unwrap()),
        vec![
            (PUT, s("a"), 4, s("2"), None),
            (DELETE, s("b"), 4, s(""), None),
            (PUT, s("c"), 5, s("1"), None),
            (DELETE, s("a"), 6, s(""), Some(s("2"))),
        ]
    );
}

#[test]
fn the_feed_carries_exactly_what_history_replays() {
    for seed in 1..=10 {
        let h = Harness::new();
        let mut feed = h.store.subscribe();
        let mut published = Vec::new();
        let mut through = 1;
        // The batches chain: each starts where the one before ended. (Taken after every
        // command, so that the feed never drops one for this slow reader.)
        let mut take = |feed: &mut tokio::sync::broadcast::Receiver<_>| {
            while let Ok(changes) = feed.try_recv() {
                let changes: std::sync::Arc<Changes> = changes;
                assert_eq!(changes.since, through, "seed {seed}: a gap in the feed");
                assert!(changes.through > changes.since);
                through = changes.through;
                published.extend(changes.events.iter().cloned());
            }
        };
        let mut batch = h.store.begin_apply().unwrap();
        for (i, c) in command_mix(seed, 120).iter().enumerate() {
            batch.command(&log_id(i as u64 + 1), c).unwrap();
            if i % 5 == 4 {
                batch.flush().unwrap();
            }
            take(&mut feed);
        }
        batch.flush().unwrap();
        take(&mut feed);
        assert_eq!(through, h.store.current_revision().unwrap(), "seed {seed}");

        // What history replays from the compacted revision on, the feed carried.
        let from = h.store.compacted_revision().unwrap().max(2);
        let replayed = h
            .store
            .events(from, through, &|_| Interest::EventsWithPrevious, usize::MAX)
            .unwrap()
            .events;
        let published: Vec<_> = published
            .into_iter()
            .filter(|e| e.kv.as_ref().unwrap().mod_revision >= from)
            .collect();
        assert_eq!(published.len(), replayed.len(), "seed {seed}");
        for (fed, replay) in published.iter().zip(&replayed) {
            let kv = fed.kv.as_ref().unwrap();
            let changes_of_key_in_revision = replayed
                .iter()
                .filter(|e| {
                    let other = e.kv.as_ref().unwrap();
                    other.mod_revision == kv.mod_revision && other.key == kv.key
                })
                .count();
            if changes_of_key_in_revision > 1 {
                // Only this store-level mix changes a key twice in one revision (etcd
                // refuses such a txn); history keeps the last version of the two.
                assert_eq!(fed.r#type, replay.r#type, "seed {seed}");
                continue;
            }
            assert_eq!(
                (fed.r#type, &fed.kv),
                (replay.r#type, &replay.kv),
                "seed {seed}"
            );
            // History has no previous version once compaction passed it (etcd then
            // leaves prev_kv out); the feed had it at the time.
            let compacted = h.store.compacted_revision().unwrap();
            if kv.mod_revision > compacted {
                assert_eq!(fed.prev_kv, replay.prev_kv, "seed {seed}: {fed:?}");
            }
        }
    }
}

/// A command of a kind a newer build added (a request field this build does not know)
/// decodes with no request; applying it is refused as a failure of this member, never
/// applied as something else nor skipped, and the store is unchanged.
#[test]
fn a_command_of_a_kind_this_build_does_not_know_stops_the_apply() {
    use prost::Message;
    let mut h = Harness::new();
    h.put("kept", "v");
    let before = h.store.current_revision().unwrap();
    // Field 999 of Command's request oneof, length-delimited: no build has it yet.
    let mut encoded = Command::default().encode_to_vec();
    prost::encoding::bytes::encode(999, &Bytes::from_static(b"future"), &mut encoded);
    let future = Command::decode(encoded.as_slice()).unwrap();
    assert!(
        future.request.is_none(),
        "an unknown kind decodes as no request"
    );
    let refused = apply_alone(&h.store, &log_id(9), &future).unwrap_err();
    assert!(
        matches!(refused, StoreError::UnknownCommand { index: 9, .. }),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("newer QuantyKube"),
        "{refused}"
    );
    assert_eq!(
        refused.command_kind(),
        None,
        "a failure of this member, not a result"
    );
    assert_eq!(h.store.current_revision().unwrap(), before);
}
