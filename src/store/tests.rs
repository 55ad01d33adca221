//! The revision store against etcd's documented MVCC behaviour, without raft.

use std::sync::Arc;

use bytes::Bytes;
use openraft::vote::leader_id_adv::LeaderId;
use quantykube_raft::LogId;

use super::*;
use crate::proto::command::command::Request as C;
use crate::proto::command::command_error::Kind;
use crate::proto::command::command_result::Result as R;
use crate::proto::command::Command;
use crate::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use crate::proto::etcdserverpb::request_op::Request as Op;
use crate::proto::etcdserverpb::response_op::Response as OpResponse;
use crate::proto::etcdserverpb::*;

pub(super) struct Harness {
    _dir: tempfile::TempDir,
    pub(super) store: Arc<RevisionStore>,
    index: u64,
}

impl Harness {
    pub(super) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = open_database(&dir.path().join("db"), &[]).unwrap();
        Harness {
            store: Arc::new(RevisionStore::new(db).unwrap()),
            _dir: dir,
            index: 0,
        }
    }

    /// The same store, closed and opened again (a restart).
    pub(super) fn reopen(self) -> Harness {
        let Harness { _dir, store, index } = self;
        drop(store);
        let db = open_database(&_dir.path().join("db"), &[]).unwrap();
        Harness {
            store: Arc::new(RevisionStore::new(db).unwrap()),
            _dir,
            index,
        }
    }

    pub(super) fn apply(&mut self, request: C) -> R {
        let result = self.apply_unfinished(request);
        // The member's worker deletes a compaction's versions in the background; here
        // it finishes at once (compaction_tests.rs steps it between writes instead).
        self.store.finish_compaction().unwrap();
        result
    }

    /// Applies `request` and leaves a compaction it asks for to be carried out.
    pub(super) fn apply_unfinished(&mut self, request: C) -> R {
        self.apply_command(Command {
            auth_revision: 0,
            auth_checked: false,
            request: Some(request),
        })
    }

    /// Applies `requests` in one batch, as the state machine applies a run of
    /// committed entries, and leaves a compaction among them to be carried out.
    pub(super) fn apply_batch(&mut self, requests: Vec<C>) {
        let mut batch = self.store.begin_apply().unwrap();
        for request in requests {
            self.index += 1;
            let command = Command {
                auth_revision: 0,
                auth_checked: false,
                request: Some(request),
            };
            batch.command(&log_id(self.index), &command).unwrap();
        }
        batch.flush().unwrap();
    }

    /// Applies a whole command (a client's carries the auth revision it was
    /// authorised at).
    pub(super) fn apply_command(&mut self, command: Command) -> R {
        self.index += 1;
        let log_id = LogId::new(
            LeaderId {
                term: 1,
                node_id: 1,
            },
            self.index,
        );
        apply_alone(&self.store, &log_id, &command)
            .unwrap()
            .result
            .unwrap()
    }

    pub(super) fn put(&mut self, key: &str, value: &str) -> PutResponse {
        match self.apply(C::Put(PutRequest {
            key: b(key),
            value: b(value),
            prev_kv: true,
            ..Default::default()
        })) {
            R::Put(p) => p,
            other => panic!("{other:?}"),
        }
    }

    pub(super) fn delete(&mut self, key: &str, end: &str) -> DeleteRangeResponse {
        match self.apply(C::DeleteRange(DeleteRangeRequest {
            key: b(key),
            range_end: b(end),
            prev_kv: true,
        })) {
            R::DeleteRange(d) => d,
            other => panic!("{other:?}"),
        }
    }

    fn range(&self, req: RangeRequest) -> Result<RangeResponse, StoreError> {
        self.store.range(&req)
    }

    pub(super) fn get(&self, key: &str) -> Option<crate::proto::mvccpb::KeyValue> {
        self.range(RangeRequest {
            key: b(key),
            ..Default::default()
        })
        .unwrap()
        .kvs
        .pop()
    }

    fn keys(&self, req: RangeRequest) -> Vec<String> {
        self.range(req)
            .unwrap()
            .kvs
            .iter()
            .map(|kv| String::from_utf8(kv.key.to_vec()).unwrap())
            .collect()
    }
}

/// One command applied and written on its own: a batch of one.
fn apply_alone(
    store: &RevisionStore,
    log_id: &LogId,
    command: &Command,
) -> Result<WriteOutcome, StoreError> {
    let mut batch = store.begin_apply()?;
    let outcome = batch.command(log_id, command)?;
    batch.flush()?;
    Ok(outcome)
}

pub(super) fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn revision(h: &Option<ResponseHeader>) -> i64 {
    h.as_ref().unwrap().revision
}

#[test]
fn revisions_versions_and_recreation_follow_etcd() {
    let mut h = Harness::new();
    assert_eq!(h.store.current_revision().unwrap(), 1);
    let p = h.put("a", "1");
    assert_eq!(revision(&p.header), 2);
    assert!(p.prev_kv.is_none());
    let p = h.put("a", "2");
    assert_eq!(revision(&p.header), 3);
    assert_eq!(p.prev_kv.unwrap().value, b("1"));
    let kv = h.get("a").unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (2, 3, 2));

    let d = h.delete("a", "");
    assert_eq!((d.deleted, revision(&d.header)), (1, 4));
    assert_eq!(d.prev_kvs[0].value, b("2"));
    // Deleting nothing changes nothing, not even the revision.
    let d = h.delete("a", "");
    assert_eq!((d.deleted, revision(&d.header)), (0, 4));
    assert_eq!(h.store.current_revision().unwrap(), 4);

    h.put("a", "3");
    let kv = h.get("a").unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (5, 5, 1));

    // Time travel.
    let at = |rev| {
        h.range(RangeRequest {
            key: b("a"),
            revision: rev,
            ..Default::default()
        })
        .unwrap()
    };
    assert_eq!(at(2).kvs[0].value, b("1"));
    assert_eq!(at(3).kvs[0].version, 2);
    assert!(at(4).kvs.is_empty());
    assert_eq!(
        revision(&at(2).header),
        5,
        "header carries the current revision"
    );
    assert!(matches!(
        h.range(RangeRequest {
            key: b("a"),
            revision: 6,
            ..Default::default()
        }),
        Err(StoreError::FutureRevision)
    ));
}

#[test]
fn ranges_limits_counts_sorting_and_filters() {
    let mut h = Harness::new();
    for (k, v) in [
        ("a", "3"),
        ("b", "1"),
        ("c", "2"),
        ("d", "0"),
        ("e\0x", "9"),
    ] {
        h.put(k, v);
    }
    h.put("b", "1b");
    let all = |end: &str| RangeRequest {
        key: b("a"),
        range_end: b(end),
        ..Default::default()
    };
    assert_eq!(h.keys(all("c")), ["a", "b"]);
    assert_eq!(h.keys(all("\0")), ["a", "b", "c", "d", "e\0x"]);
    assert_eq!(
        h.keys(RangeRequest {
            key: b("e"),
            range_end: b("f"),
            ..Default::default()
        }),
        ["e\0x"]
    );

    let limited = h
        .range(RangeRequest {
            limit: 2,
            ..all("\0")
        })
        .unwrap();
    assert_eq!(
        (limited.kvs.len(), limited.more, limited.count),
        (2, true, 5)
    );
    let exact = h
        .range(RangeRequest {
            limit: 5,
            ..all("\0")
        })
        .unwrap();
    assert!(!exact.more);

    let counted = h
        .range(RangeRequest {
            count_only: true,
            ..all("\0")
        })
        .unwrap();
    assert_eq!((counted.kvs.len(), counted.count), (0, 5));
    let keys_only = h
        .range(RangeRequest {
            keys_only: true,
            ..all("\0")
        })
        .unwrap();
    assert!(keys_only.kvs.iter().all(|kv| kv.value.is_empty()));

    let by_value_desc = h.keys(RangeRequest {
        sort_target: SortTarget::Value as i32,
        sort_order: SortOrder::Descend as i32,
        keys_only: true,
        ..all("\0")
    });
    assert_eq!(by_value_desc, ["e\0x", "a", "c", "b", "d"]);
    // A target without an order sorts ascending, as etcd does.
    let by_mod = h.keys(RangeRequest {
        sort_target: SortTarget::Mod as i32,
        ..all("\0")
    });
    assert_eq!(by_mod, ["a", "c", "d", "e\0x", "b"]);

    let filtered = h
        .range(RangeRequest {
            min_mod_revision: 4,
            max_create_revision: 5,
            limit: 1,
            ..all("\0")
        })
        .unwrap();
    assert_eq!(filtered.kvs[0].key, b("b"));
    assert!(filtered.more);
    assert_eq!(filtered.count, 5, "count ignores filters");
}

fn compare(key: &str, target: CompareTarget, result: CompareResult, value: TargetUnion) -> Compare {
    Compare {
        key: b(key),
        target: target as i32,
        result: result as i32,
        target_union: Some(value),
        range_end: Bytes::new(),
    }
}

fn op(request: Op) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

#[test]
fn transactions_take_one_revision_and_see_their_own_writes() {
    let mut h = Harness::new();
    h.put("k", "v");
    let txn = TxnRequest {
        compare: vec![compare(
            "k",
            CompareTarget::Mod,
            CompareResult::Equal,
            TargetUnion::ModRevision(2),
        )],
        success: vec![
            op(Op::RequestPut(PutRequest {
                key: b("k"),
                value: b("w"),
                ..Default::default()
            })),
            op(Op::RequestPut(PutRequest {
                key: b("other"),
                value: b("x"),
                ..Default::default()
            })),
            op(Op::RequestRange(RangeRequest {
                key: b("k"),
                range_end: b("z"),
                ..Default::default()
            })),
            op(Op::RequestTxn(TxnRequest {
                // Decided before the transaction ran: "other" did not exist then.
                compare: vec![compare(
                    "other",
                    CompareTarget::Version,
                    CompareResult::Equal,
                    TargetUnion::Version(0),
                )],
                success: vec![op(Op::RequestDeleteRange(DeleteRangeRequest {
                    key: b("other"),
                    ..Default::default()
                }))],
                failure: vec![],
            })),
        ],
        failure: vec![],
    };
    let R::Txn(resp) = h.apply(C::Txn(txn)) else {
        panic!()
    };
    assert!(resp.succeeded);
    assert_eq!(revision(&resp.header), 3);
    let Some(OpResponse::ResponseRange(r)) = &resp.responses[2].response else {
        panic!()
    };
    assert_eq!(r.kvs.len(), 2);
    assert_eq!(r.kvs[0].value, b("w"));
    assert_eq!(revision(&r.header), 3);
    let Some(OpResponse::ResponseTxn(nested)) = &resp.responses[3].response else {
        panic!()
    };
    assert!(nested.succeeded);
    assert!(h.get("other").is_none());
    assert_eq!(h.get("k").unwrap().version, 2);
    assert_eq!(h.store.current_revision().unwrap(), 3);

    // The failure branch, and a value compare on a missing key failing.
    let txn = TxnRequest {
        compare: vec![compare(
            "missing",
            CompareTarget::Value,
            CompareResult::NotEqual,
            TargetUnion::Value(b("x")),
        )],
        success: vec![],
        failure: vec![op(Op::RequestRange(RangeRequest {
            key: b("k"),
            ..Default::default()
        }))],
    };
    let R::Txn(resp) = h.apply(C::Txn(txn)) else {
        panic!()
    };
    assert!(!resp.succeeded);
    assert_eq!(
        revision(&resp.header),
        3,
        "a read-only branch adds no revision"
    );
}

#[test]
fn failed_requests_change_nothing() {
    let mut h = Harness::new();
    let r = h.apply(C::Put(PutRequest {
        key: b("k"),
        ignore_value: true,
        ..Default::default()
    }));
    assert!(matches!(r, R::Error(e) if e.kind() == Kind::KeyNotFound));
    let r = h.apply(C::Put(PutRequest {
        key: b("k"),
        lease: 7,
        ..Default::default()
    }));
    assert!(matches!(r, R::Error(e) if e.kind() == Kind::LeaseNotFound));
    assert_eq!(h.store.current_revision().unwrap(), 1);

    h.put("k", "v");
    let r = h.apply(C::Put(PutRequest {
        key: b("k"),
        value: b("w"),
        ignore_lease: true,
        ..Default::default()
    }));
    assert!(matches!(r, R::Put(_)));
    let r = h.apply(C::Put(PutRequest {
        key: b("k"),
        ignore_value: true,
        ..Default::default()
    }));
    assert!(matches!(r, R::Put(_)));
    assert_eq!(h.get("k").unwrap().value, b("w"));
}

#[test]
fn compaction_refuses_old_reads_and_keeps_the_live_version() {
    let mut h = Harness::new();
    h.put("a", "1"); // 2
    h.put("a", "2"); // 3
    h.put("gone", "x"); // 4
    h.delete("gone", ""); // 5
    h.put("b", "1"); // 6
    let compact = |h: &mut Harness, revision| {
        h.apply(C::Compaction(CompactionRequest {
            revision,
            physical: true,
        }))
    };
    assert!(matches!(compact(&mut h, 7), R::Error(e) if e.kind() == Kind::FutureRevision));
    assert!(matches!(compact(&mut h, 5), R::Compaction(_)));
    assert!(matches!(compact(&mut h, 5), R::Error(e) if e.kind() == Kind::Compacted));
    assert!(matches!(compact(&mut h, 4), R::Error(e) if e.kind() == Kind::Compacted));
    assert!(matches!(
        h.range(RangeRequest {
            key: b("a"),
            revision: 4,
            ..Default::default()
        }),
        Err(StoreError::Compacted)
    ));
    let at5 = h
        .range(RangeRequest {
            key: b("\0"),
            range_end: b("\0"),
            revision: 5,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(at5.kvs.len(), 1);
    assert_eq!(at5.kvs[0].value, b("2"));
    assert_eq!(
        h.keys(RangeRequest {
            key: b("\0"),
            range_end: b("\0"),
            ..Default::default()
        }),
        ["a", "b"]
    );
    // Physically, only the live versions remain.
    let kv = h.store.cf(CF_KV).unwrap();
    assert_eq!(
        h.store
            .db
            .iterator_cf(kv, rocksdb::IteratorMode::Start)
            .count(),
        2
    );
}

#[test]
fn a_snapshot_reproduces_the_store() {
    let mut h = Harness::new();
    h.put("a", "1");
    h.put("b", "2");
    h.delete("a", "");
    let dir = tempfile::tempdir().unwrap();
    let info = h.store.build_snapshot(dir.path()).unwrap();
    // Building copies nothing; the transfer file is written when a send asks for it.
    assert!(!info.path.exists());
    // Asked for its position only (as at startup), the store is not copied either.
    let position = h
        .store
        .current_snapshot(dir.path(), false)
        .unwrap()
        .unwrap();
    assert_eq!((&position.path, &position.meta), (&info.path, &info.meta));
    assert!(!info.path.exists());
    // A send exports the store as it is then, writes after the build included.
    h.put("c", "3");
    let exported = h.store.current_snapshot(dir.path(), true).unwrap().unwrap();
    assert!(exported.path.exists());
    assert!(exported.meta.last_log_id > info.meta.last_log_id);
    let other = Harness::new();
    other.store.install_snapshot(&exported.path).unwrap();
    assert_eq!(other.get("c").unwrap().value, b("3"));
    assert_eq!(other.store.current_revision().unwrap(), 5);
    assert_eq!(other.get("b").unwrap().mod_revision, 3);
    assert_eq!(
        other
            .range(RangeRequest {
                key: b("a"),
                revision: 2,
                ..Default::default()
            })
            .unwrap()
            .kvs[0]
            .value,
        b("1")
    );
    // The next send takes that file again rather than exporting anew.
    h.put("d", "4");
    assert_eq!(
        h.store
            .current_snapshot(dir.path(), true)
            .unwrap()
            .unwrap()
            .path,
        exported.path
    );
}

fn file_names(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

#[test]
fn a_build_removes_the_files_behind_it_and_what_crashes_left() {
    let mut h = Harness::new();
    let dir = tempfile::tempdir().unwrap();
    h.put("a", "1");
    h.store.build_snapshot(dir.path()).unwrap();
    let first = h.store.current_snapshot(dir.path(), true).unwrap().unwrap();
    assert!(first.path.exists());
    h.put("b", "2");
    // What a crash in the middle of an export leaves, and an older build's checkpoint.
    std::fs::write(dir.path().join("export.tmp"), b"half").unwrap();
    let old_checkpoint = dir.path().join("checkpoint-T1-N1-1");
    std::fs::create_dir(&old_checkpoint).unwrap();
    std::fs::write(old_checkpoint.join("CURRENT"), b"MANIFEST-000001").unwrap();
    let second = h.store.build_snapshot(dir.path()).unwrap();
    assert!(second.meta.last_log_id > first.meta.last_log_id);
    assert_eq!(file_names(dir.path()), Vec::<String>::new());
    // Building again with nothing applied in between gives the same position, and a
    // send exports the store at it.
    let again = h.store.build_snapshot(dir.path()).unwrap();
    assert_eq!(again.meta, second.meta);
    let exported = h.store.current_snapshot(dir.path(), true).unwrap().unwrap();
    assert_eq!(
        (&exported.path, &exported.meta),
        (&second.path, &second.meta)
    );

    // A newer snapshot received from a leader becomes current, and the file behind it
    // goes.
    let mut leader = Harness::new();
    for key in ["x", "y", "z", "w"] {
        leader.put(key, "v");
    }
    let leader_dir = tempfile::tempdir().unwrap();
    leader.store.build_snapshot(leader_dir.path()).unwrap();
    let received = leader
        .store
        .current_snapshot(leader_dir.path(), true)
        .unwrap()
        .unwrap();
    let current = keep_received_snapshot(dir.path(), &received.path).unwrap();
    assert_eq!(file_names(dir.path()).len(), 1);
    // Until it is installed it is ahead of the store: a restart now installs it.
    let latest = h
        .store
        .current_snapshot(dir.path(), false)
        .unwrap()
        .unwrap();
    assert_eq!((latest.path, latest.meta), (current, received.meta));
}

#[test]
fn old_wal_files_go_although_meta_never_fills_its_memtable() {
    // Every applied batch writes its log id to `meta`, a few bytes that never fill a
    // memtable, so `meta` holds on to the oldest WAL file; since raft snapshots no
    // longer flush the store, only the WAL bound lets old files go.
    let mut h = Harness::new();
    let value = "v".repeat(256 << 10);
    // Each put writes the value twice (`kv` and `latest`): 160 MiB of WAL in all.
    for i in 0..320 {
        h.put(&format!("k{i}"), &value);
    }
    let wal: u64 = std::fs::read_dir(h._dir.path().join("db"))
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "log"))
        .map(|entry| entry.metadata().unwrap().len())
        .sum();
    assert!(wal <= 96 << 20, "{wal} bytes of WAL left");
}

#[test]
fn a_store_that_applied_nothing_has_no_snapshot() {
    let h = Harness::new();
    let dir = tempfile::tempdir().unwrap();
    assert!(h
        .store
        .current_snapshot(dir.path(), false)
        .unwrap()
        .is_none());
    assert!(h
        .store
        .current_snapshot(dir.path(), true)
        .unwrap()
        .is_none());
    assert_eq!(file_names(dir.path()), Vec::<String>::new());
}

#[test]
fn an_install_cut_short_claims_nothing_applied_and_keeps_the_snapshot_current() {
    let mut h = Harness::new();
    h.put("a", "1");
    let source_dir = tempfile::tempdir().unwrap();
    h.store.build_snapshot(source_dir.path()).unwrap();
    let info = h
        .store
        .current_snapshot(source_dir.path(), true)
        .unwrap()
        .unwrap();

    let mut target = Harness::new();
    target.put("old", "x");
    assert!(read_applied(&target.store).unwrap().last_applied.is_some());
    let target_dir = tempfile::tempdir().unwrap();
    let current = keep_received_snapshot(target_dir.path(), &info.path).unwrap();
    assert_eq!(
        target
            .store
            .current_snapshot(target_dir.path(), true)
            .unwrap()
            .unwrap()
            .path,
        current
    );
    // The first step of an install, then a crash: nothing applied is claimed, so
    // openraft restores from the current snapshot at restart.
    let mut forget = rocksdb::WriteBatch::default();
    meta::stage_forget_applied(&target.store, &mut forget).unwrap();
    target.store.db.write(forget).unwrap();
    assert!(read_applied(&target.store).unwrap().last_applied.is_none());
    let at_restart = target
        .store
        .current_snapshot(target_dir.path(), false)
        .unwrap()
        .unwrap();
    assert_eq!(at_restart.path, current);

    let installed = target.store.install_snapshot(&current).unwrap();
    assert_eq!(target.get("a").unwrap().value, b("1"));
    assert!(target.get("old").is_none());
    assert_eq!(
        read_applied(&target.store).unwrap().last_applied,
        installed.last_log_id
    );
}

pub(super) fn log_id(index: u64) -> LogId {
    LogId::new(
        LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    )
}

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

/// Everything a client can read: every key at every revision not compacted away.
fn all_history(store: &RevisionStore) -> Vec<Result<RangeResponse, String>> {
    let current = store.current_revision().unwrap();
    (1..=current)
        .map(|revision| {
            store
                .range(&RangeRequest {
                    key: vec![0].into(),
                    range_end: vec![0].into(),
                    revision,
                    ..Default::default()
                })
                .map_err(|e| e.to_string())
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

impl Harness {
    pub(super) fn grant(&mut self, id: i64, ttl: i64) -> R {
        self.apply(C::LeaseGrant(LeaseGrantRequest { ttl, id }))
    }

    pub(super) fn revoke(&mut self, id: i64) -> R {
        self.apply(C::LeaseRevoke(LeaseRevokeRequest { id }))
    }

    fn put_with_lease(&mut self, key: &str, value: &str, lease: i64) -> R {
        self.apply(C::Put(PutRequest {
            key: b(key),
            value: b(value),
            lease,
            ..Default::default()
        }))
    }

    fn lease_keys(&self, id: i64) -> Vec<String> {
        self.store
            .lease_keys(id)
            .unwrap()
            .iter()
            .map(|k| String::from_utf8(k.to_vec()).unwrap())
            .collect()
    }
}

pub(super) fn error_kind(result: R) -> Kind {
    match result {
        R::Error(e) => Kind::try_from(e.kind).unwrap(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn leases_are_granted_once_and_keys_follow_their_lease() {
    let mut h = Harness::new();
    let before = h.store.current_revision().unwrap();
    match h.grant(7, 60) {
        R::LeaseGrant(g) => assert_eq!((g.id, g.ttl), (7, 60)),
        other => panic!("{other:?}"),
    }
    // A grant takes no revision; a second grant of the id is refused.
    assert_eq!(h.store.current_revision().unwrap(), before);
    assert_eq!(error_kind(h.grant(7, 10)), Kind::LeaseExists);
    assert_eq!(h.store.lease(7).unwrap().unwrap().ttl, 60);
    assert_eq!(
        error_kind(h.put_with_lease("a", "1", 8)),
        Kind::LeaseNotFound
    );

    h.grant(8, 30);
    h.put_with_lease("a", "1", 7);
    h.put_with_lease("b", "1", 7);
    h.put_with_lease("c", "1", 8);
    assert_eq!(h.lease_keys(7), ["a", "b"]);
    // A put moves the key to its new lease; ignore_lease keeps it; no lease detaches it.
    h.put_with_lease("b", "2", 8);
    h.apply(C::Put(PutRequest {
        key: b("c"),
        value: b("2"),
        ignore_lease: true,
        ..Default::default()
    }));
    h.put("a", "2");
    assert_eq!(h.lease_keys(7), Vec::<String>::new());
    assert_eq!(h.lease_keys(8), ["b", "c"]);
    // A deleted key leaves its lease.
    h.delete("c", "");
    assert_eq!(h.lease_keys(8), ["b"]);
    let ids: Vec<i64> = h.store.leases().unwrap().iter().map(|l| l.id).collect();
    assert_eq!(ids, [7, 8]);

    // A checkpoint records the remaining TTL of live leases and skips the others.
    h.apply(C::LeaseCheckpoint(LeaseCheckpointRequest {
        checkpoints: vec![
            LeaseCheckpoint {
                id: 8,
                remaining_ttl: 12,
            },
            LeaseCheckpoint {
                id: 99,
                remaining_ttl: 1,
            },
        ],
    }));
    assert_eq!(h.store.lease(8).unwrap().unwrap().remaining_ttl, 12);
    assert_eq!(h.store.lease(99).unwrap(), None);
}

#[test]
fn a_revoke_deletes_every_attached_key_in_one_revision() {
    let mut h = Harness::new();
    h.grant(5, 60);
    h.put_with_lease("x1", "1", 5);
    h.put_with_lease("x2", "1", 5);
    h.put("y", "1");
    let mut feed = h.store.subscribe();
    let before = h.store.current_revision().unwrap();
    match h.revoke(5) {
        R::LeaseRevoke(r) => assert_eq!(r.header.unwrap().revision, before + 1),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.store.current_revision().unwrap(), before + 1);
    assert!(h.get("x1").is_none() && h.get("x2").is_none());
    assert!(h.get("y").is_some());
    assert_eq!(h.store.lease(5).unwrap(), None);
    assert!(h.lease_keys(5).is_empty());
    // Watchers see both deletes in that one revision, with the values they had.
    let changes = feed.try_recv().unwrap();
    let deleted: Vec<(i64, String, String)> = changes
        .events
        .iter()
        .map(|e| {
            let kv = e.kv.as_ref().unwrap();
            let prev = e.prev_kv.as_ref().unwrap();
            (
                kv.mod_revision,
                String::from_utf8(kv.key.to_vec()).unwrap(),
                String::from_utf8(prev.value.to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        deleted,
        [
            (before + 1, "x1".to_owned(), "1".to_owned()),
            (before + 1, "x2".to_owned(), "1".to_owned())
        ]
    );
    assert_eq!(error_kind(h.revoke(5)), Kind::LeaseNotFound);
    // A revoke of a lease with no keys takes no revision.
    h.grant(6, 60);
    h.revoke(6);
    assert_eq!(h.store.current_revision().unwrap(), before + 1);
}

#[test]
fn leases_travel_in_snapshots_and_grants_apply_in_batches() {
    let h = Harness::new();
    // A grant and a put on it in one apply batch: the put sees the grant.
    let mut batch = h.store.begin_apply().unwrap();
    let commands = [
        C::LeaseGrant(LeaseGrantRequest { ttl: 60, id: 3 }),
        C::Put(PutRequest {
            key: b("k"),
            value: b("v"),
            lease: 3,
            ..Default::default()
        }),
    ];
    for (i, c) in commands.into_iter().enumerate() {
        let command = Command {
            auth_revision: 0,
            auth_checked: false,
            request: Some(c),
        };
        let outcome = batch.command(&log_id(i as u64 + 1), &command).unwrap();
        assert!(!matches!(outcome.result, Some(R::Error(_))), "{outcome:?}");
    }
    batch.flush().unwrap();
    assert_eq!(h.get("k").unwrap().lease, 3);

    let dir = tempfile::tempdir().unwrap();
    let info = h.store.build_snapshot(dir.path()).unwrap();
    let exported = h.store.current_snapshot(dir.path(), true).unwrap().unwrap();
    let other = Harness::new();
    other.store.install_snapshot(&exported.path).unwrap();
    assert_eq!(other.store.lease(3).unwrap().unwrap().ttl, 60);
    assert_eq!(other.lease_keys(3), ["k"]);
    assert_eq!(info.path, exported.path);
}

/// Puts, deletes, transactions over distinct keys, leases and compactions, as a client
/// could send them (no key changed twice in one revision).
fn client_mix(seed: u64, count: usize) -> Vec<C> {
    let mut state = seed;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let key = |i: u64| b(&format!("k{i}"));
    (0..count)
        .map(|i| match next(12) {
            0..=4 => C::Put(PutRequest {
                key: key(next(8)),
                value: b(&format!("v{i}")),
                lease: if next(3) == 0 { 1 + next(2) as i64 } else { 0 },
                ..Default::default()
            }),
            5 | 6 => C::DeleteRange(DeleteRangeRequest {
                key: key(next(8)),
                range_end: if next(2) == 0 {
                    Bytes::new()
                } else {
                    key(next(8) + 1)
                },
                ..Default::default()
            }),
            7 | 8 => {
                let first = next(4);
                C::Txn(TxnRequest {
                    success: vec![
                        op(Op::RequestPut(PutRequest {
                            key: key(first),
                            value: b(&format!("t{i}")),
                            ..Default::default()
                        })),
                        op(Op::RequestDeleteRange(DeleteRangeRequest {
                            key: key(4 + next(4)),
                            ..Default::default()
                        })),
                    ],
                    ..Default::default()
                })
            }
            9 => C::LeaseGrant(LeaseGrantRequest {
                id: 1 + next(2) as i64,
                ttl: 60,
            }),
            10 => C::LeaseRevoke(LeaseRevokeRequest {
                id: 1 + next(2) as i64,
            }),
            _ => C::Compaction(CompactionRequest {
                revision: i as i64 / 2,
                ..Default::default()
            }),
        })
        .collect()
}

/// A reader's hold on the install gate, for an export.
pub(super) fn no_install(store: &RevisionStore) -> ReadGate {
    futures::executor::block_on(store.readable())
}

/// Copies `from` into a new store through an export and an import.
pub(super) fn round_trip(from: &RevisionStore) -> Harness {
    let to = Harness::new();
    let export = from.export(&no_install(from)).unwrap();
    let mut import = to.store.import().unwrap();
    for change in export.changes().unwrap() {
        import.change(&change.unwrap()).unwrap();
    }
    for lease in export.leases().unwrap() {
        import.lease(lease.unwrap()).unwrap();
    }
    import
        .finish(export.compacted_revision(), export.physically_compacted())
        .unwrap();
    to
}

#[test]
fn an_export_imported_elsewhere_reads_the_same_at_every_revision() {
    for seed in 1..=20 {
        let mut h = Harness::new();
        for request in client_mix(seed, 150) {
            h.apply(request);
        }
        let copy = round_trip(&h.store);
        assert_eq!(
            (
                copy.store.current_revision().unwrap(),
                copy.store.compacted_revision().unwrap()
            ),
            (
                h.store.current_revision().unwrap(),
                h.store.compacted_revision().unwrap()
            ),
            "seed {seed}"
        );
        assert_eq!(
            all_history(&copy.store),
            all_history(&h.store),
            "seed {seed}"
        );
        assert_eq!(copy.store.leases().unwrap(), h.store.leases().unwrap());
        for lease in h.store.leases().unwrap() {
            assert_eq!(
                copy.store.lease_keys(lease.id).unwrap(),
                h.store.lease_keys(lease.id).unwrap(),
                "seed {seed}: lease {}",
                lease.id
            );
        }
        assert_eq!(
            copy.store.hash_kv(0).unwrap(),
            h.store.hash_kv(0).unwrap(),
            "seed {seed}"
        );
        // The copy exports exactly what the original did.
        let original: Vec<_> = h
            .store
            .export(&no_install(&h.store))
            .unwrap()
            .changes()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let copied: Vec<_> = copy
            .store
            .export(&no_install(&copy.store))
            .unwrap()
            .changes()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(original, copied, "seed {seed}");
    }
}

#[test]
fn compaction_keeps_one_history_entry_per_stored_version() {
    for seed in 1..=20 {
        let mut h = Harness::new();
        for request in client_mix(seed, 150) {
            h.apply(request);
        }
        let kv = h.store.cf(CF_KV).unwrap();
        let versions = h
            .store
            .db
            .iterator_cf(kv, rocksdb::IteratorMode::Start)
            .count();
        let changes = h
            .store
            .export(&no_install(&h.store))
            .unwrap()
            .changes()
            .unwrap()
            .count();
        assert_eq!(versions, changes, "seed {seed}");
    }
}

#[test]
fn an_import_refuses_a_store_with_data_and_versions_out_of_order() {
    let mut h = Harness::new();
    h.put("a", "1");
    assert!(h.store.import().is_err());
    let fresh = Harness::new();
    let mut import = fresh.store.import().unwrap();
    let change = |main, sub| export::StoredChange {
        main,
        sub,
        key: b("k"),
        version: None,
    };
    import.change(&change(3, 1)).unwrap();
    assert!(import.change(&change(3, 1)).is_err());
    assert!(import.change(&change(2, 9)).is_err());
    assert!(import.change(&change(0, 0)).is_err());
}
