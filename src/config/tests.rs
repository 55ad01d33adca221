//! The command line and environment against etcd's behaviour: defaults, Go flag syntax,
//! the `ETCD_*` merge, each flag treatment, etcd's checks and messages, help and
//! version, and the flag table against the clap command.
//!
//! Tests pass their own environment lookup; they must never set or read the process
//! environment.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use super::cli::command;
use super::flags::{lookup, Treatment, FLAGS, MIGRATED_FLAGS};
use super::values::{parse_go_duration, parse_go_int, parse_go_uint, RANGE_ERROR, SYNTAX_ERROR};
use super::*;

#[path = "cluster_tests.rs"]
mod cluster;
#[path = "tls_tests.rs"]
mod tls;

fn no_env(_: &str) -> Option<String> {
    None
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

fn run_with(args: &[&str], env: &dyn Fn(&str) -> Option<String>) -> (Config, Vec<String>) {
    let argv = std::iter::once("quantykube").chain(args.iter().copied());
    match parse(argv, env) {
        Ok(Invocation::Run { config, warnings }) => (*config, warnings),
        other => panic!("expected Run for {args:?}, got {other:?}"),
    }
}

fn run(args: &[&str]) -> Config {
    run_with(args, &no_env).0
}

fn error_with(args: &[&str], env: &dyn Fn(&str) -> Option<String>) -> ConfigError {
    let argv = std::iter::once("quantykube").chain(args.iter().copied());
    match parse(argv, env) {
        Err(e) => e,
        Ok(other) => panic!("expected an error for {args:?}, got {other:?}"),
    }
}

fn error(args: &[&str]) -> String {
    error_with(args, &no_env).to_string()
}

/// The bootstrap check's error for a command line that parses.
fn bootstrap_error(args: &[&str]) -> String {
    match verify_bootstrap(&run(args)) {
        Err(e) => e.to_string(),
        Ok(()) => panic!("expected a bootstrap error for {args:?}"),
    }
}

fn urls(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn defaults_without_flags_are_etcds() {
    let (config, warnings) = run_with(&[], &no_env);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.name, "default");
    assert_eq!(config.data_dir, PathBuf::from("default.quantykube"));
    assert_eq!(
        config.listen_client_urls,
        vec![Url::parse("http://localhost:2379").unwrap()]
    );
    assert_eq!(
        config.advertise_client_urls,
        urls(&["http://localhost:2379"])
    );
    assert_eq!(
        config.listen_peer_urls,
        vec![Url::parse("http://localhost:2380").unwrap()]
    );
    assert_eq!(
        config.initial_advertise_peer_urls,
        urls(&["http://localhost:2380"])
    );
    assert_eq!(
        config.initial_cluster,
        vec![ClusterMember {
            name: "default".into(),
            peer_urls: urls(&["http://localhost:2380"]),
        }]
    );
    assert_eq!(config.initial_cluster_state, ClusterState::New);
    assert_eq!(config.initial_cluster_token, "etcd-cluster");
    assert_eq!(config.heartbeat_interval, Duration::from_millis(100));
    assert_eq!(config.election_timeout, Duration::from_millis(1000));
    assert_eq!(config.snapshot_count, 10_000);
    assert_eq!(config.quota_backend_bytes, Some(2 << 30));
    assert_eq!(config.max_request_bytes, 1_572_864);
    assert_eq!(config.max_txn_ops, 128);
    assert_eq!(config.logs.level, LogLevel::Info);
    assert_eq!(
        config.watch_progress_notify_interval,
        Duration::from_secs(600)
    );
    assert_eq!(config.etcd_version, "3.7.1");
}

#[test]
fn every_go_flag_spelling_works() {
    for args in [
        &["--name", "n1"][..],
        &["--name=n1"],
        &["-name", "n1"],
        &["-name=n1"],
    ] {
        let config = run(args);
        assert_eq!(config.name, "n1", "{args:?}");
        // etcd derives the data dir and the default initial cluster from the name.
        assert_eq!(config.data_dir, PathBuf::from("n1.quantykube"));
        assert_eq!(config.initial_cluster[0].name, "n1");
    }
}

#[test]
fn values_may_start_with_a_dash_and_the_last_flag_wins() {
    assert_eq!(run(&["--name", "-odd"]).name, "-odd");
    assert_eq!(run(&["--name", "a", "-name=b"]).name, "b");
    assert_eq!(run(&["--initial-cluster-token="]).initial_cluster_token, "");
}

#[test]
fn typed_flags_parse() {
    let config = run(&[
        "--heartbeat-interval=50",
        "--election-timeout",
        "0x1f4",
        "--snapshot-count=1_000",
        "--quota-backend-bytes=-1",
        "--max-request-bytes",
        "2097152",
        "--max-txn-ops=1024",
        "--log-level=WARN",
        "--watch-progress-notify-interval=1m30s",
        "--etcd-version=3.5.17",
        "--data-dir=/var/lib/qk",
        "--wal-dir=/fast/qk-wal",
        "--initial-cluster-state=existing",
    ]);
    assert_eq!(config.heartbeat_interval, Duration::from_millis(50));
    assert_eq!(config.election_timeout, Duration::from_millis(500));
    assert_eq!(config.snapshot_count, 1000);
    assert_eq!(config.quota_backend_bytes, None);
    assert_eq!(config.max_request_bytes, 2 << 20);
    assert_eq!(config.max_txn_ops, 1024);
    assert_eq!(config.logs.level, LogLevel::Warn);
    assert_eq!(
        config.watch_progress_notify_interval,
        Duration::from_secs(90)
    );
    assert_eq!(config.etcd_version, "3.5.17");
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/qk"));
    assert_eq!(config.wal_dir, Some(PathBuf::from("/fast/qk-wal")));
    assert_eq!(config.initial_cluster_state, ClusterState::Existing);
    // Unset or empty: the log lives in <data-dir>/wal.
    assert_eq!(run(&[]).wal_dir, None);
    assert_eq!(run(&["--wal-dir="]).wal_dir, None);
    assert_eq!(
        run(&["--quota-backend-bytes=0"]).quota_backend_bytes,
        Some(2 << 30)
    );
    assert_eq!(run(&["--snapshot-count=0"]).snapshot_count, 10_000);
    assert!(error(&["--max-txn-ops=-1"]).contains(r#"invalid value "-1" for flag --max-txn-ops"#));
    // etcd's `flags.Uint32Value`: math.MaxUint32 by default, 32 bits at most.
    assert_eq!(run(&[]).max_concurrent_streams, u32::MAX);
    assert_eq!(
        run(&["--max-concurrent-streams=3"]).max_concurrent_streams,
        3
    );
    assert_eq!(
        run(&["--max-concurrent-streams", "0x10"]).max_concurrent_streams,
        16
    );
    assert_eq!(run(&[]).gateway_body_timeout, Duration::from_secs(60));
    assert_eq!(
        run(&["--gateway-body-timeout=1500ms"]).gateway_body_timeout,
        Duration::from_millis(1500)
    );
    assert!(error(&["--gateway-body-timeout=0s"]).contains("must be positive"));
    assert!(error(&["--max-concurrent-streams=4294967296"])
        .contains(r#"invalid value "4294967296" for flag --max-concurrent-streams"#));
    assert!(error(&["--log-level=loud"]).contains("only supports debug"));
    assert!(error(&["--etcd-version=latest"]).contains("expected a version"));
}

#[test]
fn environment_is_used_and_the_flag_wins() {
    let env = env_of(&[
        ("ETCD_NAME", "from-env"),
        ("ETCD_INITIAL_CLUSTER_TOKEN", "tok"),
        ("ETCD_DATA_DIR", ""),
    ]);
    let (config, warnings) = run_with(&[], &env);
    assert_eq!(config.name, "from-env");
    assert_eq!(config.initial_cluster_token, "tok");
    // Empty variables count as unset, as in etcd.
    assert_eq!(config.data_dir, PathBuf::from("from-env.quantykube"));
    assert!(warnings.is_empty(), "{warnings:?}");

    let (config, warnings) = run_with(&["--name", "from-flag"], &env);
    assert_eq!(config.name, "from-flag");
    assert_eq!(config.initial_cluster_token, "tok");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("ETCD_NAME is shadowed by the command-line flag --name"));

    let err = error_with(&[], &env_of(&[("ETCD_HEARTBEAT_INTERVAL", "fast")]));
    assert_eq!(
        err.to_string(),
        r#"invalid value "fast" for ETCD_HEARTBEAT_INTERVAL: parse error"#
    );
    let (_, warnings) = run_with(&[], &env_of(&[("ETCD_VERSION", "3.6.0")]));
    assert!(warnings[0].contains("cannot set special environment variable ETCD_VERSION"));
}

#[test]
fn unimplemented_flags_are_refused_by_name() {
    assert_eq!(
        error(&["-discovery-proxy=http://proxy:8080"]),
        "--discovery-proxy is an etcd flag that QuantyKube does not implement yet"
    );
    let env = env_of(&[("ETCD_DISCOVERY_PROXY", "http://proxy:8080")]);
    let err = error_with(&[], &env);
    assert!(matches!(
        err,
        ConfigError::Unimplemented {
            flag: "discovery-proxy",
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "ETCD_DISCOVERY_PROXY (--discovery-proxy) is an etcd flag that QuantyKube does not \
         implement yet"
    );
    assert_eq!(
        error(&["--pre-vote=false"]),
        "--pre-vote is an etcd flag that QuantyKube does not implement yet \
         (only --pre-vote=true, which is what QuantyKube does, is accepted)"
    );
    // A bare boolean flag means true, and never takes the next argument.
    assert!(
        error(&["--discovery-insecure-skip-tls-verify", "--name", "x"])
            .starts_with("--discovery-insecure-skip-tls-verify ")
    );
}

#[test]
fn unimplemented_flags_set_to_what_quantykube_does_are_accepted_silently() {
    let (config, warnings) = run_with(
        &[
            "--client-cert-auth=false",
            "--cert-file=",
            "--pre-vote",
            "--strict-reconfig-check=1",
            "--auto-compaction-retention=0",
            "--discovery-dial-timeout=2000ms",
            "--name=x",
        ],
        &env_of(&[("ETCD_AUTO_TLS", "false")]),
    );
    assert_eq!(config.name, "x");
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn tuning_flags_are_accepted_with_a_warning() {
    let env = env_of(&[("ETCD_MAX_WALS", "3")]);
    let (config, warnings) = run_with(
        &[
            "--max-snapshots",
            "2",
            "-grpc-keepalive-interval=1h",
            "--enable-pprof",
            "--name",
            "x",
        ],
        &env,
    );
    assert_eq!(config.name, "x");
    assert_eq!(warnings.len(), 4, "{warnings:?}");
    assert!(
        warnings[0].starts_with("--max-snapshots is accepted for etcd compatibility but ignored")
    );
    assert!(warnings[1].starts_with("--grpc-keepalive-interval "));
    assert!(warnings[2].starts_with("--enable-pprof "));
    assert!(warnings[3].starts_with("ETCD_MAX_WALS (--max-wals) is accepted"));
    // Their values are still checked as etcd checks them.
    assert_eq!(
        error(&["--max-snapshots=many"]),
        r#"invalid value "many" for flag --max-snapshots: parse error"#
    );
    assert!(error(&["--grpc-keepalive-time=5"]).contains("unexpected argument"));
    assert_eq!(
        error(&["--raft-read-timeout=5"]),
        r#"invalid value "5" for flag --raft-read-timeout: time: missing unit in duration "5""#
    );
    let (_, warnings) = run_with(&["--v", "-config"], &no_env);
    assert_eq!(warnings[0], "--v: flag is no longer supported - ignoring");
    assert_eq!(
        warnings[1],
        "--config: flag is no longer supported - ignoring"
    );
}

#[test]
fn watch_progress_interval_follows_etcd() {
    let (config, warnings) = run_with(
        &["--experimental-watch-progress-notify-interval=5s"],
        &no_env,
    );
    assert_eq!(
        config.watch_progress_notify_interval,
        Duration::from_secs(5)
    );
    assert!(warnings[0].contains("deprecated"));
    assert_eq!(
        run(&["--watch-progress-notify-interval=0"]).watch_progress_notify_interval,
        Duration::from_secs(600)
    );
    assert_eq!(
        run(&["--watch-progress-notify-interval=10ms"]).watch_progress_notify_interval,
        Duration::from_millis(100)
    );
    assert_eq!(
        error(&[
            "--experimental-watch-progress-notify-interval=5s",
            "--watch-progress-notify-interval=5s"
        ]),
        "cannot set --experimental-watch-progress-notify-interval and \
         --watch-progress-notify-interval at the same time, please use \
         --watch-progress-notify-interval only"
    );
}

#[test]
fn help_and_version() {
    for flag in ["--help", "-h", "-help", "--h"] {
        let argv = ["quantykube", "--name=x", flag, "--bogus"];
        let Ok(Invocation::Help(text)) = parse(argv, &no_env) else {
            panic!("{flag} gave no help");
        };
        assert!(text.contains("--initial-cluster "), "{text}");
        assert!(text.contains("ETCD_INITIAL_CLUSTER"), "{text}");
        assert!(text.contains("--cert-file"), "{text}");
    }
    let Ok(Invocation::Version(text)) = parse(["quantykube", "--version"], &no_env) else {
        panic!("--version gave no version");
    };
    assert!(text.starts_with("QuantyKube Version: "), "{text}");
    assert!(text.contains("etcd API Version: 3.7\n"), "{text}");
    assert!(text.contains("etcd Version: 3.7.1\n"), "{text}");
    run(&["--version=false"]);
}

#[test]
fn unknown_flags_and_words_get_clap_errors() {
    let ConfigError::Usage(e) = error_with(&["--nmae", "x"], &no_env) else {
        panic!("not a usage error");
    };
    assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
    assert!(e.to_string().contains("--nmae"));
    let ConfigError::Usage(e) = error_with(&["--name", "x", "bench"], &no_env) else {
        panic!("not a usage error");
    };
    assert!(e.to_string().contains("bench"));
    assert_eq!(error(&["--name"]), "flag needs an argument: --name");
    assert_eq!(error(&["---name=x"]), "bad flag syntax: ---name=x");
    assert_eq!(error_with(&["---x"], &no_env).exit_code(), 2);
    // A value the flag cannot take exits as Go's flag package does; a variable's, later.
    assert_eq!(error_with(&["--max-txn-ops=-1"], &no_env).exit_code(), 2);
    let env = |k: &str| (k == "ETCD_MAX_TXN_OPS").then(|| "-1".to_string());
    assert_eq!(error_with(&[], &env).exit_code(), 1);
}

#[test]
fn go_number_and_duration_syntax() {
    assert_eq!(parse_go_uint("0"), Ok(0));
    assert_eq!(parse_go_uint("00"), Ok(0));
    assert_eq!(parse_go_uint("017"), Ok(15));
    assert_eq!(parse_go_uint("0o17"), Ok(15));
    assert_eq!(parse_go_uint("0x_1F"), Ok(31));
    assert_eq!(parse_go_uint("0b101"), Ok(5));
    assert_eq!(parse_go_uint("1_000"), Ok(1000));
    for bad in ["", "0x", "1__0", "_1", "1_", "08", "+1", "-1", "1e3"] {
        assert_eq!(parse_go_uint(bad), Err(SYNTAX_ERROR), "{bad:?}");
    }
    assert_eq!(parse_go_uint("18446744073709551616"), Err(RANGE_ERROR));
    assert_eq!(parse_go_int("-0x10"), Ok(-16));
    assert_eq!(parse_go_int("-9223372036854775808"), Ok(i64::MIN));

    let ms = 1_000_000i128;
    assert_eq!(parse_go_duration("10m"), Ok(600_000 * ms));
    assert_eq!(parse_go_duration("1h2m3.5s"), Ok(3_723_500 * ms));
    assert_eq!(parse_go_duration("500ms"), Ok(500 * ms));
    assert_eq!(parse_go_duration(".5us"), Ok(500));
    assert_eq!(parse_go_duration("1\u{b5}s"), Ok(1000));
    assert_eq!(parse_go_duration("-2s"), Ok(-2000 * ms));
    assert_eq!(parse_go_duration("0"), Ok(0));
    assert!(parse_go_duration("").is_err());
    assert!(parse_go_duration("5").unwrap_err().contains("missing unit"));
    assert!(parse_go_duration("5d")
        .unwrap_err()
        .contains("unknown unit"));
    assert!(parse_go_duration("1.s").is_ok());
    assert!(parse_go_duration(".s").is_err());
    assert!(parse_go_duration("3000000h").is_err());
}

#[test]
fn flag_table_and_clap_command_agree() {
    let mut names = HashSet::new();
    for f in FLAGS {
        assert!(names.insert(f.name), "--{} listed twice", f.name);
    }
    let clap_longs: HashSet<String> = command()
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .filter(|l| l != "help")
        .collect();
    let implemented: HashSet<String> = FLAGS
        .iter()
        .filter(|f| f.treatment == Treatment::Implemented)
        .map(|f| f.name.to_string())
        .collect();
    assert_eq!(clap_longs, implemented);
    for (old, new) in MIGRATED_FLAGS {
        assert!(
            lookup(old).is_some() && lookup(new).is_some(),
            "{old} / {new}"
        );
    }
    command().debug_assert();
}

#[test]
fn the_quota_keeps_etcds_meaning_and_the_flag_as_given() {
    let quota = |args: &[&str]| {
        let config = run(args);
        (config.quota_backend_bytes, config.quota_backend_bytes_flag)
    };
    // Unset and 0: etcd's 2 GiB, reported by Status.dbSizeQuota as 0 (etcd 3.6).
    assert_eq!(quota(&[]), (Some(2 << 30), 0));
    assert_eq!(quota(&["--quota-backend-bytes=0"]), (Some(2 << 30), 0));
    // Negative: no quota.
    assert_eq!(quota(&["--quota-backend-bytes=-5"]), (None, -5));
    // Above etcd's suggested 8 GiB: taken as given.
    assert_eq!(
        quota(&["--quota-backend-bytes", "17179869184"]),
        (Some(16 << 30), 16 << 30)
    );
    assert!(error(&["--quota-backend-bytes=2GiB"]).contains("--quota-backend-bytes"));
}

#[test]
fn corruption_check_flags_and_feature_gates_read_as_etcd_reads_them() {
    let config = run(&[]);
    assert!(!config.initial_corrupt_check);
    assert_eq!(config.corrupt_check_time, Duration::ZERO);

    let (config, warnings) = run_with(
        &[
            "--experimental-initial-corrupt-check",
            "--corrupt-check-time=5m",
        ],
        &no_env,
    );
    assert!(config.initial_corrupt_check);
    assert_eq!(config.corrupt_check_time, Duration::from_secs(300));
    assert!(warnings.iter().any(|w| w.contains(
        "--experimental-initial-corrupt-check is deprecated in v3.6 and will be decommissioned \
         in v3.7. Use '--feature-gates=InitialCorruptCheck=true' instead."
    )));

    let (config, warnings) = run_with(
        &[
            "--feature-gates=InitialCorruptCheck=true,LeaseCheckpoint=true",
            "--experimental-corrupt-check-time",
            "2s",
        ],
        &no_env,
    );
    assert!(config.initial_corrupt_check);
    assert_eq!(config.corrupt_check_time, Duration::from_secs(2));
    assert!(warnings
        .iter()
        .any(|w| w.contains("--experimental-corrupt-check-time is deprecated")));
    assert!(warnings
        .iter()
        .any(|w| w.contains("checkpointing is enabled without persistence")));
    // A negative period, as etcd, runs no check.
    assert_eq!(
        run(&["--corrupt-check-time=-1s"]).corrupt_check_time,
        Duration::ZERO
    );

    assert!(error(&["--feature-gates=Bogus=true"]).contains("unrecognized feature gate: Bogus"));
    assert!(error(&["--corrupt-check-time=soon"]).contains("soon"));
    assert_eq!(
        error(&[
            "--experimental-initial-corrupt-check=false",
            "--feature-gates=InitialCorruptCheck=true"
        ]),
        "cannot specify both flags: --experimental-initial-corrupt-check=false and \
         --feature-gates=InitialCorruptCheck=true at the same time, please just use \
         --feature-gates=InitialCorruptCheck=true"
    );
    // The compaction hash check: the old flag (deprecated) or the gate, etcd's default
    // period, and etcd's refusal of a period that is not positive.
    let (config, warnings) = run_with(&["--experimental-compact-hash-check-enabled"], &no_env);
    assert_eq!(config.compact_hash_check, Some(Duration::from_secs(60)));
    assert!(warnings
        .iter()
        .any(|w| w.contains("--experimental-compact-hash-check-enabled is deprecated")));
    assert_eq!(
        run(&[
            "--feature-gates=CompactHashCheck=true",
            "--compact-hash-check-time=5s"
        ])
        .compact_hash_check,
        Some(Duration::from_secs(5))
    );
    assert_eq!(
        run(&["--compact-hash-check-time=5s"]).compact_hash_check,
        None
    );
    assert!(error(&[
        "--feature-gates=CompactHashCheck=true",
        "--compact-hash-check-time=0s"
    ])
    .contains("--compact-hash-check-time must be >0"));
}

#[test]
fn gateway_and_http_access_flags_default_to_etcds() {
    let config = run(&[]);
    assert!(config.enable_grpc_gateway);
    assert_eq!(config.http_access.cors, ["*"]);
    assert_eq!(config.http_access.host_whitelist, ["*"]);
    assert!(config.http_access.any_origin());
    let config = run(&[
        "--enable-grpc-gateway=false",
        "--cors=http://b.example:80,http://a.example:8080,http://b.example:80",
        "--host-whitelist=localhost,127.0.0.1",
    ]);
    assert!(!config.enable_grpc_gateway);
    assert_eq!(
        config.http_access.cors,
        ["http://a.example:8080", "http://b.example:80"]
    );
    assert!(!config.http_access.any_origin());
    assert!(config.http_access.origin_allowed("http://a.example:8080"));
    assert!(!config.http_access.origin_allowed("http://c.example:80"));
    // Origins are URLs with a port, as etcd checks them.
    assert_eq!(
        error(&["--cors=http://a.example"]),
        "invalid value \"http://a.example\" for flag --cors: URL address does not have the form \"host:port\": http://a.example"
    );
    assert!(config.http_access.host_allowed("127.0.0.1"));
    assert!(!config.http_access.host_allowed("evil.example"));
}
