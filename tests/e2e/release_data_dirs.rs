//! Data dirs written by every release stay readable (docs/operations.md, "Upgrades"):
//! each release's fixture, a data dir it wrote, is started by this build, which must
//! serve what the release served: the same Range answers at several revisions (a
//! compacted one refused), the same HashKV, users, roles, members, alarms and leases.
//!
//! A fixture is made by the release itself, never edited by hand: with the release's
//! binary (built from its commit in `releases.tsv`),
//!
//! ```sh
//! QK_BIN=<that binary> QK_WRITE_FIXTURE=<release, e.g. v0.1.0> \
//!     cargo test --test e2e -- release_data_dirs
//! ```
//!
//! writes `tests/fixtures/data-dirs/<release>/`: the data dir (RocksDB's text logs
//! left out), `snapshot.db` (an etcd snapshot file the release's Snapshot RPC wrote,
//! whose `snapshot status` this build must read the same) and `expected.json`, what the
//! release answered. QuantyKube's own
//! formats: etcd has none of these files, so this runs against QuantyKube only.

use std::path::{Path, PathBuf};

use etcd_client::{
    AlarmAction, AlarmOptions, AlarmType, Client, GetOptions, LeaseGrantOptions,
    LeaseTimeToLiveOptions, MemberAddOptions, Permission, PutOptions,
};
use serde_json::{json, Value};

use crate::auth_support::{enable_auth, root_client, wait_ready_as_root};
use crate::harness::{Cluster, ClusterOptions, Target};

const PREFIX: &str = "fixture/";
/// The revisions whose Range answers are recorded (the workload's own numbering:
/// revision 1 is the empty store).
const REVISIONS: [i64; 4] = [6, 8, 9, 11];
/// Compacted at this revision, so reads below it are refused.
const COMPACTED: i64 = 6;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data-dirs")
}

/// Puts with history, a delete, a compaction, a lease with a key, users and roles
/// with auth on, a learner, and a NOSPACE alarm (last: it refuses writes).
async fn workload(cluster: &Cluster) {
    let mut client = cluster.client(0).await;
    for i in 1..=5 {
        let put = client
            .put(format!("{PREFIX}{i}"), format!("v{i}"), None)
            .await;
        put.expect("put");
    }
    // Revisions 7 and 8: history of one key.
    client
        .put(format!("{PREFIX}1"), "v1b", None)
        .await
        .expect("put");
    client
        .put(format!("{PREFIX}1"), "v1c", None)
        .await
        .expect("put");
    // Revision 9.
    client
        .delete(format!("{PREFIX}2"), None)
        .await
        .expect("delete");
    let lease = client
        .lease_grant(3600, Some(LeaseGrantOptions::new().with_id(0x1234)))
        .await
        .expect("lease");
    // Revision 10, with the lease.
    client
        .put(
            format!("{PREFIX}leased"),
            "held",
            Some(PutOptions::new().with_lease(lease.id())),
        )
        .await
        .expect("put with a lease");
    client.compact(COMPACTED, None).await.expect("compact");
    // Revision 11.
    client
        .put(format!("{PREFIX}6"), "v6", None)
        .await
        .expect("put");
    client
        .member_add(
            ["http://127.0.0.1:1"],
            Some(MemberAddOptions::new().with_is_learner()),
        )
        .await
        .expect("add a learner");
    client.role_add("reader").await.expect("role add");
    client
        .role_grant_permission("reader", Permission::read(PREFIX).with_prefix())
        .await
        .expect("grant");
    client
        .user_add("alice", "alice-pw", None)
        .await
        .expect("user add");
    client
        .user_grant_role("alice", "reader")
        .await
        .expect("grant role");
    enable_auth(cluster).await;
    let mut root = root_client(cluster, 0).await;
    let member = root.member_list().await.expect("members").members()[0].id();
    let mut on_member = AlarmOptions::new();
    on_member.with_member(member);
    root.alarm(AlarmAction::Activate, AlarmType::Nospace, Some(on_member))
        .await
        .expect("raise NOSPACE");
}

/// What a member serves of the workload's data, as JSON (ids and terms left out: they
/// are the member's, not the data's).
async fn observe(client: &mut Client) -> Value {
    let mut ranges = Vec::new();
    for revision in REVISIONS {
        let got = client
            .get(
                PREFIX,
                Some(GetOptions::new().with_prefix().with_revision(revision)),
            )
            .await
            .expect("range");
        let kvs: Vec<Value> = got
            .kvs()
            .iter()
            .map(|kv| {
                json!({
                    "key": kv.key_str().expect("utf-8"),
                    "value": kv.value_str().expect("utf-8"),
                    "create": kv.create_revision(),
                    "mod": kv.mod_revision(),
                    "version": kv.version(),
                    "lease": kv.lease(),
                })
            })
            .collect();
        ranges.push(json!({ "revision": revision, "kvs": kvs, "count": got.count() }));
    }
    let compacted = client
        .get(
            PREFIX,
            Some(GetOptions::new().with_prefix().with_revision(COMPACTED - 1)),
        )
        .await
        .err()
        .map(|e| e.to_string());
    let current = client
        .get(
            PREFIX,
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .expect("count")
        .header()
        .expect("header")
        .revision();
    let hash = client.hash_kv(current).await.expect("hash kv");
    let users = client.user_list().await.expect("users");
    let alice = client.user_get("alice").await.expect("alice");
    let reader = client.role_get("reader").await.expect("reader");
    let permissions: Vec<Value> = reader
        .permissions()
        .iter()
        .map(|p| json!({"key": String::from_utf8_lossy(p.key()), "end": String::from_utf8_lossy(p.range_end()), "type": p.get_type()}))
        .collect();
    let members = client.member_list().await.expect("members");
    let mut members: Vec<Value> = members
        .members()
        .iter()
        .map(|m| json!({"learner": m.is_learner(), "name": m.name(), "peers": m.peer_urls().len()}))
        .collect();
    members.sort_by_key(|m| m.to_string());
    let alarms: Vec<i32> = client
        .alarm(AlarmAction::Get, AlarmType::None, None)
        .await
        .expect("alarms")
        .alarms()
        .iter()
        .map(|a| a.alarm() as i32)
        .collect();
    let lease = client
        .lease_time_to_live(0x1234, Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .expect("lease");
    let lease_keys: Vec<String> = lease
        .keys()
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    json!({
        "ranges": ranges,
        "compacted_read": compacted,
        "revision": current,
        "hash_kv": { "hash": hash.hash(), "compact_revision": hash.compact_version() },
        "users": users.users(),
        "alice_roles": alice.roles(),
        "reader_permissions": permissions,
        "members": members,
        "alarms": alarms,
        "lease": { "granted_ttl": lease.granted_ttl(), "keys": lease_keys },
    })
}

/// Copies the data dir `from` into `to`, leaving out RocksDB's text logs and its lock.
fn copy_data_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("LOG") || name == "LOCK" {
            continue;
        }
        let target = to.join(&*name);
        if entry.file_type().expect("type").is_dir() {
            copy_data_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// `quantykube snapshot status <file> -w json` of `binary`, as JSON.
fn snapshot_status(binary: &Path, file: &Path) -> Value {
    let out = std::process::Command::new(binary)
        .args(["snapshot", "status", "-w", "json"])
        .arg(file)
        .output()
        .expect("run snapshot status");
    assert!(
        out.status.success(),
        "snapshot status {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("snapshot status prints JSON")
}

async fn write_fixture(release: &str) {
    let mut cluster = Cluster::start(1).await;
    workload(&cluster).await;
    let mut root = root_client(&cluster, 0).await;
    let mut expected = observe(&mut root).await;
    let dir = fixtures().join(release);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the fixture dir");
    // An etcd snapshot file of the release's, as `etcdctl snapshot save` writes it.
    let mut stream = root.snapshot().await.expect("snapshot");
    let mut file = Vec::new();
    while let Some(part) = stream.message().await.expect("snapshot stream") {
        file.extend_from_slice(part.blob());
    }
    std::fs::write(dir.join("snapshot.db"), &file).expect("write snapshot.db");
    let binary = Target::Quantykube.binary().expect("the release's binary");
    expected["snapshot_status"] = snapshot_status(&binary, &dir.join("snapshot.db"));
    drop(root);
    cluster.stop(0).await;
    copy_data_dir(&cluster.data_dir(0), &dir.join("data"));
    let text = serde_json::to_string_pretty(&expected).expect("json");
    std::fs::write(dir.join("expected.json"), text + "\n").expect("write expected.json");
}

#[tokio::test]
async fn release_data_dirs_are_served_as_their_release_served_them() {
    if Target::from_env() == Target::Etcd {
        return;
    }
    if let Ok(release) = std::env::var("QK_WRITE_FIXTURE") {
        write_fixture(&release).await;
        return;
    }
    let mut releases: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .expect("tests/fixtures/data-dirs")
        .map(|e| e.expect("entry").path())
        .collect();
    releases.sort();
    assert!(!releases.is_empty(), "no release fixture");
    for release in releases {
        let expected: Value = serde_json::from_slice(
            &std::fs::read(release.join("expected.json")).expect("expected.json"),
        )
        .expect("expected.json is JSON");
        let data = release.join("data");
        let mut cluster = ClusterOptions::new(1)
            .ready(&[])
            .prepare(move |spec| copy_data_dir(&data, &spec.data_dir()))
            .start()
            .await;
        wait_ready_as_root(&mut cluster, 0).await;
        let mut root = root_client(&cluster, 0).await;
        let mut served = observe(&mut root).await;
        let binary = Target::Quantykube.binary().expect("the quantykube binary");
        served["snapshot_status"] = snapshot_status(&binary, &release.join("snapshot.db"));
        assert_eq!(
            served,
            expected,
            "{}: this build serves the release's data dir differently",
            release.display()
        );
    }
}

/// A migration cut short anywhere: each part of a data dir (the raft log, the store,
/// `member.json`) moves to the new format in one durable write of its own, so a power
/// loss leaves each part in the old format or the new one. Every such mix of v0.1.0's
/// fixture starts, serves what v0.1.0 served, and ends in this build's format.
#[tokio::test]
async fn a_migration_cut_short_anywhere_leaves_a_data_dir_that_starts_and_serves() {
    use quantykube::format::{self, Database};
    if Target::from_env() == Target::Etcd {
        return;
    }
    let fixture = fixtures().join("v0.1.0");
    let expected: Value =
        serde_json::from_slice(&std::fs::read(fixture.join("expected.json")).expect("read"))
            .expect("JSON");
    let open = |path: &Path| {
        let families = rocksdb::DB::list_cf(&rocksdb::Options::default(), path).expect("families");
        rocksdb::DB::open_cf(&rocksdb::Options::default(), path, families).expect("open")
    };
    // Bit 0: the raft log migrated; bit 1: the store; bit 2: member.json.
    for migrated in 0..8u32 {
        let staged = tempfile::tempdir().expect("tempdir");
        let data = staged.path().join("data");
        copy_data_dir(&fixture.join("data"), &data);
        if migrated & 1 != 0 {
            format::migrate(Database::Log, &open(&data.join("wal")), format::CURRENT)
                .expect("migrate the log");
        }
        if migrated & 2 != 0 {
            format::migrate(Database::Store, &open(&data.join("db")), format::CURRENT)
                .expect("migrate the store");
        }
        if migrated & 4 != 0 {
            quantykube::membership::join::migrate_identity(&data, format::CURRENT)
                .expect("migrate member.json");
        }
        let from = data.clone();
        let mut cluster = ClusterOptions::new(1)
            .ready(&[])
            .prepare(move |spec| copy_data_dir(&from, &spec.data_dir()))
            .start()
            .await;
        wait_ready_as_root(&mut cluster, 0).await;
        let mut root = root_client(&cluster, 0).await;
        let mut served = observe(&mut root).await;
        let mut wanted = expected.clone();
        served["snapshot_status"] = Value::Null;
        wanted["snapshot_status"] = Value::Null;
        assert_eq!(
            served, wanted,
            "parts migrated before the cut: {migrated:03b}"
        );
        drop(root);
        cluster.stop(0).await;
        let dir = cluster.data_dir(0);
        for (database, path) in [
            (Database::Store, dir.join("db")),
            (Database::Log, dir.join("wal")),
        ] {
            assert_eq!(
                format::recorded(database, &path).expect("format"),
                Some(format::CURRENT),
                "{database:?} after a start from {migrated:03b}"
            );
        }
    }
}
