//! Values of etcd's families that count failures, pending work and latency: what each
//! counts and, as important, what it must not count (a client that simply goes away).
//! Written against etcd 3.4.23 first (`QK_TEST_TARGET=etcd`); the families etcd 3.4
//! does not have (3.5's request and range durations, 3.6's health checks) are checked
//! on QuantyKube only, and say so.

use std::time::Duration;

use bytes::Bytes;
use etcd_client::WatchOptions;
use tokio::net::TcpStream;

use crate::harness::{http_get, ClusterOptions, Target};
use crate::metrics::{scrape, scrape_until};
use crate::prometheus_text::Exposition;

/// Opens a gRPC stream on `path` with a raw HTTP/2 client, sends one message that does
/// not decode as protobuf (a field announcing five bytes, then one), and waits until
/// the member ends the stream, as etcd does, with Internal.
async fn send_undecodable_message(address: &str, path: &str) {
    let tcp = TcpStream::connect(address).await.expect("connect");
    let (sender, connection) = h2::client::handshake(tcp).await.expect("an h2 handshake");
    let driving = tokio::spawn(connection);
    let mut sender = sender.ready().await.expect("ready to send");
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{address}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("a request");
    let (answer, mut stream) = sender.send_request(request, false).expect("open a stream");
    let truncated: &[u8] = &[0x0a, 0x05, 0x01];
    let mut message = vec![0u8];
    message.extend_from_slice(&(truncated.len() as u32).to_be_bytes());
    message.extend_from_slice(truncated);
    stream
        .send_data(Bytes::from(message), false)
        .expect("send the message");
    // The member answers with an error status and ends the stream; the client's side
    // stays open, so that only the member can have ended it.
    // The status comes in the answer's headers (a trailers-only answer, when nothing
    // was sent before) or in its trailers.
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        let (head, mut body) = answer.await.expect("an answer").into_parts();
        if head.headers.contains_key("grpc-status") {
            return Some(head.headers);
        }
        while let Some(chunk) = body.data().await {
            if chunk.is_err() {
                break;
            }
        }
        body.trailers().await.ok().flatten()
    })
    .await
    .expect("the member ends the stream within 20 s");
    let status = ended
        .as_ref()
        .and_then(|t| t.get("grpc-status"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // etcd: 13 and `grpc: failed to unmarshal the received message <Go's error>`; the
    // decoder's words are the decoder's own.
    assert_eq!(
        status.as_deref(),
        Some("13"),
        "{path}: Internal for an undecodable message, got {ended:?}"
    );
    drop(stream);
    driving.abort();
}

fn stream_failures(metrics: &Exposition, api: &str) -> f64 {
    metrics.sum(
        "etcd_network_server_stream_failures_total",
        &[("Type", "receive"), ("API", api)],
    )
}

/// A Watch or LeaseKeepAlive stream whose request does not decode is a receive
/// failure, counted once; streams the client cancels or drops are not.
#[tokio::test]
async fn stream_failures_count_undecodable_requests_not_clients_that_leave() {
    let cluster = ClusterOptions::new(1).metrics_urls().start().await;
    let url = cluster.metrics_url(0).expect("metrics url");
    let address = cluster.endpoint(0).trim_start_matches("http://").to_owned();

    // Clients that go away: a watch cancelled, then a client dropped with a watch and
    // a keepalive stream open.
    {
        let mut client = cluster.client(0).await;
        let mut watch = client
            .watch("leaving/", Some(WatchOptions::new().with_prefix()))
            .await
            .expect("watch");
        let created = watch.message().await.expect("created").expect("a response");
        watch.cancel(created.watch_id()).await.expect("cancel");
        let lease = client.lease_grant(60, None).await.expect("grant");
        let (mut keeper, mut answers) = client
            .lease_keep_alive(lease.id())
            .await
            .expect("keepalive");
        keeper.keep_alive().await.expect("send a keepalive");
        answers.message().await.expect("an answer");
        let mut watch = client.watch("leaving/", None).await.expect("watch");
        watch.message().await.expect("created").expect("a response");
    }
    send_undecodable_message(&address, "/etcdserverpb.Watch/Watch").await;
    send_undecodable_message(&address, "/etcdserverpb.Lease/LeaseKeepAlive").await;
    // The counters move when the member's stream task sees the error, which may be a
    // moment after it answered.
    let metrics = scrape_until(
        &url,
        Duration::from_secs(20),
        "both failures counted",
        |m| stream_failures(m, "watch") >= 1.0 && stream_failures(m, "lease-keepalive") >= 1.0,
    )
    .await;
    assert_eq!(
        stream_failures(&metrics, "watch"),
        1.0,
        "only the undecodable watch request"
    );
    assert_eq!(
        stream_failures(&metrics, "lease-keepalive"),
        1.0,
        "only the undecodable keepalive request"
    );
    assert_eq!(
        metrics.sum(
            "etcd_network_server_stream_failures_total",
            &[("Type", "send")]
        ),
        0.0,
        "a client that left is no send failure"
    );
}

/// Watch events are pending only until the stream sends them; reads and writes are
/// timed per request type; nothing here is a slow read index.
#[tokio::test]
async fn pending_events_drain_and_requests_are_timed_by_type() {
    let cluster = ClusterOptions::new(1).metrics_urls().start().await;
    let url = cluster.metrics_url(0).expect("metrics url");
    let mut client = cluster.client(0).await;
    let mut events = client
        .watch("pending/", Some(WatchOptions::new().with_prefix()))
        .await
        .expect("watch");
    events
        .message()
        .await
        .expect("created")
        .expect("a response");
    for i in 0..3 {
        client
            .put(format!("pending/{i}"), "v", None)
            .await
            .expect("put");
    }
    let mut seen = 0;
    while seen < 3 {
        let response = tokio::time::timeout(Duration::from_secs(20), events.message())
            .await
            .expect("events within 20 s")
            .expect("the watch stream")
            .expect("a response");
        seen += response.events().len();
    }
    client.get("pending/0", None).await.expect("get");
    let metrics = scrape(&url).await;
    assert_eq!(
        metrics.value("etcd_debugging_mvcc_pending_events_total"),
        Some(0.0),
        "every event the client read is no longer pending"
    );
    assert_eq!(
        metrics.value("etcd_server_slow_read_indexes_total"),
        Some(0.0)
    );
    if cluster.target() == Target::Etcd {
        // etcd 3.4 has neither the request nor the range duration (3.5 added them),
        // nor /readyz (3.6).
        return;
    }
    let count =
        |family: &str, labels: &[(&str, &str)]| metrics.sum(&format!("{family}_count"), labels);
    let puts = count(
        "etcd_server_request_duration_seconds",
        &[("type", "Put"), ("success", "true")],
    );
    assert!(puts >= 3.0, "three puts timed, got {puts}");
    let ranges = count(
        "etcd_server_request_duration_seconds",
        &[("type", "Range"), ("success", "true")],
    );
    assert!(ranges >= 1.0, "the get timed, got {ranges}");
    let store_ranges = count("etcd_server_range_duration_seconds", &[("success", "true")]);
    assert!(
        store_ranges >= 1.0,
        "the get's read timed, got {store_ranges}"
    );

    let readyz = http_get(&format!("{}/readyz", cluster.endpoint(0)), None).await;
    assert_eq!(readyz.status, 200, "{}", readyz.body);
    let metrics = scrape(&url).await;
    let check = [("type", "readyz"), ("name", "linearizable_read")];
    assert_eq!(metrics.sum("etcd_server_healthcheck", &check), 1.0);
    assert!(
        metrics.sum(
            "etcd_server_healthchecks_total",
            &[
                ("type", "readyz"),
                ("name", "linearizable_read"),
                ("status", "success")
            ]
        ) >= 1.0
    );
    assert_eq!(
        metrics.sum(
            "etcd_server_feature_enabled",
            &[("name", "TxnModeWriteWithSharedBuffer"), ("stage", "BETA")]
        ),
        1.0,
        "a gate on by default"
    );
    assert_eq!(
        metrics.sum(
            "etcd_server_feature_enabled",
            &[("name", "InitialCorruptCheck"), ("stage", "ALPHA")]
        ),
        0.0,
        "a gate off by default"
    );
}
