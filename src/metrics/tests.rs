//! render() exposes every metric etcd dashboards read, with etcd's types and labels,
//! and the recording functions move them.

use std::time::Duration;

use super::*;

#[path = "../../tests/e2e/prometheus_text.rs"]
#[allow(dead_code)]
mod prometheus_text;

use prometheus_text::{bucket_bounds, parse, Exposition};

fn rendered() -> Exposition {
    parse(&render()).unwrap_or_else(|e| panic!("render() does not parse: {e}"))
}

/// (name, type, label names) of every metric that exists before anything happened.
const ALWAYS: &[(&str, &str, &[&str])] = &[
    ("etcd_server_has_leader", "gauge", &[]),
    ("etcd_server_is_leader", "gauge", &[]),
    ("etcd_server_is_learner", "gauge", &[]),
    ("etcd_server_leader_changes_seen_total", "counter", &[]),
    ("etcd_server_proposals_committed_total", "gauge", &[]),
    ("etcd_server_proposals_applied_total", "gauge", &[]),
    ("etcd_server_proposals_pending", "gauge", &[]),
    ("etcd_server_proposals_failed_total", "counter", &[]),
    ("etcd_server_quota_backend_bytes", "gauge", &[]),
    ("etcd_server_read_indexes_failed_total", "counter", &[]),
    ("etcd_debugging_server_lease_expired_total", "counter", &[]),
    ("etcd_disk_wal_fsync_duration_seconds", "histogram", &[]),
    (
        "etcd_disk_backend_commit_duration_seconds",
        "histogram",
        &[],
    ),
    ("etcd_mvcc_db_total_size_in_bytes", "gauge", &[]),
    ("etcd_mvcc_db_total_size_in_use_in_bytes", "gauge", &[]),
    ("etcd_debugging_mvcc_keys_total", "gauge", &[]),
    ("etcd_debugging_mvcc_current_revision", "gauge", &[]),
    ("etcd_debugging_mvcc_compact_revision", "gauge", &[]),
    ("etcd_debugging_mvcc_watch_stream_total", "gauge", &[]),
    ("etcd_debugging_mvcc_watcher_total", "gauge", &[]),
    (
        "etcd_network_client_grpc_received_bytes_total",
        "counter",
        &[],
    ),
    ("etcd_network_client_grpc_sent_bytes_total", "counter", &[]),
    (
        "grpc_server_started_total",
        "counter",
        &["grpc_method", "grpc_service", "grpc_type"],
    ),
    (
        "grpc_server_handled_total",
        "counter",
        &["grpc_code", "grpc_method", "grpc_service", "grpc_type"],
    ),
    (
        "grpc_server_msg_received_total",
        "counter",
        &["grpc_method", "grpc_service", "grpc_type"],
    ),
    (
        "grpc_server_msg_sent_total",
        "counter",
        &["grpc_method", "grpc_service", "grpc_type"],
    ),
    (
        "grpc_server_handling_seconds",
        "histogram",
        &["grpc_method", "grpc_service", "grpc_type"],
    ),
    ("go_goroutines", "gauge", &[]),
    ("go_threads", "gauge", &[]),
    ("quantykube_forwarded_writes_total", "counter", &[]),
    ("quantykube_read_index_rounds_total", "counter", &[]),
    ("quantykube_read_index_round_reads_total", "counter", &[]),
    ("quantykube_read_index_local_total", "counter", &[]),
    ("quantykube_watch_catch_up_pages_total", "counter", &[]),
];

#[cfg(target_os = "linux")]
const PROCESS: &[(&str, &str)] = &[
    ("process_resident_memory_bytes", "gauge"),
    ("process_virtual_memory_bytes", "gauge"),
    ("process_cpu_seconds_total", "counter"),
    ("process_open_fds", "gauge"),
    ("process_max_fds", "gauge"),
    ("process_start_time_seconds", "gauge"),
];

fn sorted(labels: &[&str]) -> Vec<String> {
    let mut labels: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
    labels.sort();
    labels
}

#[test]
fn every_metric_has_etcds_type_and_labels() {
    let metrics = rendered();
    for (name, kind, labels) in ALWAYS {
        assert_eq!(metrics.kind(name), Some(*kind), "TYPE of {name}");
        assert_eq!(
            metrics.label_names(name),
            sorted(labels),
            "labels of {name}"
        );
        assert!(
            !metrics.families[*name].help.is_empty(),
            "{name} has a HELP text"
        );
    }
    #[cfg(target_os = "linux")]
    for (name, kind) in PROCESS {
        assert_eq!(metrics.kind(name), Some(*kind), "TYPE of {name}");
    }
    let disk: Vec<f64> = (0..14).map(|i| 0.001 * f64::from(1u32 << i)).collect();
    assert_eq!(
        bucket_bounds(&metrics, "etcd_disk_wal_fsync_duration_seconds"),
        disk
    );
    assert_eq!(
        bucket_bounds(&metrics, "etcd_disk_backend_commit_duration_seconds"),
        disk
    );
    // 61 methods (etcd's, Lock, Election, health and our admin API), each with every
    // one of the 17 codes at zero, as etcd shows them.
    assert_eq!(
        metrics.families["grpc_server_handled_total"].samples.len(),
        61 * 17
    );
    assert_eq!(
        metrics.families["grpc_server_started_total"].samples.len(),
        61
    );
    let types: Vec<&str> = metrics
        .samples("grpc_server_started_total", &[])
        .filter_map(|s| s.labels.get("grpc_type"))
        .map(String::as_str)
        .collect();
    assert!(types
        .iter()
        .all(|t| ["unary", "server_stream", "bidi_stream"].contains(t)));
    assert_eq!(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
}

#[test]
fn labelled_metrics_appear_with_their_labels_once_recorded() {
    server::describe(0xbdae9bbc11dd390d, "3.5.17", 2 << 30);
    quantykube_raft::metrics::peer_exchanged("8e9e05c52164694d", 100, 10);
    let metrics = rendered();
    assert_eq!(
        metrics.sum("etcd_server_id", &[("server_id", "bdae9bbc11dd390d")]),
        1.0
    );
    assert_eq!(
        metrics.sum("etcd_server_version", &[("server_version", "3.5.17")]),
        1.0
    );
    assert_eq!(
        metrics.value("etcd_server_quota_backend_bytes"),
        Some(2_147_483_648.0)
    );
    assert_eq!(metrics.label_names("etcd_server_id"), ["server_id"]);
    assert_eq!(
        metrics.label_names("etcd_network_peer_received_bytes_total"),
        ["From"]
    );
    assert!(
        metrics.sum(
            "etcd_network_peer_received_bytes_total",
            &[("From", "8e9e05c52164694d")]
        ) >= 100.0
    );
}

#[test]
fn recording_functions_move_their_metrics() {
    let before = rendered();
    quantykube_raft::metrics::wal_fsynced(Duration::from_millis(3));
    crate::store::metrics::backend_committed(Duration::from_millis(3));
    server::lease_expired();
    storage::watch_caught_up();
    let after = rendered();
    for name in [
        "etcd_disk_wal_fsync_duration_seconds_count",
        "etcd_disk_backend_commit_duration_seconds_count",
        "etcd_debugging_server_lease_expired_total",
        "quantykube_watch_catch_up_pages_total",
    ] {
        assert!(
            after.value(name) >= before.value(name).map(|v| v + 1.0),
            "{name} moved"
        );
    }
    // 3 ms lands in the 4 ms bucket and every one above it.
    let le = |m: &Exposition, le: &str| {
        m.sum("etcd_disk_wal_fsync_duration_seconds_bucket", &[("le", le)])
    };
    assert!(le(&after, "0.004") >= le(&before, "0.004") + 1.0);
}

#[test]
fn leader_changes_count_each_newly_known_leader() {
    let count = || {
        rendered()
            .value("etcd_server_leader_changes_seen_total")
            .unwrap_or(0.0)
    };
    let mut metrics = openraft::RaftMetrics::<quantykube_raft::TypeConfig>::new_initial(1);
    let mut view = server::RaftView::default();
    let start = count();
    view.update(1, &metrics);
    assert_eq!(count(), start, "no leader yet");
    metrics.current_leader = Some(2);
    view.update(1, &metrics);
    metrics.current_leader = None;
    view.update(1, &metrics);
    metrics.current_leader = Some(2);
    view.update(1, &metrics);
    view.update(1, &metrics);
    // Counters are process-wide and tests run in parallel: at least our two.
    assert!(count() >= start + 2.0);
}

/// etcd's families that QuantyKube does not export yet (one list, shared with the e2e
/// test): each must still be missing, so that the list shrinks with the code.
fn not_yet_exported() -> Vec<&'static str> {
    include_str!("../../tests/e2e/etcd_metrics/not_yet_exported.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect()
}

/// Labelled families whose series this test cannot make: the raft crate's per-peer
/// series (its own unit test records them), and those a running member makes from its
/// store and membership (the e2e test `metrics_catalogue` sees them).
const SERIES_MADE_ELSEWHERE: &[&str] = &[
    "etcd_network_known_peers",
    "etcd_network_peer_round_trip_time_seconds",
    "etcd_network_peer_sent_failures_total",
    "etcd_network_peer_received_failures_total",
    "etcd_network_active_peers",
    "etcd_network_snapshot_send_success",
    "etcd_network_snapshot_send_failures",
    "etcd_network_snapshot_send_inflights_total",
    "etcd_network_snapshot_send_total_duration_seconds",
    "etcd_network_snapshot_receive_success",
    "etcd_network_snapshot_receive_failures",
    "etcd_network_snapshot_receive_inflights_total",
    "etcd_network_snapshot_receive_total_duration_seconds",
    "etcd_network_disconnected_peers_total",
    "etcd_debugging_server_alarms",
];

/// Go's `ExponentialBuckets(start, factor, count)` from source.tsv's `exp(a,b,n)`.
fn etcd_buckets(text: &str) -> Vec<f64> {
    let Some(inner) = text.strip_prefix("exp(").and_then(|t| t.strip_suffix(')')) else {
        return prometheus::DEFAULT_BUCKETS.to_vec();
    };
    let parts: Vec<f64> = inner
        .split(',')
        .map(|p| p.parse().expect("a number"))
        .collect();
    prometheus::exponential_buckets(parts[0], parts[1], parts[2] as usize).expect("buckets")
}

#[test]
fn every_family_etcd_declares_is_exported_with_its_type_labels_help_and_buckets() {
    // Series for the labelled families, as a running member would have them.
    server::describe(0x8e9e05c52164694d, "3.6.0", 1 << 31);
    server::learner_promoted(Some(
        "can only promote a learner member which is in sync with leader",
    ));
    grpc::count_client_request(false, None);
    crate::store::metrics::applied(
        crate::store::RequestType::Put,
        true,
        Duration::from_micros(300),
    );
    crate::store::metrics::ranged(true, Duration::from_micros(30));
    crate::node::metrics::request_finished(
        crate::store::RequestType::Range,
        true,
        Duration::from_micros(40),
    );
    server::health_check_ran("readyz", "linearizable_read", true);
    server::show_feature_gates(&crate::config::FeatureGates::default());
    let _ = grpc::stream_receive_failed(
        grpc::StreamApi::Watch,
        &tonic::Status::internal("failed to decode Protobuf message"),
    );
    inert::show_every_family();
    quantykube_raft::metrics::peer_exchanged("8e9e05c52164694d", 1, 1);
    let served = rendered();
    let source = include_str!("../../tests/e2e/etcd_metrics/source.tsv");
    let not_yet = not_yet_exported();
    let mut wrong = Vec::new();
    for line in source.lines().filter(|l| !l.starts_with('#')) {
        let fields: Vec<&str> = line.split('\t').collect();
        let (name, kind, labels, help, buckets) =
            (fields[0], fields[1], fields[2], fields[3], fields[4]);
        let pending = not_yet.contains(&name);
        let Some(family) = served.families.get(name) else {
            if !pending && !SERIES_MADE_ELSEWHERE.contains(&name) {
                wrong.push(format!("{name}: not exported"));
            }
            continue;
        };
        if pending {
            wrong.push(format!(
                "{name}: exported now; take it off not_yet_exported.txt"
            ));
        }
        let mut expected: Vec<&str> = labels.split(',').filter(|l| !l.is_empty()).collect();
        expected.sort_unstable();
        if family.kind != kind
            || served.label_names(name) != expected
            || family.help != help.replace("\\n", "\n")
        {
            wrong.push(format!(
                "{name}: {} {:?} {:?}, etcd's {kind} {expected:?} {help:?}",
                family.kind,
                served.label_names(name),
                family.help
            ));
        }
        if kind == "histogram" && bucket_bounds(&served, name) != etcd_buckets(buckets) {
            wrong.push(format!(
                "{name}: buckets {:?}, etcd's {buckets}",
                bucket_bounds(&served, name)
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
