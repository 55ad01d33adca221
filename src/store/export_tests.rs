//! Copies of the store: a snapshot built, exported for a send, received and installed
//! (an install cut short, the files a build leaves behind, the WAL it lets go), and an
//! export imported into another store, which reads the same at every revision.

use bytes::Bytes;

use super::tests::{all_history, b, no_install, op, round_trip, Harness};
use super::*;
use crate::proto::command::command::Request as C;
use crate::proto::etcdserverpb::request_op::Request as Op;
use crate::proto::etcdserverpb::*;

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
