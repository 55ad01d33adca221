//! Helpers every area of the end-to-end tests shares: connecting clients with the
//! harness's timeouts (`connect`), one raw unary gRPC call (`grpc`), and the check of a
//! refusal's gRPC code and message (`status`). Starting clusters is `crate::harness`'s.

pub mod connect;
pub mod grpc;
pub mod status;
