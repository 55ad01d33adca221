//! Dialing an endpoint: the connection settings (dial and request timeouts, the TLS
//! configuration of `https://` endpoints), lazy channels for a load of many connections
//! ([`Settings::lazy`]) and the one connected, authenticated channel of a
//! single-member command ([`dial`]).
//!
//! This module owns how a connection is set up. It must never retry or re-send a
//! request: only [`super::auth`] sends one again, after an expired token.

use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use super::auth::{AuthChannel, Credentials, Session};
use super::endpoints::normalise;
use super::error::ClientError;
use super::tls::{ClientTls, TlsFiles};
use crate::transport::error_chain;

/// A tonic endpoint for `url` that gives up connecting after `dial_timeout`; the
/// caller adds what else it needs (a request timeout, its own dialer).
pub fn endpoint(url: &str, dial_timeout: Duration) -> Result<Endpoint, tonic::transport::Error> {
    Ok(Endpoint::from_shared(url.to_owned())?.connect_timeout(dial_timeout))
}

/// How lazy connections are made.
pub struct Settings {
    pub dial_timeout: Duration,
    pub request_timeout: Duration,
    /// What `https://` endpoints use; `None` without TLS flags (an `https://` endpoint
    /// is then refused).
    pub tls: Option<Arc<ClientTls>>,
}

impl Settings {
    /// A lazy connection to `url` (the first request connects). The request timeout
    /// bounds each unary call, and the opening of a stream (until the server's response
    /// headers), not a stream's life.
    pub fn lazy(&self, url: &str) -> Result<Channel, ClientError> {
        let endpoint = endpoint(url, self.dial_timeout)
            .map_err(|e| ClientError::Usage(format!("endpoint {url}: {e}")))?
            .timeout(self.request_timeout)
            .tcp_nodelay(true);
        let endpoint = match (&self.tls, url.starts_with("https://")) {
            (Some(tls), true) => tls.apply(endpoint, url)?,
            (None, true) => {
                return Err(ClientError::Usage(format!(
                    "endpoint {url} uses TLS: give --cacert FILE or --insecure-skip-tls-verify"
                )))
            }
            (_, false) => endpoint,
        };
        Ok(endpoint.connect_lazy())
    }
}

/// One connection to `endpoint` as etcdctl makes it for a single-member command
/// (`snapshot save`, `quantykube admin`): its TLS flags, dial timeout and `--user`
/// (authenticated once; the token then goes with every request). Errors are for people.
pub async fn dial(
    endpoint: &str,
    tls: &TlsFiles<'_>,
    dial_timeout: Duration,
    user: Option<&Credentials>,
    auth_timeout: Duration,
) -> Result<AuthChannel, ClientError> {
    let url = normalise(endpoint, tls.requested())?;
    let client_tls = ClientTls::from_files(tls)?;
    let mut channel = self::endpoint(&url, dial_timeout)
        .map_err(|e| ClientError::Connect(format!("{url}: {e}")))?;
    if let (Some(client_tls), true) = (&client_tls, url.starts_with("https://")) {
        channel = client_tls.apply(channel, &url)?;
    }
    let channel = channel
        .connect()
        .await
        .map_err(|e| ClientError::Connect(format!("{url}: {}", error_chain(&e))))?;
    let session = match user {
        Some(user) => Session::open(channel.clone(), &url, user, auth_timeout).await?,
        None => None,
    };
    Ok(AuthChannel::new(channel, session))
}
