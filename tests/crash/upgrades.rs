//! A member that loses power while it migrates an older release's data dir at start
//! (docs/operations.md, "Upgrades and data formats"): each part of the data dir moves
//! to the new format in one durable write of its own, so every power loss leaves each
//! part in the old format or the new one, and the member starts on whatever is left,
//! with every key. QuantyKube's formats only: etcd 3.4 has none.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use quantykube::format::{self, Database};
use quantykube_crashfs::Torn;

use crate::first_files::commit_metadata;
use crate::harness::{Target, START_TIMEOUT};
use crate::power::Choices;
use crate::rig::{Rig, Server};
use crate::support::connect::Connect;

/// The root password of the fixture's auth (tests/e2e/auth_support.rs's `ROOT_PW`).
const ROOT_PW: &str = "root-secret";

/// Copies `from` into `to` and syncs every file: the fixture is on the disk before the
/// first power loss, as a data dir left by the older release would be.
fn copy_durably(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_durably(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
            File::open(&target)
                .and_then(|f| f.sync_all())
                .expect("sync");
        }
    }
}

/// The format `member.json` records (1: none).
fn identity_format(data_dir: &Path) -> u64 {
    let mut raw = String::new();
    File::open(data_dir.join("member.json"))
        .and_then(|mut f| f.read_to_string(&mut raw))
        .expect("read member.json");
    let value: serde_json::Value = serde_json::from_str(&raw).expect("member.json is JSON");
    value.get("format").and_then(|f| f.as_u64()).unwrap_or(1)
}

/// Waits until member 0 serves every key of v0.1.0's fixture to root.
async fn assert_serves_the_fixture(rig: &mut Rig, what: &str) {
    let deadline = Instant::now() + START_TIMEOUT;
    let endpoint = rig.cluster.endpoint(0);
    let mut client = loop {
        if let Some(status) = rig.cluster.poll_exit(0) {
            panic!(
                "{what}: the member exited: {status}{}",
                rig.cluster.log_tails()
            );
        }
        if let Ok(mut client) = Connect::new()
            .quick()
            .user("root", ROOT_PW)
            .try_to([&endpoint])
            .await
        {
            if client.get("fixture/1", None).await.is_ok() {
                break client;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not ready:{}",
            rig.cluster.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let all = client
        .get(
            "fixture/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .expect("read every key");
    assert_eq!(all.count(), 6, "{what}: v0.1.0's six live keys");
    let first = client.get("fixture/1", None).await.expect("read");
    assert_eq!(first.kvs()[0].value(), b"v1c", "{what}");
    assert_eq!(first.kvs()[0].version(), 3, "{what}");
}

/// The formats of the data dir's three parts: store, raft log, member.json.
fn formats(data_dir: &Path) -> (u32, u32, u64) {
    let read = |database, path: PathBuf| {
        format::recorded(database, &path)
            .expect("a readable format")
            .expect("a database")
    };
    (
        read(Database::Store, data_dir.join("db")),
        read(Database::Log, data_dir.join("wal")),
        identity_format(data_dir),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_loses_power_while_it_migrates_v0_1_0s_data_dir_keeps_everything() {
    if Target::from_env() == Target::Etcd {
        return;
    }
    let Some(mut rig) = Rig::start(1, Server::Shipped, |o| o.unstarted()).await else {
        return;
    };
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data-dirs/v0.1.0/data");
    let data_dir = rig.cluster.data_dir(0);
    let current = format::CURRENT;
    let mut choices = Choices::new("upgrades");
    for round in 0..8u64 {
        // v0.1.0's data dir, on the disk as that release left it.
        if data_dir.exists() {
            std::fs::remove_dir_all(&data_dir).expect("clear the data dir");
        }
        copy_durably(&fixture, &data_dir);
        commit_metadata(rig.disks[0].mountpoint());
        let offset = std::fs::metadata(rig.cluster.log_path(0)).map_or(0, |m| m.len());
        rig.cluster.start_member(0);
        // Even rounds cut as soon as the member logs its first migration step (the raft
        // log's; the store's follows within milliseconds); odd ones at a moment of the
        // start drawn from the seed, before, during or after the migration.
        let when = if round % 2 == 0 {
            let deadline = Instant::now() + START_TIMEOUT;
            while !crate::harness::log_since(&rig.cluster.log_path(0), offset)
                .contains("migrated the database's format")
            {
                assert!(Instant::now() < deadline, "no migration logged");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            "right after the first step".to_owned()
        } else {
            let delay = Duration::from_millis(40 + choices.below(100));
            tokio::time::sleep(delay).await;
            format!("{delay:?} after the start")
        };
        rig.cut(&[0], Torn::No);
        let (store, log, identity) = formats(&data_dir);
        println!(
            "round {round}: power lost {when}: store {store}, log {log}, member.json {identity}"
        );
        for (part, found) in [
            ("store", u64::from(store)),
            ("raft log", u64::from(log)),
            ("member.json", identity),
        ] {
            assert!(
                found == 1 || found == u64::from(current),
                "round {round}, power lost {when}: the {part} in format {found}"
            );
        }
        // It starts on whatever the power loss left, and serves every key.
        rig.cluster.start_member(0);
        assert_serves_the_fixture(&mut rig, &format!("round {round}")).await;
        rig.cluster.kill9(0);
        assert_eq!(
            formats(&data_dir),
            (current, current, u64::from(current)),
            "round {round}: this build's format once started"
        );
    }
}
