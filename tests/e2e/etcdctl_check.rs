//! etcdctl 3.4's `check perf` and `check datascale` against the target: both run to the
//! end, report every check they make, and clean up after themselves. Whether `check
//! perf` passes its throughput thresholds depends on the machine, so this test reads
//! that it measured, not what (deploy/bench/check-perf.sh compares the figures).

use std::process::Stdio;
use std::time::Duration;

use crate::harness::*;

/// Runs etcdctl with `args` against `endpoint`, allowing `limit` for the whole run.
async fn etcdctl_long(endpoint: &str, args: &[&str], limit: Duration) -> CmdOutput {
    let mut cmd = tokio::process::Command::new(etcdctl_binary());
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(limit, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("etcdctl {args:?} did not finish within {limit:?}"))
        .expect("run etcdctl");
    CmdOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn keys_under(cluster: &Cluster, prefix: &str) -> String {
    let out = cluster
        .etcdctl(&["get", prefix, "--prefix", "--keys-only", "--limit=1"])
        .await;
    out.assert_success();
    out.stdout.trim().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn etcdctl_check_datascale_writes_measures_and_cleans_up() {
    let cluster = Cluster::start(1).await;
    let out = etcdctl_long(
        &cluster.endpoint(0),
        &[
            "check",
            "datascale",
            "--load=s",
            "--auto-compact",
            "--auto-defrag",
        ],
        Duration::from_secs(180),
    )
    .await;
    out.assert_success();
    assert!(
        out.stdout
            .contains("Start data scale check for work load [10000 key-value pairs"),
        "{}",
        out.stdout
    );
    // It read process_resident_memory_bytes from /metrics before and after.
    assert!(
        out.stdout.contains("PASS: Approximate system memory used"),
        "{}",
        out.stdout
    );
    assert_eq!(keys_under(&cluster, "/etcdctl-check-datascale/").await, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn etcdctl_check_perf_runs_every_check_and_cleans_up() {
    let cluster = Cluster::start(1).await;
    let out = etcdctl_long(
        &cluster.endpoint(0),
        &["check", "perf", "--load=s"],
        Duration::from_secs(180),
    )
    .await;
    let report = out.stdout.clone();
    // No request failed (that would be "FAIL: too many errors"), and each check
    // reported its figure, passed or not.
    assert!(
        !report.contains("too many errors"),
        "{report}\n{}",
        out.stderr
    );
    for check in ["Throughput", "Slowest request", "Stddev"] {
        assert!(
            report.contains(check),
            "no {check} line in:\n{report}\n{}",
            out.stderr
        );
    }
    assert!(
        report.lines().any(|l| l == "PASS" || l == "FAIL"),
        "no verdict in:\n{report}"
    );
    assert_eq!(keys_under(&cluster, "/etcdctl-check-perf/").await, "");
}
