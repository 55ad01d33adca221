//! `--user NAME:PASSWORD`: etcd's authentication, for `quantykube bench`,
//! `quantykube snapshot save` and `quantykube admin`.
//!
//! As etcd's Go client does, each connection asks its endpoint for a token once
//! (`Auth/Authenticate`) and sends it in the `token` gRPC metadata of every request;
//! [`AuthChannel`] wraps a connection's [`Channel`] to do so, for every client built on
//! it (every workload, setup and teardown included). A unary request refused with
//! `etcdserver: invalid auth token` (a simple token expires after the server's
//! `--auth-token-ttl` of inactivity) makes the connection authenticate again, once for
//! all the requests that met the refusal together, and is sent again, once. Streams
//! (Watch, LeaseKeepAlive) only carry the token: their requests cannot be replayed.
//!
//! This module owns the flag's syntax and the token's life. It must never print, log or
//! put into an error the password, nor a token: [`Credentials`]' `Debug` and
//! serialisation show the user name only.

use std::ffi::OsStr;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::{Either, ErrInto};
use futures::TryFutureExt;
use http_body_util::{BodyExt, Full};
use serde::{Serialize, Serializer};
use tokio::time::Instant;
use tonic::body::Body;
use tonic::transport::channel::ResponseFuture;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tower::Service;

use super::error::{code_name, AuthFailed};
use crate::proto::etcdserverpb::auth_client::AuthClient;
use crate::proto::etcdserverpb::AuthenticateRequest;
use crate::rpctypes::Recognised;

/// The gRPC metadata key etcd reads the token from (`rpctypes.TokenFieldNameGRPC`).
const TOKEN_KEY: &str = "token";
/// Methods whose requests are a stream: they get the token but are never replayed.
const STREAMING_METHODS: [&str; 2] = [
    "/etcdserverpb.Watch/Watch",
    "/etcdserverpb.Lease/LeaseKeepAlive",
];
/// After a failed re-authentication, a connection does not try again for this long
/// (the refused requests are counted as errors meanwhile).
const REAUTH_BACKOFF: Duration = Duration::from_secs(1);

/// A refused `--user` value. The messages never repeat the value (it holds a password).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UserError {
    #[error(
        "--user: expected NAME:PASSWORD (the user name, a ':' and the password); \
         the password is never prompted for"
    )]
    NoPassword,
    #[error("--user: the user name before the ':' is empty")]
    EmptyName,
    #[error("--user: not valid UTF-8")]
    NotUtf8,
}

/// A user name and password, from `--user NAME:PASSWORD`.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    name: String,
    password: String,
}

impl Credentials {
    /// Splits `NAME:PASSWORD` at the first ':' (as etcd's `strings.Cut`), so the password
    /// may hold ':' and the name may not. Unlike etcd's tools, a value without ':' is
    /// refused instead of prompting for the password.
    pub fn parse(text: &str) -> Result<Credentials, UserError> {
        let (name, password) = text.split_once(':').ok_or(UserError::NoPassword)?;
        if name.is_empty() {
            return Err(UserError::EmptyName);
        }
        Ok(Credentials {
            name: name.to_owned(),
            password: password.to_owned(),
        })
    }

    /// The user name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("name", &self.name)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Reports and parameter dumps show the user name only.
impl Serialize for Credentials {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name)
    }
}

/// clap's parser of `--user`. A value parser returning an ordinary error would make
/// clap print "invalid value '<the value>'", password included; this one's errors say
/// only what is wrong.
#[derive(Clone, Copy, Debug, Default)]
pub struct UserParser;

impl clap::builder::TypedValueParser for UserParser {
    type Value = Credentials;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<Credentials, clap::Error> {
        value
            .to_str()
            .ok_or(UserError::NotUtf8)
            .and_then(Credentials::parse)
            .map_err(|error| {
                clap::Error::raw(
                    clap::error::ErrorKind::ValueValidation,
                    format!("{error}\n"),
                )
                .format(&mut cmd.clone())
            })
    }
}

/// The token state of one connection.
#[derive(Clone)]
struct Token {
    /// Bumped at each re-authentication, so that requests refused together share one.
    generation: u64,
    value: http::HeaderValue,
}

/// One connection's authentication: its credentials and current token.
pub struct Session {
    credentials: Credentials,
    url: String,
    /// The connection, unwrapped (Authenticate carries no token).
    channel: Channel,
    timeout: Duration,
    token: RwLock<Token>,
    /// Held while re-authenticating; the instant of the last failed attempt.
    refresh: tokio::sync::Mutex<Option<Instant>>,
}

impl Session {
    /// Authenticates on `channel`. `Ok(None)` if the server has authentication off (etcd's
    /// client then sends requests without a token too).
    pub async fn open(
        channel: Channel,
        url: &str,
        credentials: &Credentials,
        timeout: Duration,
    ) -> Result<Option<Arc<Session>>, AuthFailed> {
        let failed = |status: &Status| AuthFailed {
            user: credentials.name.clone(),
            url: url.to_owned(),
            kind: format!("{}: {}", code_name(status.code()), status.message()),
        };
        let value = match authenticate(&channel, credentials, timeout).await {
            Ok(value) => value,
            Err(status) if Recognised::of(&status) == Some(Recognised::AuthNotEnabled) => {
                tracing::warn!(
                    "{url}: --user given but authentication is not enabled; requests go \
                     without a token"
                );
                return Ok(None);
            }
            Err(status) => return Err(failed(&status)),
        };
        Ok(Some(Arc::new(Session {
            credentials: credentials.clone(),
            url: url.to_owned(),
            channel,
            timeout,
            token: RwLock::new(Token {
                generation: 0,
                value,
            }),
            refresh: tokio::sync::Mutex::new(None),
        })))
    }

    fn current(&self) -> Token {
        match self.token.read() {
            Ok(token) => token.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// A token newer than generation `seen`: the one another request got meanwhile, or a
    /// new one. `None` if authenticating again failed now or less than
    /// [`REAUTH_BACKOFF`] ago.
    async fn refresh(&self, seen: u64) -> Option<Token> {
        let mut last_failure = self.refresh.lock().await;
        let current = self.current();
        if current.generation != seen {
            return Some(current);
        }
        if last_failure.is_some_and(|at| at.elapsed() < REAUTH_BACKOFF) {
            return None;
        }
        match authenticate(&self.channel, &self.credentials, self.timeout).await {
            Ok(value) => {
                *last_failure = None;
                let token = Token {
                    generation: seen.wrapping_add(1),
                    value,
                };
                match self.token.write() {
                    Ok(mut slot) => *slot = token.clone(),
                    Err(poisoned) => *poisoned.into_inner() = token.clone(),
                }
                tracing::debug!(url = %self.url, "authenticated again after an expired token");
                Some(token)
            }
            Err(status) => {
                *last_failure = Some(Instant::now());
                tracing::warn!(
                    "{}: authenticating again as user {:?} failed: {}: {}",
                    self.url,
                    self.credentials.name,
                    code_name(status.code()),
                    status.message()
                );
                None
            }
        }
    }
}

/// One `Auth/Authenticate` call; the token as a header value.
async fn authenticate(
    channel: &Channel,
    credentials: &Credentials,
    timeout: Duration,
) -> Result<http::HeaderValue, Status> {
    let request = AuthenticateRequest {
        name: credentials.name.clone(),
        password: credentials.password.clone(),
    };
    let mut client = AuthClient::new(channel.clone());
    let response = tokio::time::timeout(timeout, client.authenticate(request))
        .await
        .map_err(|_| Status::deadline_exceeded(format!("no answer within {timeout:?}")))??;
    let token = response.into_inner().token;
    let mut value = http::HeaderValue::from_str(&token)
        .map_err(|_| Status::internal("the server's token is not a valid metadata value"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// Errors of an [`AuthChannel`] request: the transport's, or the request body's.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
type BoxFuture = Pin<Box<dyn Future<Output = Result<http::Response<Body>, BoxError>> + Send>>;

/// A connection that sends its session's token with every request (and nothing without
/// a session).
#[derive(Clone)]
pub struct AuthChannel {
    inner: Channel,
    session: Option<Arc<Session>>,
}

impl AuthChannel {
    pub fn new(inner: Channel, session: Option<Arc<Session>>) -> AuthChannel {
        AuthChannel { inner, session }
    }
}

impl Service<http::Request<Body>> for AuthChannel {
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = Either<ErrInto<ResponseFuture, BoxError>, BoxFuture>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let Some(session) = self.session.clone() else {
            return Either::Left(self.inner.call(request).err_into());
        };
        // The readied channel serves this call; the clone waits for readiness itself.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Either::Right(Box::pin(send(inner, session, request)))
    }
}

/// Sends `request` with the token; a unary request refused for its token is sent once
/// more with a new token.
async fn send(
    mut inner: Channel,
    session: Arc<Session>,
    request: http::Request<Body>,
) -> Result<http::Response<Body>, BoxError> {
    let token = session.current();
    let (mut parts, body) = request.into_parts();
    parts.headers.insert(TOKEN_KEY, token.value.clone());
    if STREAMING_METHODS.contains(&parts.uri.path()) {
        return Ok(inner.call(http::Request::from_parts(parts, body)).await?);
    }
    // A unary request's body is one encoded message: kept to send it again.
    let bytes = body.collect().await?.to_bytes();
    let response = inner
        .call(http::Request::from_parts(parts.clone(), replay(&bytes)))
        .await?;
    if !refused_for_token(&response) {
        return Ok(response);
    }
    let Some(token) = session.refresh(token.generation).await else {
        return Ok(response);
    };
    parts.headers.insert(TOKEN_KEY, token.value);
    std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
    Ok(inner
        .call(http::Request::from_parts(parts, replay(&bytes)))
        .await?)
}

fn replay(bytes: &Bytes) -> Body {
    Body::new(Full::new(bytes.clone()))
}

/// True if the answer is etcd's `invalid auth token` (a unary refusal comes as a
/// trailers-only response: the status is in the headers).
fn refused_for_token<B>(response: &http::Response<B>) -> bool {
    Status::from_header_map(response.headers()).is_some_and(|s| {
        s.code() == Code::Unauthenticated
            && Recognised::of(&s) == Some(Recognised::InvalidAuthToken)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_splits_at_the_first_colon() {
        let c = Credentials::parse("root:pw").unwrap();
        assert_eq!((c.name(), c.password.as_str()), ("root", "pw"));
        // The password keeps every ':' after the first.
        let c = Credentials::parse("alice:a:b::c").unwrap();
        assert_eq!((c.name(), c.password.as_str()), ("alice", "a:b::c"));
        // An empty password is the server's to refuse.
        let c = Credentials::parse("bob:").unwrap();
        assert_eq!((c.name(), c.password.as_str()), ("bob", ""));
    }

    #[test]
    fn user_without_colon_or_name_is_refused() {
        assert_eq!(Credentials::parse("root"), Err(UserError::NoPassword));
        assert_eq!(Credentials::parse(""), Err(UserError::NoPassword));
        assert_eq!(Credentials::parse(":secret"), Err(UserError::EmptyName));
        assert!(!UserError::EmptyName.to_string().contains("secret"));
    }

    #[test]
    fn the_password_is_never_shown() {
        let c = Credentials::parse("root:s3cret:x").unwrap();
        let debug = format!("{c:?}");
        assert!(
            debug.contains("root") && !debug.contains("s3cret"),
            "{debug}"
        );
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(json, "\"root\"");
    }

    #[test]
    fn a_refused_value_is_not_echoed_by_clap() {
        #[derive(clap::Parser, Debug)]
        struct Cli {
            #[arg(long, value_parser = UserParser)]
            user: Option<Credentials>,
        }
        use clap::Parser;
        let error = Cli::try_parse_from(["x", "--user", ":s3cret"]).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("user name") && !text.contains("s3cret"),
            "{text}"
        );
        let error = Cli::try_parse_from(["x", "--user=s3cret"]).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("NAME:PASSWORD") && !text.contains("s3cret"),
            "{text}"
        );
        let cli = Cli::try_parse_from(["x", "--user", "root:a:b"]).unwrap();
        assert_eq!(cli.user, Some(Credentials::parse("root:a:b").unwrap()));
    }

    #[test]
    fn only_the_invalid_token_refusal_triggers_a_new_token() {
        let response = |code: &str, message: &str| {
            http::Response::builder()
                .header("grpc-status", code)
                .header("grpc-message", message)
                .body(())
                .unwrap()
        };
        assert!(refused_for_token(&response(
            "16",
            "etcdserver: invalid auth token"
        )));
        assert!(refused_for_token(&response(
            "16",
            "etcdserver:%20invalid%20auth%20token"
        )));
        assert!(!refused_for_token(&response(
            "16",
            "etcdserver: user name is empty"
        )));
        assert!(!refused_for_token(&response(
            "14",
            "etcdserver: invalid auth token"
        )));
        assert!(!refused_for_token(&http::Response::new(())));
    }
}
