//! The JSON gateway as curl users meet it, on the target server (etcd 3.4 with
//! `QK_TEST_TARGET=etcd`): the version prefixes, methods and unknown paths, streams
//! (Watch with creates, events, progress and cancels in one body; LeaseKeepAlive;
//! Snapshot), a watch that ends with its connection, the gateway over TLS and with
//! auth. Field-by-field agreement with etcd is `gateway_differential`'s.

use std::time::Duration;

use serde_json::{json, Value};

use crate::gateway_support::*;
use crate::harness::*;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn every_prefix_serves_and_other_paths_and_methods_are_refused() {
    let cluster = Cluster::start(1).await;
    let gw = Gateway::of(&cluster, 0);
    gw.put("p", "1").await;
    for prefix in ["v3", "v3beta"] {
        let answer = gw
            .call(&format!("/{prefix}/kv/range"), json!({"key": b64("p")}))
            .await;
        assert_eq!(unb64(&answer["kvs"][0]["value"]), b"1", "/{prefix}/");
    }
    // etcd 3.3 served /v3alpha/, which python3-etcd3gw 2.0 and tooz 3.1 still send;
    // etcd 3.4 no longer does. QuantyKube serves it.
    let alpha = gw.post("/v3alpha/kv/range", json!({"key": b64("p")})).await;
    match cluster.target() {
        Target::Etcd => assert_eq!(alpha.status, 404),
        Target::Quantykube => {
            assert_eq!(alpha.status, 200, "{}", alpha.http.body);
            assert_eq!(unb64(&alpha.json["kvs"][0]["value"]), b"1");
        }
    }
    let get = gw.request("GET", "/v3/kv/range", b"").await;
    assert_eq!(get.status, 405);
    assert_eq!(get.http.body, "Method Not Allowed\n");
    assert_eq!(
        get.http.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    let unknown = gw.post("/v3/kv/nothing", json!({})).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.http.body, "Not Found\n");
    let ok = gw.post("/v3/kv/range", json!({"key": b64("p")})).await;
    assert_eq!(ok.http.header("content-type"), Some("application/json"));
    assert_eq!(
        ok.http.header("grpc-metadata-content-type"),
        Some("application/grpc")
    );
}

/// A `null` in a list of messages: etcd 3.4's gateway panics on it (its handler
/// dereferences the nil element) and drops the connection; QuantyKube reads an empty
/// message there, as for a `null` anywhere else.
#[tokio::test(flavor = "multi_thread")]
async fn a_null_in_a_list_of_messages_is_an_empty_message() {
    let cluster = Cluster::start(1).await;
    let gw = Gateway::of(&cluster, 0);
    let url = format!("{}/v3/kv/txn", gw.base);
    let answer = http_request_with(
        "POST",
        &url,
        None,
        WAIT,
        &[
            "--data-binary",
            r#"{"compare":[null],"success":[{"request_range":{"key":"YQ=="}}]}"#,
        ],
    )
    .await;
    match cluster.target() {
        Target::Etcd => assert!(answer.unwrap_err().contains("Empty reply")),
        Target::Quantykube => {
            let answer = answer.expect("an answer");
            // An empty compare is `key = ""` compared by version: the empty key is
            // refused as in any request.
            assert_eq!(answer.status, 400, "{}", answer.body);
            assert!(
                answer.body.contains("etcdserver: key is not provided"),
                "{}",
                answer.body
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_body_creates_cancels_and_asks_for_progress_on_one_stream() {
    let cluster = Cluster::start(1).await;
    let gw = Gateway::of(&cluster, 0);
    let start = gw.revision().await + 1;
    let mut watch = gw
        .stream(
            "/v3/watch",
            &[
                json!({"create_request": {"key": b64("w/"), "range_end": b64("w0"), "prev_kv": true}}),
                json!({"create_request": {"key": b64("other")}}),
                json!({"progress_request": {}}),
                json!({"create_request": {"key": b64("third")}}),
                json!({"cancel_request": {"watch_id": 2}}),
            ],
        )
        .await;
    let created = watch.result(WAIT).await;
    assert_eq!(created["created"], json!(true), "{created}");
    assert_eq!(watch.status(), Some(200));
    // The first watch of a stream is number 0, which the gateway leaves out.
    assert_eq!(created.get("watch_id"), None, "{created}");
    let second = watch.result(WAIT).await;
    assert_eq!(
        (second["created"].clone(), int(&second["watch_id"])),
        (json!(true), 1)
    );
    let progress = watch.result(WAIT).await;
    assert_eq!(int(&progress["watch_id"]), -1, "{progress}");
    assert_eq!(
        int(&progress["header"]["revision"]),
        start - 1,
        "{progress}"
    );
    let third = watch.result(WAIT).await;
    assert_eq!(int(&third["watch_id"]), 2, "{third}");
    let canceled = watch.result(WAIT).await;
    assert_eq!(canceled["canceled"], json!(true), "{canceled}");
    assert_eq!(int(&canceled["watch_id"]), 2, "{canceled}");

    gw.put("w/a", "1").await;
    gw.put("w/a", "2").await;
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let events = watch.result(WAIT).await;
        assert_eq!(events.get("watch_id"), None, "{events}");
        seen.extend(events["events"].as_array().expect("events").iter().cloned());
    }
    assert_eq!(int(&seen[0]["kv"]["mod_revision"]), start);
    assert_eq!(seen[0].get("type"), None, "PUT is the default and left out");
    assert_eq!(unb64(&seen[1]["kv"]["value"]), b"2");
    assert_eq!(unb64(&seen[1]["prev_kv"]["value"]), b"1");
    gw.call("/v3/kv/deleterange", json!({"key": b64("w/a")}))
        .await;
    let deleted = watch.result(WAIT).await;
    assert_eq!(deleted["events"][0]["type"], json!("DELETE"), "{deleted}");
    // The canceled watch hears nothing; the second one its key.
    gw.put("third", "x").await;
    gw.put("other", "y").await;
    let event = watch.result(WAIT).await;
    assert_eq!(int(&event["watch_id"]), 1, "{event}");
    assert_eq!(unb64(&event["events"][0]["kv"]["key"]), b"other");
    watch.disconnect().await;
}

/// A request body that goes on while its answer streams. etcd 3.4 (Go 1.19's HTTP/1.1
/// server reads the rest of a request body before it writes an answer) starts its
/// answer only once the body ended; QuantyKube answers each message as it comes.
#[tokio::test(flavor = "multi_thread")]
async fn a_watch_body_can_go_on_while_its_answer_streams() {
    let cluster = Cluster::start(1).await;
    let url = format!("{}/v3/watch", cluster.endpoint(0));
    let mut watch = Duplex::open(&url, &json!({"create_request": {"key": b64("d")}})).await;
    match cluster.target() {
        Target::Etcd => {
            let early = tokio::time::timeout(Duration::from_secs(2), watch.result(WAIT)).await;
            assert!(
                early.is_err(),
                "etcd 3.4 answered before the body ended: {early:?}"
            );
            watch.close_send().await;
            assert_eq!(watch.result(WAIT).await["created"], json!(true));
        }
        Target::Quantykube => {
            assert_eq!(watch.result(WAIT).await["created"], json!(true));
            watch
                .send(&json!({"create_request": {"key": b64("e")}}))
                .await;
            let second = watch.result(WAIT).await;
            assert_eq!(int(&second["watch_id"]), 1, "{second}");
            Gateway::of(&cluster, 0).put("e", "1").await;
            let event = watch.result(WAIT).await;
            assert_eq!(unb64(&event["events"][0]["kv"]["key"]), b"e", "{event}");
            watch
                .send(&json!({"cancel_request": {"watch_id": 1}}))
                .await;
            assert_eq!(watch.result(WAIT).await["canceled"], json!(true));
            // The client's half-close leaves the watch open, as etcd's server does.
            watch.close_send().await;
            Gateway::of(&cluster, 0).put("d", "1").await;
            let event = watch.result(WAIT).await;
            assert_eq!(unb64(&event["events"][0]["kv"]["key"]), b"d", "{event}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_from_a_compacted_revision_is_canceled_in_the_stream() {
    let cluster = Cluster::start(1).await;
    let gw = Gateway::of(&cluster, 0);
    for i in 0..3 {
        gw.put("c", &i.to_string()).await;
    }
    let revision = gw.revision().await;
    gw.call("/v3/kv/compaction", json!({"revision": revision}))
        .await;
    let mut watch = gw
        .stream(
            "/v3/watch",
            &[json!({"create_request": {"key": b64("c"), "start_revision": 2}})],
        )
        .await;
    let created = watch.result(WAIT).await;
    let canceled = if created.get("canceled").is_some() {
        created
    } else {
        watch.result(WAIT).await
    };
    assert_eq!(canceled["canceled"], json!(true), "{canceled}");
    assert_eq!(int(&canceled["compact_revision"]), revision, "{canceled}");
    watch.disconnect().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_first_stream_message_is_an_http_error_and_an_empty_keepalive_body_ends() {
    let cluster = Cluster::start(1).await;
    let gw = Gateway::of(&cluster, 0);
    for path in ["/v3/watch", "/v3/lease/keepalive"] {
        let answer = gw.post_raw(path, b"x").await;
        assert_eq!(answer.status, 500, "{path}: {}", answer.http.body);
        assert_eq!(
            answer.json,
            json!({
                "error": "invalid character 'x' looking for beginning of value",
                "message": "invalid character 'x' looking for beginning of value",
                "code": 2
            })
        );
    }
    let answer = gw.post_raw("/v3/lease/keepalive", b"").await;
    assert_eq!((answer.status, answer.http.body.as_str()), (200, ""));
    let answer = gw.post_raw("/v3/maintenance/snapshot", b"x").await;
    assert_eq!(answer.status, 400);
    assert_eq!(int(&answer.json["code"]), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn keepalives_over_the_gateway_keep_a_lease_and_its_key_alive() {
    let cluster = Cluster::start(1).await;
    let gw = Gateway::of(&cluster, 0);
    let grant = gw.call("/v3/lease/grant", json!({"TTL": 3})).await;
    let id = int(&grant["ID"]);
    gw.call(
        "/v3/kv/put",
        json!({"key": b64("kept"), "value": b64("v"), "lease": id}),
    )
    .await;
    // A keepalive every second for three TTLs, each a request of its own, as etcd3gw
    // sends them.
    for _ in 0..9 {
        let mut keepalive = gw
            .stream("/v3/lease/keepalive", &[json!({"ID": id.to_string()})])
            .await;
        let answer = keepalive.result(WAIT).await;
        assert_eq!(int(&answer["ID"]), id, "{answer}");
        assert_eq!(int(&answer["TTL"]), 3, "{answer}");
        assert!(
            keepalive.ended(WAIT).await,
            "a keepalive answer outlived its body"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let kept = gw.call("/v3/kv/range", json!({"key": b64("kept")})).await;
    assert_eq!(
        int(&kept["count"]),
        1,
        "the lease expired under its keepalives"
    );
    // No more keepalives: the lease expires, and its key goes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let answer = gw.call("/v3/kv/range", json!({"key": b64("kept")})).await;
        if int(&answer["count"]) == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A keepalive of an unknown lease is answered with TTL 0, not an error.
    let mut unknown = gw
        .stream("/v3/lease/keepalive", &[json!({"ID": 12345})])
        .await;
    let answer = unknown.result(WAIT).await;
    assert_eq!(int(&answer["TTL"]), 0, "{answer}");
    unknown.disconnect().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_streams_as_chunks_that_make_the_whole_file() {
    let cluster = Cluster::start(1).await;
    let gw = Gateway::of(&cluster, 0);
    for i in 0..50 {
        gw.put(&format!("s{i}"), &"v".repeat(1000)).await;
    }
    let mut snapshot = gw.stream("/v3/maintenance/snapshot", &[json!({})]).await;
    // Chunks until the stream ends: the last one (remaining_bytes 0, like the one before
    // it) carries the SHA-256.
    let mut file = Vec::new();
    while let Some(chunk) = snapshot.next(Duration::from_secs(30)).await {
        let result = chunk
            .get("result")
            .unwrap_or_else(|| panic!("not a result: {chunk}"));
        file.extend(unb64(&result["blob"]));
    }
    // etcd's snapshot stream: the bbolt file, then the SHA-256 of it.
    use sha2::Digest as _;
    let (db, sum) = file.split_at(file.len() - 32);
    assert_eq!(sha2::Sha256::digest(db).as_slice(), sum);
    let path = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(path.path(), &file).unwrap();
    let status = cluster
        .etcdctl(&[
            "snapshot",
            "status",
            &path.path().display().to_string(),
            "-w",
            "json",
        ])
        .await;
    status.assert_success();
    let status: Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert!(status["totalKey"].as_u64().unwrap() >= 50, "{status}");
}

/// Closing the connection cancels the watch: the member's watch gauge goes back.
#[tokio::test(flavor = "multi_thread")]
async fn closing_the_connection_cancels_the_watch() {
    let cluster = ClusterOptions::new(1).metrics_urls().start().await;
    let gw = Gateway::of(&cluster, 0);
    let watchers = || async {
        let url = format!("{}/metrics", cluster.endpoint(0));
        let metrics = http_get(&url, None).await.body;
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_watcher_total "))
            .map(|v| v.trim().parse::<f64>().unwrap_or(-1.0))
            .expect("etcd_debugging_mvcc_watcher_total")
    };
    let before = watchers().await;
    let mut watch = gw
        .stream(
            "/v3/watch",
            &[json!({"create_request": {"key": b64("gone")}})],
        )
        .await;
    watch.result(WAIT).await;
    assert_eq!(watchers().await, before + 1.0);
    watch.disconnect().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while watchers().await != before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watch outlived its connection"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gateway_serves_over_tls_with_client_certificates() {
    let (pki, cluster) = mtls_cluster().await;
    let gw = Gateway::of(&cluster, 0);
    gw.put("tls", "yes").await;
    let answer = gw.call("/v3/kv/range", json!({"key": b64("tls")})).await;
    assert_eq!(unb64(&answer["kvs"][0]["value"]), b"yes");
    let mut watch = gw
        .stream(
            "/v3/watch",
            &[json!({"create_request": {"key": b64("tls")}})],
        )
        .await;
    assert_eq!(watch.result(WAIT).await["created"], json!(true));
    gw.put("tls", "again").await;
    let event = watch.result(WAIT).await;
    assert_eq!(unb64(&event["events"][0]["kv"]["value"]), b"again");
    watch.disconnect().await;
    // No client certificate: the handshake fails, no HTTP answer at all.
    let anonymous = Gateway {
        tls: Some(ClientTls::new(pki.ca_cert())),
        ..gw.clone()
    };
    let url = format!("{}/v3/kv/range", anonymous.base);
    let refused = http_request_with(
        "POST",
        &url,
        anonymous.tls.as_ref(),
        WAIT,
        &["--data-binary", "{}"],
    )
    .await;
    assert!(
        refused.is_err(),
        "answered without a client certificate: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_auth_on_the_gateway_takes_a_token_in_the_authorization_header() {
    let cluster = Cluster::start(1).await;
    let gw = Gateway::of(&cluster, 0);
    gw.call(
        "/v3/auth/user/add",
        json!({"name": "root", "password": "rootpw"}),
    )
    .await;
    gw.call(
        "/v3/auth/user/grant",
        json!({"user": "root", "role": "root"}),
    )
    .await;
    gw.call(
        "/v3/auth/user/add",
        json!({"name": "reader", "password": "readpw"}),
    )
    .await;
    gw.call("/v3/auth/role/add", json!({"name": "r"})).await;
    gw.call(
        "/v3/auth/role/grant",
        json!({"name": "r", "perm": {"permType": "READ", "key": b64("pub/"), "range_end": b64("pub0")}}),
    )
    .await;
    gw.call(
        "/v3/auth/user/grant",
        json!({"user": "reader", "role": "r"}),
    )
    .await;
    gw.put("pub/a", "1").await;
    gw.call("/v3/auth/enable", json!({})).await;

    let anonymous = gw.post("/v3/kv/range", json!({"key": b64("pub/a")})).await;
    assert_eq!(anonymous.status, 400, "{}", anonymous.http.body);
    assert_eq!(
        anonymous.json["message"],
        json!("etcdserver: user name is empty")
    );
    let wrong = gw
        .post(
            "/v3/auth/authenticate",
            json!({"name": "reader", "password": "nope"}),
        )
        .await;
    assert_eq!(wrong.status, 400);
    assert_eq!(
        wrong.json["message"],
        json!("etcdserver: authentication failed, invalid user ID or password")
    );
    let token = gw
        .call(
            "/v3/auth/authenticate",
            json!({"name": "reader", "password": "readpw"}),
        )
        .await["token"]
        .as_str()
        .expect("a token")
        .to_string();
    let reader = gw.with_token(&token);
    let read = reader
        .call("/v3/kv/range", json!({"key": b64("pub/a")}))
        .await;
    assert_eq!(unb64(&read["kvs"][0]["value"]), b"1");
    let denied = reader
        .post(
            "/v3/kv/put",
            json!({"key": b64("pub/a"), "value": b64("2")}),
        )
        .await;
    assert_eq!(denied.status, 403, "{}", denied.http.body);
    assert_eq!(
        denied.json["message"],
        json!("etcdserver: permission denied")
    );
    // A watch over the gateway with the token; one outside the permission is canceled.
    let mut watch = reader
        .stream(
            "/v3/watch",
            &[json!({"create_request": {"key": b64("pub/a")}})],
        )
        .await;
    assert_eq!(watch.result(WAIT).await["created"], json!(true));
    watch.disconnect().await;
    // A forged token is refused.
    let forged = format!("{}x", &token[..token.len() - 1]);
    let forged = gw
        .with_token(&forged)
        .post("/v3/kv/range", json!({"key": b64("pub/a")}))
        .await;
    assert_eq!(forged.status, 401, "{}", forged.http.body);
    assert_eq!(
        forged.json["message"],
        json!("etcdserver: invalid auth token")
    );
    let root = gw
        .call(
            "/v3/auth/authenticate",
            json!({"name": "root", "password": "rootpw"}),
        )
        .await["token"]
        .as_str()
        .expect("a token")
        .to_string();
    gw.with_token(&root)
        .call("/v3/auth/disable", json!({}))
        .await;
}

/// A watch over the gateway for minutes (`QK_GATEWAY_WATCH_SECS`, default 120) while
/// puts and deletes go through the gateway too: every change arrives once, in revision
/// order, with nothing missing, and progress notifications keep coming.
#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_watch_follows_minutes_of_writes_without_a_gap() {
    let seconds: u64 = std::env::var("QK_GATEWAY_WATCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let cluster = ClusterOptions::new(1)
        .arg("--experimental-watch-progress-notify-interval=2s")
        .start()
        .await;
    let gw = Gateway::of(&cluster, 0);
    let start = gw.revision().await + 1;
    let mut watch = gw
        .stream(
            "/v3/watch",
            &[json!({"create_request": {
                "key": b64("long/"), "range_end": b64("long0"), "progress_notify": true
            }})],
        )
        .await;
    assert_eq!(watch.result(WAIT).await["created"], json!(true));
    let writer = {
        let gw = gw.clone();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
            let mut revisions = Vec::new();
            let mut i = 0u64;
            while tokio::time::Instant::now() < deadline {
                let key = format!("long/{}", i % 50);
                let answer = if i % 7 == 6 {
                    gw.call("/v3/kv/deleterange", json!({"key": b64(&key)}))
                        .await
                } else {
                    gw.put(&key, &i.to_string()).await
                };
                let revision = int(&answer["header"]["revision"]);
                if i % 7 != 6 || int(&answer["deleted"]) == 1 {
                    revisions.push(revision);
                }
                i += 1;
                // Quiet spells, in which progress notifications are due.
                let pause = if i % 400 == 0 { 5_000 } else { 50 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            revisions
        })
    };
    let mut seen = Vec::new();
    let mut progress = 0;
    let mut last = start - 1;
    loop {
        let Some(chunk) = watch.next(Duration::from_secs(10)).await else {
            panic!("the watch went quiet after revision {last}");
        };
        let result = &chunk["result"];
        let events = result["events"].as_array().cloned().unwrap_or_default();
        if events.is_empty() {
            progress += 1;
        }
        for event in events {
            let revision = int(&event["kv"]["mod_revision"]);
            assert!(
                revision > last,
                "revision {revision} after {last}: out of order or repeated"
            );
            last = revision;
            seen.push(revision);
        }
        if writer.is_finished() {
            break;
        }
    }
    let written = writer.await.unwrap();
    let end = *written.last().expect("writes");
    while last < end {
        let chunk = watch.next(WAIT).await.expect("the last events");
        for event in chunk["result"]["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            last = int(&event["kv"]["mod_revision"]);
            seen.push(last);
        }
    }
    assert_eq!(seen, written, "the watch missed or invented changes");
    assert!(progress >= 1, "no progress notification in {seconds} s");
    watch.disconnect().await;
}

/// Lock and Election over the gateway, as tooz and scripts use them: a second Lock on
/// the same name waits for the first one's Unlock; a campaign is seen by Leader and by
/// an Observe stream, a proclamation changes the value, a resignation hands over.
#[tokio::test(flavor = "multi_thread")]
async fn lock_and_election_over_the_gateway() {
    let cluster = Cluster::start(1).await;
    let gw = Gateway::of(&cluster, 0);
    let lease = |ttl: i64| {
        let gw = gw.clone();
        async move { int(&gw.call("/v3/lease/grant", json!({"TTL": ttl})).await["ID"]) }
    };
    let (first, second) = (lease(30).await, lease(30).await);
    let held = gw
        .call(
            "/v3/lock/lock",
            json!({"name": b64("gw-lock"), "lease": first}),
        )
        .await;
    let held_key = unb64(&held["key"]);
    assert_eq!(held_key, format!("gw-lock/{first:x}").into_bytes());
    let waiter = {
        let gw = gw.clone();
        tokio::spawn(async move {
            gw.call(
                "/v3/lock/lock",
                json!({"name": b64("gw-lock"), "lease": second}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "the second Lock did not wait");
    gw.call("/v3/lock/unlock", json!({"key": held["key"]}))
        .await;
    let got = tokio::time::timeout(WAIT, waiter)
        .await
        .expect("the waiter got the lock")
        .unwrap();
    assert_eq!(
        unb64(&got["key"]),
        format!("gw-lock/{second:x}").into_bytes()
    );

    // Election: no leader yet, then a campaign seen by Leader and Observe.
    let none = gw
        .post("/v3/election/leader", json!({"name": b64("gw-elect")}))
        .await;
    assert_eq!(none.status, 500, "{}", none.http.body);
    assert_eq!(none.json["message"], json!("election: no leader"));
    let leader_lease = lease(30).await;
    let campaign = gw
        .call(
            "/v3/election/campaign",
            json!({"name": b64("gw-elect"), "lease": leader_lease, "value": b64("v1")}),
        )
        .await;
    let leader_key = campaign["leader"].clone();
    assert_eq!(unb64(&leader_key["name"]), b"gw-elect");
    let mut observe = gw
        .stream("/v3/election/observe", &[json!({"name": b64("gw-elect")})])
        .await;
    let seen = observe.result(WAIT).await;
    assert_eq!(unb64(&seen["kv"]["value"]), b"v1", "{seen}");
    gw.call(
        "/v3/election/proclaim",
        json!({"leader": leader_key, "value": b64("v2")}),
    )
    .await;
    let seen = observe.result(WAIT).await;
    assert_eq!(unb64(&seen["kv"]["value"]), b"v2", "{seen}");
    let leader = gw
        .call("/v3/election/leader", json!({"name": b64("gw-elect")}))
        .await;
    assert_eq!(unb64(&leader["kv"]["value"]), b"v2");
    gw.call("/v3/election/resign", json!({"leader": leader_key}))
        .await;
    let gone = gw
        .post("/v3/election/leader", json!({"name": b64("gw-elect")}))
        .await;
    assert_eq!(
        gone.json["message"],
        json!("election: no leader"),
        "{}",
        gone.http.body
    );
    let missing = gw
        .post("/v3/election/proclaim", json!({"value": b64("x")}))
        .await;
    assert_eq!(
        missing.json["message"],
        json!("\"leader\" field must be provided")
    );
    observe.disconnect().await;
}
