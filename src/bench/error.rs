//! The two kinds of failure the bench knows: one operation failing ([`OpError`], counted
//! by kind and reported) and the bench itself failing ([`BenchError`], which stops it).
//!
//! This module owns the wording of error kinds, the keys of the report's `errors`
//! object: a gRPC failure is `<Code>: <message>`, e.g.
//! `Unavailable: etcdserver: leader changed`. It must never decide what to do about an
//! error; the driver and the workloads do.

use std::time::Duration;

use crate::client::{code_name, ClientError};

/// One operation (one request, or one read-then-write sequence) that failed.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The server (or the transport) answered with a gRPC status.
    #[error("{}: {}", code_name(.0.code()), .0.message())]
    Rpc(tonic::Status),
    /// No answer within the request timeout.
    #[error("Timeout: no {0} within {1:?}")]
    Timeout(&'static str, Duration),
    /// The server answered something the workload cannot use, e.g. a keepalive for a
    /// lease it no longer has.
    #[error("{0}")]
    Protocol(&'static str),
}

impl OpError {
    /// The key under which this error is counted in the report.
    pub fn kind(&self) -> String {
        self.to_string()
    }

    /// True if repeating the operation cannot succeed: the server does not implement
    /// the RPC. The driver stops the run at the first such error instead of counting
    /// thousands of them.
    pub fn is_fatal(&self) -> bool {
        matches!(self, OpError::Rpc(status) if status.code() == tonic::Code::Unimplemented)
    }
}

impl From<tonic::Status> for OpError {
    fn from(status: tonic::Status) -> Self {
        OpError::Rpc(status)
    }
}

/// A failure that stops the bench before or instead of a report.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A flag value that cannot work; reported like a usage error.
    #[error("{0}")]
    Usage(String),
    /// No endpoint answered `Maintenance.Status` as the leader.
    #[error("--target-leader: no leader found among the endpoints: {0}")]
    NoLeader(String),
    /// An endpoint, a TLS file or `--user` that does not work (the client library's
    /// words: a bad endpoint is a usage error, see [`BenchError::usage`]).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The latency histogram could not be created (only with impossible bounds).
    #[error("cannot create a latency histogram: {0}")]
    Histogram(String),
    /// The tokio runtime, or the open loop's pacer thread, could not start.
    #[error("cannot start a thread: {0}")]
    Runtime(#[from] std::io::Error),
}

impl BenchError {
    /// The message of a usage error (exit code 2): a bad flag value, the bench's own or
    /// one the client library refused.
    pub fn usage(&self) -> Option<&str> {
        match self {
            BenchError::Usage(message) | BenchError::Client(ClientError::Usage(message)) => {
                Some(message)
            }
            _ => None,
        }
    }
}
