//! What the gateway answers, in grpc-gateway 1.9's shapes: a message as JSON; an error
//! as `{"error","message","code"}` with the HTTP status of its gRPC code (the HTTP twin
//! of `api::status`, grpc-gateway's `HTTPStatusFromCode`); a stream as one
//! `{"result": ...}` line per message, or `{"error": {...}}` when it fails; Go's text
//! errors for paths and methods the gateway has no route for.

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use prost_reflect::DynamicMessage;
use serde::Serialize;
use tonic::{Code, Status};

use super::jsonpb;

const JSON: &str = "application/json";

/// grpc-gateway's `HTTPStatusFromCode`.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::REQUEST_TIMEOUT,
        Code::Unknown => StatusCode::INTERNAL_SERVER_ERROR,
        Code::InvalidArgument => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        // Deliberately not 412, as grpc-gateway says.
        Code::FailedPrecondition => StatusCode::BAD_REQUEST,
        Code::Aborted => StatusCode::CONFLICT,
        Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// grpc-gateway's `errorBody`, written by jsonpb: empty strings are left out.
#[derive(Serialize)]
struct ErrorBody<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    error: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    code: i32,
}

/// grpc-gateway's `internal.StreamError`, the error of a stream that already began.
#[derive(Serialize)]
struct StreamError<'a> {
    grpc_code: i32,
    http_code: u16,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    http_status: &'a str,
}

fn with_type(mut response: Response<Body>, content_type: &'static str) -> Response<Body> {
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The metadata the gRPC response began with, as grpc-gateway forwards it.
fn with_grpc_metadata(mut response: Response<Body>) -> Response<Body> {
    response.headers_mut().insert(
        "grpc-metadata-content-type",
        HeaderValue::from_static("application/grpc"),
    );
    response
}

/// A unary call's answer.
pub fn message(message: &DynamicMessage) -> Response<Body> {
    with_grpc_metadata(with_type(
        Response::new(Body::from(jsonpb::encode(message))),
        JSON,
    ))
}

/// grpc-gateway's `DefaultHTTPError`.
pub fn error(status: &Status) -> Response<Body> {
    let body = jsonpb::encode_value(&ErrorBody {
        error: status.message(),
        message: status.message(),
        code: status.code() as i32,
    });
    let mut response = with_type(Response::new(Body::from(body)), JSON);
    *response.status_mut() = http_status(status.code());
    response
}

/// A body that is no valid request: `InvalidArgument` with Go's text, as the gateway
/// answers for a unary or server-streaming call. (A bidirectional stream's first
/// message fails as `Unknown`: grpc-gateway passes that decoder error on unwrapped.)
pub fn bad_request(text: String) -> Response<Body> {
    error(&Status::invalid_argument(text))
}

/// One message of a stream, with its line end.
pub fn stream_result(message: &DynamicMessage) -> Vec<u8> {
    let mut chunk = b"{\"result\":".to_vec();
    chunk.extend_from_slice(&jsonpb::encode(message));
    chunk.extend_from_slice(b"}\n");
    chunk
}

/// The last chunk of a stream that failed (grpc-gateway writes no line end after it).
pub fn stream_error(status: &Status) -> Vec<u8> {
    let http = http_status(status.code());
    let mut chunk = b"{\"error\":".to_vec();
    chunk.extend_from_slice(&jsonpb::encode_value(&StreamError {
        grpc_code: status.code() as i32,
        http_code: http.as_u16(),
        message: status.message(),
        http_status: http.canonical_reason().unwrap_or(""),
    }));
    chunk.push(b'}');
    chunk
}

/// A stream's response: `status`, then `body`, sent as it is produced.
pub fn stream(status: StatusCode, body: Body) -> Response<Body> {
    let mut response = with_grpc_metadata(with_type(Response::new(body), JSON));
    *response.status_mut() = status;
    response
}

/// Go's `http.Error`: the status text and a newline, as plain text.
pub fn go_text_error(status: StatusCode) -> Response<Body> {
    let text = format!("{}\n", status.canonical_reason().unwrap_or(""));
    let mut response = with_type(Response::new(Body::from(text)), "text/plain; charset=utf-8");
    response.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_errors_are_grpc_gateway_stream_errors() {
        let chunk = stream_error(&Status::not_found("etcdserver: requested lease not found"));
        assert_eq!(
            String::from_utf8(chunk).unwrap(),
            r#"{"error":{"grpc_code":5,"http_code":404,"message":"etcdserver: requested lease not found","http_status":"Not Found"}}"#
        );
    }

    #[test]
    fn codes_map_as_grpc_gateway_maps_them() {
        assert_eq!(
            http_status(Code::FailedPrecondition),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            http_status(Code::ResourceExhausted),
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(http_status(Code::Cancelled), StatusCode::REQUEST_TIMEOUT);
    }
}
