//! The etcd gRPC API as clients see it: one service per file, plus the error mapping
//! (`status`) and request checks (`validate`).
//!
//! Handlers translate and validate; everything they do with data goes through the
//! [`Node`](crate::node::Node) handle. Nothing here may hold logic that the raft log or
//! the store must also see.

pub mod auth;
pub mod authorized;
pub mod cluster;
pub mod codec;
pub mod compat_layer;
pub mod concurrency;
pub mod downgrade;
pub mod election;
pub mod health;
pub mod kv;
pub mod learner_gate;
pub mod lease;
pub mod lock;
pub mod maintenance;
pub mod peer_lease;
pub mod range_stream;
pub mod snapshot;
pub mod status;
pub mod validate;
pub mod watch;

use std::sync::Arc;

use tonic::service::{Routes, RoutesBuilder};
use tonic::transport::Server;
use tonic_health::pb::health_server::{Health, HealthServer};

use crate::corruption::compaction_hash::CompactionHashes;
use crate::lessor::Lessor;
use crate::membership::MemberChanges;
use crate::node::Node;
use crate::proto::etcdserverpb::auth_server::AuthServer;
use crate::proto::etcdserverpb::cluster_server::ClusterServer;
use crate::proto::etcdserverpb::kv_server::KvServer;
use crate::proto::etcdserverpb::lease_server::LeaseServer;
use crate::proto::etcdserverpb::maintenance_server::MaintenanceServer;
use crate::proto::etcdserverpb::watch_server::WatchServer;
use crate::proto::v3electionpb::election_server::ElectionServer;
use crate::proto::v3lockpb::lock_server::LockServer;

/// What the edges use besides the node: the services the server builds beside it,
/// because they call back into the node.
#[derive(Clone)]
pub struct Beside {
    /// Membership changes this member carries out while it leads, one at a time.
    pub changes: Arc<MemberChanges>,
    /// The lease timers, which act only while this member leads.
    pub lessor: Arc<Lessor>,
    /// The hashes recorded at this member's latest compactions (empty while the
    /// compaction-hash check is off).
    pub compaction_hashes: Arc<CompactionHashes>,
}

/// gRPC allows this much beyond `--max-request-bytes` for framing, as etcd does, so that
/// a too-large request is answered with etcd's own error rather than a transport one.
const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// The largest header list one request may send on the client port, HTTP/2's
/// `SETTINGS_MAX_HEADER_LIST_SIZE` (hyper's default is 16 KiB). etcd answers HTTP with
/// Go's `http.DefaultMaxHeaderBytes`, 1 MiB, and gRPC with grpc-go's 16 MiB; one limit
/// serves both here, Go's: far above what any client sends (a token is under 1 KiB),
/// and what a header block held per open stream is bounded by. Beyond it h2 answers
/// 431 and refuses the stream, or ends a connection whose header block goes on for
/// more CONTINUATION frames than the limit needs.
pub const MAX_HEADER_LIST_BYTES: u32 = 1 << 20;

/// The layers around every client RPC, from the inside out: the learner gate, etcd's
/// status rewrites, and outermost the metrics, so that they see the final status.
pub type ClientLayers = tower::layer::util::Stack<
    learner_gate::LearnerGateLayer,
    tower::layer::util::Stack<
        compat_layer::CompatLayer,
        tower::layer::util::Stack<
            crate::metrics::grpc::GrpcMetricsLayer,
            tower::layer::util::Identity,
        >,
    >,
>;

/// The layers every client RPC passes through, whether it came over the client port or
/// from the JSON gateway in process.
pub fn client_layers(node: Arc<Node>) -> ClientLayers {
    tower::ServiceBuilder::new()
        // Outermost, so that it counts every call with the status the client gets.
        .layer(crate::metrics::grpc::GrpcMetricsLayer)
        .layer(compat_layer::CompatLayer)
        .layer(learner_gate::LearnerGateLayer::new(node))
        .into_inner()
}

/// The client port's server settings and the layers every gRPC call passes through.
/// `http` also serves HTTP/1.1 (the probes, `/version`, `/metrics`, the gateway) on the
/// same listener, as etcd does unless `--listen-client-http-urls` is set.
/// `max_concurrent_streams` is `--max-concurrent-streams`: HTTP/2's
/// `SETTINGS_MAX_CONCURRENT_STREAMS`, which a client honours by holding a further
/// request until one of its streams ends, and which h2 enforces on a client that does
/// not by refusing the stream (`REFUSED_STREAM`), as grpc-go does for etcd.
pub fn client_server(
    node: Arc<Node>,
    http: bool,
    max_concurrent_streams: u32,
) -> Server<tower::layer::util::Stack<ClientLayers, tower::layer::util::Identity>> {
    Server::builder()
        .accept_http1(http)
        .max_concurrent_streams(max_concurrent_streams)
        .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
        .layer(client_layers(node))
}

/// `routes` behind the client layers as one service: what the JSON gateway calls.
pub fn client_service(node: Arc<Node>, routes: Routes) -> crate::http::gateway::ClientService {
    use tower::{Layer, ServiceExt};
    let service = ServiceExt::<http::Request<tonic::body::Body>>::map_response(
        client_layers(node).layer(routes),
        |response| response.map(tonic::body::Body::new),
    );
    tower::util::BoxCloneSyncService::new(service)
}

/// The largest gRPC message a client service decodes: `--max-request-bytes` and gRPC's
/// framing, so that a too-large request is answered with etcd's own error.
pub fn max_decoding_message_size(node: &Node) -> usize {
    node.limits()
        .max_request_bytes
        .saturating_add(GRPC_OVERHEAD_BYTES)
}

/// The client-facing gRPC routes: etcd's six services, Lock and Election, and gRPC
/// health; the server adds our admin API (src/admin) beside them.
pub fn client_routes<H: Health>(
    node: Arc<Node>,
    beside: &Beside,
    health: HealthServer<H>,
) -> RoutesBuilder {
    let max = max_decoding_message_size(&node);
    let kv = Arc::new(kv::KvService::new(node.clone()));
    let leases = Arc::new(lease::LeaseService::new(
        node.clone(),
        beside.lessor.clone(),
    ));
    // Lock and Election act through KV, Lease and Watch, as etcd's do.
    let concurrency =
        crate::api::concurrency::Services::new(node.clone(), kv.clone(), leases.clone());
    let mut routes = Routes::builder();
    routes
        .add_service(KvServer::from_arc(kv).max_decoding_message_size(max))
        .add_service(WatchServer::new(watch::WatchService::new(
            node.clone(),
            max,
        )))
        .add_service(LeaseServer::from_arc(leases).max_decoding_message_size(max))
        .add_service(
            LockServer::new(lock::LockService::new(concurrency.clone()))
                .max_decoding_message_size(max),
        )
        .add_service(
            ElectionServer::new(election::ElectionService::new(concurrency))
                .max_decoding_message_size(max),
        )
        .add_service(
            ClusterServer::new(cluster::ClusterService::new(
                node.clone(),
                beside.changes.clone(),
            ))
            .max_decoding_message_size(max),
        )
        .add_service(
            MaintenanceServer::new(maintenance::MaintenanceService::new(
                node.clone(),
                beside.clone(),
            ))
            .max_decoding_message_size(max),
        )
        .add_service(
            AuthServer::new(auth::AuthService::new(node.clone())).max_decoding_message_size(max),
        )
        .add_service(health);
    routes
}
