//! `quantykube-raft`: how QuantyKube nodes agree on one log.
//!
//! This crate owns the openraft type configuration, the RocksDB raft log, the peer
//! network (raft RPCs, snapshot streaming, write forwarding and read index) and never
//! interprets a command: the server crate's state machine does.
//!
//! Wiring one node (the server crate does this):
//! 1. open the raft log's own RocksDB with [`open_log_database`] (moving a log an
//!    earlier build kept in the node's database there first: [`log_db::move_log`]), and
//!    build a [`LogStore`] on it;
//! 2. build one [`PeerChannels`] (with the production [`TcpDialer`] or a simulated one)
//!    and one [`ClusterGuard`] (this node's id, its cluster id and the removed ids);
//! 3. `Raft::new(id, config, PeerNetworkFactory::new(guard.clone(), channels.clone()), log_store, sm)`
//!    with the config from [`raft_config`] (a deterministic simulation runs this, and
//!    everything after it, inside [`with_seed`], which fixes the election timeouts);
//! 4. serve [`PeerService::into_service`] on the peer listener;
//! 5. hand a [`RaftClient`] to the API layer for writes and read barriers.

pub mod channels;
pub mod client;
pub mod codec;
pub mod config;
pub mod dialer;
pub mod durable;
pub mod force;
pub mod guard;
pub mod join;
pub mod log_db;
pub mod log_store;
pub mod log_tail;
mod log_writer;
pub mod metrics;
pub mod network;
pub mod pb;
pub mod peer_server;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod propose_stream;
pub mod runtime;
pub mod types;

pub use channels::{
    ClusterStamp, DialError, DialOptions, Lane, PeerChannels, StampedChannel, CLUSTER_ID_METADATA,
    MAX_PEER_MESSAGE_BYTES, MEMBER_ID_METADATA, TARGET_ID_METADATA,
};
pub use client::{RaftClient, RaftClientOptions, ReadError, WriteError};
pub use config::{raft_config, RaftConfigError};
pub use dialer::{DialFuture, Dialer, DialerError, TcpDialer};
pub use force::{force_new_cluster, ForceNewClusterError, ForcedRestart};
pub use guard::{ClusterGuard, CLUSTER_ID_MISMATCH, MEMBER_ID_MISMATCH, MEMBER_REMOVED};
pub use join::{
    fetch_cluster_members, fetch_peer_state, AwaitingBootstrap, PeerState, RemoteCluster,
    RemoteMember,
};
pub use log_db::open_log_database;
pub use log_store::{LogStore, LOG_COLUMN_FAMILIES};
pub use network::{PeerConnection, PeerNetworkFactory};
pub use peer_server::{admit_member_request, PeerService};
pub use runtime::{with_seed, RaftRuntime};
pub use types::*;
