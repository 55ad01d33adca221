//! gRPC server metrics as go-grpc-prometheus names them (what etcd exports), counted by
//! a tower layer outside every other layer of the client router, so that it sees each
//! call's final status: `grpc_server_started_total` when a call arrives,
//! `grpc_server_handled_total` with the code a call ended with (from a trailers-only
//! response's headers, from the trailers at a stream's end, `Canceled` when the client
//! went away first), `grpc_server_msg_received_total` / `_msg_sent_total` per message,
//! `grpc_server_handling_seconds` (etcd has it with `--metrics=extensive` only), and
//! etcd's `etcd_network_client_grpc_{received,sent}_bytes_total` (message bytes) and
//! `etcd_server_client_requests_total` (by kind and the client's `client-api-version`).
//! Also etcd's `etcd_network_server_stream_failures_total`, counted by the Watch and
//! LeaseKeepAlive streams themselves ([`stream_receive_failed`]).
//!
//! Series exist for every method the client port serves, every code at zero, as
//! go-grpc-prometheus pre-registers them; a path no service serves is not counted.
//! Every series is resolved once, so a call costs a path match and atomic increments.
//! The layer never changes a request, a response or a status.

use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use prometheus::core::Collector;
use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec, Registry};
use quantykube_raft::metrics::{counter, counter_vec, histogram_vec};
use tokio::time::Instant;

/// gRPC's codes by number, named as grpc-go's `codes.Code.String()` names them.
pub const CODE_NAMES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];
const CANCELED: usize = 1;
const UNKNOWN: usize = 2;

const UNARY: &str = "unary";
const SERVER_STREAM: &str = "server_stream";
const BIDI_STREAM: &str = "bidi_stream";

/// Every RPC the client port serves: (service, method, go-grpc-prometheus type).
pub const METHODS: [(&str, &str, &str); 61] = [
    ("etcdserverpb.KV", "Range", UNARY),
    ("etcdserverpb.KV", "RangeStream", SERVER_STREAM),
    ("etcdserverpb.KV", "Put", UNARY),
    ("etcdserverpb.KV", "DeleteRange", UNARY),
    ("etcdserverpb.KV", "Txn", UNARY),
    ("etcdserverpb.KV", "Compact", UNARY),
    ("etcdserverpb.Watch", "Watch", BIDI_STREAM),
    ("etcdserverpb.Lease", "LeaseGrant", UNARY),
    ("etcdserverpb.Lease", "LeaseRevoke", UNARY),
    ("etcdserverpb.Lease", "LeaseKeepAlive", BIDI_STREAM),
    ("etcdserverpb.Lease", "LeaseTimeToLive", UNARY),
    ("etcdserverpb.Lease", "LeaseLeases", UNARY),
    ("etcdserverpb.Cluster", "MemberAdd", UNARY),
    ("etcdserverpb.Cluster", "MemberRemove", UNARY),
    ("etcdserverpb.Cluster", "MemberUpdate", UNARY),
    ("etcdserverpb.Cluster", "MemberList", UNARY),
    ("etcdserverpb.Cluster", "MemberPromote", UNARY),
    ("etcdserverpb.Maintenance", "Alarm", UNARY),
    ("etcdserverpb.Maintenance", "Status", UNARY),
    ("etcdserverpb.Maintenance", "Defragment", UNARY),
    ("etcdserverpb.Maintenance", "Hash", UNARY),
    ("etcdserverpb.Maintenance", "HashKV", UNARY),
    ("etcdserverpb.Maintenance", "Snapshot", SERVER_STREAM),
    ("etcdserverpb.Maintenance", "MoveLeader", UNARY),
    ("etcdserverpb.Auth", "AuthEnable", UNARY),
    ("etcdserverpb.Auth", "AuthDisable", UNARY),
    ("etcdserverpb.Auth", "Authenticate", UNARY),
    ("etcdserverpb.Auth", "UserAdd", UNARY),
    ("etcdserverpb.Auth", "UserGet", UNARY),
    ("etcdserverpb.Auth", "UserList", UNARY),
    ("etcdserverpb.Auth", "UserDelete", UNARY),
    ("etcdserverpb.Auth", "UserChangePassword", UNARY),
    ("etcdserverpb.Auth", "UserGrantRole", UNARY),
    ("etcdserverpb.Auth", "UserRevokeRole", UNARY),
    ("etcdserverpb.Auth", "RoleAdd", UNARY),
    ("etcdserverpb.Auth", "RoleGet", UNARY),
    ("etcdserverpb.Auth", "RoleList", UNARY),
    ("etcdserverpb.Auth", "RoleDelete", UNARY),
    ("etcdserverpb.Auth", "RoleGrantPermission", UNARY),
    ("etcdserverpb.Auth", "RoleRevokePermission", UNARY),
    ("v3lockpb.Lock", "Lock", UNARY),
    ("v3lockpb.Lock", "Unlock", UNARY),
    ("v3electionpb.Election", "Campaign", UNARY),
    ("v3electionpb.Election", "Proclaim", UNARY),
    ("v3electionpb.Election", "Leader", UNARY),
    ("v3electionpb.Election", "Observe", SERVER_STREAM),
    ("v3electionpb.Election", "Resign", UNARY),
    ("quantykube.admin.v1.Admin", "GetMember", UNARY),
    ("quantykube.admin.v1.Admin", "ListMembers", UNARY),
    ("quantykube.admin.v1.Admin", "CreateMember", UNARY),
    ("quantykube.admin.v1.Admin", "UpdateMember", UNARY),
    ("quantykube.admin.v1.Admin", "DeleteMember", UNARY),
    ("quantykube.admin.v1.Admin", "PromoteMember", UNARY),
    ("quantykube.admin.v1.Admin", "ElectMember", UNARY),
    ("quantykube.admin.v1.Admin", "GetSnapshot", UNARY),
    ("quantykube.admin.v1.Admin", "ListSnapshots", UNARY),
    ("quantykube.admin.v1.Admin", "CreateSnapshot", UNARY),
    ("quantykube.admin.v1.Admin", "DeleteSnapshot", UNARY),
    (
        "quantykube.admin.v1.Admin",
        "DownloadSnapshot",
        SERVER_STREAM,
    ),
    ("grpc.health.v1.Health", "Check", UNARY),
    ("grpc.health.v1.Health", "Watch", SERVER_STREAM),
];

const LABELS: [&str; 3] = ["grpc_type", "grpc_service", "grpc_method"];

static STARTED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "grpc_server_started_total",
        "Total number of RPCs started on the server.",
        &LABELS,
    )
});
static HANDLED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "grpc_server_handled_total",
        "Total number of RPCs completed on the server, regardless of success or failure.",
        &["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
    )
});
static RECEIVED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "grpc_server_msg_received_total",
        "Total number of RPC stream messages received on the server.",
        &LABELS,
    )
});
static SENT: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "grpc_server_msg_sent_total",
        "Total number of gRPC stream messages sent by the server.",
        &LABELS,
    )
});
static HANDLING: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram_vec(
        "grpc_server_handling_seconds",
        "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
        &LABELS,
        prometheus::DEFAULT_BUCKETS.to_vec(),
    )
});
static RECEIVED_BYTES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_network_client_grpc_received_bytes_total",
        "The total number of bytes received from grpc clients.",
    )
});
static SENT_BYTES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_network_client_grpc_sent_bytes_total",
        "The total number of bytes sent to grpc clients.",
    )
});

static STREAM_FAILURES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "etcd_network_server_stream_failures_total",
        "The total number of stream failures from the local server.",
        &["Type", "API"],
    )
});

static CLIENT_REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "etcd_server_client_requests_total",
        "The total number of client requests per client version.",
        &["type", "client_api_version"],
    )
});

/// The `client-api-version` values counted under their own name (etcd's clients send
/// their `major.minor`); anything else, or none, is `unknown`, so that a client cannot
/// make the member hold a series per value it invents.
const CLIENT_API_VERSIONS: [&str; 14] = [
    "3.0", "3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12",
    "unknown",
];

/// `etcd_server_client_requests_total`'s series, each resolved on first use (etcd
/// shows a series only once a client of that version called): [unary, stream].
static CLIENT_REQUEST_SERIES: [[std::sync::OnceLock<IntCounter>; CLIENT_API_VERSIONS.len()]; 2] =
    [const { [const { std::sync::OnceLock::new() }; CLIENT_API_VERSIONS.len()] }; 2];

/// Counts one client request as etcd's interceptors do: by kind and the version the
/// client's `client-api-version` metadata names.
pub(super) fn count_client_request(streaming: bool, version: Option<&http::HeaderValue>) {
    let unknown = CLIENT_API_VERSIONS.len() - 1;
    let index = version
        .and_then(|v| {
            CLIENT_API_VERSIONS
                .iter()
                .position(|known| v.as_bytes() == known.as_bytes())
        })
        .unwrap_or(unknown);
    let kind = usize::from(streaming);
    let series = CLIENT_REQUEST_SERIES[kind][index].get_or_init(|| {
        CLIENT_REQUESTS.with_label_values(&[["unary", "stream"][kind], CLIENT_API_VERSIONS[index]])
    });
    series.inc();
}

/// The series of one method, resolved once.
pub struct Rpc {
    /// Not unary: etcd's stream interceptor counts it as a `stream` client request.
    streaming: bool,
    started: IntCounter,
    handled: [IntCounter; 17],
    received: IntCounter,
    sent: IntCounter,
    handling: Histogram,
}

static RPCS: LazyLock<Vec<Rpc>> = LazyLock::new(|| {
    METHODS
        .iter()
        .map(|(service, method, kind)| {
            let labels = [*kind, *service, *method];
            Rpc {
                streaming: *kind != UNARY,
                started: STARTED.with_label_values(&labels),
                handled: CODE_NAMES
                    .map(|code| HANDLED.with_label_values(&[*kind, *service, *method, code])),
                received: RECEIVED.with_label_values(&labels),
                sent: SENT.with_label_values(&labels),
                handling: HANDLING.with_label_values(&labels),
            }
        })
        .collect()
});

/// The client streams etcd counts the failures of, by its `API` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamApi {
    Watch,
    LeaseKeepAlive,
}

impl StreamApi {
    fn label(self) -> &'static str {
        match self {
            StreamApi::Watch => "watch",
            StreamApi::LeaseKeepAlive => "lease-keepalive",
        }
    }
}

/// A client stream's next request could not be received: counts it if it is the
/// server's failure, and says whether it is (the stream then ends with that status, as
/// etcd's does). As etcd, a stream the client ended (cancelled, past its deadline, or
/// its connection or stream torn down: a status carrying the transport's error) is not
/// a failure; one whose message did not decode or was too large is.
pub fn stream_receive_failed(api: StreamApi, status: &tonic::Status) -> bool {
    let failed = is_receive_failure(status);
    if failed {
        tracing::warn!(api = api.label(), error = %status.message(), "failed to receive a request from a gRPC stream");
        STREAM_FAILURES
            .with_label_values(&["receive", api.label()])
            .inc();
    }
    failed
}

/// Whether an error of a request stream is the server's failure to receive, not the
/// client going away: the transport's errors carry their source (hyper's, h2's), the
/// codec's own (decode, size limit) do not.
fn is_receive_failure(status: &tonic::Status) -> bool {
    use std::error::Error;
    let ended_by_client = matches!(
        status.code(),
        tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
    );
    !ended_by_client && status.source().is_none()
}

pub(super) fn register(registry: &Registry) -> prometheus::Result<()> {
    LazyLock::force(&RPCS);
    let collectors: [Box<dyn Collector>; 9] = [
        Box::new(STREAM_FAILURES.clone()),
        Box::new(CLIENT_REQUESTS.clone()),
        Box::new(STARTED.clone()),
        Box::new(HANDLED.clone()),
        Box::new(RECEIVED.clone()),
        Box::new(SENT.clone()),
        Box::new(HANDLING.clone()),
        Box::new(RECEIVED_BYTES.clone()),
        Box::new(SENT_BYTES.clone()),
    ];
    for collector in collectors {
        registry.register(collector)?;
    }
    Ok(())
}

/// The series of the RPC at `path` (`/package.Service/Method`), if the port serves it.
pub fn lookup(path: &str) -> Option<&'static Rpc> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    METHODS
        .iter()
        .position(|(s, m, _)| *s == service && *m == method)
        .and_then(|i| RPCS.get(i))
}

/// The code a `grpc-status` value names; grpc-go reads an unparsable one as Unknown.
fn code_of(value: &http::HeaderValue) -> usize {
    std::str::from_utf8(value.as_bytes())
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|code| *code < CODE_NAMES.len())
        .unwrap_or(UNKNOWN)
}

/// One call until its status is known; dropped before that, it ended as `Canceled`
/// (the client reset the stream, or the connection closed).
struct Call {
    rpc: Option<&'static Rpc>,
    started: Instant,
}

impl Call {
    fn finish(&mut self, code: usize) {
        if let Some(rpc) = self.rpc.take() {
            if let Some(handled) = rpc.handled.get(code) {
                handled.inc();
            }
            rpc.handling.observe(self.started.elapsed().as_secs_f64());
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.finish(CANCELED);
    }
}

/// Splits a stream of bytes into gRPC's length-prefixed messages (1 flag byte, 4 bytes
/// of big-endian length, the message), without copying.
#[derive(Default)]
struct Frames {
    /// Header bytes seen of the current message (0 while in a message body).
    header: u8,
    length: u32,
    remaining: u32,
    in_message: bool,
}

impl Frames {
    /// Feeds `data`; returns the messages completed in it and the message bytes in it.
    fn feed(&mut self, mut data: &[u8]) -> (u64, u64) {
        let (mut messages, mut bytes) = (0u64, 0u64);
        while !data.is_empty() {
            if self.in_message {
                let take = data.len().min(self.remaining as usize);
                data = &data[take..];
                // `take` fits: it is at most `remaining`, a u32.
                self.remaining -= take as u32;
                bytes += take as u64;
                if self.remaining == 0 {
                    self.in_message = false;
                    messages += 1;
                }
                continue;
            }
            let byte = data[0];
            data = &data[1..];
            if self.header > 0 {
                self.length = (self.length << 8) | u32::from(byte);
            }
            self.header += 1;
            if self.header == 5 {
                self.header = 0;
                if self.length == 0 {
                    messages += 1;
                } else {
                    self.in_message = true;
                    self.remaining = self.length;
                }
                self.length = 0;
            }
        }
        (messages, bytes)
    }
}

/// The layer for `client_router`; put it first, outside every other layer.
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcMetricsLayer;

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;
    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics { inner }
    }
}

#[derive(Clone, Debug)]
pub struct GrpcMetrics<S> {
    inner: S,
}

impl<S, B, R> tower::Service<http::Request<B>> for GrpcMetrics<S>
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<R>>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Response = http::Response<MeteredBody<R>>;
    type Error = S::Error;
    type Future = MeteredFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let rpc = lookup(request.uri().path());
        if let Some(rpc) = rpc {
            rpc.started.inc();
            count_client_request(rpc.streaming, request.headers().get("client-api-version"));
        }
        let request = request.map(|inner| {
            tonic::body::Body::new(CountedRequest {
                inner,
                rpc,
                frames: Frames::default(),
            })
        });
        MeteredFuture {
            inner: self.inner.call(request),
            call: rpc.map(|rpc| Call {
                rpc: Some(rpc),
                started: Instant::now(),
            }),
            rpc,
        }
    }
}

pin_project_lite::pin_project! {
    /// A request body that counts the messages and bytes a client sends.
    pub struct CountedRequest<B> {
        #[pin]
        inner: B,
        rpc: Option<&'static Rpc>,
        frames: Frames,
    }
}

impl<B: Body<Data = Bytes>> Body for CountedRequest<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let polled = ready!(this.inner.poll_frame(cx));
        if let (Some(rpc), Some(Ok(frame))) = (this.rpc, &polled) {
            if let Some(data) = frame.data_ref() {
                let (messages, bytes) = this.frames.feed(data);
                rpc.received.inc_by(messages);
                RECEIVED_BYTES.inc_by(bytes);
            }
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pin_project_lite::pin_project! {
    /// The inner service's answer, its status noted when it is trailers-only.
    pub struct MeteredFuture<F> {
        #[pin]
        inner: F,
        call: Option<Call>,
        rpc: Option<&'static Rpc>,
    }
}

impl<F, R, E> Future for MeteredFuture<F>
where
    F: Future<Output = Result<http::Response<R>, E>>,
{
    type Output = Result<http::Response<MeteredBody<R>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        let mut call = this.call.take();
        let rpc = *this.rpc;
        Poll::Ready(match result {
            Ok(response) => {
                // A trailers-only response (every error tonic or a handler returns
                // before a message) carries its status in the headers.
                if let (Some(call), Some(status)) =
                    (call.as_mut(), response.headers().get("grpc-status"))
                {
                    call.finish(code_of(status));
                }
                Ok(response.map(|inner| MeteredBody {
                    inner,
                    call,
                    rpc,
                    frames: Frames::default(),
                }))
            }
            Err(error) => {
                if let Some(call) = call.as_mut() {
                    call.finish(UNKNOWN);
                }
                Err(error)
            }
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that counts the messages and bytes sent, and notes the status
    /// in its trailers.
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        call: Option<Call>,
        rpc: Option<&'static Rpc>,
        frames: Frames,
    }
}

impl<B: Body<Data = Bytes>> Body for MeteredBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let polled = ready!(this.inner.poll_frame(cx));
        if let (Some(rpc), Some(Ok(frame))) = (this.rpc, &polled) {
            if let Some(data) = frame.data_ref() {
                let (messages, bytes) = this.frames.feed(data);
                rpc.sent.inc_by(messages);
                SENT_BYTES.inc_by(bytes);
            } else if let Some(trailers) = frame.trailers_ref() {
                if let Some(call) = this.call.as_mut() {
                    call.finish(trailers.get("grpc-status").map_or(UNKNOWN, code_of));
                }
            }
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_codec_refused_is_a_receive_failure() {
        let undecodable = tonic::Status::internal("failed to decode Protobuf message");
        assert!(is_receive_failure(&undecodable));
        let too_large = tonic::Status::out_of_range("Error, decoded message length too large");
        assert!(is_receive_failure(&too_large));
        // The client's connection went: the transport's error rides along as the source.
        let torn_down = tonic::Status::from_error(Box::new(std::io::Error::other("reset")));
        assert!(!is_receive_failure(&torn_down));
        assert!(!is_receive_failure(&tonic::Status::cancelled(
            "client went away"
        )));
        assert!(!is_receive_failure(&tonic::Status::deadline_exceeded(
            "too late"
        )));
        assert!(stream_receive_failed(StreamApi::Watch, &undecodable));
        let counted = STREAM_FAILURES
            .with_label_values(&["receive", "watch"])
            .get();
        assert!(!stream_receive_failed(StreamApi::Watch, &torn_down));
        assert_eq!(
            STREAM_FAILURES
                .with_label_values(&["receive", "watch"])
                .get(),
            counted
        );
    }

    #[test]
    fn frames_are_counted_across_chunk_boundaries() {
        let mut frames = Frames::default();
        // Two messages (3 bytes, then empty) and the start of a third, split oddly.
        let stream = [0u8, 0, 0, 0, 3, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let (a, b) = stream.split_at(3);
        let (b, c) = b.split_at(4);
        assert_eq!(frames.feed(a), (0, 0));
        assert_eq!(frames.feed(b), (0, 2));
        assert_eq!(frames.feed(c), (2, 1));
        assert_eq!(frames.feed(&[9]), (1, 1));
    }

    #[test]
    fn paths_resolve_to_their_method_and_unknown_ones_to_none() {
        assert!(lookup("/etcdserverpb.KV/Range").is_some());
        assert!(lookup("/grpc.health.v1.Health/Watch").is_some());
        assert!(lookup("/etcdserverpb.KV/Nope").is_none());
        assert!(lookup("etcdserverpb.KV/Range").is_none());
        assert_eq!(code_of(&http::HeaderValue::from_static("14")), 14);
        assert_eq!(code_of(&http::HeaderValue::from_static("99")), UNKNOWN);
    }
}
