//! The checks of a refusal: its gRPC code and exact message, whether it came from a raw
//! call (`Result<_, tonic::Status>`) or from etcd-client.

#![allow(dead_code)]

use std::fmt;

/// Asserts `status` has exactly `code` and `message`; `what` names the call.
#[track_caller]
pub fn assert_code_message(status: &tonic::Status, code: tonic::Code, message: &str, what: &str) {
    assert_eq!(
        (status.code(), status.message()),
        (code, message),
        "{what}: unexpected gRPC error"
    );
}

/// Asserts a raw call failed with exactly `code` and `message`.
#[track_caller]
pub fn assert_status<T: fmt::Debug>(
    result: Result<T, tonic::Status>,
    code: tonic::Code,
    message: &str,
    what: &str,
) {
    match result {
        Ok(v) => panic!("{what}: expected {code:?} {message:?}, got success {v:?}"),
        Err(status) => assert_code_message(&status, code, message, what),
    }
}

/// The gRPC status of a failed etcd-client call (panics on success or other errors).
#[track_caller]
pub fn grpc_status<T: fmt::Debug>(result: Result<T, etcd_client::Error>) -> tonic::Status {
    match result {
        Err(etcd_client::Error::GRpcStatus(status)) => status,
        Err(other) => panic!("expected a gRPC status error, got {other:?}"),
        Ok(value) => panic!("expected a gRPC status error, got success: {value:?}"),
    }
}

/// Asserts that an etcd-client call failed with exactly `code` and `message`.
#[track_caller]
pub fn assert_grpc_error<T: fmt::Debug>(
    result: Result<T, etcd_client::Error>,
    code: tonic::Code,
    message: &str,
) {
    let status = grpc_status(result);
    assert_eq!(
        (status.code(), status.message()),
        (code, message),
        "unexpected gRPC error"
    );
}
