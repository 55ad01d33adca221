//! gRPC connections to the endpoints under test, and finding the leader.
//!
//! `--conns` connections are opened lazily (the first request connects, so an endpoint
//! that is down shows up as counted `Unavailable` errors, not as a hang) and spread
//! round-robin over the endpoints, or all to the leader with `--target-leader`. Client
//! `i` uses connection `i % conns`. This module owns how many connections go where,
//! the clients' message size limits and the leader lookup; endpoint syntax, dialing,
//! TLS and tokens are the client library's ([`crate::client`]). With `--user`, each
//! connection authenticates once here, before the run, and carries its token through
//! [`AuthChannel`] (see [`crate::client::auth`]: the one place a request is sent again,
//! after an expired token). It must never retry or count a workload's requests
//! otherwise.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::cli::GlobalArgs;
use super::error::BenchError;
use crate::client::endpoints::normalise;
use crate::client::{code_name, AuthChannel, ClientError, ClientTls, Session, Settings};
use crate::proto::etcdserverpb::kv_client::KvClient;
use crate::proto::etcdserverpb::lease_client::LeaseClient;
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::watch_client::WatchClient;
use crate::proto::etcdserverpb::StatusRequest;

/// Largest response the clients accept (etcd's client default, `math.MaxInt32`).
const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;
/// How long `--target-leader` keeps asking for a leader (a cluster may be electing).
const LEADER_LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
const LEADER_LOOKUP_RETRY: Duration = Duration::from_millis(200);

/// The open connections.
pub struct Connections {
    channels: Vec<AuthChannel>,
    /// The endpoints as given, normalised to URLs.
    endpoints: Vec<String>,
    /// The leader's URL, with `--target-leader`.
    leader: Option<String>,
}

impl Connections {
    /// Opens `--conns` lazy connections, after finding the leader if asked to.
    pub async fn open(args: &GlobalArgs) -> Result<Connections, BenchError> {
        let tls = args.tls_requested();
        let endpoints = args
            .endpoint_list()
            .map(|e| normalise(e, tls))
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() || args.conns == 0 {
            return Err(BenchError::Usage(
                "at least one endpoint and one connection are needed".into(),
            ));
        }
        if tls {
            for url in endpoints.iter().filter(|url| url.starts_with("http://")) {
                tracing::warn!(
                    "endpoint {url}: plaintext (http://), as in etcd's client: the TLS flags \
                     apply to https:// and host:port endpoints"
                );
            }
        }
        let settings = Settings {
            dial_timeout: args.dial_timeout.0,
            request_timeout: args.request_timeout.0,
            tls: ClientTls::from_files(&args.tls_files())?.map(Arc::new),
        };
        let leader = if args.target_leader {
            Some(find_leader(&endpoints, &settings).await?)
        } else {
            None
        };
        let targets = match &leader {
            Some(leader) => std::slice::from_ref(leader),
            None => endpoints.as_slice(),
        };
        let urls: Vec<&String> = (0..args.conns)
            .map(|i| &targets[i % targets.len()])
            .collect();
        let plain = urls
            .iter()
            .map(|url| settings.lazy(url))
            .collect::<Result<Vec<_>, _>>()?;
        let channels = match &args.user {
            None => plain
                .into_iter()
                .map(|channel| AuthChannel::new(channel, None))
                .collect(),
            // Every connection gets its own token, as each etcd client does.
            Some(credentials) => {
                let sessions =
                    futures::future::try_join_all(plain.iter().zip(&urls).map(|(channel, url)| {
                        Session::open(channel.clone(), url, credentials, settings.request_timeout)
                    }))
                    .await
                    .map_err(ClientError::from)?;
                plain
                    .into_iter()
                    .zip(sessions)
                    .map(|(channel, session)| AuthChannel::new(channel, session))
                    .collect()
            }
        };
        Ok(Connections {
            channels,
            endpoints,
            leader,
        })
    }

    /// The endpoints, normalised to `http://host:port` or `https://host:port`.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The leader's URL, with `--target-leader`.
    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }

    /// The connection of client (or stream) number `i`.
    pub fn channel(&self, i: usize) -> AuthChannel {
        self.channels[i % self.channels.len()].clone()
    }

    pub fn kv(&self, i: usize) -> KvClient<AuthChannel> {
        KvClient::new(self.channel(i)).max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    pub fn watch(&self, i: usize) -> WatchClient<AuthChannel> {
        WatchClient::new(self.channel(i)).max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    pub fn lease(&self, i: usize) -> LeaseClient<AuthChannel> {
        LeaseClient::new(self.channel(i)).max_decoding_message_size(MAX_RESPONSE_BYTES)
    }
}

/// The endpoint whose Maintenance.Status reports itself as leader (`leader ==
/// header.member_id`), asking every endpoint until one does or the lookup times out.
async fn find_leader(endpoints: &[String], settings: &Settings) -> Result<String, BenchError> {
    let deadline = Instant::now() + LEADER_LOOKUP_TIMEOUT;
    let mut channels = Vec::with_capacity(endpoints.len());
    for url in endpoints {
        channels.push(settings.lazy(url)?);
    }
    loop {
        let mut answers = Vec::with_capacity(endpoints.len());
        for (url, channel) in endpoints.iter().zip(&channels) {
            let mut client = MaintenanceClient::new(channel.clone());
            match client.status(StatusRequest {}).await {
                Ok(response) => {
                    let status = response.into_inner();
                    let member = status.header.map_or(0, |h| h.member_id);
                    if member != 0 && status.leader == member {
                        tracing::debug!(%url, member, "found the leader");
                        return Ok(url.clone());
                    }
                    answers.push(format!(
                        "{url} is member {member:x}, leader {:x}",
                        status.leader
                    ));
                }
                Err(status) => answers.push(format!(
                    "{url}: {}: {}",
                    code_name(status.code()),
                    status.message()
                )),
            }
        }
        if Instant::now() + LEADER_LOOKUP_RETRY >= deadline {
            return Err(BenchError::NoLeader(answers.join("; ")));
        }
        tokio::time::sleep(LEADER_LOOKUP_RETRY).await;
    }
}
