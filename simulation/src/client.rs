//! etcd clients inside a simulation: the `etcd-client` crate over turmoil's TCP.
//!
//! This module owns how a client host connects to a simulated member ([`connect`],
//! with deadlines on every request and HTTP/2 keepalive, because simulated TCP never
//! retransmits and a connection can hang forever after a partition heals) and the one
//! cluster question tests ask through the API: who leads ([`leader`]). It must never
//! reach into a node's internals: whatever it learns, a real client could learn too.

use std::time::Duration;

use etcd_client::Client;
use tonic::transport::Endpoint;

use crate::error::SimError;
use crate::net;

/// Deadlines of a simulated client.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Deadline of every request; past it the outcome of a write is unknown.
    pub request_timeout: Duration,
    /// Deadline of a connection attempt.
    pub connect_timeout: Duration,
    /// HTTP/2 PING interval, and how long a PING may go unanswered before the
    /// connection is dropped and re-dialled.
    pub keepalive: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(1),
            keepalive: Duration::from_secs(1),
        }
    }
}

/// A tonic endpoint for `url` (e.g. `http://n1:2379`) with `options`' deadlines.
pub fn endpoint(url: &str, options: &ClientOptions) -> Result<Endpoint, SimError> {
    Ok(Endpoint::from_shared(url.to_owned())?
        .timeout(options.request_timeout)
        .connect_timeout(options.connect_timeout)
        .http2_keep_alive_interval(options.keepalive)
        .keep_alive_timeout(options.keepalive)
        .keep_alive_while_idle(true))
}

/// Connects an etcd client to the member at `url` with default deadlines. Must run
/// inside a turmoil host.
pub async fn connect(url: &str) -> Result<Client, SimError> {
    connect_with(url, &ClientOptions::default()).await
}

/// Connects an etcd client to the member at `url`. Must run inside a turmoil host.
pub async fn connect_with(url: &str, options: &ClientOptions) -> Result<Client, SimError> {
    let endpoint = endpoint(url, options)?;
    // The connect timeout bounds the TCP handshake only; bound the whole dial.
    let channel = tokio::time::timeout(options.connect_timeout * 2, net::connect(&endpoint))
        .await
        .map_err(|_| SimError::Timeout(format!("connecting to {url}")))??;
    Ok(Client::from_channel(etcd_client::Channel::Tonic(channel), None).await?)
}

/// The name of the leader as the member `client` is connected to sees it, or `None`
/// while it knows no leader (or the leader has not yet published its name: as in
/// etcd, MemberList shows a member's name only once it has started).
pub async fn leader(client: &mut Client) -> Result<Option<String>, SimError> {
    let leader_id = client.status().await?.leader();
    if leader_id == 0 {
        return Ok(None);
    }
    let members = client.member_list().await?;
    Ok(members
        .members()
        .iter()
        .find(|m| m.id() == leader_id && !m.name().is_empty())
        .map(|m| m.name().to_owned()))
}
