//! `quantykube bench` as a user runs it: the built binary, as a process, against live
//! clusters (of the target `QK_TEST_TARGET` names, or explicitly etcd 3.4 or QuantyKube
//! where a workload needs one), with its JSON report parsed. No numbers are asserted
//! beyond counts and the order of percentiles: benchmarks are programs, not tests.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::auth_support::{enable_auth, ROOT_PW};
use crate::harness::{Cluster, ClusterOptions, Target};

/// No bench run in this file should come near this.
const BENCH_TIMEOUT: Duration = Duration::from_secs(40);

struct BenchRun {
    args: Vec<String>,
    code: i32,
    stdout: String,
    stderr: String,
}

impl BenchRun {
    /// The JSON report on stdout.
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "bench {:?}: stdout is not one JSON object ({e}):\n{}\nstderr:\n{}",
                self.args, self.stdout, self.stderr
            )
        })
    }

    /// The JSON report of a run that exited 0.
    fn ok_json(&self) -> Value {
        assert_eq!(
            self.code, 0,
            "bench {:?} failed:\nstdout:\n{}\nstderr:\n{}",
            self.args, self.stdout, self.stderr
        );
        self.json()
    }
}

/// Runs `quantykube bench <args> [--endpoints <endpoints>]`.
async fn bench(endpoints: &[String], args: &[&str]) -> BenchRun {
    bench_with_env(endpoints, args, &[]).await
}

/// [`bench`] with these environment variables set.
async fn bench_with_env(endpoints: &[String], args: &[&str], env: &[(&str, &str)]) -> BenchRun {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    if !endpoints.is_empty() {
        all.push("--endpoints".into());
        all.push(endpoints.join(","));
    }
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_quantykube"));
    cmd.arg("bench")
        .args(&all)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(BENCH_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("bench {all:?} did not finish within {BENCH_TIMEOUT:?}"))
        .expect("run quantykube bench");
    BenchRun {
        args: all,
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn u(json: &Value, field: &str) -> u64 {
    json[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} is not a count in {json}"))
}

fn f(json: &Value, field: &str) -> f64 {
    json[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {json}"))
}

/// mean, p50 <= p90 <= p99 <= p99_9 <= max, all present, max > 0.
#[track_caller]
fn assert_percentiles(json: &Value, field: &str) {
    let l = &json[field];
    let get = |k: &str| {
        l[k].as_f64()
            .unwrap_or_else(|| panic!("{field}.{k} missing in {json}"))
    };
    let (mean, p50, p90, p99, p999, max) = (
        get("mean"),
        get("p50"),
        get("p90"),
        get("p99"),
        get("p99_9"),
        get("max"),
    );
    assert!(
        0.0 <= p50 && p50 <= p90 && p90 <= p99 && p99 <= p999 && p999 <= max,
        "{field} percentiles out of order: {l}"
    );
    assert!(max > 0.0 && mean > 0.0 && mean <= max, "{field}: {l}");
}

/// A run of `workload` that finished `operations` operations without an error.
#[track_caller]
fn assert_clean(json: &Value, workload: &str, operations: u64) {
    assert_eq!(json["workload"], workload, "{json}");
    assert_eq!(u(json, "operations"), operations, "{json}");
    assert_eq!(u(json, "succeeded"), operations, "{json}");
    assert_eq!(u(json, "errors_total"), 0, "{json}");
    assert_eq!(json["errors"], serde_json::json!({}), "{json}");
    assert!(f(json, "duration_seconds") > 0.0, "{json}");
    assert!(f(json, "throughput") > 0.0, "{json}");
    assert!(json["endpoints"].as_array().is_some_and(|e| !e.is_empty()));
    assert!(json["params"].is_object(), "{json}");
    assert_percentiles(json, "latency_ms");
}

/// The error kinds of a report.
fn error_kinds(json: &Value) -> Vec<String> {
    json["errors"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn kv_workloads_report_every_operation() {
    let cluster = Cluster::start(1).await;
    let ep = cluster.endpoints();

    let put = bench(
        &ep,
        &[
            "put",
            "--total",
            "200",
            "--clients",
            "4",
            "--conns",
            "2",
            "--key-space-size",
            "100",
            "--sequential-keys",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    assert_clean(&put, "put", 200);
    assert_eq!(put["clients"], 4);
    assert_eq!(put["conns"], 2);
    assert_eq!(put["mode"], "closed-loop");
    assert_eq!(put["params"]["total"], 200);
    assert_eq!(put["params"]["key_space_size"], 100);

    // The sequential puts wrote every key 00000000..00000099: each read finds its key.
    let serializable = bench(
        &ep,
        &[
            "range",
            "--consistency",
            "s",
            "--total",
            "100",
            "--clients",
            "2",
            "--key-space-size",
            "100",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    assert_clean(&serializable, "range", 100);
    assert_eq!(serializable["params"]["consistency"], "s");
    assert_eq!(f(&serializable, "keys_per_operation"), 1.0);

    let limited = bench(
        &ep,
        &[
            "range",
            "00000000",
            "00000100",
            "--limit",
            "10",
            "--total",
            "50",
            "--clients",
            "2",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    assert_clean(&limited, "range", 50);
    assert_eq!(f(&limited, "keys_per_operation"), 10.0);

    let cas = bench(
        &ep,
        &[
            "txn-cas",
            "--total",
            "200",
            "--clients",
            "4",
            "--key-space-size",
            "4",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    // Conflicts are successful operations, counted apart.
    assert_clean(&cas, "txn-cas", 200);
    assert!(u(&cas, "conflicts") <= 200, "{cas}");

    let mixed = bench(
        &ep,
        &[
            "mixed",
            "--read-ratio",
            "0.9",
            "--total",
            "200",
            "--clients",
            "4",
            "--key-space-size",
            "100",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    assert_clean(&mixed, "mixed", 200);
    let (reads, writes) = (u(&mixed, "reads"), u(&mixed, "writes"));
    assert_eq!(reads + writes, 200, "{mixed}");
    assert!(
        reads > writes,
        "a 0.9 read ratio reads more than it writes: {mixed}"
    );

    let text = bench(&ep, &["put", "--total", "20"]).await;
    assert_eq!(text.code, 0, "{}", text.stderr);
    for label in ["Throughput", "p99.9", "Errors"] {
        assert!(text.stdout.contains(label), "{label} in:\n{}", text.stdout);
    }
}

/// `range --stream` (issue 18): each operation is one etcd 3.7 RangeStream read to its
/// end. etcd 3.4 has none: its `Unimplemented` stops the run (exit 1).
#[tokio::test]
async fn range_stream_reads_the_range_in_chunks_or_stops_where_there_is_none() {
    let cluster = Cluster::start(1).await;
    let ep = cluster.endpoints();
    let args = [
        "range",
        "00000000",
        "00000100",
        "--stream",
        "--total",
        "6",
        "--clients",
        "2",
        "--output",
        "json",
    ];
    bench(
        &ep,
        &[
            "put",
            "--total",
            "100",
            "--key-space-size",
            "100",
            "--sequential-keys",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    if cluster.target() == Target::Etcd {
        let run = bench(&ep, &args).await;
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(
            run.json()["errors"]
                .as_object()
                .is_some_and(|e| e.keys().any(|k| k.starts_with("Unimplemented"))),
            "{}",
            run.stdout
        );
        return;
    }
    let streamed = bench(&ep, &args).await.ok_json();
    assert_clean(&streamed, "range", 6);
    assert_eq!(streamed["params"]["stream"], true);
    assert_eq!(f(&streamed, "keys_per_operation"), 100.0);
    // 100 keys: chunks of 10, 20, 40 and the last 30.
    assert_eq!(u(&streamed, "chunks"), 6 * 4, "{streamed}");
    let first = f(&streamed, "first_chunk_ms_median");
    assert!(
        0.0 < f(&streamed, "first_chunk_ms_min")
            && first <= f(&streamed, "first_chunk_ms_max")
            && first <= streamed["latency_ms"]["max"].as_f64().unwrap_or(0.0),
        "{streamed}"
    );
}

#[tokio::test]
async fn open_loop_schedules_at_the_rate_for_the_duration() {
    let cluster = Cluster::start(1).await;
    let ep = cluster.endpoints();

    // Operation i is scheduled at i / 200 s; those before 1 s are exactly 0..=199.
    let open = bench(
        &ep,
        &[
            "put",
            "--rate",
            "200",
            "--duration",
            "1s",
            "--clients",
            "8",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    assert_clean(&open, "put", 200);
    assert_eq!(open["mode"], "open-loop");
    assert!(f(&open, "duration_seconds") >= 0.99, "{open}");

    let closed = bench(
        &ep,
        &[
            "put",
            "--duration",
            "500ms",
            "--clients",
            "2",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    assert_eq!(closed["mode"], "closed-loop");
    assert!(u(&closed, "operations") > 0, "{closed}");
    assert!(f(&closed, "duration_seconds") >= 0.5, "{closed}");
    assert_eq!(u(&closed, "errors_total"), 0, "{closed}");
}

/// `--timeline` (every window of the run, and the latency distribution) and put's
/// `--compact-every` (the store compacted as the API server compacts it), as the
/// sustained run of compare.sh uses them, on either server.
#[tokio::test]
async fn timeline_and_compaction_follow_the_run() {
    let cluster = Cluster::start(1).await;
    let report = bench(
        &cluster.endpoints(),
        &[
            "put",
            "--total",
            "3000",
            "--clients",
            "4",
            "--key-space-size",
            "50",
            "--compact-every",
            "500",
            "--timeline",
            "100ms",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    assert_clean(&report, "put", 3000);
    assert_eq!(report["params"]["compact_every"], 500, "{report}");

    // Every operation is in one window, and the windows cover the run.
    let windows = report["timeline"].as_array().expect("timeline").clone();
    assert!(!windows.is_empty(), "{report}");
    let mut previous_end = 0.0;
    let mut counted = 0.0;
    for window in &windows {
        let end = f(window, "end_seconds");
        assert!(end > previous_end, "windows in order: {report}");
        counted += f(window, "throughput") * (end - previous_end);
        assert!(f(window, "p50_ms") <= f(window, "p99_ms"), "{window}");
        assert_eq!(u(window, "errors"), 0, "{window}");
        previous_end = end;
    }
    assert!(
        (counted - 3000.0).abs() < 1.0,
        "{counted} puts in the windows: {report}"
    );
    assert!(
        (previous_end - f(&report, "duration_seconds")).abs() < 0.01,
        "the last window ends with the run: {report}"
    );

    // The distribution climbs from the fastest put to the slowest.
    let points = report["latency_distribution"]
        .as_array()
        .expect("latency_distribution")
        .clone();
    let percentiles: Vec<f64> = points.iter().map(|p| f(p, "percentile")).collect();
    assert_eq!(percentiles.first(), Some(&0.0), "{report}");
    assert_eq!(percentiles.last(), Some(&100.0), "{report}");
    assert!(percentiles.windows(2).all(|w| w[0] < w[1]), "{report}");
    let ms: Vec<f64> = points.iter().map(|p| f(p, "ms")).collect();
    assert!(ms.windows(2).all(|w| w[0] <= w[1]), "{report}");
    let max = f(&report["latency_ms"], "max");
    assert!(
        (ms[ms.len() - 1] - max).abs() <= max * 0.01,
        "the 100th percentile is the maximum: {report}"
    );

    // Revisions 2..=3001: the first put sets the first step (nothing is 500 revisions
    // old yet), then a compaction each 500 revisions keeps the last 500: about five,
    // the last near revision 2 000.
    let compactions = u(&report, "compactions");
    assert!((4..=6).contains(&compactions), "{report}");
    let mut client = cluster.client(0).await;
    let old = client
        .get(
            "00000000",
            Some(etcd_client::GetOptions::new().with_revision(2)),
        )
        .await
        .expect_err("revision 2 was compacted away");
    assert!(
        old.to_string()
            .contains("required revision has been compacted"),
        "{old}"
    );
    let recent = client
        .get(
            "00000000",
            Some(etcd_client::GetOptions::new().with_revision(2_600)),
        )
        .await;
    assert!(
        recent.is_ok(),
        "the last 500 revisions are kept: {recent:?}"
    );
}

#[tokio::test]
async fn target_leader_sends_every_request_to_the_leader() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader_index().await;
    let report = bench(
        &cluster.endpoints(),
        &[
            "put",
            "--target-leader",
            "--total",
            "100",
            "--clients",
            "4",
            "--conns",
            "3",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    assert_clean(&report, "put", 100);
    assert_eq!(
        report["leader_endpoint"],
        cluster.endpoint(leader),
        "{report}"
    );
    assert_eq!(report["endpoints"].as_array().map(Vec::len), Some(3));
}

#[tokio::test]
async fn bad_flags_and_unreachable_endpoints_exit_non_zero_with_a_message() {
    for (args, needle) in [
        (&["put", "--clients", "0"][..], "--clients"),
        (
            &["put", "--total", "10", "--duration", "1s"][..],
            "--duration",
        ),
        (&["frobnicate"][..], "frobnicate"),
        (&["put", "--endpoints", "https://127.0.0.1:2379"][..], "TLS"),
        (&["put", "--endpoints", "127.0.0.1"][..], "host:port"),
        (&["mixed", "--read-ratio", "2"][..], "--read-ratio"),
        (&["put", "--rate", "0"][..], "--rate"),
        (&["put", "--duration", "soon"][..], "soon"),
        (&["watch", "--rate", "10"][..], "--put-rate"),
        (&["range", "--stream"][..], "KEY"),
        (&["put", "--timeline", "1ms"][..], "--timeline"),
        (&["put", "--timeline", "soon"][..], "soon"),
        (&["put", "--compact-every", "0"][..], "--compact-every"),
        (&["put", "--compact-every", "-5"][..], "-5"),
        (&["range", "--compact-every", "10"][..], "--compact-every"),
    ] {
        let run = bench(&[], args).await;
        assert_eq!(run.code, 2, "bench {args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(needle),
            "bench {args:?} names {needle}: {}",
            run.stderr
        );
        assert!(run.stdout.is_empty(), "bench {args:?}: {}", run.stdout);
    }

    let help = bench(&[], &["--help"]).await;
    assert_eq!(help.code, 0);
    for word in [
        "put",
        "range",
        "txn-cas",
        "mixed",
        "watch",
        "lease-keepalive",
        "--rate",
        "--target-leader",
    ] {
        assert!(help.stdout.contains(word), "--help mentions {word}");
    }

    // Nothing listens on port 1: every put fails, counted by kind, and the run ends.
    let refused = bench(
        &[],
        &[
            "put",
            "--total",
            "20",
            "--endpoints",
            "127.0.0.1:1",
            "--dial-timeout",
            "500ms",
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    let json = refused.json();
    assert_eq!(u(&json, "operations"), 20, "{json}");
    assert_eq!(u(&json, "errors_total"), 20, "{json}");
    assert!(
        error_kinds(&json)
            .iter()
            .all(|k| k.starts_with("Unavailable")),
        "{json}"
    );
    assert!(
        refused.stderr.contains("no operation succeeded"),
        "{}",
        refused.stderr
    );
}

/// `--user NAME:PASSWORD` (issue 17): with auth on, each connection authenticates and
/// sends its token; without the flag every request is refused as etcd refuses a request
/// without a token; a wrong password stops the run with the server's words. The
/// password never appears in any output.
#[tokio::test]
async fn user_flag_authenticates_every_connection() {
    const PASSWORD: &str = ROOT_PW;
    let cluster = Cluster::start(1).await;
    enable_auth(&cluster).await;
    let endpoints = cluster.endpoints();
    let user = format!("root:{PASSWORD}");

    let run = bench(
        &endpoints,
        &[
            "put",
            "--total",
            "50",
            "--clients",
            "4",
            "--conns",
            "2",
            "--user",
            &user,
            "--output",
            "json",
        ],
    )
    .await;
    let report = run.ok_json();
    assert_clean(&report, "put", 50);
    assert_eq!(report["params"]["user"], "root", "{report}");
    for output in [&run.stdout, &run.stderr] {
        assert!(!output.contains(PASSWORD), "the password leaked: {output}");
    }

    // Without --user every put is refused, counted, and the run fails.
    let anonymous = bench(&endpoints, &["put", "--total", "20", "--output", "json"]).await;
    assert_eq!(anonymous.code, 1, "{}", anonymous.stderr);
    let json = anonymous.json();
    assert_eq!(u(&json, "errors_total"), 20, "{json}");
    assert!(
        error_kinds(&json)
            .iter()
            .all(|k| k.contains("user name is empty")),
        "{json}"
    );

    // A wrong password stops the run before any request, with the server's answer.
    let wrong = bench(
        &endpoints,
        &["put", "--total", "5", "--user", "root:not-the-password"],
    )
    .await;
    assert_eq!(wrong.code, 1, "{}", wrong.stderr);
    assert!(
        wrong.stderr.contains("authentication failed"),
        "{}",
        wrong.stderr
    );
    assert!(
        !wrong.stderr.contains("not-the-password"),
        "{}",
        wrong.stderr
    );
    assert!(wrong.stdout.is_empty(), "{}", wrong.stdout);

    // No ':' is a usage error, without prompting (stdin is closed anyway).
    let no_password = bench(&endpoints, &["put", "--total", "5", "--user", "root"]).await;
    assert_eq!(no_password.code, 2, "{}", no_password.stderr);
    assert!(
        no_password.stderr.contains("NAME:PASSWORD"),
        "{}",
        no_password.stderr
    );
}

/// A simple token that expired between two requests (`--auth-token-ttl=1`, a request
/// every 4 s): the connection authenticates again and the request is sent again, so
/// no request fails.
#[tokio::test]
async fn user_flag_authenticates_again_after_the_token_expired() {
    let cluster = ClusterOptions::new(1)
        .arg("--auth-token-ttl=1")
        .start()
        .await;
    enable_auth(&cluster).await;
    let root_user = format!("root:{ROOT_PW}");
    let run = bench_with_env(
        &cluster.endpoints(),
        &[
            "put", "--rate", "0.25", "--total", "3", "--user", &root_user, "--output", "json",
        ],
        &[("QUANTYKUBE_LOG", "quantykube::client::auth=debug")],
    )
    .await;
    assert_clean(&run.ok_json(), "put", 3);
    assert!(
        run.stderr.contains("authenticated again"),
        "the token expired between the requests: {}",
        run.stderr
    );
}

/// The watch workload: every put reaches every watcher, with its delivery latency.
async fn assert_watch_fan_out(target: Target) {
    let cluster = ClusterOptions::new(1).target(target).start().await;
    let watch = bench(
        &cluster.endpoints(),
        &[
            "watch",
            "--watchers",
            "20",
            "--streams",
            "4",
            "--put-rate",
            "200",
            "--total",
            "100",
            "--clients",
            "2",
            "--key-space-size",
            "10",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    assert_clean(&watch, "watch", 100);
    assert_eq!(watch["mode"], "open-loop");
    // Every put reaches every watcher: 100 puts x 20 watchers.
    assert_eq!(u(&watch, "events_expected"), 2000, "{target}: {watch}");
    assert_eq!(u(&watch, "events_delivered"), 2000, "{target}: {watch}");
    assert!(f(&watch, "events_per_second") > 0.0, "{watch}");
    let d = &watch["delivery_latency_ms"];
    for k in ["mean", "p50", "p90", "p99", "p99_9", "max"] {
        assert!(d[k].as_f64().is_some_and(|v| v >= 0.0), "{watch}");
    }
    assert!(d["p50"].as_f64() <= d["p99_9"].as_f64() && d["p99_9"].as_f64() <= d["max"].as_f64());
}

#[tokio::test]
async fn watch_fan_out_against_quantykube_and_etcd() {
    assert_watch_fan_out(Target::Quantykube).await;
    if Target::Etcd.binary().is_none() {
        eprintln!("etcd part skipped: etcd is not installed (Debian's etcd-server)");
        return;
    }
    assert_watch_fan_out(Target::Etcd).await;
}

/// The lease-keepalive workload: every keepalive answered, on the leases it granted.
async fn assert_lease_keepalive(target: Target) {
    let cluster = ClusterOptions::new(1).target(target).start().await;
    let lease = bench(
        &cluster.endpoints(),
        &[
            "lease-keepalive",
            "--leases",
            "8",
            "--total",
            "300",
            "--clients",
            "4",
            "--output",
            "json",
        ],
    )
    .await
    .ok_json();
    assert_clean(&lease, "lease-keepalive", 300);
    assert_eq!(u(&lease, "leases"), 8, "{target}: {lease}");
}

#[tokio::test]
async fn lease_keepalive_against_quantykube_and_etcd() {
    assert_lease_keepalive(Target::Quantykube).await;
    if Target::Etcd.binary().is_none() {
        eprintln!("etcd part skipped: etcd is not installed (Debian's etcd-server)");
        return;
    }
    assert_lease_keepalive(Target::Etcd).await;
}
