//! Connecting to members with the harness's timeouts: etcd-client through [`Connect`]
//! (optionally logged in, over TLS, or with a polling loop's short timeouts), and a
//! plain tonic [`channel`] for raw calls.

#![allow(dead_code)]

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tonic::transport::{Channel, Endpoint};

use crate::harness::{ClientTls, RPC_TIMEOUT};

/// How long a client may take to connect to a member.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The connect and RPC timeouts of [`Connect::quick`], for polling loops.
const QUICK_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const QUICK_RPC_TIMEOUT: Duration = Duration::from_secs(2);

/// How an etcd-client connects: the harness's timeouts ([`CONNECT_TIMEOUT`],
/// [`RPC_TIMEOUT`]) or [`Connect::quick`]'s (or [`Connect::rpc_timeout`]), a login if [`Connect::user`] names one,
/// TLS if [`Connect::tls`] gives it.
#[derive(Clone, Copy, Default)]
pub struct Connect<'a> {
    quick: bool,
    rpc_timeout: Option<Duration>,
    user: Option<(&'a str, &'a str)>,
    tls: Option<&'a ClientTls>,
}

impl<'a> Connect<'a> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Short timeouts (500 ms to connect, 2 s per RPC), for polling.
    pub fn quick(mut self) -> Self {
        self.quick = true;
        self
    }

    /// `timeout` for each RPC instead (e.g. a Lock that may wait).
    pub fn rpc_timeout(mut self, timeout: Duration) -> Self {
        self.rpc_timeout = Some(timeout);
        self
    }

    /// Logs in as `name` (an Authenticate when connecting).
    pub fn user(mut self, name: &'a str, password: &'a str) -> Self {
        self.user = Some((name, password));
        self
    }

    /// Over TLS, if `tls` is given.
    pub fn tls(mut self, tls: Option<&'a ClientTls>) -> Self {
        self.tls = tls;
        self
    }

    /// etcd-client's options for this connection.
    pub fn options(&self) -> ConnectOptions {
        let (connect, rpc) = if self.quick {
            (QUICK_CONNECT_TIMEOUT, QUICK_RPC_TIMEOUT)
        } else {
            (CONNECT_TIMEOUT, RPC_TIMEOUT)
        };
        let mut options = ConnectOptions::new()
            .with_connect_timeout(connect)
            .with_timeout(self.rpc_timeout.unwrap_or(rpc));
        if let Some((name, password)) = self.user {
            options = options.with_user(name, password);
        }
        if let Some(tls) = self.tls {
            options = options.with_tls(tls.etcd_client_options());
        }
        options
    }

    /// A client of `endpoints` (etcd-client balances between them).
    pub async fn try_to<E: AsRef<str>, S: AsRef<[E]>>(
        &self,
        endpoints: S,
    ) -> Result<Client, etcd_client::Error> {
        Client::connect(endpoints, Some(self.options())).await
    }

    /// As [`Connect::try_to`], panicking on failure.
    pub async fn to<E: AsRef<str>, S: AsRef<[E]>>(&self, endpoints: S) -> Client {
        let endpoints = endpoints.as_ref();
        let named: Vec<&str> = endpoints.iter().map(AsRef::as_ref).collect();
        self.try_to(endpoints)
            .await
            .unwrap_or_else(|e| panic!("connect to {named:?}: {e}"))
    }
}

/// A tonic channel to one endpoint, with the harness's timeouts.
pub async fn channel(endpoint: &str) -> Channel {
    Endpoint::from_shared(endpoint.to_owned())
        .expect("endpoint URL")
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(RPC_TIMEOUT)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {endpoint}: {e}"))
}
