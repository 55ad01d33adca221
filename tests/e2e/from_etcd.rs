//! etcd's data dirs, served in place (issue 54, item 5): stop etcd 3.4, start the target
//! with the same flags on the same `--data-dir`, and it serves the same keys at every
//! revision, the same HashKV, leases, users, roles and members.
//!
//! - One member killed with SIGKILL whose database lags its WAL (etcd's backend commits
//!   only at its snapshots here), so that the tail after the last `.snap` (auth
//!   changes, a lease, puts and deletes) is replayed.
//! - Three members stopped as an operator stops them, moved one by one.
//! - A data dir `etcdctl snapshot restore` made, as etcd's runbooks make them, with what
//!   a conversion cut short leaves in it.
//!
//! The first server is always etcd 3.4 (it writes the files); the second is the
//! target, so `QK_TEST_TARGET=etcd` checks each scenario against etcd restarting on its
//! own files, the oracle.

use std::path::{Path, PathBuf};

use etcd_client::{Client, ConnectOptions, Permission};

use crate::harness::{current_revision, restore_command, run, Cluster, ClusterOptions, Target};
use crate::membership::{listing, Listed};
use crate::snapshot::{observe, write_history, History, Reading};

/// etcd's snapshot every this many entries, its backend committed only then.
const SNAPSHOT_COUNT: u64 = 100;

fn etcd_flags() -> Vec<String> {
    [
        "--snapshot-count",
        "100",
        // The database is committed at snapshots only, so a SIGKILL leaves it behind
        // the WAL, as a power cut can leave etcd's.
        "--backend-batch-interval",
        "1h",
        "--backend-batch-limit",
        "1000000",
    ]
    .map(String::from)
    .to_vec()
}

/// A role's permissions: (type, key, range end).
type Permissions = Vec<(i32, Vec<u8>, Vec<u8>)>;

/// Everything a client can see that the move must keep.
#[derive(Debug, PartialEq)]
struct Seen {
    readings: Vec<Reading>,
    leases: Vec<(i64, i64, Vec<Vec<u8>>)>,
    hash: (u32, i64),
    users: Vec<String>,
    roles: Vec<(String, Permissions)>,
    members: Vec<Listed>,
}

async fn see(client: &mut Client, history: &History) -> Seen {
    let (readings, leases) = observe(client, history).await;
    let hash = client.hash_kv(0).await.expect("hash kv");
    let users = client
        .user_list()
        .await
        .expect("user list")
        .users()
        .to_vec();
    let mut roles = Vec::new();
    for role in client
        .role_list()
        .await
        .expect("role list")
        .roles()
        .to_vec()
    {
        let got = client.role_get(role.clone()).await.expect("role get");
        let permissions = got
            .permissions()
            .iter()
            .map(|p| (p.get_type(), p.key().to_vec(), p.range_end().to_vec()))
            .collect();
        roles.push((role, permissions));
    }
    let members = listing(client.member_list().await.expect("member list").members());
    Seen {
        readings,
        leases,
        hash: (hash.hash(), hash.compact_version()),
        users,
        roles,
        members,
    }
}

/// Asserts `got` is `expected`, naming the first difference (a reading holds every key).
fn assert_same(got: &Seen, expected: &Seen, who: &str) {
    for (g, e) in got.readings.iter().zip(&expected.readings) {
        if g == e {
            continue;
        }
        let describe = |r: &Reading| match &r.1 {
            Ok(kvs) => format!("{} keys", kvs.len()),
            Err(e) => e.clone(),
        };
        if let (Ok(gk), Ok(ek)) = (&g.1, &e.1) {
            let first = gk.iter().zip(ek).find(|(a, b)| a != b);
            panic!(
                "{who}: at revision {} got {} expected {}; first difference {first:?}",
                e.0,
                describe(g),
                describe(e)
            );
        }
        panic!(
            "{who}: at revision {} got {} expected {}",
            e.0,
            describe(g),
            describe(e)
        );
    }
    assert_eq!(got.leases, expected.leases, "{who}: leases");
    // QuantyKube hashes its own encoding (tests/e2e/maintenance_hash.rs): its HashKV
    // is compared with etcd's only when the target is etcd, and between members.
    assert_eq!(
        got.hash.1, expected.hash.1,
        "{who}: HashKV's compact revision"
    );
    if Target::from_env() == Target::Etcd {
        assert_eq!(got.hash, expected.hash, "{who}: HashKV");
    }
    assert_eq!(got.users, expected.users, "{who}: users");
    assert_eq!(got.roles, expected.roles, "{who}: roles");
    assert_eq!(got.members, expected.members, "{who}: members");
    assert_eq!(got.readings.len(), expected.readings.len());
}

/// The index of the newest `.snap` file of an etcd member.
fn newest_snap(data_dir: &Path) -> u64 {
    std::fs::read_dir(data_dir.join("member/snap"))
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let index = name.strip_suffix(".snap")?.split_once('-')?.1.to_owned();
                    u64::from_str_radix(&index, 16).ok()
                })
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Puts filler keys until etcd takes a snapshot, so that the next hundred entries are
/// all in the WAL's tail. etcd snapshots within `SNAPSHOT_COUNT + 1` entries and writes
/// the file as it applies the entry: twice that many puts always see it.
async fn until_a_snapshot(client: &mut Client, data_dir: &Path) {
    let before = newest_snap(data_dir);
    for i in 0..2 * SNAPSHOT_COUNT {
        client
            .put(format!("filler/{i:03}"), "x", None)
            .await
            .expect("put");
        if newest_snap(data_dir) != before {
            return;
        }
    }
    panic!("etcd took no snapshot after {} entries", 2 * SNAPSHOT_COUNT);
}

/// Auth changes, a lease and writes that land after the last snapshot: `history` with
/// them.
async fn write_tail(client: &mut Client, history: History) -> History {
    client.role_add("reader").await.expect("role add");
    client
        .role_grant_permission("reader", Permission::read("a"))
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
    client
        .user_add("root", "root-pw", None)
        .await
        .expect("root");
    client
        .user_grant_role("root", "root")
        .await
        .expect("root role");
    let tail_lease = client.lease_grant(700, None).await.expect("grant").id();
    client
        .put(
            "tail/leased",
            "y",
            Some(etcd_client::PutOptions::new().with_lease(tail_lease)),
        )
        .await
        .expect("put");
    client.delete("filler/000", None).await.expect("delete");
    let mut leases = history.leases;
    leases.push((tail_lease, 700, vec![b"tail/leased".to_vec()]));
    History {
        current: current_revision(client).await,
        leases,
        ..history
    }
}

/// etcd's files in a data dir, byte for byte (the WAL's preallocated zeros aside).
fn etcd_files(data_dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for sub in ["member/snap", "member/wal"] {
        let mut listed: Vec<PathBuf> = std::fs::read_dir(data_dir.join(sub))
            .expect("etcd dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        listed.sort();
        for path in listed {
            let bytes = std::fs::read(&path).expect("read");
            files.push((path, bytes));
        }
    }
    files
}

/// What the converting member logged of its conversion: (replayed, uncommitted).
fn conversion_logged(cluster: &Cluster, i: usize) -> Option<(u64, u64)> {
    let log = std::fs::read_to_string(cluster.log_path(i)).ok()?;
    let line = log
        .lines()
        .find(|l| l.contains("converted etcd's data dir in place"))?;
    let field = |name: &str| -> Option<u64> {
        // JSON logs (`"name":13`) or text ones (`name=13`).
        let key = [format!("\"{name}\":"), format!("{name}=")]
            .into_iter()
            .find(|key| line.contains(key.as_str()))?;
        let start = line.find(&key)? + key.len();
        line[start..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some((field("replayed-entries")?, field("uncommitted-entries")?))
}

#[tokio::test]
async fn an_etcd_3_4_member_killed_with_a_wal_tail_is_served_in_place() {
    let target = Target::from_env();
    let mut cluster = ClusterOptions::new(1)
        .target(Target::Etcd)
        .args(etcd_flags())
        .start()
        .await;
    let data_dir = cluster.data_dir(0);
    let mut client = cluster.client(0).await;
    let history = write_history(&mut client).await;
    until_a_snapshot(&mut client, &data_dir).await;
    let history = write_tail(&mut client, history).await;
    let expected = see(&mut client, &history).await;
    drop(client);
    cluster.kill9(0);
    let etcds = etcd_files(&data_dir);

    cluster.switch_target(target);
    cluster.restart(0).await;
    let mut client = cluster.client(0).await;
    assert_same(
        &see(&mut client, &history).await,
        &expected,
        "after the move",
    );
    if target == Target::Quantykube {
        let (replayed, _) = conversion_logged(&cluster, 0).expect("the conversion is logged");
        assert!(
            replayed >= 8,
            "the WAL's tail was replayed ({replayed} entries)"
        );
        assert_eq!(
            etcd_files(&data_dir),
            etcds,
            "etcd's files are left as they were"
        );
    }
    // Passwords and permissions came along: alice reads `a` and may not write it.
    client.auth_enable().await.expect("auth enable");
    let options = ConnectOptions::new().with_user("alice", "alice-pw");
    let mut alice = Client::connect([cluster.endpoint(0)], Some(options))
        .await
        .expect("alice");
    alice.get("a", None).await.expect("alice reads a");
    let refused = alice
        .put("a", "no", None)
        .await
        .expect_err("alice may not write");
    assert!(
        refused.to_string().contains("permission denied"),
        "{refused}"
    );
    drop(alice);
    // And the member goes on: a write, a restart that converts nothing again.
    let mut root = Client::connect(
        [cluster.endpoint(0)],
        Some(ConnectOptions::new().with_user("root", "root-pw")),
    )
    .await
    .expect("root");
    let next = root.put("after", "move", None).await.expect("put");
    assert_eq!(
        next.header().expect("header").revision(),
        history.current + 1
    );
    // (The harness's readiness check reads without a token.)
    root.auth_disable().await.expect("auth disable");
    drop(root);
    cluster.stop(0).await;
    cluster.restart(0).await;
    let mut client = cluster.client(0).await;
    let after = client.get("after", None).await.expect("get");
    assert_eq!(after.kvs()[0].value(), b"move");
    if target == Target::Quantykube {
        let log = std::fs::read_to_string(cluster.log_path(0)).expect("log");
        assert_eq!(
            log.matches("converted etcd's data dir in place").count(),
            1,
            "converted once"
        );
    }
}

#[tokio::test]
async fn three_etcd_3_4_members_stopped_move_in_place_one_by_one() {
    let target = Target::from_env();
    let mut cluster = ClusterOptions::new(3)
        .target(Target::Etcd)
        .args(etcd_flags())
        .start()
        .await;
    let mut client = cluster.client(0).await;
    let history = write_history(&mut client).await;
    let history = write_tail(&mut client, history).await;
    let expected = see(&mut client, &history).await;
    drop(client);
    // As an operator stops them: one at a time, each handing leadership on.
    for i in 0..3 {
        cluster.stop(i).await.expect("etcd stops");
    }
    cluster.switch_target(target);
    // Each member converts its own files; the cluster serves once a quorum runs.
    cluster.start_all().await;
    let mut hashes = Vec::new();
    for i in 0..3 {
        let mut client = cluster.client(i).await;
        let seen = see(&mut client, &history).await;
        assert_same(&seen, &expected, &format!("member {i}"));
        hashes.push(seen.hash);
    }
    assert!(
        hashes.iter().all(|h| *h == hashes[0]),
        "the members' HashKV agree: {hashes:?}"
    );
    let mut client = cluster.client(1).await;
    let next = client.put("after", "move", None).await.expect("put");
    assert_eq!(
        next.header().expect("header").revision(),
        history.current + 1
    );
}

#[tokio::test]
async fn a_data_dir_etcdctl_restored_is_served_in_place() {
    let target = Target::from_env();
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = ClusterOptions::new(1).target(Target::Etcd).start().await;
    let mut client = etcd.client(0).await;
    let history = write_history(&mut client).await;
    let (readings, leases) = observe(&mut client, &history).await;
    let hash = client.hash_kv(0).await.expect("hash kv");
    let file = dir.path().join("backup.db");
    etcd.etcdctl_on(0, &["snapshot", "save", &file.to_string_lossy()])
        .await
        .assert_success();
    drop(client);
    drop(etcd);

    // etcdctl 3.4 restores, as etcd's runbooks do; the target starts on what it made.
    let cluster = ClusterOptions::new(1)
        .target(target)
        .prepare(move |spec| {
            run(restore_command(Target::Etcd, &file, spec));
            // What a conversion cut short by a crash leaves (before `member.json`, its
            // commit point): removed and done again.
            for leftover in ["from-etcd/db", "db", "wal"] {
                let dir = spec.data_dir().join(leftover);
                std::fs::create_dir_all(&dir).expect("leftover dir");
                std::fs::write(dir.join("CURRENT"), b"half written").expect("leftover");
            }
        })
        .start()
        .await;
    let mut client = cluster.client(0).await;
    let (got_readings, got_leases) = observe(&mut client, &history).await;
    assert!(got_readings == readings, "the readings differ");
    assert_eq!(got_leases, leases);
    let restored = client.hash_kv(0).await.expect("hash kv");
    assert_eq!(restored.compact_version(), hash.compact_version());
    if target == Target::Etcd {
        // QuantyKube hashes its own encoding (tests/e2e/maintenance_hash.rs).
        assert_eq!(restored.hash(), hash.hash());
    }
    let members = client.member_list().await.expect("member list");
    let names: Vec<&str> = members.members().iter().map(|m| m.name()).collect();
    assert_eq!(names, [cluster.name(0)]);
    assert_eq!(members.members()[0].id(), cluster.member_id(0));
    let next = client.put("after", "restore", None).await.expect("put");
    assert_eq!(
        next.header().expect("header").revision(),
        history.current + 1
    );
}
