//! The transport under every port: listeners for `http://`, `https://`, `unix://` and
//! `unixs://` URLs, TLS
//! with rustls (ring), built once from etcd's flags and re-reading certificates when
//! their files change, etcd's client-certificate checks, auto-TLS, and TLS on the
//! connections this member makes to other members.
//!
//! The parts, each owning one thing:
//! - `anchors`: a trusted CA file's certificates, and an anchor accepted as the peer's
//!   own certificate (a self-signed `CA:TRUE` certificate), as Go accepts it;
//! - `certs`: reading and checking certificate, key, CA and CRL files, and reloading;
//! - `auto_tls`: `--auto-tls` / `--peer-auto-tls` self-signed certificates;
//! - `server_tls`: a side's rustls server configuration and its client-certificate
//!   verifier;
//! - `listen`: binding URLs and accepting (handshaking) connections;
//! - `unix`: unix socket files (naming, stale sockets) and the TCP-or-unix stream;
//! - `dial`: TLS for outgoing connections, behind the raft crate's `Dialer` seam.
//!
//! This module never looks at requests: which service answers a connection is the
//! node's and the routers' business. The simulation injects its own streams above it.

mod anchors;
mod auto_tls;
mod certs;
mod dial;
mod listen;
mod server_tls;
mod unix;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quantykube_raft::Dialer;
use thiserror::Error;
use url::Url;

use crate::config::{Config, TlsInfo};

pub use anchors::{server_verifier, TrustAnchors};
pub use certs::read_certificates;
pub use dial::{accept_any_server, OutgoingTls, TlsDialer};
pub use listen::{Connection, ConnectionInfo, Incoming, Listeners, ServerTls};
pub use unix::{socket_path, NetStream};

/// Why a listener or a TLS configuration could not be set up. Every variant names the
/// file or URL to fix; none carries key material.
#[derive(Debug, Error)]
pub enum TransportError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error("the private key {} does not match the certificate {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("cannot generate a self-signed certificate: {0}")]
    Generate(String),
    #[error("TLS configuration: {0}")]
    Rustls(rustls::Error),
    #[error("{0} uses https, but this side has no certificate (--cert-file/--key-file, --peer-cert-file/--peer-key-file or auto-TLS)")]
    NoCertificate(String),
    #[error("cannot verify the certificate of {0}: no trusted CA file is configured for it")]
    NoTrustedCa(String),
    #[error("cannot listen on {url}: {source}")]
    Listen { url: String, source: std::io::Error },
    #[error("dial: {0}")]
    Dial(String),
}

/// An error and its sources, `: `-separated: tonic's transport errors say only
/// "transport error" at the top, and the reason (an unknown issuer, an expired
/// certificate, a refused connection) is further down.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        // An I/O error wrapping a TLS error says the same thing twice.
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// One side's TLS once auto-TLS has been applied.
#[derive(Clone, Debug)]
pub struct SideTls {
    pub info: TlsInfo,
    /// The certificate is auto-TLS's: clients are not asked for certificates, and
    /// other members' certificates are not verified (etcd's `selfCert`).
    pub self_signed: bool,
}

impl SideTls {
    /// The side's settings; with auto-TLS and no certificate given, a self-signed one
    /// made (or reused) in `fixtures` for `listen_urls`' hosts.
    pub fn resolve(
        info: &TlsInfo,
        fixtures: &Path,
        listen_urls: &[Url],
        validity_years: u64,
    ) -> Result<SideTls, TransportError> {
        if !info.auto_tls || !info.is_empty() {
            if info.auto_tls {
                tracing::warn!("ignoring auto TLS since certs given");
            }
            return Ok(SideTls {
                info: info.clone(),
                self_signed: false,
            });
        }
        let mut hosts: Vec<String> = listen_urls
            .iter()
            .filter(|u| !matches!(u.scheme(), "unix" | "unixs"))
            .filter_map(|u| u.host_str())
            .map(|h| h.trim_matches(['[', ']']).to_string())
            .collect();
        hosts.sort();
        hosts.dedup();
        let (cert, key) = auto_tls::self_cert(fixtures, &hosts, validity_years)?;
        Ok(SideTls {
            info: TlsInfo {
                cert_file: Some(cert.clone()),
                key_file: Some(key.clone()),
                client_cert_file: Some(cert),
                client_key_file: Some(key),
                ..TlsInfo::default()
            },
            self_signed: true,
        })
    }

    fn has_certificate(&self) -> bool {
        !self.info.is_empty()
    }

    fn cert_and_key(&self) -> Result<(&Path, &Path), TransportError> {
        match (&self.info.cert_file, &self.info.key_file) {
            (Some(cert), Some(key)) => Ok((cert, key)),
            _ => Err(TransportError::NoCertificate("this side".into())),
        }
    }

    /// What this member presents when it connects to this side of another member:
    /// the explicit client certificate, else the server certificate.
    fn client_cert_and_key(&self) -> Option<(&Path, &Path)> {
        match (&self.info.client_cert_file, &self.info.client_key_file) {
            (Some(cert), Some(key)) => Some((cert, key)),
            _ => self.cert_and_key().ok(),
        }
    }

    fn requires_client_certs(&self) -> bool {
        !self.self_signed && self.info.requires_client_certs()
    }
}

/// Everything the node needs from the transport: how each role's https URLs are
/// served and how each side of other members is dialled.
pub struct Transport {
    /// For `https` client, client-HTTP and metrics URLs.
    pub client_tls: Option<ServerTls>,
    /// For `https` peer URLs.
    pub peer_tls: Option<ServerTls>,
    /// Reaches other members' client URLs (the leader, for relayed requests).
    pub client_dialer: Arc<dyn Dialer>,
    /// Reaches other members' peer URLs (raft, joins).
    pub peer_dialer: Arc<dyn Dialer>,
}

/// ALPN on the client port: gRPC's HTTP/2 first, HTTP/1.1 for probes and curl.
const CLIENT_ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];
/// Peers speak gRPC; `/version` answers HTTP/1.1 too.
const PEER_ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];

impl Transport {
    /// Builds both sides from the flags: reads (and checks) every certificate file
    /// now, so that a bad one stops startup with a message naming it.
    pub fn from_config(
        config: &Config,
        base: Arc<dyn Dialer>,
    ) -> Result<Transport, TransportError> {
        // tonic's outgoing TLS builds its rustls configuration with the process default.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let policy = &config.tls.policy;
        let provider = server_tls::provider(policy);
        let fixtures = config.data_dir.join("fixtures");
        let client_listen: Vec<Url> = config
            .listen_client_urls
            .iter()
            .chain(&config.listen_client_http_urls)
            .cloned()
            .collect();
        let client = SideTls::resolve(
            &config.tls.client,
            &fixtures.join("client"),
            &client_listen,
            policy.self_signed_cert_validity_years,
        )?;
        let peer = SideTls::resolve(
            &config.tls.peer,
            &fixtures.join("peer"),
            &config.listen_peer_urls,
            policy.self_signed_cert_validity_years,
        )?;
        warn_plain_urls(&client, &client_listen, "client-url", "--client-cert-auth");
        warn_plain_urls(
            &peer,
            &config.listen_peer_urls,
            "peer-url",
            "--peer-client-cert-auth",
        );
        let server = |side: &SideTls, alpn, check_client_san| {
            if !side.has_certificate() {
                return Ok(None);
            }
            Ok::<_, TransportError>(Some(ServerTls {
                config: server_tls::server_config(side, policy, alpn)?,
                check_client_san,
            }))
        };
        let outgoing = |side: &SideTls,
                        local: Option<std::net::IpAddr>|
         -> Result<Arc<dyn Dialer>, TransportError> {
            let tls = OutgoingTls::new(side, provider.clone());
            if let Some(tls) = &tls {
                tls.check()?;
            }
            Ok(Arc::new(
                TlsDialer::new(base.clone(), tls).with_local_address(local),
            ))
        };
        if let Some(address) = config.peer_local_address {
            tracing::info!(local_addr = %address, "setting member local address");
        }
        Ok(Transport {
            // etcd's client listeners do TLS in the server, not through its
            // `transport` listener, so only peers get the address check.
            client_tls: server(&client, CLIENT_ALPN, false)?,
            peer_tls: server(&peer, PEER_ALPN, !peer.info.skip_client_san_verification)?,
            client_dialer: outgoing(&client, None)?,
            peer_dialer: outgoing(&peer, config.peer_local_address)?,
        })
    }
}

/// etcd's warnings for `http://` URLs of a side that has certificates: they are served
/// in plain text, with no client certificate asked for.
fn warn_plain_urls(side: &SideTls, urls: &[Url], field: &'static str, auth_flag: &str) {
    for url in urls
        .iter()
        .filter(|u| matches!(u.scheme(), "http" | "unix"))
    {
        if side.has_certificate() && !side.self_signed {
            tracing::warn!(
                url = %url,
                kind = field,
                "scheme is http while key and cert files are present; ignoring key and cert \
                 files for this URL"
            );
        }
        if side.info.client_cert_auth {
            tracing::warn!(
                url = %url,
                kind = field,
                "scheme is http while {auth_flag} is enabled; ignoring client cert auth for \
                 this URL"
            );
        }
    }
}
