//! The receiving side of the peer API: answers peers' RPCs by calling the local raft.
//!
//! This module owns [`PeerService`]: decoding requests, staging incoming snapshot files,
//! and turning openraft's answers into responses and gRPC statuses. It must never
//! forward a request to a third node (the caller retries against the leader it is told
//! about, which rules out forwarding loops), and never interpret a command.
//!
//! # Incoming snapshots
//! Chunks are written to a `*.partial` file in the staging directory, fsynced, and the
//! file is handed to [`Raft::install_full_snapshot`] as a [`SnapshotFile`]. The state
//! machine's `install_snapshot` must take the file away from that path (rename it into
//! its own directory, which should be on the same filesystem) or finish reading it
//! before returning: whatever is still at the path afterwards is deleted, as is every
//! `*.partial` file found when the service starts. Writes are blocking `std::fs` calls,
//! like the rest of this crate's disk I/O (see `log_store`).

use std::borrow::Cow;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::Stream;
use openraft::error::{LinearizableReadError, RaftError};
use openraft::storage::RaftStateMachine;
use openraft::ReadPolicy;
use serde::Serialize;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::{Request, Response, Status, Streaming};

use openraft::async_runtime::WatchReceiver;

use crate::channels::MAX_PEER_MESSAGE_BYTES;
use crate::channels::{CLUSTER_ID_METADATA, MEMBER_ID_METADATA, TARGET_ID_METADATA};
use crate::channels::{OLDEST_PEER_PROTOCOL, PEER_PROTOCOL, PEER_PROTOCOL_METADATA};
use crate::codec;
use crate::guard::{
    ClusterGuard, CLUSTER_ID_MISMATCH, MEMBER_ID_MISMATCH, MEMBER_REMOVED, PEER_PROTOCOL_MISMATCH,
};
use crate::pb;
use crate::pb::peer_server::{Peer, PeerServer};
use crate::propose_stream::{self, OutcomeStream};
use crate::types::{NodeId, Raft, Snapshot, SnapshotFile, SnapshotMeta, TypeConfig, Vote};

const PARTIAL_SUFFIX: &str = "partial";

/// Serves the peer API for one node.
pub struct PeerService<SM>
where
    SM: RaftStateMachine<TypeConfig, SnapshotData = SnapshotFile>,
{
    raft: Raft<SM>,
    guard: Arc<ClusterGuard>,
    staging_dir: Arc<PathBuf>,
    next_staging_id: Arc<AtomicU64>,
}

impl<SM> PeerService<SM>
where
    SM: RaftStateMachine<TypeConfig, SnapshotData = SnapshotFile>,
{
    /// `staging_dir` receives incoming snapshots; it is created if missing, and partial
    /// files left by a previous run are removed. One service per directory.
    pub fn new(
        raft: Raft<SM>,
        guard: Arc<ClusterGuard>,
        staging_dir: PathBuf,
    ) -> Result<Self, io::Error> {
        crate::durable::create_dir_all(&staging_dir)?;
        for entry in std::fs::read_dir(&staging_dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|ext| ext == PARTIAL_SUFFIX) {
                tracing::info!(path = %path.display(), "removing snapshot left over from a previous run");
                std::fs::remove_file(&path)?;
            }
        }
        Ok(Self {
            raft,
            guard,
            staging_dir: Arc::new(staging_dir),
            next_staging_id: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The tonic service to add to the peer listener's `tonic::transport::Server`.
    pub fn into_service(self) -> PeerServer<Self> {
        PeerServer::new(self)
            .max_decoding_message_size(MAX_PEER_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_PEER_MESSAGE_BYTES)
    }

    async fn receive_snapshot(
        &self,
        sender: &Sender<'_>,
        mut stream: Streaming<pb::InstallSnapshotRequest>,
    ) -> Result<Vec<u8>, Status> {
        let first = stream
            .message()
            .await
            .inspect_err(|_| sender.failed())?
            .ok_or_else(|| Status::invalid_argument("empty InstallSnapshot stream"))?;
        let vote: Vote = decode_from(sender, "vote", &first.vote)?;
        let meta: SnapshotMeta = decode_from(sender, "snapshot meta", &first.meta)?;
        let expected = first.snapshot_size;
        let transfer = crate::metrics::SnapshotTransfer::receive(vote.leader_id().node_id);
        let started = std::time::Instant::now();

        let id = self.next_staging_id.fetch_add(1, Ordering::Relaxed);
        let mut staged = StagedFile::create(&self.staging_dir, id)
            .map_err(io_status("create staged snapshot"))?;
        tracing::info!(snapshot = %meta, bytes = expected, path = %staged.path.display(), "receiving snapshot");

        let mut received = 0u64;
        let mut chunk = first.chunk;
        loop {
            received = received.saturating_add(chunk.len() as u64);
            if received > expected {
                return Err(Status::invalid_argument(format!(
                    "snapshot is longer than its announced {expected} bytes"
                )));
            }
            staged
                .write(&chunk)
                .map_err(io_status("write staged snapshot"))?;
            match stream.message().await.inspect_err(|_| sender.failed())? {
                None => break,
                Some(next) => {
                    if !next.vote.is_empty() || !next.meta.is_empty() {
                        return Err(Status::invalid_argument(
                            "vote and meta belong in the first message only",
                        ));
                    }
                    chunk = next.chunk;
                }
            }
        }
        if received != expected {
            return Err(Status::invalid_argument(format!(
                "snapshot stream ended after {received} of {expected} bytes"
            )));
        }
        let syncing = std::time::Instant::now();
        staged.sync().map_err(io_status("sync staged snapshot"))?;
        crate::metrics::snapshot_saved(syncing.elapsed(), started.elapsed());
        transfer.succeeded();

        let raft = self.raft.clone();
        let snapshot = Snapshot {
            meta,
            snapshot: SnapshotFile {
                path: staged.path.clone(),
            },
        };
        // Installed on its own task: if the sender gives up and this handler is dropped,
        // openraft may still be installing the file, which must not vanish under it.
        let install = tokio::spawn(async move {
            let result = raft.install_full_snapshot(vote, snapshot).await;
            drop(staged);
            result
        });
        let response = match install.await {
            Ok(Ok(response)) => response,
            Ok(Err(fatal)) => return Err(Status::unavailable(format!("raft stopped: {fatal}"))),
            Err(join) => {
                return Err(Status::internal(format!(
                    "snapshot install task failed: {join}"
                )))
            }
        };
        tracing::info!(bytes = received, "snapshot handed to raft");
        encode("snapshot response", &response)
    }
}

#[tonic::async_trait]
impl<SM> Peer for PeerService<SM>
where
    SM: RaftStateMachine<TypeConfig, SnapshotData = SnapshotFile>,
{
    async fn append_entries(
        &self,
        request: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        self.same_cluster(&request)?;
        let response = answer_append(
            &self.raft,
            &self.guard,
            &request.get_ref().request,
            &Sender::of(&request),
        )
        .await?;
        Ok(Response::new(pb::AppendEntriesResponse {
            response: response.into(),
        }))
    }

    type AppendEntriesStreamStream = AppendAnswers;

    async fn append_entries_stream(
        &self,
        request: Request<Streaming<pb::AppendEntriesStreamRequest>>,
    ) -> Result<Response<AppendAnswers>, Status> {
        // Metadata is the stream's: checked once, as each unary call checks its own.
        self.same_cluster(&request)?;
        let sender = Sender::of(&request).into_owned();
        Ok(Response::new(serve_append_stream(
            self.raft.clone(),
            self.guard.clone(),
            sender,
            request.into_inner(),
        )))
    }

    async fn request_vote(
        &self,
        request: Request<pb::RequestVoteRequest>,
    ) -> Result<Response<pb::RequestVoteResponse>, Status> {
        self.same_cluster(&request)?;
        let rpc: openraft::raft::VoteRequest<TypeConfig> = decode_from(
            &Sender::of(&request),
            "vote request",
            &request.get_ref().request,
        )?;
        self.refuse_removed(rpc.vote.leader_id().node_id)?;
        let response = self.raft.vote(rpc).await.map_err(stopped)?;
        Ok(Response::new(pb::RequestVoteResponse {
            response: encode("vote response", &response)?.into(),
        }))
    }

    async fn request_pre_vote(
        &self,
        request: Request<pb::RequestPreVoteRequest>,
    ) -> Result<Response<pb::RequestPreVoteResponse>, Status> {
        self.same_cluster(&request)?;
        let rpc: openraft::raft::VoteRequest<TypeConfig> = decode_from(
            &Sender::of(&request),
            "pre-vote request",
            &request.get_ref().request,
        )?;
        self.refuse_removed(rpc.vote.leader_id().node_id)?;
        let response = self.raft.pre_vote(rpc).await.map_err(stopped)?;
        Ok(Response::new(pb::RequestPreVoteResponse {
            response: encode("vote response", &response)?.into(),
        }))
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<pb::InstallSnapshotRequest>>,
    ) -> Result<Response<pb::InstallSnapshotResponse>, Status> {
        self.same_cluster(&request)?;
        let sender = Sender::of(&request).into_owned();
        let response = self.receive_snapshot(&sender, request.into_inner()).await?;
        Ok(Response::new(pb::InstallSnapshotResponse {
            response: response.into(),
        }))
    }

    async fn transfer_leader(
        &self,
        request: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        self.same_cluster(&request)?;
        let rpc = codec::decode("transfer leader request", &request.get_ref().request)?;
        let response = self
            .raft
            .handle_transfer_leader(rpc)
            .await
            .map_err(|fatal| Status::unavailable(format!("raft stopped: {fatal}")))?;
        Ok(Response::new(pb::TransferLeaderResponse {
            response: encode("transfer leader response", &response)?.into(),
        }))
    }

    type ProposeCommandsStream = OutcomeStream;

    async fn propose_commands(
        &self,
        request: Request<Streaming<pb::ProposeCommandsRequest>>,
    ) -> Result<Response<OutcomeStream>, Status> {
        self.same_cluster(&request)?;
        self.refuse_removed_sender(&request)?;
        let sender = sender_id(&request);
        let guard = self.guard.clone();
        // The stream outlives membership changes: the sender is checked per batch.
        let admitted = move || {
            #[cfg(feature = "planted-bugs")]
            if crate::planted::is_planted(crate::planted::RaftBug::LeaderServesRemovedSenders) {
                return true;
            }
            sender.is_none_or(|id| !guard.is_removed(id))
        };
        Ok(Response::new(propose_stream::serve(
            self.raft.clone(),
            request.into_inner(),
            admitted,
        )))
    }

    async fn read_index(
        &self,
        request: Request<pb::ReadIndexRequest>,
    ) -> Result<Response<pb::ReadIndexResponse>, Status> {
        self.same_cluster(&request)?;
        self.refuse_removed_sender(&request)?;
        let reply = match self.raft.get_read_linearizer(ReadPolicy::ReadIndex).await {
            Ok(linearizer) => pb::ReadIndexResponse {
                read_log_id: Some(encode("read log id", linearizer.read_log_id().log_id())?.into()),
                leader_redirect: None,
            },
            Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(to))) => {
                pb::ReadIndexResponse {
                    read_log_id: None,
                    leader_redirect: Some(pb::LeaderRedirect::new(
                        to.leader_id,
                        to.leader_node.as_ref(),
                    )),
                }
            }
            Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(e))) => {
                return Err(Status::unavailable(format!(
                    "leadership not confirmed: {e}"
                )));
            }
            Err(RaftError::Fatal(fatal)) => {
                return Err(Status::unavailable(format!("raft stopped: {fatal}")))
            }
        };
        Ok(Response::new(reply))
    }

    async fn cluster_members(
        &self,
        _request: Request<pb::ClusterMembersRequest>,
    ) -> Result<Response<pb::ClusterMembersResponse>, Status> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        let membership = metrics.membership_config.membership();
        let learners: Vec<NodeId> = membership.learner_ids().collect();
        let members = membership
            .nodes()
            .map(|(id, member)| pb::ClusterMember {
                id: *id,
                member: Some(pb::Member::from(member)),
                is_learner: learners.contains(id),
            })
            .collect();
        Ok(Response::new(pb::ClusterMembersResponse {
            cluster_id: self.guard.cluster_id(),
            members,
            removed_ids: self.guard.removed_ids(),
            last_log_index: metrics.last_log_index.unwrap_or(0),
            ..Default::default()
        }))
    }
}

impl<SM> PeerService<SM>
where
    SM: RaftStateMachine<TypeConfig, SnapshotData = SnapshotFile>,
{
    fn same_cluster<T>(&self, request: &Request<T>) -> Result<(), Status> {
        same_cluster(&self.guard, request)
    }

    fn refuse_removed_sender<T>(&self, request: &Request<T>) -> Result<(), Status> {
        refuse_removed_sender(&self.guard, request)
    }

    /// A member the cluster removed may still campaign (it may never have applied its
    /// own removal); it is told instead, so that it stops for good.
    fn refuse_removed(&self, candidate: NodeId) -> Result<(), Status> {
        if self.guard.is_removed(candidate) {
            return Err(Status::failed_precondition(MEMBER_REMOVED));
        }
        Ok(())
    }
}

/// Whether a member's request to this member is admitted: it comes from this cluster,
/// is meant for this member, and its sender was not removed. What the peer service
/// checks before a forwarded write or read index; the server crate's own services on the
/// peer port (the lease calls a member relays) check the same.
pub fn admit_member_request<T>(guard: &ClusterGuard, request: &Request<T>) -> Result<(), Status> {
    same_cluster(guard, request)?;
    refuse_removed_sender(guard, request)
}

/// A request stamped with another cluster's id, or meant for another member, is
/// refused before raft sees it: a member pointed at the wrong peers never disturbs
/// this cluster, and a process never takes in raft messages meant for the member
/// whose peer URL it now has (a replacement that took a removed member's id from a
/// peer that had not yet applied the removal would otherwise be replicated to as
/// the new member, and apply its own removal).
fn same_cluster<T>(guard: &ClusterGuard, request: &Request<T>) -> Result<(), Status> {
    let metadata = request.metadata();
    refuse_unknown_protocol(metadata.get(PEER_PROTOCOL_METADATA))?;
    refuse_unless_matches(
        metadata.get(CLUSTER_ID_METADATA),
        guard.cluster_id(),
        CLUSTER_ID_MISMATCH,
        "remote",
    )?;
    refuse_unless_matches(
        metadata.get(TARGET_ID_METADATA),
        guard.local_id(),
        MEMBER_ID_MISMATCH,
        "requested",
    )
}

/// A request in a peer protocol this build does not speak (a newer release's, or one too
/// old) is refused, naming both, before anything reads it.
fn refuse_unknown_protocol(sent: Option<&MetadataValue<Ascii>>) -> Result<(), Status> {
    let sent = match sent {
        None => 1,
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|text| text.parse::<u32>().ok())
            .unwrap_or(u32::MAX),
    };
    if (OLDEST_PEER_PROTOCOL..=PEER_PROTOCOL).contains(&sent) {
        return Ok(());
    }
    Err(Status::failed_precondition(format!(
        "{PEER_PROTOCOL_MISMATCH}: this member speaks {OLDEST_PEER_PROTOCOL} to {PEER_PROTOCOL}, \
         the sender {sent}; run every member with releases that share one"
    )))
}

/// A removed member that has not learned of its removal may still forward its
/// clients' writes and ask for read indexes: it must not acknowledge a write or
/// serve a linearizable read after its removal, so the leader refuses it.
fn refuse_removed_sender<T>(guard: &ClusterGuard, request: &Request<T>) -> Result<(), Status> {
    #[cfg(feature = "planted-bugs")]
    if crate::planted::is_planted(crate::planted::RaftBug::LeaderServesRemovedSenders) {
        return Ok(());
    }
    match sender_id(request) {
        Some(id) if guard.is_removed(id) => Err(Status::failed_precondition(MEMBER_REMOVED)),
        _ => Ok(()),
    }
}

/// Refuses a request whose hex id in `sent` is not `local`; a request that does not
/// carry the entry passes. Parsed, not formatted: this runs on every heartbeat and
/// AppendEntries.
fn refuse_unless_matches(
    sent: Option<&MetadataValue<Ascii>>,
    local: u64,
    mismatch: &str,
    sent_label: &str,
) -> Result<(), Status> {
    let Some(sent) = sent else { return Ok(()) };
    let sent = sent.to_str().unwrap_or("?");
    if u64::from_str_radix(sent, 16) == Ok(local) {
        return Ok(());
    }
    Err(Status::failed_precondition(format!(
        "{mismatch}: local={local:x}, {sent_label}={sent}"
    )))
}

/// The member a peer request says it comes from.
fn sender_id<T>(request: &Request<T>) -> Option<NodeId> {
    sender_label(request).and_then(|id| u64::from_str_radix(id, 16).ok())
}

/// The sender's member id as its request's metadata spells it (hex), as metrics label
/// it.
fn sender_label<T>(request: &Request<T>) -> Option<&str> {
    request
        .metadata()
        .get(MEMBER_ID_METADATA)
        .and_then(|id| id.to_str().ok())
}

/// The response stream of one `AppendEntriesStream` call.
pub type AppendAnswers =
    Pin<Box<dyn Stream<Item = Result<pb::AppendEntriesStreamResponse, Status>> + Send>>;

/// Answers each request of an `AppendEntriesStream` in order, on the task that sends
/// the answers (no task or queue of its own: the sender waits for each answer anyway).
/// Ends when the leader closes its side or breaks the stream, after the first failed
/// answer (the leader opens a new stream), or once raft stops, so that a server
/// shutting down gracefully never waits on an idle stream.
fn serve_append_stream<SM>(
    raft: Raft<SM>,
    guard: Arc<ClusterGuard>,
    sender: Sender<'static>,
    incoming: Streaming<pb::AppendEntriesStreamRequest>,
) -> AppendAnswers
where
    SM: RaftStateMachine<TypeConfig, SnapshotData = SnapshotFile>,
{
    let stopped = Box::pin(propose_stream::raft_stopped(raft.clone()));
    let state = Some((raft, guard, sender, incoming, stopped));
    Box::pin(futures::stream::unfold(state, |state| async move {
        let (raft, guard, sender, mut incoming, mut stopped) = state?;
        let request = tokio::select! {
            () = &mut stopped => return None,
            message = incoming.message() => match message {
                Ok(Some(request)) => request,
                Ok(None) => return None,
                Err(status) => {
                    tracing::debug!(error = %status, "leader's append stream broke");
                    return None;
                }
            },
        };
        match answer_append(&raft, &guard, &request.request, &sender).await {
            Ok(response) => {
                let answer = pb::AppendEntriesStreamResponse {
                    response: response.into(),
                };
                Some((Ok(answer), Some((raft, guard, sender, incoming, stopped))))
            }
            Err(status) => Some((Err(status), None)),
        }
    }))
}

/// Hands one encoded AppendEntries to raft and encodes its answer: the one path for
/// the unary call and the stream. `from` is the sender's member id as it sent it.
async fn answer_append<SM>(
    raft: &Raft<SM>,
    guard: &ClusterGuard,
    request: &[u8],
    sender: &Sender<'_>,
) -> Result<Vec<u8>, Status>
where
    SM: RaftStateMachine<TypeConfig, SnapshotData = SnapshotFile>,
{
    let rpc = decode_from(sender, "append entries request", request)?;
    let response = raft.append_entries(rpc).await.map_err(stopped)?;
    if !matches!(
        response,
        openraft::raft::AppendEntriesResponse::HigherVote(_)
    ) {
        guard.heard_from_leader();
    }
    let response = encode("append entries response", &response)?;
    if let Some(from) = &sender.id {
        crate::metrics::peer_exchanged(from, request.len(), response.len());
    }
    Ok(response)
}

/// Who sent a peer request, as metrics label it: borrowed from the request for a unary
/// call (nothing allocated per message), owned for a stream's lifetime.
struct Sender<'a> {
    /// Its member id in hex, as its metadata says (every member sends it).
    id: Option<Cow<'a, str>>,
    address: Option<std::net::SocketAddr>,
}

impl<'a> Sender<'a> {
    fn of<T>(request: &'a Request<T>) -> Self {
        Sender {
            id: sender_label(request).map(Cow::Borrowed),
            address: request.remote_addr(),
        }
    }

    fn into_owned(self) -> Sender<'static> {
        Sender {
            id: self.id.map(|id| Cow::Owned(id.into_owned())),
            address: self.address,
        }
    }

    /// Counts a message from this sender that could not be received, labelled with its
    /// id, else its address (as etcd's HTTP handlers label theirs).
    fn failed(&self) {
        match (&self.id, self.address) {
            (Some(id), _) => crate::metrics::peer_receive_failed(id),
            (None, Some(address)) => crate::metrics::peer_receive_failed(&address.to_string()),
            (None, None) => crate::metrics::peer_receive_failed("unknown"),
        }
    }
}

/// Decodes a raft message from `sender`, counting one that does not decode as a
/// receive failure.
fn decode_from<T: serde::de::DeserializeOwned>(
    sender: &Sender<'_>,
    what: &'static str,
    bytes: &[u8],
) -> Result<T, Status> {
    codec::decode(what, bytes).map_err(|e| {
        sender.failed();
        e.into()
    })
}

fn stopped(e: RaftError<TypeConfig>) -> Status {
    Status::unavailable(format!("raft stopped: {e}"))
}

fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, Status> {
    codec::encode(what, value).map_err(|e| Status::internal(e.to_string()))
}

fn io_status(what: &'static str) -> impl Fn(io::Error) -> Status {
    move |e| {
        tracing::error!(error = %e, "{what} failed");
        Status::internal(format!("{what}: {e}"))
    }
}

/// An incoming snapshot file that deletes itself when dropped, unless something (the
/// state machine) moved it away first.
struct StagedFile {
    path: PathBuf,
    file: Option<std::fs::File>,
}

impl StagedFile {
    fn create(dir: &Path, id: u64) -> Result<Self, io::Error> {
        let path = dir.join(format!("snapshot-{id}.{PARTIAL_SUFFIX}"));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        Ok(Self {
            path,
            file: Some(file),
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), io::Error> {
        match &mut self.file {
            Some(file) => file.write_all(bytes),
            None => Err(io::Error::other("staged snapshot already closed")),
        }
    }

    /// Makes the contents durable and closes the file, before anyone installs it.
    fn sync(&mut self) -> Result<(), io::Error> {
        match self.file.take() {
            Some(file) => file.sync_all(),
            None => Ok(()),
        }
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        self.file = None;
        match std::fs::remove_file(&self.path) {
            Ok(()) => tracing::debug!(path = %self.path.display(), "removed staged snapshot"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "could not remove staged snapshot")
            }
        }
    }
}

#[cfg(test)]
mod protocol_tests {
    use super::*;

    fn request(protocol: Option<&'static str>) -> Request<()> {
        let mut request = Request::new(());
        if let Some(protocol) = protocol {
            request
                .metadata_mut()
                .insert(PEER_PROTOCOL_METADATA, MetadataValue::from_static(protocol));
        }
        request
    }

    #[test]
    fn only_the_peer_protocols_this_build_speaks_are_answered() {
        let guard = ClusterGuard::new(1, 7);
        // v0.1.0 stamped no version: protocol 1.
        assert!(same_cluster(&guard, &request(None)).is_ok());
        assert!(same_cluster(&guard, &request(Some("1"))).is_ok());
        for refused in ["2", "0", "one"] {
            let status = same_cluster(&guard, &request(Some(refused))).expect_err(refused);
            assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{refused}");
            assert!(
                status.message().starts_with(PEER_PROTOCOL_MISMATCH),
                "{refused}: {}",
                status.message()
            );
        }
    }
}
