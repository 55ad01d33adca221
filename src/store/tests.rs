//! The revision store against etcd's documented MVCC behaviour, without raft:
//! revisions and versions, ranges, transactions, failed requests, compaction, and
//! leases. Also the [`Harness`] and the helpers the store's other test modules share
//! (`apply_tests.rs`, `export_tests.rs`, ...).

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
    pub(super) _dir: tempfile::TempDir,
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

    pub(super) fn range(&self, req: RangeRequest) -> Result<RangeResponse, StoreError> {
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

    pub(super) fn keys(&self, req: RangeRequest) -> Vec<String> {
        self.range(req)
            .unwrap()
            .kvs
            .iter()
            .map(|kv| String::from_utf8(kv.key.to_vec()).unwrap())
            .collect()
    }
}

/// One command applied and written on its own: a batch of one.
pub(super) fn apply_alone(
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

pub(super) fn log_id(index: u64) -> LogId {
    LogId::new(
        LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    )
}

/// Everything a client can read: every key at every revision not compacted away.
pub(super) fn all_history(store: &RevisionStore) -> Vec<Result<RangeResponse, String>> {
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

pub(super) fn compare(
    key: &str,
    target: CompareTarget,
    result: CompareResult,
    value: TargetUnion,
) -> Compare {
    Compare {
        key: b(key),
        target: target as i32,
        result: result as i32,
        target_union: Some(value),
        range_end: Bytes::new(),
    }
}

pub(super) fn op(request: Op) -> RequestOp {
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
