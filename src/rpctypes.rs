//! etcd's errors as a client recognises them (etcd's `api/v3rpc/rpctypes`).
//!
//! A gRPC status carries only a code and a text, so a client of etcd's API can tell one
//! etcd error from another only by the text: etcd's own client library does so
//! (`rpctypes.Error` looks the text up in a table), and so do QuantyKube's three
//! clients of it, each on an answer it cannot get in any other form:
//! - the corruption check, on a peer's HashKV refusal (a remote answer);
//! - the client library, on `Authenticate` and on a request refused for its token;
//! - Lock and Election, on what their in-process KV, Lease and Watch calls answered
//!   (etcd returns those through its Go client, which turns every `etcdserver:` error
//!   into a plain error value, sent as Unknown).
//!
//! This module owns those texts and the one rule that reads them. Nothing else in the
//! crate compares a status's text. It must never decide what a server answers: the API
//! edge (`api::status`) builds statuses, from the texts named here where they are shared.

use tonic::Status;

/// An etcd error some client here acts on, recognised by its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recognised {
    /// `ErrGRPCCompacted`: the revision asked for was compacted away.
    Compacted,
    /// `ErrGRPCFutureRev`: the revision asked for is above the member's.
    FutureRevision,
    /// `ErrGRPCInvalidAuthToken`: the token expired or was never valid.
    InvalidAuthToken,
    /// `ErrGRPCAuthNotEnabled`: the Go client then goes on without a token.
    AuthNotEnabled,
}

/// The texts, etcd's own words.
pub const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
pub const FUTURE_REVISION: &str = "etcdserver: mvcc: required revision is a future revision";
pub const INVALID_AUTH_TOKEN: &str = "etcdserver: invalid auth token";
pub const AUTH_NOT_ENABLED: &str = "etcdserver: authentication is not enabled";

/// Every etcd server error starts so (`rpctypes`' table holds nothing else).
const SERVER_ERROR_PREFIX: &str = "etcdserver: ";

impl Recognised {
    const ALL: [Recognised; 4] = [
        Recognised::Compacted,
        Recognised::FutureRevision,
        Recognised::InvalidAuthToken,
        Recognised::AuthNotEnabled,
    ];

    pub fn text(self) -> &'static str {
        match self {
            Recognised::Compacted => COMPACTED,
            Recognised::FutureRevision => FUTURE_REVISION,
            Recognised::InvalidAuthToken => INVALID_AUTH_TOKEN,
            Recognised::AuthNotEnabled => AUTH_NOT_ENABLED,
        }
    }

    /// The error `status` is, as etcd's `rpctypes.Error` finds it: by its text alone
    /// (the code an etcd version sends for it has changed between releases).
    pub fn of(status: &Status) -> Option<Recognised> {
        Recognised::ALL
            .into_iter()
            .find(|known| status.message() == known.text())
    }
}

/// True if `status` is one of etcd server's own errors (`etcdserver: ...`), which etcd's
/// in-process clients turn into a plain error value; false for a transport's or
/// another library's status.
pub fn is_server_error(status: &Status) -> bool {
    status.message().starts_with(SERVER_ERROR_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn each_error_is_recognised_by_its_text_whatever_its_code() {
        for known in Recognised::ALL {
            for code in [Code::OutOfRange, Code::Unauthenticated, Code::Unknown] {
                let status = Status::new(code, known.text());
                assert_eq!(Recognised::of(&status), Some(known));
                assert!(is_server_error(&status));
            }
        }
    }

    #[test]
    fn other_answers_are_not() {
        for text in [
            "etcdserver: request timed out",
            "mvcc: required revision has been compacted",
            "etcdserver: invalid auth token ",
            "",
        ] {
            assert_eq!(Recognised::of(&Status::out_of_range(text)), None, "{text}");
        }
        assert!(!is_server_error(&Status::unavailable("transport error")));
        assert!(!is_server_error(&Status::unknown(
            "mutex: session is expired"
        )));
    }
}
