//! quantykube.peer.v1.PeerLease, served on the peer port: the lease calls another member
//! relays to this one as leader (etcd's peer `/leases` and `/leases/internal`).
//!
//! This module owns the leader's side of those relays. It must never authorize a caller
//! (the member the client reached did, before relaying: `api::lease`) and is never
//! served on a client port: the peer port is trusted as raft's messages are, and a
//! request from another cluster or a removed member is refused as raft's peer service
//! refuses it.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::lease::{keep_alive_on_leader, time_to_live_on_leader};
use super::status;
use crate::lessor::Lessor;
use crate::node::Node;
use crate::proto::etcdserverpb::{
    LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};
use crate::proto::peer::peer_lease_server::{PeerLease, PeerLeaseServer};

/// Keepalive answers queued for the relaying member.
const QUEUED_ANSWERS: usize = 16;

type KeepAliveStream =
    Pin<Box<dyn Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send + 'static>>;

pub struct PeerLeaseService {
    node: Arc<Node>,
    lessor: Arc<Lessor>,
}

impl PeerLeaseService {
    /// The service to route on the peer listener.
    pub fn server(node: Arc<Node>, lessor: Arc<Lessor>) -> PeerLeaseServer<Self> {
        PeerLeaseServer::new(PeerLeaseService { node, lessor })
    }

    fn admit<T>(&self, request: &Request<T>) -> Result<(), Status> {
        quantykube_raft::admit_member_request(self.node.guard(), request)
    }
}

/// Answers each relayed keepalive while this member leads; the first one it cannot
/// answer as leader ends the stream with `no leader` (the relaying member opens one to
/// the new leader).
async fn answer_keep_alives(
    node: Arc<Node>,
    lessor: Arc<Lessor>,
    mut requests: Streaming<LeaseKeepAliveRequest>,
    out: mpsc::Sender<Result<LeaseKeepAliveResponse, Status>>,
) {
    while let Some(Ok(request)) = requests.next().await {
        let answer = keep_alive_on_leader(&node, &lessor, request.id)
            .await
            .and_then(|answer| answer.ok_or_else(status::no_leader));
        let failed = answer.is_err();
        if out.send(answer).await.is_err() || failed {
            return;
        }
    }
}

#[tonic::async_trait]
impl PeerLease for PeerLeaseService {
    async fn keep_alive(
        &self,
        request: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<Response<KeepAliveStream>, Status> {
        self.admit(&request)?;
        let (out, answers) = mpsc::channel(QUEUED_ANSWERS);
        tokio::spawn(answer_keep_alives(
            self.node.clone(),
            self.lessor.clone(),
            request.into_inner(),
            out,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(answers))))
    }

    async fn time_to_live(
        &self,
        request: Request<LeaseTimeToLiveRequest>,
    ) -> Result<Response<LeaseTimeToLiveResponse>, Status> {
        self.admit(&request)?;
        if !self.lessor.ensure_leading(&self.node).await? {
            return Err(status::no_leader());
        }
        time_to_live_on_leader(&self.node, &self.lessor, request.get_ref()).map(Response::new)
    }
}
