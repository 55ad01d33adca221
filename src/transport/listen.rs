//! Listeners: every `http://`, `https://`, `unix://` and `unixs://` URL of one role
//! (peers, clients, HTTP-only clients, metrics) bound and merged into one stream of
//! ready connections (unix sockets: `unix`). A TLS
//! handshake runs on a task of its own, bounded in time, so that a slow or hostile
//! client never holds up the others; a failed one is logged with the address and the
//! reason and never reaches the server.
//!
//! This module owns sockets and handshakes. It must never look at what flows over a
//! connection once it is handed on.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::Connected;
use url::Url;

use super::certs::CertificateFacts;
use super::unix::{socket_path, NetStream, UnixSocket};
use super::TransportError;

/// etcd's `tlsHandshakeTimeout`-like bound on one handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Accepted connections waiting for the server to take them.
const BACKLOG: usize = 256;

/// One accepted connection, plain or TLS, over TCP or a unix socket.
pub enum Connection {
    Plain(NetStream),
    Tls(Box<tokio_rustls::server::TlsStream<NetStream>>),
}

/// What the server may know of a connection.
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    /// None over a unix socket.
    pub remote_addr: Option<SocketAddr>,
    /// The Common Name of the client certificate the handshake verified, if any: with
    /// `--client-cert-auth`, the user a request without a token acts as.
    pub client_common_name: Option<String>,
    /// Whether the connection is TLS (etcd's `req.TLS != nil`).
    pub tls: bool,
}

impl Connected for Connection {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        let (stream, client_common_name) = match self {
            Connection::Plain(stream) => (stream, None),
            Connection::Tls(tls) => {
                let (stream, session) = tls.get_ref();
                // rustls hands out peer certificates only once its verifier accepted
                // the chain, so the first one is a verified leaf.
                let common_name = session
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(|leaf| CertificateFacts::parse(leaf.as_ref()))
                    .and_then(|facts| facts.common_name);
                (stream, common_name)
            }
        };
        ConnectionInfo {
            remote_addr: stream.peer_addr(),
            client_common_name,
            tls: matches!(self, Connection::Tls(_)),
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Connection::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Connection::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Connection::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Connection::Plain(s) => s.is_write_vectored(),
            Connection::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_flush(cx),
            Connection::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Connection::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A bound socket.
enum Socket {
    Tcp(TcpListener),
    Unix(UnixSocket),
}

impl Socket {
    async fn accept(&self) -> io::Result<(NetStream, Option<SocketAddr>)> {
        match self {
            Socket::Tcp(listener) => {
                let (tcp, remote) = listener.accept().await?;
                // Go (and so etcd) disables Nagle's algorithm on every TCP connection;
                // without it a small gRPC response can wait for the client's delayed ACK.
                if let Err(error) = tcp.set_nodelay(true) {
                    tracing::debug!(%error, "cannot set TCP_NODELAY on an accepted connection");
                }
                Ok((NetStream::Tcp(tcp), Some(remote)))
            }
            Socket::Unix(socket) => {
                let (unix, _) = socket.listener.accept().await?;
                Ok((NetStream::Unix(unix), None))
            }
        }
    }
}

/// How one bound socket hands out connections.
struct Bound {
    url: Url,
    listener: Socket,
    tls: Option<TlsAcceptor>,
    /// etcd's `checkSAN`: a client certificate with addresses must name the address it
    /// connects from.
    check_client_san: bool,
}

/// A role's listeners, bound; connections flow once [`Listeners::incoming`] is called.
pub struct Listeners {
    bound: Vec<Bound>,
}

/// The TLS a URL of the `https` scheme is served with.
#[derive(Clone)]
pub struct ServerTls {
    pub config: Arc<rustls::ServerConfig>,
    pub check_client_san: bool,
}

impl Listeners {
    /// Binds every URL (a host may resolve to several addresses: etcd listens on what
    /// `localhost` resolves to). `https` URLs need `tls`.
    pub async fn bind(urls: &[Url], tls: Option<&ServerTls>) -> Result<Listeners, TransportError> {
        let mut bound = Vec::new();
        for url in urls {
            let secure = matches!(url.scheme(), "https" | "unixs");
            let tls = match (secure, tls) {
                (false, _) => None,
                (true, Some(tls)) => Some(tls),
                (true, None) => return Err(TransportError::NoCertificate(url.to_string())),
            };
            let acceptor = tls.map(|t| TlsAcceptor::from(t.config.clone()));
            let check_client_san = tls.is_some_and(|t| t.check_client_san);
            if matches!(url.scheme(), "unix" | "unixs") {
                let path = socket_path(url);
                let socket = UnixSocket::bind(&path).map_err(|source| TransportError::Listen {
                    url: url.to_string(),
                    source,
                })?;
                tracing::info!(%url, path = %socket.path().display(), tls = secure, "listening");
                bound.push(Bound {
                    url: url.clone(),
                    listener: Socket::Unix(socket),
                    tls: acceptor,
                    check_client_san,
                });
                continue;
            }
            let host = url
                .host_str()
                .unwrap_or("localhost")
                .trim_matches(['[', ']']);
            let port = url.port().unwrap_or(if secure { 443 } else { 80 });
            let listen_error = |source| TransportError::Listen {
                url: url.to_string(),
                source,
            };
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
                .await
                .map_err(listen_error)?
                .collect();
            let before = bound.len();
            let mut last_error = None;
            for addr in addrs {
                match TcpListener::bind(addr).await {
                    Ok(listener) => {
                        tracing::info!(%url, %addr, tls = secure, "listening");
                        bound.push(Bound {
                            url: url.clone(),
                            listener: Socket::Tcp(listener),
                            tls: acceptor.clone(),
                            check_client_san,
                        });
                    }
                    Err(error) => last_error = Some(error),
                }
            }
            if bound.len() == before {
                return Err(listen_error(
                    last_error.unwrap_or_else(|| io::Error::other("no address")),
                ));
            }
        }
        Ok(Listeners { bound })
    }

    /// Starts accepting: one stream of ready connections from every listener. Dropping
    /// the stream closes the listeners.
    pub fn incoming(self) -> Incoming {
        let (tx, rx) = mpsc::channel(BACKLOG);
        let tasks = self
            .bound
            .into_iter()
            .map(|bound| tokio::spawn(accept_loop(bound, tx.clone())))
            .collect();
        Incoming { rx, tasks }
    }
}

/// Ready connections; see [`Listeners::incoming`].
pub struct Incoming {
    rx: mpsc::Receiver<io::Result<Connection>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Stream for Incoming {
    type Item = io::Result<Connection>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn accept_loop(bound: Bound, ready: mpsc::Sender<io::Result<Connection>>) {
    let bound = Arc::new(bound);
    loop {
        let (stream, remote) = match bound.listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors, or a connection reset before accept: keep serving.
                tracing::warn!(url = %bound.url, %error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match &bound.tls {
            None => {
                if ready.send(Ok(Connection::Plain(stream))).await.is_err() {
                    return;
                }
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let ready = ready.clone();
                let bound = bound.clone();
                tokio::spawn(async move {
                    match handshake(&acceptor, stream, remote, bound.check_client_san).await {
                        Ok(tls) => {
                            let _ = ready.send(Ok(Connection::Tls(Box::new(tls)))).await;
                        }
                        Err(reason) => tracing::warn!(
                            url = %bound.url,
                            remote = %remote.map_or_else(|| "unix socket".to_string(), |r| r.to_string()),
                            %reason,
                            "rejected connection"
                        ),
                    }
                });
            }
        }
    }
}

async fn handshake(
    acceptor: &TlsAcceptor,
    stream: NetStream,
    remote: Option<SocketAddr>,
    check_client_san: bool,
) -> Result<tokio_rustls::server::TlsStream<NetStream>, String> {
    let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| format!("TLS handshake timed out after {HANDSHAKE_TIMEOUT:?}"))?
        .map_err(|e| format!("TLS handshake error: {}", describe(&e)))?;
    // Peers only, and peers are TCP: a unix socket has no address to check.
    if let (true, Some(remote)) = (check_client_san, remote) {
        let leaf = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|der| CertificateFacts::parse(der));
        if let Some(facts) = leaf {
            check_san(&facts, remote).await?;
        }
    }
    Ok(tls)
}

/// etcd's `checkCertSAN`: a certificate with no addresses passes; one with IP
/// addresses must include the remote IP; one with DNS names passes when a name
/// resolves to it (etcd also tries a reverse lookup of the remote address; this does
/// not).
async fn check_san(facts: &CertificateFacts, remote: SocketAddr) -> Result<(), String> {
    if facts.ip_addresses.is_empty() && facts.dns_names.is_empty() {
        return Ok(());
    }
    let ip = remote.ip();
    if facts.ip_addresses.contains(&ip) {
        return Ok(());
    }
    for name in facts.dns_names.iter().filter(|n| !n.starts_with("*.")) {
        if let Ok(mut addrs) = tokio::net::lookup_host((name.as_str(), 0)).await {
            if addrs.any(|a| a.ip() == ip) {
                return Ok(());
            }
        }
    }
    Err(format!(
        "tls: client certificate is not valid for {ip} (IP addresses {:?}, DNS names {:?})",
        facts.ip_addresses, facts.dns_names
    ))
}

/// A handshake failure in words an operator can act on (etcd's where it has them).
fn describe(error: &io::Error) -> String {
    use rustls::CertificateError as Cert;
    let Some(tls) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return error.to_string();
    };
    match tls {
        rustls::Error::NoCertificatesPresented => "client presented no certificate".into(),
        rustls::Error::InvalidCertificate(cert) => {
            let what = match cert {
                Cert::UnknownIssuer => "signed by an unknown issuer (not the trusted CA)".into(),
                Cert::Expired | Cert::ExpiredContext { .. } => "certificate has expired".into(),
                Cert::NotValidYet | Cert::NotValidYetContext { .. } => {
                    "certificate is not yet valid".into()
                }
                Cert::Revoked => "certificate is revoked by the CRL file".into(),
                Cert::ApplicationVerificationFailure => {
                    "client certificate authentication failed (its CN or host names are not \
                     allowed)"
                        .into()
                }
                Cert::InvalidPurpose | Cert::InvalidPurposeContext { .. } => {
                    "its extended key usage does not allow client authentication".into()
                }
                // Our own refusals (`anchors::Refusal`) and webpki's catch-all.
                Cert::Other(other) => other.to_string(),
                other => format!("{other:?}"),
            };
            format!("failed to verify client certificate: {what}")
        }
        other => other.to_string(),
    }
}
