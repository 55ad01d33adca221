//! Lease: grants with server- and client-chosen ids and etcd's TTL bounds, revokes that
//! delete every attached key in one revision, keepalives and TTL questions through
//! followers (relayed to the leader), expiry by the leader through the log, failover,
//! and etcdctl's lease commands and lock. Three-member clusters; each test also runs
//! against etcd with `QK_TEST_TARGET=etcd`.

use std::time::{Duration, Instant};

use etcd_client::{EventType, LeaseGrantOptions, LeaseTimeToLiveOptions, PutOptions, WatchOptions};
use tonic::Code;

use crate::harness::*;

/// A three-member cluster with the leader's index and the two followers'.
async fn three(options: ClusterOptions) -> (Cluster, usize, [usize; 2]) {
    let cluster = options.start().await;
    let leader = cluster.leader_index().await;
    let followers = [(leader + 1) % 3, (leader + 2) % 3];
    (cluster, leader, followers)
}

#[tokio::test]
async fn grants_revokes_and_questions_are_answered_on_every_member() {
    let (cluster, _, [f1, f2]) = three(ClusterOptions::new(3)).await;
    let mut on_f1 = cluster.client(f1).await;
    let mut on_f2 = cluster.client(f2).await;

    // A server-chosen id; a TTL below etcd's minimum (1.5 election timeouts) is raised.
    let short = on_f1.lease_grant(1, None).await.unwrap();
    assert!(short.id() > 0);
    assert_eq!(short.ttl(), 2);
    // A client-chosen id, once.
    let chosen = on_f1
        .lease_grant(60, Some(LeaseGrantOptions::new().with_id(1234)))
        .await
        .unwrap();
    assert_eq!((chosen.id(), chosen.ttl()), (1234, 60));
    assert_grpc_error(
        on_f2
            .lease_grant(60, Some(LeaseGrantOptions::new().with_id(1234)))
            .await,
        Code::FailedPrecondition,
        "etcdserver: lease already exists",
    );
    assert_grpc_error(
        on_f2.lease_grant(9_000_000_001, None).await,
        Code::OutOfRange,
        "etcdserver: too large lease TTL",
    );

    // Keys attach to the lease; TTL questions on a follower are answered by the leader.
    for key in ["l1", "l2"] {
        on_f2
            .put(key, "v", Some(PutOptions::new().with_lease(1234)))
            .await
            .unwrap();
    }
    let ttl = on_f1
        .lease_time_to_live(1234, Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .unwrap();
    assert_eq!(ttl.granted_ttl(), 60);
    assert!((55..=60).contains(&ttl.ttl()), "{ttl:?}");
    let keys: Vec<String> = ttl.keys().iter().map(|k| lossy(k)).collect();
    assert_eq!(keys, ["l1", "l2"]);
    let mut leases: Vec<i64> = on_f2
        .leases()
        .await
        .unwrap()
        .leases()
        .iter()
        .map(|l| l.id())
        .collect();
    leases.sort();
    let mut expected = vec![1234, short.id()];
    expected.sort();
    assert_eq!(leases, expected);

    // A revoke deletes every attached key in one revision, which watchers see. The
    // watch starts after the puts: f1 may not have applied them yet when it is created.
    let after_puts = header_rev(on_f2.get("l", None).await.unwrap().header()) + 1;
    let mut watch = on_f1
        .watch(
            "l",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(after_puts),
            ),
        )
        .await
        .unwrap();
    assert!(watch.message().await.unwrap().unwrap().created());
    let revoked = on_f2.lease_revoke(1234).await.unwrap();
    let revision = header_rev(revoked.header());
    let deletes = watch.message().await.unwrap().unwrap();
    let seen: Vec<(EventType, String, i64)> = deletes
        .events()
        .iter()
        .map(|e| {
            let kv = e.kv().unwrap();
            (e.event_type(), lossy(kv.key()), kv.mod_revision())
        })
        .collect();
    assert_eq!(
        seen,
        [
            (EventType::Delete, "l1".to_owned(), revision),
            (EventType::Delete, "l2".to_owned(), revision)
        ]
    );
    assert!(on_f2.get("l1", None).await.unwrap().kvs().is_empty());

    // An unknown lease: TTL -1, keepalive TTL 0, revoke NotFound.
    let gone = on_f2.lease_time_to_live(1234, None).await.unwrap();
    assert_eq!(gone.ttl(), -1);
    // etcd-client sends the first keepalive itself and reports TTL 0 as not found.
    match on_f1.lease_keep_alive(1234).await {
        Err(etcd_client::Error::LeaseKeepAliveError(message)) => {
            assert_eq!(message, "lease not found")
        }
        other => panic!("expected lease not found, got {other:?}"),
    }
    assert_grpc_error(
        on_f1.lease_revoke(1234).await,
        Code::NotFound,
        "etcdserver: requested lease not found",
    );
}

#[tokio::test]
async fn an_unkept_lease_expires_with_its_keys_while_a_kept_one_lives() {
    let (cluster, _, [f1, f2]) = three(ClusterOptions::new(3)).await;
    let mut client = cluster.client(f1).await;
    let granted = Instant::now();
    let unkept = client.lease_grant(2, None).await.unwrap().id();
    let kept = client.lease_grant(2, None).await.unwrap().id();
    for (key, lease) in [("e1", unkept), ("e2", unkept), ("k1", kept)] {
        client
            .put(key, "v", Some(PutOptions::new().with_lease(lease)))
            .await
            .unwrap();
    }
    let mut watch = client
        .watch("e", Some(WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    assert!(watch.message().await.unwrap().unwrap().created());

    // Keep one alive through the other follower, every half second.
    let mut keeper_client = cluster.client(f2).await;
    let (mut keeper, mut answers) = keeper_client.lease_keep_alive(kept).await.unwrap();
    let keeping = tokio::spawn(async move {
        for _ in 0..12 {
            keeper.keep_alive().await.unwrap();
            let answer = answers.message().await.unwrap().unwrap();
            assert_eq!(answer.ttl(), 2);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });

    let deletes = tokio::time::timeout(Duration::from_secs(10), watch.message())
        .await
        .expect("the lease expires")
        .unwrap()
        .unwrap();
    let expired_after = granted.elapsed();
    let revisions: Vec<i64> = deletes
        .events()
        .iter()
        .map(|e| {
            assert_eq!(e.event_type(), EventType::Delete);
            e.kv().unwrap().mod_revision()
        })
        .collect();
    assert_eq!(
        revisions.len(),
        2,
        "both keys in one response: {revisions:?}"
    );
    assert_eq!(revisions[0], revisions[1], "both keys in one revision");
    assert!(
        expired_after >= Duration::from_secs(2) && expired_after < Duration::from_secs(4),
        "expired after {expired_after:?}"
    );
    keeping.await.unwrap();
    // 6 s later (three TTLs) the kept lease and its key are still there.
    assert!(!client.get("k1", None).await.unwrap().kvs().is_empty());
    let ttl = client.lease_time_to_live(kept, None).await.unwrap();
    assert!(ttl.ttl() > 0, "{ttl:?}");
}

#[tokio::test]
async fn etcdctl_lease_commands_and_lock_work() {
    let cluster = Cluster::start(3).await;
    let granted = cluster.etcdctl(&["lease", "grant", "60"]).await;
    granted.assert_success();
    // "lease 694d7a3e1c5b4a2b granted with TTL(60s)"
    let id = granted
        .stdout
        .split_whitespace()
        .nth(1)
        .expect("a lease id")
        .to_owned();
    cluster
        .etcdctl(&["put", "--lease", &id, "leased", "v"])
        .await
        .assert_success();
    let ttl = cluster
        .etcdctl(&["lease", "timetolive", "--keys", &id])
        .await;
    ttl.assert_success();
    assert!(
        ttl.stdout.contains("granted with TTL(60s)"),
        "{}",
        ttl.stdout
    );
    assert!(
        ttl.stdout.contains("attached keys([leased])"),
        "{}",
        ttl.stdout
    );
    let list = cluster.etcdctl(&["lease", "list"]).await;
    list.assert_success();
    assert!(list.stdout.contains(&id), "{}", list.stdout);
    let once = cluster
        .etcdctl(&["lease", "keep-alive", "--once", &id])
        .await;
    once.assert_success();
    assert!(
        once.stdout.contains("keepalived with TTL(60)"),
        "{}",
        once.stdout
    );
    cluster
        .etcdctl(&["lease", "revoke", &id])
        .await
        .assert_success();
    let get = cluster.etcdctl(&["get", "leased"]).await;
    assert!(get.stdout.trim().is_empty(), "{}", get.stdout);

    // `etcdctl lock` holds a lease-backed lock while its command runs.
    let lock = cluster.etcdctl(&["lock", "the-lock", "echo", "held"]).await;
    lock.assert_success();
    assert!(lock.stdout.contains("held"), "{}", lock.stdout);

    // `etcdctl elect` campaigns with a lease and prints the winning proposal's key and
    // value, then holds leadership until killed.
    let mut elect = tokio::process::Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.endpoints().join(",")))
        .args(["elect", "the-election", "proposal-1"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn etcdctl elect");
    let stdout = elect.stdout.take().expect("etcdctl stdout");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let mut printed = Vec::new();
    while printed.len() < 2 {
        let line = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
            .await
            .expect("etcdctl elect prints in time")
            .expect("read etcdctl output")
            .expect("etcdctl elect still runs");
        printed.push(line);
    }
    assert!(printed[0].starts_with("the-election/"), "{printed:?}");
    assert_eq!(printed[1], "proposal-1");
    // Its lease holds the election key while it lives.
    let key = cluster.etcdctl(&["get", "--prefix", "the-election/"]).await;
    assert!(key.stdout.contains("proposal-1"), "{}", key.stdout);
    elect.kill().await.ok();
}

/// Three members that checkpoint lease TTLs every second; `None` against etcd 3.4,
/// which has no `--experimental-lease-checkpoint-interval` (its checkpoints, off by
/// default, come every 5 minutes, so a new leader gives leases their whole TTL).
fn checkpointing_every_second() -> Option<ClusterOptions> {
    if Target::from_env() == Target::Etcd {
        eprintln!("skipped against etcd 3.4");
        return None;
    }
    Some(ClusterOptions::new(3).arg("--experimental-lease-checkpoint-interval=1s"))
}

/// Keeps lease `id` alive through `endpoint` every `every`, reopening the stream after
/// any error (as etcd's clients do), until `for_how_long` has passed. Returns how many
/// keepalives were answered with a live TTL, and fails if one says the lease is gone.
async fn keep_alive_through(
    endpoint: String,
    id: i64,
    every: Duration,
    for_how_long: Duration,
) -> usize {
    let until = Instant::now() + for_how_long;
    let mut answered = 0;
    while Instant::now() < until {
        let mut client = connect(std::slice::from_ref(&endpoint)).await;
        let Ok((mut keeper, mut answers)) = client.lease_keep_alive(id).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        while Instant::now() < until {
            if keeper.keep_alive().await.is_err() {
                break;
            }
            match tokio::time::timeout(Duration::from_secs(3), answers.message()).await {
                Ok(Ok(Some(answer))) => {
                    assert!(answer.ttl() > 0, "lease {id} gone while kept alive");
                    answered += 1;
                }
                _ => break,
            }
            tokio::time::sleep(every).await;
        }
    }
    answered
}

#[tokio::test]
async fn keepalives_through_a_follower_outlive_a_leader_kill_and_checkpoints_keep_ttls() {
    let Some(options) = checkpointing_every_second() else {
        return;
    };
    let (mut cluster, leader, [f1, f2]) = three(options).await;
    let mut client = cluster.client(f1).await;
    let granted = Instant::now();
    let kept = client.lease_grant(6, None).await.unwrap().id();
    let unkept = client.lease_grant(20, None).await.unwrap().id();
    client
        .put("kept", "v", Some(PutOptions::new().with_lease(kept)))
        .await
        .unwrap();
    let keeping = tokio::spawn(keep_alive_through(
        cluster.endpoint(f1),
        kept,
        Duration::from_millis(500),
        Duration::from_secs(18),
    ));

    // Let checkpoints record the unkept lease's remaining TTL, then kill the leader.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let killed_at = granted.elapsed().as_secs_f64();
    cluster.kill9(leader);
    let new_leader = cluster.wait_leader(Duration::from_secs(15)).await;
    let elected_by = granted.elapsed().as_secs_f64();
    assert_ne!(new_leader, leader);
    let mut survivor = cluster.client(f2).await;
    let ttl = survivor.lease_time_to_live(unkept, None).await.unwrap();
    let elapsed = granted.elapsed().as_secs_f64();
    // A new leader gives the lease what the last checkpoint says it had left, timed
    // from its election: that checkpoint is at most an interval (1 s) and a lessor
    // tick older than the kill, and the election came by `elected_by`; a second for a
    // loaded machine and one for rounding up. The whole TTL again would be about
    // `killed_at` (8 s) more; the failover's own length is measured, not assumed.
    let most = 20.0 - elapsed + (elected_by - killed_at) + 3.5;
    let least = 20.0 - elapsed - 3.0;
    let left = ttl.ttl() as f64;
    assert!(
        left <= most && left >= least,
        "{elapsed:.1} s after the grant (the leader killed at {killed_at:.1} s, a new one \
         by {elected_by:.1} s) the lease has {left} s left, not within {least:.1}..{most:.1}"
    );

    // The kept lease lived through the failover: more than twice its TTL so far.
    let answered = keeping.await.unwrap();
    assert!(answered > 10, "only {answered} keepalives answered");
    assert!(!survivor.get("kept", None).await.unwrap().kvs().is_empty());
    assert!(survivor.lease_time_to_live(kept, None).await.unwrap().ttl() > 0);
}

#[tokio::test]
async fn leases_survive_a_full_restart_with_their_remaining_ttl() {
    let Some(options) = checkpointing_every_second() else {
        return;
    };
    let (mut cluster, _, [f1, _]) = three(options).await;
    let mut client = cluster.client(f1).await;
    let granted = Instant::now();
    let lease = client.lease_grant(40, None).await.unwrap().id();
    client
        .put("survivor", "v", Some(PutOptions::new().with_lease(lease)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.restart_all().await;
    cluster.wait_leader(Duration::from_secs(15)).await;
    let mut client = cluster.client(f1).await;
    let ttl = client
        .lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .unwrap();
    let elapsed = granted.elapsed().as_secs() as i64;
    assert_eq!(ttl.granted_ttl(), 40);
    // At most what the last checkpoint before the restart recorded (taken at most a
    // second, the interval, before it; rounded up to the second), and no time counts
    // while the cluster was down.
    assert!(
        ttl.ttl() <= 40 - 2 && ttl.ttl() >= 40 - elapsed - 3,
        "{elapsed} s after the grant, {} s left",
        ttl.ttl()
    );
    let keys: Vec<String> = ttl.keys().iter().map(|k| lossy(k)).collect();
    assert_eq!(keys, ["survivor"]);
}
