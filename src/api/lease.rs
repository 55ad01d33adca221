//! etcdserverpb.Lease: grants and revokes go through the log like any write;
//! keepalives and TTL questions are answered by the leader's lessor. The member a client
//! reaches authorizes the call, then, unless it leads, relays it to the leader's peer
//! port (`api::peer_lease`, etcd's peer `/leases`), where it is not authorized again: a
//! caller known only by its certificate has nothing the leader could check.
//!
//! With auth on, every call needs a user (etcd's `requireAuthInfo`), and calls that
//! touch a lease's keys need permission over them (etcd 3.6.9's `checkLeaseRenew`,
//! `checkLeaseTimeToLive`, `checkLeaseLeases`, and `checkLeasePuts` for revokes):
//! this module gathers the keys; `auth::authorize` decides.

use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use openraft::async_runtime::WatchReceiver;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::{authorized, status};
use crate::auth::{Action, Caller};
use crate::lessor::Lessor;
use crate::metrics::grpc::StreamApi;
use crate::node::Node;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_result::Result as Outcome;
use crate::proto::etcdserverpb::lease_server::Lease;
use crate::proto::etcdserverpb::{
    LeaseCheckpoint, LeaseCheckpointRequest, LeaseGrantRequest, LeaseGrantResponse,
    LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseLeasesRequest, LeaseLeasesResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, LeaseStatus, LeaseTimeToLiveRequest,
    LeaseTimeToLiveResponse,
};
use crate::proto::peer::peer_lease_client::PeerLeaseClient;

/// etcd's largest TTL, in seconds.
const MAX_TTL: i64 = 9_000_000_000;
/// Server-chosen ids that collide with a live lease are drawn again this many times.
const GRANT_ATTEMPTS: usize = 3;
/// Keepalive answers a stream queues for its client.
const QUEUED_ANSWERS: usize = 16;

type KeepAliveStream =
    Pin<Box<dyn Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send + 'static>>;

pub struct LeaseService {
    node: Arc<Node>,
    lessor: Arc<Lessor>,
    /// The low bits of the next server-chosen id.
    next_id: AtomicI64,
}

impl LeaseService {
    pub fn new(node: Arc<Node>, lessor: Arc<Lessor>) -> Self {
        // Start past anything this member chose before a restart: the applied index
        // only grows.
        let start = node
            .raft_metrics()
            .borrow_watched()
            .last_applied
            .map_or(0, |log_id| log_id.index as i64)
            << 10;
        LeaseService {
            node,
            lessor,
            next_id: AtomicI64::new(start),
        }
    }

    fn min_ttl(&self) -> i64 {
        crate::lessor::min_ttl(self.node.election_timeout())
    }

    /// A positive id unique to this member: its id's low 16 bits over a counter.
    fn choose_id(&self) -> i64 {
        let counter = self.next_id.fetch_add(1, Ordering::Relaxed) & ((1 << 47) - 1);
        let member = (self.node.id() & 0xFFFF) as i64;
        ((member << 47) | counter).max(1)
    }

    fn current_revision(&self) -> Result<i64, Status> {
        self.node
            .store()
            .current_revision()
            .map_err(status::from_store)
    }

    /// What LeaseGrant does for `caller`; also the leases the Lock and Election services
    /// grant for callers that name none.
    pub(crate) async fn grant_for(
        &self,
        caller: &Caller,
        request: LeaseGrantRequest,
    ) -> Result<LeaseGrantResponse, Status> {
        if request.ttl > MAX_TTL {
            return Err(status::lease_ttl_too_large());
        }
        let ttl = request.ttl.max(self.min_ttl());
        let chosen_by_client = request.id != 0;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let id = if chosen_by_client {
                request.id
            } else {
                self.choose_id()
            };
            let grant = CommandRequest::LeaseGrant(LeaseGrantRequest { ttl, id });
            match authorized::propose(&self.node, caller, grant, &[]).await {
                Ok(Some(Outcome::LeaseGrant(mut granted))) => {
                    granted.header = Some(self.node.header_from(granted.header));
                    return Ok(granted);
                }
                Ok(other) => {
                    return Err(status::internal("lease grant", &format!("{other:?}")));
                }
                // An id this member chose is taken (by a client's choice): draw again.
                Err(error)
                    if !chosen_by_client
                        && attempts < GRANT_ATTEMPTS
                        && error.code() == tonic::Code::FailedPrecondition => {}
                Err(error) => return Err(error),
            }
        }
    }
}

/// A keepalive answered here, on the leader: the lease's TTL, 0 if it is unknown or
/// expired, with a header at the current revision (etcd fills it as for any answer).
/// `None` if this member does not lead (the caller relays it). The caller was authorized
/// by the member it reached.
pub(super) async fn keep_alive_on_leader(
    node: &Node,
    lessor: &Lessor,
    id: i64,
) -> Result<Option<LeaseKeepAliveResponse>, Status> {
    let Some(ttl) = leader_ttl(node, lessor, id).await? else {
        return Ok(None);
    };
    let header = node.current_header().map_err(Status::from)?;
    Ok(Some(LeaseKeepAliveResponse {
        header: Some(header),
        id,
        ttl,
    }))
}

/// What [`keep_alive_on_leader`] answers: the TTL it renewed the lease for.
async fn leader_ttl(node: &Node, lessor: &Lessor, id: i64) -> Result<Option<i64>, Status> {
    if !lessor.ensure_leading(node).await? {
        return Ok(None);
    }
    let Some(lease) = node.store().lease(id).map_err(status::from_store)? else {
        return Ok(Some(0));
    };
    if !lessor.renew(&lease) {
        // Expired (its revoke is on its way), or this member just stopped leading.
        return Ok(node.is_leader().then_some(0));
    }
    // A member that was deposed without knowing it must not promise anything: a newer
    // leader times the lease without this renewal. A quorum confirming this member
    // still leads after the renewal means any later leader is elected after it.
    if !crate::planted_bug!(KeepaliveWithoutQuorum) && !node.confirm_leadership().await {
        return Ok(None);
    }
    // A checkpoint says less than a whole TTL, and a new leader would believe it:
    // reset it through the log before promising the whole TTL. Taking the log order
    // first makes a checkpoint computed before the renewal visible here.
    let _in_order = lessor.log_order().lock().await;
    let Some(lease) = node.store().lease(id).map_err(status::from_store)? else {
        return Ok(Some(0));
    };
    if !crate::planted_bug!(KeepaliveKeepsCheckpoint) && lease.remaining_ttl > 0 {
        let reset = CommandRequest::LeaseCheckpoint(LeaseCheckpointRequest {
            checkpoints: vec![LeaseCheckpoint {
                id,
                remaining_ttl: 0,
            }],
        });
        node.propose(reset).await?;
    }
    Ok(Some(lease.ttl))
}

/// The keys attached to a lease as of every write committed before the call, for the
/// permission checks that cover them (etcd makes them as it applies; a member that
/// lags would miss keys attached through another member).
pub(crate) async fn attached_keys(node: &Node, lease: i64) -> Result<Vec<bytes::Bytes>, Status> {
    keys_of_leases(node, [lease]).await
}

/// The keys attached to any of `leases`, as of every write committed before the call
/// (a transaction's puts may attach several).
pub(crate) async fn keys_of_leases(
    node: &Node,
    leases: impl IntoIterator<Item = i64>,
) -> Result<Vec<bytes::Bytes>, Status> {
    node.read_barrier().await?;
    keys_on(node, leases)
}

/// The keys attached to any of `leases` in this member's store as it is.
fn keys_on(
    node: &Node,
    leases: impl IntoIterator<Item = i64>,
) -> Result<Vec<bytes::Bytes>, Status> {
    let mut keys = Vec::new();
    for lease in leases {
        keys.extend(node.store().lease_keys(lease).map_err(status::from_store)?);
    }
    Ok(keys)
}

/// etcd 3.6.9's `checkLeaseRenew`: with auth on, renewing a lease needs a user, and,
/// unless root, write permission over every key on the lease (keeping them alive is
/// as good as writing them). A lease that does not exist holds no keys: its keepalive
/// answers TTL 0.
async fn authorize_keep_alive(node: &Node, caller: &Caller, id: i64) -> Result<(), Status> {
    if !node.auth().enabled() {
        return Ok(());
    }
    let keys = attached_keys(node, id).await?;
    authorized::check(node, caller, &[Action::LoggedIn, Action::WriteKeys(&keys)]).await?;
    Ok(())
}

/// Serves one keepalive stream: each request authorised for `caller`, then answered by
/// this member if it leads, else by the leader through one stream to its peer port,
/// reopened after a leader change. A refusal ends the stream, as etcd's does.
async fn serve_keep_alives(
    node: Arc<Node>,
    lessor: Arc<Lessor>,
    caller: Caller,
    mut requests: Streaming<LeaseKeepAliveRequest>,
    out: mpsc::Sender<Result<LeaseKeepAliveResponse, Status>>,
) {
    let mut relay: Option<Relay> = None;
    loop {
        let request = match requests.next().await {
            Some(Ok(request)) => request,
            None => return,
            // A request that did not decode ends the stream with its status.
            Some(Err(status)) => {
                if crate::metrics::grpc::stream_receive_failed(StreamApi::LeaseKeepAlive, &status) {
                    let _ = out.send(Err(status)).await;
                }
                return;
            }
        };
        let answer = match authorize_keep_alive(&node, &caller, request.id).await {
            Err(refusal) => Err(refusal),
            Ok(()) => match keep_alive_on_leader(&node, &lessor, request.id).await {
                Ok(Some(answer)) => Ok(answer),
                Ok(None) => relay_keep_alive(&node, &mut relay, request).await,
                Err(status) => Err(status),
            },
        };
        let failed = answer.is_err();
        if out.send(answer).await.is_err() || failed {
            return;
        }
    }
}

/// A keepalive stream to the leader's peer port.
struct Relay {
    requests: mpsc::Sender<LeaseKeepAliveRequest>,
    answers: Streaming<LeaseKeepAliveResponse>,
}

/// `request`, authorized here, answered by the leader. The leader ends the stream once
/// it stops leading; the relay then tries once more on a stream to whichever member
/// leads by then.
async fn relay_keep_alive(
    node: &Node,
    relay: &mut Option<Relay>,
    request: LeaseKeepAliveRequest,
) -> Result<LeaseKeepAliveResponse, Status> {
    for _ in 0..2 {
        if relay.is_none() {
            let channel = crate::relay::to_leader_peer(node).await?;
            let (requests, upstream) = mpsc::channel(QUEUED_ANSWERS);
            let answers = PeerLeaseClient::new(channel)
                .keep_alive(ReceiverStream::new(upstream))
                .await?
                .into_inner();
            *relay = Some(Relay { requests, answers });
        }
        let Some(open) = relay.as_mut() else {
            continue;
        };
        if open.requests.send(request).await.is_ok() {
            if let Ok(Some(answer)) = open.answers.message().await {
                return Ok(answer);
            }
        }
        *relay = None;
    }
    Err(status::no_leader())
}

/// LeaseTimeToLive answered here, on the leader (`lessor` leads): the lease's remaining
/// TTL as this lessor times it, its granted TTL and, if asked, its keys; TTL -1 for a
/// lease that does not exist. The caller was authorized by the member it reached.
pub(super) fn time_to_live_on_leader(
    node: &Node,
    lessor: &Lessor,
    request: &LeaseTimeToLiveRequest,
) -> Result<LeaseTimeToLiveResponse, Status> {
    let store = node.store();
    let revision = store.current_revision().map_err(status::from_store)?;
    let Some(lease) = store.lease(request.id).map_err(status::from_store)? else {
        return Ok(LeaseTimeToLiveResponse {
            header: Some(node.header_at(revision)),
            id: request.id,
            ttl: -1,
            ..Default::default()
        });
    };
    let keys = if request.keys {
        store.lease_keys(request.id).map_err(status::from_store)?
    } else {
        Vec::new()
    };
    // Not timed yet (granted since the lessor last looked): what the store says.
    let remaining = lessor.remaining(lease.id).unwrap_or(lease.starting_ttl());
    Ok(LeaseTimeToLiveResponse {
        header: Some(node.header_at(revision)),
        id: lease.id,
        ttl: remaining,
        granted_ttl: lease.ttl,
        keys,
    })
}

#[tonic::async_trait]
impl Lease for LeaseService {
    async fn lease_grant(
        &self,
        request: Request<LeaseGrantRequest>,
    ) -> Result<Response<LeaseGrantResponse>, Status> {
        let caller = Caller::of(&request);
        self.grant_for(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn lease_revoke(
        &self,
        request: Request<LeaseRevokeRequest>,
    ) -> Result<Response<LeaseRevokeResponse>, Status> {
        let caller = Caller::of(&request);
        let request = request.into_inner();
        // etcd's checkLeasePuts: revoking deletes the lease's keys, so the caller must
        // be able to write every one of them.
        let keys = if self.node.auth().enabled() {
            attached_keys(&self.node, request.id).await?
        } else {
            Vec::new()
        };
        let revoke = CommandRequest::LeaseRevoke(request);
        let also = [Action::WriteKeys(&keys)];
        match authorized::propose(&self.node, &caller, revoke, &also).await? {
            Some(Outcome::LeaseRevoke(mut revoked)) => {
                revoked.header = Some(self.node.header_from(revoked.header));
                Ok(Response::new(revoked))
            }
            other => Err(status::internal("lease revoke", &format!("{other:?}"))),
        }
    }

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<Response<KeepAliveStream>, Status> {
        let caller = Caller::of(&request);
        let (out, answers) = mpsc::channel(QUEUED_ANSWERS);
        tokio::spawn(serve_keep_alives(
            self.node.clone(),
            self.lessor.clone(),
            caller,
            request.into_inner(),
            out,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(answers))))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<LeaseTimeToLiveRequest>,
    ) -> Result<Response<LeaseTimeToLiveResponse>, Status> {
        let caller = Caller::of(&request);
        let request = request.into_inner();
        if request.keys && self.node.auth().enabled() {
            // etcd 3.5's check: the key names are read permission's to show.
            let keys = attached_keys(&self.node, request.id).await?;
            authorized::check(&self.node, &caller, &[Action::ReadKeys(&keys)]).await?;
        }
        // etcd 3.7: any user, but with auth on a user.
        authorized::check(&self.node, &caller, &[Action::LoggedIn]).await?;
        if self.lessor.ensure_leading(&self.node).await? {
            return time_to_live_on_leader(&self.node, &self.lessor, &request).map(Response::new);
        }
        let channel = crate::relay::to_leader_peer(&self.node).await?;
        PeerLeaseClient::new(channel).time_to_live(request).await
    }

    async fn lease_leases(
        &self,
        request: Request<LeaseLeasesRequest>,
    ) -> Result<Response<LeaseLeasesResponse>, Status> {
        let caller = Caller::of(&request);
        let auth_enabled = self.node.auth().enabled();
        if auth_enabled {
            // The keys checked below include those attached through another member.
            self.node.read_barrier().await?;
        }
        let listed = self.node.store().leases().map_err(status::from_store)?;
        if auth_enabled {
            // etcd 3.6.9's `checkLeaseLeases`: a user, and unless root, read permission
            // over every key of every lease listed (the list tells what holds them).
            let keys = keys_on(&self.node, listed.iter().map(|lease| lease.id))?;
            authorized::check(
                &self.node,
                &caller,
                &[Action::LoggedIn, Action::ReadKeys(&keys)],
            )
            .await?;
        }
        let revision = self.current_revision()?;
        let leases = listed
            .into_iter()
            .map(|lease| LeaseStatus { id: lease.id })
            .collect();
        Ok(Response::new(LeaseLeasesResponse {
            header: Some(self.node.header_at(revision)),
            leases,
        }))
    }
}
