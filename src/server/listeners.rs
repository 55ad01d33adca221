//! The listeners a member serves and the servers behind them: peers (raft, and
//! `/version` over HTTP), metrics and probes, clients (gRPC and HTTP on one port unless
//! HTTP has URLs of its own). Each server runs in one set and stops when told.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use quantykube_raft::PeerService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;
use tonic::service::Routes;
use tonic::transport::server::Connected;
use tonic_health::pb::health_server::{Health, HealthServer};
use url::Url;

use super::start::Member;
use super::{Incomings, ServerError};
use crate::api;
use crate::api::peer_lease::PeerLeaseService;
use crate::config::Config;
use crate::http::{self, Surface};
use crate::node::Node;
use crate::proto::admin_v1::admin_server::AdminServer;
use crate::transport::{Connection, Listeners, ServerTls, Transport};

/// Incoming connections of one role (peers or clients), from however many listeners.
pub type Incoming<IO> = Pin<Box<dyn Stream<Item = std::io::Result<IO>> + Send>>;

/// Binds every listener `config` names, with its TLS.
pub(super) async fn bind(
    config: &Config,
    transport: &Transport,
) -> Result<Incomings<Connection>, ServerError> {
    Ok(Incomings {
        peers: listen(&config.listen_peer_urls, transport.peer_tls.as_ref()).await?,
        clients: listen(&config.listen_client_urls, transport.client_tls.as_ref()).await?,
        client_http: listen_optional(&config.listen_client_http_urls, transport).await?,
        metrics: listen_optional(&config.listen_metrics_urls, transport).await?,
    })
}

/// Binds `urls` (https ones with `tls`) into one stream of ready connections.
async fn listen(
    urls: &[Url],
    tls: Option<&ServerTls>,
) -> Result<Incoming<Connection>, ServerError> {
    Ok(Box::pin(Listeners::bind(urls, tls).await?.incoming()))
}

/// A listener flag with no default: no URLs, no listener. Its https URLs use the
/// client side's TLS, as etcd's metrics and HTTP-only listeners do.
async fn listen_optional(
    urls: &[Url],
    transport: &Transport,
) -> Result<Option<Incoming<Connection>>, ServerError> {
    if urls.is_empty() {
        return Ok(None);
    }
    Ok(Some(listen(urls, transport.client_tls.as_ref()).await?))
}

type Served = Result<(), tonic::transport::Error>;

/// The servers of one member, stopped together.
pub(super) struct Servers {
    running: JoinSet<Served>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Servers {
    pub(super) fn new() -> Self {
        Servers {
            running: JoinSet::new(),
            stop: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Completes once `stop_accepting` was called.
    fn stopped_signal(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut told = self.stop.subscribe();
        async move {
            let _ = told.wait_for(|stop| *stop).await;
        }
    }

    /// Serves `routes` on `incoming` (gRPC, and HTTP/1.1 for the HTTP routes in it),
    /// with at most `max_concurrent_streams` HTTP/2 streams open on one connection
    /// (`None`: no limit) and the client port's header limit.
    fn spawn<IO>(
        &mut self,
        routes: Routes,
        incoming: Incoming<IO>,
        max_concurrent_streams: Option<u32>,
    ) where
        IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    {
        let stop = self.stopped_signal();
        let mut builder = tonic::transport::Server::builder()
            .http2_max_header_list_size(api::MAX_HEADER_LIST_BYTES);
        if let Some(max) = max_concurrent_streams {
            builder = builder.max_concurrent_streams(max);
        }
        self.running.spawn(async move {
            builder
                .accept_http1(true)
                .serve_with_incoming_shutdown(routes, incoming, stop)
                .await
        });
    }

    /// Raft's peer service, and the lease calls members relay to the leader (etcd's
    /// peer `/leases`); etcd's peer port answers `/version` over HTTP too (version
    /// checks between members and operators' curl).
    pub(super) fn serve_peers<IO>(
        &mut self,
        member: &Member,
        config: &Config,
        peers: Incoming<IO>,
    ) -> Result<(), ServerError>
    where
        IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    {
        let peer_service = PeerService::new(
            member.raft.clone(),
            member.node.guard().clone(),
            config.data_dir.join("snapshots").join("incoming"),
        )?;
        let peer_leases =
            PeerLeaseService::server(member.node.clone(), member.beside.lessor.clone());
        let routes = Routes::from(
            Routes::new(peer_service.into_service())
                .add_service(peer_leases)
                .into_axum_router()
                .merge(http::router(member.node.clone(), Surface::Peer, None))
                .fallback(http::fallback),
        );
        self.spawn(routes, peers, None);
        Ok(())
    }

    /// `--listen-metrics-urls`: metrics and the probes.
    pub(super) fn serve_metrics<IO>(&mut self, node: &Arc<Node>, metrics: Incoming<IO>)
    where
        IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    {
        let routes = Routes::from(
            http::router(node.clone(), Surface::Metrics, None).fallback(http::fallback),
        );
        self.spawn(routes, metrics, None);
    }

    /// The client port: etcd's gRPC services and, unless `client_http` has its own
    /// URLs, the HTTP routes (probes, `/version`, the JSON gateway) on the same port.
    pub(super) fn serve_clients<IO, H: Health>(
        &mut self,
        member: &Member,
        config: &Config,
        health: HealthServer<H>,
        clients: Incoming<IO>,
        client_http: Option<Incoming<IO>>,
    ) where
        IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    {
        let node = &member.node;
        // As etcd: HTTP shares the client URLs unless it has URLs of its own.
        let http_on_clients = client_http.is_none();
        let mut routes = {
            let mut routes = api::client_routes(node.clone(), &member.beside, health);
            // Our own admin API, beside etcd's.
            routes.add_service(
                AdminServer::new(crate::admin::AdminService::new(
                    node.clone(),
                    member.beside.changes.clone(),
                ))
                .max_decoding_message_size(api::max_decoding_message_size(node)),
            );
            routes.routes()
        };
        // The gateway calls the gRPC routes in process, through the same layers.
        let gateway = config.enable_grpc_gateway.then(|| {
            Arc::new(http::gateway::Gateway::new(
                api::client_service(node.clone(), routes.clone()),
                node.limits().max_request_bytes,
                config.gateway_body_timeout,
            ))
        });
        let client_surface = http::ClientHttp {
            gateway,
            access: Arc::new(http::Access {
                policy: config.http_access.clone(),
                refuse_gateway_common_names: config.auth.client_cert_auth
                    && config.enable_grpc_gateway,
                node: node.clone(),
            }),
        };
        if http_on_clients {
            routes = Routes::from(
                routes
                    .into_axum_router()
                    .merge(http::router(
                        node.clone(),
                        Surface::Client,
                        Some(client_surface.clone()),
                    ))
                    .fallback(http::fallback),
            );
        }
        let server =
            api::client_server(node.clone(), http_on_clients, config.max_concurrent_streams);
        let stop = self.stopped_signal();
        self.running.spawn(async move {
            server
                .serve_with_incoming_shutdown(routes.prepare(), clients, stop)
                .await
        });
        if let Some(client_http) = client_http {
            let routes = Routes::from(
                http::router(node.clone(), Surface::Client, Some(client_surface))
                    .fallback(http::fallback),
            );
            // etcd configures every client HTTP server with the flag, this one too.
            self.spawn(routes, client_http, Some(config.max_concurrent_streams));
        }
    }

    /// Completes when a server ends on its own, with how it ended; never while none
    /// runs.
    pub(super) async fn stopped(&mut self) -> Result<Served, tokio::task::JoinError> {
        match self.running.join_next().await {
            Some(result) => result,
            None => std::future::pending().await,
        }
    }

    /// Tells every server to stop accepting; they finish their connections.
    pub(super) fn stop_accepting(&self) {
        let _ = self.stop.send(true);
    }

    pub(super) async fn shutdown(mut self) {
        self.running.shutdown().await;
    }
}
