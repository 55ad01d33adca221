//! etcd's JSON gateway (grpc-gateway 1.9, as etcd 3.4 serves it): every RPC of KV,
//! Watch, Lease, Cluster, Maintenance, Auth, Lock and Election over HTTP/1.1 at etcd's
//! paths (`routes`), with JSON as etcd writes and reads it (`jsonpb`, `go_json`),
//! errors in grpc-gateway's shapes (`response`), and streams as chunked responses that
//! last as long as the client keeps the connection.
//!
//! Every request becomes the gRPC call a Go client of this member would make, made in
//! process through the client port's own service stack (`channel`): this module
//! translates, it never implements an RPC and never touches the node.

mod channel;
pub mod go_json;
pub mod jsonpb;
mod response;
pub mod routes;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, BodyDataStream};
use axum::http::{Method, Request, Response, StatusCode};
use axum::routing::any;
use axum::Router;
use bytes::Bytes;
use futures::StreamExt;
use prost_reflect::{DynamicMessage, MessageDescriptor};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

pub use channel::ClientService;
use channel::{CallContext, Channel};
use go_json::stream::{Next, ValueStream};
use routes::{Route, Shape, PREFIXES, ROUTES};

use crate::transport::ConnectionInfo;

/// A text quoted as Go's `%q` quotes it (for etcd's texts that quote a value).
pub fn go_quote(text: &str) -> String {
    go_json::quote_bytes(text.as_bytes())
}

/// A route with the descriptors of its request and response.
struct Resolved {
    route: Route,
    input: MessageDescriptor,
    output: MessageDescriptor,
}

/// The gateway of one member.
pub struct Gateway {
    channel: Channel,
    routes: HashMap<&'static str, Resolved>,
    /// The most JSON one request message may take: enough for the largest request the
    /// member accepts, base64 and escapes included.
    max_message_bytes: usize,
    /// `--gateway-body-timeout`: how long a request's body may take to arrive (a
    /// stream's, its first message), from the request's headers.
    body_timeout: Duration,
}

/// Messages a streaming body may have decoded ahead of the service taking them.
const QUEUED_REQUESTS: usize = 16;

impl Gateway {
    /// The gateway in front of `service` (the client port's gRPC service, every layer
    /// included), for requests up to `max_request_bytes` as the member takes them, whose
    /// bodies arrive within `body_timeout`.
    pub fn new(
        service: ClientService,
        max_request_bytes: usize,
        body_timeout: Duration,
    ) -> Gateway {
        let pool = crate::proto::descriptors();
        let routes = ROUTES
            .iter()
            .filter_map(|route| {
                let (service, method) = route.method.trim_start_matches('/').split_once('/')?;
                let method = pool
                    .get_service_by_name(service)?
                    .methods()
                    .find(|m| m.name() == method)?;
                Some((
                    route.path,
                    Resolved {
                        route: *route,
                        input: method.input(),
                        output: method.output(),
                    },
                ))
            })
            .collect();
        Gateway {
            channel: Channel::new(service),
            routes,
            max_message_bytes: max_request_bytes.saturating_mul(2).saturating_add(1 << 20),
            body_timeout,
        }
    }
}

/// The gateway's HTTP routes: everything under each version prefix.
pub fn router(gateway: Arc<Gateway>) -> Router {
    let mut router = Router::new();
    for prefix in PREFIXES {
        let root = format!("/{prefix}/");
        for pattern in [root.clone(), format!("{root}{{*path}}")] {
            let gateway = gateway.clone();
            let skip = root.len();
            router = router.route(
                &pattern,
                any(move |request: Request<Body>| serve(gateway.clone(), skip, request)),
            );
        }
    }
    router
}

async fn serve(gateway: Arc<Gateway>, skip: usize, request: Request<Body>) -> Response<Body> {
    let path = request.uri().path().get(skip..).unwrap_or("");
    let Some(resolved) = gateway.routes.get(path) else {
        super::drain(request.into_body(), super::DRAIN_BYTES).await;
        return response::go_text_error(StatusCode::NOT_FOUND);
    };
    if request.method() != Method::POST {
        super::drain(request.into_body(), super::DRAIN_BYTES).await;
        return response::go_text_error(StatusCode::METHOD_NOT_ALLOWED);
    }
    let context = CallContext::of(
        request.headers(),
        request.extensions().get::<ConnectionInfo>(),
    );
    let mut body = Body::new(request.into_body()).into_data_stream();
    let mut values = ValueStream::default();
    // A body that never ends, or comes a byte at a time, holds its request only this
    // long; the stream of a streaming call is as long-lived as its client wants.
    let deadline = tokio::time::Instant::now() + gateway.body_timeout;
    let first = tokio::time::timeout_at(
        deadline,
        next_value(&mut body, &mut values, gateway.max_message_bytes),
    )
    .await
    .unwrap_or_else(|_| {
        tracing::debug!(
            method = resolved.route.method,
            timeout = ?gateway.body_timeout,
            "gateway request body timed out"
        );
        Err(BodyError::TimedOut(gateway.body_timeout))
    });
    match resolved.route.shape {
        Shape::Unary | Shape::ServerStream => {
            // What follows the first value is ignored, but read (see `drain`), until
            // the deadline: the answer does not wait for a body that never ends.
            let _ = tokio::time::timeout_at(
                deadline,
                super::drain_stream(&mut body, super::DRAIN_BYTES),
            )
            .await;
            let message = match first.and_then(|value| decode(value, &resolved.input)) {
                Ok(message) => message,
                Err(BodyError::Json(text)) => return response::bad_request(text),
                Err(BodyError::TooLarge(status)) => return response::error(&status),
                Err(BodyError::TimedOut(after)) => return response::bad_request(timed_out(after)),
            };
            if resolved.route.shape == Shape::Unary {
                unary(&gateway, resolved, &context, message).await
            } else {
                let call = gateway.channel.server_streaming(
                    resolved.route.method,
                    &context,
                    message,
                    resolved.output.clone(),
                );
                relay(call.await).await
            }
        }
        Shape::BidiStream => {
            // The stream's first message fails as grpc-gateway passes the decoder's
            // error on: not a gRPC status, so `Unknown`. An empty body sends nothing.
            let first = match first
                .map(|value| value.map(|text| jsonpb::decode(&text, &resolved.input)))
            {
                Ok(None) => None,
                Ok(Some(Ok(message))) => Some(message),
                Ok(Some(Err(text))) | Err(BodyError::Json(text)) => {
                    return response::error(&Status::unknown(text))
                }
                Err(BodyError::TooLarge(status)) => return response::error(&status),
                Err(BodyError::TimedOut(after)) => return response::bad_request(timed_out(after)),
            };
            let (requests, queue) = mpsc::channel(QUEUED_REQUESTS);
            match first {
                Some(first) => {
                    let _ = requests.try_send(first);
                    tokio::spawn(feed(
                        body,
                        values,
                        requests,
                        resolved.input.clone(),
                        gateway.max_message_bytes,
                    ));
                }
                // The client's side of the stream is over before it began.
                None => drop(requests),
            }
            let call = gateway.channel.streaming(
                resolved.route.method,
                &context,
                ReceiverStream::new(queue),
                resolved.output.clone(),
            );
            relay(call.await).await
        }
    }
}

enum BodyError {
    /// Go's decoder error text.
    Json(String),
    TooLarge(Status),
    /// The body (or its first message) had not arrived by `--gateway-body-timeout`.
    TimedOut(Duration),
}

/// What a body that did not arrive in time is answered with: grpc-gateway answers a
/// body it could not read with `InvalidArgument` and the read's error (for Go's read
/// deadline, `i/o timeout`).
fn timed_out(after: Duration) -> String {
    format!("request body not received within {after:?}: i/o timeout")
}

/// The body's next JSON value; `None` when it ended with no more (an empty body is an
/// empty request, as in etcd).
async fn next_value(
    body: &mut BodyDataStream,
    values: &mut ValueStream,
    limit: usize,
) -> Result<Option<Vec<u8>>, BodyError> {
    loop {
        match values.next(false) {
            Next::Value(value) => return Ok(Some(value)),
            Next::Error(text) => return Err(BodyError::Json(text)),
            Next::End | Next::NeedMore => {}
        }
        if values.pending() > limit {
            return Err(BodyError::TooLarge(Status::resource_exhausted(format!(
                "grpc: received message larger than max ({} vs. {limit})",
                values.pending()
            ))));
        }
        match body.next().await {
            Some(Ok(chunk)) => values.push(&chunk),
            // A body that breaks off ends where it broke.
            Some(Err(_)) | None => {
                return match values.next(true) {
                    Next::Value(value) => Ok(Some(value)),
                    Next::Error(text) => Err(BodyError::Json(text)),
                    Next::End | Next::NeedMore => Ok(None),
                }
            }
        }
    }
}

fn decode(value: Option<Vec<u8>>, input: &MessageDescriptor) -> Result<DynamicMessage, BodyError> {
    match value {
        None => Ok(DynamicMessage::new(input.clone())),
        Some(text) => jsonpb::decode(&text, input).map_err(BodyError::Json),
    }
}

/// Sends a streaming body's later messages on, until it ends, fails to decode (the
/// stream then just stops sending, as grpc-gateway's does), or the call is over.
async fn feed(
    mut body: BodyDataStream,
    mut values: ValueStream,
    requests: mpsc::Sender<DynamicMessage>,
    input: MessageDescriptor,
    limit: usize,
) {
    loop {
        let message = match next_value(&mut body, &mut values, limit).await {
            Ok(Some(text)) => jsonpb::decode(&text, &input),
            Ok(None) | Err(_) => return,
        };
        let Ok(message) = message else { return };
        tokio::select! {
            sent = requests.send(message) => if sent.is_err() { return },
            () = requests.closed() => return,
        }
    }
}

async fn unary(
    gateway: &Gateway,
    resolved: &Resolved,
    context: &CallContext,
    message: DynamicMessage,
) -> Response<Body> {
    let call = gateway.channel.unary(
        resolved.route.method,
        context,
        message,
        resolved.output.clone(),
    );
    match call.await {
        Ok(answer) => response::message(answer.get_ref()),
        Err(status) => response::error(&status),
    }
}

/// A streaming call's answer as grpc-gateway's `ForwardResponseStream` gives it: the
/// HTTP status waits for the first message (an error before any is the error's status),
/// then one chunk per message, flushed as it comes, and an error chunk if the stream
/// fails.
async fn relay(
    call: Result<tonic::Response<tonic::codec::Streaming<DynamicMessage>>, Status>,
) -> Response<Body> {
    let mut stream = match call {
        Ok(answer) => answer.into_inner(),
        Err(status) => return response::error(&status),
    };
    let first = match stream.next().await {
        None => return response::stream(StatusCode::OK, Body::empty()),
        Some(Err(status)) => {
            return response::stream(
                response::http_status(status.code()),
                Body::from(response::stream_error(&status)),
            )
        }
        Some(Ok(message)) => response::stream_result(&message),
    };
    let rest = futures::stream::unfold(Some(stream), |state| async move {
        let mut stream = state?;
        match stream.next().await {
            Some(Ok(message)) => Some((response::stream_result(&message), Some(stream))),
            Some(Err(status)) => Some((response::stream_error(&status), None)),
            None => None,
        }
    });
    let chunks = futures::stream::once(async move { first })
        .chain(rest)
        .map(|chunk| Ok::<_, Infallible>(Bytes::from(chunk)));
    response::stream(StatusCode::OK, Body::from_stream(chunks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_names_a_method_of_our_descriptors() {
        let pool = crate::proto::descriptors();
        for route in ROUTES {
            let (service, method) = route.method[1..].split_once('/').unwrap();
            let service = pool
                .get_service_by_name(service)
                .unwrap_or_else(|| panic!("{}: no service", route.method));
            let method = service
                .methods()
                .find(|m| m.name() == method)
                .unwrap_or_else(|| panic!("{}: no method", route.method));
            let streams = (method.is_client_streaming(), method.is_server_streaming());
            let expected = match route.shape {
                Shape::Unary => (false, false),
                Shape::ServerStream => (false, true),
                Shape::BidiStream => (true, true),
            };
            assert_eq!(streams, expected, "{}", route.method);
        }
    }
}
