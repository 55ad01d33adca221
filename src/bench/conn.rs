//! gRPC connections to the endpoints under test, and finding the leader.
//!
//! `--conns` connections are opened lazily (the first request connects, so an endpoint
//! that is down shows up as counted `Unavailable` errors, not as a hang) and spread
//! round-robin over the endpoints, or all to the leader with `--target-leader`. Client
//! `i` uses connection `i % conns`. This module owns endpoint syntax (and so which
//! endpoints use TLS), the connection settings (dial and request timeouts, message size
//! limits, the TLS configuration of `https://` endpoints) and the leader lookup. With
//! `--user`, each connection authenticates once here, before the run, and carries its
//! token through [`AuthChannel`] (see [`super::auth`]: the one place a request is sent
//! again, after an expired token). It must never retry or count a workload's requests
//! otherwise.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

use super::auth::{AuthChannel, Credentials, Session};
use super::cli::GlobalArgs;
use super::error::{code_name, BenchError};
use super::tls::{ClientTls, TlsFiles};
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
            tls: ClientTls::from_args(args)?.map(Arc::new),
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
            .map(|url| settings.channel(url))
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
                    .await?;
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

struct Settings {
    dial_timeout: Duration,
    request_timeout: Duration,
    /// What `https://` endpoints use; `None` without TLS flags (validate() then has
    /// refused https:// endpoints).
    tls: Option<Arc<ClientTls>>,
}

impl Settings {
    /// A lazy connection to `url`. The request timeout bounds each unary call, and the
    /// opening of a stream (until the server's response headers), not a stream's life.
    fn channel(&self, url: &str) -> Result<Channel, BenchError> {
        let endpoint = Endpoint::from_shared(url.to_owned())
            .map_err(|e| BenchError::Usage(format!("endpoint {url}: {e}")))?
            .connect_timeout(self.dial_timeout)
            .timeout(self.request_timeout)
            .tcp_nodelay(true);
        let endpoint = match (&self.tls, url.starts_with("https://")) {
            (Some(tls), true) => tls.apply(endpoint, url)?,
            (None, true) => {
                return Err(BenchError::Usage(format!(
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
) -> Result<AuthChannel, String> {
    let url = normalise(endpoint, tls.requested()).map_err(|e| e.to_string())?;
    let client_tls = ClientTls::from_files(tls).map_err(|e| e.to_string())?;
    let mut channel = Endpoint::from_shared(url.clone())
        .map_err(|e| format!("{url}: {e}"))?
        .connect_timeout(dial_timeout);
    if let (Some(client_tls), true) = (&client_tls, url.starts_with("https://")) {
        channel = client_tls.apply(channel, &url).map_err(|e| e.to_string())?;
    }
    let channel = channel
        .connect()
        .await
        .map_err(|e| format!("{url}: {}", crate::transport::error_chain(&e)))?;
    let session = match user {
        Some(user) => Session::open(channel.clone(), &url, user, auth_timeout)
            .await
            .map_err(|e| e.to_string())?,
        None => None,
    };
    Ok(AuthChannel::new(channel, session))
}

/// `http://host:port`, `https://host:port` or `host:port` as a URL. A bare `host:port`
/// is `https://` when `tls` (a TLS flag is given) and `http://` otherwise, as etcd's
/// client treats an address without a scheme; an explicit scheme is kept either way.
pub fn normalise(endpoint: &str, tls: bool) -> Result<String, BenchError> {
    let expected = || {
        BenchError::Usage(format!(
            "endpoint {endpoint}: expected host:port, http://host:port or https://host:port"
        ))
    };
    let (scheme, rest) = match endpoint.split_once("://") {
        Some(("http", rest)) => ("http", rest),
        Some(("https", rest)) => ("https", rest),
        Some(("unix" | "unixs", _)) => {
            return Err(BenchError::Usage(format!(
                "endpoint {endpoint}: unix sockets are not supported by quantykube bench"
            )))
        }
        Some(_) => return Err(expected()),
        None if tls => ("https", endpoint),
        None => ("http", endpoint),
    };
    let url = format!("{scheme}://{}", rest.trim_end_matches('/'));
    let uri: http::Uri = url
        .parse()
        .map_err(|e| BenchError::Usage(format!("endpoint {endpoint}: {e}")))?;
    match uri.authority() {
        Some(authority) if authority.port_u16().is_some() && !authority.host().is_empty() => {
            Ok(url)
        }
        _ => Err(expected()),
    }
}

/// The endpoint whose Maintenance.Status reports itself as leader (`leader ==
/// header.member_id`), asking every endpoint until one does or the lookup times out.
async fn find_leader(endpoints: &[String], settings: &Settings) -> Result<String, BenchError> {
    let deadline = Instant::now() + LEADER_LOOKUP_TIMEOUT;
    let mut channels = Vec::with_capacity(endpoints.len());
    for url in endpoints {
        channels.push(settings.channel(url)?);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_normalised() {
        let plain = |e: &str| normalise(e, false).map_err(|e| e.to_string());
        assert_eq!(plain("127.0.0.1:2379").unwrap(), "http://127.0.0.1:2379");
        assert_eq!(
            plain("http://localhost:2379/").unwrap(),
            "http://localhost:2379"
        );
        assert_eq!(
            plain("https://127.0.0.1:2379").unwrap(),
            "https://127.0.0.1:2379"
        );
        assert!(plain("127.0.0.1").is_err());
        assert!(plain("https://127.0.0.1").is_err());
        assert!(plain("ftp://127.0.0.1:2379").is_err());
        assert!(plain("unix://x").unwrap_err().contains("unix sockets"));
        assert!(plain("unixs://x").unwrap_err().contains("unix sockets"));
    }

    #[test]
    fn tls_flags_make_bare_addresses_https_and_keep_schemes() {
        let tls = |e: &str| normalise(e, true).map_err(|e| e.to_string());
        assert_eq!(tls("127.0.0.1:2379").unwrap(), "https://127.0.0.1:2379");
        assert_eq!(tls("localhost:2379/").unwrap(), "https://localhost:2379");
        assert_eq!(
            tls("https://127.0.0.1:12379").unwrap(),
            "https://127.0.0.1:12379"
        );
        // etcd's client drops TLS for an explicit http://.
        assert_eq!(
            tls("http://127.0.0.1:2379").unwrap(),
            "http://127.0.0.1:2379"
        );
    }
}
