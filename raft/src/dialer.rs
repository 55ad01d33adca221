//! The seam through which every peer connection is made.
//!
//! This module owns the [`Dialer`] trait and the production [`TcpDialer`]. Production
//! dials real TCP through tonic; the turmoil simulation supplies a dialer that connects
//! over its simulated network (`Endpoint::connect_with_connector`). Nothing else in
//! this crate may open a socket: it asks a dialer.

use std::error::Error;
use std::future::Future;
use std::pin::Pin;

use tonic::transport::{Channel, Endpoint};

/// The error a dialer reports; anything that explains why the peer was not reached.
pub type DialerError = Box<dyn Error + Send + Sync + 'static>;

/// The future a [`Dialer`] returns.
pub type DialFuture = Pin<Box<dyn Future<Output = Result<Channel, DialerError>> + Send + 'static>>;

/// Turns a configured [`Endpoint`] (URL, keepalive, message limits already set) into a
/// connected [`Channel`].
///
/// An implementation should connect eagerly: the caller treats a dial error as "the
/// request was certainly not sent", which is what makes retrying a forwarded write
/// safe. The caller bounds the dial with its own timeout.
pub trait Dialer: Send + Sync + 'static {
    fn dial(&self, endpoint: Endpoint) -> DialFuture;
}

/// Dials peers over the host's TCP stack.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpDialer;

impl Dialer for TcpDialer {
    fn dial(&self, endpoint: Endpoint) -> DialFuture {
        Box::pin(async move { endpoint.connect().await.map_err(DialerError::from) })
    }
}
