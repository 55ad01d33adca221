//! gRPC over turmoil's simulated TCP, both ways.
//!
//! This module owns the transport seams a QuantyKube node and its clients use inside a
//! simulation: [`SimStream`] (an accepted turmoil connection that tonic's server can
//! serve, because it implements [`Connected`]), [`listen`] (a turmoil listener as the
//! node's stream of incoming connections), [`connect`] (a tonic channel dialled over
//! turmoil) and [`SimDialer`] (the node's peer dialer). It must never open a real
//! socket, and every function here must run inside a turmoil host.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::rt::TokioIo;
use quantykube::server::Incoming;
use quantykube_raft::{DialFuture, Dialer, DialerError};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint};

/// One accepted connection on a simulated host.
pub struct SimStream {
    stream: turmoil::net::TcpStream,
    remote: SocketAddr,
}

/// What a handler can learn about a [`SimStream`]'s peer, as tonic's `TcpConnectInfo`.
#[derive(Clone, Copy, Debug)]
pub struct SimConnectInfo {
    pub remote_addr: SocketAddr,
}

impl Connected for SimStream {
    type ConnectInfo = SimConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        SimConnectInfo {
            remote_addr: self.remote,
        }
    }
}

impl AsyncRead for SimStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Listens on `port` of every address of the current host and yields each accepted
/// connection.
pub async fn listen(port: u16) -> io::Result<Incoming<SimStream>> {
    let listener = turmoil::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).await?;
    Ok(Box::pin(futures::stream::unfold(
        listener,
        |listener| async move {
            let accepted = listener
                .accept()
                .await
                .map(|(stream, remote)| SimStream { stream, remote });
            Some((accepted, listener))
        },
    )))
}

/// Connects `endpoint` (its URL names a turmoil host, e.g. `http://n1:2379`) over the
/// simulated network, honouring the endpoint's timeouts and keepalive. The channel
/// re-dials through turmoil when its connection breaks.
pub async fn connect(endpoint: &Endpoint) -> Result<Channel, tonic::transport::Error> {
    endpoint
        .connect_with_connector(tower::service_fn(|uri: Uri| async move {
            let host = uri
                .host()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "URL has no host"))?
                .to_owned();
            let port = uri.port_u16().unwrap_or(80);
            let stream = turmoil::net::TcpStream::connect((host, port)).await?;
            Ok::<_, io::Error>(TokioIo::new(stream))
        }))
        .await
}

/// Dials peers over turmoil's network: the simulation's [`Dialer`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SimDialer;

impl Dialer for SimDialer {
    fn dial(&self, endpoint: Endpoint) -> DialFuture {
        Box::pin(async move { connect(&endpoint).await.map_err(DialerError::from) })
    }
}
