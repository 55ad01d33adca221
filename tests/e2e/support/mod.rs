//! Helpers every area of the end-to-end tests shares: connecting clients with the
//! harness's timeouts (`connect`), one raw unary gRPC call (`grpc`), and the check of a
//! refusal's gRPC code and message (`status`), HTTP/2 frames by hand (`h2_frames`).
//! Starting clusters is `crate::harness`'s.

pub mod connect;
pub mod grpc;
pub mod h2_frames;
pub mod status;
