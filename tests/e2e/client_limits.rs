//! What one client can use of a member's client port (docs/security.md, "Limits on
//! what one client can use"): `--max-concurrent-streams` as HTTP/2's concurrent-stream
//! limit, tried as a client library meets it; the watchers one Watch stream may hold;
//! the size of a request's headers. Each time another client is still served.

use quantykube::proto::etcdserverpb::kv_client::KvClient;
use quantykube::proto::etcdserverpb::watch_client::WatchClient;
use quantykube::proto::etcdserverpb::watch_request::RequestUnion;
use quantykube::proto::etcdserverpb::{
    PutRequest, RangeRequest, WatchCancelRequest, WatchCreateRequest, WatchRequest, WatchResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::Streaming;

use crate::harness::*;
use crate::support::connect::CONNECT_TIMEOUT;

/// One HTTP/2 connection to `endpoint`, with no per-request deadline: a request held
/// by the stream limit waits as long as the limit holds it.
async fn one_connection(endpoint: &str) -> Channel {
    Endpoint::from_shared(endpoint.to_owned())
        .expect("endpoint URL")
        .connect_timeout(CONNECT_TIMEOUT)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {endpoint}: {e}"))
}

/// An open Watch stream: its request sender (dropping both ends resets the stream).
struct OpenWatch {
    _requests: mpsc::Sender<WatchRequest>,
    responses: Streaming<WatchResponse>,
}

impl OpenWatch {
    /// Opens a Watch on `channel` for `key` and waits for etcd's "created" answer.
    async fn open(channel: &Channel, key: &str) -> OpenWatch {
        let (tx, rx) = mpsc::channel(4);
        tx.send(WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: key.to_owned().into(),
                ..Default::default()
            })),
        })
        .await
        .expect("queue the create request");
        let mut responses = tokio::time::timeout(
            RPC_TIMEOUT,
            WatchClient::new(channel.clone()).watch(ReceiverStream::new(rx)),
        )
        .await
        .expect("a watch stream opens in time")
        .expect("open a watch stream")
        .into_inner();
        let created = tokio::time::timeout(RPC_TIMEOUT, responses.message())
            .await
            .expect("the watch is created in time")
            .expect("a created answer")
            .expect("the stream is open");
        assert!(created.created, "{created:?}");
        OpenWatch {
            _requests: tx,
            responses,
        }
    }

    /// The next event's key.
    async fn next_key(&mut self) -> String {
        let answer = tokio::time::timeout(RPC_TIMEOUT, self.responses.message())
            .await
            .expect("an event in time")
            .expect("an event")
            .expect("the stream is open");
        lossy(&answer.events[0].kv.as_ref().expect("a kv").key)
    }
}

/// etcd's `--max-concurrent-streams` is HTTP/2's `SETTINGS_MAX_CONCURRENT_STREAMS` on
/// the client port: with it at 3 and three Watch streams open on one connection, a
/// fourth RPC on that connection is held by the client library until a stream ends,
/// while another connection is served at once.
#[tokio::test]
async fn a_fourth_stream_on_one_connection_waits_for_one_of_three_to_end() {
    let cluster = ClusterOptions::new(1)
        .args(["--max-concurrent-streams", "3"])
        .start()
        .await;
    let endpoint = cluster.endpoint(0);
    let crowded = one_connection(&endpoint).await;
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(OpenWatch::open(&crowded, "seen").await);
    }

    // The fourth: a Put on the crowded connection.
    let fourth = {
        let mut kv = KvClient::new(crowded.clone());
        tokio::spawn(async move {
            kv.put(PutRequest {
                key: "fourth".into(),
                value: "x".into(),
                ..Default::default()
            })
            .await
        })
    };

    // Another connection is served while the fourth waits: its Put reaches the three
    // watches of the crowded connection, so that connection's streams are all served
    // too; the fourth Put, sent earlier, has still not been applied.
    let mut other = cluster.client(0).await;
    other
        .put("seen", "1", None)
        .await
        .expect("put on another connection");
    for watch in &mut watches {
        assert_eq!(watch.next_key().await, "seen");
    }
    let fourth_key = other.get("fourth", None).await.expect("get");
    assert!(
        fourth_key.kvs().is_empty(),
        "the fourth RPC was served while three streams were open"
    );
    assert!(!fourth.is_finished(), "the fourth RPC ended: {fourth:?}");

    // One stream ends: the fourth is sent and served.
    drop(watches.pop());
    let put = tokio::time::timeout(RPC_TIMEOUT, fourth)
        .await
        .expect("the fourth RPC is served once a stream ended")
        .expect("the task")
        .expect("the fourth put");
    assert!(put.into_inner().header.is_some());
    assert_eq!(
        keys(&other.get("fourth", None).await.expect("get")),
        ["fourth"]
    );
    // The limit is per connection: a new one opens three watches of its own.
    let fresh = one_connection(&endpoint).await;
    for _ in 0..3 {
        OpenWatch::open(&fresh, "seen").await;
    }
}

/// A Watch stream a test drives request by request.
struct RawWatch {
    requests: mpsc::Sender<WatchRequest>,
    responses: Streaming<WatchResponse>,
}

impl RawWatch {
    async fn open(channel: &Channel) -> RawWatch {
        let (requests, rx) = mpsc::channel(1024);
        let responses = WatchClient::new(channel.clone())
            .max_decoding_message_size(usize::MAX)
            .watch(ReceiverStream::new(rx))
            .await
            .expect("open a watch stream")
            .into_inner();
        RawWatch {
            requests,
            responses,
        }
    }

    async fn create(&self, key: Vec<u8>) {
        self.requests
            .send(WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                    key: key.into(),
                    ..Default::default()
                })),
            })
            .await
            .expect("send a create");
    }

    async fn cancel(&self, watch_id: i64) {
        self.requests
            .send(WatchRequest {
                request_union: Some(RequestUnion::CancelRequest(WatchCancelRequest { watch_id })),
            })
            .await
            .expect("send a cancel");
    }

    async fn next(&mut self) -> WatchResponse {
        tokio::time::timeout(RPC_TIMEOUT, self.responses.message())
            .await
            .expect("a response in time")
            .expect("a response")
            .expect("the stream is open")
    }
}

/// QuantyKube's bound on what one Watch stream's watchers hold
/// (`MAX_WATCHED_KEY_BYTES_PER_STREAM`, 64 MiB of keys; etcd has none): a create
/// beyond it is answered as etcd answers a create it cannot serve, created and
/// canceled with a reason, and the stream, its watchers and other clients go on.
#[tokio::test]
async fn a_stream_holds_watched_keys_up_to_its_limit() {
    if Target::from_env() == Target::Etcd {
        eprintln!("skipped against etcd 3.4: it holds any number of watchers on a stream");
        return;
    }
    let cluster = Cluster::start(1).await;
    let channel = one_connection(&cluster.endpoint(0)).await;
    let mut stream = RawWatch::open(&channel).await;
    let big = |i: u8| {
        let mut key = vec![b'w', i];
        key.resize(1 << 20, b'.');
        key
    };
    for i in 0..64 {
        stream.create(big(i)).await;
        let created = stream.next().await;
        assert!(created.created && !created.canceled, "{i}: {created:?}");
    }
    for key in [big(64), b"small".to_vec()] {
        stream.create(key).await;
        let refused = stream.next().await;
        assert!(refused.created && refused.canceled, "{refused:?}");
        assert_eq!(refused.watch_id, -1);
        assert_eq!(
            refused.cancel_reason,
            "quantykube: too many watchers on the WatchStream"
        );
    }
    // Another client is served, and the stream's watchers still see events.
    let mut other = cluster.client(0).await;
    other
        .put(big(3), "seen", None)
        .await
        .expect("put on another connection");
    let event = stream.next().await;
    assert_eq!(event.watch_id, 3, "{:?}", event.header);
    assert_eq!(event.events.len(), 1);
    // A cancel makes room again.
    stream.cancel(0).await;
    assert!(stream.next().await.canceled);
    stream.create(b"small".to_vec()).await;
    let created = stream.next().await;
    assert!(created.created && !created.canceled, "{created:?}");
}

/// QuantyKube's bound on how many watchers one Watch stream holds
/// (`MAX_WATCHERS_PER_STREAM`, 10000; etcd has none).
#[tokio::test]
async fn a_stream_holds_watchers_up_to_its_limit() {
    if Target::from_env() == Target::Etcd {
        eprintln!("skipped against etcd 3.4: it holds any number of watchers on a stream");
        return;
    }
    const LIMIT: usize = 10_000;
    let cluster = Cluster::start(1).await;
    let channel = one_connection(&cluster.endpoint(0)).await;
    let mut stream = RawWatch::open(&channel).await;
    let sender = stream.requests.clone();
    // All the creates at once, the answers read meanwhile.
    let sending = tokio::spawn(async move {
        for i in 0..=LIMIT {
            let create = WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                    key: format!("w/{i}").into_bytes().into(),
                    ..Default::default()
                })),
            };
            if sender.send(create).await.is_err() {
                return;
            }
        }
    });
    for i in 0..LIMIT {
        let created = stream.next().await;
        assert!(created.created && !created.canceled, "{i}: {created:?}");
    }
    let refused = stream.next().await;
    assert!(refused.created && refused.canceled, "{refused:?}");
    assert_eq!(
        refused.cancel_reason,
        "quantykube: too many watchers on the WatchStream"
    );
    sending.await.expect("the sender");
    let mut other = cluster.client(0).await;
    other.put("w/7", "seen", None).await.expect("put");
    let event = stream.next().await;
    assert_eq!(event.watch_id, 7);
}

/// A Range on a connection of its own, with a `x-padding` header of `bytes` bytes.
async fn range_with_header(endpoint: &str, bytes: usize) -> Result<(), tonic::Status> {
    let mut kv = KvClient::new(one_connection(endpoint).await);
    let mut request = tonic::Request::new(RangeRequest {
        key: "k".into(),
        ..Default::default()
    });
    request.set_timeout(RPC_TIMEOUT);
    let padding =
        tonic::metadata::MetadataValue::try_from("p".repeat(bytes)).expect("a header value");
    request.metadata_mut().insert("x-padding", padding);
    tokio::time::timeout(RPC_TIMEOUT, kv.range(request))
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("no answer"))?
        .map(drop)
}

/// The header list a request may send: QuantyKube's `MAX_HEADER_LIST_BYTES` (1 MiB,
/// Go's limit on etcd's HTTP surface), etcd's gRPC surface grpc-go's 16 MiB. Over
/// either the request is refused, and other clients are served.
#[tokio::test]
async fn headers_over_the_limit_are_refused_and_others_are_served() {
    let cluster = Cluster::start(1).await;
    let endpoint = cluster.endpoint(0);
    let mut other = cluster.client(0).await;
    // Far above hyper's default of 16 KiB, within both limits.
    range_with_header(&endpoint, 512 << 10)
        .await
        .expect("a 512 KiB header is taken");
    let over_ours = range_with_header(&endpoint, 2 << 20).await;
    match cluster.target() {
        Target::Quantykube => assert!(over_ours.is_err(), "a 2 MiB header was taken"),
        Target::Etcd => over_ours.expect("etcd takes a 2 MiB header"),
    }
    other.put("after-2MiB", "x", None).await.expect("a put");
    let over_both = range_with_header(&endpoint, 17 << 20).await;
    assert!(over_both.is_err(), "a 17 MiB header was taken");
    other.put("after-17MiB", "x", None).await.expect("a put");
}
