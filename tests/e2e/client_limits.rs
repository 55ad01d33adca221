//! What one client can use of a member's client port (docs/security.md, "Limits on
//! what one client can use"): `--max-concurrent-streams` as HTTP/2's concurrent-stream
//! limit, tried as a client library meets it, and each time with another client still
//! served.

use quantykube::proto::etcdserverpb::kv_client::KvClient;
use quantykube::proto::etcdserverpb::watch_client::WatchClient;
use quantykube::proto::etcdserverpb::watch_request::RequestUnion;
use quantykube::proto::etcdserverpb::{
    PutRequest, WatchCreateRequest, WatchRequest, WatchResponse,
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
