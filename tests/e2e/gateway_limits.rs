//! What one client can use of the JSON gateway (docs/security.md, "Limits on what one
//! client can use"): a body too large, a body that never ends or never arrives, JSON
//! nested too deep; each refused with grpc-gateway's answer while another client is
//! served.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::gateway_support::{b64, Gateway};
use crate::harness::*;

/// The `host:port` of a member's client URL.
fn address(cluster: &Cluster) -> String {
    cluster
        .endpoint(0)
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

/// Reads one HTTP/1.1 answer with a `content-length` (as QuantyKube's errors have):
/// its status and its body as JSON.
async fn read_answer<R: AsyncRead + Unpin>(conn: &mut R) -> (u16, Value) {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().expect("a length"))
                .unwrap_or_else(|| panic!("no content-length in {head}"));
            if bytes.len() >= end + 4 + length {
                let status = head[9..12].parse().expect("a status");
                let body = serde_json::from_slice(&bytes[end + 4..end + 4 + length])
                    .unwrap_or(Value::Null);
                return (status, body);
            }
        }
        let n = conn.read(&mut chunk).await.expect("read the answer");
        assert!(n > 0, "connection closed before an answer: {bytes:?}");
        bytes.extend_from_slice(&chunk[..n]);
    }
}

fn post_head(address: &str, path: &str, framing: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         {framing}\r\n\r\n"
    )
}

/// An answer that must come, bounded by a limit of the member; the timeout only stops a test
/// whose member never answers (30 s).
async fn in_time<T>(answer: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), answer)
        .await
        .expect("an answer once the member's limit was reached")
}

/// A Put over the gateway, as another client makes it meanwhile.
async fn served(gateway: &Gateway, key: &str) {
    gateway.put(key, "served").await;
}

/// Both etcd and QuantyKube pass a gateway request to gRPC, whose receive limit is
/// `--max-request-bytes` + 512 KiB: beyond it, 429 with gRPC's ResourceExhausted.
#[tokio::test]
async fn a_body_beyond_the_receive_limit_is_refused_resource_exhausted() {
    let cluster = ClusterOptions::new(1)
        .args(["--max-request-bytes", "4096"])
        .start()
        .await;
    let gateway = Gateway::of(&cluster, 0);
    let value = "x".repeat(3 << 20);
    let answer = gateway
        .post(
            "/v3/kv/put",
            json!({"key": b64("big"), "value": b64(&value)}),
        )
        .await;
    assert_eq!(answer.status, 429, "{}", answer.http.body);
    assert_eq!(answer.json["code"], 8, "{}", answer.http.body);
    let message = answer.json["message"].as_str().expect("a message");
    assert!(
        message.starts_with("grpc: received message larger than max ("),
        "{message}"
    );
    served(&gateway, "after-big").await;
}

/// A body that never ends is refused once it exceeds what one request may hold,
/// while the client is still sending; etcd's gateway would buffer it all (no limit of
/// its own), so this is QuantyKube's.
#[tokio::test]
async fn a_body_that_never_ends_is_refused_once_over_the_limit() {
    if Target::from_env() == Target::Etcd {
        eprintln!("skipped against etcd 3.4: its gateway reads a JSON value without bound");
        return;
    }
    let cluster = ClusterOptions::new(1)
        .args(["--max-request-bytes", "4096"])
        .start()
        .await;
    let gateway = Gateway::of(&cluster, 0);
    let address = address(&cluster);
    let conn = TcpStream::connect(&address).await.expect("connect");
    let (mut reader, mut writer) = conn.into_split();
    let head = post_head(&address, "/v3/kv/put", "transfer-encoding: chunked");
    writer.write_all(head.as_bytes()).await.expect("send head");
    // An endless string value, chunk after chunk, until the member answers.
    let sender = tokio::spawn(async move {
        let piece = format!("{:x}\r\n{}\r\n", 8192, "A".repeat(8192));
        if writer.write_all(b"9\r\n{\"key\":\"a\r\n").await.is_err() {
            return;
        }
        while writer.write_all(piece.as_bytes()).await.is_ok() {}
    });
    // Answered while the body goes on.
    let (status, body) = in_time(read_answer(&mut reader)).await;
    sender.abort();
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["code"], 8, "{body}");
    served(&gateway, "after-endless").await;
}

/// A body that stops coming, or comes a byte at a time, holds its request until
/// `--gateway-body-timeout` (QuantyKube's own flag: etcd's HTTP server has no read
/// timeout and holds such a request forever), then gets grpc-gateway's answer to a
/// body it could not read: 400, InvalidArgument.
#[tokio::test]
async fn a_body_that_never_arrives_is_refused_after_the_body_timeout() {
    if Target::from_env() == Target::Etcd {
        eprintln!("skipped against etcd 3.4: it holds a request whose body never ends");
        return;
    }
    let cluster = ClusterOptions::new(1)
        .args(["--gateway-body-timeout", "2s"])
        .start()
        .await;
    let gateway = Gateway::of(&cluster, 0);
    let address = address(&cluster);

    // Stalled: a content-length of 100 and only the start of the value.
    let mut stalled = TcpStream::connect(&address).await.expect("connect");
    let head = post_head(&address, "/v3/kv/put", "content-length: 100");
    stalled
        .write_all(format!("{head}{{\"key\":\"").as_bytes())
        .await
        .expect("send the start");
    // A trickle: a space every 100 ms inside a chunked body, never a whole value.
    let trickle = TcpStream::connect(&address).await.expect("connect");
    let (mut trickle_reader, mut trickle_writer) = trickle.into_split();
    let head = post_head(&address, "/v3/kv/range", "transfer-encoding: chunked");
    trickle_writer
        .write_all(head.as_bytes())
        .await
        .expect("send head");
    let trickling = tokio::spawn(async move {
        let _ = trickle_writer.write_all(b"1\r\n{\r\n").await;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if trickle_writer.write_all(b"1\r\n \r\n").await.is_err() {
                return;
            }
        }
    });
    // Another client is served while both wait.
    served(&gateway, "meanwhile").await;

    // Bounded by the body timeout; 30 s only stops a member that never answers.
    let stalled = in_time(read_answer(&mut stalled)).await;
    let trickle = in_time(read_answer(&mut trickle_reader)).await;
    for (what, answer) in [("stalled", stalled), ("trickle", trickle)] {
        let (status, body) = answer;
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body["code"], 3, "{what}: {body}");
        let message = body["message"].as_str().expect("a message");
        assert!(message.ends_with("i/o timeout"), "{what}: {message}");
    }
    trickling.abort();
    served(&gateway, "after").await;
}

/// Go's JSON decoder refuses nesting beyond 10000 levels. Within it, Txns nested inside
/// Txns: etcd refuses 3000 levels by counting their operations (`--max-txn-ops`);
/// QuantyKube refuses them first, past the nesting the gRPC service decodes
/// (`jsonpb::MAX_MESSAGE_DEPTH`), instead of recursing through them. Both 400, both
/// keep serving.
#[tokio::test]
async fn json_nested_too_deep_is_refused() {
    let cluster = Cluster::start(1).await;
    let gateway = Gateway::of(&cluster, 0);
    let deep = format!("{{\"key\":{}{}}}", "[".repeat(10_001), "]".repeat(10_001));
    let answer = gateway.post_raw("/v3/kv/range", deep.as_bytes()).await;
    assert_eq!(answer.status, 400, "{}", answer.http.body);
    assert_eq!(
        answer.json["message"], "invalid character '[' exceeded max depth",
        "{}",
        answer.http.body
    );

    let inner = r#"{"success":[{"request_put":{"key":"aw==","value":"eA=="}}]}"#;
    let levels = 3000;
    let txn = format!(
        "{}{inner}{}",
        r#"{"success":[{"request_txn":"#.repeat(levels),
        "}]}".repeat(levels)
    );
    let answer = gateway.post_raw("/v3/kv/txn", txn.as_bytes()).await;
    assert_eq!(answer.status, 400, "{}", answer.http.body);
    assert_eq!(answer.json["code"], 3, "{}", answer.http.body);
    let expected = match cluster.target() {
        Target::Etcd => "etcdserver: too many operations in txn request",
        Target::Quantykube => "proto: exceeded maximum recursion depth",
    };
    assert_eq!(answer.json["message"], expected, "{}", answer.http.body);
    served(&gateway, "after-deep").await;
    assert!(gateway.revision().await >= 2);
}

/// An HTTP/1.1 `GET /version` with one header of `bytes` bytes: the answer's status, or
/// `None` if the member closed the connection without one (it may stop reading a head
/// too large, and a reset can take its answer with it).
async fn version_with_header(address: &str, bytes: usize) -> Option<u16> {
    let (mut reader, mut writer) = TcpStream::connect(address)
        .await
        .expect("connect")
        .into_split();
    let request = format!(
        "GET /version HTTP/1.1\r\nhost: {address}\r\nx-big: {}\r\nconnection: close\r\n\r\n",
        "a".repeat(bytes)
    );
    // Written while the answer is read: a member that refuses stops reading.
    let sending = tokio::spawn(async move {
        let _ = writer.write_all(request.as_bytes()).await;
        writer
    });
    let mut answer = Vec::new();
    let _ = in_time(reader.read_to_end(&mut answer)).await;
    sending.abort();
    String::from_utf8_lossy(&answer)
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|status| status.parse().ok())
}

/// An HTTP/1.1 request head is bounded as HTTP/2's header list is: etcd by Go's
/// `http.DefaultMaxHeaderBytes` (1 MiB, answered `431`), QuantyKube by hyper's read
/// buffer (about 400 KiB, also `431`). Over it the request is refused, and other
/// clients are served.
#[tokio::test]
async fn http1_heads_over_the_limit_are_refused_and_others_are_served() {
    let cluster = Cluster::start(1).await;
    let address = address(&cluster);
    let gateway = Gateway::of(&cluster, 0);
    assert_eq!(
        version_with_header(&address, 64 << 10).await,
        Some(200),
        "a 64 KiB header is taken"
    );
    let refused = version_with_header(&address, 2 << 20).await;
    assert!(
        matches!(refused, None | Some(431)),
        "a 2 MiB header: {refused:?}"
    );
    served(&gateway, "after-2MiB-head").await;
    assert_eq!(version_with_header(&address, 1 << 10).await, Some(200));
}
