//! The client library's failures, worded for people: what a flag or endpoint cannot do,
//! which TLS file is wrong, which server refused to authenticate.
//!
//! This module owns the wording of those errors and of a gRPC code (`Unavailable`, not
//! tonic's description). It must never decide what a command does about an error (exit
//! codes, retries): the commands do.

/// A failure of the client library: before a connection (a flag or an endpoint that
/// cannot work, a TLS file), or on it (a dial, authenticating).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A flag or endpoint value that cannot work; commands report it like a usage error.
    #[error("{0}")]
    Usage(String),
    /// A TLS file that cannot be read or used, or a TLS configuration tonic refuses;
    /// the message names the flag and the file.
    #[error("bad TLS configuration: {0}")]
    Tls(String),
    /// No connection to the endpoint (the message names it and says why).
    #[error("{0}")]
    Connect(String),
    /// `--user`: the server refused to authenticate (its answer, never the password).
    #[error(transparent)]
    Auth(#[from] AuthFailed),
}

/// Authentication failed: the server's words, never the password.
#[derive(Debug, thiserror::Error)]
#[error("authentication as user {user:?} failed at {url}: {kind}")]
pub struct AuthFailed {
    pub user: String,
    pub url: String,
    /// `<Code>: <message>` of the server's answer.
    pub kind: String,
}

/// The gRPC code as its name (`Unavailable`), not tonic's English description.
pub fn code_name(code: tonic::Code) -> String {
    format!("{code:?}")
}
