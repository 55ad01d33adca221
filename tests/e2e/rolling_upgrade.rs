//! A rolling upgrade and downgrade under load (issue 54, item 4): three members of the
//! previous release (the last line of `releases.tsv`, built from its commit by
//! `deploy/local/build-previous-release.sh`, which `make test` runs) are upgraded to
//! this build one at a time while a writer, a watcher and a lease's keepalives run,
//! then downgraded back the same way (each data dir first taken back to the previous
//! release's format with this build's `quantykube migrate`). No acknowledged write may
//! be lost, no watch event missed or seen twice, and the lease must live throughout.
//!
//! QuantyKube's releases only: against etcd (`QK_TEST_TARGET=etcd`) there is no
//! previous etcd release installed here to roll from, and the test says so.
//!
//! The note of issue 54 quotes what it prints: how long each roll took, the writes'
//! throughput and p99 latency during it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions, PutOptions, WatchOptions};

use crate::harness::{current_revision, http_get, run, Cluster, ClusterOptions, Target};

/// The previous release's tag and binary, as `build-previous-release.sh` leaves it.
fn previous_release() -> (String, PathBuf) {
    let releases = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/releases.tsv"))
        .expect("releases.tsv");
    let tag = releases
        .lines()
        .rfind(|l| !l.starts_with('#') && !l.trim().is_empty())
        .and_then(|l| l.split('\t').next())
        .expect("a release in releases.tsv")
        .to_owned();
    let binary = std::env::var_os("QK_PREVIOUS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // <target>/debug/quantykube -> <target>/previous/<tag>/quantykube
            let current = Target::Quantykube.require_binary();
            let target = current
                .parent()
                .and_then(|debug| debug.parent())
                .expect("the target dir");
            target.join("previous").join(&tag).join("quantykube")
        });
    assert!(
        binary.is_file(),
        "{} is missing: deploy/local/build-previous-release.sh builds {tag} (make test runs it)",
        binary.display()
    );
    (tag, binary)
}

/// How long to keep trying one request against a cluster whose members restart: far
/// above an election and a member's start on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// A client to one of `endpoints`, trying each in turn.
async fn connect_any(endpoints: &[String], start: usize) -> (usize, Client) {
    let deadline = Instant::now() + PATIENCE;
    let mut next = start;
    loop {
        let endpoint = &endpoints[next % endpoints.len()];
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        if let Ok(client) = Client::connect([endpoint.as_str()], Some(options)).await {
            return (next % endpoints.len(), client);
        }
        assert!(
            Instant::now() < deadline,
            "no member answered for {PATIENCE:?}"
        );
        next += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One acknowledged put: its key, value and revision, and how long it took.
struct Acked {
    key: String,
    value: String,
    revision: i64,
    latency: Duration,
    at: Instant,
}

/// Puts `load/<n>` = `v<n>` one after another through any member until told to stop.
async fn writer(
    endpoints: Vec<String>,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<Acked>>>,
    failed: Arc<AtomicU64>,
) {
    let (mut at, mut client) = connect_any(&endpoints, 0).await;
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        let key = format!("load/{n:06}");
        let value = format!("v{n}");
        let started = Instant::now();
        match client.put(key.clone(), value.clone(), None).await {
            Ok(answer) => {
                let revision = answer.header().expect("header").revision();
                if let Ok(mut acked) = acked.lock() {
                    acked.push(Acked {
                        key,
                        value,
                        revision,
                        latency: started.elapsed(),
                        at: Instant::now(),
                    });
                }
                n += 1;
            }
            // Not acknowledged: the same key is put again (a second revision if the
            // first was applied after all, which the checks allow).
            Err(_) => {
                failed.fetch_add(1, Ordering::AcqRel);
                (at, client) = connect_any(&endpoints, at + 1).await;
            }
        }
    }
}

/// Watches `load/` from revision 1 through any member, resuming after the last
/// revision seen whenever a member goes away, until it has seen `until` (once set).
async fn watcher(endpoints: Vec<String>, until: Arc<AtomicI64>) -> Vec<(i64, Vec<u8>)> {
    let mut seen: Vec<(i64, Vec<u8>)> = Vec::new();
    let mut at = 0;
    let mut next_revision = 1;
    loop {
        let goal = until.load(Ordering::Acquire);
        if goal > 0 && next_revision > goal {
            return seen;
        }
        let (picked, mut client) = connect_any(&endpoints, at).await;
        at = picked;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(next_revision);
        let Ok(mut stream) = client.watch("load/", Some(options)).await else {
            at += 1;
            continue;
        };
        loop {
            let goal = until.load(Ordering::Acquire);
            if goal > 0 && next_revision > goal {
                return seen;
            }
            match tokio::time::timeout(Duration::from_secs(1), stream.message()).await {
                Ok(Ok(Some(response))) => {
                    assert!(!response.canceled(), "watch canceled: {response:?}");
                    for event in response.events() {
                        let kv = event.kv().expect("event kv");
                        seen.push((kv.mod_revision(), kv.key().to_vec()));
                        next_revision = kv.mod_revision() + 1;
                    }
                }
                // Nothing new this second: look at the goal again.
                Err(_) => {}
                // The member went away: resume through another.
                Ok(Ok(None)) | Ok(Err(_)) => {
                    at += 1;
                    break;
                }
            }
        }
    }
}

/// Keeps `lease` alive through any member every second until told to stop; how many
/// keepalives were answered, and panics if one says the lease is gone.
async fn keeper(endpoints: Vec<String>, lease: i64, stop: Arc<AtomicBool>, kept: Arc<AtomicU64>) {
    let mut at = 0;
    while !stop.load(Ordering::Acquire) {
        let (picked, mut client) = connect_any(&endpoints, at).await;
        at = picked;
        let answered = async {
            let (mut keeper, mut answers) = client.lease_keep_alive(lease).await.ok()?;
            keeper.keep_alive().await.ok()?;
            answers.message().await.ok()?
        };
        match tokio::time::timeout(Duration::from_secs(5), answered).await {
            Ok(Some(answer)) => {
                assert!(answer.ttl() > 0, "the lease expired during the roll");
                kept.fetch_add(1, Ordering::AcqRel);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            _ => at += 1,
        }
    }
}

/// Waits until the writer has `more` acknowledgements beyond now.
async fn progress(acked: &Arc<Mutex<Vec<Acked>>>, more: usize) {
    let target = acked.lock().map(|a| a.len()).unwrap_or(0) + more;
    let deadline = Instant::now() + PATIENCE;
    while acked.lock().map(|a| a.len()).unwrap_or(0) < target {
        assert!(
            Instant::now() < deadline,
            "writes made no progress for {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The writes acknowledged in `[from, to)`: how many per second and their p99.
fn describe(acked: &[Acked], from: Instant, to: Instant) -> String {
    let mut latencies: Vec<Duration> = acked
        .iter()
        .filter(|a| a.at >= from && a.at < to)
        .map(|a| a.latency)
        .collect();
    latencies.sort();
    let p99 = latencies
        .get(latencies.len().saturating_mul(99) / 100)
        .copied()
        .unwrap_or_default();
    let seconds = to.duration_since(from).as_secs_f64();
    format!(
        "{:.1}s, {} writes, {:.0} writes/s, p99 {:?}",
        seconds,
        latencies.len(),
        latencies.len() as f64 / seconds.max(0.001),
        p99
    )
}

/// Restarts each member in turn on `binary`, running `before_start` on its data dir
/// while it is stopped, and waits for writes to go on with it back.
async fn roll(
    cluster: &mut Cluster,
    binary: &std::path::Path,
    acked: &Arc<Mutex<Vec<Acked>>>,
    before_start: impl Fn(&std::path::Path),
) {
    cluster.set_binary(binary);
    for i in 0..cluster.size() {
        let status = cluster.stop(i).await.expect("the member stops");
        assert!(status.success(), "member {i} stopped with {status}");
        before_start(&cluster.data_dir(i));
        cluster.restart(i).await;
        progress(acked, 100).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_roll_up_to_this_build_and_back_under_load() {
    if Target::from_env() == Target::Etcd {
        eprintln!("a rolling upgrade between QuantyKube releases: no previous etcd release is installed here");
        return;
    }
    let (tag, previous) = previous_release();
    let current = Target::Quantykube.require_binary();
    let mut cluster = ClusterOptions::new(3).binary(&previous).start().await;
    let endpoints: Vec<String> = (0..3).map(|i| cluster.endpoint(i)).collect();

    let mut client = cluster.client(0).await;
    // A TTL well above a member's restart and an election on a loaded machine: the
    // lease must live because it is kept alive, not because the roll was quick.
    let lease = client.lease_grant(30, None).await.expect("grant").id();
    client
        .put("lease/held", "x", Some(PutOptions::new().with_lease(lease)))
        .await
        .expect("put");
    let stop = Arc::new(AtomicBool::new(false));
    let until = Arc::new(AtomicI64::new(0));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let writing = tokio::spawn(writer(
        endpoints.clone(),
        stop.clone(),
        acked.clone(),
        failed.clone(),
    ));
    let watching = tokio::spawn(watcher(endpoints.clone(), until.clone()));
    let keeping = tokio::spawn(keeper(endpoints.clone(), lease, stop.clone(), kept.clone()));
    progress(&acked, 50).await;
    assert_releases(&cluster, None).await;

    let up_started = Instant::now();
    roll(&mut cluster, &current, &acked, |_| {}).await;
    let up_done = Instant::now();
    assert_releases(&cluster, Some(env!("CARGO_PKG_VERSION"))).await;

    let down_started = Instant::now();
    roll(&mut cluster, &previous, &acked, |data_dir| {
        let mut migrate = std::process::Command::new(&current);
        migrate
            .arg("migrate")
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!(
                "--target-version={}",
                tag.trim_start_matches('v')
                    .rsplit_once('.')
                    .map_or("", |(mm, _)| mm)
            ));
        run(migrate);
    })
    .await;
    let down_done = Instant::now();
    assert_releases(&cluster, None).await;

    stop.store(true, Ordering::Release);
    writing.await.expect("writer");
    keeping.await.expect("keeper");
    let mut client = cluster.client(1).await;
    until.store(current_revision(&mut client).await, Ordering::Release);
    let watched = watching.await.expect("watcher");

    let acked = std::mem::take(&mut *acked.lock().expect("acked"));
    eprintln!(
        "rolling upgrade {tag} -> this build: {}",
        describe(&acked, up_started, up_done)
    );
    eprintln!(
        "rolling downgrade -> {tag}: {}",
        describe(&acked, down_started, down_done)
    );
    eprintln!(
        "keepalives answered: {}; put attempts that failed and were retried elsewhere: {}",
        kept.load(Ordering::Acquire),
        failed.load(Ordering::Acquire)
    );

    // Every acknowledged write is there (at its revision, or a later one if an attempt
    // that timed out was applied after the retry that was acknowledged).
    let stored = client
        .get("load/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("range");
    let by_key: std::collections::HashMap<&[u8], (&[u8], i64)> = stored
        .kvs()
        .iter()
        .map(|kv| (kv.key(), (kv.value(), kv.mod_revision())))
        .collect();
    for write in &acked {
        let found = by_key.get(write.key.as_bytes());
        assert!(
            found
                .is_some_and(|(value, revision)| *value == write.value.as_bytes()
                    && *revision >= write.revision),
            "acknowledged {} at revision {} is lost: {found:?}",
            write.key,
            write.revision
        );
    }
    // The watch saw each revision once, in order, and every acknowledged one.
    assert!(
        watched.windows(2).all(|w| w[0].0 < w[1].0),
        "watch events out of order or repeated"
    );
    let revisions: std::collections::HashSet<i64> = watched.iter().map(|(r, _)| *r).collect();
    for write in &acked {
        assert!(
            revisions.contains(&write.revision),
            "the watch missed {} at revision {}",
            write.key,
            write.revision
        );
    }
    // The lease lived through both rolls.
    let ttl = client
        .lease_time_to_live(
            lease,
            Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys()),
        )
        .await
        .expect("ttl");
    assert!(ttl.ttl() > 0, "the lease is gone");
    assert_eq!(ttl.keys(), [b"lease/held".to_vec()]);
}

/// Asserts which release every member runs, from `/version`: `release`, or (`None`)
/// v0.1.0, which answered no `quantykube` key.
async fn assert_releases(cluster: &Cluster, release: Option<&str>) {
    for i in 0..cluster.size() {
        let answer = http_get(&format!("{}/version", cluster.endpoint(i)), None).await;
        let version: serde_json::Value = serde_json::from_str(&answer.body).expect("/version");
        match release {
            Some(release) => assert_eq!(version["quantykube"], release, "member {i}: {version}"),
            None => assert!(version.get("quantykube").is_none(), "member {i}: {version}"),
        }
    }
}
