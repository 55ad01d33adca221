//! The data dir's format version (docs/operations.md, "Upgrades"): a member migrates
//! an older data dir at start, `quantykube migrate` moves one between releases'
//! formats offline, and a data dir a newer build wrote is refused, untouched, with exit
//! code 3. QuantyKube's own formats: etcd 3.4 has no storage version (3.6's
//! `etcdutl migrate` is the model), so these tests run against QuantyKube only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use quantykube::format::{self, Database};

use crate::harness::{log_since, Cluster, ClusterOptions, Target};

fn binary() -> PathBuf {
    Target::Quantykube.binary().expect("the quantykube binary")
}

fn migrate(data_dir: &Path, target: &str) -> String {
    let out = Command::new(binary())
        .arg("migrate")
        .arg(format!("--data-dir={}", data_dir.display()))
        .arg(format!("--target-version={target}"))
        .output()
        .expect("run quantykube migrate");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "migrate to {target}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The formats a data dir records: store, raft log, and member.json's field.
fn formats(data_dir: &Path) -> (Option<u32>, Option<u32>, Option<u64>) {
    let store = format::recorded(Database::Store, &data_dir.join("db")).expect("store format");
    let log = format::recorded(Database::Log, &data_dir.join("wal")).expect("log format");
    let member: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data_dir.join("member.json")).expect("member.json"))
            .expect("member.json is JSON");
    (store, log, member.get("format").and_then(|f| f.as_u64()))
}

/// Every file under `dir` with its size and modification time.
fn listing(dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).expect("read dir") {
            let entry = entry.expect("entry");
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                let modified = meta.modified().expect("mtime");
                files.insert(entry.path(), (meta.len(), modified));
            }
        }
    }
    files
}

async fn assert_serves(cluster: &Cluster, keys: usize) {
    let mut client = cluster.client(0).await;
    for i in 0..keys {
        let got = client.get(format!("format/{i}"), None).await.expect("get");
        assert_eq!(
            got.kvs()[0].value(),
            format!("v{i}").as_bytes(),
            "format/{i}"
        );
    }
}

/// Records a newer build's format in the store of a stopped member; what its data dir
/// holds then.
fn plant_newer_format(data_dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    let store = data_dir.join("db");
    let families = rocksdb::DB::list_cf(&rocksdb::Options::default(), &store).expect("families");
    let db = rocksdb::DB::open_cf(&rocksdb::Options::default(), &store, families)
        .expect("open the store");
    db.put(format::FORMAT_KEY, (format::CURRENT + 1).to_be_bytes())
        .expect("plant a newer format");
    db.flush_wal(true).expect("sync");
    drop(db);
    listing(data_dir)
}

/// Starts member 0 on its data dir and waits for it to exit: its exit code and what it
/// logged.
async fn start_refused(cluster: &mut Cluster) -> (Option<i32>, String) {
    let offset = std::fs::metadata(cluster.log_path(0)).map_or(0, |m| m.len());
    cluster.start_member(0);
    let status = cluster
        .wait_exit(0, Duration::from_secs(30))
        .await
        .expect("the member exits on a newer format");
    (status.code(), log_since(&cluster.log_path(0), offset))
}

#[tokio::test]
async fn format_migrates_down_and_up_and_a_newer_one_is_refused_untouched() {
    if Target::from_env() == Target::Etcd {
        return;
    }
    let mut cluster = Cluster::start(1).await;
    let data_dir = cluster.data_dir(0);
    {
        let mut client = cluster.client(0).await;
        for i in 0..10 {
            client
                .put(format!("format/{i}"), format!("v{i}"), None)
                .await
                .expect("put");
        }
    }
    cluster.kill9(0);
    let current = format::CURRENT;
    assert_eq!(
        formats(&data_dir),
        (Some(current), Some(current), Some(u64::from(current))),
        "a member records its format everywhere"
    );

    // Down to the first release's format, which records none; twice changes nothing.
    let report = migrate(&data_dir, "0.1");
    assert!(report.contains("to format 1"), "{report}");
    assert_eq!(formats(&data_dir), (Some(1), Some(1), None));
    migrate(&data_dir, "0.1");
    assert_eq!(formats(&data_dir), (Some(1), Some(1), None));

    // A member started on it migrates it up, and serves everything.
    cluster.restart(0).await;
    assert_serves(&cluster, 10).await;
    cluster.kill9(0);
    assert_eq!(
        formats(&data_dir),
        (Some(current), Some(current), Some(u64::from(current)))
    );

    // A newer build's store: refused before anything opens it for writing.
    let before = plant_newer_format(&data_dir);
    let (status, log) = start_refused(&mut cluster).await;
    assert_eq!(status, Some(3), "exit code 3 for a newer format");
    assert!(
        log.contains(&format!("format {}", current + 1)) && log.contains("newer QuantyKube"),
        "the log says why:\n{log}"
    );
    assert_eq!(listing(&data_dir), before, "the data dir is untouched");
    // And migrate refuses it too: only the newer build can move it back.
    let out = Command::new(binary())
        .arg("migrate")
        .arg(format!("--data-dir={}", data_dir.display()))
        .arg("--target-version=0.1")
        .output()
        .expect("run quantykube migrate");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("newer QuantyKube"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(listing(&data_dir), before, "still untouched");
}

/// The guard's planted bug (`OpensNewerFormat`, docs/durability.md): without the check
/// before the databases open, the member still refuses (the migration checks again),
/// but the newer build's data dir has been written to, which the test above catches.
#[tokio::test]
async fn without_the_format_check_before_opening_a_newer_data_dir_is_touched() {
    if Target::from_env() == Target::Etcd {
        return;
    }
    let planted = binary().with_file_name("quantykube-planted");
    assert!(
        planted.is_file(),
        "{} is missing: `cargo build --bin quantykube-planted --features planted-bugs` \
         (make test does)",
        planted.display()
    );
    let mut cluster = ClusterOptions::new(1)
        .binary(planted)
        .env("QK_PLANTED_BUGS", "OpensNewerFormat")
        .start()
        .await;
    let data_dir = cluster.data_dir(0);
    cluster.kill9(0);
    let before = plant_newer_format(&data_dir);
    let (status, _) = start_refused(&mut cluster).await;
    assert_eq!(status, Some(3), "the migration refuses it still");
    assert_ne!(
        listing(&data_dir),
        before,
        "the planted build opened the newer data dir for writing"
    );
}
