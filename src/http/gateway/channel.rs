//! The gateway's way into etcd's services: a gRPC client of the very tower service the
//! client port serves, called in process. Each JSON request becomes the gRPC call a Go
//! client would make (etcd's gateway is a gRPC client of its own member), so that it
//! passes the same layers (metrics, etcd's status rewrites, the learner gate), the same
//! size limits, and the same handlers, auth included. No RPC has a second
//! implementation here.
//!
//! Messages cross as `DynamicMessage`s of our own descriptors, encoded and decoded by
//! tonic's framing like any other call.

use std::convert::Infallible;

use futures::Stream;
use http::uri::PathAndQuery;
use prost::Message as _;
use prost_reflect::{DynamicMessage, MessageDescriptor};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder, Streaming};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status};
use tower::util::BoxCloneSyncService;

use crate::transport::ConnectionInfo;

/// The client port's gRPC service, every layer included.
pub type ClientService = BoxCloneSyncService<
    http::Request<tonic::body::Body>,
    http::Response<tonic::body::Body>,
    Infallible,
>;

/// What a gateway call carries from its HTTP request: the caller's token and the
/// connection it came on.
#[derive(Clone, Debug, Default)]
pub struct CallContext {
    pub metadata: MetadataMap,
    pub connection: Option<ConnectionInfo>,
}

impl CallContext {
    /// grpc-gateway's header matching: `Authorization` goes on as `authorization`,
    /// `Grpc-Metadata-<key>` as `<key>`, and permanent headers such as `Accept` as
    /// `grpcgateway-<name>`. The connection goes on without its client certificate's
    /// Common Name: as in etcd, a gateway request never authenticates as a certificate.
    pub fn of(headers: &http::HeaderMap, connection: Option<&ConnectionInfo>) -> CallContext {
        let mut metadata = MetadataMap::new();
        for (name, value) in headers {
            let Ok(value) = value.to_str() else { continue };
            let Ok(value) = MetadataValue::try_from(value) else {
                continue;
            };
            let name = name.as_str();
            let key = if name == "authorization" {
                "authorization".to_string()
            } else if let Some(key) = name.strip_prefix("grpc-metadata-") {
                key.to_string()
            } else if PERMANENT_HEADERS.contains(&name) {
                format!("grpcgateway-{name}")
            } else {
                continue;
            };
            if let Ok(key) = tonic::metadata::MetadataKey::from_bytes(key.as_bytes()) {
                metadata.append(key, value);
            }
        }
        let connection = connection.map(|info| ConnectionInfo {
            client_common_name: None,
            ..info.clone()
        });
        CallContext {
            metadata,
            connection,
        }
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        *request.metadata_mut() = self.metadata.clone();
        if let Some(connection) = &self.connection {
            request.extensions_mut().insert(connection.clone());
        }
        request
    }
}

/// HTTP headers grpc-gateway passes on with its `grpcgateway-` prefix (lowercase).
/// `Authorization` is one of them in grpc-gateway too; it goes on once, unprefixed, so
/// that no second copy of a token travels.
const PERMANENT_HEADERS: [&str; 23] = [
    "accept",
    "accept-charset",
    "accept-language",
    "accept-ranges",
    "cache-control",
    "content-type",
    "cookie",
    "date",
    "expect",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-schedule-tag-match",
    "if-unmodified-since",
    "max-forwards",
    "origin",
    "pragma",
    "referer",
    "user-agent",
    "via",
    "warning",
];

/// The in-process client.
#[derive(Clone)]
pub struct Channel {
    service: ClientService,
}

impl Channel {
    pub fn new(service: ClientService) -> Channel {
        Channel { service }
    }

    fn client(&self) -> tonic::client::Grpc<ClientService> {
        // The services bound what they receive; what they answer is the client's to
        // take whole, as etcd's gateway does (grpc.MaxCallRecvMsgSize(math.MaxInt32)).
        tonic::client::Grpc::new(self.service.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    fn path(method: &'static str) -> PathAndQuery {
        PathAndQuery::from_static(method)
    }

    pub async fn unary(
        &self,
        method: &'static str,
        context: &CallContext,
        message: DynamicMessage,
        output: MessageDescriptor,
    ) -> Result<Response<DynamicMessage>, Status> {
        let mut client = self.client();
        ready(&mut client).await?;
        client
            .unary(
                context.request(message),
                Self::path(method),
                DynamicCodec(output),
            )
            .await
    }

    pub async fn server_streaming(
        &self,
        method: &'static str,
        context: &CallContext,
        message: DynamicMessage,
        output: MessageDescriptor,
    ) -> Result<Response<Streaming<DynamicMessage>>, Status> {
        let mut client = self.client();
        ready(&mut client).await?;
        client
            .server_streaming(
                context.request(message),
                Self::path(method),
                DynamicCodec(output),
            )
            .await
    }

    pub async fn streaming(
        &self,
        method: &'static str,
        context: &CallContext,
        messages: impl Stream<Item = DynamicMessage> + Send + 'static,
        output: MessageDescriptor,
    ) -> Result<Response<Streaming<DynamicMessage>>, Status> {
        let mut client = self.client();
        ready(&mut client).await?;
        client
            .streaming(
                context.request(messages),
                Self::path(method),
                DynamicCodec(output),
            )
            .await
    }
}

async fn ready(client: &mut tonic::client::Grpc<ClientService>) -> Result<(), Status> {
    // The service is a router: it is always ready, and its error type is Infallible.
    client
        .ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))
}

/// Encodes requests as they are and decodes responses as `output`.
struct DynamicCodec(MessageDescriptor);

impl Codec for DynamicCodec {
    type Encode = DynamicMessage;
    type Decode = DynamicMessage;
    type Encoder = DynamicEncoder;
    type Decoder = DynamicDecoder;

    fn encoder(&mut self) -> DynamicEncoder {
        DynamicEncoder
    }

    fn decoder(&mut self) -> DynamicDecoder {
        DynamicDecoder(self.0.clone())
    }
}

struct DynamicEncoder;

impl Encoder for DynamicEncoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn encode(&mut self, item: DynamicMessage, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("gateway: encoding a request: {e}")))
    }
}

struct DynamicDecoder(MessageDescriptor);

impl Decoder for DynamicDecoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DynamicMessage>, Status> {
        DynamicMessage::decode(self.0.clone(), src)
            .map(Some)
            .map_err(|e| Status::internal(format!("gateway: decoding a response: {e}")))
    }
}
