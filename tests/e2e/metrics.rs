//! `/metrics` on `--listen-metrics-urls`: etcd's names, types and labels, so that the
//! etcd mixin's alerts and the public etcd dashboard work unchanged, and values that
//! move as etcd's do. etcd 3.4 is the oracle (`QK_TEST_TARGET=etcd`).

use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{ClusterOptions, Target};
use crate::prometheus_text::{bucket_bounds, parse, Exposition};

const THREE_LABELS: [&str; 3] = ["grpc_method", "grpc_service", "grpc_type"];

/// What every member exposes from the start: (name, type, label names).
const CATALOGUE: &[(&str, &str, &[&str])] = &[
    ("etcd_server_has_leader", "gauge", &[]),
    ("etcd_server_leader_changes_seen_total", "counter", &[]),
    // etcd declares these two as gauges, `_total` notwithstanding.
    ("etcd_server_proposals_committed_total", "gauge", &[]),
    ("etcd_server_proposals_applied_total", "gauge", &[]),
    ("etcd_server_proposals_pending", "gauge", &[]),
    ("etcd_server_proposals_failed_total", "counter", &[]),
    ("etcd_disk_wal_fsync_duration_seconds", "histogram", &[]),
    (
        "etcd_disk_backend_commit_duration_seconds",
        "histogram",
        &[],
    ),
    ("etcd_mvcc_db_total_size_in_bytes", "gauge", &[]),
    ("etcd_mvcc_db_total_size_in_use_in_bytes", "gauge", &[]),
    ("etcd_server_quota_backend_bytes", "gauge", &[]),
    ("etcd_debugging_mvcc_keys_total", "gauge", &[]),
    ("etcd_server_id", "gauge", &["server_id"]),
    ("etcd_server_version", "gauge", &["server_version"]),
    ("etcd_server_is_leader", "gauge", &[]),
    (
        "etcd_network_client_grpc_received_bytes_total",
        "counter",
        &[],
    ),
    ("etcd_network_client_grpc_sent_bytes_total", "counter", &[]),
    ("etcd_network_peer_sent_bytes_total", "counter", &["To"]),
    (
        "etcd_network_peer_received_bytes_total",
        "counter",
        &["From"],
    ),
    ("grpc_server_started_total", "counter", &THREE_LABELS),
    (
        "grpc_server_handled_total",
        "counter",
        &["grpc_code", "grpc_method", "grpc_service", "grpc_type"],
    ),
    ("grpc_server_msg_received_total", "counter", &THREE_LABELS),
    ("grpc_server_msg_sent_total", "counter", &THREE_LABELS),
    ("process_resident_memory_bytes", "gauge", &[]),
    ("process_cpu_seconds_total", "counter", &[]),
    ("process_open_fds", "gauge", &[]),
    ("process_max_fds", "gauge", &[]),
    ("process_start_time_seconds", "gauge", &[]),
    ("process_virtual_memory_bytes", "gauge", &[]),
    ("go_goroutines", "gauge", &[]),
    ("go_threads", "gauge", &[]),
];

/// One GET over plain HTTP/1.1: the status code and the (de-chunked) body.
async fn http_get(url: &str) -> Result<(u16, String), String> {
    let rest = url.strip_prefix("http://").ok_or("not an http URL")?;
    let (authority, path) = match rest.split_once('/') {
        Some((authority, path)) => (authority, format!("/{path}")),
        None => (rest, "/".to_owned()),
    };
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .map_err(|e| format!("connect {authority}: {e}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .await
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8(raw).map_err(|e| e.to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no header end")?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status")?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    Ok((
        status,
        if chunked {
            dechunk(body)?
        } else {
            body.to_owned()
        },
    ))
}

fn dechunk(mut body: &str) -> Result<String, String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").ok_or("bad chunk header")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("bad chunk size {size:?}: {e}"))?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).ok_or("short chunk")?);
        body = rest.get(size + 2..).ok_or("short chunk end")?;
    }
}

pub(crate) async fn scrape(url: &str) -> Exposition {
    let (status, body) = http_get(&format!("{url}/metrics"))
        .await
        .unwrap_or_else(|e| panic!("GET {url}/metrics: {e}"));
    assert_eq!(status, 200, "GET {url}/metrics answered {status}: {body}");
    parse(&body).unwrap_or_else(|e| panic!("{url}/metrics does not parse: {e}"))
}

/// Scrapes until `done` holds (or panics with `what` after `timeout`).
pub(crate) async fn scrape_until(
    url: &str,
    timeout: Duration,
    what: &str,
    done: impl Fn(&Exposition) -> bool,
) -> Exposition {
    let deadline = Instant::now() + timeout;
    loop {
        let metrics = scrape(url).await;
        if done(&metrics) {
            return metrics;
        }
        assert!(
            Instant::now() < deadline,
            "{url}: {what} within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn check_catalogue(url: &str, metrics: &Exposition) {
    for (name, kind, labels) in CATALOGUE {
        assert_eq!(
            metrics.kind(name),
            Some(*kind),
            "{url}: TYPE of {name} (families: {:?})",
            metrics.families.keys().collect::<Vec<_>>()
        );
        let mut expected: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        expected.sort();
        assert_eq!(
            metrics.label_names(name),
            expected,
            "{url}: labels of {name}"
        );
        assert!(
            !metrics.families[*name].help.is_empty(),
            "{url}: HELP of {name}"
        );
    }
    // etcd's disk buckets: 1 ms to 8.192 s, doubling.
    let disk: Vec<f64> = (0..14).map(|i| 0.001 * f64::from(1u32 << i)).collect();
    for name in [
        "etcd_disk_wal_fsync_duration_seconds",
        "etcd_disk_backend_commit_duration_seconds",
    ] {
        let bounds = bucket_bounds(metrics, name);
        assert_eq!(
            bounds.len(),
            disk.len(),
            "{url}: buckets of {name}: {bounds:?}"
        );
        for (b, e) in bounds.iter().zip(&disk) {
            assert!(
                (b - e).abs() < 1e-12,
                "{url}: buckets of {name}: {bounds:?}"
            );
        }
    }
    // Every method and code exists from the start, as go-grpc-prometheus registers them.
    let ok_range = [
        ("grpc_service", "etcdserverpb.KV"),
        ("grpc_method", "Range"),
        ("grpc_type", "unary"),
        ("grpc_code", "Unavailable"),
    ];
    assert_eq!(
        metrics
            .samples("grpc_server_handled_total", &ok_range)
            .count(),
        1
    );
    let watch = [("grpc_method", "Watch"), ("grpc_type", "bidi_stream")];
    assert_eq!(
        metrics.samples("grpc_server_started_total", &watch).count(),
        1
    );
}

fn handled(metrics: &Exposition, method: &str, code: &str) -> f64 {
    metrics.sum(
        "grpc_server_handled_total",
        &[("grpc_method", method), ("grpc_code", code)],
    )
}

fn value(metrics: &Exposition, name: &str) -> f64 {
    metrics
        .value(name)
        .unwrap_or_else(|| panic!("no unlabelled sample of {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_have_etcds_names_types_labels_and_move() {
    let mut cluster = ClusterOptions::new(3).metrics_urls().start().await;
    let urls: Vec<String> = (0..3)
        .map(|i| cluster.metrics_url(i).expect("metrics url"))
        .collect();
    let leader = cluster.wait_leader(Duration::from_secs(10)).await;

    for (i, url) in urls.iter().enumerate() {
        // Leadership settles on every member within a probe or two.
        let metrics = scrape_until(url, Duration::from_secs(10), "has_leader is 1", |m| {
            m.value("etcd_server_has_leader") == Some(1.0)
        })
        .await;
        check_catalogue(url, &metrics);
        let id = format!("{:x}", cluster.member_id(i));
        assert_eq!(
            metrics.sum("etcd_server_id", &[("server_id", id.as_str())]),
            1.0,
            "{url}: etcd_server_id{{server_id={id}}}"
        );
        assert!(value(&metrics, "etcd_server_leader_changes_seen_total") >= 1.0);
        assert_eq!(
            value(&metrics, "etcd_server_is_leader"),
            if i == leader { 1.0 } else { 0.0 },
            "{url}: is_leader"
        );
        assert!(value(&metrics, "etcd_server_quota_backend_bytes") > 0.0);
        assert!(value(&metrics, "etcd_mvcc_db_total_size_in_bytes") > 0.0);
        assert!(value(&metrics, "process_resident_memory_bytes") > 0.0);
        assert!(value(&metrics, "go_goroutines") > 0.0);
        if cluster.target() == Target::Quantykube {
            for name in [
                "quantykube_forwarded_writes_total",
                "quantykube_read_index_rounds_total",
                "quantykube_watch_catch_up_pages_total",
            ] {
                assert_eq!(metrics.kind(name), Some("counter"), "{url}: {name}");
            }
        }
    }

    // Writes: every member's committed and applied indexes move past them.
    let before: Vec<Exposition> = futures::future::join_all(urls.iter().map(|u| scrape(u))).await;
    let mut client = cluster.client(1).await;
    for n in 0..20 {
        client
            .put(format!("metrics-{n}"), "v", None)
            .await
            .expect("put");
    }
    for (url, before) in urls.iter().zip(&before) {
        let committed = value(before, "etcd_server_proposals_committed_total");
        let applied = value(before, "etcd_server_proposals_applied_total");
        let fsyncs = value(before, "etcd_disk_wal_fsync_duration_seconds_count");
        scrape_until(url, Duration::from_secs(10), "proposals counted", |m| {
            m.value("etcd_server_proposals_committed_total") >= Some(committed + 20.0)
                && m.value("etcd_server_proposals_applied_total") >= Some(applied + 20.0)
                && m.value("etcd_disk_wal_fsync_duration_seconds_count") > Some(fsyncs)
                && m.value("etcd_disk_backend_commit_duration_seconds_count") > Some(0.0)
                && m.value("etcd_debugging_mvcc_keys_total") >= Some(20.0)
        })
        .await;
    }
    let leader_metrics = scrape(&urls[leader]).await;
    assert!(leader_metrics.sum("etcd_network_peer_sent_bytes_total", &[]) > 0.0);
    let follower = (leader + 1) % 3;
    let follower_metrics = scrape(&urls[follower]).await;
    assert!(follower_metrics.sum("etcd_network_peer_received_bytes_total", &[]) > 0.0);

    // gRPC: a Range answered OK and a Range refused with OutOfRange, each counted once
    // with its code, by the member that served it.
    let served = 2;
    let before = scrape(&urls[served]).await;
    let mut client = cluster.client(served).await;
    client.get("metrics-0", None).await.expect("range");
    let refused = client
        .get(
            "metrics-0",
            Some(GetOptions::new().with_revision(1_000_000)),
        )
        .await
        .expect_err("a future revision is refused");
    assert!(refused.to_string().contains("future revision"), "{refused}");
    let after = scrape(&urls[served]).await;
    assert_eq!(
        handled(&after, "Range", "OK") - handled(&before, "Range", "OK"),
        1.0
    );
    assert_eq!(
        handled(&after, "Range", "OutOfRange") - handled(&before, "Range", "OutOfRange"),
        1.0
    );
    let started = |m: &Exposition| {
        m.sum(
            "grpc_server_started_total",
            &[("grpc_method", "Range"), ("grpc_type", "unary")],
        )
    };
    assert_eq!(started(&after) - started(&before), 2.0);
    assert!(
        after.sum(
            "grpc_server_msg_received_total",
            &[("grpc_method", "Range")]
        ) >= before.sum(
            "grpc_server_msg_received_total",
            &[("grpc_method", "Range")]
        ) + 2.0
    );
    assert!(
        value(&after, "etcd_network_client_grpc_received_bytes_total")
            > value(&before, "etcd_network_client_grpc_received_bytes_total")
    );

    // A watch stream is started at once and handled when its client goes away.
    watch_stream_counted(&cluster.endpoint(served), &urls[served]).await;

    // The leader's round trips to its peers (etcd probes every 30 s, hence the wait).
    let with_rtt = scrape_until(
        &urls[leader],
        Duration::from_secs(45),
        "peer round trip times",
        |m| m.kind("etcd_network_peer_round_trip_time_seconds") == Some("histogram"),
    )
    .await;
    assert_eq!(
        with_rtt.label_names("etcd_network_peer_round_trip_time_seconds"),
        vec!["To".to_owned()]
    );

    // Quorum lost: the one member left has no leader, and counts its failed sends.
    let survivor = 0;
    for i in 1..3 {
        cluster.kill9(i);
    }
    let lost = scrape_until(
        &urls[survivor],
        Duration::from_secs(30),
        "has_leader drops to 0",
        |m| m.value("etcd_server_has_leader") == Some(0.0),
    )
    .await;
    let killed: Vec<String> = (1..3)
        .map(|i| format!("{:x}", cluster.member_id(i)))
        .collect();
    let lost = if lost.sum("etcd_network_peer_sent_failures_total", &[]) > 0.0 {
        lost
    } else {
        scrape_until(
            &urls[survivor],
            Duration::from_secs(30),
            "sent failures counted",
            |m| m.sum("etcd_network_peer_sent_failures_total", &[]) > 0.0,
        )
        .await
    };
    assert_eq!(
        lost.kind("etcd_network_peer_sent_failures_total"),
        Some("counter")
    );
    for sample in lost.samples("etcd_network_peer_sent_failures_total", &[]) {
        let to = sample.labels.get("To").map(String::as_str).unwrap_or("");
        assert!(
            killed.iter().any(|k| k == to),
            "failures to {to}, not one of the killed {killed:?}"
        );
    }
}

/// Opens a Watch stream on `endpoint`, sees it started and not handled, closes it and
/// sees it handled.
async fn watch_stream_counted(endpoint: &str, url: &str) {
    let open = |m: &Exposition| {
        let labels = [
            ("grpc_method", "Watch"),
            ("grpc_service", "etcdserverpb.Watch"),
        ];
        m.sum("grpc_server_started_total", &labels) - m.sum("grpc_server_handled_total", &labels)
    };
    let before = open(&scrape(url).await);
    let mut client = Client::connect([endpoint], None).await.expect("connect");
    let stream = client.watch("metrics-", None).await.expect("watch");
    scrape_until(url, Duration::from_secs(5), "watch stream open", |m| {
        open(m) == before + 1.0
    })
    .await;
    drop(stream);
    drop(client);
    scrape_until(url, Duration::from_secs(10), "watch stream handled", |m| {
        open(m) == before
    })
    .await;
}
