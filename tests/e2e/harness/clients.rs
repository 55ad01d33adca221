//! etcd-client connections to endpoints a test picks, with the harness's timeouts
//! (see [`crate::support::connect::Connect`]).

use etcd_client::Client;

use super::ClientTls;
use crate::support::connect::Connect;

/// Connects a client with the harness's timeouts.
pub async fn connect(endpoints: &[String]) -> Client {
    connect_tls(endpoints, None).await
}

/// Connects a client with the harness's timeouts, over TLS if `tls` is given.
pub async fn connect_tls(endpoints: &[String], tls: Option<&ClientTls>) -> Client {
    Connect::new().tls(tls).to(endpoints).await
}

/// As [`connect_tls`], answering the error instead of panicking.
pub async fn try_connect_tls(
    endpoints: &[String],
    tls: Option<&ClientTls>,
) -> Result<Client, etcd_client::Error> {
    Connect::new().tls(tls).try_to(endpoints).await
}
