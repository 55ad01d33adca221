//! A pool of gRPC channels to peers, one per (peer, lane), re-dialled after failures.
//!
//! This module owns connection reuse and the rule that a channel which failed or timed
//! out is thrown away, because after a partition heals an HTTP/2 connection can hang
//! forever (simulated TCP never retransmits; real TCP can take minutes to notice).
//! It must never retry a request itself: whether a retry is safe is the caller's call.
//!
//! Lanes keep different kinds of traffic on different connections, so that a
//! multi-gigabyte snapshot or a burst of forwarded writes never queues in front of a
//! heartbeat on the same TCP stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::dialer::{Dialer, DialerError, TcpDialer};
use crate::pb::peer_client::PeerClient;
use crate::types::{Member, NodeId};

/// Largest peer message, both ways. AppendEntries carries up to
/// [`crate::config::MAX_PAYLOAD_ENTRIES`] commands of up to etcd's request limit.
pub const MAX_PEER_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// What a connection is used for; each lane to a peer has its own connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Log replication, votes and leader transfer.
    Replication,
    /// The leader's heartbeats and lease probes.
    Heartbeat,
    /// Snapshot streaming.
    Snapshot,
    /// Forwarded writes and read-index requests.
    Forward,
}

/// How peers are dialled.
#[derive(Clone, Debug)]
pub struct DialOptions {
    /// Deadline of one dial, TCP and HTTP/2 handshake included.
    pub connect_timeout: Duration,
    /// HTTP/2 PING interval; a connection whose PING goes unanswered is closed.
    pub keepalive_interval: Duration,
    /// How long a PING may go unanswered.
    pub keepalive_timeout: Duration,
}

impl Default for DialOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(1),
            keepalive_interval: Duration::from_secs(5),
            keepalive_timeout: Duration::from_secs(5),
        }
    }
}

/// Why a peer could not be dialled. The request was not sent.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("member {target} has no peer URL")]
    NoPeerUrl { target: NodeId },
    #[error("member {target} has an invalid peer URL {url:?}: {source}")]
    InvalidUrl {
        target: NodeId,
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("dialling member {target} at {url} timed out after {timeout:?}")]
    Timeout {
        target: NodeId,
        url: String,
        timeout: Duration,
    },
    #[error("dialling member {target} at {url} failed: {source}")]
    Connect {
        target: NodeId,
        url: String,
        #[source]
        source: DialerError,
    },
}

/// Metadata naming the sender's cluster on every peer request, as etcd's
/// `X-Etcd-Cluster-ID` header: a peer of another cluster refuses the request.
pub const CLUSTER_ID_METADATA: &str = "x-quantykube-cluster-id";
/// Metadata naming the sending member, so that a leader refuses a removed member's
/// forwarded writes and read index requests.
pub const MEMBER_ID_METADATA: &str = "x-quantykube-member-id";
/// Metadata naming the member a request is meant for, as the `To` of etcd's raft
/// messages: whatever answers at that member's peer URL refuses a request meant for
/// another id. A replacement started on a removed member's URL is such a process.
pub const TARGET_ID_METADATA: &str = "x-quantykube-target-id";

/// The version of the peer protocol this build speaks: these services, their messages
/// and their metadata. v0.1.0 spoke 1 and stamped no version. A change that a member of
/// the previous release could not take raises it (CHANGELOG.md names each release's),
/// and a member answers only the versions from [`OLDEST_PEER_PROTOCOL`] to this one,
/// refusing the others by name, so that nothing is ever misread across releases.
pub const PEER_PROTOCOL: u32 = 1;
/// The oldest peer protocol this build still answers.
pub const OLDEST_PEER_PROTOCOL: u32 = 1;
/// Metadata naming the sender's peer protocol on every peer request; a request without
/// it is protocol 1 (v0.1.0's).
pub const PEER_PROTOCOL_METADATA: &str = "x-quantykube-peer-protocol";

type Ascii = tonic::metadata::MetadataValue<tonic::metadata::Ascii>;

/// Stamps the peer protocol, the sender's cluster id and member id, and the target's
/// member id, on each request of a channel.
#[derive(Clone, Debug, Default)]
pub struct ClusterStamp {
    sender: Option<(Ascii, Ascii)>,
    target: Option<Ascii>,
}

impl ClusterStamp {
    /// This stamp on the requests of a channel to member `target`.
    fn for_target(&self, target: NodeId) -> Self {
        ClusterStamp {
            sender: self.sender.clone(),
            target: hex_metadata(target),
        }
    }
}

fn hex_metadata(id: u64) -> Option<Ascii> {
    Ascii::try_from(format!("{id:x}")).ok()
}

impl tonic::service::Interceptor for ClusterStamp {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let metadata = request.metadata_mut();
        metadata.insert(PEER_PROTOCOL_METADATA, Ascii::from(PEER_PROTOCOL));
        if let Some((cluster, member)) = &self.sender {
            metadata.insert(CLUSTER_ID_METADATA, cluster.clone());
            metadata.insert(MEMBER_ID_METADATA, member.clone());
        }
        if let Some(target) = &self.target {
            metadata.insert(TARGET_ID_METADATA, target.clone());
        }
        Ok(request)
    }
}

/// A channel to a peer that stamps this node's cluster and member ids, and the
/// target's, on every request.
pub type StampedChannel = InterceptedService<Channel, ClusterStamp>;

/// A peer client over a pooled channel, stamping this node's cluster id.
pub(crate) type PeerRpc = PeerClient<InterceptedService<Channel, ClusterStamp>>;

/// A channel from the pool, and the generation to name when reporting it broken.
#[derive(Clone, Debug)]
pub(crate) struct PooledChannel {
    pub(crate) channel: Channel,
    generation: u64,
    stamp: ClusterStamp,
}

impl PooledChannel {
    pub(crate) fn client(&self) -> PeerRpc {
        PeerClient::with_interceptor(self.channel.clone(), self.stamp.clone())
            .max_decoding_message_size(MAX_PEER_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_PEER_MESSAGE_BYTES)
    }
}

struct Cached {
    url: String,
    pooled: PooledChannel,
}

struct Inner {
    dialer: Arc<dyn Dialer>,
    options: DialOptions,
    stamp: ClusterStamp,
    cache: Mutex<HashMap<(NodeId, Lane), Cached>>,
    next_generation: AtomicU64,
}

/// Shared by the raft network and the request forwarder of one node. Cheap to clone.
#[derive(Clone)]
pub struct PeerChannels {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PeerChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerChannels")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl PeerChannels {
    pub fn new(dialer: Arc<dyn Dialer>, options: DialOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                dialer,
                options,
                stamp: ClusterStamp::default(),
                cache: Mutex::new(HashMap::new()),
                next_generation: AtomicU64::new(1),
            }),
        }
    }

    /// Pooled channels stamp `cluster_id` and `member_id` on every request.
    pub fn with_identity(
        dialer: Arc<dyn Dialer>,
        options: DialOptions,
        cluster_id: u64,
        member_id: NodeId,
    ) -> Self {
        let channels = Self::new(dialer, options);
        let inner = Inner {
            dialer: channels.inner.dialer.clone(),
            options: channels.inner.options.clone(),
            stamp: ClusterStamp {
                sender: hex_metadata(cluster_id).zip(hex_metadata(member_id)),
                target: None,
            },
            cache: Mutex::new(HashMap::new()),
            next_generation: AtomicU64::new(1),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Real TCP with default options.
    pub fn tcp() -> Self {
        Self::new(Arc::new(TcpDialer), DialOptions::default())
    }

    /// Returns the cached channel to `target` on `lane`, dialling one if there is none
    /// or the member's peer URL changed.
    pub(crate) async fn get(
        &self,
        target: NodeId,
        member: &Member,
        lane: Lane,
    ) -> Result<PooledChannel, DialError> {
        let url = peer_url(target, member)?;
        if let Some(hit) = self.lookup(target, lane, &url) {
            return Ok(hit);
        }

        // Two callers may dial at once; the later insert wins and the other channel is
        // dropped with its connection. Rare and harmless, and no lock is held across I/O.
        let channel = self.dial(target, url.clone()).await?;
        let pooled = PooledChannel {
            channel,
            generation: self.inner.next_generation.fetch_add(1, Ordering::Relaxed),
            stamp: self.inner.stamp.for_target(target),
        };
        tracing::debug!(target_id = target, ?lane, %url, "dialled peer");
        self.lock_cache().insert(
            (target, lane),
            Cached {
                url,
                pooled: pooled.clone(),
            },
        );
        Ok(pooled)
    }

    /// A new connection to `target`'s peer URL, for a service the server crate serves on
    /// the peer port (the lease calls a member relays to its leader, after authorizing
    /// their caller itself: etcd's peer `/leases`). Stamped as every peer request is, so
    /// that a member of another cluster, or one removed, is refused. Not pooled: the
    /// caller keeps it as long as it needs it, and drops it after a failure.
    pub async fn dial_stamped(
        &self,
        target: NodeId,
        member: &Member,
    ) -> Result<StampedChannel, DialError> {
        let channel = self.dial(target, peer_url(target, member)?).await?;
        Ok(InterceptedService::new(
            channel,
            self.inner.stamp.for_target(target),
        ))
    }

    /// Dials `url`, `target`'s peer URL, within the connect timeout.
    async fn dial(&self, target: NodeId, url: String) -> Result<Channel, DialError> {
        let options = &self.inner.options;
        let endpoint = Endpoint::from_shared(url.clone())
            .map_err(|source| DialError::InvalidUrl {
                target,
                url: url.clone(),
                source,
            })?
            .connect_timeout(options.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(options.keepalive_interval)
            .keep_alive_timeout(options.keepalive_timeout)
            .keep_alive_while_idle(true);
        match tokio::time::timeout(options.connect_timeout, self.inner.dialer.dial(endpoint)).await
        {
            Err(_) => Err(DialError::Timeout {
                target,
                url,
                timeout: options.connect_timeout,
            }),
            Ok(Err(source)) => Err(DialError::Connect {
                target,
                url,
                source,
            }),
            Ok(Ok(channel)) => Ok(channel),
        }
    }

    /// Drops the cached channel if it is still `broken`, so that the next request dials
    /// a fresh connection instead of waiting on a dead one.
    pub(crate) fn discard(&self, target: NodeId, lane: Lane, broken: &PooledChannel) {
        let mut cache = self.lock_cache();
        if cache
            .get(&(target, lane))
            .is_some_and(|c| c.pooled.generation == broken.generation)
        {
            cache.remove(&(target, lane));
            tracing::debug!(target_id = target, ?lane, "discarded peer channel");
        }
    }

    fn lookup(&self, target: NodeId, lane: Lane, url: &str) -> Option<PooledChannel> {
        let cache = self.lock_cache();
        cache
            .get(&(target, lane))
            .filter(|c| c.url == url)
            .map(|c| c.pooled.clone())
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<(NodeId, Lane), Cached>> {
        // The map holds no invariant a panicking holder could break; keep serving.
        self.inner
            .cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The URL a member's peers dial: its first peer URL.
fn peer_url(target: NodeId, member: &Member) -> Result<String, DialError> {
    member
        .peer_urls
        .first()
        .cloned()
        .ok_or(DialError::NoPeerUrl { target })
}

/// True when `status` reports that the connection could not be (re)established, so the
/// request never left this node.
pub(crate) fn is_connect_failure(status: &tonic::Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(err) = source {
        if err.downcast_ref::<tonic::ConnectError>().is_some() {
            return true;
        }
        source = err.source();
    }
    false
}
