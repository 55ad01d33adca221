//! Alarms in the store, without raft: etcd's GET/ACTIVATE/DEACTIVATE answers, what an
//! active alarm refuses at apply time, and that alarms survive a reopen and travel in
//! snapshots. Also the defragmentation's size accounting.

use super::tests::{b, error_kind, Harness};
use super::*;
use crate::proto::command::command::Request as C;
use crate::proto::command::command_error::Kind;
use crate::proto::command::command_result::Result as R;
use crate::proto::etcdserverpb::alarm_request::AlarmAction;
use crate::proto::etcdserverpb::request_op::Request as Op;
use crate::proto::etcdserverpb::*;

fn alarm(h: &mut Harness, action: AlarmAction, member_id: u64, alarm: i32) -> Vec<AlarmMember> {
    match h.apply(C::Alarm(AlarmRequest {
        action: action.into(),
        member_id,
        alarm,
    })) {
        R::Alarm(response) => response.alarms,
        other => panic!("{other:?}"),
    }
}

fn member(member_id: u64, alarm: AlarmType) -> AlarmMember {
    AlarmMember {
        member_id,
        alarm: alarm.into(),
    }
}

const NOSPACE: i32 = AlarmType::Nospace as i32;
const CORRUPT: i32 = AlarmType::Corrupt as i32;
const NONE: i32 = AlarmType::None as i32;

#[test]
fn alarms_are_activated_listed_and_deactivated_as_etcd_answers() {
    let mut h = Harness::new();
    assert!(alarm(&mut h, AlarmAction::Get, 0, NONE).is_empty());
    // ACTIVATE answers with the alarm, also when it was already active.
    for _ in 0..2 {
        assert_eq!(
            alarm(&mut h, AlarmAction::Activate, 7, NOSPACE),
            vec![member(7, AlarmType::Nospace)]
        );
    }
    // Any member id: etcd never checks it against the membership.
    alarm(&mut h, AlarmAction::Activate, 3, CORRUPT);
    // NONE is not an alarm one can raise (etcd 3.5+).
    assert!(alarm(&mut h, AlarmAction::Activate, 3, NONE).is_empty());
    let all = vec![member(3, AlarmType::Corrupt), member(7, AlarmType::Nospace)];
    assert_eq!(h.store.alarms(), all);
    // GET lists by type, whatever member id it names.
    assert_eq!(alarm(&mut h, AlarmAction::Get, 0, NONE), all);
    assert_eq!(alarm(&mut h, AlarmAction::Get, 3, NONE), all);
    assert_eq!(
        alarm(&mut h, AlarmAction::Get, 3, NOSPACE),
        vec![member(7, AlarmType::Nospace)]
    );
    // DEACTIVATE of what is not active answers with nothing.
    assert!(alarm(&mut h, AlarmAction::Deactivate, 3, NOSPACE).is_empty());
    assert!(alarm(&mut h, AlarmAction::Deactivate, 0, NONE).is_empty());
    assert_eq!(
        alarm(&mut h, AlarmAction::Deactivate, 7, NOSPACE),
        vec![member(7, AlarmType::Nospace)]
    );
    assert_eq!(h.store.alarms(), vec![member(3, AlarmType::Corrupt)]);
    // A type etcd does not name is kept as sent, as etcd 3.4 and 3.6 keep it.
    alarm(&mut h, AlarmAction::Activate, 3, 9);
    assert_eq!(alarm(&mut h, AlarmAction::Get, 0, 9).len(), 1);
    assert_eq!(alarm_name(9), "9");
    assert_eq!(
        alarm_text(&member(10276657743932975437, AlarmType::Nospace)),
        "memberID:10276657743932975437 alarm:NOSPACE "
    );
    // Alarms change no revision.
    assert_eq!(h.store.current_revision().unwrap(), 1);
}

fn txn_with(success: Vec<RequestOp>) -> C {
    C::Txn(TxnRequest {
        success,
        ..Default::default()
    })
}

fn put_op(key: &str) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestPut(PutRequest {
            key: b(key),
            value: b("v"),
            ..Default::default()
        })),
    }
}

fn delete_op(key: &str) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
            key: b(key),
            ..Default::default()
        })),
    }
}

#[test]
fn nospace_refuses_what_grows_the_store_and_nothing_else() {
    let mut h = Harness::new();
    h.put("a", "1");
    h.put("b", "2");
    assert!(matches!(h.grant(5, 60), R::LeaseGrant(_)));
    alarm(&mut h, AlarmAction::Activate, 1, NOSPACE);
    let put = C::Put(PutRequest {
        key: b("c"),
        value: b("3"),
        ..Default::default()
    });
    assert_eq!(error_kind(h.apply(put.clone())), Kind::NoSpace);
    assert_eq!(
        error_kind(h.apply(txn_with(vec![put_op("c")]))),
        Kind::NoSpace
    );
    assert_eq!(error_kind(h.grant(6, 60)), Kind::NoSpace);
    // Deletes, delete-only transactions, compaction and revokes still work.
    assert!(matches!(h.apply(txn_with(vec![delete_op("a")])), R::Txn(_)));
    h.delete("b", "");
    assert!(matches!(
        h.apply(C::Compaction(CompactionRequest {
            revision: 3,
            physical: true
        })),
        R::Compaction(_)
    ));
    assert!(matches!(h.revoke(5), R::LeaseRevoke(_)));
    assert!(h.get("c").is_none());
    // Disarmed, writes work again.
    alarm(&mut h, AlarmAction::Deactivate, 1, NOSPACE);
    assert!(matches!(h.apply(put), R::Put(_)));
}

#[test]
fn corrupt_refuses_every_change_as_etcds_applier_does() {
    let mut h = Harness::new();
    h.put("a", "1");
    assert!(matches!(h.grant(5, 60), R::LeaseGrant(_)));
    alarm(&mut h, AlarmAction::Activate, 1, CORRUPT);
    // NOSPACE too: CORRUPT is the answer, as etcd checks it first.
    alarm(&mut h, AlarmAction::Activate, 1, NOSPACE);
    let refused = [
        C::Put(PutRequest {
            key: b("b"),
            ..Default::default()
        }),
        C::DeleteRange(DeleteRangeRequest {
            key: b("a"),
            ..Default::default()
        }),
        txn_with(vec![delete_op("a")]),
        C::Compaction(CompactionRequest {
            revision: 2,
            physical: false,
        }),
        C::LeaseGrant(LeaseGrantRequest { id: 6, ttl: 60 }),
        C::LeaseRevoke(LeaseRevokeRequest { id: 5 }),
    ];
    for request in refused {
        assert_eq!(
            error_kind(h.apply(request.clone())),
            Kind::Corrupt,
            "{request:?}"
        );
    }
    assert_eq!(h.get("a").unwrap().value, b("1"));
    assert!(h.store.lease(5).unwrap().is_some());
    // Alarms themselves still go through: that is how CORRUPT is disarmed.
    alarm(&mut h, AlarmAction::Deactivate, 1, CORRUPT);
    assert_eq!(error_kind(h.grant(6, 60)), Kind::NoSpace);
    h.delete("a", "");
}

#[test]
fn alarms_survive_a_reopen_and_travel_in_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let db = open_database(&path, &[]).unwrap();
        let store = RevisionStore::new(db).unwrap();
        let mut batch = store.begin_apply().unwrap();
        let raise = crate::proto::command::Command {
            auth_revision: 0,
            auth_checked: false,
            request: Some(C::Alarm(AlarmRequest {
                action: AlarmAction::Activate.into(),
                member_id: 42,
                alarm: NOSPACE,
            })),
        };
        batch.command(&super::tests::log_id(1), &raise).unwrap();
        batch.flush().unwrap();
    }
    let db = open_database(&path, &[]).unwrap();
    let reopened = RevisionStore::new(db).unwrap();
    assert_eq!(reopened.alarms(), vec![member(42, AlarmType::Nospace)]);
    assert!(reopened.has_alarm(AlarmType::Nospace));

    let snapshots = tempfile::tempdir().unwrap();
    reopened.build_snapshot(snapshots.path()).unwrap();
    let info = reopened
        .current_snapshot(snapshots.path(), true)
        .unwrap()
        .unwrap();
    let mut other = Harness::new();
    alarm(&mut other, AlarmAction::Activate, 1, CORRUPT);
    other.store.install_snapshot(&info.path).unwrap();
    // The installed set replaces the old one, in memory too.
    assert_eq!(other.store.alarms(), vec![member(42, AlarmType::Nospace)]);
    assert!(!other.store.has_alarm(AlarmType::Corrupt));
}

#[test]
fn quota_costs_are_etcds() {
    let put = |key: &str, value: &str| {
        C::Put(PutRequest {
            key: b(key),
            value: b(value),
            ..Default::default()
        })
    };
    assert_eq!(quota_cost(&put("key", "value")), 256 + 3 + 5);
    assert_eq!(quota_cost(&C::LeaseGrant(LeaseGrantRequest::default())), 64);
    // The larger branch; nested transactions count nothing, as in etcd.
    let txn = C::Txn(TxnRequest {
        success: vec![put_op("a"), put_op("b"), delete_op("c")],
        failure: vec![
            put_op("abc"),
            RequestOp {
                request: Some(Op::RequestTxn(TxnRequest {
                    success: vec![put_op("x")],
                    ..Default::default()
                })),
            },
        ],
        ..Default::default()
    });
    assert_eq!(quota_cost(&txn), 2 * (256 + 1 + 1));
    assert_eq!(quota_cost(&txn_with(vec![delete_op("a")])), 0);
    assert_eq!(
        quota_cost(&C::DeleteRange(DeleteRangeRequest::default())),
        0
    );
}

#[test]
fn defragmentation_gives_back_what_compaction_freed() {
    let mut h = Harness::new();
    // Values that do not compress, so the sizes say something.
    let mut seed = 7u64;
    let mut noise = |len: usize| -> String {
        (0..len)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                char::from(b'a' + ((seed >> 33) % 26) as u8)
            })
            .collect()
    };
    for round in 0..20 {
        for key in 0..50 {
            let value = noise(1000);
            h.put(&format!("key{key}"), &value);
        }
        if round % 5 == 0 {
            h.store.db().flush_cf(h.store.cf(CF_KV).unwrap()).unwrap();
        }
    }
    h.store.defragment().unwrap();
    let full = h.store.approximate_size();
    assert_eq!(h.store.approximate_size_in_use(), full);
    let current = h.store.current_revision().unwrap();
    assert!(matches!(
        h.apply(C::Compaction(CompactionRequest {
            revision: current,
            physical: true
        })),
        R::Compaction(_)
    ));
    // The compaction's tombstones took a fresh memtable block (RocksDB counts it
    // whole), so the size grew; what it deleted is no longer counted as in use.
    let (size, in_use) = (
        h.store.approximate_size(),
        h.store.approximate_size_in_use(),
    );
    assert!(
        size - in_use > 900_000,
        "in use {in_use} of {size} after compacting 19 of 20 versions of 50 KB"
    );
    h.store.defragment().unwrap();
    let after = h.store.approximate_size();
    assert!(after < full / 2, "size {after} after defragmenting {full}");
    assert_eq!(h.store.approximate_size_in_use(), after);
    assert_eq!(h.get("key7").unwrap().version, 20);
}
