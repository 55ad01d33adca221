//! `--auto-compaction-mode` and `--auto-compaction-retention`: the leader compacts as
//! etcd's v3compactor does, every member ends up compacted alike, and bad values are
//! refused with etcd's message and exit code.
//!
//! Revision mode checks every 5 minutes in etcd, a constant of its code: against etcd
//! that test takes over 5 minutes; QuantyKube is given
//! `--auto-compaction-revision-interval=1s` instead.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::process::Stdio;
use std::time::{Duration, Instant};

use etcd_client::GetOptions;

use crate::harness::*;

const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";

/// Member `i`'s HashKV at the current revision: (hash, compact revision, revision).
async fn hash_kv(cluster: &Cluster, i: usize) -> (u32, i64, i64) {
    let response = cluster
        .client(i)
        .await
        .hash_kv(0)
        .await
        .unwrap_or_else(|e| panic!("hashkv on member {i}: {e}"));
    let revision = response.header().map_or(0, |h| h.revision());
    (response.hash(), response.compact_version(), revision)
}

/// Waits until every member reports revision `current` compacted at `compacted`, with
/// one hash: they compacted identically.
async fn wait_all_compacted(cluster: &Cluster, current: i64, compacted: i64, timeout: Duration) {
    let deadline = Deadline::after(
        timeout,
        format!("every member at revision {current}, compacted at {compacted}"),
    );
    loop {
        let mut answers = Vec::new();
        for i in 0..cluster.size() {
            answers.push(hash_kv(cluster, i).await);
        }
        if answers.iter().all(|a| a.1 == compacted && a.2 == current) {
            let hash = answers[0].0;
            assert!(
                answers.iter().all(|a| a.0 == hash),
                "members disagree: {answers:?}"
            );
            return;
        }
        deadline.tick().await;
    }
}

/// `etcdctl get k --rev=<revision>` is refused as compacted.
async fn assert_compacted_for_etcdctl(cluster: &Cluster, revision: i64) {
    let rev = format!("--rev={revision}");
    let out = cluster.etcdctl(&["get", "k", &rev]).await;
    assert!(!out.success(), "get {rev} answered: {}", out.stdout);
    assert!(out.stderr.contains(COMPACTED), "get {rev}: {}", out.stderr);
}

#[tokio::test]
async fn periodic_mode_keeps_the_last_retention_of_history() {
    let cluster = ClusterOptions::new(3)
        .args([
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=2s",
        ])
        .start()
        .await;
    let mut client = cluster.client_all().await;
    let mut leader = cluster.client(cluster.leader_index().await).await;
    // (sent at, revision) of every write, and the compactions seen.
    let mut writes: Vec<(Instant, i64)> = Vec::new();
    let mut seen: Vec<i64> = Vec::new();
    let first = current_revision(&mut client).await + 1;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(9) {
        let sent = Instant::now();
        let put = client.put("k", format!("v{}", writes.len()), None).await;
        writes.push((sent, header_rev(put.expect("put").header())));
        let compacted = leader.hash_kv(0).await.expect("hashkv").compact_version();
        let observed = Instant::now();
        if seen.last() != Some(&compacted) {
            seen.push(compacted);
        }
        if compacted > 0 {
            // Everything written within the retention before now is still there.
            let window_start = observed - Duration::from_secs(2);
            if let Some((_, young)) = writes.iter().find(|(sent, _)| *sent > window_start) {
                assert!(
                    *young > compacted,
                    "compacted at {compacted}, but revision {young} is younger than 2s"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reached: Vec<i64> = seen.iter().copied().filter(|c| *c >= first).collect();
    assert!(
        reached.len() >= 2,
        "the compacted revision moves on every 2 s: {seen:?} (writes from {first})"
    );
    // With no more writes, everything becomes older than the retention: the newest
    // revision is compacted, on every member alike.
    let current = current_revision(&mut client).await;
    wait_all_compacted(&cluster, current, current, Duration::from_secs(15)).await;
    assert_compacted_for_etcdctl(&cluster, current - 1).await;
    let at = client
        .get("k", Some(GetOptions::new().with_revision(current)))
        .await
        .expect("the compacted revision itself is readable");
    assert_eq!(at.kvs().len(), 1);
    assert_eq!(
        at.kvs()[0].mod_revision(),
        current,
        "the newest write stays"
    );
}

#[tokio::test]
async fn revision_mode_keeps_the_newest_revisions() {
    let target = Target::from_env();
    let mut options = ClusterOptions::new(3).args([
        "--auto-compaction-mode=revision",
        "--auto-compaction-retention=5",
    ]);
    // etcd's interval is 5 minutes, fixed; the first check comes 5 minutes after start.
    let timeout = match target {
        Target::Quantykube => {
            options = options.arg("--auto-compaction-revision-interval=1s");
            Duration::from_secs(15)
        }
        Target::Etcd => Duration::from_secs(6 * 60),
    };
    let cluster = options.start().await;
    let mut client = cluster.client_all().await;
    for i in 0..20 {
        client.put("k", format!("v{i}"), None).await.expect("put");
    }
    let current = current_revision(&mut client).await;
    wait_all_compacted(&cluster, current, current - 5, timeout).await;
    assert_compacted_for_etcdctl(&cluster, current - 6).await;
    let out = cluster
        .etcdctl(&[
            "get",
            "k",
            &format!("--rev={}", current - 5),
            "--print-value-only",
        ])
        .await;
    out.assert_success();
    assert_eq!(out.stdout.trim(), "v14");
    // etcdctl shows it too.
    let out = cluster.etcdctl(&["endpoint", "hashkv", "-w", "json"]).await;
    out.assert_success();
    assert!(
        out.stdout
            .contains(&format!("\"compact_revision\":{}", current - 5)),
        "{}",
        out.stdout
    );
    if target == Target::Quantykube {
        // The next interval keeps the newest 5 again (etcd's comes 5 minutes later).
        for i in 20..23 {
            client.put("k", format!("v{i}"), None).await.expect("put");
        }
        wait_all_compacted(&cluster, current + 3, current - 2, timeout).await;
    }
}

#[tokio::test]
async fn zero_empty_and_long_retentions_start_without_compacting() {
    let cases: &[&[&str]] = &[
        &["--auto-compaction-retention="],
        &["--auto-compaction-retention=0"],
        &["--auto-compaction-retention=1"],
        &["--auto-compaction-retention=+1"],
        &["--auto-compaction-retention=5m"],
        &[
            "--auto-compaction-mode=revision",
            "--auto-compaction-retention=1000",
        ],
    ];
    for args in cases {
        let cluster = ClusterOptions::new(1)
            .args(args.iter().copied())
            .start()
            .await;
        let mut client = cluster.client(0).await;
        for i in 0..3 {
            client.put("k", format!("v{i}"), None).await.expect("put");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, compacted, _) = hash_kv(&cluster, 0).await;
        assert_eq!(compacted, -1, "{args:?}: never compacted");
    }
}

/// Runs the target with `args` on free loopback ports, expecting it to exit by itself;
/// returns its exit code and everything it printed.
async fn run_to_exit(args: &[&str]) -> (i32, String) {
    let target = Target::from_env();
    let binary = target.binary().expect("the target's binary");
    let ip = loopback_ip();
    let port = |ip: Ipv4Addr| {
        TcpListener::bind(SocketAddrV4::new(ip, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port")
    };
    let client = format!("http://{ip}:{}", port(ip));
    let peer = format!("http://{ip}:{}", port(ip));
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let mut cmd = tokio::process::Command::new(binary);
    cmd.arg("--data-dir")
        .arg(&data_dir)
        .args([
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .arg(format!("--initial-cluster=default={peer}"))
        .args(args)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ETCD_") {
            cmd.env_remove(key);
        }
    }
    let out = tokio::time::timeout(Duration::from_secs(20), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{target} with {args:?} did not exit"))
        .expect("run the target");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test]
async fn bad_values_are_refused_with_etcds_message_and_exit_code() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--auto-compaction-retention=garbage"],
            r#"error parsing CompactionRetention: time: invalid duration "garbage""#,
        ),
        (
            &["--auto-compaction-retention=-1"],
            r#"error parsing CompactionRetention: time: missing unit in duration "-1""#,
        ),
        (
            &["--auto-compaction-retention=1.5"],
            r#"error parsing CompactionRetention: time: missing unit in duration "1.5""#,
        ),
        (
            &["--auto-compaction-retention=1x"],
            r#"error parsing CompactionRetention: time: unknown unit "x" in duration "1x""#,
        ),
        (
            &["--auto-compaction-retention=1_0"],
            r#"error parsing CompactionRetention: time: unknown unit "_" in duration "1_0""#,
        ),
        (
            &[
                "--auto-compaction-mode=revision",
                "--auto-compaction-retention=-5",
            ],
            r#"error parsing CompactionRetention: time: missing unit in duration "-5""#,
        ),
        (
            &["--auto-compaction-mode=bogus"],
            r#"unknown auto-compaction-mode "bogus""#,
        ),
        (
            &[
                "--auto-compaction-mode=Revision",
                "--auto-compaction-retention=5",
            ],
            r#"unknown auto-compaction-mode "Revision""#,
        ),
    ];
    for (args, message) in cases {
        let (code, output) = run_to_exit(args).await;
        assert_eq!(code, 1, "{args:?}: {output}");
        assert!(output.contains(message), "{args:?}: {output}");
    }
}
