//! etcd's corruption checks on real processes: a member whose store is altered behind
//! its back while stopped refuses to start with `--experimental-initial-corrupt-check`
//! (and starts without it); the leader's periodic check (`--experimental-corrupt-check-
//! time`) raises CORRUPT for such a member on a running cluster, after which writes are
//! refused; and neither check ever fires on a healthy cluster under writes, compaction,
//! a Snapshot and a member restart.
//!
//! The alteration: for etcd, the unique marker's bytes in `member/snap/db` are changed
//! in place (bbolt has no data checksums); for QuantyKube, the `kv` entry of its
//! `<data-dir>/db` RocksDB whose value ends with the marker is written back with one
//! byte changed. Written against etcd 3.4 first.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{CompactionOptions, GetOptions};
use tonic::Code;

use crate::harness::{
    assert_grpc_error, current_revision, log_since, Cluster, ClusterOptions, Deadline, Target,
};

const CORRUPT: &str = "etcdserver: corrupt cluster";
/// What the marker's last byte becomes.
const ALTERED_LAST_BYTE: u8 = b'#';

/// Changes the last byte of `marker` where member data dir `data_dir` stores it.
fn alter_marker(target: Target, data_dir: &Path, marker: &[u8]) {
    match target {
        Target::Etcd => {
            let path = data_dir.join("member/snap/db");
            let mut bytes = std::fs::read(&path).expect("read bbolt db");
            let mut found = 0;
            let mut at = 0;
            while let Some(offset) = bytes[at..]
                .windows(marker.len())
                .position(|window| window == marker)
            {
                let start = at + offset;
                bytes[start + marker.len() - 1] = ALTERED_LAST_BYTE;
                found += 1;
                at = start + marker.len();
            }
            assert!(found > 0, "marker not found in {}", path.display());
            // Same length: the file is rewritten in place, page for page.
            std::fs::write(&path, &bytes).expect("write bbolt db");
        }
        Target::Quantykube => {
            let path = data_dir.join("db");
            let options = rocksdb::Options::default();
            let families = rocksdb::DB::list_cf(&options, &path).expect("list column families");
            let db = rocksdb::DB::open_cf(&options, &path, &families).expect("open rocksdb");
            let kv = db.cf_handle("kv").expect("kv column family");
            let mut altered = Vec::new();
            for entry in db.iterator_cf(kv, rocksdb::IteratorMode::Start) {
                let (key, value) = entry.expect("read kv");
                if value.ends_with(marker) {
                    let mut value = value.to_vec();
                    let last = value.len() - 1;
                    value[last] = ALTERED_LAST_BYTE;
                    altered.push((key.to_vec(), value));
                }
            }
            assert_eq!(altered.len(), 1, "one stored version ends with the marker");
            for (key, value) in altered {
                db.put_cf(kv, key, value).expect("write kv");
            }
            db.flush().expect("flush");
        }
    }
}

/// The marker value, unique to this test, and what it reads as once altered.
fn marker(test: &str) -> (Vec<u8>, Vec<u8>) {
    let value = format!("qk-corruption-marker-{test}-Z").into_bytes();
    let mut altered = value.clone();
    let last = altered.len() - 1;
    altered[last] = ALTERED_LAST_BYTE;
    (value, altered)
}

/// Writes a few keys and the marker, and waits until member `i` has applied them and
/// (etcd) its backend has committed them to bbolt (every 100 ms).
async fn write_marker(cluster: &Cluster, i: usize, value: &[u8]) {
    let mut client = cluster.client(0).await;
    for n in 0..20 {
        client
            .put(format!("filler/{n}"), format!("v{n}"), None)
            .await
            .expect("put");
    }
    client.put("marker", value, None).await.expect("put marker");
    let revision = current_revision(&mut client).await;
    let mut own = cluster.client(i).await;
    let deadline = Deadline::after(Duration::from_secs(10), "the member applies the marker");
    loop {
        let response = own
            .get("marker", Some(GetOptions::new().with_serializable()))
            .await
            .expect("get");
        if response.header().map_or(0, |h| h.revision()) >= revision {
            break;
        }
        deadline.tick().await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Every member's whole log (tails would miss an early warning).
fn all_logs(cluster: &Cluster) -> String {
    (0..cluster.size())
        .map(|i| log_since(&cluster.log_path(i), 0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// etcd 3.4 logs with capnslog unless told otherwise; its zap lines are the ones etcd
/// 3.5 and 3.6 (and QuantyKube, by default) write.
const ZAP: &str = "--logger=zap";

async fn serializable_value(cluster: &Cluster, i: usize, key: &str) -> Vec<u8> {
    let response = cluster
        .client(i)
        .await
        .get(key, Some(GetOptions::new().with_serializable()))
        .await
        .expect("get");
    response
        .kvs()
        .first()
        .map(|kv| kv.value().to_vec())
        .unwrap_or_default()
}

#[tokio::test]
async fn initial_check_refuses_a_member_altered_while_stopped() {
    let altered_member = 2;
    let check = Arc::new(AtomicBool::new(true));
    let flag = check.clone();
    // etcd 3.4 learns its members for the initial check from its last snapshot only
    // (corrupt.go's "TODO: handle the case when s.cluster.Members have not been
    // populated"): a small --snapshot-count makes sure there is one.
    let mut cluster = Cluster::start_with(
        ClusterOptions::new(3)
            .args([ZAP, "--snapshot-count=10"])
            .member_args(move |_| {
                if flag.load(Ordering::SeqCst) {
                    vec!["--experimental-initial-corrupt-check=true".to_owned()]
                } else {
                    Vec::new()
                }
            }),
    )
    .await;
    let (value, altered) = marker("initial");
    write_marker(&cluster, altered_member, &value).await;

    // A healthy restart passes the check, with etcd's line.
    let before = cluster.log_len(altered_member);
    cluster.restart(altered_member).await;
    let log = log_since(&cluster.log_path(altered_member), before);
    assert!(
        log.contains("initial corruption checking passed; no corruption"),
        "{log}"
    );

    cluster.kill9(altered_member);
    alter_marker(cluster.target(), &cluster.data_dir(altered_member), &value);
    let before = cluster.log_len(altered_member);
    cluster.start_member(altered_member);
    let Some(status) = cluster
        .wait_exit(altered_member, Duration::from_secs(60))
        .await
    else {
        let log = log_since(&cluster.log_path(altered_member), before);
        panic!("the altered member did not stop by itself: {log}");
    };
    assert!(!status.success(), "{status:?}");
    let log = log_since(&cluster.log_path(altered_member), before);
    let id = cluster.member_id(altered_member);
    assert!(
        log.contains(&format!("{id:x} found data inconsistency with peers")),
        "{log}"
    );
    assert!(
        log.contains("found different hash values from remote peer"),
        "{log}"
    );

    // Without the check it starts, and still disagrees with its peers (what it reads
    // back depends on the store: QuantyKube's latest-version index keeps the original).
    check.store(false, Ordering::SeqCst);
    cluster.restart(altered_member).await;
    let revision = current_revision(&mut cluster.client(0).await).await;
    let hash = |i: usize| {
        let cluster = &cluster;
        async move {
            let response = cluster
                .client(i)
                .await
                .hash_kv(revision)
                .await
                .expect("hashkv");
            (response.hash(), response.compact_version())
        }
    };
    assert_ne!(hash(altered_member).await, hash(0).await);
    assert_eq!(hash(1).await, hash(0).await);
    if cluster.target() == Target::Etcd {
        assert_eq!(
            serializable_value(&cluster, altered_member, "marker").await,
            altered
        );
    }
}

#[tokio::test]
async fn periodic_check_raises_corrupt_for_a_member_altered_behind_its_back() {
    let mut cluster = Cluster::start_with(
        ClusterOptions::new(3).args([ZAP, "--experimental-corrupt-check-time=1s"]),
    )
    .await;
    let leader = cluster.wait_leader(Duration::from_secs(20)).await;
    let altered_member = (leader + 1) % 3;
    let (value, _) = marker("periodic");
    write_marker(&cluster, altered_member, &value).await;
    cluster.kill9(altered_member);
    alter_marker(cluster.target(), &cluster.data_dir(altered_member), &value);
    cluster.restart(altered_member).await;

    let id = cluster.member_id(altered_member);
    let expected = match cluster.target() {
        // etcd 3.4's peer HashKV answer has no member id in its header, so its alarm
        // names member 0 (etcd 3.5 fixed that; QuantyKube names the member, as 3.5).
        Target::Etcd => "alarm:CORRUPT".to_owned(),
        Target::Quantykube => format!("memberID:{id} alarm:CORRUPT"),
    };
    let started = tokio::time::Instant::now();
    loop {
        let listed = cluster.etcdctl(&["alarm", "list"]).await;
        if listed.stdout.lines().any(|l| l.trim() == expected) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no {expected:?} in `etcdctl alarm list`: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let tails = all_logs(&cluster);
    assert!(
        tails.contains("same compact revision then hashes must match"),
        "the leader logs etcd's warning"
    );
    let mut client = cluster.client(altered_member).await;
    assert_grpc_error(
        client.put("after", "x", None).await,
        Code::DataLoss,
        CORRUPT,
    );
}

#[tokio::test]
async fn checks_never_fire_on_a_healthy_cluster_under_load() {
    let mut options = ClusterOptions::new(3).args([
        ZAP,
        "--experimental-corrupt-check-time=1s",
        "--experimental-initial-corrupt-check=true",
        "--snapshot-count=200",
    ]);
    if Target::from_env() == Target::Quantykube {
        // etcd 3.4 has no compaction-hash check (etcd 3.5.5 added it).
        options = options.args([
            "--feature-gates=CompactHashCheck=true",
            "--compact-hash-check-time=1s",
        ]);
    }
    let mut cluster = Cluster::start_with(options).await;
    let endpoints = cluster.endpoints();
    let load_for = Duration::from_secs(12);
    let started = tokio::time::Instant::now();
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..4 {
        let endpoint = endpoints[w % endpoints.len()].clone();
        writers.spawn(async move {
            let mut client = crate::harness::connect(&[endpoint]).await;
            let mut n = 0u64;
            while started.elapsed() < load_for {
                let key = format!("load/{w}/{}", n % 50);
                // Bounded by the loop's time; a failed write is retried by the next.
                let _ = client.put(key, format!("{w}-{n}"), None).await;
                if n % 7 == 0 {
                    let _ = client
                        .delete(format!("load/{w}/{}", (n + 3) % 50), None)
                        .await;
                }
                n += 1;
            }
            n
        });
    }
    let compactor = {
        // Every member's endpoint: the follower restarted below may be any of them.
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let mut client = crate::harness::connect(&endpoints).await;
            while started.elapsed() < load_for {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                // A round that meets the restarted member is skipped.
                let Ok(answer) = client.get("compactor", None).await else {
                    continue;
                };
                let revision = answer.header().map_or(0, |h| h.revision());
                let options = CompactionOptions::new().with_physical();
                let _ = client.compact(revision - 20, Some(options)).await;
            }
        })
    };
    // A Snapshot streamed in the middle of it all.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut client = cluster.client(1).await;
    let mut stream = client.snapshot().await.expect("snapshot");
    let mut bytes = 0;
    while let Some(chunk) = stream.message().await.expect("snapshot chunk") {
        bytes += chunk.blob().len();
    }
    assert!(bytes > 0);
    // A follower restarts under load: its initial check must pass.
    let leader = cluster.wait_leader(Duration::from_secs(20)).await;
    let follower = (leader + 1) % 3;
    let before = cluster.log_len(follower);
    cluster.restart(follower).await;
    while let Some(written) = writers.join_next().await {
        assert!(written.expect("writer") > 0);
    }
    compactor.await.expect("compactor");
    // Give the periodic check a few more rounds on the settled cluster.
    tokio::time::sleep(Duration::from_secs(4)).await;

    let log = log_since(&cluster.log_path(follower), before);
    assert!(
        log.contains("initial corruption checking passed; no corruption"),
        "{log}"
    );
    let listed = cluster.etcdctl(&["alarm", "list"]).await;
    assert_eq!(listed.stdout.trim(), "", "no alarm on a healthy cluster");
    let tails = all_logs(&cluster);
    // It compared both followers (not only skipped them), at least once settled. Both
    // log zap's JSON, with etcd's field names.
    let compared_both = "\"number-of-peers-checked\":2";
    assert!(
        tails
            .lines()
            .any(|l| l.contains("finished peer corruption check") && l.contains(compared_both)),
        "the periodic check compared both followers"
    );
    if cluster.target() == Target::Quantykube {
        assert!(
            tails.contains("successfully checked hash on whole cluster"),
            "the compaction-hash check compared every member at least once"
        );
    }
    for warning in [
        "Detected compaction hash mismatch",
        "same compact revision then hashes must match",
        "found hash mismatch",
        "must be less than or equal to leader's",
    ] {
        assert!(!tails.contains(warning), "{warning}");
    }
    let mut client = cluster.client(0).await;
    client.put("still", "writable", None).await.expect("put");
}

/// The compaction-hash check (`--feature-gates=CompactHashCheck=true`): a member whose
/// copy of a version that a compaction keeps was altered records a different hash at
/// the next compaction, and the leader raises CORRUPT for it. QuantyKube only: etcd 3.4
/// has no such check (etcd 3.5.5 added it; 3.6 takes the gate).
#[tokio::test]
async fn compaction_hash_check_raises_corrupt_for_a_member_altered_behind_its_back() {
    compaction_hash_check_finds_the_altered_member(AlteredMember::RestartedBeforeCompaction).await;
}

/// The same check when the altered member is down through the compaction and the
/// leader's first rounds: the rounds that only the healthy follower answers leave the
/// record unchecked (etcd's "skipped revision in compaction hash check"), so the member
/// is compared, and blamed, once it is back and has applied the compaction.
#[tokio::test]
async fn compaction_hash_check_compares_a_member_that_was_down_at_the_compaction() {
    compaction_hash_check_finds_the_altered_member(AlteredMember::DownThroughCompaction).await;
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum AlteredMember {
    RestartedBeforeCompaction,
    DownThroughCompaction,
}

async fn compaction_hash_check_finds_the_altered_member(when: AlteredMember) {
    if Target::from_env() == Target::Etcd {
        eprintln!("skipped on etcd: etcd 3.4 has no compaction-hash check");
        return;
    }
    let mut cluster = Cluster::start_with(ClusterOptions::new(3).args([
        ZAP,
        "--feature-gates=CompactHashCheck=true",
        "--compact-hash-check-time=1s",
    ]))
    .await;
    let leader = cluster.wait_leader(Duration::from_secs(20)).await;
    let altered_member = (leader + 1) % 3;
    let (value, _) = marker("compaction-hash");
    write_marker(&cluster, altered_member, &value).await;
    cluster.kill9(altered_member);
    alter_marker(cluster.target(), &cluster.data_dir(altered_member), &value);
    if when == AlteredMember::RestartedBeforeCompaction {
        cluster.restart(altered_member).await;
    }
    // The marker is the newest version of its key: every compaction keeps it.
    let mut client = cluster.client(leader).await;
    client
        .put("after/alteration", "x", None)
        .await
        .expect("put");
    let revision = current_revision(&mut client).await;
    client
        .compact(revision, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");
    if when == AlteredMember::DownThroughCompaction {
        let skipped = "skipped revision in compaction hash check";
        let deadline = Deadline::after(
            Duration::from_secs(30),
            "the leader's check of the compaction without the stopped member",
        );
        while !log_since(&cluster.log_path(leader), 0).contains(skipped) {
            deadline.tick().await;
        }
        let listed = cluster.etcdctl(&["alarm", "list"]).await;
        assert_eq!(listed.stdout.trim(), "", "no alarm while it is down");
        cluster.restart(altered_member).await;
    }

    let id = cluster.member_id(altered_member);
    let expected = format!("memberID:{id} alarm:CORRUPT");
    let started = tokio::time::Instant::now();
    loop {
        let listed = cluster.etcdctl(&["alarm", "list"]).await;
        if listed.stdout.lines().any(|l| l.trim() == expected) {
            assert_eq!(
                listed.stdout.lines().count(),
                1,
                "only that member: {listed:?}"
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no {expected:?} in `etcdctl alarm list`: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(all_logs(&cluster).contains("Detected compaction hash mismatch"));
    // The recorded hash answers HashKV at the compacted revision (etcd 3.6).
    let answer = cluster
        .client(leader)
        .await
        .hash_kv(revision)
        .await
        .expect("hashkv at the compaction");
    assert_eq!(answer.compact_version(), revision);
}
