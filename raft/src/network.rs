//! The sending side of raft's RPCs: openraft's network traits over the peer gRPC API.
//!
//! This module owns [`PeerNetworkFactory`] and [`PeerConnection`]: encoding openraft's
//! messages, streaming snapshot files in chunks, deadlines on every RPC, and mapping
//! failures onto openraft's error kinds (`Unreachable` makes openraft back off,
//! `Network` and `Timeout` let it retry at once). It must never retry on its own:
//! openraft's replication loop decides when to resend.
//!
//! Snapshot files are read with blocking `std::fs` calls, one chunk at a time, for the
//! same reason the log store fsyncs inline: the simulation must be able to step every
//! I/O (no `spawn_blocking`). One 1 MiB read stalls a worker for well under a
//! millisecond when the file is in the page cache.

use std::future::Future;
use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use openraft::error::{
    NetworkError, RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{ErrorSubject, ErrorVerb, OptionalSend, RPCTypes, RaftNetworkV2, StorageError};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};

use crate::channels::{Lane, PeerChannels, PeerRpc, PooledChannel};
use crate::codec;
use crate::guard::{
    ClusterGuard, CLUSTER_ID_MISMATCH, MEMBER_ID_MISMATCH, MEMBER_REMOVED, PEER_PROTOCOL_MISMATCH,
};
use crate::metrics::PeerMetrics;
use crate::pb;
use crate::types::{Member, NodeId, Snapshot, SnapshotFile, TypeConfig, Vote};

/// Bytes of snapshot file per InstallSnapshot message.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;

/// Creates one [`PeerConnection`] per target and purpose for openraft.
#[derive(Clone, Debug)]
pub struct PeerNetworkFactory {
    local_id: NodeId,
    channels: PeerChannels,
    guard: Arc<ClusterGuard>,
}

impl PeerNetworkFactory {
    /// `guard` names this node (its id appears in timeout errors) and learns when a peer
    /// says this node was removed; `channels` is the node's peer channel pool, shared
    /// with [`crate::RaftClient`].
    pub fn new(guard: Arc<ClusterGuard>, channels: PeerChannels) -> Self {
        Self {
            local_id: guard.local_id(),
            channels,
            guard,
        }
    }

    fn connection(&self, target: NodeId, member: &Member, lane: Lane) -> PeerConnection {
        PeerConnection {
            local_id: self.local_id,
            target,
            member: Arc::new(member.clone()),
            lane,
            channels: self.channels.clone(),
            guard: self.guard.clone(),
            metrics: PeerMetrics::to(self.local_id, target),
            append_stream: None,
            append_stream_unsupported: false,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetworkFactory {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> Self::Network {
        self.connection(target, node, Lane::Replication)
    }

    async fn new_heartbeat_client(&mut self, target: NodeId, node: &Member) -> Self::Network {
        self.connection(target, node, Lane::Heartbeat)
    }

    async fn new_snapshot_client(&mut self, target: NodeId, node: &Member) -> Self::Network {
        self.connection(target, node, Lane::Snapshot)
    }
}

/// Sends raft RPCs to one peer. Dials lazily, through the shared pool.
#[derive(Debug)]
pub struct PeerConnection {
    local_id: NodeId,
    target: NodeId,
    member: Arc<Member>,
    lane: Lane,
    channels: PeerChannels,
    guard: Arc<ClusterGuard>,
    /// This peer's series (etcd's `To` label), resolved once per connection.
    metrics: PeerMetrics,
    /// The open `AppendEntriesStream`, between two AppendEntries. A call takes it out
    /// and puts it back only once its answer came, so a call that failed or was
    /// dropped half-way leaves none: the next call cannot read an answer meant for
    /// another request.
    append_stream: Option<AppendStream>,
    /// The peer answered UNIMPLEMENTED (an older member, mid-upgrade): AppendEntries go
    /// as unary calls for the rest of this connection's life.
    append_stream_unsupported: bool,
}

/// One open `AppendEntriesStream` call to the peer.
#[derive(Debug)]
struct AppendStream {
    channel: PooledChannel,
    requests: mpsc::Sender<pb::AppendEntriesStreamRequest>,
    answers: Streaming<pb::AppendEntriesStreamResponse>,
}

/// Why one unary call failed, before it is turned into openraft's error type.
enum CallError {
    Timeout(Duration),
    Unreachable(String),
    Network(String),
}

impl PeerConnection {
    /// Runs one unary call within `ttl`, discarding the channel if the call fails so that
    /// the next one re-dials.
    async fn unary<Resp, F, Fut>(&self, ttl: Duration, call: F) -> Result<Resp, CallError>
    where
        F: FnOnce(PeerRpc, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        let deadline = Instant::now() + ttl;
        let pooled = self.dial(deadline, ttl).await?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout_at(deadline, call(pooled.client(), remaining)).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(self.refused(&pooled, &status)),
            Err(_) => {
                self.channels.discard(self.target, self.lane, &pooled);
                Err(CallError::Timeout(ttl))
            }
        }
    }

    /// A call on `pooled` failed with `status`: the channel is discarded so that the
    /// next call re-dials, and a refusal that concerns this member is acted on.
    fn refused(&self, pooled: &PooledChannel, status: &Status) -> CallError {
        self.channels.discard(self.target, self.lane, pooled);
        if status.code() == Code::FailedPrecondition && status.message() == MEMBER_REMOVED {
            self.guard.note_removed_by_peer();
        } else if status.message().starts_with(CLUSTER_ID_MISMATCH)
            || status.message().starts_with(MEMBER_ID_MISMATCH)
            || status.message().starts_with(PEER_PROTOCOL_MISMATCH)
        {
            tracing::warn!(
                target_id = %format!("{:x}", self.target),
                "request sent was ignored by peer ({})",
                status.message()
            );
        }
        status_error(status)
    }

    /// Sends one encoded AppendEntries on this connection's stream, opening one if none
    /// is open, and waits for its answer until `deadline`. `Ok(None)`: the peer does not
    /// serve the stream, send it as a unary call.
    async fn append_on_stream(
        &mut self,
        request: Bytes,
        ttl: Duration,
    ) -> Result<Option<Bytes>, CallError> {
        let deadline = Instant::now() + ttl;
        let mut stream = match self.append_stream.take() {
            Some(stream) => stream,
            None => match self.open_append_stream(deadline, ttl).await? {
                Some(stream) => stream,
                None => {
                    self.append_stream_unsupported = true;
                    return Ok(None);
                }
            },
        };
        // At most one request is outstanding, so the one-slot queue has room; a full or
        // closed queue means the transport gave up on the stream.
        if stream
            .requests
            .try_send(pb::AppendEntriesStreamRequest { request })
            .is_err()
        {
            self.channels
                .discard(self.target, self.lane, &stream.channel);
            return Err(CallError::Network("append stream closed".to_owned()));
        }
        match tokio::time::timeout_at(deadline, stream.answers.message()).await {
            Ok(Ok(Some(answer))) => {
                self.append_stream = Some(stream);
                Ok(Some(answer.response))
            }
            Ok(Ok(None)) => {
                self.channels
                    .discard(self.target, self.lane, &stream.channel);
                Err(CallError::Network(
                    "peer ended the append stream".to_owned(),
                ))
            }
            Ok(Err(status)) => Err(self.refused(&stream.channel, &status)),
            Err(_) => {
                self.channels
                    .discard(self.target, self.lane, &stream.channel);
                Err(CallError::Timeout(ttl))
            }
        }
    }

    /// Opens an `AppendEntriesStream`; `Ok(None)` if the peer does not serve it.
    async fn open_append_stream(
        &self,
        deadline: Instant,
        ttl: Duration,
    ) -> Result<Option<AppendStream>, CallError> {
        let pooled = self.dial(deadline, ttl).await?;
        let (requests, queued) = mpsc::channel(1);
        let mut client = pooled.client();
        let call = client.append_entries_stream(ReceiverStream::new(queued));
        match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(answers)) => Ok(Some(AppendStream {
                channel: pooled,
                requests,
                answers: answers.into_inner(),
            })),
            // The generated router's answer to a method it does not know: no message. A
            // member awaiting its bootstrap refuses with one, and is retried.
            Ok(Err(status))
                if status.code() == Code::Unimplemented && status.message().is_empty() =>
            {
                tracing::info!(target_id = %format!("{:x}", self.target), "peer does not serve AppendEntriesStream; using unary AppendEntries");
                Ok(None)
            }
            Ok(Err(status)) => Err(self.refused(&pooled, &status)),
            Err(_) => {
                self.channels.discard(self.target, self.lane, &pooled);
                Err(CallError::Timeout(ttl))
            }
        }
    }

    /// The target's record as the newest membership has it (its peer URL may have
    /// changed since openraft opened this connection), else the one openraft gave.
    fn current_member(&self) -> Arc<Member> {
        self.guard
            .member(self.target)
            .unwrap_or_else(|| self.member.clone())
    }

    async fn dial(&self, deadline: Instant, ttl: Duration) -> Result<PooledChannel, CallError> {
        match tokio::time::timeout_at(
            deadline,
            self.channels
                .get(self.target, &self.current_member(), self.lane),
        )
        .await
        {
            Ok(Ok(pooled)) => Ok(pooled),
            Ok(Err(e)) => Err(CallError::Unreachable(e.to_string())),
            Err(_) => Err(CallError::Timeout(ttl)),
        }
    }

    /// A failed AppendEntries; one without entries is a failed heartbeat too (etcd's
    /// `etcd_server_heartbeat_send_failures_total`).
    fn append_error(&self, has_entries: bool, e: CallError) -> RPCError<TypeConfig> {
        if !has_entries {
            crate::metrics::heartbeat_send_failed();
        }
        self.rpc_error(RPCTypes::AppendEntries, e)
    }

    fn rpc_error(&self, action: RPCTypes, e: CallError) -> RPCError<TypeConfig> {
        self.metrics.send_failed();
        match e {
            CallError::Timeout(timeout) => {
                tracing::debug!(target_id = self.target, %action, ?timeout, "peer rpc timed out");
                RPCError::Timeout(Timeout {
                    action,
                    id: self.local_id,
                    target: self.target,
                    timeout,
                })
            }
            CallError::Unreachable(msg) => {
                tracing::debug!(target_id = self.target, %action, error = %msg, "peer unreachable");
                RPCError::Unreachable(Unreachable::from_string(msg))
            }
            CallError::Network(msg) => {
                tracing::debug!(target_id = self.target, %action, error = %msg, "peer rpc failed");
                RPCError::Network(NetworkError::from_string(msg))
            }
        }
    }

    fn decode<T: serde::de::DeserializeOwned>(
        &self,
        action: RPCTypes,
        what: &'static str,
        bytes: &[u8],
    ) -> Result<T, RPCError<TypeConfig>> {
        codec::decode(what, bytes)
            .map_err(|e| self.rpc_error(action, CallError::Network(e.to_string())))
    }

    fn encode<T: serde::Serialize>(
        &self,
        action: RPCTypes,
        what: &'static str,
        v: &T,
    ) -> Result<Bytes, RPCError<TypeConfig>> {
        codec::encode(what, v)
            .map(Bytes::from)
            .map_err(|e| self.rpc_error(action, CallError::Network(e.to_string())))
    }

    async fn vote_rpc(
        &self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
        pre_vote: bool,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let action = RPCTypes::Vote;
        let request = self.encode(action, "vote request", &rpc)?;
        self.metrics.sent(request.len());
        let response = if pre_vote {
            self.unary(option.soft_ttl(), |mut c, t| async move {
                c.request_pre_vote(with_timeout(pb::RequestPreVoteRequest { request }, t))
                    .await
            })
            .await
            .map(|r| r.response)
        } else {
            self.unary(option.soft_ttl(), |mut c, t| async move {
                c.request_vote(with_timeout(pb::RequestVoteRequest { request }, t))
                    .await
            })
            .await
            .map(|r| r.response)
        };
        let bytes = response.map_err(|e| self.rpc_error(action, e))?;
        self.metrics.received(bytes.len());
        self.decode(action, "vote response", &bytes)
    }

    async fn send_snapshot(
        &self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let action = RPCTypes::InstallSnapshot;
        let idle = option.soft_ttl();
        let signature = snapshot.meta.signature();
        let read_error = |e: io::Error| {
            StorageError::from_io_error(
                ErrorSubject::Snapshot(Some(signature.clone())),
                ErrorVerb::Read,
                e,
            )
        };

        let path = &snapshot.snapshot.path;
        // The state machine may have replaced its snapshot (and removed this file) since
        // openraft asked for it, or while it is read (a filesystem need not keep an
        // unlinked file readable; the crash tests' FUSE filesystem does not): not a
        // storage failure, which would stop raft, but a failed send, which openraft
        // retries with the current snapshot.
        let failed_read = |e: io::Error| {
            if e.kind() == io::ErrorKind::NotFound {
                StreamingError::Network(NetworkError::from_string(format!(
                    "snapshot file {} vanished: {e}",
                    path.display()
                )))
            } else {
                StreamingError::StorageError(read_error(e))
            }
        };
        let file = std::fs::File::open(path).map_err(failed_read)?;
        let size = file
            .metadata()
            .map_err(|e| StreamingError::StorageError(read_error(e)))?
            .len();

        let header = pb::InstallSnapshotRequest {
            vote: self.encode(action, "vote", &vote)?,
            meta: self.encode(action, "snapshot meta", &snapshot.meta)?,
            chunk: Bytes::new(),
            snapshot_size: size,
        };
        let progress = Arc::new(Progress::default());
        let chunks = ChunkReader {
            file,
            remaining: size,
            progress: progress.clone(),
        };
        let requests = futures::stream::iter([header])
            .chain(futures::stream::unfold(chunks, |mut reader| async move {
                reader.next_chunk().map(|msg| (msg, reader))
            }));

        let deadline = Instant::now() + idle;
        let pooled = self
            .dial(deadline, idle)
            .await
            .map_err(|e| StreamingError::from(self.rpc_error(action, e)))?;
        let mut client = pooled.client();
        tracing::info!(target_id = self.target, bytes = size, snapshot = %snapshot.meta, "sending snapshot");
        let transfer = crate::metrics::SnapshotTransfer::send(self.target);

        let outcome = tokio::select! {
            biased;
            closed = cancel => {
                tracing::info!(target_id = self.target, reason = %closed, "snapshot sending cancelled");
                self.channels.discard(self.target, self.lane, &pooled);
                return Err(StreamingError::Closed(closed));
            }
            () = progress.stalled(idle) => Err(CallError::Timeout(idle)),
            result = client.install_snapshot(requests) => result.map_err(|status| status_error(&status)),
        };
        if let Some(e) = progress.take_read_error() {
            self.channels.discard(self.target, self.lane, &pooled);
            return Err(failed_read(e));
        }
        let bytes = match outcome {
            Ok(response) => response.into_inner().response,
            Err(e) => {
                self.channels.discard(self.target, self.lane, &pooled);
                return Err(self.rpc_error(action, e).into());
            }
        };
        self.metrics
            .sent(usize::try_from(size).unwrap_or(usize::MAX));
        transfer.succeeded();
        tracing::info!(target_id = self.target, snapshot = %snapshot.meta, "snapshot sent");
        Ok(self.decode(action, "snapshot response", &bytes)?)
    }
}

impl RaftNetworkV2<TypeConfig> for PeerConnection {
    type SnapshotData = SnapshotFile;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let action = RPCTypes::AppendEntries;
        let has_entries = !rpc.entries.is_empty();
        let request = self.encode(action, "append entries request", &rpc)?;
        let ttl = append_entries_deadline(option.soft_ttl(), has_entries, request.len());
        self.metrics.sent(request.len());
        let sent_at = Instant::now();
        let streamed = if self.append_stream_unsupported {
            Ok(None)
        } else {
            self.append_on_stream(request.clone(), ttl).await
        };
        let bytes = match streamed {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                self.unary(ttl, |mut c, t| async move {
                    c.append_entries(with_timeout(pb::AppendEntriesRequest { request }, t))
                        .await
                })
                .await
                .map_err(|e| self.append_error(has_entries, e))?
                .response
            }
            Err(e) => return Err(self.append_error(has_entries, e)),
        };
        // etcd probes each peer for its round trip; an AppendEntries without entries (a
        // heartbeat) is such a probe here: no disk write on the follower, only the
        // network and its raft core.
        if !has_entries {
            self.metrics.round_trip(sent_at.elapsed());
        }
        self.metrics.received(bytes.len());
        self.decode(action, "append entries response", &bytes)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.vote_rpc(rpc, option, false).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        // A real RPC: the default grants blindly, which would let a partitioned node win
        // its pre-vote and disrupt the leader when it returns.
        self.vote_rpc(rpc, option, true).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        self.send_snapshot(vote, snapshot, cancel, option).await
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let action = RPCTypes::TransferLeader;
        let request = self.encode(action, "transfer leader request", &req)?;
        self.metrics.sent(request.len());
        let bytes = self
            .unary(option.soft_ttl(), |mut c, t| async move {
                c.transfer_leader(with_timeout(pb::TransferLeaderRequest { request }, t))
                    .await
            })
            .await
            .map_err(|e| self.rpc_error(action, e))?
            .response;
        self.decode(action, "transfer leader response", &bytes)
    }
}

/// Deadline of one AppendEntries call.
///
/// openraft gives every AppendEntries one heartbeat interval, and its replication loop
/// adds no deadline of its own. That suits heartbeats (no entries), which are how a
/// hung connection is noticed, and they keep it. A call carrying entries also waits for
/// the follower's fsync and may carry up to `MAX_PAYLOAD_ENTRIES` large commands: with
/// a heartbeat-sized deadline it would time out on every retry and replication would
/// never progress, so its deadline grows with its size.
fn append_entries_deadline(soft_ttl: Duration, has_entries: bool, encoded_len: usize) -> Duration {
    if !has_entries {
        return soft_ttl;
    }
    let transfer =
        Duration::from_secs_f64(encoded_len as f64 / MIN_REPLICATION_BYTES_PER_SEC as f64);
    soft_ttl.max(MIN_APPEND_DEADLINE) + transfer
}

/// Least time granted to an AppendEntries that carries entries (covers the follower's
/// fsync on a slow disk).
const MIN_APPEND_DEADLINE: Duration = Duration::from_secs(1);

/// Slowest link AppendEntries deadlines allow for.
const MIN_REPLICATION_BYTES_PER_SEC: u64 = 8 * 1024 * 1024;

fn with_timeout<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    // Sent as grpc-timeout, so the peer stops working on a request we gave up on.
    request.set_timeout(timeout);
    request
}

/// UNAVAILABLE is what tonic reports when the peer cannot be connected, and what the
/// peer answers when its raft has stopped: either way, back off. Anything else is a
/// transient failure worth an immediate retry.
fn status_error(status: &Status) -> CallError {
    let msg = format!("{}: {}", status.code(), status.message());
    match status.code() {
        Code::Unavailable => CallError::Unreachable(msg),
        _ => CallError::Network(msg),
    }
}

/// What the snapshot sender's request stream reports to the sender.
#[derive(Default)]
struct Progress {
    /// Messages handed to gRPC so far (plus one when the file is exhausted).
    produced: AtomicU64,
    read_error: Mutex<Option<io::Error>>,
}

impl Progress {
    /// Resolves once no message was produced for a whole `idle` period: gRPC stopped
    /// pulling chunks (the peer or the link stalled), or the peer took longer than
    /// `idle` to install after the last one.
    async fn stalled(&self, idle: Duration) {
        let mut seen = self.produced.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(idle).await;
            let now = self.produced.load(Ordering::Relaxed);
            if now == seen {
                return;
            }
            seen = now;
        }
    }

    fn take_read_error(&self) -> Option<io::Error> {
        self.read_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// Reads a snapshot file chunk by chunk for the request stream.
struct ChunkReader {
    file: std::fs::File,
    remaining: u64,
    progress: Arc<Progress>,
}

impl ChunkReader {
    fn next_chunk(&mut self) -> Option<pb::InstallSnapshotRequest> {
        if self.remaining == 0 {
            // Counts as progress: the receiver now gets `idle` to answer.
            self.progress.produced.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let len = usize::try_from(self.remaining)
            .unwrap_or(usize::MAX)
            .min(SNAPSHOT_CHUNK_BYTES);
        let mut buf = vec![0u8; len];
        if let Err(e) = self.file.read_exact(&mut buf) {
            // Ending the stream early is safe: the receiver checks the byte count against
            // `snapshot_size` and refuses a short snapshot. The sender reports this error.
            *self
                .progress
                .read_error
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(e);
            self.remaining = 0;
            return None;
        }
        self.remaining -= len as u64;
        self.progress.produced.fetch_add(1, Ordering::Relaxed);
        Some(pb::InstallSnapshotRequest {
            chunk: Bytes::from(buf),
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests;
