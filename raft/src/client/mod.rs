//! The server's entry point into raft: writes that reach the leader from any node, and
//! linearizable read barriers on any node.
//!
//! This module owns [`RaftClient`] and its leader routing: which node to ask (the local
//! raft's view, or a fresher redirect from a peer) and how long to wait between
//! attempts. Writes live in `write.rs` (forwarded on the stream of `forward.rs`), read
//! barriers in `read.rs`.
//!
//! The rule it must never break: a write is retried only when it certainly was not
//! proposed (a redirect, or a dial that failed). Once a command may have reached a
//! leader's log, a failure is reported to the caller, never retried behind its back.

mod error;
mod forward;
mod read;
mod read_rounds;
mod write;

use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::error::ForwardToLeader;
use openraft::metrics::WaitError;
use openraft::storage::RaftStateMachine;
use tokio::time::Instant;

pub use self::error::{ReadError, WriteError};
use crate::channels::{PeerChannels, StampedChannel};
use crate::pb;
use crate::types::{Member, NodeId, Raft, TypeConfig};

/// Deadlines and pacing for [`RaftClient`].
#[derive(Clone, Debug)]
pub struct RaftClientOptions {
    /// How long one write or read barrier may take in total, retries included.
    pub request_timeout: Duration,
    /// Longest pause between two attempts while leadership settles.
    pub retry_interval: Duration,
}

impl RaftClientOptions {
    /// etcd's request timeout (`5s + 2 * election timeout`), and retries paced at the
    /// heartbeat interval.
    pub fn for_config(config: &openraft::Config) -> Self {
        Self {
            request_timeout: Duration::from_secs(5)
                + Duration::from_millis(config.election_timeout_min) * 2,
            retry_interval: Duration::from_millis(config.heartbeat_interval.max(10)),
        }
    }
}

impl Default for RaftClientOptions {
    fn default() -> Self {
        Self::for_config(&openraft::Config::default())
    }
}

/// Proposes commands and fences reads for one node, forwarding to the leader over the
/// peer API when this node is not the leader. Cheap to clone.
pub struct RaftClient<SM>
where
    SM: RaftStateMachine<TypeConfig>,
{
    raft: Raft<SM>,
    channels: PeerChannels,
    options: RaftClientOptions,
    /// Follower reads waiting to share one read-index request to the leader.
    read_rounds: Arc<read_rounds::ReadRounds>,
    /// The stream this node forwards its writes to the leader on.
    forwarder: forward::Forwarder,
}

impl<SM> Clone for RaftClient<SM>
where
    SM: RaftStateMachine<TypeConfig>,
{
    fn clone(&self) -> Self {
        Self {
            raft: self.raft.clone(),
            channels: self.channels.clone(),
            options: self.options.clone(),
            read_rounds: self.read_rounds.clone(),
            forwarder: self.forwarder.clone(),
        }
    }
}

/// Where to send the next attempt.
enum Route {
    Local,
    Remote(NodeId, Member),
    NoLeader,
}

/// A peer's (or the local raft's) word on who leads, fresher than local metrics.
#[derive(Clone, Debug, Default)]
struct Redirect {
    leader_id: Option<NodeId>,
    leader: Option<Member>,
}

impl From<pb::LeaderRedirect> for Redirect {
    fn from(r: pb::LeaderRedirect) -> Self {
        Self {
            leader_id: r.leader_id,
            leader: r.leader.map(Member::from),
        }
    }
}

impl From<ForwardToLeader<TypeConfig>> for Redirect {
    fn from(f: ForwardToLeader<TypeConfig>) -> Self {
        Self {
            leader_id: f.leader_id,
            leader: f.leader_node,
        }
    }
}

/// The result of one attempt at a write or a read index.
#[derive(Clone)]
enum Attempt<T, E> {
    Done(T),
    Failed(E),
    /// Certainly not acted on; try again (against `redirect`, if any) after a pause.
    /// `tried` is the node that was asked. `reason` is reported if time runs out.
    Retry {
        tried: Option<NodeId>,
        redirect: Option<Redirect>,
        reason: E,
    },
}

/// How a pause between attempts ended.
enum Pause {
    Again,
    Deadline,
    Stopped(String),
}

impl<SM> RaftClient<SM>
where
    SM: RaftStateMachine<TypeConfig>,
{
    /// `channels` should be the pool the node's [`crate::PeerNetworkFactory`] uses.
    pub fn new(raft: Raft<SM>, channels: PeerChannels, options: RaftClientOptions) -> Self {
        Self {
            raft,
            channels,
            options,
            read_rounds: Arc::default(),
            forwarder: forward::Forwarder::default(),
        }
    }

    /// The local raft handle.
    pub fn raft(&self) -> &Raft<SM> {
        &self.raft
    }

    /// A new connection to the leader's peer URL, stamped as every peer request is, for
    /// the server crate's own services on the peer port (the lease calls a member relays
    /// after authorizing their caller). Waits up to `within` for a leader with a known
    /// address. `None` if none is known by then, if this member leads (the caller
    /// answers itself), or if the dial fails: the caller answers "no leader", as for a
    /// write.
    pub async fn dial_leader(&self, within: Duration) -> Option<StampedChannel> {
        if let Pause::Deadline | Pause::Stopped(_) =
            self.wait_for_leader(Instant::now() + within).await
        {
            return None;
        }
        match self.route(None) {
            Route::Remote(leader, member) => self.channels.dial_stamped(leader, &member).await.ok(),
            Route::Local | Route::NoLeader => None,
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.options.request_timeout
    }

    fn local_id(&self) -> NodeId {
        *self.raft.node_id()
    }

    fn route(&self, redirect: Option<Redirect>) -> Route {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let (leader_id, hinted) = match redirect {
            Some(Redirect {
                leader_id: Some(id),
                leader,
            }) => (Some(id), leader),
            _ => (metrics.current_leader, None),
        };
        match leader_id {
            None => Route::NoLeader,
            Some(id) if id == metrics.id => Route::Local,
            Some(id) => match hinted.or_else(|| {
                metrics
                    .membership_config
                    .membership()
                    .get_node(&id)
                    .cloned()
            }) {
                Some(member) => Route::Remote(id, member),
                // A leader we have no address for: wait until membership catches up.
                None => Route::NoLeader,
            },
        }
    }

    /// Waits until a leader is known together with its address (a member that just
    /// joined hears from the leader before the membership naming it reaches it), or
    /// the deadline. `route` answers `NoLeader` until then, so waiting for less would
    /// spin.
    async fn wait_for_leader(&self, deadline: Instant) -> Pause {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let routable = |m: &openraft::RaftMetrics<TypeConfig>| {
            m.current_leader.is_some_and(|leader| {
                leader == m.id || m.membership_config.membership().get_node(&leader).is_some()
            })
        };
        match self
            .raft
            .wait(Some(remaining))
            .metrics(routable, "a leader with a known address")
            .await
        {
            Ok(_) => Pause::Again,
            Err(WaitError::Timeout(..)) => Pause::Deadline,
            Err(WaitError::ShuttingDown) => Pause::Stopped("raft is shutting down".to_owned()),
        }
    }

    /// Waits for leadership to move away from `tried` (up to one retry interval), and
    /// always a little, so that two nodes redirecting to each other cannot spin.
    async fn pause(&self, tried: Option<NodeId>, deadline: Instant) -> Pause {
        let started = Instant::now();
        if started >= deadline {
            return Pause::Deadline;
        }
        let wait = self.options.retry_interval.min(deadline - started);
        let changed = self
            .raft
            .wait(Some(wait))
            .metrics(
                move |m| m.current_leader.is_some() && m.current_leader != tried,
                "leader changed",
            )
            .await;
        if let Err(WaitError::ShuttingDown) = changed {
            return Pause::Stopped("raft is shutting down".to_owned());
        }
        let floor = (started + self.options.retry_interval / 8).min(deadline);
        tokio::time::sleep_until(floor).await;
        if Instant::now() >= deadline {
            Pause::Deadline
        } else {
            Pause::Again
        }
    }
}

fn with_timeout<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}
